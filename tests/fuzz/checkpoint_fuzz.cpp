// libFuzzer harness: gc-train's check of a checkpoint before LibTorch is loaded
// (check_checkpoint_digest: the zip archive read with libzip, the digest found in its pickled
// record) on arbitrary checkpoint.pt bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "traincache/base/error.h"
#include "traincache/train/checkpoint_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const std::string path = traincache::train::checkpoint_path(fuzz::work_dir());
  fuzz::write_input(path, data, size);
  try {
    traincache::train::check_checkpoint_digest(path);
  } catch (const traincache::Error&) {
  }
  return 0;
}
