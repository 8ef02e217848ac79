// Fast content digest (XXH3-128 from libxxhash) for fingerprinting input rows. Not a security
// hash: it detects changed data. Encoder files are identified with SHA-256 (sha256.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace traincache {

/// A 128-bit digest as 16 bytes, high half first (the order hex_digest() prints).
using Digest128 = std::array<uint8_t, 16>;

/// XXH3-64 of `n` bytes in one call: for telling whether bytes read again are the ones read before.
uint64_t hash64(const void* data, std::size_t n);

/// Incremental XXH3-128.
class ContentHash {
 public:
  ContentHash();
  ~ContentHash();
  ContentHash(const ContentHash&) = delete;
  ContentHash& operator=(const ContentHash&) = delete;

  /// Feeds `n` bytes.
  void update(const void* data, std::size_t n);
  /// Feeds a string's bytes.
  void update(const std::string& s) { update(s.data(), s.size()); }
  /// The digest of everything fed so far, as 32 lower-case hex digits.
  std::string hex_digest() const;
  /// The same digest as 16 bytes.
  Digest128 digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace traincache
