// cache-fill's engine: encode the rows of a source (HDF5, NumPy, slab, image folder, manifest) with frozen TorchScript
// encoders into a cache file. This header is torch-free; the implementation lives in the torch part of libcore.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "traincache/base/choices.h"
#include "traincache/base/cpu_contention.h"
#include "traincache/base/dtype.h"
#include "traincache/fill/bottleneck.h"
#include "traincache/io/source.h"
#include "traincache/model/precision.h"
#include "traincache/text/tokenizer.h"

namespace traincache::fill {

/// One encoder: a name (the /embeddings/<name> dataset), a TorchScript file, and optionally its own
/// input datasets and output selector.
struct EncoderSpec {
  std::string name;
  std::string path;
  std::vector<std::string> features;  ///< empty = FillOptions::features
  std::string output;                 ///< "" = whole output; else a dict key or tuple/list index
  std::vector<std::string> text;      ///< text fields (tokenized), empty = FillOptions::text
  std::string tokenizer;              ///< "" = FillOptions::tokenizer
};

/// What a fill does with an image it cannot read (--on-error).
enum class OnError { fail, skip };
const Choices<OnError>& on_error_choices();

/// Where 8-bit inputs (decoded images, uint8 arrays) become float32 (--convert): on the reader
/// threads (host), or on the encoders' device after a copy of the 8-bit rows (device: a quarter of
/// the bytes to a GPU, from page-locked memory). The floats are the same either way. auto: device
/// for CUDA devices, host otherwise.
enum class Convert { auto_, host, device };
const Choices<Convert>& convert_choices();
/// --decode: where JPEG files are decoded (docs/cache-fill.md).
enum class Decode { auto_, host, device };
const Choices<Decode>& decode_choices();

/// Everything that controls a fill. Defaults match the command line's.
struct FillOptions {
  std::string input;
  std::vector<EncoderSpec> encoders;
  std::vector<std::string> features;  ///< default input datasets, passed in this order
  /// Default text fields (a manifest's or an HDF5 file's strings): each is tokenized and fed as
  /// input_ids, attention_mask and, to an encoder whose forward takes three tensors, token_type_ids.
  std::vector<std::string> text;
  std::string tokenizer;             ///< tokenizer.json or SentencePiece .model for the text fields
  text::TokenizeOptions tokenize;    ///< --max-length, --padding, --strict-utf8, --pad-id
  std::string labels;                ///< "" = none (an image folder's "label" by default)
  std::string keys;                  ///< "" = none, key = input row number (an image folder's "path")
  io::source::FileOptions files;     ///< preprocessing of images, label order of manifests
  OnError on_error = OnError::fail;  ///< skip: undecodable or missing images become zero rows listed in /skipped
  std::string out;
  int64_t batch_size = 256;
  /// Text only: rows sorted by token count and encoded in batches of similar length, then stored
  /// in input order (and committed) window by window. -1: 16 batches; 0: off.
  int64_t length_window = -1;
  /// Text in length windows only: a batch holds at most this many token slots (its rows times its
  /// longest row's tokens; a single row may hold more). -1: kDefaultMaxTokensCpu or
  /// kDefaultMaxTokensCuda, by --device; 0: no cap.
  int64_t max_tokens = -1;
  int workers = 0;  ///< reader/converter threads; 0: auto (reader_threads in fill/inputs.h)
  int threads = 0;  ///< intra-op threads (0 = LibTorch default)
  std::string device = "cpu";
  DType dtype = DType::f32;  ///< storage type: one of storage_dtype_choices()
  int64_t row_begin = 0;
  int64_t row_end = -1;                   ///< -1 = to the end
  double input_scale = 1.0 / 255.0;       ///< applied to uint8 inputs
  Convert convert = Convert::auto_;       ///< where 8-bit inputs become float32
  Decode decode = Decode::host;           ///< where JPEG files are decoded (device: nvJPEG on CUDA)
  bool optimize = true;                   ///< freeze + optimize_for_inference
  bool tf32 = true;                       ///< CUDA: cuDNN may run float32 convolutions in TF32 (--no-tf32)
  Precision precision = Precision::fp32;  ///< bf16/fp16: encoders under autocast; int8: int8 linear layers
  /// The largest first-batch difference from float32, relative to its largest value; unset: by
  /// precision (precision_tolerance_for).
  std::optional<double> precision_tolerance;
  bool force = false;  ///< overwrite a cache or partial with another fingerprint
  /// --update: when only the input's data changed since the cache at `out` was made, keep the rows
  /// it holds (same key, same input digest) and encode the rest (docs/cache-fill.md). With force,
  /// a cache it cannot update (another fingerprint, damaged, not updatable) is filled again instead
  /// of refused; an up-to-date one is left as it is.
  bool update = false;
  /// --changes: list the rows of a fill of a new cache too (FillResult::changes; an update's are
  /// always listed).
  bool list_changes = false;
  bool check_determinism = false;
  int64_t commit_rows = 16384;  ///< rows between durable progress commits
  int shard_index = -1;         ///< with shard_count > 0: encode shard I of N (batch-aligned)
  int shard_count = 0;
};

/// The first-batch check's tolerance: --precision-tolerance, else 0.02 (bf16, fp16: autocast's
/// rounding) or 0.25 (int8: the linear layers' 8-bit inputs; docs/models.md).
double precision_tolerance_for(const FillOptions& opts);

/// How a fill ended.
enum class FillStatus { done, up_to_date, interrupted };

/// Where --decode device's files were decoded, and the convert thread's time in it (host seconds:
/// on a CUDA device the decoder's and ImagePrep's host work and launches, not the device's).
struct DeviceDecodeStats {
  int64_t reader_files = 0;    ///< by the reader threads: not a whole baseline JPEG (io::image::JpegLayout)
  int64_t device_files = 0;    ///< by the device's decoder (nvJPEG; libjpeg-turbo on a CPU device)
  int64_t hardware_files = 0;  ///< of those, by the GPU's hardware JPEG decoder (nvJPEG's hybrid one the rest)
  int64_t host_files = 0;      ///< left by the device's decoder (CMYK, damaged) and decoded on the host
  double decode_seconds = 0, prep_seconds = 0;      ///< decoding, and the rest (model::ImagePrep's resize and crop)
  double hardware_seconds = 0, hybrid_seconds = 0;  ///< of decode_seconds, in nvJPEG's hardware and hybrid calls

