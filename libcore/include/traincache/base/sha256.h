// SHA-256 digests (OpenSSL's EVP interface) for fingerprints.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace traincache {

/// Incremental SHA-256.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  /// Feeds `n` bytes.
  void update(const void* data, std::size_t n);
  /// Feeds a string's bytes.
  void update(const std::string& s) { update(s.data(), s.size()); }
  /// Finishes and returns the digest as 64 lower-case hex digits. The object is spent afterwards.
  std::string hex_digest();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

/// SHA-256 of a string, as hex.
std::string sha256_hex(const std::string& data);

/// SHA-256 of a file's contents, as hex. Missing -> Error(no_input); read failure -> Error(io).
std::string sha256_file(const std::string& path);

}  // namespace traincache
