// Frozen TorchScript encoders and the input conversion rules shared by cache-fill and
// cache-inspect --verify. Needs LibTorch: include only from torch translation units.
#pragma once

#include <torch/script.h>

#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "traincache/io/source.h"
#include "traincache/model/int8.h"
#include "traincache/model/precision.h"
#include "traincache/text/tokenizer.h"

namespace traincache::model {

/// Parses "cpu", "cuda" or "cuda:N". Malformed -> Error(usage); CUDA not available -> Error(unavailable).
/// `option` names the flag in messages.
torch::Device parse_device(const std::string& spec, const std::string& option = "--device");
/// Throws Error(unavailable) naming `subject` when `device` is a CUDA index this machine lacks.
void require_device_index(const torch::Device& device, const std::string& subject);

/// Readies a CUDA device on a thread of its own while the caller goes on opening its inputs and
/// loading its model: the device's context, its first memory, cuBLAS's and cuDNN's libraries and
/// handles, and page-locked host memory, which the first batch would otherwise wait for one after
/// the other (docs/performance.md, "Where a GPU fill's time goes"). Nothing for a CPU device. The
/// destructor waits for the thread; a failure there is not reported: the run's own first use of
/// the device reports it.
class DeviceWarmup {
 public:
  explicit DeviceWarmup(const torch::Device& device);
  ~DeviceWarmup();
  DeviceWarmup(const DeviceWarmup&) = delete;
  DeviceWarmup& operator=(const DeviceWarmup&) = delete;

