// libFuzzer harness: shm-cache's slab header and attach path on arbitrary object bytes. The input
// becomes the slab object; attach must validate it before trusting any offset, and every reader
// and the repair path must stay inside the mapping.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "traincache/base/error.h"
#include "traincache/slab/shm_slab.h"

namespace {

const char* kName = "fuzz-slab";

void exercise(traincache::slab::Slab& slab, bool writable) {
  auto info = slab.info();
  auto counts = slab.counts();
  volatile uint64_t sink = counts.filled + info.total_bytes;
  const uint64_t probes[] = {0, 1, 2, info.length ? info.length - 1 : 0, info.length, info.length + 1, UINT64_MAX};
  std::vector<unsigned char> item;
  for (uint64_t i : probes) {
    (void)slab.slot_of(i);
    (void)slab.state(i);
    auto v = slab.view(i);
    for (std::size_t b = 0; b < v.bytes; b += 64) sink = sink + static_cast<const unsigned char*>(v.data)[b];
    (void)slab.get(i, item);
  }
  if (info.total_bytes <= (1u << 20)) (void)slab.data_digest();
  if (writable) {
    (void)slab.repair();
    std::vector<unsigned char> bytes(info.item_bytes && info.item_bytes < 4096 ? info.item_bytes : 16, 7);
    (void)slab.set(0, bytes.data(), bytes.size());
    (void)slab.set(1, bytes.data(), 3);
  }
  (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Our own object prefix, so the harness never touches a real slab.
  std::string prefix = "traincache-fuzz-" + std::to_string(::getpid()) + "-";
  ::setenv("TRAINCACHE_SHM_PREFIX", prefix.c_str(), 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string path = traincache::slab::shm_dir() + "/" + std::getenv("TRAINCACHE_SHM_PREFIX") + kName;
  for (bool writable : {false, true}) {
    fuzz::write_input(path, data, size);
    try {
      auto slab = traincache::slab::Slab::attach(kName, writable);
      exercise(slab, writable);
    } catch (const traincache::Error&) {
    }
  }
  ::unlink(path.c_str());
  return 0;
}
