#include "traincache/slab/shm_slab.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <numeric>
#include <random>

#include "traincache/base/content_hash.h"
#include "traincache/base/error.h"
#include "traincache/base/files.h"

namespace traincache::slab {

namespace {

constexpr char kMagic[8] = {'T', 'C', 'S', 'L', 'A', 'B', '\0', '\1'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kHeaderBytes = 4096;
constexpr uint64_t kAlign = 64;
constexpr int kMaxDims = 8;

uint64_t align_up(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// State word of a slot: low 8 bits the SlotState, the rest the writer's pid while WRITING.
uint64_t word(SlotState s, uint64_t pid = 0) { return static_cast<uint64_t>(s) | (pid << 8); }
SlotState state_of(uint64_t w) {
  uint64_t v = w & 0xff;
  return v <= 2 ? static_cast<SlotState>(v) : SlotState::invalid;
}

constexpr uint32_t kFlagTemporary = 1;

// Mapped slabs, for the SIGBUS handler: a fixed table written with atomics (signal-safe reads).
struct Mapping {
  std::atomic<const char*> base{nullptr};
  std::atomic<std::size_t> size{0};
  char name[224] = "";
};
Mapping g_mappings[64];
char g_tool[64] = "traincache";

void register_mapping(const void* base, std::size_t size, const std::string& name) {
  for (auto& m : g_mappings) {
    const char* expected = nullptr;
    // Claim a free entry by storing a placeholder, then fill it and publish the real base.
    static const char placeholder = 0;
    if (!m.base.compare_exchange_strong(expected, &placeholder)) continue;
    std::snprintf(m.name, sizeof m.name, "%s", name.c_str());
    m.size.store(size);
    m.base.store(static_cast<const char*>(base), std::memory_order_release);
    return;
  }
}

void unregister_mapping(const void* base) {
  for (auto& m : g_mappings)
    if (m.base.load() == base) {
      m.size.store(0);
      m.base.store(nullptr, std::memory_order_release);
      return;
    }
}

void write_str(const char* s) {
  if (::write(2, s, strlen(s)) < 0) {
    // nothing more can be said from a signal handler
  }
}

void on_sigbus(int sig, siginfo_t* si, void*) {
  const char* addr = static_cast<const char*>(si->si_addr);
  for (auto& m : g_mappings) {
    const char* base = m.base.load(std::memory_order_acquire);
    std::size_t size = m.size.load();
    if (base && size && addr >= base && addr < base + size) {
      write_str(g_tool);
      write_str(": error: ");
      write_str(m.name);
      write_str(": the slab was truncated while in use (bus error reading it); remove and recreate it\n");
      _exit(74);
    }
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

bool mul_ok(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }
bool add_ok(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }

}  // namespace

// The on-memory header, at offset 0 of the object (docs/shm-cache.md).
struct Slab::Header {
  char magic[8];
  uint32_t version;
  uint32_t layout;
  uint32_t dtype;
  uint32_t ndims;
  uint64_t dims[kMaxDims];
  uint64_t length;
  uint64_t slots;
  uint64_t item_bytes;
  uint64_t arena_bytes;
  uint64_t arena_used;  // atomic (GCC builtins): bump pointer of the variable layout
  uint32_t selection;
  uint32_t mode;
  uint64_t seed;
  int64_t created_unix;
  char creator[128];
  uint64_t map_offset;     // hashed selection: int64 slot per dataset index (-1: not cacheable)
  uint64_t states_offset;  // uint64 state word per slot
  uint64_t index_offset;   // variable layout: {offset, length} per slot, relative to data_offset
  uint64_t data_offset;
  uint64_t total_bytes;
  // Later fields, in the header page's reserved bytes (zero in slabs made before them).
  char content_id[128];  // what the slab holds, as its creator said
  uint64_t sealed;       // 1 once data_digest holds the digest of the complete data
  char data_digest[40];  // hex XXH3-128 of the data region, NUL-terminated
  int64_t creator_pid;
  uint32_t flags;  // kFlagTemporary
  uint32_t reserved0;
  char creator_host[64];
};
static_assert(sizeof(Slab::Header) <= kHeaderBytes, "header must fit its page");
// The header's field offsets and the element type codes are part of the format (docs/shm-cache.md,
// "On-memory layout"): readers in other languages rely on them.
static_assert(offsetof(Slab::Header, dtype) == 16 && offsetof(Slab::Header, dims) == 24 &&
                  offsetof(Slab::Header, length) == 88 && offsetof(Slab::Header, selection) == 128 &&
                  offsetof(Slab::Header, creator) == 152 && offsetof(Slab::Header, map_offset) == 280 &&
                  offsetof(Slab::Header, total_bytes) == 312 && offsetof(Slab::Header, content_id) == 320 &&
                  offsetof(Slab::Header, sealed) == 448 && offsetof(Slab::Header, creator_pid) == 496 &&
                  offsetof(Slab::Header, flags) == 504 && offsetof(Slab::Header, creator_host) == 512,
              "slab header layout changed: that is a new format version");
static_assert(static_cast<int>(DType::u8) == 0 && static_cast<int>(DType::i64) == 7 &&
                  static_cast<int>(DType::f16) == 8 && static_cast<int>(DType::f32) == 9 &&
                  static_cast<int>(DType::f64) == 10 && static_cast<int>(DType::string) == 11,
              "dtype codes are stored in slab headers and must not change");

namespace {

// Offsets of every region for a header's sizes; false on overflow.
bool compute_layout(Slab::Header& h) {
  uint64_t off = kHeaderBytes, n = 0;
  h.map_offset = 0;
  if (h.selection == static_cast<uint32_t>(Selection::hashed)) {
    h.map_offset = off;
    if (!mul_ok(h.length, 8, &n) || !add_ok(off, n, &off)) return false;
    off = align_up(off);
  }
  h.states_offset = off;
  if (!mul_ok(h.slots, 8, &n) || !add_ok(off, n, &off)) return false;
  off = align_up(off);
  h.index_offset = 0;
  if (h.layout == static_cast<uint32_t>(Layout::variable)) {
    h.index_offset = off;
    if (!mul_ok(h.slots, 16, &n) || !add_ok(off, n, &off)) return false;
    off = align_up(off);
  }
  h.data_offset = off;
  uint64_t data = 0;
  if (h.layout == static_cast<uint32_t>(Layout::fixed)) {
    if (!mul_ok(h.slots, h.item_bytes, &data)) return false;
  } else {
    data = h.arena_bytes;
  }
  if (!add_ok(off, data, &off)) return false;
  h.total_bytes = std::max<uint64_t>(off, kHeaderBytes);
  return true;
}

std::string path_of(const std::string& name) { return shm_dir() + "/" + object_prefix() + name; }

std::string creator_text(const std::string& tool) {
  char host[64] = "";
  gethostname(host, sizeof host - 1);
  const char* user = std::getenv("USER");
  return std::string(user ? user : "uid" + std::to_string(getuid())) + "@" + host + " pid " + std::to_string(getpid()) +
         (tool.empty() ? "" : " (" + tool + ")");
}

// A new slab's header from the options, checked: its geometry, its sizes and its regions' offsets.
Slab::Header new_header(const CreateOptions& o) {
  validate_name(o.name);
  if (o.length == 0) throw Error(Exit::usage, "--len", "the dataset length must be positive");
  if (dtype_size(o.dtype) == 0) throw Error(Exit::usage, "--dtype", "a numeric dtype is required");
  Slab::Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.layout = static_cast<uint32_t>(o.layout);
  h.dtype = static_cast<uint32_t>(o.dtype);
  h.length = o.length;
  h.selection = static_cast<uint32_t>(o.selection);
  h.seed = o.seed;
  h.mode = o.mode & 0777;
  h.created_unix = static_cast<int64_t>(std::time(nullptr));
  std::snprintf(h.creator, sizeof h.creator, "%s", creator_text(o.tool).c_str());
  if (o.content_id.size() >= sizeof h.content_id)
    throw Error(Exit::usage, o.name, "content id longer than " + std::to_string(sizeof h.content_id - 1) + " bytes");
  std::snprintf(h.content_id, sizeof h.content_id, "%s", o.content_id.c_str());
  h.creator_pid = getpid();
  h.flags = o.temporary ? kFlagTemporary : 0;
  gethostname(h.creator_host, sizeof h.creator_host - 1);
  if (o.layout == Layout::fixed) {
    if (o.dims.empty() || o.dims.size() > kMaxDims)
      throw Error(Exit::usage, "--dims", "a fixed layout needs 1 to 8 item dimensions");
    h.ndims = static_cast<uint32_t>(o.dims.size());
    h.item_bytes = dtype_size(o.dtype);
    for (std::size_t i = 0; i < o.dims.size(); ++i) {
      if (o.dims[i] == 0 || !mul_ok(h.item_bytes, o.dims[i], &h.item_bytes))
        throw Error(Exit::usage, "--dims", "item dimensions must be positive and fit 64 bits");
      h.dims[i] = o.dims[i];
    }
    if ((o.limit_bytes > 0) == (o.slots > 0))
      throw Error(Exit::usage, "--limit", "give exactly one of --limit and --slots");
    h.slots = std::min<uint64_t>(o.length, o.slots > 0 ? o.slots : o.limit_bytes / h.item_bytes);
    if (h.slots == 0) throw Error(Exit::usage, "--limit", "the budget holds no item of " + format_size(h.item_bytes));
  } else {
    if (o.limit_bytes == 0) throw Error(Exit::usage, "--limit", "a variable layout needs --limit (its arena)");
    h.ndims = 0;
    h.arena_bytes = o.limit_bytes;
    h.slots = o.slots > 0 ? std::min(o.slots, o.length) : o.length;
  }
  if (!compute_layout(h)) throw Error(Exit::usage, "--limit", "the slab size does not fit 64 bits");
  return h;
}

// --selection hashed: a seeded choice of `slots` of the `length` indices (partial Fisher-Yates),
// written into the slab at `base` as index -> slot (-1: the index has none).
void write_slot_map(void* base, const Slab::Header& h, uint64_t seed) {
  auto* map = reinterpret_cast<int64_t*>(static_cast<char*>(base) + h.map_offset);
  std::vector<uint64_t> order(h.length);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  for (uint64_t i = 0; i < h.slots; ++i) {
    std::uniform_int_distribution<uint64_t> pick(i, h.length - 1);
    std::swap(order[i], order[pick(rng)]);
  }
  std::fill(map, map + h.length, -1);
  std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(h.slots));
  for (uint64_t i = 0; i < h.slots; ++i) map[order[i]] = static_cast<int64_t>(i);
}

}  // namespace

std::string object_prefix() {
  const char* p = std::getenv("TRAINCACHE_SHM_PREFIX");
  std::string prefix = p && *p ? p : "traincache-";
  if (prefix.size() > 64 || prefix == "." || prefix == ".." || prefix[0] == '.' ||
      prefix.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") !=
          std::string::npos)
    throw Error(Exit::usage, "TRAINCACHE_SHM_PREFIX",
                "invalid prefix '" + prefix + "' (use 1-64 of A-Z a-z 0-9 . _ -, not starting with '.')");
  return prefix;
}

const Choices<Selection>& selection_choices() {
  static const Choices<Selection> c{{Selection::first, "first"}, {Selection::hashed, "hashed"}};
  return c;
}

const char* state_name(SlotState s) {
  switch (s) {
    case SlotState::empty:
      return "empty";
    case SlotState::writing:
      return "writing";
    case SlotState::filled:
      return "filled";
    default:
      return "invalid";
  }
}

std::string shm_dir() { return "/dev/shm"; }

void validate_name(const std::string& name) {
  if (name.empty() || name.size() > 200 || name == "." || name == ".." ||
      name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != std::string::npos)
    throw Error(Exit::usage, "'" + name + "'", "invalid slab name (use 1-200 of A-Z a-z 0-9 . _ -)");
}

FsSpace shm_space() {
  struct statvfs sv;
  if (statvfs(shm_dir().c_str(), &sv) != 0) throw Error(Exit::unavailable, shm_dir(), errno_text(errno));
  return {static_cast<uint64_t>(sv.f_blocks) * sv.f_frsize, static_cast<uint64_t>(sv.f_bavail) * sv.f_frsize};
}

Slab::Header* Slab::header() const { return static_cast<Header*>(base_); }

uint64_t* Slab::states() const {
  return reinterpret_cast<uint64_t*>(static_cast<char*>(base_) + header()->states_offset);
}

Slab Slab::create(const CreateOptions& o) {
  const Header h = new_header(o);

  FsSpace space = shm_space();
  if (h.total_bytes > space.free)
    throw Error(
        Exit::cant_create, o.name,
        "needs " + format_size(h.total_bytes) + " but " + shm_dir() + " has " + format_size(space.free) + " free");

  // Build under a temporary name, then link it into place: nobody attaches to a half-made slab.
  std::string final_path = path_of(o.name);
  std::string tmp = files::unpredictable_name(final_path);
  struct stat st;
  if (stat(final_path.c_str(), &st) == 0) throw Error(Exit::cant_create, o.name, "a slab with this name exists");
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw Error(Exit::cant_create, tmp, errno_text(errno));
  auto fail = [&](Exit code, const std::string& what) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(code, o.name, what + ": " + errno_text(err));
  };
  if (fchmod(fd, h.mode) != 0) fail(Exit::cant_create, "cannot set permissions");
  if (ftruncate(fd, static_cast<off_t>(h.total_bytes)) != 0) fail(Exit::cant_create, "cannot size the object");
  Slab s;
  s.name_ = o.name;
  s.fd_ = fd;
  s.size_ = h.total_bytes;
  s.writable_ = true;
  s.base_ = mmap(nullptr, s.size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (s.base_ == MAP_FAILED) {
    s.base_ = nullptr;
    s.fd_ = -1;
    fail(Exit::cant_create, "cannot map the object");
  }
  std::memcpy(s.base_, &h, sizeof h);
  if (o.selection == Selection::hashed) write_slot_map(s.base_, h, o.seed);
  if (::link(tmp.c_str(), final_path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw Error(Exit::cant_create, o.name, err == EEXIST ? "a slab with this name exists" : errno_text(err));
  }
  ::unlink(tmp.c_str());
  register_mapping(s.base_, s.size_, o.name);
  return s;
}

Slab Slab::attach(const std::string& name, bool writable) {
  validate_name(name);
  std::string path = path_of(name);
  // Never blocking: /dev/shm is writable by everyone, and a FIFO planted at a slab's name would
  // otherwise hang every reader of that name.
  int fd = ::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) throw Error(Exit::unavailable, name, "no such slab in " + shm_dir());
    throw Error(Exit::no_input, name, errno_text(errno));
  }
  Slab s;
  s.name_ = name;
  s.fd_ = fd;
  s.writable_ = writable;
  struct stat st;
  if (fstat(fd, &st) != 0) throw Error(Exit::io, name, errno_text(errno));
  if (S_ISDIR(st.st_mode)) throw Error(Exit::data, name, "not a traincache slab (" + path + " is a directory)");
  if (!S_ISREG(st.st_mode))
    throw Error(Exit::data, name, "not a traincache slab (" + path + " is " + files::file_kind(st.st_mode) + ")");
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (static_cast<uint64_t>(st.st_size) < kHeaderBytes)
    throw Error(Exit::data, name, "not a traincache slab (too small for a header)");
  Header h;
  if (pread(fd, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h)) throw Error(Exit::io, name, errno_text(errno));
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
    throw Error(Exit::data, name, "not a traincache slab (bad magic)");
  if (h.version != kVersion)
    throw Error(Exit::data, name, "slab format version " + std::to_string(h.version) + " is not supported");
  Header want = h;
  bool sane = h.layout <= 1 && h.selection <= 1 && h.ndims <= kMaxDims && h.slots <= h.length &&
              dtype_size(static_cast<DType>(h.dtype)) > 0 && h.dtype < static_cast<uint32_t>(DType::string) &&
              compute_layout(want);
  if (sane && h.layout == static_cast<uint32_t>(Layout::fixed)) {
    uint64_t item = dtype_size(static_cast<DType>(h.dtype));
    for (uint32_t i = 0; i < h.ndims && sane; ++i) sane = h.dims[i] > 0 && mul_ok(item, h.dims[i], &item);
    sane = sane && h.ndims > 0 && item == h.item_bytes;
  }
  sane = sane && want.map_offset == h.map_offset && want.states_offset == h.states_offset &&
         want.index_offset == h.index_offset && want.data_offset == h.data_offset &&
         want.total_bytes == h.total_bytes && h.total_bytes == static_cast<uint64_t>(st.st_size);
  if (!sane) throw Error(Exit::data, name, "corrupt slab header (sizes and offsets do not match the object)");
  s.size_ = h.total_bytes;
  s.base_ = mmap(nullptr, s.size_, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  if (s.base_ == MAP_FAILED) {
    s.base_ = nullptr;
    throw Error(Exit::io, name, "cannot map: " + errno_text(errno));
  }
  register_mapping(s.base_, s.size_, name);
  return s;
}

Slab::Slab(Slab&& o) noexcept
    : name_(std::move(o.name_)), fd_(o.fd_), base_(o.base_), size_(o.size_), writable_(o.writable_) {
  o.fd_ = -1;
  o.base_ = nullptr;
}

Slab& Slab::operator=(Slab&& o) noexcept {
  Slab moved(std::move(o));
  std::swap(name_, moved.name_);
  std::swap(fd_, moved.fd_);
  std::swap(base_, moved.base_);
  std::swap(size_, moved.size_);
  std::swap(writable_, moved.writable_);
  return *this;  // `moved` now holds (and releases) what this slab had
}

Slab::~Slab() {
  if (base_) {
    unregister_mapping(base_);
    munmap(base_, size_);
  }
  if (fd_ >= 0) ::close(fd_);
}

SlabInfo Slab::info() const {
  const Header& h = *header();
  SlabInfo i;
  i.name = name_;
  i.path = path_of(name_);
  i.layout = static_cast<Layout>(h.layout);
  i.dtype = static_cast<DType>(h.dtype);
  i.dims.assign(h.dims, h.dims + h.ndims);
  i.length = h.length;
  i.slots = h.slots;
  i.item_bytes = h.item_bytes;
  i.arena_bytes = h.arena_bytes;
  i.arena_used = std::min(__atomic_load_n(&header()->arena_used, __ATOMIC_ACQUIRE), h.arena_bytes);
  i.total_bytes = h.total_bytes;
  i.map_offset = h.map_offset;
  i.states_offset = h.states_offset;
  i.index_offset = h.index_offset;
  i.data_offset = h.data_offset;
  i.selection = static_cast<Selection>(h.selection);
  i.seed = h.seed;
  i.created_unix = h.created_unix;
  i.creator.assign(h.creator, strnlen(h.creator, sizeof h.creator));
  struct stat st;
  if (fstat(fd_, &st) == 0) {
    i.mode = st.st_mode & 0777;
    i.uid = st.st_uid;
  }
  i.content_id.assign(h.content_id, strnlen(h.content_id, sizeof h.content_id));
  i.temporary = (h.flags & kFlagTemporary) != 0;
  i.creator_pid = h.creator_pid;
  i.creator_host.assign(h.creator_host, strnlen(h.creator_host, sizeof h.creator_host));
  if (__atomic_load_n(&header()->sealed, __ATOMIC_ACQUIRE) == 1)
    i.sealed_digest = std::string(h.data_digest, strnlen(h.data_digest, sizeof h.data_digest));
  return i;
}

std::optional<uint64_t> Slab::slot_of(uint64_t index) const {
  const Header& h = *header();
  if (index >= h.length) return std::nullopt;
  if (h.selection == static_cast<uint32_t>(Selection::hashed)) {
    int64_t s = reinterpret_cast<const int64_t*>(static_cast<const char*>(base_) + h.map_offset)[index];
    if (s < 0 || static_cast<uint64_t>(s) >= h.slots) return std::nullopt;
    return static_cast<uint64_t>(s);
  }
  if (index >= h.slots) return std::nullopt;
  return index;
}

SlotState Slab::state(uint64_t index) const {
  auto slot = slot_of(index);
  if (!slot) return SlotState::empty;
  auto* st = states();
  return state_of(__atomic_load_n(&st[*slot], __ATOMIC_ACQUIRE));
}

bool Slab::claim(uint64_t slot) {
  auto* st = states();
  uint64_t expected = word(SlotState::empty);
  return __atomic_compare_exchange_n(&st[slot], &expected, word(SlotState::writing, static_cast<uint64_t>(getpid())),
                                     false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

void* Slab::slot_data(uint64_t slot) const {
  const Header& h = *header();
  char* data = static_cast<char*>(base_) + h.data_offset;
  if (h.layout == static_cast<uint32_t>(Layout::fixed)) return data + slot * h.item_bytes;
  auto* idx = reinterpret_cast<uint64_t*>(static_cast<char*>(base_) + h.index_offset);
  return data + idx[2 * slot];
}

std::optional<uint64_t> Slab::begin_write(uint64_t index, std::size_t bytes) {
  if (!writable_) throw Error(Exit::usage, name_, "attached read-only");
  const Header& h = *header();
  auto slot = slot_of(index);
  if (!slot) return std::nullopt;
  if (h.layout == static_cast<uint32_t>(Layout::fixed) && bytes != h.item_bytes) return std::nullopt;
  if (!claim(*slot)) return std::nullopt;
  if (h.layout == static_cast<uint32_t>(Layout::fixed))
    return static_cast<uint64_t>(static_cast<char*>(slot_data(*slot)) - static_cast<char*>(base_));
  // Bump allocation that never moves past the end, so a later, smaller item can still fit.
  uint64_t offset = __atomic_load_n(&header()->arena_used, __ATOMIC_ACQUIRE);
  bool fits;
  do {
    fits = bytes <= h.arena_bytes && offset <= h.arena_bytes - bytes;
  } while (fits && !__atomic_compare_exchange_n(&header()->arena_used, &offset, offset + bytes, true, __ATOMIC_ACQ_REL,
                                                __ATOMIC_ACQUIRE));
  if (!fits) {
    // The arena is full: give the slot back.
    __atomic_store_n(&states()[*slot], word(SlotState::empty), __ATOMIC_RELEASE);
    return std::nullopt;
  }
  auto* idx = reinterpret_cast<uint64_t*>(static_cast<char*>(base_) + h.index_offset);
  idx[2 * *slot] = offset;
  idx[2 * *slot + 1] = bytes;
  return h.data_offset + offset;
}

bool Slab::release_claim(uint64_t index, uint64_t to) {
  if (!writable_) throw Error(Exit::usage, name_, "attached read-only");
  auto slot = slot_of(index);
  if (!slot) return false;
  uint64_t expected = word(SlotState::writing, static_cast<uint64_t>(getpid()));
  return __atomic_compare_exchange_n(&states()[*slot], &expected, to, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

bool Slab::commit(uint64_t index) { return release_claim(index, word(SlotState::filled)); }

bool Slab::abort(uint64_t index) { return release_claim(index, word(SlotState::empty)); }

bool Slab::set(uint64_t index, const void* data, std::size_t bytes) {
  auto offset = begin_write(index, bytes);
  if (!offset) return false;
  std::memcpy(static_cast<char*>(base_) + *offset, data, bytes);
  return commit(index);
}

bool Slab::set_tagged(uint64_t index, uint64_t tag, const void* data, std::size_t bytes) {
  if (!writable_) throw Error(Exit::usage, name_, "attached read-only");
  const Header& h = *header();
  auto slot = slot_of(index);
  if (!slot || h.layout != static_cast<uint32_t>(Layout::fixed) || bytes != h.item_bytes || tag == 0 ||
      tag >= (uint64_t{1} << 56))
    return false;
  auto* st = states();
  uint64_t w = __atomic_load_n(&st[*slot], __ATOMIC_ACQUIRE);
  do {
    const SlotState s = state_of(w);
    if (s != SlotState::empty && !(s == SlotState::filled && (w >> 8) < tag)) return false;
  } while (!__atomic_compare_exchange_n(&st[*slot], &w, word(SlotState::writing, static_cast<uint64_t>(getpid())),
                                        false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
  // Readers copying the old item see the state change before any of the new bytes (seqlock).
  __atomic_thread_fence(__ATOMIC_RELEASE);
  std::memcpy(slot_data(*slot), data, bytes);
  __atomic_store_n(&st[*slot], word(SlotState::filled, tag), __ATOMIC_RELEASE);
  return true;
}

bool Slab::read_tagged(uint64_t index, uint64_t tag, void* out) const {
  const Header& h = *header();
  auto slot = slot_of(index);
  if (!slot || h.layout != static_cast<uint32_t>(Layout::fixed) || tag == 0) return false;
  const auto* st = states();
  const uint64_t want = word(SlotState::filled, tag);
  if (__atomic_load_n(&st[*slot], __ATOMIC_ACQUIRE) != want) return false;
  std::memcpy(out, slot_data(*slot), h.item_bytes);
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  return __atomic_load_n(&st[*slot], __ATOMIC_RELAXED) == want;
}

uint64_t Slab::tag(uint64_t index) const {
  auto slot = slot_of(index);
  if (!slot) return 0;
  const uint64_t w = __atomic_load_n(&states()[*slot], __ATOMIC_ACQUIRE);
  return state_of(w) == SlotState::filled ? w >> 8 : 0;
}

Slab::View Slab::view(uint64_t index) const {
  auto slot = slot_of(index);
  if (!slot) return {};
  const Header& h = *header();
  auto* st = states();
  if (state_of(__atomic_load_n(&st[*slot], __ATOMIC_ACQUIRE)) != SlotState::filled) return {};
  if (h.layout == static_cast<uint32_t>(Layout::fixed)) return {slot_data(*slot), h.item_bytes};
  auto* idx = reinterpret_cast<const uint64_t*>(static_cast<const char*>(base_) + h.index_offset);
  uint64_t off = idx[2 * *slot], len = idx[2 * *slot + 1];
  if (off > h.arena_bytes || len > h.arena_bytes - off) return {};  // never read out of bounds
  return {static_cast<const char*>(base_) + h.data_offset + off, len};
}

const void* Slab::items() const { return static_cast<const char*>(base_) + header()->data_offset; }

bool Slab::get(uint64_t index, std::vector<unsigned char>& out) const {
  View v = view(index);
  if (!v) return false;
  out.assign(static_cast<const unsigned char*>(v.data), static_cast<const unsigned char*>(v.data) + v.bytes);
  return true;
}

uint64_t Slab::repair() {
  if (!writable_) throw Error(Exit::usage, name_, "attached read-only");
  const Header& h = *header();
  auto* st = states();
  uint64_t fixed = 0;
  for (uint64_t i = 0; i < h.slots; ++i) {
    uint64_t w = __atomic_load_n(&st[i], __ATOMIC_ACQUIRE);
    SlotState state = state_of(w);
    if (state != SlotState::writing && state != SlotState::invalid) continue;
    pid_t pid = static_cast<pid_t>(w >> 8);
    if (state == SlotState::writing && pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM))
      continue;  // the writer is alive
    if (__atomic_compare_exchange_n(&st[i], &w, word(SlotState::empty), false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      ++fixed;
  }
  return fixed;
}

SlotCounts Slab::counts() const {
  const Header& h = *header();
  const auto* st = states();
  auto* idx = reinterpret_cast<const uint64_t*>(static_cast<const char*>(base_) + h.index_offset);
  SlotCounts c;
  for (uint64_t i = 0; i < h.slots; ++i) {
    switch (state_of(__atomic_load_n(&st[i], __ATOMIC_ACQUIRE))) {
      case SlotState::empty:
        ++c.empty;
        break;
      case SlotState::writing:
        ++c.writing;
        break;
      case SlotState::invalid:
        ++c.invalid;
        break;
      case SlotState::filled:
        ++c.filled;
        c.filled_bytes += h.layout == static_cast<uint32_t>(Layout::fixed) ? h.item_bytes : idx[2 * i + 1];
        break;
    }
  }
  return c;
}

std::string Slab::data_digest() const {
  const Header& h = *header();
  check_size();
  ContentHash hash;
  hash.update(static_cast<const char*>(base_) + h.data_offset, h.total_bytes - h.data_offset);
  return hash.hex_digest();
}

void Slab::seal(const std::string& digest) {
  if (!writable_) throw Error(Exit::usage, name_, "attached read-only");
  Header* h = header();
  std::snprintf(h->data_digest, sizeof h->data_digest, "%s", digest.c_str());
  __atomic_store_n(&h->sealed, uint64_t{1}, __ATOMIC_RELEASE);
}

void Slab::check_size() const {
  struct stat st;
  if (fstat(fd_, &st) != 0) throw Error(Exit::io, name_, errno_text(errno));
  if (static_cast<uint64_t>(st.st_size) != size_)
    throw Error(Exit::io, name_,
                "the slab was truncated to " + std::to_string(st.st_size) + " bytes while in use (it had " +
                    std::to_string(size_) + "); remove and recreate it");
}

std::vector<std::string> stale_slabs() {
  std::vector<std::string> out;
  char host[64] = "";
  gethostname(host, sizeof host - 1);
  for (const auto& n : list_slabs()) {
    try {
      auto info = Slab::attach(n, false).info();
      if (!info.temporary || info.creator_pid <= 0 || info.creator_host != host) continue;
      if (::kill(static_cast<pid_t>(info.creator_pid), 0) == 0 || errno == EPERM) continue;
      out.push_back(n);
    } catch (const Error&) {
      // corrupt or vanished: not ours to judge here
    }
  }
  return out;
}

void install_sigbus_handler(const std::string& tool) {
  std::snprintf(g_tool, sizeof g_tool, "%s", tool.c_str());
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, nullptr);
}

std::vector<std::string> list_slabs() {
  std::vector<std::string> names;
  std::string prefix = object_prefix();
  DIR* d = opendir(shm_dir().c_str());
  if (!d) throw Error(Exit::unavailable, shm_dir(), errno_text(errno));
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n.size() <= prefix.size() || n.compare(0, prefix.size(), prefix) != 0) continue;
    // Slabs are regular files; a directory or link that happens to carry the prefix is not one.
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    names.push_back(n.substr(prefix.size()));
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

uint64_t resident_bytes(const std::string& name) {
  struct stat st;
  if (stat(path_of(name).c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

void remove_slab(const std::string& name) {
  validate_name(name);
  if (::unlink(path_of(name).c_str()) != 0) {
    if (errno == ENOENT) throw Error(Exit::unavailable, name, "no such slab in " + shm_dir());
    throw Error(Exit::io, name, errno_text(errno));
  }
}

uint64_t parse_size(const std::string& s) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = s.substr(used);
  double mult = 0;
  if (used == 0 || v < 0)
    mult = 0;
  else if (unit.empty() || unit == "B")
    mult = 1;
  else if (unit == "K" || unit == "KiB" || unit == "k")
    mult = 1024.0;
  else if (unit == "M" || unit == "MiB")
    mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TiB")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB")
    mult = 1e3;
  else if (unit == "MB")
    mult = 1e6;
  else if (unit == "GB")
    mult = 1e9;
  else if (unit == "TB")
    mult = 1e12;
  // 2^64 is exactly representable: anything at or above it does not fit (llround stopped at 2^63).
  if (mult == 0 || !(v * mult < 18446744073709551616.0))
    throw Error(Exit::usage, "'" + s + "'", "not a size (examples: 512MiB, 2GiB, 1000000)");
  return static_cast<uint64_t>(std::round(v * mult));
}

}  // namespace traincache::slab
