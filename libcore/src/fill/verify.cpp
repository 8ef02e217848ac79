#include "traincache/fill/verify.h"

#include <algorithm>
#include <random>
#include <set>

#include "encoding.h"
#include "traincache/base/error.h"
#include "traincache/base/sha256.h"
#include "traincache/io/cache_file.h"
#include "traincache/io/h5.h"
#include "traincache/io/source.h"
#include "traincache/model/encode.h"
#include "traincache/model/precision_torch.h"
#include "traincache/text/tokenizer.h"

namespace traincache::fill {

namespace {

// The fill's options as its fingerprint records them (a merged cache's: its job's; {} for a cache
// without).
nlohmann::json fill_options(const io::cache::CacheInfo& info) {
  const auto fp = nlohmann::json::parse(io::cache::making_fingerprint_json(info), nullptr, false);
  return fp.is_object() && fp.contains("options") && fp["options"].is_object() ? fp["options"]
                                                                               : nlohmann::json::object();
}

// The input opened as the fill opened it: its preprocessing and, after --on-error skip, unreadable
// files tolerated (their rows are skipped rows, which are never sampled) and tar samples lacking a
// field the fill read left out as the fill left them out (the rows stay the fill's).
io::source::FileOptions fill_files(const io::cache::CacheInfo& info) {
  io::source::FileOptions files;
  files.preprocess = io::image::spec_from(info.preprocess);
  files.tolerate_unreadable = fill_options(info).value("on_error", "") == "skip";
  if (!files.tolerate_unreadable || info.input_kind != io::source::kind_name(io::source::Kind::tar)) return files;
  auto add = [&files](const std::string& field) {
    if (!field.empty() && std::count(files.sample_fields.begin(), files.sample_fields.end(), field) == 0)
      files.sample_fields.push_back(field);
  };
  for (const auto& e : info.embeddings)
    for (const auto& f : e.features) add(f);
  for (const auto& t : info.text) add(t.field);
  for (const io::cache::LabelInfo* l : io::cache::label_columns(info))  // a key table's field is no sample's
    if (!io::source::is_key_table(l->source.substr(0, l->source.rfind(':')))) add(l->source);
  if (info.keys_source) add(*info.keys_source);
  return files;
}

// The rows `rows` of text input `key`, tokenized as the cache records: ids, mask, type ids.
std::vector<torch::Tensor> text_args(const io::cache::CacheInfo& info, const std::string& key, const std::string& input,
                                     const std::vector<int64_t>& rows) {
  auto it = std::find_if(info.text.begin(), info.text.end(), [&](const auto& t) { return t.key == key; });
  if (it == info.text.end()) throw Error(Exit::data, info.path, "text input '" + key + "' is not described");
  if (it->ragged) throw Error(Exit::usage, info.path, "built from token sequences of a slab; cannot verify");
  if (sha256_file(it->tokenizer_path) != it->tokenizer_sha256)
    throw Error(Exit::data, it->tokenizer_path, "changed since the cache was built (its SHA-256 differs)");
  auto tok = text::load(it->tokenizer_path);
  text::TokenizeOptions opts;
  opts.max_length = it->max_length;
  opts.strict_utf8 = it->strict_utf8;
  io::source::FileOptions files = fill_files(info);
  files.strict_utf8 = it->strict_utf8;
  auto col = io::source::open_column(input, it->field, files, io::source::Role::text);
  if (col->info().rows() < info.row_start + info.rows)
    throw Error(Exit::data, input, "field '" + it->field + "' has fewer rows than the cache was built from");
  std::vector<std::string> texts;
  for (int64_t r : rows) texts.push_back(col->read_strings(info.row_start + r, 1).front());
  return model::token_tensors(text::tokenize_batch(*tok, texts, opts, input + ": field '" + it->field + "'"));
}

// `samples` distinct rows of a cache of `rows`, drawn with `seed`, in order; none of `skipped` (the
// rows cache-fill --on-error skip left as zeros: there is nothing to re-encode for them).
std::vector<int64_t> sample_rows(int64_t samples, int64_t rows, uint64_t seed, const std::set<int64_t>& skipped) {
  std::vector<int64_t> eligible;
  for (int64_t r = 0; r < rows && !skipped.empty(); ++r)
    if (!skipped.count(r)) eligible.push_back(r);
  const int64_t n = skipped.empty() ? rows : static_cast<int64_t>(eligible.size());
  std::mt19937_64 rng(seed);
  const int64_t k = std::min<int64_t>(samples, n);
  std::set<int64_t> picked;
  std::uniform_int_distribution<int64_t> dist(0, std::max<int64_t>(0, n - 1));
  while (static_cast<int64_t>(picked.size()) < k) {
    const int64_t i = dist(rng);
    picked.insert(skipped.empty() ? i : eligible[static_cast<std::size_t>(i)]);
  }
  return {picked.begin(), picked.end()};
}

// The input to re-encode from (--input, else the recorded one); a slab, or an input of another
// kind than the cache was built from, is refused.
std::string verify_input(const VerifyOptions& opts, const io::cache::CacheInfo& info) {
  std::string input = opts.input.empty() ? info.input_path : opts.input;
  if (input.rfind("shm:", 0) == 0)
    throw Error(Exit::usage, opts.cache,
                "built from slab " + input + "; give the same data as an HDF5 file with --input");
  if (!info.input_kind.empty() && io::source::kind_name(io::source::kind_of(input)) != info.input_kind)
    throw Error(Exit::usage, input,
                std::string("is a ") + io::source::kind_name(io::source::kind_of(input)) +
                    " input but the cache was built from a " + info.input_kind + " one");
  return input;
}

// How the cache's JPEG files were decoded: "" by the reader threads, kDecodeNvjpeg (cache-fill
// --decode device on CUDA: baseline files by nvJPEG), or kDecodeNvjpegEvery (every whole one by
// nvJPEG: fills before the fingerprint said which).
std::string jpeg_decoding(const io::cache::CacheInfo& info) {
  const std::string d = fill_options(info).value("decode", "");
  return d == kDecodeNvjpeg || d == kDecodeNvjpegEvery ? d : "";
}

// Rows `rows` of an image column decoded as cache-fill --decode device decodes them on `device`
// (`decoding`: jpeg_decoding's), then converted there (fill/device_decode.h, fill/encoding.h).
torch::Tensor decoded_on_device(std::shared_ptr<const io::source::Column> col, int64_t first,
                                const std::vector<int64_t>& rows, double scale, torch::Device device,
                                const std::string& decoding) {
  Input in(std::move(col));
  in.convert_on_device = in.decode_on_device = true;
  in.device_decodes_every_jpeg = decoding == kDecodeNvjpegEvery;
  DeviceDecode decode(in, device);
  DeviceConversion convert(in, device);
  std::map<int64_t, std::string> skipped;  // none: an unreadable row is an error here
  std::vector<torch::Tensor> read;
  for (int64_t r : rows) {
    EncodedRows one = read_encoded(in, first + r, 1, false, skipped);
    read.push_back(convert(decode(one, first + r, false, skipped), scale));
  }
  return torch::cat(read);
}

// Rows `rows` of encoder e's numeric features, read and preprocessed as the fill fed them: when the
// fill decoded JPEG files by nvJPEG, decoded on `device` as cache-fill --decode device does (by
// nvJPEG on a CUDA device; on the CPU by libjpeg-turbo, which gives the host's bytes).
std::vector<torch::Tensor> feature_args(const io::cache::CacheInfo& info, const io::cache::EmbeddingInfo& e,
                                        const std::string& input, const std::vector<int64_t>& rows,
                                        torch::Device device) {
  std::vector<torch::Tensor> args;
  const io::source::FileOptions files = fill_files(info);
  const std::string decoding = jpeg_decoding(info);
  for (const auto& f : e.features) {
    auto col = io::source::open_column(input, f, files, io::source::Role::images);
    io::source::require_numeric_input(col->info(), input);
    if (col->info().rows() < info.row_start + info.rows)
      throw Error(Exit::data, input, "dataset '" + f + "' has fewer rows than the cache was built from");
    if (!decoding.empty() && col->preprocess()) {
      args.push_back(decoded_on_device(std::move(col), info.row_start, rows, info.input_scale, device, decoding));
      continue;
    }
    std::vector<torch::Tensor> read;
    for (int64_t r : rows) read.push_back(model::read_column_rows(*col, info.row_start + r, 1, info.input_scale));
    args.push_back(torch::cat(read));
  }
  return args;
}

// The re-encoded rows `got` against the cached `want` (float64, [rows, -1]), within v's tolerances.
void compare_rows(const torch::Tensor& got, const torch::Tensor& want, const std::vector<int64_t>& rows,
                  EncoderVerdict& v) {
  if (got.sizes() != want.sizes())
    throw Error(Exit::negative, "encoder '" + v.name + "'", "re-encoded rows have another shape than the cached ones");
  auto diff = (got - want).abs();
  // Written as "not within" so that NaN, on either side, never counts as a match.
  auto bad_rows = (~(diff <= (v.atol + v.rtol * want.abs()))).any(1);
  v.checked = static_cast<int64_t>(rows.size());
  v.mismatched = bad_rows.sum().item<int64_t>();
  v.max_abs_diff = diff.max().item<double>();
  if (v.mismatched > 0) v.first_bad_row = rows[bad_rows.nonzero()[0][0].item<int64_t>()];
}

// The precision encoder e's rows were encoded in ("" in caches from before it was recorded: fp32),
// and whether `device` runs it: a refusal says which device would.
Precision recorded_precision(const io::cache::EmbeddingInfo& e, const torch::Device& device) {
  const auto p =
      e.precision.empty() ? std::optional<Precision>(Precision::fp32) : model::precision_choices().find(e.precision);
  const std::string subject = "encoder '" + e.name + "'";
  if (!p) throw Error(Exit::data, subject, "records precision '" + e.precision + "', which this build cannot run");
  if (*p == Precision::fp16 && !device.is_cuda())
    throw Error(Exit::usage, subject,
                "its rows were encoded in fp16, which LibTorch runs on CUDA devices only: verify with --device cuda");
  if (*p == Precision::int8 && device.is_cuda())
    throw Error(Exit::usage, subject, "its rows were encoded in int8, which runs on the CPU: verify with --device cpu");
  return *p;
}

// The encoder's output on `args`, on the CPU as float64 [rows, -1]. Given the masks of its token
// inputs (the last masks.size() groups of `n` tensors; masks[t] the attention mask of group t),
// each row alone, cut to its own length: in one batch the rows would be padded to the longest,
// which moves float32's last bits in the attention, and int8's or bf16's rounding can carry such a
// bit a whole step (the fill's length-sorted batches pad little; its batch noise, measured against
// rows alone, bounds the rest).
torch::Tensor reencode(model::Encoder& enc, const std::vector<torch::Tensor>& args,
                       const std::vector<torch::Tensor>& masks, std::size_t n) {
  const int64_t k = args.front().size(0);
  if (masks.empty()) return enc.forward(args).to(torch::kCPU, torch::kFloat64).reshape({k, -1});
  std::vector<torch::Tensor> rows;
  for (int64_t r = 0; r < k; ++r) {
    std::vector<torch::Tensor> one = model::slice_rows(args, r, r + 1);
    for (std::size_t t = 0; t < masks.size(); ++t)
      model::trim_padding(&one[one.size() - (masks.size() - t) * n], n, masks[t].slice(0, r, r + 1));
    rows.push_back(enc.forward(one).to(torch::kCPU, torch::kFloat64).reshape({1, -1}));
  }
  return torch::cat(rows);
}

// Encoder e of the cache re-run on rows `rows` of `input` and compared with what the cache holds.
EncoderVerdict verify_encoder(const VerifyOptions& opts, const io::cache::CacheInfo& info,
                              const io::cache::EmbeddingInfo& e, const std::string& input,
                              const std::vector<int64_t>& rows, torch::Device device) {
  EncoderVerdict v;
  v.name = e.name;
  auto it = opts.encoders.find(e.name);
  v.encoder_path = it != opts.encoders.end() ? it->second : e.encoder_path;
  v.encoder_changed = sha256_file(v.encoder_path) != e.encoder_sha256;
  // Re-encoded in the math mode the rows were encoded in (TF32 when the cache says so and the
  // device has it); TF32 rows are compared as float16 ones are, since both keep a 10-bit mantissa.
  model::allow_tf32(e.math_mode == "tf32");
  v.rtol = opts.rtol >= 0 ? opts.rtol : (e.dtype == DType::f16 || e.math_mode == "tf32" ? 2e-3 : 1e-4);
  const Precision precision = recorded_precision(e, device);

  std::vector<torch::Tensor> args = feature_args(info, e, input, rows, device);
  model::Encoder enc(e.name, v.encoder_path, device, e.output);
  if (!e.text.empty()) model::for_varying_shapes(device);
  const std::size_t n = model::text_tensors(enc.arity(), args.size(), e.text.size(), "encoder '" + e.name + "'");
  std::vector<torch::Tensor> masks;  // in reduced precision, to encode text rows one at a time
  for (const auto& key : e.text) {
    auto t = text_args(info, key, input, rows);
    if (precision != Precision::fp32) masks.push_back(t[1]);
    args.insert(args.end(), t.begin(), t.begin() + static_cast<std::ptrdiff_t>(n));
  }
  // Re-encoded in the rows' own precision, by the module (optimised or plain) that encoded them.
  if (precision == Precision::int8) {
    // at the weight range the rows were encoded with: 127 in caches filled before it was recorded;
    // a damaged value reaches int8_module's refusal
    enc.make_int8(static_cast<int>(std::clamp<int64_t>(io::cache::int8_weight_max(e), -1, 1000)));
  } else if (e.inference == "optimized") {
    enc.try_optimize(args, 1e-4, precision);
  }
  enc.set_precision(precision);
  const int64_t k = static_cast<int64_t>(rows.size());
  torch::Tensor got = reencode(enc, args, masks, n);
  std::vector<float> cached = io::cache::read_embedding_rows(opts.cache, e.name, rows);
  torch::Tensor want =
      torch::from_blob(cached.data(), {k, static_cast<int64_t>(cached.size()) / std::max<int64_t>(1, k)},
                       torch::kFloat32)
          .to(torch::kFloat64);
  // In reduced precision a row re-encoded outside its batch may differ as an update's rows may, by
  // kUpdateNoiseFactor times the recorded batch noise (float32's is within rtol); a text row also
  // by rounding steps where its batch's padding moved a float32 last bit, which the fill's 16
  // probed rows can all miss: up to the precision's own recorded difference from float32
  // (precision_max_rel_diff of the largest value; MiniLM in int8: 1.2% seen where the batch noise
  // recorded 0, 8.6% allowed).
  double noise = 0;
  if (precision != Precision::fp32) noise = kUpdateNoiseFactor * std::max(0.0, e.batch_max_abs_diff);
  if (precision != Precision::fp32 && !e.text.empty())
    noise = std::max(noise, e.precision_max_rel_diff * want.abs().max().item<double>());
  v.atol = opts.atol + noise;
  compare_rows(got, want, rows, v);
  return v;
}

}  // namespace

VerifyReport run_verify(const VerifyOptions& opts) {
  if (opts.samples <= 0) throw Error(Exit::usage, "--verify", "the number of rows must be positive");
  torch::Device device = model::parse_device(opts.device);
  model::configure_threads(opts.threads);
  io::cache::CacheInfo info = io::cache::read_info(opts.cache, false);
  if (!info.complete) throw Error(Exit::data, opts.cache, "incomplete cache; nothing to verify");
  if (info.embeddings.empty())
    throw Error(Exit::data, opts.cache, "no embeddings under /embeddings; nothing to verify");
  // What --check refuses in structure (integer or float64 embeddings, short datasets, /skipped rows
  // out of range) --verify refuses too, before it encodes a row.
  io::cache::require_sound_structure(info, opts.cache);
  for (const auto& [name, path] : opts.encoders)
    if (std::none_of(info.embeddings.begin(), info.embeddings.end(), [&](const auto& e) { return e.name == name; }))
      throw Error(Exit::usage, "--encoder",
                  "the cache has no encoder named '" + name + "' (have: " + io::cache::encoder_names(info) + ")");

  VerifyReport rep;
  rep.path = opts.cache;
  std::set<int64_t> skipped;
  for (const auto& [row, why] : io::cache::read_skipped(opts.cache)) skipped.insert(row);
  rep.rows = sample_rows(opts.samples, info.rows, opts.seed, skipped);
  if (rep.rows.empty())
    throw Error(Exit::data, opts.cache, "every row was skipped (--on-error skip); nothing to verify");
  const std::string input = verify_input(opts, info);
  for (const auto& e : info.embeddings) rep.encoders.push_back(verify_encoder(opts, info, e, input, rep.rows, device));
  return rep;
}

}  // namespace traincache::fill
