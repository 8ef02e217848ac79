// gc-train's engine, stage 2: the rows of each side (loaded, streamed, through a data cache, or text).
// docs/code-map.md shows every stage and the way the data flows.
#pragma once

#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "setup.h"
#include "traincache/base/error.h"
#include "traincache/base/format.h"
#include "traincache/data_cache/data_cache.h"
#include "traincache/data_cache/smart_cache.h"
#include "traincache/io/source.h"
#include "traincache/model/encode.h"
#include "traincache/slab/shm_slab.h"
#include "traincache/train/text_fields.h"
#include "traincache/train/train_plan.h"

namespace traincache::train {

struct Rows;
struct TextSide;

// One side of the training pairs (the queries, or the passages with their hard negatives),
// whatever holds its rows. Every stage reads a side through this one interface, as every reader
// of a file reads a io::source::Column: tensor datasets (`TensorSide`: each dataset's `Rows` loaded
// whole, streamed, or streamed through a data cache or a SmartCache window) or token sequences
// (`TextSide`: tokenized in this process, read from a ragged slab, or shared in a sealed slab).
class Side {
 public:
  virtual ~Side() = default;
  virtual int64_t rows() const = 0;
  /// Hard negatives of each row (passages; 0 for queries and when none were given).
  virtual int64_t hard_negatives() const = 0;
  /// The model's inputs for rows `idx` (any order), on the device, each row followed by its hard
  /// negatives when `negatives`: [row_0, neg_0_1..neg_0_k, row_1, ...]. `keys`: the rows'
  /// SmartCache keys (a training batch with --data-cache smart).
  virtual std::vector<torch::Tensor> inputs(const torch::Tensor& idx, bool negatives = false,
                                            const std::vector<int64_t>* keys = nullptr) const = 0;
  /// The tokenized text of a text side (its tower pads and checks with it); null for tensors.
  virtual const TextSide* text() const { return nullptr; }
  /// The tensor datasets of the side (none for text): loading, streaming and SmartCache windows
  /// act on them.
  virtual std::vector<Rows*> datasets() { return {}; }
  std::vector<const Rows*> datasets() const {
    auto rows = const_cast<Side*>(this)->datasets();
    return {rows.begin(), rows.end()};
  }
  /// This process's hits and misses in the side's shared slabs (--data-cache), or nothing.
  virtual std::optional<data_cache::Stats> cache_stats() const = 0;
};

// A text side's token sequences, tokenized once at load: the side's rows, then (passages) the
// hard negatives, row i's j-th at rows + i*k + j. Batches are padded when they are drawn.
// With --data-cache the sequences live in a sealed slab shared by the node (tokenized once).
struct TextSide final : Side {
  text::TokenRows seqs;                            // in this process's memory, or
  std::shared_ptr<data_cache::SealedSlab> shared;  // sequence i in slot i: its ids, then its type ids
  int64_t n_rows = 0, n_negatives = 0;             // rows, and hard negatives per row
  int64_t length = 0;  // every batch padded to this many tokens; 0: to its longest (chunks trimmed)
  std::shared_ptr<const text::Tokenizer> tok;
  std::string tokenizer;  // its file
  torch::Device device{torch::kCPU};

  // Sequences `s` padded into a batch.
  text::TokenBatch pad(const std::vector<int64_t>& s) const;

  // The longest sequence (rows first, then each row's negatives) and its length in tokens.
  std::pair<int64_t, int64_t> longest() const;
  // Sequence i in words: "row 12" or "row 12's hard negative 2" (rows counted from 0).
  std::string describe(int64_t i) const;

