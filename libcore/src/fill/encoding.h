// cache-fill's engine, stage 3: the encode loop (batches through every encoder into the journal).
// docs/code-map.md shows every stage and the way the data flows.
#pragma once

#include <c10/core/Event.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "device_decode.h"
#include "inputs.h"
#include "prepare.h"
#include "result.h"
#include "traincache/base/prefetch.h"
#include "traincache/base/stages.h"
#include "traincache/fill/fill.h"
#include "traincache/fill/fill_plan.h"
#include "traincache/fill/journal.h"
#include "traincache/model/encode.h"

namespace traincache::fill {

// Rows [start, start + count) of `in` as the reader threads hand them to the encode loop: float32
// (or int64), or for a column converted on the device its 8-bit rows (page-locked when `pin`).
torch::Tensor read_rows(const Input& in, int64_t start, int64_t count, double scale, bool pin);
// The dtype read_rows gives `in`'s rows.
torch::Dtype read_dtype(const Input& in);
// input_ids, attention_mask and token_type_ids of rows [start, start + count) of `in`, int64
// [count, L]; the texts cut at the maximum length added to `cut`. Errors name `in`'s input rows.
std::vector<torch::Tensor> read_text(const TextInput& t, int64_t start, int64_t count,
                                     const text::TokenizeOptions& opts, int64_t& cut, const Inputs& in);

// Rows as read_rows gave them, made what the encoders take: a column converted on the device is
// copied to `device` and converted there exactly as the host would (images: / 255, then - mean,
// / std per channel; other uint8 columns: * scale, as float32 operations); any other column's rows
// are returned as they are. Its tensors are made on first use, by one thread.
class DeviceConversion {
 public:
  DeviceConversion(const Input& in, torch::Device device) : in_(in), device_(device) {}
  torch::Tensor operator()(const torch::Tensor& rows, double scale);

 private:
  const Input& in_;
  torch::Device device_;
  torch::Tensor scalar_, mean_, std_;  // the divisor (images) or factor, the statistics
};

// One batch of converted inputs, keyed by dataset name, and the rows skipped in it.
struct Batch {
  int64_t start = 0, count = 0;
  std::map<std::string, torch::Tensor> inputs;
  std::map<std::string, std::vector<torch::Tensor>> text;  // by text key: ids, mask, type ids
  std::map<std::string, EncodedRows> encoded;              // --decode device: image columns' files
  std::map<int64_t, std::string> skipped;                  // input row -> reason
  int64_t texts_cut = 0;                                   // texts cut at the maximum length
  bool converted = false;           // `inputs` are as the encoders take them (convert_inputs ran)
  double convert_seconds = 0;       // convert_inputs' time on it
  std::optional<c10::Event> ready;  // on a CUDA device: recorded on the side stream after the conversion
};

// The encode loop over one run's rows: batches from the prefetcher go through every encoder, the
// first batch with its checks (optimisation, determinism), and rows are appended to the journal's
// raw files and committed every --commit-rows.
class Encoding {
 public:
  // The planned rows (planned.encoded_in()) into its journal, the figures into `tally`. With an update
  // (whose rows to encode encoded_in() then holds), a run that has committed nothing starts with
  // the updated cache's encoders as committed ones (their optimisation and precision decisions
  // kept, so that every row of the new cache is made alike).
  Encoding(FillRun& run, EncodePlan& planned, std::vector<std::unique_ptr<model::Encoder>>& encoders, FillTally& tally);

  // Encodes rows [begin + committed, end). Returns false when interrupted (progress committed).
  bool run(const RowPlan& plan);

  // Closes the raw files (checked) before they are published.
  void close();
  // Closes without checks on an error path.
  void abandon() { raws_.clear(); }

 private:
  // One unit through every encoder (`first`: the first unit this run encodes, with the first
  // batch's checks); its skipped rows (relative to `begin`) recorded on the store thread.
  void encode_unit(Batch& batch, bool first, int64_t begin, SerialWorker& store);

  // The batch's columns converted on the device, made what the encoders take; on a CUDA device on
  // the side stream (`batch.ready` says when it is done there). Writes `batch` alone: it runs on
  // the convert thread when there is one.
  void convert_inputs(Batch& batch);

  // Syncs the raw files and records `rows` as committed in the journal (the store thread).
  void commit(int64_t rows);

  // Each stage's busy time and the loop's own time (from `loop_start`, less the first batch's
  // checks) into the result, once the store thread has drained.
  void record_stages(Clock::time_point loop_start);

  // A tokenizer with more tokens than the encoder's embedding table gives ids it cannot look up.
  void check_vocabulary(model::Encoder& enc);

  // The first batch: optimisation (kept as the committed rows had it) and the determinism check.
  void first_batch_checks(model::Encoder& enc, const std::vector<torch::Tensor>& args, JournalEncoder& je);

  // The largest difference of `enc`'s reduced-precision output on `args` from `want` (float32, of
  // args' first rows), relative to want's largest magnitude. The output and its forward's seconds
  // go to checked_.
  double precision_difference(model::Encoder& enc, const std::vector<torch::Tensor>& args, const torch::Tensor& want);

  // --precision: the first batch in reduced precision, its first kPrecisionCheckRows rows against
  // float32, within the tolerance (relative to the largest float32 magnitude); the encoder then
  // stays in reduced precision.
  // int8: the encoder's int8 module is made first (Encoder::make_int8).
  // An optimised module beyond the tolerance gives way to the plain one (on CPUs without native
  // bfloat16, oneDNN's prepacked bf16 path can be several times further off) unless committed
  // rows were encoded with it.
  void check_precision(model::Encoder& enc, const std::vector<torch::Tensor>& args, bool resumed, JournalEncoder& je);

