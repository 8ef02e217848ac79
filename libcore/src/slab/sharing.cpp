#include "traincache/slab/sharing.h"

#include <unistd.h>

#include "traincache/base/error.h"

namespace traincache::slab {

void require_own_slab(const SlabInfo& si, const std::string& name, bool trust, const std::string& use) {
  if (si.uid != ::geteuid() && !trust)
    throw Error(Exit::data, name, "slab is owned by another user (uid " + std::to_string(si.uid) + "); use " + use);
}

void check_shared(const SlabInfo& si, const CreateOptions& want, const Sharing& sharing) {
  require_own_slab(si, want.name, sharing.trust_owner, sharing.trust_hint + " to share it, or " + sharing.owner_hint);
  const bool same_contents = si.content_id == want.content_id;
  bool same = si.layout == want.layout && si.dtype == want.dtype;
  if (want.layout == Layout::fixed)
    same = same && si.dims == want.dims && si.length == want.length && si.selection == want.selection &&
           (!sharing.same_slots || si.slots == want.slots);
  if (sharing.holds_other_of && !(same_contents && same))
    throw Error(Exit::data, want.name, sharing.holds_other_of(si));
  if (!same_contents) throw Error(Exit::data, want.name, sharing.holds_other);
  if (!same)
    throw Error(Exit::data, want.name, sharing.wrong_shape.empty() ? sharing.holds_other : sharing.wrong_shape);
}

std::unique_ptr<Slab> open_shared(const CreateOptions& want, const Sharing& sharing, bool* created,
                                  const std::function<void()>& before_create) {
  std::unique_ptr<Slab> slab;
  *created = false;
  for (int attempt = 0; !slab; ++attempt) {
    try {
      slab = std::make_unique<Slab>(Slab::attach(want.name, true));
      break;
    } catch (const Error& e) {
      if (e.code() != Exit::unavailable) throw;
    }
    if (before_create) before_create();
    try {
      slab = std::make_unique<Slab>(Slab::create(want));
      *created = true;
    } catch (const Error& e) {
      if (e.code() != Exit::cant_create || attempt > 0) throw;  // lost a race: attach to the winner's
    }
  }
  const SlabInfo si = slab->info();
  check_shared(si, want, sharing);
  if (!*created && sharing.check_seal && si.sealed_digest && slab->data_digest() != *si.sealed_digest)
    throw Error(Exit::data, want.name, "slab changed since it was sealed (remove it: shm-cache rm " + want.name + ")");
  return slab;
}

}  // namespace traincache::slab
