#include "traincache/base/content_hash.h"

#include <xxhash.h>

#include <cstdio>
#include <cstring>

#include "traincache/base/error.h"

namespace traincache {

uint64_t hash64(const void* data, std::size_t n) { return XXH3_64bits(data, n); }

struct ContentHash::State {
  XXH3_state_t* s = XXH3_createState();
  ~State() { XXH3_freeState(s); }
};

ContentHash::ContentHash() : state_(new State) {
  if (!state_->s || XXH3_128bits_reset(state_->s) != XXH_OK)
    throw Error(Exit::internal, "xxh3", "cannot initialise digest");
}

ContentHash::~ContentHash() = default;

void ContentHash::update(const void* data, std::size_t n) { XXH3_128bits_update(state_->s, data, n); }

std::string ContentHash::hex_digest() const {
  XXH128_hash_t h = XXH3_128bits_digest(state_->s);
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return buf;
}

Digest128 ContentHash::digest() const {
  XXH128_hash_t h = XXH3_128bits_digest(state_->s);
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);  // big-endian: high64 first, as hex_digest() prints
  Digest128 out;
  std::memcpy(out.data(), c.digest, out.size());
  return out;
}

}  // namespace traincache
