#include "traincache/train.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "traincache/autocast.h"
#include "traincache/cache_file.h"
#include "traincache/checkpoint.h"
#include "traincache/data_cache.h"
#include "traincache/dist.h"
#include "traincache/encoder.h"
#include "traincache/error.h"
#include "traincache/evaluate.h"
#include "traincache/gradcache.h"
#include "traincache/h5.h"
#include "traincache/interrupt.h"
#include "traincache/objectives.h"
#include "traincache/prefetch.h"
#include "traincache/safe_file.h"
#include "traincache/sha256.h"
#include "traincache/shm_slab.h"
#include "traincache/shuffle.h"
#include "traincache/smart_cache.h"
#include "traincache/text.h"
#include "traincache/timing.h"
#include "traincache/train_plan.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace traincache::train {

namespace {

// ---- models -------------------------------------------------------------------------------

// A built-in head "mlp:H1,...,Hn" (ReLU between layers) or "linear:D", as a TorchScript module so
// that --out is loadable with torch.jit.load. Weights are initialised like nn.Linear.
torch::jit::Module build_head(const std::string& spec, int64_t in_dim) {
  auto colon = spec.find(':');
  std::string kind = spec.substr(0, colon);
  if (kind != "mlp" && kind != "linear")
    throw Error(Exit::usage, "--head", "expected mlp:H1,...,Hn, linear:D or a TorchScript file, got '" + spec + "'");
  std::vector<int64_t> dims;
  std::string rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  std::size_t pos = 0;
  while (pos < rest.size()) {
    std::size_t next = rest.find(',', pos);
    if (next == std::string::npos) next = rest.size();
    try {
      dims.push_back(std::stoll(rest.substr(pos, next - pos)));
    } catch (const std::exception&) {
      throw Error(Exit::usage, "--head", "not a layer width in '" + spec + "'");
    }
    if (dims.back() <= 0) throw Error(Exit::usage, "--head", "layer widths must be positive");
    pos = next + 1;
  }
  if (dims.empty() || (kind == "linear" && dims.size() != 1))
    throw Error(Exit::usage, "--head", "'" + spec + "' names no layer widths");
  torch::jit::Module m("TraincacheHead");
  std::string body = "def forward(self, x):\n  h = x\n";
  int64_t fan_in = in_dim;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    auto w = torch::empty({dims[i], fan_in}).uniform_(-bound, bound);
    auto b = torch::empty({dims[i]}).uniform_(-bound, bound);
    m.register_parameter("weight" + std::to_string(i), w, false);
    m.register_parameter("bias" + std::to_string(i), b, false);
    body += "  h = torch.matmul(h, self.weight" + std::to_string(i) + ".t()) + self.bias" + std::to_string(i) + "\n";
    if (i + 1 < dims.size()) body += "  h = torch.relu(h)\n";
    fan_in = dims[i];
  }
  body += "  return h\n";
  m.define(body);
  return m;
}

void refuse_batchnorm(const torch::jit::Module& m, const std::string& what) {
  for (const auto& b : m.named_buffers())
    if (b.name.find("running_mean") != std::string::npos)
      throw Error(Exit::data, what,
                  "has BatchNorm layers (" + b.name +
                      "); gradient caching would update their running statistics twice: use "
                      "LayerNorm/GroupNorm, or --no-gradcache");
}

gc::Tower tower_of(torch::jit::Module* m, const std::string& name) {
  return [m, name](const std::vector<torch::Tensor>& inputs) {
    torch::jit::IValue out =
        encode::call_forward(*m, std::vector<torch::jit::IValue>(inputs.begin(), inputs.end()), name);
    if (!out.isTensor()) throw Error(Exit::data, name, "forward() must return one tensor");
    auto t = out.toTensor();
    return t.dim() == 2 ? t : t.reshape({t.size(0), -1});
  };
}

// ---- data ---------------------------------------------------------------------------------

// A text side's token sequences, tokenized once at load: the side's rows, then (passages) the
// hard negatives, row i's j-th at rows + i*k + j. Batches are padded when they are drawn.
// With --data-cache the sequences live in a sealed slab shared by the node (tokenized once).
struct TextSide {
  text::TokenRows seqs;                            // in this process's memory, or
  std::shared_ptr<data_cache::SealedSlab> shared;  // sequence i in slot i: its ids, then its type ids
  int64_t rows = 0, negatives = 0;
  int64_t length = 0;  // every batch padded to this many tokens; 0: to its longest (chunks trimmed)
  std::shared_ptr<const text::Tokenizer> tok;
  std::string tokenizer;  // its file
  torch::Device device{torch::kCPU};

  // Sequences `s` padded into a batch.
  text::TokenBatch pad(const std::vector<int64_t>& s) const {
    if (!shared) return text::pad_rows(seqs, s, length);
    const shm::Slab& slab = shared->slab();
    auto seq = [&slab](int64_t i) {
      const auto v = slab.view(static_cast<uint64_t>(i));
      if (!v || v.bytes % 8 != 0)
        throw Error(Exit::data, slab.info().name, "sequence " + std::to_string(i) + " is missing or damaged");
      const auto* ids = static_cast<const int32_t*>(v.data);
      const auto n = static_cast<int64_t>(v.bytes / 8);
      return text::TokenSeq{ids, ids + n, n};
    };
    return text::pad_seqs(seq, s, length, seqs.pad_id);
  }

  // The longest sequence (rows first, then each row's negatives) and its length in tokens.
  std::pair<int64_t, int64_t> longest() const {
    std::pair<int64_t, int64_t> best{0, 0};
    const int64_t n = rows * (1 + negatives);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t len =
          shared ? static_cast<int64_t>(shared->slab().view(static_cast<uint64_t>(i)).bytes / 8) : seqs.length(i);
      if (len > best.second) best = {i, len};
    }
    return best;
  }
  // Sequence i in words: "row 12" or "row 12's hard negative 2" (rows counted from 0).
  std::string describe(int64_t i) const {
    if (i < rows) return "row " + std::to_string(i);
    const int64_t k = std::max<int64_t>(1, negatives);
    return "row " + std::to_string((i - rows) / k) + "'s hard negative " + std::to_string((i - rows) % k + 1);
  }
};

std::vector<int64_t> row_list(const torch::Tensor& idx);
torch::Tensor load_whole(const source::Column& col, double scale, torch::Device device, torch::Dtype float_type);

// A dataset training reads rows of: loaded whole and converted once, or (--stream) read from its
// source a batch at a time, converted per batch, so that memory does not grow with the data.
// The conversion is the same elementwise rule either way: both give the same values.
struct Rows {
  torch::Tensor all;                          // loaded whole
  std::shared_ptr<const source::Column> col;  // or streamed
  double scale = 1;                           // uint8 inputs
  torch::Dtype float_type = torch::kFloat32;
  torch::Device device{torch::kCPU};
  bool one_per_row = false;                     // a manifest's path field of negatives: [rows, 1, ...]
  bool flat = false;                            // cached embeddings: each row as one vector [rows, d]
  std::shared_ptr<data_cache::RowCache> cache;  // streamed: converted rows kept in a shared slab
  std::string cache_parts;                      // --data-cache smart: what the column's rows are made of
  std::shared_ptr<smart::WindowCache> window;   // and its SmartCache window (opened after the split)

  std::vector<int64_t> sizes() const {
    if (all.defined()) return all.sizes().vec();
    std::vector<int64_t> s = col->info().shape;
    if (one_per_row) s.insert(s.begin() + 1, 1);
    if (flat) s = {s[0], std::accumulate(s.begin() + 1, s.end(), int64_t{1}, std::multiplies<int64_t>())};
    return s;
  }
  int64_t rows() const { return sizes().front(); }
  int64_t dim() const { return static_cast<int64_t>(sizes().size()); }

  // Rows `idx` (any order), converted, on the device. Streamed: the source reads the distinct
  // rows in ascending order (HDF5: one selection, each chunk once) and places them; plain loops
  // convert them: this runs on the prefetch thread, where OpenMP-parallel tensor operations would
  // compete with the training step's threads.
  // `keys`: the rows' SmartCache keys (training batches with --data-cache smart).
  torch::Tensor gather(const torch::Tensor& idx, const std::vector<int64_t>* keys = nullptr) const {
    if (all.defined()) return all.index_select(0, idx.to(all.device()));
    auto t = window && keys ? window_rows(row_list(idx), *keys)
             : cache        ? cached_rows(row_list(idx))
                            : encode::read_column_rows(*col, row_list(idx), scale);
    if (t.is_floating_point() && t.scalar_type() != float_type) t = t.to(float_type);
    if (one_per_row) t = t.unsqueeze(1);
    if (flat) t = t.reshape({t.size(0), -1});
    return t.to(device);
  }

  // An opened column loaded whole (converted once), as without --stream.
  void load() {
    all = load_whole(*col, scale, device, float_type);
    if (one_per_row) all = all.unsqueeze(1);
    if (flat) all = all.reshape({all.size(0), -1});
    col.reset();
    one_per_row = flat = false;
  }

  // Bytes the rows take once loaded and converted (streamed: not loaded, so far).
  uint64_t converted_bytes() const {
    if (all.defined() || !col) return 0;
    const auto& ci = col->info();
    const uint64_t element = encode::converted_type(ci.dtype) == torch::kLong ? 8 : 4;
    return static_cast<uint64_t>(ci.rows()) * static_cast<uint64_t>(ci.row_elements()) * element;
  }

  // Rows `want` through a data cache: hits copied from its slab by `lookup`, the others read,
  // converted and offered to it by `store(k, bytes)` (k: the position in `want`).
  template <class Lookup, class Store>
  torch::Tensor through_cache(const std::vector<int64_t>& want, std::size_t rb, Lookup lookup, Store store) const {
    const auto& ci = col->info();
    std::vector<int64_t> shape = ci.shape;
    shape[0] = static_cast<int64_t>(want.size());
    auto t = torch::empty(shape, encode::converted_type(ci.dtype));
    auto* out = static_cast<char*>(t.data_ptr());
    const std::vector<std::size_t> miss = lookup(out);
    if (miss.empty()) return t;
    std::vector<int64_t> rows;
    for (auto k : miss) rows.push_back(want[k]);
    auto read = encode::read_column_rows(*col, rows, scale);
    const auto* in = static_cast<const char*>(read.data_ptr());
    for (std::size_t j = 0; j < miss.size(); ++j) {
      std::memcpy(out + miss[j] * rb, in + j * rb, rb);
      store(miss[j], in + j * rb);
    }
    return t;
  }
  torch::Tensor cached_rows(const std::vector<int64_t>& want) const {
    return through_cache(
        want, cache->row_bytes(), [&](char* out) { return cache->lookup(want, out); },
        [&](std::size_t k, const char* bytes) { cache->store(want[k], bytes); });
  }
  torch::Tensor window_rows(const std::vector<int64_t>& want, const std::vector<int64_t>& keys) const {
    return through_cache(
        want, window->item_bytes(), [&](char* out) { return window->lookup(keys, out); },
        [&](std::size_t k, const char* bytes) { window->store(keys[k], bytes); });
  }
};

struct Data {
  std::vector<std::shared_ptr<shm::Slab>> slabs;     // keep shared embeddings mapped
  std::vector<Rows> query, passage, negatives;       // [N, ...]; negatives [N, k, ...]
  std::optional<TextSide> query_text, passage_text;  // a text side instead of tensors
  torch::Tensor labels;                              // grouped mode
  torch::Tensor classes;  // classifier objectives: each row's class (-1: a label training lacks)
  int64_t rows = 0;
  std::vector<int64_t> skipped;  // cache rows without an embedding (cache-fill --on-error skip)
  int64_t hard_negatives = 0;
  int64_t utf8_replaced = 0;   // ill-formed UTF-8 sequences of text fields replaced with U+FFFD
  std::string labels_warning;  // how the labels were read, when the user should be told
  // --data-cache smart: the window schedule over the training rows (item of a position: a row).
  smart::WindowPlan window;
  std::shared_ptr<const std::vector<int64_t>> window_rows;
};