  static std::string percent(double fraction);

  // How one encoder encodes a unit: the order of its rows (undefined: as read) and where each
  // batch of that order ends.
  struct UnitBatches {
    torch::Tensor order;
    std::vector<int64_t> ends;
  };

  // A length window's rows are encoded by their token count (stable), so that each batch holds
  // texts of similar length, in batches of at most --batch-size rows and --max-tokens token slots
  // (text/token_batches). One batch, or an encoder without text: as read, --batch-size rows
  // at a time.
  UnitBatches unit_batches(const std::string& enc, const Batch& batch) const;

  // Where a text field's tensors are among an encoder's arguments (n from `first`), and its mask.
  struct TextArgs {
    std::size_t first, n;
    torch::Tensor mask;
  };

  // One encoder's forward calls over a unit's batches, in the batches' order; the first batch's
  // checks and batch noise when `first`; each batch's tokens and padded token slots counted.
  std::vector<torch::Tensor> forward_unit(std::size_t i, const std::vector<torch::Tensor>& args,
                                          const std::vector<TextArgs>& text_args, const UnitBatches& batches,
                                          bool first);

  // Rows `rows` of every argument; each text field's tensors trimmed to its longest text there.
  static std::vector<torch::Tensor> rows_of(const std::vector<torch::Tensor>& args,
                                            const std::vector<TextArgs>& text_args, const torch::Tensor& rows);

  // Token ids of a ragged input must index the encoder's first embedding table.
  void check_ragged_ids(model::Encoder& enc, const torch::Tensor& ids, const Batch& batch);

  // A text longer than the encoder's position table would fail inside it ("index out of range in
  // self", naming no row): refused naming the row, its length and the table.
  void check_lengths(model::Encoder& enc, const torch::Tensor& mask, const Batch& batch);

  struct Tables {
    std::optional<model::EmbeddingTable> token, position;
  };
  // An encoder's token and position tables, found once.
  const Tables& tables(model::Encoder& enc);

  // One batch through encoder i (with the first batch's checks when `first`), as stored.
  torch::Tensor forward_batch(std::size_t i, const std::vector<torch::Tensor>& args, int64_t rows, bool first);

  // One encoder on one unit (a batch, or a length window encoded batch by batch in length
  // order): forward and the output's shape checked here; its values checked and appended to the
  // raw file, in input order, by a task on `store`.
  void encode(std::size_t i, const Batch& batch, bool first, SerialWorker& store);

  // The encoder's batch noise, once (not on a resume, nor in an update of a cache that recorded
  // it): up to kBatchNoiseRows rows of the first unit (`args`, encoded as `batches` into `outs`),
  // spread over it in the order it was encoded, each encoded alone against its row of `outs`; the
  // largest difference into the journal's batch_max_abs_diff, and relative to the largest value
  // of `outs` into batch_max_rel_diff (above kBatchDependentShare: a warning).
  void measure_batch_noise(model::Encoder& enc, const std::vector<torch::Tensor>& args,
                           const std::vector<TextArgs>& text_args, const UnitBatches& batches,
                           const std::vector<torch::Tensor>& outs);

  // Encoder i's output for input rows [start, start + count): finite, appended (the store thread).
  void store_rows(std::size_t i, const torch::Tensor& out, int64_t start, int64_t count);

  const FillOptions& opts_;
  const Inputs& in_;
  std::vector<std::unique_ptr<model::Encoder>>& encoders_;
  std::map<std::string, DeviceConversion> conversions_;  // by feature column
  std::map<std::string, DeviceDecode> decoders_;         // by image column decoded on the device
  // With columns converted on the device, the next units are read and converted on a thread of
  // their own while this one is encoded (run()); on a CUDA device on a side stream.
  bool convert_ahead_ = false;
  std::optional<c10::Stream> side_stream_, main_stream_;
  // Shared by this thread and the store thread without a lock, safe by this order: this thread
  // writes the journal only while encoding a run's first batch (first_batch_checks, the row
  // shapes), before it submits any task that reads or writes it; from then on only tasks on the
  // store thread touch it (commit, skipped rows), and this thread reads shape_known_ and
  // row_shapes_, its own copies, instead.
  Journal& journal_;
  FillTally& tally_;  // what the loop measures and counts, for the result
  const FillCallbacks& cb_;
  const std::map<std::string, JournalEncoder> committed_;  // as loaded: what the committed rows used
  std::vector<std::vector<int64_t>> row_shapes_;
  std::vector<bool> shape_known_;  // row_shapes_[i] is set (committed, or from this run's first batch)
  std::vector<RawFile> raws_;
  std::map<std::string, Tables> tables_;  // by encoder, once
  const bool resumed_;                    // the journal held committed rows when this run began
  StageSink reader_busy_;                 // the reader threads' stages
  double first_checks_seconds_ = 0;       // the first batch's checks, inside the loop but not of it
  // The reduced-precision output of the precision check's last forward (the encoder as it stays),
  // which forward_batch takes as the first batch's output instead of encoding it again.
  struct Checked {
    torch::Tensor out;
    double seconds = 0;
  };
  Checked checked_;
};

}  // namespace traincache::fill
