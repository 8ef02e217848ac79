#include "traincache/base/sha256.h"

#include <sys/stat.h>

#include <cstdio>
#include <string>

#include "catch.h"
#include "traincache/base/error.h"

using namespace traincache;

CATCH_TEST_CASE("sha256: matches the FIPS 180-2 test vectors", "[sha256]") {
  CATCH_CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CATCH_CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

CATCH_TEST_CASE("sha256: incremental updates equal one update", "[sha256]") {
  Sha256 h;
  h.update("ab");
  h.update("c");
  CATCH_CHECK(h.hex_digest() == sha256_hex("abc"));
}

CATCH_TEST_CASE("sha256: files are digested by content; a missing file is exit 66", "[sha256]") {
  std::string path = "sha256_test.tmp";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  std::fputs("abc", f);
  std::fclose(f);
  CATCH_CHECK(sha256_file(path) == sha256_hex("abc"));
  std::remove(path.c_str());
  try {
    sha256_file(path);
    CATCH_FAIL("no error");
  } catch (const Error& e) {
    CATCH_CHECK(e.code() == Exit::no_input);
  }
}

// The digest of the bytes kept is the file's, and the bytes are the file's: empty, a few, and more
// than one read's worth (3 MiB and 1 byte). A FIFO is refused, not waited on; a missing file is 66.
CATCH_TEST_CASE("sha256: a file's digest with its bytes kept names those bytes", "[sha256]") {
  const std::string path = "sha256_bytes_test.tmp";
  for (const std::size_t n : {std::size_t{0}, std::size_t{3}, (std::size_t{3} << 20) + 1}) {
    std::string content(n, '\0');
    for (std::size_t i = 0; i < n; ++i) content[i] = static_cast<char>((i * 131 + i / 7) & 0xff);
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(content.data(), 1, n, f);
    std::fclose(f);
    FileBytes bytes;
    CATCH_CHECK(sha256_file(path, bytes) == sha256_hex(content));
    CATCH_REQUIRE(bytes.size == n);
    CATCH_CHECK(std::string(bytes.data.get(), bytes.size) == content);
  }
  std::remove(path.c_str());
  FileBytes bytes;
  try {
    sha256_file(path, bytes);
    CATCH_FAIL("no error");
  } catch (const Error& e) {
    CATCH_CHECK(e.code() == Exit::no_input);
  }
  CATCH_REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  CATCH_CHECK_THROWS_AS(sha256_file(path, bytes), Error);
  std::remove(path.c_str());
}
