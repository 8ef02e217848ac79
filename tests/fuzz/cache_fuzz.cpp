// libFuzzer harness: the cache-file reader (read_info, check, read_head, compute_stats) on
// arbitrary file bytes — what cache-inspect and gc-train --cache do with a damaged cache.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "traincache/base/error.h"
#include "traincache/io/cache_file.h"
#include "traincache/io/h5.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  traincache::io::h5::skip_exit_cleanup();
  traincache::io::h5::set_verbose(false);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string path = fuzz::work_dir() + "/cache.h5";
  fuzz::write_input(path, data, size);
  using namespace traincache;
  try {
    (void)io::cache::check(path);
  } catch (const Error&) {
  }
  try {
    auto info = io::cache::read_info(path);
    (void)io::cache::read_head(path, 3);
    (void)io::cache::compute_stats(path);
    for (const auto& e : info.embeddings) (void)io::cache::read_embedding_rows(path, e.name, {0, info.rows - 1});
  } catch (const Error&) {
  }
  return 0;
}