// Every row of `col`, converted, on `device`.
torch::Tensor load_whole(const source::Column& col, double scale, torch::Device device, torch::Dtype float_type) {
  auto t = encode::read_column_rows(col, 0, col.info().rows(), scale);
  if (t.is_floating_point()) t = t.to(float_type);
  return t.to(device);
}

torch::Tensor read_all(const std::string& path, const std::string& ds, double scale, torch::Device device,
                       torch::Dtype float_type, const source::FileOptions& files = {}) {
  return load_whole(*source::open_column(path, ds, files, source::Role::images), scale, device, float_type);
}

// One integer label per row (manifest class names numbered by --label-order), as int64 on the CPU.
torch::Tensor read_labels(const std::string& path, const std::string& ds, const source::FileOptions& files,
                          std::string& warning) {
  auto col = source::open_column(path, ds, files, source::Role::labels);
  warning = col->warning();
  const auto& ci = col->info();
  if (!is_integer(ci.dtype) || !(ci.shape.size() == 1 || (ci.shape.size() == 2 && ci.shape[1] == 1)))
    throw Error(Exit::data, path,
                "labels '" + ds + "' must hold one integer per row, not " + dtype_name(ci.dtype) + " rows of shape " +
                    shape_text(std::vector<int64_t>(ci.shape.begin() + 1, ci.shape.end())));
  return encode::read_column_rows(*col, 0, ci.rows(), 1.0).to(torch::kLong).reshape({-1});
}

void same_rows(const std::string& path, const std::string& a, int64_t na, const std::string& b, int64_t nb) {
  if (na != nb)
    throw Error(
        Exit::data, path,
        "rows mismatch: '" + a + "' has " + std::to_string(na) + " rows but '" + b + "' has " + std::to_string(nb));
}

// Rows `idx` of every dataset (`keys`: their SmartCache keys, in a training batch).
std::vector<torch::Tensor> gather(const std::vector<Rows>& ts, const torch::Tensor& idx,
                                  const std::vector<int64_t>* keys = nullptr) {
  std::vector<torch::Tensor> out;
  for (const auto& t : ts) out.push_back(t.gather(idx, keys));
  return out;
}

// A dataset of `path`: loaded whole, or with `stream` opened for per-batch reads.
Rows open_rows(const std::string& path, const std::string& ds, double scale, torch::Device device,
               torch::Dtype float_type, bool stream, const source::FileOptions& files = {}) {
  Rows r;
  r.col = source::open_column(path, ds, files, source::Role::images);
  encode::require_numeric_input(r.col->info(), path);
  r.scale = scale;
  r.float_type = float_type;
  r.device = device;
  if (!stream) r.load();
  return r;
}

// Sequences `seqs` of a text side, padded: input_ids, attention_mask, token_type_ids.
std::vector<torch::Tensor> token_inputs(const TextSide& t, const std::vector<int64_t>& seqs) {
  auto out = encode::token_tensors(t.pad(seqs));
  for (auto& x : out) x = x.to(t.device);
  return out;
}

std::vector<int64_t> label_list(const torch::Tensor& labels) {
  auto l = labels.cpu().contiguous();
  return {l.data_ptr<int64_t>(), l.data_ptr<int64_t>() + l.numel()};
}

std::vector<int64_t> pick(const std::vector<int64_t>& v, const std::vector<int64_t>& rows) {
  std::vector<int64_t> out;
  out.reserve(rows.size());
  for (auto r : rows) out.push_back(v[static_cast<std::size_t>(r)]);
  return out;
}

