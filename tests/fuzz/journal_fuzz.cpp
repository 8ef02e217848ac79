// libFuzzer harness: cache-fill's journal reader (Journal::load + validate) on arbitrary
// journal.json bytes, against raw files of known sizes.
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "traincache/base/error.h"
#include "traincache/fill/journal.h"

namespace {

const std::string& journal_dir() {
  static const std::string dir = [] {
    std::string d = fuzz::work_dir() + "/out.h5.partial";
    std::vector<uint8_t> zeros(4096, 0);
    if (::mkdir(d.c_str(), 0700) != 0) std::abort();
    fuzz::write_input(d + "/cnn.raw", zeros.data(), zeros.size());  // 32 rows of 32 float32
    fuzz::write_input(d + "/mlp.raw", zeros.data(), 100);           // a short raw file
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  traincache::fill::Journal journal(journal_dir());
  fuzz::write_input(journal.file(), data, size);
  try {
    if (!journal.load()) return 0;
    // Batches of 8 over 300 rows, then batches cut short at file boundaries (tar shards).
    std::vector<int64_t> ends;
    for (int64_t e = 8; e < 300; e += 8) ends.push_back(e);
    ends.push_back(300);
    journal.validate({"cnn", "mlp"}, ends, 4);
    journal.validate({"cnn"}, {5, 13, 20, 32}, 2);
  } catch (const traincache::Error&) {
  }
  return 0;
}
