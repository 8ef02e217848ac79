#include <chrono>
#include <cstring>
#include <thread>

#include "data.h"
#include "traincache/base/error.h"
#include "traincache/io/h5.h"
#include "traincache/slab/sharing.h"

namespace traincache::train {

namespace {

// Fills the slab's missing rows from dataset `d` of `cache` (set() skips filled slots, so
// concurrent processes cooperate) until every row is filled. Slots left WRITING by a dead process
// are repaired and refilled at once; an invalid slot state means a corrupt slab.
void fill_shared(slab::Slab& slab, hid_t d, const std::string& cache, int64_t rows, int64_t dim) {
  constexpr int64_t kBlock = 4096;
  std::vector<float> buf;
  for (int tries = 0;; ++tries) {
    for (int64_t s = 0; s < rows; s += kBlock) {
      int64_t n = std::min(kBlock, rows - s);
      bool missing = false;
      for (int64_t i = 0; i < n && !missing; ++i) missing = slab.state(uint64_t(s + i)) == slab::SlotState::empty;
      if (!missing) continue;
      buf.resize(static_cast<std::size_t>(n * dim));
      io::h5::read_rows(d, cache, s, n, H5T_NATIVE_FLOAT, buf.data());
      for (int64_t i = 0; i < n; ++i) slab.set(uint64_t(s + i), buf.data() + i * dim, dim * sizeof(float));
    }
    auto c = slab.counts();
    if (c.invalid > 0)
      throw Error(Exit::data, slab.info().name,
                  std::to_string(c.invalid) + " slot(s) hold an invalid state: corrupt slab (remove it: shm-cache rm " +
                      slab.info().name + ")");
    if (c.filled == uint64_t(rows)) return;
    if (slab.repair() > 0) continue;  // writers that died mid-row: their rows are ours to write
    if (tries > 12000)
      throw Error(Exit::temp_failure, slab.info().name, "still being filled by another process after 120 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// The whole slab against the cache file, block by block; Error(data) at the first difference.
void compare_with_cache(const slab::Slab& slab, hid_t d, const std::string& cache, int64_t rows, int64_t dim) {
  constexpr int64_t kBlock = 4096;
  std::vector<float> buf;
  const char* items = static_cast<const char*>(slab.items());
  for (int64_t s = 0; s < rows; s += kBlock) {
    int64_t n = std::min(kBlock, rows - s);
    buf.resize(static_cast<std::size_t>(n * dim));
    io::h5::read_rows(d, cache, s, n, H5T_NATIVE_FLOAT, buf.data());
    if (std::memcmp(items + s * dim * sizeof(float), buf.data(), buf.size() * sizeof(float)) != 0)
      throw Error(Exit::data, slab.info().name,
                  "slab holds other embeddings than " + cache + " (remove it: shm-cache rm " + slab.info().name + ")");
  }
}

}  // namespace

// Embeddings `name` of the cache placed in the slab "<shm>-<name>", shared by every process on
// the machine: the first one creates and fills it, the others attach (and help fill). The first
// process to see it complete compares it with the cache file in full and seals it with a digest;
// later ones check the digest. Returns a zero-copy [rows, dim] float32 view of the slab.
torch::Tensor shared_embeddings(Data& data, const TrainOptions& o, const std::string& cache,
                                const std::string& fingerprint, const std::string& name, int64_t rows) {
  io::h5::Id f = io::h5::open_file(cache);
  std::string dpath = "/embeddings/" + name;
  io::h5::Id d = io::h5::open_dataset(f.get(), cache, dpath);
  auto di = io::h5::describe(d.get(), dpath);
  const int64_t dim = di.row_elements();
  slab::CreateOptions c;
  c.name = o.cache_shm + "-" + name;
  c.length = static_cast<uint64_t>(rows);
  c.dtype = DType::f32;
  c.dims = {static_cast<uint64_t>(dim)};
  c.slots = c.length;
  c.content_id = fingerprint.substr(0, 64) + "/" + name.substr(0, 60);
  c.tool = "gc-train";
  slab::Sharing sharing;
  sharing.trust_owner = o.trust_slab_owner;
  sharing.owner_hint = "another --cache-shm name";
  sharing.holds_other = "slab holds other embeddings than " + cache + " (remove it: shm-cache rm " + c.name + ")";
  sharing.wrong_shape = "slab does not have the shape of the cache's embeddings";
  sharing.same_slots = true;
  bool created = false;
  std::shared_ptr<slab::Slab> slab = slab::open_shared(c, sharing, &created);
  fill_shared(*slab, d.get(), cache, rows, dim);
  auto sealed = slab->info().sealed_digest;
  std::string digest = slab->data_digest();
  if (!sealed) {
    compare_with_cache(*slab, d.get(), cache, rows, dim);
    slab->seal(digest);
  } else if (*sealed != digest) {
    throw Error(Exit::data, c.name,
                "slab contents changed after it was filled and sealed (remove it: shm-cache rm " + c.name + ")");
  }
  data.slabs.push_back(slab);
  return torch::from_blob(const_cast<void*>(slab->items()), {rows, dim}, torch::kFloat32);
}

}  // namespace traincache::train
