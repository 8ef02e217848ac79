// Shared-memory slabs: a named POSIX shared-memory object under /dev/shm that any number of
// processes on one machine fill and read concurrently, without copies and without locks.
// Torch-free. Layout and guarantees: docs/shm-cache.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "traincache/base/choices.h"
#include "traincache/base/dtype.h"
#include "traincache/base/format.h"

namespace traincache::slab {

/// Object names are "<prefix><name>" in the shm directory. The prefix is "traincache-" unless the
/// TRAINCACHE_SHM_PREFIX environment variable says otherwise (tests use their own); a prefix that
/// is not 1-64 of [A-Za-z0-9._-] (a path, "..") -> Error(usage).
std::string object_prefix();

/// The directory of POSIX shared memory ("/dev/shm").
std::string shm_dir();

/// Throws Error(usage) unless `name` is 1-200 characters of [A-Za-z0-9._-] and not "." or "..".
void validate_name(const std::string& name);

/// Item layout.
enum class Layout : uint32_t { fixed = 0, variable = 1 };

/// Which dataset indices are cacheable.
enum class Selection : uint32_t { first = 0, hashed = 1 };

/// "first", "hashed".
const Choices<Selection>& selection_choices();

/// State of one slot. A slot goes EMPTY -> WRITING -> FILLED; a writer that dies leaves WRITING,
/// which readers treat as a miss and repair() returns to EMPTY. Any other stored value is reported
/// as `invalid` (a corrupt slab): readers treat it as a miss, repair() resets it.
enum class SlotState : uint32_t { empty = 0, writing = 1, filled = 2, invalid = 255 };

/// "empty", "writing", "filled" or "invalid".
const char* state_name(SlotState s);

/// How to create a slab.
struct CreateOptions {
  std::string name;
  uint64_t length = 0;  ///< dataset length (indices [0, length))
  Layout layout = Layout::fixed;
  DType dtype = DType::u8;     ///< element type (fixed and variable)
  std::vector<uint64_t> dims;  ///< item shape (fixed layout)
  uint64_t limit_bytes = 0;    ///< byte budget for the data (slots derived from it), or
  uint64_t slots = 0;          ///< the number of cacheable items
  Selection selection = Selection::first;
  uint64_t seed = 0;       ///< for Selection::hashed
  unsigned mode = 0600;    ///< permission bits of the object
  std::string content_id;  ///< what the slab is meant to hold (<= 127 bytes), checked by users
  bool temporary = false;  ///< removed by its creator when done; `rm --stale` removes it
                           ///< once the creator has died
  std::string tool;        ///< creating tool, shown in listings ("smart-bench")
};

/// What a slab holds (read from its header).
struct SlabInfo {
  std::string name;
  std::string path;
  Layout layout = Layout::fixed;
  DType dtype = DType::u8;
  std::vector<uint64_t> dims;
  uint64_t length = 0, slots = 0;
  uint64_t item_bytes = 0;                                                        ///< fixed layout: bytes per item
  uint64_t arena_bytes = 0, arena_used = 0;                                       ///< variable layout
  uint64_t total_bytes = 0;                                                       ///< size of the object
  uint64_t map_offset = 0, states_offset = 0, index_offset = 0, data_offset = 0;  ///< regions
  Selection selection = Selection::first;
  uint64_t seed = 0;
  int64_t created_unix = 0;
  std::string creator;
  unsigned mode = 0;
  unsigned uid = 0;        ///< owner of the object
  std::string content_id;  ///< as given at creation ("" when none)
  bool temporary = false;
  int64_t creator_pid = 0;  ///< 0 for slabs made before it was recorded
  std::string creator_host;
  std::optional<std::string> sealed_digest;  ///< digest of the data when sealed
};

/// Counts of slot states.
struct SlotCounts {
  uint64_t empty = 0, writing = 0, filled = 0, invalid = 0;
  uint64_t filled_bytes = 0;
};

/// Size and free space of the shm directory.
struct FsSpace {
  uint64_t total = 0, free = 0;
};
FsSpace shm_space();

/// A mapped slab. Move-only; unmaps on destruction (the object stays until remove()).
class Slab {
 public:
  /// The on-memory header at offset 0 (layout in docs/shm-cache.md; defined in shm_slab.cpp).
  struct Header;

  /// Creates a slab. Checks free space first (Error(cant_create) when it would not fit) and never
  /// touches the data pages, so creation is fast for any size. Existing name -> Error(cant_create).
  static Slab create(const CreateOptions& opts);
  /// Attaches to an existing slab, validating the header against the object's size before
  /// trusting any offset. Missing -> Error(unavailable); foreign or corrupt -> Error(data).
  static Slab attach(const std::string& name, bool writable = true);

  Slab(Slab&& o) noexcept;
  Slab& operator=(Slab&& o) noexcept;
  Slab(const Slab&) = delete;
  Slab& operator=(const Slab&) = delete;
  ~Slab();

  /// The header's description.
  SlabInfo info() const;

  /// The object's file descriptor, owned by the slab (another mapping of the same object: the C ABI).
  int fd() const { return fd_; }
  /// Start of the mapping: the offsets of begin_write() count from here.
  const void* base() const { return base_; }
  /// The slab's name (without the prefix).
  const std::string& name() const { return name_; }

