#include "traincache/base/sha256.h"

#include <cstdio>

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