 private:
  std::thread thread_;
};

/// Sets LibTorch's intra-op threads: `threads` > 0 as given, 0 = one per usable core or
/// OMP_NUM_THREADS; never more than the OpenMP variables allow a team (intra_op_threads, which
/// OMP_THREAD_LIMIT=1 or OMP_DYNAMIC=true asked past made OpenBLAS wait for ever). (Debian's
/// OpenMP LibTorch otherwise starts with a single thread in C++ programs.)
void configure_threads(int threads);

/// Loads a TorchScript file as it was saved (training mode and requires_grad untouched).
/// Missing file -> Error(no_input); not TorchScript -> Error(data).
torch::jit::Module load_module(const std::string& path, torch::Device device);

/// For inputs whose shape changes from batch to batch (text, batched by tokens): on CUDA, turns off
/// what LibTorch compiles or plans anew for each shape, the TensorExpr fuser and cuDNN's attention
/// (process-wide; a CPU device changes nothing). docs/gpu.md, "Text on a GPU".
void for_varying_shapes(torch::Device device);

/// Whether the frozen, optimised module is worth trying: not for varying shapes on CUDA, where the
/// plain module ran faster (docs/gpu.md).
bool optimise_for(torch::Device device, bool varying_shapes);

/// Converts the floating-point parameters and buffers of `m` (and its submodules) to `type`; integer
/// and boolean buffers (a transformer's position ids) keep theirs, as PyTorch's `Module.to(dtype)`
/// does. (`torch::jit::Module::to(dtype)` converts every tensor, and an embedding then rejects its
/// float indices.)
void to_float_type(torch::jit::Module& m, torch::ScalarType type);

/// `m.forward(args)`, with any LibTorch/TorchScript exception turned into Error(data, subject,
/// "rejected the input (<what was fed>): <the one meaningful line>< (the likely cause)>"), except
/// running out of memory: Error(unavailable) as out_of_memory_error says.
torch::jit::IValue call_forward(torch::jit::Module& m, std::vector<torch::jit::IValue> args,
                                const std::string& subject);

/// What a model is fed, for messages: "[60, 3, 80, 80] float32", "[8, 32] int64 and [8, 32] int64".
std::string describe_inputs(const std::vector<torch::jit::IValue>& args);

/// True when `e` is LibTorch running out of memory: c10::OutOfMemoryError (a device's allocator) or
/// the CPU allocator's "not enough memory" (a plain c10::Error before LibTorch 2.x).
bool is_out_of_memory(const std::exception& e);

/// Out of memory is a resource failure, not bad input: Error(unavailable, subject, "out of memory:
/// <LibTorch's line> (a smaller --batch-size needs less)"), so that cache-fill keeps its progress.
Error out_of_memory_error(const std::string& subject, const std::exception& e);

/// Runs `body`; running out of memory anywhere in it (is_out_of_memory) leaves as Error(unavailable)
/// (out_of_memory_error), whatever threw it: the engines module's entry points run through this, so
/// that every tool says out of memory with one code (69), not as an internal error.
template <class F>
void out_of_memory_as_error(F&& body) {
  try {
    body();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    if (is_out_of_memory(e)) throw out_of_memory_error("", e);
    throw;
  }
}

/// The one meaningful line of a LibTorch/TorchScript exception message ("RuntimeError: ..."),
/// without the C++ backtrace and the TorchScript traceback.
std::string torch_error_message(const std::string& what);

/// Reads rows [start, start+count) of a column as a model input tensor, by the documented
/// conversion rules: uint8 -> float32 * scale; other integers -> int64; floats -> float32.
/// Strings and other types -> Error(data). Converts with plain loops (no OpenMP from readers).
torch::Tensor read_column_rows(const io::source::Column& col, int64_t start, int64_t count, double scale);

/// Rows [start, start+count) of a column of 8-bit rows as they are stored, uint8 on the CPU
/// (page-locked when `pin`), for conversion elsewhere: an image column's pixels before the
/// division by 255 (Column::read_pixels), else the stored bytes of a uint8 column.
torch::Tensor read_column_bytes(const io::source::Column& col, int64_t start, int64_t count, bool pin);

/// The type read_column_rows gives rows of `t`: int64 for integers other than uint8, else float32.
torch::Dtype converted_type(DType t);

/// The same for the rows listed in `rows` (ascending reads coalesce runs of consecutive rows:
/// sort them first), in that order.
torch::Tensor read_column_rows(const io::source::Column& col, const std::vector<int64_t>& rows, double scale);

/// A padded token batch as an encoder's inputs: input_ids, attention_mask, token_type_ids, each
/// int64 [rows, length].
std::vector<torch::Tensor> token_tensors(const text::TokenBatch& b);

/// Cuts `n` token tensors [rows, L] at `ts` to the longest sequence `mask` marks (at least one
/// column): a batch padded for more rows than it now holds pays only for its own longest.
void trim_padding(torch::Tensor* ts, std::size_t n, const torch::Tensor& mask);

/// Rows [a, b) of every tensor (the tensors themselves when that is all their rows): cache-fill's
/// batches of a unit, gc-train's chunks.
std::vector<torch::Tensor> slice_rows(const std::vector<torch::Tensor>& ts, int64_t a, int64_t b);

/// The number of tensors `m.forward` takes (its arguments without self).
std::size_t forward_arity(const torch::jit::Module& m);

/// How many tensors each of `texts` text fields gives a forward() of `arity` tensors whose first
/// `features` are other inputs: 1 (input_ids), 2 (+ attention_mask) or 3 (+ token_type_ids); 0
/// when `texts` is 0. Error(data, subject) when the arguments cannot be split so.
std::size_t text_tensors(std::size_t arity, std::size_t features, std::size_t texts, const std::string& subject);

/// An nn.Embedding of a module (a submodule whose type is an Embedding with a 2-D weight).
struct EmbeddingTable {
  std::string name;  ///< its path in the module, e.g. "embeddings.word_embeddings"
  int64_t rows = 0;
};

/// The embedding tables of `m`, in the module's order.
std::vector<EmbeddingTable> embedding_tables(const torch::jit::Module& m);

/// The table token ids index: `chosen` by path (--vocab-table; "none": no table, no check;
/// Error(usage) naming the tables when there is no such one); else the smallest table with at
/// least `vocab` rows (a position table declared first is not taken for it), else the largest;
/// nullopt when `m` has none.
std::optional<EmbeddingTable> token_table(const torch::jit::Module& m, int64_t vocab, const std::string& chosen = {});

/// The position table of `m`: an embedding table other than `token_name` whose last path part
/// names positions ("pos", "position_embeddings", "embed_positions", GPT-2's "wpe"), or nullopt.
std::optional<EmbeddingTable> position_table(const torch::jit::Module& m, const std::string& token_name);

/// Error(data, subject) when `tok` (loaded from `tok_path`) has more tokens than the token
/// table (token_table(m, vocab, chosen)) has rows: its ids could not all be embedded.
void check_vocabulary(const torch::jit::Module& m, const std::string& subject, const text::Tokenizer& tok,
                      const std::string& tok_path, const std::string& chosen = {});

/// Whether an optimised module's output is close enough to the full-float32 reference: within
/// `rtol` x `scale`, plus three times what the plain module itself differs from that reference in
/// the math mode both will run with (TF32 rounding; 0 in full float32). NaN is never close.
bool optimised_within(double optimised_diff, double plain_diff, double scale, double rtol);

/// Outcome of trying torch::jit::freeze + optimize_for_inference on a sample batch.
struct OptimizeOutcome {
  bool used = false;             ///< the optimised module is now in use
  std::string math = "ieee";     ///< the math mode both were run in (model::math_mode)
  double max_abs_diff = 0;       ///< between the optimised output and the plain one in full float32
  double plain_diff = 0;         ///< the plain output in `math` against full float32 (0 for ieee)
  std::string why_not;           ///< reason for falling back, when !used
  bool plain_nonfinite = false;  ///< the plain output already holds NaN/Inf (nothing to compare)
};

/// A frozen TorchScript encoder in eval mode, run under c10::InferenceMode.
class Encoder {
 public:
  /// Loads `path` onto `device`. Missing file -> Error(no_input); not TorchScript -> Error(data).
  Encoder(std::string name, std::string path, torch::Device device, std::string output = "");