  DeviceDecodeStats& operator+=(const DeviceDecodeStats& o) {
    reader_files += o.reader_files;
    device_files += o.device_files;
    hardware_files += o.hardware_files;
    host_files += o.host_files;
    decode_seconds += o.decode_seconds;
    prep_seconds += o.prep_seconds;
    hardware_seconds += o.hardware_seconds;
    hybrid_seconds += o.hybrid_seconds;
    return *this;
  }
};

/// What a fill did.
struct FillResult {
  FillStatus status = FillStatus::done;
  int64_t rows = 0;          ///< rows in the cache
  int64_t rows_encoded = 0;  ///< rows encoded by this run (0 when up to date)
  int64_t rows_copied = 0;   ///< rows this run copied from the cache it updated (--update)
  int64_t resumed_from = 0;  ///< rows already committed by an earlier run
  double seconds = 0;
  double encode_seconds = 0;       ///< time inside encoder forward calls
  double model_setup_seconds = 0;  ///< loading, optimising and checking the encoders (once per run)
  double digest_seconds = 0;       ///< fingerprinting the input (one read of every row used)
  double publish_seconds = 0;      ///< building the HDF5 file from the journal and renaming it
  double input_wait_seconds = 0;   ///< the encode loop waiting for the reader threads' next batch
  double store_seconds = 0;        ///< checking the outputs, appending them to the journal, committing
  StageSeconds stage_seconds;      ///< each stage's busy time in the encode loop (bottleneck report)
  double loop_seconds = 0;         ///< the encode loop's wall time, less the first batch's checks
  bool convert_thread = false;     ///< decoding on the device and conversion ran on a thread of their own
  /// Which stage bounded the run and how far it was from the encoders' own speed (none when this
  /// run encoded no rows).
  std::optional<Bottleneck> bottleneck;
  /// Whether other processes held the cores while this run digested, encoded and published.
  CpuContention contention;
  bool device_convert = false;  ///< 8-bit inputs were converted on the encoders' device (--convert)
  bool device_decode = false;   ///< JPEG files were decoded on the encoders' device (--decode)
  DeviceDecodeStats decoded;    ///< with device_decode: where this run's files were decoded
  std::string image_simd;       ///< with image files: the image code's vector instructions (simd_text())
  uint64_t bytes_written = 0;   ///< embedding bytes written by this run
  int64_t skipped = 0;          ///< rows skipped with --on-error skip (in the whole cache)
  int64_t utf8_replaced = 0;    ///< ill-formed UTF-8 sequences of the text fields replaced with U+FFFD
  int64_t max_length = 0;       ///< tokens a text may hold (the largest of the text fields'), 0 without text
  int64_t texts_cut = 0;        ///< texts this run encoded that were cut at max_length
  int64_t tokens = 0;           ///< the text fields' tokens this run encoded (each encoder's, summed)
  int64_t token_slots = 0;      ///< and the slots they took in their batches, padding included
  int64_t max_tokens = 0;       ///< token slots per batch of a length window at most (0: no cap)
  int64_t length_window = 0;    ///< rows per length window (0: batches encoded as read)
  std::string out;              ///< the file written (the shard file when sharded)
  std::string partial_path;     ///< where progress is kept (when interrupted)
  std::string fingerprint;
  struct Encoder {
    std::string name;
    std::vector<int64_t> shape;  ///< [rows, ...]
    std::string inference;       ///< "optimized" or "plain"
    double optimize_max_abs_diff = 0;
    std::string math_mode;  ///< "tf32" or "ieee"
    /// The batch noise recorded for the cache (JournalEncoder): absolute, and relative to the
    /// first batch's largest value; negative when never measured.
    double batch_max_abs_diff = -1, batch_max_rel_diff = -1;
    std::string precision;  ///< "fp32", "bf16", "fp16" or "int8"
    /// The first batch's difference from float32 in `precision`, relative to its largest float32
    /// value (JournalEncoder; 0 in fp32).
    double precision_max_rel_diff = 0;
  };
  std::vector<Encoder> encoders;
  /// --update of an existing cache: what changed in the data since it was made (by key, or by
  /// position without keys), and the rows kept from it.
  struct Update {
    bool by_key = false;
    int64_t unchanged = 0, changed = 0, added = 0, removed = 0;  ///< as UpdatePlan counts them
    int64_t skipped_before = 0;  ///< unchanged rows the cache had skipped (--on-error skip): encoded again
    int64_t moved = 0;           ///< rows found by their content in another cache row (UpdatePlan::moved): copied
    int64_t copies = 0;          ///< as moved, from a cache row another row also keeps (UpdatePlan::copies)
    int64_t copied = 0;          ///< rows of the new cache copied from the cache: every unchanged row it had encoded
    /// The encode time the copied rows saved, from this run's encode rate (0 when it encoded nothing).
    double seconds_saved = 0;
    /// How far a row of the new cache is expected to be from a full fill's at most: an estimate,
    /// kUpdateNoiseFactor times the largest of the encoders' batch noise as measured on a probe of
    /// the first batch (0: bit for bit; each encoder's rows within that factor times its
    /// Encoder::batch_max_abs_diff); negative when never measured.
    double max_abs_diff_expected = -1;
  };
  std::optional<Update> update;
  /// --update --force: why the cache at `out` could not be updated and every row was encoded
  /// again ("exists with another fingerprint (changed: options/resize)"); "" otherwise.
  std::string refilled;
  /// A row an update did not keep as it was, or a row the cache no longer has.
  struct RowChange {
    std::string change;    ///< a fate_name() but "kept" (update_plan.h), or "removed"
    int64_t row = -1;      ///< its row in the new cache (-1: removed)
    int64_t old_row = -1;  ///< the cache row its key (or place) found, or it was copied from (-1: none)
    std::string key;       ///< its key as text (an empty string is a key where has_key)
    bool has_key = false;  ///< false when rows are matched by position (no keys)
    bool numeric_key = false;
    bool encoded = false;  ///< encoded by this run (not copied)
  };
  /// An update's changes: the new cache's rows it encoded or moved, in row order, then the cache's
  /// rows it removed; with list_changes, a fill of a new cache lists every row as added. Empty
  /// when up to date.
  std::vector<RowChange> changes;
};

/// Callbacks: progress(done, total) from the calling thread; warn(message) for fallbacks.
struct FillCallbacks {
  std::function<void(int64_t, int64_t)> progress;
  std::function<void(const std::string&)> warn;
};

/// Relative tolerance of the optimised-vs-plain comparison on the first batch, and the rows of it
/// compared.
inline constexpr double kOptimizeTolerance = 1e-4;
inline constexpr int64_t kOptimizeCheckRows = 16;
/// Rows of the first batch whose --precision output (bf16, fp16, int8) is compared with float32's
/// (precision_max_rel_diff): the float32 forward on them is the check's cost, one batch of float32
/// work for a run that converts to save it.
inline constexpr int64_t kPrecisionCheckRows = 32;
/// Rows of the first batch encoded alone to measure the encoder's batch noise (how far a row's
/// output moves with the other rows of its batch): what an update's rows may differ by from a full
/// fill's. They are spread over the batch in the order it was encoded (first and last included),
/// so over the lengths of a length window's texts too.
inline constexpr int64_t kBatchNoiseRows = 16;
/// An update's rows may differ from a full fill's by this many times the recorded batch noise: twice,
/// since a row in the update's batch and the same row in the full fill's can each be that far from
/// the row alone, and twice again, since the probe saw kBatchNoiseRows rows and another row's last
/// bits can move further (on the test CNN the noise over every row was 1.7 times the probe's).
inline constexpr double kUpdateNoiseFactor = 4;
/// A batch noise above this share of the largest value in the first batch's output is no rounding
/// (bf16 rounds at 0.4%): the encoder's output depends on the other rows of its batch (batch
/// statistics, pooling over the padded length). A fill warns; --update refuses such a cache.
inline constexpr double kBatchDependentShare = 0.01;
/// The batch noise share above which an encoder counts as batch-dependent, for a cache whose first
/// batch differed from float32 by `precision_max_rel_diff` (0 in float32): kBatchDependentShare, or
/// half that difference where it is larger. Reduced precision rounds each row's activations, and a
/// last-bit difference in float32 (a padded batch's attention against the row alone) moves a value
/// across a rounding step: all-MiniLM-L6-v2 in int8 showed 2.3% of its largest value between a
/// gloss alone and in a padded batch (float32: 1.5e-7), within the 10% int8 itself puts between a
/// full fill and float32, while batch statistics or pooling over the padding move rows by tens of
/// percent.
inline double batch_dependent_share(double precision_max_rel_diff) {
  return precision_max_rel_diff / 2 > kBatchDependentShare ? precision_max_rel_diff / 2 : kBatchDependentShare;
}

/// The dtypes embeddings are stored in (--dtype): float32, float16.
const Choices<DType>& storage_dtype_choices();

/// Runs a fill. Throws traincache::Error (with its exit code) on any failure; in that case no
/// output file exists and the partial progress is kept only if the run could be resumed.
FillResult run_fill(const FillOptions& opts, const FillCallbacks& cb = {});

/// run_fill with LibTorch in libtraincache_engines.so (base/module.h), loaded only to encode: a
/// program that calls this links no LibTorch, and a fill on the CPU whose inputs are refused or
/// whose cache is up to date never loads it (cache-fill). The same results and errors; a module
/// that cannot be loaded -> Error(unavailable).
FillResult run_fill_in_module(const FillOptions& opts, const FillCallbacks& cb = {});

/// Partial-progress directory used for `out`.
std::string partial_path(const std::string& out);

}  // namespace traincache::fill
