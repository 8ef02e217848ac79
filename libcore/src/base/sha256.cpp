#include "traincache/base/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "traincache/base/error.h"
#include "traincache/base/files.h"

namespace traincache {

struct Sha256::Ctx {
  EVP_MD_CTX* md = nullptr;
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(new Ctx) {
  ctx_->md = EVP_MD_CTX_new();
  if (!ctx_->md || EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) != 1)
    throw Error(Exit::internal, "sha256", "cannot initialise digest");
}

Sha256::~Sha256() = default;

void Sha256::update(const void* data, std::size_t n) { EVP_DigestUpdate(ctx_->md, data, n); }

std::string Sha256::hex_digest() {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx_->md, out, &len);
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned i = 0; i < len; ++i) {
    s.push_back(hex[out[i] >> 4]);
    s.push_back(hex[out[i] & 15]);
  }
  return s;
}

std::string sha256_hex(const std::string& data) {
  Sha256 h;
  h.update(data);
  return h.hex_digest();
}

std::string sha256_file(const std::string& path) {
  // A regular file, opened without blocking: a FIFO named as an encoder must not hang the tool.
  std::FILE* f = ::fdopen(files::open_input(path), "rb");
  if (!f) throw Error(Exit::io, path, errno_text(errno));
  Sha256 h;
  std::vector<char> buf(1 << 20);
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) h.update(buf.data(), n);
  bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) throw Error(Exit::io, path, "read error");
  return h.hex_digest();
}

}  // namespace traincache
