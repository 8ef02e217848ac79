#include "data.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "traincache/base/error.h"
#include "traincache/base/files.h"
#include "traincache/base/sha256.h"
#include "traincache/io/cache_file.h"
#include "traincache/io/image.h"
#include "traincache/train/shuffle.h"

namespace fs = std::filesystem;

namespace traincache::train {

namespace {

torch::Tensor read_all(const std::string& path, const std::string& ds, double scale, torch::Device device,
                       torch::Dtype float_type, const io::source::FileOptions& files = {}) {
  return load_whole(*io::source::open_column(path, ds, files, io::source::Role::images), scale, device, float_type);
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
               torch::Dtype float_type, bool stream, const io::source::FileOptions& files = {}) {
  Rows r;
  auto col = io::source::open_column(path, ds, files, io::source::Role::images);
  io::source::require_numeric_input(col->info(), path);
  r.held = Rows::Streamed{std::move(col)};
  r.scale = scale;
  r.float_type = float_type;
  r.device = device;
  if (!stream) r.load();
  return r;
}

// Sequences `seqs` of a text side, padded: input_ids, attention_mask, token_type_ids.
std::vector<torch::Tensor> token_inputs(const TextSide& t, const std::vector<int64_t>& seqs) {
  auto out = model::token_tensors(t.pad(seqs));
  for (auto& x : out) x = x.to(t.device);
  return out;
}

// The element type and row shape a streamed column's converted rows have in a slab.
DType converted_slab_type(const io::source::ColumnInfo& ci, std::vector<uint64_t>* dims) {
  for (std::size_t i = 1; i < ci.shape.size(); ++i) dims->push_back(static_cast<uint64_t>(ci.shape[i]));
  return model::converted_type(ci.dtype) == torch::kLong ? DType::i64 : DType::f32;
}

// --data-cache: the slab of streamed column `r` (dataset `ds` of `file`), named after what its
// converted rows are made from (the file's identity, the dataset, the conversion); with
// --data-cache-keep NAME, NAME-0, NAME-1, ... in the order the datasets are opened.
// With smart:N,r only what identifies the rows is kept: the window depends on the split (open_windows).
void attach_data_cache(const TrainOptions& o, const std::string& file, const std::string& ds, Rows& r, int index) {
  const Rows::Streamed st = *r.streamed();
  const auto& ci = st.col->info();
  const std::string on_disk = file.empty() ? ds : file;  // a .npy file names itself
  std::string parts = canonical(on_disk) + '\0' + ds + '\0' + dtype_name(ci.dtype) + '\0' + std::to_string(r.scale) +
                      '\0' + file_stamp(on_disk);
  if (const io::image::Spec* spec = st.col->preprocess())
    for (const auto& [k, v] : spec->describe()) parts += k + '=' + v + '\0';
  if (o.data_cache.mode == data_cache::Mode::smart) {
    r.held = Rows::Windowed{st, parts, nullptr};
    return;
  }
  data_cache::Spec spec = o.data_cache;
  if (!spec.keep.empty()) spec.keep += "-" + std::to_string(index);
  std::vector<uint64_t> dims;
  const DType type = converted_slab_type(ci, &dims);
  r.held =
      Rows::Cached{st, data_cache::RowCache::open(spec, data_cache::content_id(parts), static_cast<uint64_t>(ci.rows()),
                                                  type, dims, o.trust_slab_owner)};
}

// Every dataset of a tensor side (`fields`, and hard negatives `negs`) has the `n` rows of dataset
// `first`, and each dataset's negatives are shaped [rows, k, ...] like its rows, with one k for all.
void check_tensor_side(const std::string& file, const std::string& first, int64_t n,
                       const std::vector<std::string>& fields, const std::vector<std::string>& negs,
                       const TensorSide& side) {
  for (std::size_t i = 0; i < fields.size(); ++i) same_rows(file, first, n, fields[i], side.sets[i].rows());
  for (std::size_t i = 0; i < negs.size(); ++i) {
    same_rows(file, first, n, negs[i], side.negatives[i].rows());
    const auto ns = side.negatives[i].sizes(), ps = side.sets[i].sizes();
    if (ns.size() != ps.size() + 1 || !std::equal(ns.begin() + 2, ns.end(), ps.begin() + 1) ||
        ns[1] != side.negatives.front().sizes()[1])
      throw Error(Exit::data, file, "negatives '" + negs[i] + "' must be shaped [rows, k, ...] like the passages");
  }
}

// A side of one tensor dataset (a cache's embeddings).
std::unique_ptr<Side> side_of(Rows r) {
  auto side = std::make_unique<TensorSide>();
  side->sets.push_back(std::move(r));
  return side;
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
// The seed of the SmartCache window's order of the training rows (the epochs' orders of the
// window use seed * 1000003 + epoch, as without it).
uint64_t window_order_seed(uint64_t seed) { return seed * 1000003ull - 1; }

// Rows of uint8 as the loaders convert them (model::read_column_rows): float32(x) * float32(scale),
// then the float type; on the rows' device.
torch::Tensor from_stored_u8(const torch::Tensor& t, double scale, torch::Dtype float_type) {
  auto f = t.to(torch::kFloat).mul_(static_cast<double>(static_cast<float>(scale)));
  return float_type == torch::kFloat ? f : f.to(float_type);
}

}  // namespace

// Every row of `col`, converted, on `device`.
torch::Tensor load_whole(const io::source::Column& col, double scale, torch::Device device, torch::Dtype float_type) {
  auto t = model::read_column_rows(col, 0, col.info().rows(), scale);
  if (t.is_floating_point()) t = t.to(float_type);
  return t.to(device);
}

// Float labels (a manifest's 1.0 or 0.25, a .npz member) serve grouped objectives as classes only
// when every value is a whole number (a cast made 0.25 and 0.75 one class 0): Error(data) naming
// the first that is not, in the column `what` ("/labels ('score')").
void require_whole(const torch::Tensor& labels, const std::string& path, const std::string& what) {
  const torch::Tensor bad = (labels != labels.trunc()).nonzero();
  if (bad.numel() == 0) return;
  const int64_t row = bad[0][0].item<int64_t>();
  char value[32];
  std::snprintf(value, sizeof value, "%g", labels[row].item<double>());
  throw Error(
      Exit::data, path,
      what + " holds " + value + " at row " + std::to_string(row) + ": grouped objectives take classes, whole numbers");
}

// One integer label per row (manifest class names numbered by --label-order; float labels that are
// whole numbers), as int64 on the CPU.
torch::Tensor read_labels(const std::string& path, const std::string& ds, const io::source::FileOptions& files,
                          std::string& warning) {
  auto col = io::source::open_column(path, ds, files, io::source::Role::labels);
  warning = col->warning();
  const auto& ci = col->info();
  const bool number = is_integer(ci.dtype) || ci.dtype == DType::f32 || ci.dtype == DType::f64;
  if (!number || !(ci.shape.size() == 1 || (ci.shape.size() == 2 && ci.shape[1] == 1)))
    throw Error(Exit::data, path,
                "labels '" + ds + "' must hold one integer per row, not " + dtype_name(ci.dtype) + " rows of shape " +
                    shape_text(std::vector<int64_t>(ci.shape.begin() + 1, ci.shape.end())));
  if (is_integer(ci.dtype)) return model::read_column_rows(*col, 0, ci.rows(), 1.0).to(torch::kLong).reshape({-1});
  torch::Tensor values = model::read_column_rows(*col, 0, ci.rows(), 1.0).to(torch::kDouble).reshape({-1});
  require_whole(values, path, "labels '" + ds + "'");
  return values.to(torch::kLong);
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

std::vector<torch::Tensor> TextSide::inputs(const torch::Tensor& idx, bool negatives,
                                            const std::vector<int64_t>*) const {
  std::vector<int64_t> seqs;
  for (int64_t i : row_list(idx)) {
    seqs.push_back(i);
    for (int64_t j = 0; negatives && j < n_negatives; ++j) seqs.push_back(n_rows + i * n_negatives + j);
  }
  return token_inputs(*this, seqs);
}

std::vector<torch::Tensor> TensorSide::inputs(const torch::Tensor& idx, bool with_negatives,
                                              const std::vector<int64_t>* keys) const {
  auto pos = gather(sets, idx, keys);
  if (negatives.empty() || !with_negatives) return pos;
  auto neg = gather(negatives, idx, keys);
  std::vector<torch::Tensor> out;
  for (std::size_t i = 0; i < pos.size(); ++i) {
    auto g = torch::cat({pos[i].unsqueeze(1), neg[i]}, 1);  // [B, 1+k, ...]
    std::vector<int64_t> shape{-1};
    for (int64_t s = 2; s < g.dim(); ++s) shape.push_back(g.size(s));
    out.push_back(g.reshape(shape));
  }
  return out;
}

std::vector<Rows*> TensorSide::datasets() {
  std::vector<Rows*> out;
  for (auto* list : {&sets, &negatives})
    for (auto& r : *list) out.push_back(&r);
  return out;
}

std::optional<data_cache::Stats> TensorSide::cache_stats() const {
  std::optional<data_cache::Stats> sum;
  for (const Rows* r : datasets())
    if (const auto stats = r->cache_stats()) {
      if (!sum) sum.emplace();
      *sum += *stats;
    }
  return sum;
}

std::vector<const Side*> sides(const Data& d) {
  std::vector<const Side*> out;
  for (const auto* side : {d.query.get(), d.passage.get()})
    if (side) out.push_back(side);
  return out;
}
std::vector<Side*> sides(Data& d) {
  std::vector<Side*> out;
  for (auto* side : {d.query.get(), d.passage.get()})
    if (side) out.push_back(side);
  return out;
}

// A path as the file system resolves it (so that "./a.h5" and "a.h5" are one setting); a value
// that names no file (a built-in head spec) stays as it is.
std::string canonical(const std::string& path) { return files::absolute_path(path); }

// What tells versions of file `path` apart in a data cache's name (beside its absolute path): its
// size and modification time, NUL-terminated.
std::string file_stamp(const std::string& path) {
  std::string id;
  std::error_code ec;
  if (auto size = fs::file_size(path, ec); !ec) id += std::to_string(size) + '\0';
  if (auto t = fs::last_write_time(path, ec); !ec) id += std::to_string(t.time_since_epoch().count()) + '\0';
  return id;
}

// Raw datasets of `file` (slabs for names "shm:NAME"), or text fields for a side with a tokenizer.
// With `stream`, numeric datasets are only opened (run_train loads them or streams them).
Data load_raw(const TrainOptions& o, const Setup& s, const std::string& file, bool stream, TextAhead* ahead) {
  Data d;
  int cached = 0;
  auto load = [&](const std::string& ds) {
    Rows r = open_rows(file, ds, o.input_scale, s.device, s.float_type, stream, o.files);
    if (o.data_cache.mode != data_cache::Mode::none) attach_data_cache(o, file, ds, r, cached++);
    return r;
  };
  TensorSide *query = nullptr, *passage = nullptr;  // the sides of tensor datasets, checked below
  // A side of tensor datasets `fields` (and hard negatives `negs`).
  auto tensors = [&](const std::vector<std::string>& fields, const std::vector<std::string>& negs, TensorSide*& out) {
    auto side = std::make_unique<TensorSide>();
    for (const auto& f : fields) side->sets.push_back(load(f));
    for (const auto& n : negs) {
      side->negatives.push_back(load(n));
      // A manifest's path field holds one hard negative per row: [rows, 1, C, H, W].
      if (io::source::kind_of(file) == io::source::Kind::manifest) {
        side->negatives.back().one_per_row();
      }
    }
    out = side.get();
    return side;
  };
  int64_t replaced = 0;
  // A text side: what `ahead` read before LibTorch was loaded, or read now.
  auto text = [&](std::optional<TextFields>* given, const std::vector<std::string>& fields,
                  const std::vector<std::string>& negs, const std::string& tok) {
    TextFields f = given && *given ? std::move(**given) : read_text_fields(o, file, fields, negs, tok);
    if (given) given->reset();
    replaced += f.utf8_replaced;
    return load_text(o, s, {file, fields[0], negs.empty() ? "" : negs[0]}, std::move(f), cached++);
  };
  if (const auto tok = side_tokenizer(o, true); !tok.empty())
    d.query = text(ahead ? &ahead->query : nullptr, o.query, {}, tok);
  else if (!(d.query = ragged_side(o, s, file, o.query, false)))
    d.query = tensors(o.query, {}, query);
  if (o.passage.empty())  // raw grouped mode: one side and its labels
    d.labels = read_labels(file, o.labels, o.files, d.labels_warning);
  else if (const auto tok = side_tokenizer(o, false); !tok.empty())
    d.passage = text(ahead ? &ahead->passage : nullptr, o.passage, o.negatives, tok);
  else if (!(d.passage = ragged_side(o, s, file, o.passage, !o.negatives.empty())))
    d.passage = tensors(o.passage, o.negatives, passage);
  d.utf8_replaced = replaced;
  d.rows = d.query->rows();
  if (query) check_tensor_side(file, o.query[0], d.rows, o.query, {}, *query);
  if (d.labels.defined()) same_rows(file, o.query[0], d.rows, o.labels, d.labels.size(0));
  if (passage)
    check_tensor_side(file, o.query[0], d.rows, o.passage, o.negatives, *passage);
  else if (d.passage)
    same_rows(file, o.query[0], d.rows, o.passage[0], d.passage->rows());
  return d;
}

// Embeddings (and labels, grouped) of a cache file; through slabs when `shared`.
Data load_cached(const TrainOptions& o, const Setup& s, const std::string& path, bool grouped, bool shared,
                 std::string* fingerprint) {
  Data d;
  auto cinfo = io::cache::read_info(path, false);
  check_cached_info(o, cinfo, path, grouped);
  if (fingerprint) *fingerprint = cinfo.fingerprint;
  auto read_emb = [&](const std::string& name) {
    auto dev_it = o.cache_devices.find(name);
    torch::Device dev = dev_it == o.cache_devices.end()
                            ? s.cache_device
                            : model::parse_device(dev_it->second, "--cache-device " + name + "=");
    Rows r;
    if (shared)
      r.held = Rows::Loaded{shared_embeddings(d, o, path, cinfo.fingerprint, name, cinfo.rows).to(dev, s.float_type)};
    else
      r = open_rows(path, "/embeddings/" + name, 1.0, dev, s.float_type, o.stream);
    r.flatten();
    return r;
  };
  d.rows = cinfo.rows;
  if (cinfo.skipped > 0) {
    auto rows = read_all(path, "/skipped/rows", 1.0, torch::kCPU, s.float_type).to(torch::kLong);
    d.skipped.assign(rows.data_ptr<int64_t>(), rows.data_ptr<int64_t>() + rows.numel());
  }
  if (grouped) {
    d.query = side_of(read_emb(o.embeddings));
    // A copy: GCC 14 takes a reference returned past the temporary "--labels" for a dangling one.
    const io::cache::LabelInfo column = io::cache::label_column(cinfo, o.labels, "--labels");
    const std::string& dataset = column.dataset;
    auto labels = read_all(path, dataset, 1.0, torch::kCPU, s.float_type);
    if (labels.dim() != 1 && !(labels.dim() == 2 && labels.size(1) == 1))
      throw Error(Exit::data, path,
                  dataset + " must hold one value per row, not rows of shape " +
                      shape_text(std::vector<int64_t>(labels.sizes().begin() + 1, labels.sizes().end())));
    labels = labels.reshape({-1});
    if (!is_integer(column.dtype)) require_whole(labels, path, column.dataset + " ('" + column.name + "')");
    d.labels = labels.to(torch::kLong);
    return d;
  }
  Rows q = read_emb(o.query_embeddings), p = read_emb(o.passage_embeddings);
  d.query = side_of(std::move(q));
  d.passage = side_of(std::move(p));
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
  for (const Side* side : sides(d))
    if (auto stats = side->cache_stats()) {
      if (!sum) sum.emplace();
      *sum += *stats;
    }
  return sum;
}

// --data-cache smart:N,r: the window schedule over the training rows `train` (in a seeded order;
// as listed without --shuffle or when the window holds them all) and each streamed column's window cache, a slab named
// after the column's rows and the schedule, shared by the ranks of the node (each prepares its share).
void open_windows(const TrainOptions& o, const Setup& s, const std::vector<int64_t>& train, Data& d) {
  if (o.data_cache.mode != data_cache::Mode::smart || train.empty()) return;
  d.window =
      data_cache::make_plan(static_cast<int64_t>(train.size()), o.data_cache.cache_num, o.data_cache.replace_rate);
  if (o.drop_last && o.batch_size > d.window.cache_num)
    throw Error(Exit::usage, "--batch-size",
                std::to_string(o.batch_size) + " is larger than the " + std::to_string(d.window.cache_num) +
                    " rows of the SmartCache window (use a smaller batch or --no-drop-last)");
  auto rows = std::make_shared<std::vector<int64_t>>(train);
  if (o.shuffle && d.window.replace_num > 0) {  // a window of every row: the same batches as without
    const auto order = train::seeded_permutation(static_cast<int64_t>(train.size()), window_order_seed(o.seed));
    for (std::size_t p = 0; p < order.size(); ++p) (*rows)[p] = train[static_cast<std::size_t>(order[p])];
  }
  d.window_rows = rows;
  const std::string schedule =
      "smart:" + std::to_string(d.window.cache_num) + "," + std::to_string(d.window.replace_num) + '\0' +
      sha256_hex(std::string(reinterpret_cast<const char*>(rows->data()), rows->size() * sizeof(int64_t)));
  for (Side* side : sides(d))
    for (Rows* rp : side->datasets()) {
      auto* r = std::get_if<Rows::Windowed>(&rp->held);
      if (!r) continue;
      const auto& ci = r->col->info();
      data_cache::WindowOptions w;
      w.plan = d.window;
      w.items = rows;
      w.dtype = converted_slab_type(ci, &w.dims);
      w.content_id = "gc-train-window:" + sha256_hex(r->parts + schedule).substr(0, 32);
      w.name = "gc-train-" + w.content_id.substr(w.content_id.size() - 16);
      w.tool = "gc-train";
      w.trust_owner = o.trust_slab_owner;
      w.part = s.rank;
      w.parts = s.world;
      r->window = data_cache::WindowCache::open(
          w, [col = r->col, scale = rp->scale](const std::vector<int64_t>& items, void* out) {
            auto t = model::read_column_rows(*col, items, scale);
            std::memcpy(out, t.data_ptr(), t.nbytes());
          });
    }
}

// The training data's opened numeric datasets: streamed with --stream, or when loading them
// whole would take more than 80% of the available memory (the same result either way; o.stream
// then says so for the step loop); otherwise loaded whole now. Text sides are tokenized either way.
void load_or_stream(TrainOptions& o, Data& d, const std::function<void(const std::string&)>& info) {
  if (o.stream) return;
  uint64_t need = 0;
  for (const Side* side : sides(d))
    for (const Rows* r : side->datasets()) need += r->converted_bytes();
  const uint64_t have = available_memory();
  if (have > 0 && need > have / 10 * 8) {
    o.stream = true;
    info("loading the inputs whole needs " + format_size(need) + " of memory but " + format_size(have) +
         " is available: streaming them (--stream)");
    return;
  }
  for (Side* side : sides(d))
    for (Rows* r : side->datasets())
      if (r->streamed()) r->load();
}

// ---- TextSide and Rows (data.h) ----------------------------------------------------------------

text::TokenBatch TextSide::pad(const std::vector<int64_t>& s) const {
  if (!shared) return text::pad_rows(seqs, s, length);
  const slab::Slab& slab = shared->slab();
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

std::pair<int64_t, int64_t> TextSide::longest() const {
  std::pair<int64_t, int64_t> best{0, 0};
  const int64_t n = n_rows * (1 + n_negatives);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t len =
        shared ? static_cast<int64_t>(shared->slab().view(static_cast<uint64_t>(i)).bytes / 8) : seqs.length(i);
    if (len > best.second) best = {i, len};
  }
  return best;
}

std::string TextSide::describe(int64_t i) const {
  if (i < n_rows) return "row " + std::to_string(i);
  const int64_t k = std::max<int64_t>(1, n_negatives);
  return "row " + std::to_string((i - n_rows) / k) + "'s hard negative " + std::to_string((i - n_rows) % k + 1);
}

std::optional<data_cache::Stats> TextSide::cache_stats() const {
  if (!shared) return std::nullopt;
  return shared->stats();
}

const Rows::Streamed* Rows::streamed() const {
  if (const auto* c = std::get_if<Cached>(&held)) return c;
  if (const auto* w = std::get_if<Windowed>(&held)) return w;
  return std::get_if<Streamed>(&held);
}

data_cache::WindowCache* Rows::window() const {
  const auto* w = std::get_if<Windowed>(&held);
  return w ? w->window.get() : nullptr;
}

std::optional<data_cache::Stats> Rows::cache_stats() const {
  if (const auto* c = std::get_if<Cached>(&held)) return c->cache->stats();
  if (const data_cache::WindowCache* w = window()) return w->stats();
  return std::nullopt;
}

template <class Lookup, class Store>
torch::Tensor Rows::through_cache(const Streamed& st, const std::vector<int64_t>& want, std::size_t rb, Lookup lookup,
                                  Store store) const {
  const auto& ci = st.col->info();
  std::vector<int64_t> shape = ci.shape;
  shape[0] = static_cast<int64_t>(want.size());
  auto t = torch::empty(shape, model::converted_type(ci.dtype));
  auto* out = static_cast<char*>(t.data_ptr());
  const std::vector<std::size_t> miss = lookup(out);
  if (miss.empty()) return t;
  std::vector<int64_t> rows;
  for (auto k : miss) rows.push_back(want[k]);
  auto read = model::read_column_rows(*st.col, rows, scale);
  const auto* in = static_cast<const char*>(read.data_ptr());
  for (std::size_t j = 0; j < miss.size(); ++j) {
    std::memcpy(out + miss[j] * rb, in + j * rb, rb);
    store(miss[j], in + j * rb);
  }
  return t;
}

std::vector<int64_t> Rows::sizes() const {
  if (const auto* l = std::get_if<Loaded>(&held)) return l->all.sizes().vec();
  const Streamed& st = *streamed();
  std::vector<int64_t> s = st.col->info().shape;
  if (st.one_per_row) s.insert(s.begin() + 1, 1);
  if (st.flat) s = {s[0], std::accumulate(s.begin() + 1, s.end(), int64_t{1}, std::multiplies<int64_t>())};
  return s;
}

void Rows::one_per_row() {
  if (auto* l = std::get_if<Loaded>(&held))
    l->all = l->all.unsqueeze(1);
  else
    streamed()->one_per_row = true;
}

void Rows::flatten() {
  if (auto* l = std::get_if<Loaded>(&held))
    l->all = l->all.reshape({l->all.size(0), -1});
  else
    streamed()->flat = true;
}

torch::Tensor Rows::gather(const torch::Tensor& idx, const std::vector<int64_t>* keys) const {
  if (const auto* l = std::get_if<Loaded>(&held)) {
    auto t = l->all.index_select(0, idx.to(l->all.device()));
    return t.scalar_type() == torch::kByte ? from_stored_u8(t, scale, float_type) : t;
  }
  const Streamed& st = *streamed();
  const std::vector<int64_t> want = row_list(idx);
  torch::Tensor t;
  if (const auto* c = std::get_if<Cached>(&held))
    t = through_cache(
        st, want, c->cache->row_bytes(), [&](char* out) { return c->cache->lookup(want, out); },
        [&](std::size_t k, const char* bytes) { c->cache->store(want[k], bytes); });
  else if (data_cache::WindowCache* w = window(); w && keys)
    t = through_cache(
        st, want, w->item_bytes(), [&](char* out) { return w->lookup(*keys, out); },
        [&](std::size_t k, const char* bytes) { w->store((*keys)[k], bytes); });
  else
    t = model::read_column_rows(*st.col, want, scale);
  if (t.is_floating_point() && t.scalar_type() != float_type) t = t.to(float_type);
  if (st.one_per_row) t = t.unsqueeze(1);
  if (st.flat) t = t.reshape({t.size(0), -1});
  return t.to(device);
}

void Rows::load() {
  const Streamed st = *streamed();
  // uint8 rows stay uint8 until a batch is gathered: a quarter of the memory, the same values.
  held = Loaded{st.col->info().dtype == DType::u8
                    ? model::read_column_bytes(*st.col, 0, st.col->info().rows(), false).to(device)
                    : load_whole(*st.col, scale, device, float_type)};
  if (st.one_per_row) one_per_row();
  if (st.flat) flatten();
}

uint64_t Rows::converted_bytes() const {
  const Streamed* st = streamed();
  if (!st) return 0;
  const auto& ci = st->col->info();
  // uint8 rows stay uint8 when loaded whole (load); others take their converted type's size.
  const uint64_t element = ci.dtype == DType::u8 ? 1 : model::converted_type(ci.dtype) == torch::kLong ? 8 : 4;
  return static_cast<uint64_t>(ci.rows()) * static_cast<uint64_t>(ci.row_elements()) * element;
}

}  // namespace traincache::train
