// libFuzzer harness: WebDataset tar shards on arbitrary bytes (plain and as the second of two
// shards), each field read as images (decoded; unreadable ones tolerated or not), labels, values,
// text and keys, and json.FIELD.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "traincache/base/error.h"
#include "traincache/io/source.h"

using namespace traincache;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  io::source::FileOptions files;
  files.tolerate_unreadable = size % 2 == 0;
  files.strict_utf8 = size % 3 == 0;
  files.preprocess.resize_h = files.preprocess.resize_w = 8;  // any image becomes a row of 8x8
  const std::string dir = fuzz::work_dir();
  fuzz::write_input(dir + "/a.tar", data, size);
  fuzz::write_input(dir + "/b.tar", data, size / 2);
  for (const std::string& pattern : {dir + "/a.tar", dir + "/{b,a}.tar"})
    for (const char* field : {"png", "jpg", "cls", "txt", "json.label", "__key__"})
      for (auto role :
           {io::source::Role::labels, io::source::Role::value, io::source::Role::images, io::source::Role::text}) {
        try {
          auto col = io::source::open_column(pattern, field, files, role);
          const auto& ci = col->info();
          if (ci.dtype == DType::string) {
            col->read_strings(0, ci.rows());
          } else if (ci.rows() > 0) {
            std::string out(ci.row_bytes() * static_cast<std::size_t>(std::min<int64_t>(ci.rows(), 4)), '\0');
            col->read(0, std::min<int64_t>(ci.rows(), 4), out.data());
          }
        } catch (const Error&) {
        }
      }
  return 0;
}
