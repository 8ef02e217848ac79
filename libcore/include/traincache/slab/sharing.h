// Slabs shared by the processes of a node: the one way every protocol that attaches to a slab
// another process may have made (gc-train's --cache-shm embeddings, --data-cache rows, SmartCache
// windows, token slabs) decides whether it may use it. Torch-free.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "traincache/slab/shm_slab.h"

namespace traincache::slab {

/// How a sharing protocol words its refusals, and what it compares.
struct Sharing {
  /// Another user's slab is used (--trust-slab-owner); otherwise it is refused.
  bool trust_owner = false;
  /// The end of the refusal of another user's slab: "use --trust-slab-owner to share it, or ...".
  std::string owner_hint;
  /// The refusal of a slab made for other contents (another content id), whole.
  std::string holds_other;
  /// The refusal of a slab of another layout, element type or (fixed layout) item shape, length,
  /// selection or slot count; empty: holds_other.
  std::string wrong_shape;
  /// Fixed layout: the slot count must be want.slots too (a full copy); otherwise any.
  bool same_slots = false;
  /// An attached slab that is sealed must still hold what was sealed (its data digest).
  bool check_seal = false;
  /// How the caller is told to trust another user's slab (a tool's flag, a library's argument).
  std::string trust_hint = "--trust-slab-owner";
  /// When set, words the refusal of a slab of other contents or shape from what it holds (then
  /// holds_other and wrong_shape are not used).
  std::function<std::string(const SlabInfo&)> holds_other_of;
};

/// Refuses with Error(data) a slab described by `si` that a process wanting `want` must not use:
/// another user's (unless trusted), made for other contents, or of another layout, element type
/// or (fixed layout) item shape, length and selection than `want`.
void check_shared(const SlabInfo& si, const CreateOptions& want, const Sharing& sharing);

/// Refuses a slab whose mapped object another user owns (SlabInfo::uid, from fstat of the
/// descriptor mapped) unless `trust`: Error(data, name, "slab is owned by another user (uid N); use
/// " + `use`). Every tool that attaches to a slab decides so.
void require_own_slab(const SlabInfo& si, const std::string& name, bool trust, const std::string& use);

/// Attaches (writable) to slab want.name, or creates it as `want` when there is none; of processes
/// that race to create it, the losers attach to the winner's. `before_create` runs before each
/// attempt to create (a space check may refuse there). The slab is then checked (check_shared,
/// and its seal with Sharing::check_seal when attached); `created` says whether this call made it.
std::unique_ptr<Slab> open_shared(const CreateOptions& want, const Sharing& sharing, bool* created,
                                  const std::function<void()>& before_create = {});

}  // namespace traincache::slab