  const std::string& name() const { return name_; }
  const std::string& path() const { return path_; }
  const std::string& output() const { return output_; }
  const torch::Device& device() const { return device_; }
  /// "optimized" or "plain": which module forward() runs (the int8 module is always optimised).
  const char* inference() const {
    return optimized_ || (precision_ == Precision::int8 && int8_) ? "optimized" : "plain";
  }

  /// Runs the encoder and selects the output tensor (--output). Rejected inputs and non-tensor
  /// outputs -> Error(data) naming the encoder.
  torch::Tensor forward(const std::vector<torch::Tensor>& inputs);

  /// The number of tensors forward() takes (its arguments without self), read once at load.
  std::size_t arity() const { return arity_; }
  /// The plain module (as loaded, in eval mode, parameters frozen).
  const torch::jit::Module& module() const { return plain_; }

  /// From now on forward() runs under autocast in `p` (and returns float32); fp32: as loaded;
  /// int8: the module make_int8 made.
  void set_precision(Precision p) { precision_ = p; }
  /// Makes the int8 module (int8_module of the plain one, its weights at most weight_max steps)
  /// that forward() runs in int8; throws int8_module's errors.
  Int8Conversion make_int8(int weight_max = kInt8WeightMax);
  /// Starts make_int8 on a thread of its own, so that the conversion runs beside what precedes the
  /// first batch (the next make_int8(sample, reference) waits for it; so does the destructor).
  void start_int8(int weight_max = kInt8WeightMax);
  /// make_int8 on a thread of its own (start_int8's, or one started here), while this one computes
  /// the plain module's float32 output for `sample` into *reference (the precision check's: one
  /// call that the graph executor neither profiles nor optimises, as the plain module is not run
  /// again in int8). Throws int8_module's errors, or the forward's.
  Int8Conversion make_int8(const std::vector<torch::Tensor>& sample, torch::Tensor* reference);
  /// Drops the optimised module: forward() runs the plain one from now on.
  void use_plain() { optimized_.reset(); }

  /// Tries the optimised module on `sample` in the math mode the rows will be encoded with; keeps
  /// it only when optimised_within(its difference from the plain module in full float32, the
  /// plain module's own TF32 difference, max(1, max|plain|), rtol). `runs_in`: the precision the
  /// rows will be encoded in; in float32 on the CPU its linear layers run on oneDNN where LibTorch
  /// has it (onednn_linear.h; autocast's bf16 and fp16 would not reach them).
  OptimizeOutcome try_optimize(const std::vector<torch::Tensor>& sample, double rtol,
                               Precision runs_in = Precision::fp32);

 private:
  torch::Tensor run(torch::jit::Module& m, const std::vector<torch::Tensor>& inputs);

  std::string name_, path_, output_;
  torch::Device device_;
  std::size_t arity_ = 0;
  torch::jit::Module plain_;
  std::optional<torch::jit::Module> optimized_;
  std::optional<torch::jit::Module> int8_;
  std::future<Int8Conversion> int8_made_;  // start_int8's conversion, until make_int8 takes it
  Precision precision_ = Precision::fp32;
};

}  // namespace traincache::model
