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
  traincache::h5::skip_exit_cleanup();
  traincache::h5::set_verbose(false);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string path = fuzz::work_dir() + "/cache.h5";
  fuzz::write_input(path, data, size);
  using namespace traincache;
  try {
    (void)cache::check(path);
  } catch (const Error&) {
  }
  try {
    auto info = cache::read_info(path);
    (void)cache::read_head(path, 3);
    (void)cache::compute_stats(path);
    for (const auto& e : info.embeddings) (void)cache::read_embedding_rows(path, e.name, {0, info.rows - 1});
  } catch (const Error&) {
  }
  return 0;
}