  int64_t rows() const override { return n_rows; }
  int64_t hard_negatives() const override { return n_negatives; }
  std::vector<torch::Tensor> inputs(const torch::Tensor& idx, bool negatives,
                                    const std::vector<int64_t>*) const override;
  const TextSide* text() const override { return this; }
  std::optional<data_cache::Stats> cache_stats() const override;
};

std::vector<int64_t> row_list(const torch::Tensor& idx);
torch::Tensor load_whole(const io::source::Column& col, double scale, torch::Device device, torch::Dtype float_type);

// How a dataset's rows are held (Rows::held). Loaded whole and shaped, converted (uint8 rows: as
// stored, converted a batch at a time by the same rule):
struct LoadedRows {
  torch::Tensor all;
};
// Read from the column a batch at a time:
struct StreamedRows {
  std::shared_ptr<const io::source::Column> col;
  bool one_per_row = false;  // a manifest's path field of negatives: [rows, 1, ...]
  bool flat = false;         // cached embeddings: each row as one vector [rows, d]
};
// Streamed, the converted rows kept in a slab the node shares (--data-cache):
struct CachedRows : StreamedRows {
  std::shared_ptr<data_cache::RowCache> cache;
};
// Streamed through a SmartCache window (--data-cache smart): what the column's rows are made of,
// and the window, opened once the split is known (open_windows):
struct WindowedRows : StreamedRows {
  std::string parts;
  std::shared_ptr<data_cache::WindowCache> window;
};

// A dataset training reads rows of: loaded whole and converted once (uint8 rows: per batch, from a
// quarter of float32's memory), or (--stream) read from its source a batch at a time, converted per
// batch, so that memory does not grow with the data.
// The conversion is the same elementwise rule either way: both give the same values.
struct Rows {
  using Loaded = LoadedRows;
  using Streamed = StreamedRows;
  using Cached = CachedRows;
  using Windowed = WindowedRows;

  std::variant<Streamed, Loaded, Cached, Windowed> held;
  double scale = 1;  // uint8 inputs
  torch::Dtype float_type = torch::kFloat32;
  torch::Device device{torch::kCPU};

  // The column and its shaping when the rows are streamed (with or without a slab), else null.
  const Streamed* streamed() const;
  Streamed* streamed() { return const_cast<Streamed*>(static_cast<const Rows*>(this)->streamed()); }
  // The window of --data-cache smart once opened, else null.
  data_cache::WindowCache* window() const;
  // This process's hits and misses in the rows' slab or window, or nothing without one.
  std::optional<data_cache::Stats> cache_stats() const;

  std::vector<int64_t> sizes() const;
  int64_t rows() const { return sizes().front(); }
  int64_t dim() const { return static_cast<int64_t>(sizes().size()); }

  // Each row made [1, ...] (a manifest's single hard negative per row).
  void one_per_row();
  // Each row made one vector [rows, d] (cached embeddings).
  void flatten();

  // Rows `idx` (any order), converted, on the device. Streamed: the source reads the distinct
  // rows in ascending order (HDF5: one selection, each chunk once) and places them; plain loops
  // convert them: this runs on the prefetch thread, where OpenMP-parallel tensor operations would
  // compete with the training step's threads.
  // `keys`: the rows' SmartCache keys (training batches with --data-cache smart).
  torch::Tensor gather(const torch::Tensor& idx, const std::vector<int64_t>* keys = nullptr) const;

  // Streamed rows loaded whole (converted once), as without --stream.
  void load();

  // Bytes the rows take once loaded whole (uint8 as uint8, the rest converted); 0 once loaded.
  uint64_t converted_bytes() const;

 private:
  // Rows `want` of the streamed column through a slab: hits copied from it by `lookup`, the
  // others read, converted and offered to it by `store(k, bytes)` (k: the position in `want`).
  template <class Lookup, class Store>
  torch::Tensor through_cache(const Streamed& s, const std::vector<int64_t>& want, std::size_t rb, Lookup lookup,
                              Store store) const;
};

// A side of tensor datasets: rows [N, ...] of each (one per input of the model), and of each its
// hard negatives [N, k, ...] (passages).
struct TensorSide final : Side {
  std::vector<Rows> sets, negatives;