  /// The slot of dataset index `index`, or nullopt when it is not cacheable (or out of range).
  std::optional<uint64_t> slot_of(uint64_t index) const;

  /// State of the slot of `index` (empty for non-cacheable indices).
  SlotState state(uint64_t index) const;

  /// Stores an item: begin_write(), a copy, commit(). A no-op returning false when the index is not
  /// cacheable, the slot is not empty (filled, or being written by someone else), the size is
  /// wrong (fixed layout) or the arena is full (variable layout). Data is published with release
  /// ordering.
  bool set(uint64_t index, const void* data, std::size_t bytes);

  /// The first half of set(), for writers that fill the item in place (the C ABI, Python): claims
  /// the slot of `index` (EMPTY -> WRITING with this process's pid, one compare-and-swap) and, in a
  /// variable layout, reserves `bytes` in the arena. Returns the offset of the item's bytes from
  /// the start of the object, or nullopt where set() would be a no-op (then nothing is claimed).
  /// Until commit() or abort(), readers see a miss; if the process dies, repair() frees the slot.
  std::optional<uint64_t> begin_write(uint64_t index, std::size_t bytes);
  /// Publishes a slot this process claimed with begin_write() (WRITING by this pid -> FILLED,
  /// release ordering). False, changing nothing, when the slot is not WRITING by this process.
  bool commit(uint64_t index);
  /// Gives back a slot this process claimed (WRITING by this pid -> EMPTY); false, changing
  /// nothing, otherwise. Arena bytes reserved for it are not reused.
  bool abort(uint64_t index);

  /// A zero-copy view of a filled item, or an empty view for a miss (any other state).
  struct View {
    const void* data = nullptr;
    std::size_t bytes = 0;
    explicit operator bool() const { return data != nullptr; }
  };
  View view(uint64_t index) const;

  /// Tagged slots (the SmartCache window, fixed layout): slot `index` holds one item at a time and
  /// its FILLED state word carries `tag` (1 .. 2^56-1) in its upper bits, so that an item can be
  /// replaced by a later one in place. Stores the item when the slot is empty or filled with a
  /// smaller tag (an item the window has left); false otherwise (filled with `tag` or a later one,
  /// being written, wrong size, not cacheable).
  bool set_tagged(uint64_t index, uint64_t tag, const void* data, std::size_t bytes);
  /// Copies slot `index` into `out` (item_bytes) when it is filled with `tag`; false otherwise.
  /// A replacement racing with the copy is detected (the state word is read again after it): the
  /// copy then counts as a miss, never as torn data.
  bool read_tagged(uint64_t index, uint64_t tag, void* out) const;
  /// The tag of a filled slot (0 for an untagged item or any other state).
  uint64_t tag(uint64_t index) const;

  /// Start of the item region of a fixed layout: slot i at items() + i * item_bytes. With the
  /// first-N selection, slot i holds index i, so a full slab is one contiguous [slots, dims] array.
  const void* items() const;

  /// Copies a filled item into `out` (resized); false for a miss.
  bool get(uint64_t index, std::vector<unsigned char>& out) const;

  /// Returns WRITING slots whose writer process no longer exists, and slots in an invalid state,
  /// to EMPTY; returns how many.
  uint64_t repair();

  /// XXH3-128 of the data region (hex), for sealing a filled slab and checking it later.
  std::string data_digest() const;
  /// Records `digest` as the digest of the complete data; later users compare data_digest() with it.
  void seal(const std::string& digest);

  /// Checks that the object still has the size it had when mapped (a truncated object would kill
  /// readers with SIGBUS); Error(io) naming the slab otherwise. Call before long reads.
  void check_size() const;

  /// Per-state counts (a scan of the state array).
  SlotCounts counts() const;

 private:
  Slab() = default;
  Header* header() const;
  uint64_t* states() const;  ///< the state word of every slot
  bool claim(uint64_t slot);
  bool release_claim(uint64_t index, uint64_t to);  ///< WRITING by this pid -> `to`
  void* slot_data(uint64_t slot) const;

  std::string name_;
  int fd_ = -1;
  void* base_ = nullptr;
  std::size_t size_ = 0;
  bool writable_ = false;
};

/// Names (without prefix) of every slab in the shm directory with this process's prefix (regular
/// files only: a directory or link carrying the prefix is not listed).
std::vector<std::string> list_slabs();

/// Bytes of memory a slab's object occupies now (pages touched so far), 0 when missing.
uint64_t resident_bytes(const std::string& name);

/// Removes a slab's object. Missing -> Error(unavailable).
void remove_slab(const std::string& name);

/// Names of temporary slabs whose creating process has died on this host (orphans).
std::vector<std::string> stale_slabs();

/// Installs a SIGBUS handler: a bus error inside a mapped slab (its object was truncated under us)
/// prints "<tool>: error: <slab>: ..." and exits 74; any other bus error keeps the default action.
void install_sigbus_handler(const std::string& tool);

/// Parses "2GiB", "512MiB", "1000000" (bytes), "1.5G"; throws Error(usage).
uint64_t parse_size(const std::string& s);

}  // namespace traincache::slab