std::vector<int64_t> row_list(const torch::Tensor& idx) {
  auto c = idx.to(torch::kCPU, torch::kLong).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

std::vector<torch::Tensor> query_inputs(const Data& d, const torch::Tensor& idx,
                                        const std::vector<int64_t>* keys = nullptr) {
  return d.query_text ? token_inputs(*d.query_text, row_list(idx)) : gather(d.query, idx, keys);
}

// Passages of a batch grouped per query: [pos_0, neg_0_1..neg_0_k, pos_1, ...]; only the
// positives without `negatives`.
std::vector<torch::Tensor> passage_inputs(const Data& d, const torch::Tensor& idx, bool negatives = true,
                                          const std::vector<int64_t>* keys = nullptr) {
  if (d.passage_text) {
    const TextSide& t = *d.passage_text;
    std::vector<int64_t> seqs;
    for (int64_t i : row_list(idx)) {
      seqs.push_back(i);
      for (int64_t j = 0; negatives && j < t.negatives; ++j) seqs.push_back(t.rows + i * t.negatives + j);
    }
    return token_inputs(t, seqs);
  }
  auto pos = gather(d.passage, idx, keys);
  if (d.negatives.empty() || !negatives) return pos;
  auto neg = gather(d.negatives, idx, keys);
  std::vector<torch::Tensor> out;
  for (std::size_t i = 0; i < pos.size(); ++i) {
    auto g = torch::cat({pos[i].unsqueeze(1), neg[i]}, 1);  // [B, 1+k, ...]
    std::vector<int64_t> shape{-1};
    for (int64_t s = 2; s < g.dim(); ++s) shape.push_back(g.size(s));
    out.push_back(g.reshape(shape));
  }
  return out;
}

// Attaches to slab `slab_name` when it exists and may be trusted (this user's, or any owner's with
// --trust-slab-owner; made for the same cache contents), or creates it.
std::shared_ptr<shm::Slab> shared_slab(const shm::CreateOptions& want, bool trust_owner, const std::string& cache) {
  std::shared_ptr<shm::Slab> slab;
  try {
    slab = std::make_shared<shm::Slab>(shm::Slab::attach(want.name, true));
  } catch (const Error& e) {
    if (e.code() != Exit::unavailable) throw;
  }
  if (!slab) {
    try {
      return std::make_shared<shm::Slab>(shm::Slab::create(want));
    } catch (const Error& e) {
      if (e.code() != Exit::cant_create) throw;
      slab = std::make_shared<shm::Slab>(shm::Slab::attach(want.name, true));  // lost a race
    }
  }
  auto si = slab->info();
  if (si.uid != ::geteuid() && !trust_owner)
    throw Error(Exit::data, want.name,
                "slab is owned by another user (uid " + std::to_string(si.uid) +
                    "); use --trust-slab-owner to share it, or another --cache-shm name");
  if (si.content_id != want.content_id)
    throw Error(Exit::data, want.name,
                "slab holds other embeddings than " + cache + " (remove it: shm-cache rm " + want.name + ")");
  if (si.layout != shm::Layout::fixed || si.dtype != DType::f32 || si.dims != want.dims || si.length != want.length ||
      si.slots != want.length || si.selection != shm::Selection::first)
    throw Error(Exit::data, want.name, "slab does not have the shape of the cache's embeddings");
  return slab;
}

// Fills the slab's missing rows from dataset `d` of `cache` (set() skips filled slots, so
// concurrent processes cooperate) until every row is filled. Slots left WRITING by a dead process
// are repaired and refilled at once; an invalid slot state means a corrupt slab.
void fill_shared(shm::Slab& slab, hid_t d, const std::string& cache, int64_t rows, int64_t dim) {
  constexpr int64_t kBlock = 4096;
  std::vector<float> buf;
  for (int tries = 0;; ++tries) {
    for (int64_t s = 0; s < rows; s += kBlock) {
      int64_t n = std::min(kBlock, rows - s);
      bool missing = false;
      for (int64_t i = 0; i < n && !missing; ++i) missing = slab.state(uint64_t(s + i)) == shm::SlotState::empty;
      if (!missing) continue;
      buf.resize(static_cast<std::size_t>(n * dim));
      h5::read_rows(d, cache, s, n, H5T_NATIVE_FLOAT, buf.data());
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
void compare_with_cache(const shm::Slab& slab, hid_t d, const std::string& cache, int64_t rows, int64_t dim) {
  constexpr int64_t kBlock = 4096;
  std::vector<float> buf;
  const char* items = static_cast<const char*>(slab.items());
  for (int64_t s = 0; s < rows; s += kBlock) {
    int64_t n = std::min(kBlock, rows - s);
    buf.resize(static_cast<std::size_t>(n * dim));
    h5::read_rows(d, cache, s, n, H5T_NATIVE_FLOAT, buf.data());
    if (std::memcmp(items + s * dim * sizeof(float), buf.data(), buf.size() * sizeof(float)) != 0)
      throw Error(Exit::data, slab.info().name,
                  "slab holds other embeddings than " + cache + " (remove it: shm-cache rm " + slab.info().name + ")");
  }
}

// Embeddings `name` of the cache placed in the slab "<shm>-<name>", shared by every process on
// the machine: the first one creates and fills it, the others attach (and help fill). The first
// process to see it complete compares it with the cache file in full and seals it with a digest;
// later ones check the digest. Returns a zero-copy [rows, dim] float32 view of the slab.
torch::Tensor shared_embeddings(Data& data, const std::string& shm_name, bool trust_owner, const std::string& cache,
                                const std::string& fingerprint, const std::string& name, int64_t rows) {
  h5::Id f = h5::open_file(cache);
  std::string dpath = "/embeddings/" + name;
  h5::Id d = h5::open_dataset(f.get(), cache, dpath);
  auto di = h5::describe(d.get(), dpath);
  const int64_t dim = di.row_elements();
  shm::CreateOptions c;
  c.name = shm_name + "-" + name;
  c.length = static_cast<uint64_t>(rows);
  c.dtype = DType::f32;
  c.dims = {static_cast<uint64_t>(dim)};
  c.slots = c.length;
  c.content_id = fingerprint.substr(0, 64) + "/" + name.substr(0, 60);
  c.tool = "gc-train";
  auto slab = shared_slab(c, trust_owner, cache);
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

// A path as the file system resolves it (so that "./a.h5" and "a.h5" are one setting); a value
// that names no file (a built-in head spec) stays as it is.
std::string canonical(const std::string& path) { return files::absolute_path(path); }

// ---- trained modules ----------------------------------------------------------------------

std::vector<torch::Tensor> unique_params(const std::vector<torch::jit::Module*>& mods) {
  std::vector<torch::Tensor> params;
  std::set<const void*> seen;
  for (auto* m : mods)
    for (const auto& p : m->parameters())
      if (seen.insert(p.unsafeGetTensorImpl()).second) params.push_back(p);
  return params;
}

void save_module(torch::jit::Module& m, const std::string& path) {
  std::ostringstream bytes;
  try {
    m.save(bytes);
  } catch (const std::exception& e) {
    throw Error(Exit::internal, path, "cannot serialise the trained model: " + encode::torch_error_message(e.what()));
  }
  files::write_file_atomically(path, bytes.str());
}

// ---- evaluation ---------------------------------------------------------------------------

// Rows encoded of all an evaluation encodes, for a progress display (may be empty).
using EvalProgress = std::function<void(int64_t done, int64_t total)>;

// The representations of `inputs`, a chunk at a time; rows [done, done + n) of `total` to `progress`.
torch::Tensor encode_eval(const gc::Tower& tower, const std::vector<torch::Tensor>& inputs, int64_t chunk,
                          const EvalProgress& progress = {}, int64_t done = 0, int64_t total = 0) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> reps;
  int64_t n = inputs.front().size(0);
  for (int64_t a = 0; a < n; a += chunk) {
    reps.push_back(tower(gc::slice_rows(inputs, a, std::min(a + chunk, n))));
    if (progress) progress(done + std::min(a + chunk, n), total);
  }
  return torch::cat(reps);
}

// Per-query metrics of the rows `idx` (docs/gc-train.md, "Metrics"): each query against every
// passage of the set (pair modes), or each row against every other row (grouped mode); with a
// classifier (`loss` of a classifier kind, d.classes), also its top-k accuracy on every row.
eval::QueryTable evaluate(const Data& d, const torch::Tensor& idx, const gc::Tower& q_tower, const gc::Tower& p_tower,
                          bool grouped, const gc::LossConfig& loss, int64_t chunk, const std::vector<int64_t>& ks,
                          const EvalProgress& progress) {
  torch::NoGradGuard no_grad;
  auto norm = [&](torch::Tensor x) {
    return loss.similarity == gc::Similarity::cos
               ? torch::nn::functional::normalize(x, torch::nn::functional::NormalizeFuncOptions().dim(1))
               : x;
  };
  const int64_t n = idx.size(0), total = grouped ? n : 2 * n;
  auto reps = encode_eval(q_tower, query_inputs(d, idx), chunk, progress, 0, total);
  auto q = norm(reps).to(torch::kFloat64);
  const auto rows = row_list(idx);
  if (!grouped) {
    auto p = norm(encode_eval(p_tower, passage_inputs(d, idx, false), chunk, progress, n, total)).to(torch::kFloat64);
    return eval::retrieval(q, p, rows, ks);
  }
  auto table = eval::labelled(q, d.labels.index_select(0, idx.to(d.labels.device())), rows, ks);
  if (gc::is_classifier(loss.kind)) {
    auto logits = gc::class_logits(reps, loss).to(torch::kFloat64);
    eval::add_classification(table, logits, d.classes.index_select(0, idx.to(d.classes.device())), rows, ks);
  }
  return table;
}

// ---- stage: setup ---------------------------------------------------------------------------

// What the options resolve to once: the launch, devices and float type.
struct Setup {
  dist::Launch launch;
  int rank = 0, world = 1;
  torch::Device device{torch::kCPU}, cache_device{torch::kCPU};
  bool device_from_local_rank = false;  // --device cuda with no index, data parallel
  torch::Dtype float_type = torch::kFloat32;
  bool cached = false;
  ObjectiveSpec objective;
};

Setup resolve_setup(const TrainOptions& o) {
  Setup s;
  s.launch = dist::read_launch();
  s.rank = s.launch.rank;
  s.world = s.launch.world_size;
  s.device = encode::parse_device(o.device);
  // One GPU per process: a bare "cuda" means the launcher's LOCAL_RANK (checked once connected).
  if (s.launch.distributed() && s.device.is_cuda() && !s.device.has_index()) {
    s.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(s.launch.local_rank));
    s.device_from_local_rank = true;
  }
  s.cache_device = encode::parse_device(o.cache_device, "--cache-device");
  precision::allow_tf32(o.tf32);
  // Processes of one machine share its cores unless --threads says otherwise.
  encode::configure_threads(
      o.threads > 0 || s.launch.local_world_size <= 1
          ? o.threads
          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / s.launch.local_world_size));
  validate_options(o);
  precision::check(o.precision, s.device, "--precision");
  s.float_type = o.dtype == DType::f64 ? torch::kFloat64 : torch::kFloat32;
  s.cached = !o.cache.empty();
  s.objective = resolve_objective(o, s.cached ? !o.embeddings.empty() : !o.labels.empty());
  return s;
}

// Data parallelism: every rank connects to the job's store before anything can fail on one rank
// only, so that such a failure reaches the others (report_failure) instead of leaving them waiting.
// What every rank decides alike (options, the backend) is checked before, without waiting.
std::unique_ptr<dist::Group> connect(const TrainOptions& o, const Setup& s, TrainResult& result) {
  if (!s.launch.distributed()) return nullptr;
  dist::Backend backend = dist::choose_backend(o.dist_backend, s.device);
  if (!(o.dist_timeout > 0)) throw Error(Exit::usage, "--dist-timeout", "must be positive");
  if (o.batch_size < s.world)
    throw Error(Exit::usage, "--batch-size",
                std::to_string(o.batch_size) + " rows cannot be shared by " + std::to_string(s.world) + " ranks");
  auto group = std::make_unique<dist::Group>(
      s.launch, backend, std::chrono::milliseconds(static_cast<int64_t>(o.dist_timeout * 1000)), s.device);
  result.backend = dist::backend_choices().name(backend);
  return group;
}

// This rank's own resources, once connected: its GPU (a device index that does not exist is 69
// before any model is loaded).
void check_local_device(const Setup& s) {
  if (s.device_from_local_rank)
    encode::require_device_index(s.device, "--device cuda (LOCAL_RANK " + std::to_string(s.launch.local_rank) + ")");
}

// ---- stage: load data ------------------------------------------------------------------------

// The tokenizer file of a side, or "" when the side is not text.
std::string side_tokenizer(const TrainOptions& o, bool query) {
  const std::string& own = query ? o.query_tokenizer : o.passage_tokenizer;
  return own.empty() ? o.tokenizer : own;
}

// The texts of field `field` of `file` and how many each row holds (1, or k for lists).
std::vector<std::string> read_texts(const TrainOptions& o, const std::string& file, const std::string& field,
                                    bool lists, int64_t& per_row, int64_t& replaced) {
  source::FileOptions files = o.files;
  files.strict_utf8 = o.tokenize.strict_utf8;
  auto col = source::open_column(file, field, files, source::Role::text);
  const auto& ci = col->info();
  if (ci.dtype != DType::string || ci.shape.size() > (lists ? 2u : 1u))
    throw Error(Exit::data, file,
                "text field '" + field + "' must hold " +
                    (lists ? "a string or a list of strings per row" : "one string per row") +
                    " (a manifest field or an HDF5 string dataset)");
  per_row = ci.shape.size() == 2 ? ci.shape[1] : 1;
  replaced += col->utf8_replaced();
  auto texts = col->read_strings(0, ci.rows());
  for (std::size_t i = 0; i < texts.size(); ++i)
    if (texts[i].empty())
      throw Error(Exit::data,
                  file + ": field '" + field + "' row " + std::to_string(i / static_cast<std::size_t>(per_row)) +
                      (per_row > 1 ? " item " + std::to_string(i % static_cast<std::size_t>(per_row)) : ""),
                  "empty text");
  return texts;
}

// A text side: one field of `file` (and one of its hard negatives), tokenized.
// What tells versions of file `path` apart in a data cache's name (beside its absolute path): its
// size and modification time, NUL-terminated.
std::string file_stamp(const std::string& path) {
  std::string id;
  std::error_code ec;
  if (auto size = fs::file_size(path, ec); !ec) id += std::to_string(size) + '\0';
  if (auto t = fs::last_write_time(path, ec); !ec) id += std::to_string(t.time_since_epoch().count()) + '\0';
  return id;
}

// The element type and row shape a streamed column's converted rows have in a slab.
DType converted_slab_type(const source::ColumnInfo& ci, std::vector<uint64_t>* dims) {
  for (std::size_t i = 1; i < ci.shape.size(); ++i) dims->push_back(static_cast<uint64_t>(ci.shape[i]));
  return encode::converted_type(ci.dtype) == torch::kLong ? DType::i64 : DType::f32;
}

// --data-cache: a text side's token sequences (`texts`, then `negs`) in a sealed slab, tokenized
// by one process of the node and shared by all; named after what the tokens are made from (the
// file's identity, the fields, the tokenizer, the truncation), or NAME-`index` with
// --data-cache-keep.
std::shared_ptr<data_cache::SealedSlab> shared_tokens(const TrainOptions& o, const std::string& file,
                                                      const std::string& field, const std::string& neg_field,
                                                      const TextSide& t, const std::vector<std::string>& texts,
                                                      const std::vector<std::string>& negs, int index) {
  const std::string parts = std::string("text") + '\0' + canonical(file) + '\0' + file_stamp(file) + field + '\0' +
                            neg_field + '\0' + sha256_file(t.tokenizer) + '\0' +
                            std::to_string(text::effective_max_length(*t.tok, o.tokenize)) + '\0' +
                            (o.tokenize.strict_utf8 ? "strict" : "replace") + '\0';
  shm::CreateOptions want;
  want.content_id = data_cache::content_id(parts);
  want.name = o.data_cache.keep.empty() ? "gc-train-" + want.content_id.substr(want.content_id.size() - 16)
                                        : o.data_cache.keep + "-" + std::to_string(index);
  shm::validate_name(want.name);
  want.dtype = DType::i32;
  want.tool = "gc-train";
  want.temporary = o.data_cache.keep.empty();
  auto make = [&] {
    const std::string what = file + ": field '";
    auto rows = std::make_shared<text::TokenRows>(
        text::tokenize_rows(*t.tok, texts, o.tokenize, what + field + "'", o.threads));
    if (!negs.empty()) rows->extend(text::tokenize_rows(*t.tok, negs, o.tokenize, what + neg_field + "'", o.threads));
    data_cache::SealedItems items;
    items.count = static_cast<uint64_t>(rows->size());
    items.bytes = rows->ids.size() * 2 * sizeof(int32_t);
    items.fill = [rows](shm::Slab& slab) {
      std::vector<int32_t> buf;
      for (int64_t i = 0; i < rows->size(); ++i) {
        const auto from = rows->ids.begin() + rows->offsets[static_cast<std::size_t>(i)];
        const auto type_from = rows->type_ids.begin() + rows->offsets[static_cast<std::size_t>(i)];
        buf.assign(from, from + rows->length(i));
        buf.insert(buf.end(), type_from, type_from + rows->length(i));
        if (!slab.set(static_cast<uint64_t>(i), buf.data(), buf.size() * sizeof(int32_t)))
          throw Error(Exit::internal, slab.info().name, "sequence " + std::to_string(i) + " was not stored");
      }
    };
    return items;
  };
  return data_cache::SealedSlab::open(want, o.trust_slab_owner, make);
}

// A text side: fields[0] of `file` (and its hard negatives `negatives`), tokenized with `tok_path`
// in this process, or through the node's shared slab with --data-cache (`cache_index`: its
// --data-cache-keep number).
TextSide load_text(const TrainOptions& o, const Setup& s, const std::string& file,
                   const std::vector<std::string>& fields, const std::vector<std::string>& negatives,
                   const std::string& tok_path, const char* option, int64_t& replaced, int cache_index) {
  if (fields.size() != 1)
    throw Error(Exit::usage, option, "a text side reads one field, not " + std::to_string(fields.size()));
  if (negatives.size() > 1) throw Error(Exit::usage, "--negatives", "a text side reads one field of negatives");
  if (file.empty()) throw Error(Exit::usage, "--data", "text fields need --data (a manifest or an HDF5 file)");
  TextSide t;
  t.tokenizer = tok_path;
  t.tok = text::load(tok_path);
  t.device = s.device;
  if (o.tokenize.padding == text::Padding::max_length) t.length = text::effective_max_length(*t.tok, o.tokenize);
  int64_t one = 1;
  auto texts = read_texts(o, file, fields[0], false, one, replaced);
  t.rows = static_cast<int64_t>(texts.size());
  std::vector<std::string> neg;
  if (!negatives.empty()) {
    neg = read_texts(o, file, negatives[0], true, t.negatives, replaced);
    same_rows(file, fields[0], t.rows, negatives[0], static_cast<int64_t>(neg.size()) / t.negatives);
  }
  if (o.data_cache.mode != data_cache::Mode::none) {
    t.shared = shared_tokens(o, file, fields[0], negatives.empty() ? "" : negatives[0], t, texts, neg, cache_index);
    t.seqs.pad_id = t.tok->pad_id();
    return t;
  }
  t.seqs = text::tokenize_rows(*t.tok, texts, o.tokenize, file + ": field '" + fields[0] + "'", o.threads);
  if (!neg.empty())
    t.seqs.extend(text::tokenize_rows(*t.tok, neg, o.tokenize, file + ": field '" + negatives[0] + "'", o.threads));
  return t;
}

// A side whose one dataset is ragged (a variable-layout slab of token ids): its sequences as
// stored, padded per batch and chunk like text. Nothing for other datasets.
std::optional<TextSide> ragged_side(const TrainOptions& o, const Setup& s, const std::string& file,
                                    const std::vector<std::string>& fields, bool negatives) {
  if (fields.size() != 1 || source::kind_of(source::names_own_file(fields[0]) ? fields[0] : file) != source::Kind::shm)
    return std::nullopt;
  auto col = source::open_column(file, fields[0], o.files);
  if (!col->info().ragged) return std::nullopt;
  if (negatives)
    throw Error(Exit::usage, "--negatives",
                "hard negatives of token sequences are read from text fields (--tokenizer)");
  TextSide t;
  t.rows = col->info().rows();
  t.device = s.device;
  t.tokenizer = fields[0];
  std::vector<int64_t> values, offsets;
  col->read_ragged(0, t.rows, values, offsets);
  t.seqs = text::token_rows(values, std::move(offsets), o.tokenize.pad_id, fields[0]);
  return t;
}

// --data-cache: the slab of streamed column `r` (dataset `ds` of `file`), named after what its
// converted rows are made from (the file's identity, the dataset, the conversion); with
// --data-cache-keep NAME, NAME-0, NAME-1, ... in the order the datasets are opened.
// With smart:N,r only what identifies the rows is kept: the window depends on the split (open_windows).
void attach_data_cache(const TrainOptions& o, const std::string& file, const std::string& ds, Rows& r, int index) {
  const auto& ci = r.col->info();
  const std::string on_disk = file.empty() ? ds : file;  // a .npy file names itself
  std::string parts = canonical(on_disk) + '\0' + ds + '\0' + dtype_name(ci.dtype) + '\0' + std::to_string(r.scale) +
                      '\0' + file_stamp(on_disk);
  if (const image::Spec* spec = r.col->preprocess())
    for (const auto& [k, v] : spec->describe()) parts += k + '=' + v + '\0';
  if (o.data_cache.mode == data_cache::Mode::smart) {
    r.cache_parts = parts;
    return;
  }
  data_cache::Spec spec = o.data_cache;
  if (!spec.keep.empty()) spec.keep += "-" + std::to_string(index);
  std::vector<uint64_t> dims;
  const DType type = converted_slab_type(ci, &dims);
  r.cache = data_cache::RowCache::open(spec, data_cache::content_id(parts), static_cast<uint64_t>(ci.rows()), type,
                                       dims, o.trust_slab_owner);
}

// Raw datasets of `file` (slabs for names "shm:NAME"), or text fields for a side with a tokenizer.
// With `stream`, numeric datasets are only opened (run_train loads them or streams them).
Data load_raw(const TrainOptions& o, const Setup& s, const std::string& file, bool stream) {
  Data d;
  int cached = 0;
  auto load = [&](const std::string& ds) {
    if (file.empty() && !source::names_own_file(ds))
      throw Error(Exit::usage, "--data", "dataset '" + ds + "' needs --data");
    Rows r = open_rows(file, ds, o.input_scale, s.device, s.float_type, stream, o.files);
    if (o.data_cache.mode != data_cache::Mode::none) attach_data_cache(o, file, ds, r, cached++);
    return r;
  };
  int64_t replaced = 0;
  if (const auto tok = side_tokenizer(o, true); !tok.empty())
    d.query_text = load_text(o, s, file, o.query, {}, tok, "--query", replaced, cached++);
  else if (!(d.query_text = ragged_side(o, s, file, o.query, false)))
    for (const auto& q : o.query) d.query.push_back(load(q));
  if (o.passage.empty()) {  // raw grouped mode: one side and its labels
    d.labels = read_labels(file, o.labels, o.files, d.labels_warning);
  } else if (const auto tok = side_tokenizer(o, false); !tok.empty()) {
    d.passage_text = load_text(o, s, file, o.passage, o.negatives, tok, "--passage", replaced, cached++);
    d.hard_negatives = d.passage_text->negatives;
  } else if (!(d.passage_text = ragged_side(o, s, file, o.passage, !o.negatives.empty()))) {
    for (const auto& p : o.passage) d.passage.push_back(load(p));
    for (const auto& n : o.negatives) {
      d.negatives.push_back(load(n));
      // A manifest's path field holds one hard negative per row: [rows, 1, C, H, W].
      if (source::kind_of(file) == source::Kind::manifest) {
        auto& n_rows = d.negatives.back();
        n_rows.all.defined() ? void(n_rows.all = n_rows.all.unsqueeze(1)) : void(n_rows.one_per_row = true);
      }
    }
  }
  d.utf8_replaced = replaced;
  d.rows = d.query_text ? d.query_text->rows : d.query.front().rows();
  for (std::size_t i = 0; i < d.query.size(); ++i) same_rows(file, o.query[0], d.rows, o.query[i], d.query[i].rows());
  if (d.labels.defined()) same_rows(file, o.query[0], d.rows, o.labels, d.labels.size(0));
  if (d.passage_text) same_rows(file, o.query[0], d.rows, o.passage[0], d.passage_text->rows);
  for (std::size_t i = 0; i < d.passage.size(); ++i)
    same_rows(file, o.query[0], d.rows, o.passage[i], d.passage[i].rows());
  if (d.negatives.empty()) return d;
  if (o.negatives.size() != o.passage.size())
    throw Error(Exit::usage, "--negatives", "give one negatives dataset per passage dataset");
  for (std::size_t i = 0; i < o.negatives.size(); ++i) {
    same_rows(file, o.query[0], d.rows, o.negatives[i], d.negatives[i].rows());
    const auto ns = d.negatives[i].sizes(), ps = d.passage[i].sizes();
    if (ns.size() != ps.size() + 1 || !std::equal(ns.begin() + 2, ns.end(), ps.begin() + 1) ||
        ns[1] != d.negatives.front().sizes()[1])
      throw Error(Exit::data, file,
                  "negatives '" + o.negatives[i] + "' must be shaped [rows, k, ...] like the passages");
  }
  d.hard_negatives = d.negatives.front().sizes()[1];
  return d;
}

// Embeddings (and labels, grouped) of a cache file; through slabs when `shared`.
Data load_cached(const TrainOptions& o, const Setup& s, const std::string& path, bool grouped, bool shared,
                 std::string* fingerprint) {
  Data d;
  auto cinfo = cache::read_info(path, false);
  if (!cinfo.complete) throw Error(Exit::data, path, "incomplete cache");
  if (fingerprint) *fingerprint = cinfo.fingerprint;
  auto read_emb = [&](const std::string& name) {
    if (std::none_of(cinfo.embeddings.begin(), cinfo.embeddings.end(), [&](const auto& e) { return e.name == name; }))
      throw Error(Exit::data, path,
                  "no encoder named '" + name + "' in the cache (have: " + cache::encoder_names(cinfo) + ")");
    auto dev_it = o.cache_devices.find(name);
    torch::Device dev = dev_it == o.cache_devices.end()
                            ? s.cache_device
                            : encode::parse_device(dev_it->second, "--cache-device " + name + "=");
    Rows r;
    if (shared)
      r.all = shared_embeddings(d, o.cache_shm, o.trust_slab_owner, path, cinfo.fingerprint, name, cinfo.rows)
                  .to(dev, s.float_type);
    else
      r = open_rows(path, "/embeddings/" + name, 1.0, dev, s.float_type, o.stream);
    if (r.all.defined())
      r.all = r.all.reshape({cinfo.rows, -1});
    else
      r.flat = true;
    return r;
  };
  d.rows = cinfo.rows;
  if (cinfo.skipped > 0) {
    auto rows = read_all(path, "/skipped/rows", 1.0, torch::kCPU, s.float_type).to(torch::kLong);
    d.skipped.assign(rows.data_ptr<int64_t>(), rows.data_ptr<int64_t>() + rows.numel());
  }
  if (grouped) {
    if (!cinfo.labels) throw Error(Exit::data, path, "grouped mode needs labels in the cache (cache-fill --labels)");
    d.query.push_back(read_emb(o.embeddings));
    auto labels = read_all(path, "/labels", 1.0, torch::kCPU, s.float_type);
    if (labels.dim() != 1 && !(labels.dim() == 2 && labels.size(1) == 1))
      throw Error(Exit::data, path,
                  "/labels must hold one value per row, not rows of shape " +
                      shape_text(std::vector<int64_t>(labels.sizes().begin() + 1, labels.sizes().end())));
    d.labels = labels.to(torch::kLong).reshape({-1});
    return d;
  }
  d.query.push_back(read_emb(o.query_embeddings));
  d.passage.push_back(read_emb(o.passage_embeddings));
  if (d.query[0].sizes()[1] != d.passage[0].sizes()[1])
    throw Error(Exit::data, path,
                "embedding widths differ between sides (" + std::to_string(d.query[0].sizes()[1]) + " vs " +
                    std::to_string(d.passage[0].sizes()[1]) + "); one head cannot serve both");
  return d;
}

// The split without the rows cache-fill skipped: neither trained on nor evaluated.
RowSplit without_skipped(RowSplit split, const std::vector<int64_t>& skipped,
                         const std::function<void(const std::string&)>& info) {
  if (skipped.empty()) return split;
  std::set<int64_t> drop(skipped.begin(), skipped.end());
  auto keep = [&](std::vector<int64_t>& v) {
    v.erase(std::remove_if(v.begin(), v.end(), [&](int64_t r) { return drop.count(r) > 0; }), v.end());
  };
  keep(split.train);
  keep(split.eval);
  if (split.train.empty()) throw Error(Exit::data, "--cache", "every training row was skipped by cache-fill");
  info(std::to_string(drop.size()) + " rows skipped by cache-fill (unreadable images) are left out");
  return split;
}

// This process's hits and misses over every data cache, or nothing without one.
std::optional<data_cache::Stats> data_cache_stats(const Data& d) {
  std::optional<data_cache::Stats> sum;
  for (const auto* side : {&d.query, &d.passage, &d.negatives})
    for (const auto& r : *side) {
      if (!r.cache && !r.window) continue;
      if (!sum) sum.emplace();
      *sum += r.cache ? r.cache->stats() : r.window->stats();
    }
  for (const auto* t : {&d.query_text, &d.passage_text})
    if (*t && (*t)->shared) {
      if (!sum) sum.emplace();
      *sum += (*t)->shared->stats();
    }
  return sum;
}

// The seed of the SmartCache window's order of the training rows (the epochs' orders of the
// window use seed * 1000003 + epoch, as without it).
uint64_t window_order_seed(uint64_t seed) { return seed * 1000003ull - 1; }

// --data-cache smart:N,r: the window schedule over the training rows `train` (in a seeded order;
// as listed without --shuffle or when the window holds them all) and each streamed column's window cache, a slab named
// after the column's rows and the schedule, shared by the ranks of the node (each prepares its share).
void open_windows(const TrainOptions& o, const Setup& s, const std::vector<int64_t>& train, Data& d) {
  if (o.data_cache.mode != data_cache::Mode::smart || train.empty()) return;
  d.window = smart::make_plan(static_cast<int64_t>(train.size()), o.data_cache.cache_num, o.data_cache.replace_rate);
  if (o.drop_last && o.batch_size > d.window.cache_num)
    throw Error(Exit::usage, "--batch-size",
                std::to_string(o.batch_size) + " is larger than the " + std::to_string(d.window.cache_num) +
                    " rows of the SmartCache window (use a smaller batch or --no-drop-last)");
  auto rows = std::make_shared<std::vector<int64_t>>(train);
  if (o.shuffle && d.window.replace_num > 0) {  // a window of every row: the same batches as without
    const auto order = shuffle::seeded_permutation(static_cast<int64_t>(train.size()), window_order_seed(o.seed));
    for (std::size_t p = 0; p < order.size(); ++p) (*rows)[p] = train[static_cast<std::size_t>(order[p])];
  }
  d.window_rows = rows;
  const std::string schedule =
      "smart:" + std::to_string(d.window.cache_num) + "," + std::to_string(d.window.replace_num) + '\0' +
      sha256_hex(std::string(reinterpret_cast<const char*>(rows->data()), rows->size() * sizeof(int64_t)));
  for (auto* side : {&d.query, &d.passage, &d.negatives})
    for (auto& r : *side) {
      if (r.cache_parts.empty()) continue;
      const auto& ci = r.col->info();
      smart::WindowOptions w;
      w.plan = d.window;
      w.items = rows;
      w.dtype = converted_slab_type(ci, &w.dims);
      w.content_id = "gc-train-window:" + sha256_hex(r.cache_parts + schedule).substr(0, 32);
      w.name = "gc-train-" + w.content_id.substr(w.content_id.size() - 16);
      w.tool = "gc-train";
      w.trust_owner = o.trust_slab_owner;
      w.part = s.rank;
      w.parts = s.world;
      r.window =
          smart::WindowCache::open(w, [col = r.col, scale = r.scale](const std::vector<int64_t>& items, void* out) {
            auto t = encode::read_column_rows(*col, items, scale);
            std::memcpy(out, t.data_ptr(), t.nbytes());
          });
    }
}

// ---- stage: load models ----------------------------------------------------------------------

// The trained modules, their towers and parameters, and the settings a checkpoint must match.
struct Models {
  std::vector<torch::jit::Module> modules;  // 1 (tied or head) or 2 (separate)
  torch::jit::Module *q = nullptr, *p = nullptr;
  std::vector<torch::jit::Module*> distinct;
  std::vector<torch::Tensor> params;
  gc::Tower q_tower, p_tower;
  std::optional<torch::jit::Module> classifier;  // softmax, arcface, cosface (in `distinct` too)
  bool grouped = false;
  std::string mode;
  json config;
};

// A text side's tower: the encoder gets input_ids, attention_mask and, when its forward() takes
// three tensors, token_type_ids; padded to the longest, each chunk is trimmed to its own longest.
gc::Tower text_tower(torch::jit::Module* m, const std::string& name, const TextSide& t,
                     const std::string& vocab_table) {
  const std::size_t arity = encode::text_tensors(encode::forward_arity(*m), 0, 1, name);
  if (t.tok) encode::check_vocabulary(*m, name, *t.tok, t.tokenizer, vocab_table);
  const auto table = encode::token_table(*m, t.tok ? t.tok->vocab_size() : 0, vocab_table);
  if (table && !t.tok && !t.seqs.ids.empty()) {
    const int64_t top = *std::max_element(t.seqs.ids.begin(), t.seqs.ids.end());
    if (top >= table->rows)
      throw Error(Exit::data, name,
                  t.tokenizer + " holds token id " + std::to_string(top) + ", beyond its embedding table " +
                      table->name + " of " + std::to_string(table->rows) + " rows");
  }
  if (const auto pos = encode::position_table(*m, table ? table->name : "")) {
    const auto [i, n] = t.longest();
    if (n > pos->rows)
      throw Error(Exit::data, name,
                  t.describe(i) + " holds " + std::to_string(n) + " tokens but the position table " + pos->name +
                      " has " + std::to_string(pos->rows) + " rows: give --max-length " + std::to_string(pos->rows) +
                      " (or less)");
  }
  return [inner = tower_of(m, name), arity, trim = t.length == 0](const std::vector<torch::Tensor>& in) {
    std::vector<torch::Tensor> args(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(arity));
    if (trim) {
      encode::trim_padding(args.data(), args.size(), in[1]);
    }
    return inner(args);
  };
}

// Text sides: their towers, and their tokenisation among the settings a checkpoint must match.
void use_text(const TrainOptions& o, const Data& d, Models& m) {
  auto config = [&](const TextSide& t) {
    if (!t.tok) return json{{"ragged", true}, {"pad_id", t.seqs.pad_id}};
    return json{{"tokenizer_sha256", sha256_file(t.tokenizer)},
                {"max_length", text::effective_max_length(*t.tok, o.tokenize)},
                {"padding", text::padding_choices().name(o.tokenize.padding)},
                {"strict_utf8", o.tokenize.strict_utf8}};
  };
  if (d.query_text) {
    m.q_tower = text_tower(m.q, "query encoder", *d.query_text, o.tokenize.vocab_table);
    m.config["text"]["query"] = config(*d.query_text);
  }
  if (d.passage_text) {
    m.p_tower = text_tower(m.p, "passage encoder", *d.passage_text, o.tokenize.vocab_table);
    m.config["text"]["passage"] = config(*d.passage_text);
  }
}

// The training data and the modules that train on it.
Models load_models(const TrainOptions& o, const Setup& s, Data& data) {
  Models m;
  m.modules.reserve(2);
  std::vector<std::string> names;
  if (!s.cached) {
    m.grouped = !o.labels.empty();
    if (o.query.empty() || (o.passage.empty() && !m.grouped))
      throw Error(Exit::usage, "--query", "raw mode needs --query and --passage datasets (or --query and --labels)");
    if (m.grouped && !o.passage.empty())
      throw Error(Exit::usage, "--labels", "raw grouped mode trains one side: give --query and no --passage");
    if (m.grouped && !o.negatives.empty())
      throw Error(Exit::usage, "--negatives", "raw grouped mode has no passages: the other labels are the negatives");
    if (m.grouped && o.encoder.empty())
      throw Error(Exit::usage, "--encoder", "raw grouped mode trains one encoder: give --encoder");
    data = load_raw(o, s, o.data, true);  // loaded or streamed by run_train
    bool tied = !o.encoder.empty();
    if (tied == (!o.query_encoder.empty() || !o.passage_encoder.empty()))
      throw Error(Exit::usage, "--encoder", "give --encoder (tied) or both --query-encoder and --passage-encoder");
    if (!tied && (o.query_encoder.empty() || o.passage_encoder.empty()))
      throw Error(Exit::usage, "--query-encoder", "separate encoders need both --query-encoder and --passage-encoder");
    if (!tied && !o.out.empty() && o.passage_out.empty())
      throw Error(Exit::usage, "--passage-out", "separate encoders need --passage-out as well as --out");
    names = tied ? std::vector<std::string>{o.encoder} : std::vector<std::string>{o.query_encoder, o.passage_encoder};
    for (const auto& n : names) m.modules.push_back(encode::load_module(n, s.device));
    m.mode = m.grouped ? "raw-grouped" : tied ? "raw-tied" : "raw-separate";
    m.config["encoders"] =
        tied ? json{canonical(o.encoder)} : json{canonical(o.query_encoder), canonical(o.passage_encoder)};
  } else {
    m.grouped = !o.embeddings.empty();
    if (m.grouped == (!o.query_embeddings.empty() || !o.passage_embeddings.empty()))
      throw Error(
          Exit::usage, "--embeddings",
          "give --embeddings NAME (grouped by labels) or --query-embeddings and --passage-embeddings (aligned)");
    if (!m.grouped && (o.query_embeddings.empty() || o.passage_embeddings.empty()))
      throw Error(Exit::usage, "--query-embeddings", "aligned mode needs --query-embeddings and --passage-embeddings");
    std::string fingerprint;
    data = load_cached(o, s, o.cache, m.grouped, !o.cache_shm.empty(), &fingerprint);
    struct stat st;
    bool head_file = stat(o.head.c_str(), &st) == 0;
    m.modules.push_back(head_file ? encode::load_module(o.head, s.device)
                                  : build_head(o.head, data.query[0].sizes()[1]));
    names = {o.head};
    m.mode = m.grouped ? "cached-grouped" : "cached-aligned";
    m.config["cache_fingerprint"] = fingerprint;
    m.config["head"] = canonical(o.head);
  }
  for (std::size_t i = 0; i < m.modules.size(); ++i) {
    m.modules[i].to(s.device);
    m.modules[i].to(s.float_type);
    m.modules[i].train();
    if (o.gradcache) refuse_batchnorm(m.modules[i], names[i]);
  }
  m.q = &m.modules[0];
  m.p = m.modules.size() > 1 ? &m.modules[1] : &m.modules[0];
  m.distinct = {m.q};
  if (m.p != m.q) m.distinct.push_back(m.p);
  // Built-in heads are trained whole; a loaded module keeps its own requires_grad flags, so a
  // frozen part (requires_grad=False when it was saved) stays frozen.
  bool builtin_head = s.cached && !fs::exists(o.head);
  for (auto& p : unique_params(m.distinct)) {
    if (builtin_head) p.set_requires_grad(true);
    if (p.requires_grad()) m.params.push_back(p);
  }
  if (m.params.empty()) throw Error(Exit::data, names[0], "has no parameter that requires grad: nothing to train");
  m.q_tower = tower_of(m.q, "query encoder");
  m.p_tower = tower_of(m.p, "passage encoder");
  if (s.cached) {
    m.q_tower = [t = tower_of(m.q, "head"), dev = s.device](const std::vector<torch::Tensor>& in) {
      return t({in[0].to(dev)});
    };
    m.p_tower = m.q_tower;
  } else {
    use_text(o, data, m);
  }
  if (o.precision != Precision::fp32) {  // the towers under autocast; the loss sees float32
    auto mixed = [p = o.precision, dev = s.device, ft = s.float_type](gc::Tower t) -> gc::Tower {
      return [t = std::move(t), p, dev, ft](const std::vector<torch::Tensor>& in) {
        precision::Autocast region(p, dev);
        return t(in).to(ft);
      };
    };
    m.q_tower = mixed(m.q_tower);
    m.p_tower = mixed(m.p_tower);
  }
  return m;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainOptions& o,
                                                        const std::vector<torch::Tensor>& params) {
  if (o.optimizer == Optimizer::sgd)
    return std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
  return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
}

// ---- stage: checkpoints ----------------------------------------------------------------------

// --checkpoint-dir: locked by rank 0 for the whole run, read on --resume, written by rank 0 with
// every rank's generator state (gathering them is a collective: every rank calls save()).
class Checkpointer {
 public:
  Checkpointer(const TrainOptions& o, const Setup& s, dist::Group* group, std::string config)
      : o_(o),
        s_(s),
        group_(group),
        config_(std::move(config)),
        path_(o.checkpoint_dir.empty() ? "" : o.checkpoint_dir + "/checkpoint.pt") {
    if (path_.empty() || s.rank != 0) return;
    std::error_code ec;
    fs::create_directories(o.checkpoint_dir, ec);
    if (ec) throw Error(Exit::cant_create, o.checkpoint_dir, errno_text(ec.value()));
    lock_ = std::make_unique<files::OutputLock>(path_, "gc-train");  // a second run exits 75
  }

  const std::string& path() const { return path_; }
  bool enabled() const { return !path_.empty(); }

  // The step to start from: the checkpoint's with --resume, else 0; every rank must agree.
  int64_t resume(const std::vector<torch::Tensor>& params, torch::optim::Optimizer& opt, TrainResult& result,
                 const std::function<void(const std::string&)>& info) {
    int64_t start = 0;
    if (o_.resume) {
      if (path_.empty()) throw Error(Exit::usage, "--resume", "needs --checkpoint-dir");
      if (fs::exists(path_)) {
        start = checkpoint::load(path_, params, opt, config_, s_.rank, s_.world, &resumed_state_);
        result.checkpoint = path_;
        info("resuming at step " + std::to_string(start) + " from " + path_);
      } else {
        info("no checkpoint in " + o_.checkpoint_dir + "; starting from step 0");
      }
    }
    if (group_) {
      auto starts =
          group_->all_gather_rows(torch::tensor({start}, torch::kLong).view({1, 1}), std::vector<int64_t>(s_.world, 1));
      if (!starts.eq(start).all().item<bool>()) {
        std::string steps;
        for (int r = 0; r < s_.world; ++r) steps += (r ? ", " : "") + std::to_string(starts[r][0].item<int64_t>());
        throw Error(
            Exit::data, o_.checkpoint_dir.empty() ? "--resume" : o_.checkpoint_dir,
            "ranks would start at different steps (" + steps + "): every rank must see the same checkpoint directory");
      }
    }
    return start;
  }

  // A collective in a data-parallel run: every rank calls it. `best`: DIR/best.pt instead.
  void save(int64_t step, const std::vector<torch::Tensor>& params, torch::optim::Optimizer& opt, bool best = false) {
    auto mine = checkpoint::rng_state().unsqueeze(0);
    auto rngs = group_ ? group_->all_gather_rows(mine, std::vector<int64_t>(s_.world, 1)) : mine;
    if (s_.rank == 0)
      checkpoint::save(best ? o_.checkpoint_dir + "/best.pt" : path_, step, params, opt, config_, rngs,
                       state ? state() : "{}");
  }

  /// The progress record saved with every checkpoint (the best evaluation so far).
  std::function<std::string()> state;
  /// The record of the checkpoint --resume loaded ("{}" otherwise).
  const std::string& resumed_state() const { return resumed_state_; }

 private:
  const TrainOptions& o_;
  const Setup& s_;
  dist::Group* group_;
  std::string config_, path_, resumed_state_ = "{}";
  std::unique_ptr<files::OutputLock> lock_;
};

// ---- stage: evaluation -----------------------------------------------------------------------

// Held-out rows of the training data, or a separate file with the same layout (--eval-data);
// the per-query results of every evaluation for --eval-dump.
struct Evaluation {
  Data external;
  torch::Tensor idx;
  bool enabled = false, use_external = false;
  std::string dump;  // TSV lines so far

  EvalMetrics run(const TrainOptions& o, const Data& data, Models& m, const gc::LossConfig& loss, int64_t step,
                  const EvalProgress& progress) {
    for (auto* mod : m.distinct) mod->eval();
    auto table = evaluate(use_external ? external : data, idx, m.q_tower, m.p_tower, m.grouped, loss,
                          std::max(o.query_chunk, o.passage_chunk), o.eval_k, progress);
    for (auto* mod : m.distinct) mod->train();
    EvalMetrics r;
    r.present = true;
    r.rows = idx.size(0);
    r.queries = static_cast<int64_t>(table.rows.size());
    r.excluded = table.excluded;
    r.metrics = eval::summarise(table, o.eval_bootstrap, o.seed);
    if (!o.eval_dump.empty()) dump += eval::dump_tsv(table, step, dump.empty());
    return r;
  }

  void write_dump(const TrainOptions& o) const {
    if (!o.eval_dump.empty() && !dump.empty()) files::write_file_atomically(o.eval_dump, dump);
  }

  // Evaluation rows whose label has no class (classifier objectives).
  int64_t unknown_classes(const Data& data) const {
    const Data& d = use_external ? external : data;
    return d.classes.index_select(0, idx.to(d.classes.device())).lt(0).sum().item<int64_t>();
  }

  // The labels of the evaluation rows (grouped mode).
  std::vector<int64_t> labels(const Data& data) const {
    const Data& d = use_external ? external : data;
    return label_list(d.labels.index_select(0, idx.to(d.labels.device())));
  }
};

Evaluation prepare_evaluation(const TrainOptions& o, const Setup& s, const Data& data, const RowSplit& split,
                              bool grouped) {
  Evaluation e;
  e.use_external = !o.eval_data.empty();
  if (e.use_external) {
    if (o.eval_end > 0 || o.eval_split > 0)
      throw Error(Exit::usage, "--eval-data", "give one of --eval-data, --eval-rows and --eval-split");
    e.external =
        s.cached ? load_cached(o, s, o.eval_data, grouped, false, nullptr) : load_raw(o, s, o.eval_data, o.stream);
    for (std::size_t i = 0; i < data.query.size(); ++i)
      if (auto a = e.external.query[i].sizes(), b = data.query[i].sizes();
          !std::equal(a.begin() + 1, a.end(), b.begin() + 1, b.end()))
        throw Error(Exit::data, o.eval_data, "holds rows of another shape than the training data");
  }
  e.idx = e.use_external ? torch::arange(e.external.rows, torch::kLong) : torch::tensor(split.eval, torch::kLong);
  e.enabled = e.use_external || !split.eval.empty();
  for (const auto* out : {&o.eval_dump, &o.classifier_out}) {  // refused now, not after training
    if (out->empty() || s.rank != 0) continue;
    const std::string dir = files::dir_name(*out);
    if (!fs::is_directory(dir)) throw Error(Exit::cant_create, *out, "cannot create: no directory " + dir);
  }
  return e;
}

// --metrics: one JSON line per step, written through at once; write errors are exit 74. Opened as
// files::open_log() says: a planted link or FIFO is refused (73), never followed.
class MetricsLog {
 public:
  MetricsLog(const std::string& path, bool append) : path_(path) {
    if (!path.empty()) fd_ = files::open_log(path, append);
  }
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  ~MetricsLog() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const nlohmann::ordered_json& line) {
    if (fd_ < 0) return;
    const std::string text = line.dump() + "\n";
    files::write_all(fd_, text.data(), text.size(), path_);
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// ---- stage: the step loop --------------------------------------------------------------------

// Steps [start, total): batch b of epoch e is rows perm_e[bB, (b+1)B) of the training rows
// (perm_e = identity without shuffle); data parallel, rank r encodes [rB/W, (r+1)B/W) of each.
// With --data-cache smart:N,r epoch e trains on the window's N rows (keys [eR, eR+N), in the
// order perm_e of N), read through the window caches of the columns.
class Trainer {
 public:
  Trainer(const TrainOptions& o, const Setup& s, dist::Group* group, Data& data, Models& m,
          torch::optim::Optimizer& opt, const gc::LossConfig& loss, const RowSplit& split, const StepPlan& steps,
          precision::GradScaler& scaler)
      : o_(o),
        s_(s),
        group_(group),
        data_(data),
        m_(m),
        opt_(opt),
        loss_(loss),
        train_(split.train),
        n_train_(static_cast<int64_t>(split.train.size())),
        steps_(steps),
        scaler_(scaler) {
    mode_.gradcache = o.gradcache;
    if (group) {
      par_.rank = s.rank;
      par_.all_gather_rows = [group](const torch::Tensor& t, const std::vector<int64_t>& rows) {
        return group->all_gather_rows(t, rows);
      };
      par_.all_reduce_sum = [group](const std::vector<torch::Tensor>& ts) { group->all_reduce_sum(ts); };
    }
  }

  // Runs from `start`; returns the step reached. Stops early (result.interrupted) on SIGINT/SIGTERM
  // on any rank, after the same step everywhere.
  // `after_step(n)` runs after step n (1-based) on every rank: true ends the run there.
  int64_t run(int64_t start, Checkpointer& ckpt, MetricsLog& metrics, MetricsLog& batch_log, TrainResult& result,
              const TrainCallbacks& cb, const std::function<void(const std::string&)>& info,
              const std::function<bool(int64_t)>& after_step) {
    info_ = info;
    // --stream: the next batches' rows are read (and converted) on a thread while a step computes.
    std::unique_ptr<OrderedPrefetcher<BatchInputs>> ahead;
    if (o_.stream)
      ahead = std::make_unique<OrderedPrefetcher<BatchInputs>>(
          steps_.total - start, 1, 2, [this, start, cache = std::make_shared<EpochPerm>()](int64_t k) {
            window_boundary(start, start + k);
            return inputs_of(rows_of_step(start + k, *cache));
          });
    int64_t s = start;
    for (; s < steps_.total; ++s) {
      if (group_ ? stop_all_ : interrupt_requested()) {
        result.interrupted = true;
        break;
      }
      if (!ahead) window_boundary(start, s);
      // The batch's rows: the reader's (it computed them with the inputs), or the loop's own.
      const auto t_wait = Clock::now();
      BatchInputs in = ahead ? ahead->next() : BatchInputs{rows_of_step(s, perm_), {}, {}};
      const double wait_s = seconds_since(t_wait);  // --stream: how long the step waited for its data
      if (data_.window_rows && (s == start || s % steps_.per_epoch == 0)) first_waits_.push_back(wait_s);
      const torch::Tensor idx = in.batch.idx;
      batch_log.write({{"step", s + 1}, {"epoch", s / steps_.per_epoch}, {"rows", row_list(idx)}});
      if (group_) {
        group_->set_context("step " + std::to_string(s + 1));
        const int64_t n = idx.size(0);
        if (n < s_.world) {
          info("step " + std::to_string(s + 1) + ": skipped: its batch has " + std::to_string(n) +
               " row(s), fewer than the " + std::to_string(s_.world) + " ranks");
          continue;
        }
        par_.rows.clear();
        for (int r = 0; r < s_.world; ++r) par_.rows.push_back((r + 1) * n / s_.world - r * n / s_.world);
      }
      auto t_step = Clock::now();
      double lr = scheduled_lr(o_, s, steps_.total);
      if (!ahead) in = inputs_of(std::move(in.batch));
      double l = step(s, idx, std::move(in), lr, ckpt);
      result.last_loss = l;
      samples_ += idx.size(0);
      double step_s = seconds_since(t_step);
      metrics.write({{"step", s + 1},
                     {"epoch", s / steps_.per_epoch},
                     {"loss", l},
                     {"lr", lr},
                     {"seconds", step_s},
                     {"wait_seconds", wait_s},
                     {"samples_per_second", idx.size(0) / step_s}});
      if (cb.progress && s_.rank == 0) cb.progress(s + 1, steps_.total, l);
      const bool stop = after_step(s + 1);
      if (ckpt.enabled() && o_.checkpoint_every > 0 && (s + 1) % o_.checkpoint_every == 0) {
        ckpt.save(s + 1, m_.params, opt_);
        result.checkpoint = ckpt.path();
      }
      if (stop) {
        result.stopped_early = true;
        return s + 1;
      }
    }
    return s;
  }

  int64_t samples() const { return samples_; }

  // The epochs this run began, with the wait of each one's first step.
  std::vector<WindowEpoch> window_epochs() const {
    std::lock_guard<std::mutex> lk(boundaries_mu_);
    std::vector<WindowEpoch> out;
    for (std::size_t i = 0; i < boundaries_.size() && i < first_waits_.size(); ++i) {
      out.push_back(boundaries_[i]);
      out.back().wait_seconds = first_waits_[i];
    }
    return out;
  }

 private:
  // One epoch's order of the training rows (positions in the split's list), kept while its steps
  // run (one per thread); none without shuffling.
  struct EpochPerm {
    int64_t epoch = -1;
    std::vector<int64_t> perm;
  };

  // A batch: its rows, and (--data-cache smart) their keys in the SmartCache window.
  struct Batch {
    torch::Tensor idx;
    std::vector<int64_t> keys;
  };

  // The rows of step s's batch; `cache` holds the permutation of the epoch last asked for. Only
  // the permutation grows with the data (8 bytes a row); the batch's rows are looked up from it.
  // No torch operation here: the streaming reader calls this on its own thread (shuffle.h).
  Batch rows_of_step(int64_t s, EpochPerm& cache) const {
    const bool window = data_.window_rows != nullptr;
    const int64_t n = window ? data_.window.cache_num : n_train_;
    int64_t epoch = s / steps_.per_epoch, b = s % steps_.per_epoch;
    if (o_.shuffle && epoch != cache.epoch) {
      std::vector<int64_t>().swap(cache.perm);  // freed before the next one is drawn
      cache.epoch = epoch;
      cache.perm = shuffle::seeded_permutation(n, o_.seed * 1000003ull + static_cast<uint64_t>(epoch));
    }
    const int64_t first = b * o_.batch_size, end = std::min((b + 1) * o_.batch_size, n);
    Batch out{torch::empty({end - first}, torch::kLong), {}};
    auto* rows = out.idx.data_ptr<int64_t>();
    for (int64_t i = first; i < end; ++i) {
      const int64_t p = o_.shuffle ? cache.perm[static_cast<std::size_t>(i)] : i;
      if (!window) {
        rows[i - first] = train_[static_cast<std::size_t>(p)];
        continue;
      }
      const int64_t key = data_.window.first_key(epoch) + p;
      out.keys.push_back(key);
      rows[i - first] = (*data_.window_rows)[static_cast<std::size_t>(key % data_.window.dataset_len)];
    }
    return out;
  }

  // --data-cache smart: before the rows of step s are read (by the thread that reads them), the
  // first step of an epoch begins it for every window cache (the replacer moves on to the rows
  // entering next, unless it is the last epoch), recording what the boundary found.
  void window_boundary(int64_t start, int64_t s) {
    if (!data_.window_rows || !(s == start || s % steps_.per_epoch == 0)) return;
    const int64_t e = s / steps_.per_epoch;
    const bool next = (e + 1) * steps_.per_epoch < steps_.total;
    WindowEpoch w;
    w.epoch = e;
    for (auto* side : {&data_.query, &data_.passage, &data_.negatives})
      for (auto& r : *side)
        if (r.window) w.late_rows = std::max(w.late_rows, r.window->begin_epoch(e, false, next).late);
    std::lock_guard<std::mutex> lk(boundaries_mu_);
    boundaries_.push_back(w);
  }

  // This process's share of the batch `idx`: all of it, or rank r's [rB/W, (r+1)B/W) (empty when
  // the batch has fewer rows than ranks: the step is skipped).
  torch::Tensor own_rows(const torch::Tensor& idx) const {
    if (!group_) return idx;
    const int64_t n = idx.size(0);
    if (n < s_.world) return idx.slice(0, 0, 0);
    return idx.slice(0, s_.rank * n / s_.world, (s_.rank + 1) * n / s_.world);
  }

  // The batch and the encoders' inputs for this process's share of it, read and converted (a
  // streamed side reads them now); no inputs when the step is skipped.
  struct BatchInputs {
    Batch batch;
    std::vector<torch::Tensor> query, passage;
  };
  BatchInputs inputs_of(Batch b) const {
    const torch::Tensor own = own_rows(b.idx);
    if (own.numel() == 0) return {std::move(b), {}, {}};
    std::vector<int64_t> keys;  // the share's keys: the same slice of the batch
    if (!b.keys.empty()) {
      const int64_t n = b.idx.size(0), r = group_ ? s_.rank : 0;
      const int64_t lo = group_ ? r * n / s_.world : 0;
      keys.assign(b.keys.begin() + lo, b.keys.begin() + lo + own.size(0));
    }
    const auto* k = keys.empty() ? nullptr : &keys;
    auto q = query_inputs(data_, own, k);
    auto p = m_.grouped ? std::vector<torch::Tensor>{} : passage_inputs(data_, own, true, k);
    return {std::move(b), std::move(q), std::move(p)};
  }

  // One optimiser step on the batch `idx`, of which this process encodes `in`; returns the loss.
  double step(int64_t s, const torch::Tensor& idx, BatchInputs in, double lr, const Checkpointer& ckpt) {
    for (auto& g : opt_.param_groups()) g.options().set_lr(lr);
    opt_.zero_grad();
    gc::SideBatch qb{m_.q_tower, std::move(in.query), o_.query_chunk};
    gc::SideBatch pb{m_.p_tower, std::move(in.passage), o_.passage_chunk};
    // The whole batch's labels (every rank scores its anchors against all rows); classes for a classifier.
    torch::Tensor labels =
        m_.grouped ? (m_.classifier ? data_.classes : data_.labels).index_select(0, idx) : torch::Tensor();
    gc::LossConfig loss = loss_;
    loss.grad_scale = scaler_.scale();  // fp16: the loss scaled, the gradients unscaled below
    double l = gc::step(qb, pb, labels, loss, mode_, group_ ? &par_ : nullptr);
    if (group_) {
      // The one all-reduce of parameter gradients per step; an interrupt flag rides along.
      std::vector<torch::Tensor> sums;
      for (auto& p : m_.params) {
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
        sums.push_back(p.grad());
      }
      auto flag = torch::full({1}, interrupt_requested() ? 1.0 : 0.0,
                              torch::TensorOptions().dtype(m_.params[0].dtype()).device(m_.params[0].device()));
      sums.push_back(flag);
      group_->all_reduce_sum(sums);
      stop_all_ = flag.item<double>() > 0;
    }
    if (!std::isfinite(l))
      throw Error(Exit::data, "step " + std::to_string(s),
                  "loss is " + std::string(std::isnan(l) ? "NaN" : "infinite") +
                      (ckpt.enabled() ? "; the last good checkpoint is kept in " + ckpt.path() : ""));
    const double scale = scaler_.scale();
    if (!scaler_.update(scaler_.unscale(m_.params))) {  // the same decision on every rank: summed gradients
      char buf[128];
      std::snprintf(buf, sizeof buf,
                    "step %lld: gradients overflow float16 at loss scale %g: step skipped, scale halved",
                    static_cast<long long>(s + 1), scale);
      if (s_.rank == 0 && info_) info_(buf);
      opt_.zero_grad();
      return l;
    }
    if (o_.clip_norm > 0) torch::nn::utils::clip_grad_norm_(m_.params, o_.clip_norm);
    opt_.step();
    return l;
  }

  const TrainOptions& o_;
  const Setup& s_;
  dist::Group* group_;
  Data& data_;
  Models& m_;
  torch::optim::Optimizer& opt_;
  const gc::LossConfig& loss_;
  const std::vector<int64_t>& train_;  // the split's training rows (alive for the whole run)
  EpochPerm perm_;                     // the step loop's, without --stream (the reader computes the rows then)
  int64_t n_train_;
  StepPlan steps_;
  int64_t samples_ = 0;
  gc::StepMode mode_;
  gc::Parallel par_;
  precision::GradScaler& scaler_;
  bool stop_all_ = false;  // data parallel: some rank was interrupted, all stop after the same step
  mutable std::mutex boundaries_mu_;
  std::vector<WindowEpoch> boundaries_;  // --data-cache smart: the epochs begun (by the reading thread)
  std::vector<double> first_waits_;      // and their first steps' waits (by the step loop)
  std::function<void(const std::string&)> info_;
};

// ---- stage: evaluations during training ------------------------------------------------------

// --out (and --passage-out): the trained modules as TorchScript, written by rank 0.
void save_outputs(const TrainOptions& o, Models& m) {
  if (!o.out.empty()) {
    m.q->eval();
    save_module(*m.q, o.out);
    m.q->train();
  }
  if (m.p != m.q && !o.passage_out.empty()) {
    m.p->eval();
    save_module(*m.p, o.passage_out);
    m.p->train();
  }
  if (m.classifier && !o.classifier_out.empty()) save_module(*m.classifier, o.classifier_out);
}

// Every evaluation of a run: before training, every --eval-every steps, after training. Rank 0
// evaluates; with --select-best a new best writes --out at once (and DIR/best.pt, which every rank
// takes part in), and --early-stop ends the run when the best has not moved for long enough.
class Monitor {
 public:
  Monitor(const TrainOptions& o, const Setup& s, dist::Group* group, Evaluation& eval, const Data& data, Models& m,
          const gc::LossConfig& loss, MetricsLog& log, Checkpointer& ckpt, const TrainCallbacks& cb, BestRecord& best)
      : o_(o),
        s_(s),
        group_(group),
        eval_(eval),
        data_(data),
        m_(m),
        loss_(loss),
        log_(log),
        ckpt_(ckpt),
        cb_(cb),
        best_(best) {
    if (!o.select_best.empty()) {
      const auto keys = metric_keys(m.grouped, o.eval_k, m.classifier.has_value());
      if (std::find(keys.begin(), keys.end(), o.select_best) == keys.end()) {
        std::string list;
        for (const auto& k : keys) list += (list.empty() ? "" : ", ") + k;
        throw Error(Exit::usage, "--select-best",
                    "'" + o.select_best + "' is not a metric of this mode (" + list + ")");
      }
      best_.metric = o.select_best;
    }
  }

  // Evaluates at `step` (every rank calls it; only rank 0 computes). `out`, when given, receives
  // the metrics. Returns true on rank agreement that --early-stop's patience has run out.
  bool evaluate(int64_t step, int64_t epoch, EvalMetrics* out = nullptr, bool during = false) {
    bool is_best = false, stop = false;
    if (s_.rank == 0) {
      auto r = eval_.run(o_, data_, m_, loss_, step, cb_.eval_progress);
      if (!best_.metric.empty()) {
        is_best = update_best(best_, value_of(r, best_.metric), step);
        stop = patience_exhausted(best_, o_.early_stop);
        if (is_best) save_outputs(o_, m_);
      }
      log_.write({{"step", step}, {"epoch", epoch}, {"eval", eval_json(r)}});
      if (cb_.evaluated && during) cb_.evaluated(step, r, is_best);
      last_ = r;
      if (out) *out = std::move(r);
    }
    last_step_ = step;  // on every rank: final_evaluation() must agree on whether to evaluate
    if (group_) {       // rank 0's decisions, for the collective below and the loop
      auto flags = torch::tensor({is_best ? 1.0 : 0.0, stop ? 1.0 : 0.0}, torch::kFloat64);
      std::vector<torch::Tensor> t{flags.to(m_.params[0].device())};
      group_->broadcast(t, 0);
      is_best = t[0][0].item<double>() > 0;
      stop = t[0][1].item<double>() > 0;
    }
    if (is_best && ckpt_.enabled()) ckpt_.save(step, m_.params, *opt_, true);
    return stop;
  }

  // The loop's hook after step n: an evaluation when --eval-every says so (not at the last step,
  // which the final evaluation covers).
  bool after_step(int64_t n, int64_t total, int64_t per_epoch) {
    if (!eval_.enabled || o_.eval_every <= 0 || n % o_.eval_every != 0 || n >= total) return false;
    return evaluate(n, (n - 1) / per_epoch, nullptr, true);
  }

  void set_optimizer(torch::optim::Optimizer* opt) { opt_ = opt; }

  // The evaluation after training, at `step`: the last one again when it was at that step (a run
  // that --early-stop ended), without evaluating twice.
  EvalMetrics final_evaluation(int64_t step, int64_t epoch) {
    if (last_step_ == step) return last_;
    EvalMetrics r;
    evaluate(step, epoch, &r);
    return r;
  }

 private:
  static double value_of(const EvalMetrics& r, const std::string& key) {
    for (const auto& x : r.metrics)
      if (x.key == key) return x.value;
    return -INFINITY;  // no queries: never a best
  }

  const TrainOptions& o_;
  const Setup& s_;
  dist::Group* group_;
  Evaluation& eval_;
  const Data& data_;
  Models& m_;
  const gc::LossConfig& loss_;
  MetricsLog& log_;
  Checkpointer& ckpt_;
  const TrainCallbacks& cb_;
  BestRecord& best_;
  torch::optim::Optimizer* opt_ = nullptr;
  EvalMetrics last_;  // rank 0: the latest evaluation
  int64_t last_step_ = -1;
};

gc::LossConfig loss_config(const TrainOptions& o, const ObjectiveSpec& spec) {
  gc::LossConfig c;
  c.similarity = o.similarity;
  c.temperature = o.temperature;
  switch (spec.kind) {
    case Objective::supcon:
      c.kind = gc::LossKind::supcon;
      break;
    case Objective::softmax:
      c.kind = gc::LossKind::softmax;
      break;
    case Objective::arcface:
      c.kind = gc::LossKind::arcface;
      break;
    case Objective::cosface:
      c.kind = gc::LossKind::cosface;
      break;
    case Objective::triplet:
      c.kind = spec.mining == Mining::semi_hard ? gc::LossKind::triplet_semi_hard : gc::LossKind::triplet_batch_hard;
      break;
    default:
      c.kind = spec.symmetric ? gc::LossKind::symmetric : gc::LossKind::infonce;
  }
  c.margin = spec.margin;
  c.scale = spec.scale;
  c.anchor_chunk = o.loss_chunk > 0 ? o.loss_chunk : o.query_chunk;
  return c;
}

// The classifier of softmax, arcface and cosface: one class per distinct label of the training
// rows (ascending), as wide as the representations. Rows whose label training lacks get class -1
// (wrong in every evaluation). Built before the first broadcast so that every rank starts alike.
void attach_classifier(const Setup& s, const RowSplit& split, Data& data, Models& m, gc::LossConfig& loss,
                       std::vector<Data*> also) {
  auto train_labels = label_list(data.labels.index_select(0, torch::tensor(split.train, torch::kLong)));
  std::set<int64_t> distinct(train_labels.begin(), train_labels.end());
  const std::vector<int64_t> classes(distinct.begin(), distinct.end());
  also.push_back(&data);
  for (Data* d : also) {
    auto lut = label_list(d->labels);
    for (auto& l : lut) {
      auto it = std::lower_bound(classes.begin(), classes.end(), l);
      l = it != classes.end() && *it == l ? it - classes.begin() : -1;
    }
    d->classes = torch::tensor(lut, torch::kLong);
  }
  int64_t dim = 0;
  {  // the representation width: one row through the tower, in eval mode (no dropout draws)
    torch::NoGradGuard no_grad;
    m.q->eval();
    dim = m.q_tower(query_inputs(data, torch::tensor({split.train.front()}, torch::kLong))).size(1);
    m.q->train();
  }
  m.classifier = gc::make_classifier(loss.kind, classes, dim, loss.scale, s.float_type, s.device);
  m.classifier->train();
  m.distinct.push_back(&*m.classifier);
  for (const auto& p : m.classifier->parameters()) m.params.push_back(p);
  gc::use_classifier(loss, *m.classifier);
}

// What a checkpoint must have been written with to be resumed by this run.
std::string checkpoint_config(const TrainOptions& o, const Setup& s, Models& m, const RowSplit& split) {
  json config = m.config;
  config["mode"] = m.mode;
  config["data"] = canonical(s.cached ? o.cache : o.data);
  config["loss"] = {similarity_choices().name(o.similarity), o.temperature, o.symmetric};
  const ObjectiveSpec& obj = s.objective;
  if (obj.kind != Objective::infonce && obj.kind != Objective::supcon)  // as before objectives existed
    config["objective"] = {obj.name(), obj.margin, obj.scale, mining_choices().name(obj.mining)};
  if (!o.labels.empty()) config["labels"] = o.labels;
  config["batch"] = {o.batch_size, o.shuffle, o.drop_last, o.seed};
  config["optimizer"] = {optimizer_choices().name(o.optimizer), o.lr, o.momentum, o.weight_decay, o.warmup_steps,
                         schedule_choices().name(o.schedule)};
  config["eval"] = {split.eval_begin, split.eval_end, canonical(o.eval_data), o.eval_split, o.stratify};
  if (!o.select_best.empty()) config["select_best"] = {o.select_best, o.eval_k};
  config["dtype"] = float_dtype_choices().name(o.dtype);
  if (o.precision != Precision::fp32) config["precision"] = precision_choices().name(o.precision);
  if (!s.cached) {  // a cache has a content fingerprint; raw files are told apart by size and time
    json stamps = json::object();
    for (const std::string* f : {&o.data, &o.eval_data}) {
      std::error_code size_ec, time_ec;
      if (f->empty() || source::kind_of(*f) == source::Kind::shm) continue;
      const auto bytes = fs::file_size(*f, size_ec);
      const auto time = fs::last_write_time(*f, time_ec).time_since_epoch().count();
      if (!size_ec && !time_ec) stamps[canonical(*f)] = {{"bytes", bytes}, {"modified", time}};
    }
    if (!stamps.empty()) config["data_files"] = stamps;
  }
  return config.dump();
}

// Memory the kernel says is available for new allocations (MemAvailable), or 0 when unknown.
uint64_t available_memory() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

// The training data's opened numeric datasets: streamed with --stream, or when loading them
// converted would take more than 80% of the available memory (the same result either way; o.stream
// then says so for the step loop); otherwise loaded whole now. Text sides are tokenized either way.
void load_or_stream(TrainOptions& o, Data& d, const std::function<void(const std::string&)>& info) {
  if (o.stream) return;
  uint64_t need = 0;
  for (const auto* side : {&d.query, &d.passage, &d.negatives})
    for (const auto& r : *side) need += r.converted_bytes();
  const uint64_t have = available_memory();
  if (have > 0 && need > have / 10 * 8) {
    o.stream = true;
    info("the converted inputs need " + format_size(need) + " of memory but " + format_size(have) +
         " is available: streaming them (--stream)");
    return;
  }
  for (auto* side : {&d.query, &d.passage, &d.negatives})
    for (auto& r : *side)
      if (r.col) r.load();
}

// Rank 0's outputs after a run that was not interrupted: --out (unless --select-best wrote the best
// already; with no best ever selected, the last model and a warning) and --eval-dump.
void write_final_outputs(const TrainOptions& o, Models& m, Evaluation& eval, const BestRecord& best,
                         const TrainCallbacks& cb) {
  if (!o.select_best.empty() && best.step < 0 && cb.warn)
    cb.warn("--select-best: '" + o.select_best +
            "' had no evaluation queries at any evaluation, so no model was selected; --out holds the last one");
  if (o.select_best.empty() || best.step < 0) save_outputs(o, m);
  eval.write_dump(o);
}

}  // namespace

// Warnings about the labels of grouped mode (rank 0, with an evaluation): classes missing from
// one side of the split, and evaluation rows a classifier cannot predict.
void warn_about_labels(const std::vector<int64_t>& labels, const RowSplit& split, Evaluation& eval, Data& data,
                       const Models& m, const std::function<void(const std::string&)>& warn) {
  for (const auto& w : label_balance_warnings(pick(labels, split.train), eval.labels(data))) warn(w);
  if (!m.classifier) return;
  const auto lost = eval.unknown_classes(data);
  if (lost > 0)
    warn(std::to_string(lost) + " evaluation rows have labels no training row has: the classifier cannot " +
         "predict them and they count as wrong in accuracy_at_k");
}

namespace {

// Everything after connecting, on every rank; `group` is null for one process.
void train(TrainOptions& o, const Setup& s, dist::Group* group, const TrainCallbacks& cb, TrainResult& result) {
  auto info = [&](const std::string& msg) {
    if (cb.info && s.rank == 0) cb.info(msg);
  };
  check_local_device(s);
  torch::manual_seed(o.seed);

  Data data;
  Models m = load_models(o, s, data);
  load_or_stream(o, data, info);
  result.mode = m.mode;
  result.objective = s.objective.name();
  result.utf8_replaced = data.utf8_replaced;
  if (data.utf8_replaced > 0 && cb.warn && s.rank == 0)
    cb.warn(std::to_string(data.utf8_replaced) +
            " ill-formed UTF-8 sequences in the text fields replaced with U+FFFD (--strict-utf8 refuses them)");
  if (!data.labels_warning.empty() && cb.warn && s.rank == 0) cb.warn(data.labels_warning);
  gc::LossConfig loss = loss_config(o, s.objective);
  std::vector<int64_t> labels = m.grouped ? label_list(data.labels) : std::vector<int64_t>{};
  const RowSplit split = without_skipped(split_rows(o, data.rows, m.grouped ? &labels : nullptr), data.skipped, info);
  if (m.grouped) require_two_classes(s.objective, pick(labels, split.train));
  Evaluation eval = prepare_evaluation(o, s, data, split, m.grouped);
  if (s.objective.classifier) {
    attach_classifier(s, split, data, m, loss,
                      eval.use_external ? std::vector<Data*>{&eval.external} : std::vector<Data*>{});
    result.classes = m.classifier->attr("labels").toTensor().size(0);
  }
  if (group) {
    group->start();
    info("rank 0 of " + std::to_string(s.world) + " (" + result.backend + "); every rank encodes 1/" +
         std::to_string(s.world) + " of each batch of " + std::to_string(o.batch_size));
    // Same start everywhere (rank 0's weights), then each rank its own randomness (dropout).
    group->broadcast(unique_params(m.distinct), 0);
    if (s.rank > 0) torch::manual_seed(o.seed + 1000003ull * static_cast<uint64_t>(s.rank));
  }
  open_windows(o, s, split.train, data);
  result.window_rows = data.window.cache_num;
  result.window_replace = data.window.replace_num;
  const StepPlan steps =
      plan_steps(o, data.window_rows ? data.window.cache_num : static_cast<int64_t>(split.train.size()));
  result.total_steps = steps.total;
  auto opt = make_optimizer(o, m.params);
  precision::GradScaler scaler(o.precision == Precision::fp16);
  Checkpointer ckpt(o, s, group, checkpoint_config(o, s, m, split));
  ckpt.state = [&result, &scaler] {
    auto j = json::parse(best_to_json(result.best));
    if (scaler.enabled()) j["grad_scale"] = scaler.state();
    return j.dump();
  };
  const int64_t start = ckpt.resume(m.params, *opt, result, info);
  result.start_step = start;
  if (auto st = json::parse(ckpt.resumed_state(), nullptr, false); st.is_object() && st.contains("grad_scale"))
    scaler.restore(st["grad_scale"].get<std::string>());
  MetricsLog metrics(s.rank == 0 ? o.metrics : "", start > 0);
  MetricsLog batch_log(s.rank == 0 ? o.batch_log : "", start > 0);
  result.best = best_from_json(ckpt.resumed_state());
  Monitor monitor(o, s, group, eval, data, m, loss, metrics, ckpt, cb, result.best);
  monitor.set_optimizer(opt.get());
  if (m.grouped && eval.enabled && cb.warn && s.rank == 0) warn_about_labels(labels, split, eval, data, m, cb.warn);
  std::vector<int64_t>().swap(labels);  // per-row memory: only what the loop needs stays
  if (eval.enabled && start == 0) {
    monitor.evaluate(0, 0, &result.eval_before);
    if (s.rank == 0 && cb.evaluated_before) cb.evaluated_before(result.eval_before);
  }

  Trainer trainer(o, s, group, data, m, *opt, loss, split, steps, scaler);
  auto t_loop = Clock::now();
  const int64_t reached = trainer.run(start, ckpt, metrics, batch_log, result, cb, info,
                                      [&](int64_t n) { return monitor.after_step(n, steps.total, steps.per_epoch); });
  result.steps_done = reached;
  result.window_epochs = trainer.window_epochs();
  result.data_cache = data_cache_stats(data);
  double loop_s = seconds_since(t_loop);
  result.samples_per_second = loop_s > 0 ? trainer.samples() / loop_s : 0;
  result.seconds_per_epoch = reached > start ? loop_s / (reached - start) * steps.per_epoch : 0;
  if (eval.enabled && !result.interrupted) {
    if (group) group->set_context("final evaluation");
    result.eval_after = monitor.final_evaluation(reached, reached > 0 ? (reached - 1) / steps.per_epoch : 0);
  }
  if (ckpt.enabled() && (result.interrupted || result.stopped_early || reached == steps.total) && reached > start) {
    if (group) group->set_context("final checkpoint");
    ckpt.save(reached, m.params, *opt);
    result.checkpoint = ckpt.path();
  }
  if (group) {
    result.collectives = group->collectives();
    result.collective_seconds = group->collective_seconds();
  }
  if (!result.interrupted && s.rank == 0) write_final_outputs(o, m, eval, result.best, cb);
}

}  // namespace

TrainResult run_train(const TrainOptions& given, const TrainCallbacks& cb) {
  auto t_start = Clock::now();
  TrainOptions o = given;
  const Setup s = resolve_setup(o);
  if (o.data_cache.mode != data_cache::Mode::none) o.stream = true;  // a data cache keeps streamed rows
  TrainResult result;
  result.rank = s.rank;
  result.world_size = s.world;
  auto group = connect(o, s, result);
  try {
    train(o, s, group.get(), cb, result);
  } catch (const std::exception& e) {
    if (group) group->report_failure(e);  // the other ranks stop with this reason
    throw;
  }
  result.seconds = seconds_since(t_start);
  return result;
}

}  // namespace traincache::train
