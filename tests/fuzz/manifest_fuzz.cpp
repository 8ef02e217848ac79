// libFuzzer harness: manifests (CSV, TSV, JSON Lines) on arbitrary bytes, each field read as
// labels, keys, image paths (paths resolve inside a private directory holding no images) and text
// (strings or lists of strings; ill-formed UTF-8 repaired or, strictly, refused).
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
  for (const char* ext : {".csv", ".tsv", ".jsonl"}) {
    const std::string path = fuzz::work_dir() + "/m" + ext;
    fuzz::write_input(path, data, size);
    for (const char* field : {"path", "label", "a", "t"})
      for (auto role :
           {io::source::Role::labels, io::source::Role::value, io::source::Role::images, io::source::Role::text}) {
        try {
          auto col = io::source::open_column(path, field, files, role);
          if (col->info().dtype == DType::string) col->read_strings(0, col->info().rows());
        } catch (const Error&) {
        }
      }
  }
  return 0;
}