  using Side::datasets;
  int64_t rows() const override { return sets.front().rows(); }
  int64_t hard_negatives() const override { return negatives.empty() ? 0 : negatives.front().sizes()[1]; }
  std::vector<torch::Tensor> inputs(const torch::Tensor& idx, bool negatives,
                                    const std::vector<int64_t>* keys) const override;
  std::vector<Rows*> datasets() override;
  std::optional<data_cache::Stats> cache_stats() const override;
};

struct Data {
  std::vector<std::shared_ptr<slab::Slab>> slabs;  // keep shared embeddings mapped
  std::unique_ptr<Side> query, passage;            // passage: none in grouped mode
  torch::Tensor labels;                            // grouped mode
  torch::Tensor classes;  // classifier objectives: each row's class (-1: a label training lacks)
  int64_t rows = 0;
  std::vector<int64_t> skipped;  // cache rows without an embedding (cache-fill --on-error skip)
  int64_t utf8_replaced = 0;     // ill-formed UTF-8 sequences of text fields replaced with U+FFFD
  std::string labels_warning;    // how the labels were read, when the user should be told
  // --data-cache smart: the window schedule over the training rows (item of a position: a row).
  data_cache::WindowPlan window;
  std::shared_ptr<const std::vector<int64_t>> window_rows;
};

/// Every side of `d` that holds rows (the passages are absent in grouped mode).
std::vector<const Side*> sides(const Data& d);
std::vector<Side*> sides(Data& d);
/// One integer label per row of dataset `ds` of `path`, as int64 on the CPU.
torch::Tensor read_labels(const std::string& path, const std::string& ds, const io::source::FileOptions& files,
                          std::string& warning);
std::vector<int64_t> label_list(const torch::Tensor& labels);
/// v[r] for every r of `rows`.
std::vector<int64_t> pick(const std::vector<int64_t>& v, const std::vector<int64_t>& rows);
/// A path as the file system resolves it; a value that names no file stays as it is.
std::string canonical(const std::string& path);
/// Size and modification time of `path`, NUL-terminated (a data cache's name tells versions apart by them).
std::string file_stamp(const std::string& path);

/// Raw datasets of `file` (or text fields), opened for streaming with `stream` (text_side.cpp for
/// text); the text sides that `ahead` holds are taken from it (moved out), not read again.
Data load_raw(const TrainOptions& o, const Setup& s, const std::string& file, bool stream, TextAhead* ahead = nullptr);
/// Embeddings (and labels, grouped) of a cache file; through slabs when `shared`.
Data load_cached(const TrainOptions& o, const Setup& s, const std::string& path, bool grouped, bool shared,
                 std::string* fingerprint);
/// Loads the opened numeric datasets whole, or streams them (--stream, or too little memory).
void load_or_stream(TrainOptions& o, Data& d, const std::function<void(const std::string&)>& info);
/// The split without the rows cache-fill skipped.
RowSplit without_skipped(RowSplit split, const std::vector<int64_t>& skipped,
                         const std::function<void(const std::string&)>& info);
/// This process's hits and misses over every data cache, or nothing without one.
std::optional<data_cache::Stats> data_cache_stats(const Data& d);
/// --data-cache smart:N,r: the window schedule over the training rows and each column's window cache.
void open_windows(const TrainOptions& o, const Setup& s, const std::vector<int64_t>& train, Data& d);

// text_side.cpp
/// Where a text side's texts come from: the file, the field of its texts and that of its hard
/// negatives ("" for none).
struct TextSource {
  const std::string& file;
  std::string field, negatives;
};
/// A text side: `f`, the texts of `src` (and of its hard negatives), tokenized.
std::unique_ptr<TextSide> load_text(const TrainOptions& o, const Setup& s, const TextSource& src, TextFields f,
                                    int cache_index);
/// A side whose one dataset is ragged token ids; null for other datasets.
std::unique_ptr<TextSide> ragged_side(const TrainOptions& o, const Setup& s, const std::string& file,
                                      const std::vector<std::string>& fields, bool negatives);

// shared_embeddings.cpp
/// Embeddings `name` of the cache in a slab shared by every process of the machine (a view of it),
/// named after --cache-shm (owners trusted as --trust-slab-owner says).
torch::Tensor shared_embeddings(Data& data, const TrainOptions& o, const std::string& cache,
                                const std::string& fingerprint, const std::string& name, int64_t rows);

}  // namespace traincache::train
