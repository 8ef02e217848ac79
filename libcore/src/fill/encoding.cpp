#include "encoding.h"

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <tuple>
#include <utility>

#include "traincache/base/error.h"
#include "traincache/base/interrupt.h"
#include "traincache/base/prefetch.h"
#include "traincache/base/timing.h"
#include "traincache/model/precision_torch.h"
#include "traincache/text/token_batches.h"

namespace traincache::fill {

torch::Tensor read_rows(const Input& in, int64_t start, int64_t count, double scale, bool pin) {
  if (!in.convert_on_device) return model::read_column_rows(*in.col, start, count, scale);
  return model::read_column_bytes(*in.col, start, count, pin);
}

torch::Dtype read_dtype(const Input& in) {
  return in.convert_on_device ? torch::kByte : model::converted_type(in.info().dtype);
}

std::vector<torch::Tensor> read_text(const TextInput& t, int64_t start, int64_t count,
                                     const text::TokenizeOptions& opts, int64_t& cut, const Inputs& in) {
  if (t.tok) {
    std::vector<int64_t> rows;  // an update's rows are gathered: errors name the input's row
    for (int64_t r = start; !in.input_rows.empty() && r < start + count; ++r) rows.push_back(in.input_row(r));
    // One reader (text's): a window's texts on every core, so that the first batch, which waits
    // for its whole window, waits less; later windows are read beside the loop either way.
    text::TokenBatch b = text::tokenize_batch(*t.tok, t.col->read_strings(start, count), opts,
                                              t.col->path() + ": field '" + t.field + "'", start,
                                              rows.empty() ? nullptr : &rows, in.readers > 1 ? 1 : 0);
    cut += b.truncated;
    return model::token_tensors(b);
  }
  std::vector<int64_t> values, offsets;
  t.col->read_ragged(start, count, values, offsets);
  std::vector<int64_t> all(static_cast<std::size_t>(count));
  std::iota(all.begin(), all.end(), 0);
  return model::token_tensors(
      text::pad_rows(text::token_rows(values, std::move(offsets), opts.pad_id, t.col->path(), start), all));
}

torch::Tensor DeviceConversion::operator()(const torch::Tensor& rows, double scale) {
  if (!in_.convert_on_device) return rows;
  c10::InferenceMode guard;
  const auto on = torch::TensorOptions(torch::kFloat32).device(device_);
  const io::image::Spec* spec = in_.col->preprocess();
  if (!scalar_.defined()) {
    // Tensors, not scalars: a CUDA division by a scalar multiplies by its reciprocal, which can
    // round differently from the host's division.
    scalar_ = torch::full({1}, spec ? 255.f : static_cast<float>(scale), on);
    if (spec && !spec->mean.empty()) {
      const int64_t c = in_.info().shape[1];
      std::vector<float> mean, sd;
      for (int64_t ch = 0; ch < c; ++ch) {
        const std::size_t mi = std::min<std::size_t>(static_cast<std::size_t>(ch), spec->mean.size() - 1);
        mean.push_back(static_cast<float>(spec->mean[mi]));
        sd.push_back(static_cast<float>(spec->std[mi]));
      }
      mean_ = torch::tensor(mean).view({c, 1, 1}).to(on);
      std_ = torch::tensor(sd).view({c, 1, 1}).to(on);
    }
  }
  torch::Tensor x = rows.to(device_, /*non_blocking=*/rows.is_pinned()).to(torch::kFloat32);
  if (!spec) return x.mul_(scalar_);
  x.div_(scalar_);
  return mean_.defined() ? x.sub_(mean_).div_(std_) : x;
}

namespace {

// Rows [b.start, b.start + b.count) of an image column, one by one: a row whose file cannot be
// read or decoded becomes zeros and is recorded in b.skipped.
torch::Tensor read_tolerant(const Input& in, Batch& b, double scale, bool pin) {
  std::vector<torch::Tensor> rows;
  for (int64_t r = b.start; r < b.start + b.count; ++r)
    if (!tolerate_input_error([&] { rows.push_back(read_rows(in, r, 1, scale, pin)); }, r, true, b.skipped)) {
      std::vector<int64_t> shape = in.info().shape;
      shape[0] = 1;
      rows.push_back(torch::zeros(shape, read_dtype(in)));
    }
  return torch::cat(rows);
}

// A batch's rows of `in`; with `skip`, an image column that fails is read again row by row.
torch::Tensor read_batch(const Input& in, Batch& b, double scale, bool skip, bool pin) {
  if (!skip || !in.col->preprocess()) return read_rows(in, b.start, b.count, scale, pin);
  try {
    return read_rows(in, b.start, b.count, scale, pin);
  } catch (const Error& e) {
    if (e.code() != Exit::data && e.code() != Exit::no_input) throw;
    return read_tolerant(in, b, scale, pin);
  }
}

// Runs `read` (reading or decoding input rows); an image that cannot be read stops the fill (without
// --on-error skip) with its reason and what would let the fill go on.
template <class Fn>
auto naming_skip(const Inputs& in, const FillOptions& opts, Fn&& read) {
  try {
    return read();
  } catch (const Error& e) {
    if (opts.on_error == OnError::skip || !in.preprocess() || (e.code() != Exit::data && e.code() != Exit::no_input))
      throw;
    throw Error(e.code(), "", std::string(e.what()) + kSkipHint);
  }
}

// `out` with the rows skipped in `batch` set to zero (no embedding for them). Out of place: the
// encoder's output is an inference tensor, which must not be changed outside InferenceMode.
torch::Tensor zero_skipped(const torch::Tensor& out, const Batch& batch) {
  std::vector<int64_t> rows;
  for (const auto& [row, why] : batch.skipped) rows.push_back(row - batch.start);
  return out.index_fill(0, torch::tensor(rows, torch::kInt64), 0);
}

// Units (batches or length windows, `units`: first row and rows of each), read ahead on `workers`
// threads (at most two per worker in flight) and handed out in order.
class Prefetcher {
 public:
  // The reader threads time the units they read into `busy` (Stage::input and its parts).
  Prefetcher(const Inputs& in, const std::vector<std::unique_ptr<model::Encoder>>& encoders, const FillOptions& opts,
             std::vector<std::pair<int64_t, int64_t>> units, StageSink* busy)
      : units_(std::move(units)),
        pf_(static_cast<int64_t>(units_.size()), in.readers, 2 * in.readers,
            [&in, &opts, busy, pin = encoders.front()->device().is_cuda(), this](int64_t k) {
              Batch b;
              std::tie(b.start, b.count) = units_[static_cast<std::size_t>(k)];
              BindStageSink bind(busy);
              StageTimer unit(Stage::input);
              const bool skip = opts.on_error == OnError::skip;
              for (auto& [name, d] : in.features)
                if (d.decode_on_device)
                  b.encoded[name] = read_encoded(d, b.start, b.count, skip, b.skipped);
                else
                  b.inputs[name] = read_batch(d, b, opts.input_scale, skip, pin);
              for (auto& [key, t] : in.texts) {
                StageTimer tokenize(Stage::tokenize);
                b.text[key] = read_text(t, b.start, b.count, opts.tokenize, b.texts_cut, in);
              }
              return b;
            }) {}

  int64_t batches() const { return pf_.count(); }
  // Blocks until the next batch is ready; rethrows a reader's error.
  Batch next() { return pf_.next(); }

 private:
  const std::vector<std::pair<int64_t, int64_t>> units_;
  OrderedPrefetcher<Batch> pf_;
};

}  // namespace

Encoding::Encoding(FillRun& run, EncodePlan& planned, std::vector<std::unique_ptr<model::Encoder>>& encoders,
                   FillTally& tally)
    : opts_(run.opts),
      in_(planned.encoded_in(run.in)),
      encoders_(encoders),
      journal_(planned.journal),
      tally_(tally),
      cb_(run.cb),
      committed_(journal_.committed_rows > 0 ? journal_.encoders
                 : planned.update            ? planned.update->encoders()
                                             : std::map<std::string, JournalEncoder>{}),
      row_shapes_(encoders.size()),
      shape_known_(encoders.size(), false),
      resumed_(journal_.committed_rows > 0) {
  const torch::Device device = encoders.front()->device();
  for (const auto& [name, keys] : in_.per_encoder_text)
    if (!keys.empty()) model::for_varying_shapes(device);
  for (const auto& [name, d] : in_.features) {
    conversions_.emplace(name, DeviceConversion(d, device));
    if (d.decode_on_device)
      decoders_.emplace(std::piecewise_construct, std::forward_as_tuple(name), std::forward_as_tuple(d, device));
    convert_ahead_ = convert_ahead_ || d.convert_on_device;
  }
  if (convert_ahead_ && device.is_cuda()) {
    const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
    main_stream_ = cuda.getStream(device);
    side_stream_ = cuda.getStreamFromGlobalPool(device);
  }
  if (journal_.committed_rows == 0) {
    journal_.encoders = committed_;
    journal_.skipped.clear();
  }
  for (std::size_t i = 0; i < encoders.size(); ++i) {
    auto it = committed_.find(encoders[i]->name());
    int64_t keep = 0;
    if (it != committed_.end()) {
      row_shapes_[i] = it->second.row_shape;
      shape_known_[i] = it->second.has_shape;
      keep = journal_.committed_rows * row_bytes_of(row_shapes_[i], dtype_size(opts_.dtype));
    }
    raws_.emplace_back(journal_.raw(encoders[i]->name()), keep);
  }
}

bool Encoding::run(const RowPlan& plan) {
  int64_t done = journal_.committed_rows, last_commit = done;
  if (done >= plan.rows()) return true;
  // A resumed run commits whole units: it goes on from the unit that begins at its committed row.
  auto units = unit_ranges(plan.begin, plan.end, in_.unit, in_.groups);
  units.erase(units.begin(),
              std::find_if(units.begin(), units.end(), [&](const auto& u) { return u.first >= plan.begin + done; }));
  if (units.empty() || units.front().first != plan.begin + done)
    throw Error(Exit::data, "journal", "its committed rows do not end a batch of this input (--force discards it)");
  const auto loop_start = Clock::now();
  Prefetcher pf(in_, encoders_, opts_, std::move(units), &reader_busy_);
  // Outputs are checked, appended and committed on one thread behind this one, in order, while the
  // next batch encodes; a commit runs after the appends of the rows it counts.
  SerialWorker store(2 * encoders_.size() + 2);
  // With columns converted on the device, one thread of its own decodes (--decode device), copies
  // and converts the next units while this thread encodes: on a CUDA device on a side stream, so
  // that their decoding, copies and kernels run beside this unit's forward on the current stream.
  std::optional<OrderedPrefetcher<Batch>> ahead;
  if (convert_ahead_)
    ahead.emplace(pf.batches(), 1, 2, [&](int64_t) {
      Batch b = naming_skip(in_, opts_, [&] { return pf.next(); });
      convert_inputs(b);
      return b;
    });
  if (cb_.progress) cb_.progress(done, plan.rows());
  auto next = [&] {
    auto t_wait = Clock::now();
    Batch b = ahead ? ahead->next() : naming_skip(in_, opts_, [&] { return pf.next(); });
    tally_.input_wait_seconds += seconds_since(t_wait);
    if (!b.converted) convert_inputs(b);
    tally_.stage_seconds.convert += b.convert_seconds;
    if (!ahead) tally_.encode_seconds += b.convert_seconds;  // else beside the encoder calls
    return b;
  };
  tally_.convert_thread = ahead.has_value();
  for (int64_t k = 0; k < pf.batches(); ++k) {
    if (interrupt_requested()) {
      if (done > last_commit) store.submit([this, done] { commit(done); });
      store.drain();
      ahead.reset();  // the convert thread stopped before its figures are read
      record_stages(loop_start);
      return false;
    }
    Batch batch = next();
    // The current stream waits for this unit's conversion from here on, after the previous
    // unit's forward (the next units' conversions, on the convert thread, run beside this one's).
    if (batch.ready) batch.ready->block(*main_stream_);
    encode_unit(batch, /*first=*/k == 0, plan.begin, store);  // the first unit gets the first batch's checks
    tally_.rows_encoded += batch.count;
    tally_.texts_cut += batch.texts_cut;
    done += batch.count;
    if (done - last_commit >= opts_.commit_rows || done == plan.rows()) {
      store.submit([this, done] { commit(done); });
      last_commit = done;
    }
    if (cb_.progress) cb_.progress(done, plan.rows());
  }
  store.drain();
  ahead.reset();
  record_stages(loop_start);
  return true;
}

void Encoding::convert_inputs(Batch& batch) {
  auto t_convert = Clock::now();
  try {
    std::optional<c10::StreamGuard> on_side;
    if (side_stream_) on_side.emplace(*side_stream_);
    for (auto& [name, decode] : decoders_) {
      batch.inputs[name] = naming_skip(in_, opts_, [&] {
        return decode(batch.encoded.at(name), batch.start, opts_.on_error == OnError::skip, batch.skipped);
      });
      batch.encoded.erase(name);
    }
    for (auto& [name, convert] : conversions_) batch.inputs[name] = convert(batch.inputs[name], opts_.input_scale);
    if (side_stream_) {
      // The rows' memory stays theirs until the current stream is done with them too.
      for (auto& [name, t] : batch.inputs)
        if (t.is_cuda()) t.record_stream(*main_stream_);
      batch.ready.emplace(c10::DeviceType::CUDA);
      batch.ready->record(*side_stream_);
    }
  } catch (const std::exception& e) {
    if (!model::is_out_of_memory(e)) throw;
    throw model::out_of_memory_error(
        "input rows " + std::to_string(batch.start) + ".." + std::to_string(batch.start + batch.count - 1), e);
  }
  batch.converted = true;
  batch.convert_seconds = seconds_since(t_convert);
}

void Encoding::encode_unit(Batch& batch, bool first, int64_t begin, SerialWorker& store) {
  for (std::size_t i = 0; i < encoders_.size(); ++i) encode(i, batch, first, store);
  std::vector<std::pair<int64_t, std::string>> skipped;
  for (const auto& [row, why] : batch.skipped) {
    skipped.emplace_back(row - begin, why);
    if (cb_.warn) cb_.warn("skipped input row " + std::to_string(in_.input_row(row)) + ": " + why);
  }
  if (!skipped.empty())
    store.submit([this, skipped = std::move(skipped)] {
      journal_.skipped.insert(journal_.skipped.end(), skipped.begin(), skipped.end());
    });
}

void Encoding::close() {
  for (auto& r : raws_) r.close();
}

void Encoding::record_stages(Clock::time_point loop_start) {
  StageSeconds& s = tally_.stage_seconds;
  s.input = reader_busy_.seconds(Stage::input);
  s.decode = reader_busy_.seconds(Stage::decode);
  s.resize = reader_busy_.seconds(Stage::resize);
  s.tokenize = reader_busy_.seconds(Stage::tokenize);
  s.store = tally_.store_seconds;
  tally_.decoded = {};
  for (const auto& [name, decode] : decoders_) tally_.decoded += decode.stats();
  tally_.loop_seconds = std::max(0.0, seconds_since(loop_start) - first_checks_seconds_);
}

void Encoding::commit(int64_t rows) {
  auto t_store = Clock::now();
  for (auto& r : raws_) r.sync();
  for (std::size_t i = 0; i < raws_.size(); ++i)
    journal_.encoders[encoders_[i]->name()].chunks.emplace_back(rows, raws_[i].take_digest());
  journal_.committed_rows = rows;
  journal_.save();
  tally_.store_seconds += seconds_since(t_store);
}

void Encoding::check_vocabulary(model::Encoder& enc) {
  for (const auto& key : in_.per_encoder_text.at(enc.name())) {
    const TextInput& t = in_.texts.at(key);
    if (t.tok)
      model::check_vocabulary(enc.module(), "encoder '" + enc.name() + "'", *t.tok, t.tokenizer_path,
                              opts_.tokenize.vocab_table);
  }
}

void Encoding::first_batch_checks(model::Encoder& enc, const std::vector<torch::Tensor>& args, JournalEncoder& je) {
  auto committed = committed_.find(enc.name());
  const bool resumed = committed != committed_.end();
  // int8 runs its own module, always optimised: the float32 one only gives the precision check's
  // reference, and optimising it too would cost the load a second optimisation.
  const bool text = !in_.per_encoder_text.at(enc.name()).empty();
  const bool want_opt =
      opts_.precision != Precision::int8 && (resumed ? committed->second.inference == "optimized"
                                                     : opts_.optimize && model::optimise_for(enc.device(), text));
  if (want_opt) {
    // On a few rows: the check compares two modules, and the plain one's forward over a whole
    // batch would cost as much as the batch itself (the optimised rows are encoded after it).
    const int64_t n = args.empty() ? 0 : std::min<int64_t>(kOptimizeCheckRows, args.front().size(0));
    model::OptimizeOutcome o;
    try {
      o = enc.try_optimize(model::slice_rows(args, 0, n), kOptimizeTolerance, opts_.precision);
    } catch (const Error&) {  // the plain module failed on those rows: the batch's failure is the one to say
      o = enc.try_optimize(args, kOptimizeTolerance, opts_.precision);
    }
    if (!o.used && resumed)
      throw Error(Exit::data, "encoder '" + enc.name() + "'",
                  "the optimised module used for the committed rows is no longer usable (" + o.why_not +
                      "); use --force to start over");
    if (!o.used && !o.plain_nonfinite && cb_.warn)
      cb_.warn("encoder '" + enc.name() + "': using the plain module: " + o.why_not);
    if (!resumed) je.optimize_max_abs_diff = o.max_abs_diff;
  }
  if (opts_.precision != Precision::fp32) check_precision(enc, args, resumed, je);
  if (opts_.check_determinism) {
    torch::Tensor once = enc.forward(args), again = enc.forward(args);
    if (!torch::equal(once, again))
      throw Error(Exit::data, "encoder '" + enc.name() + "'",
                  "not deterministic: two runs on the first batch differ (dropout or randomness left on?)");
  }
}

double Encoding::precision_difference(model::Encoder& enc, const std::vector<torch::Tensor>& args,
                                      const torch::Tensor& want) {
  enc.set_precision(opts_.precision);
  const auto t_forward = Clock::now();
  torch::Tensor got = enc.forward(args);
  c10::InferenceMode guard;
  auto w = want.to(torch::kFloat64), g = got.slice(0, 0, want.size(0)).to(torch::kFloat64);
  const double scale = std::max(w.abs().max().item<double>(), std::numeric_limits<double>::min());
  const double rel = (w - g).abs().max().item<double>() / scale;
  checked_ = {got, seconds_since(t_forward)};
  return rel;
}

void Encoding::check_precision(model::Encoder& enc, const std::vector<torch::Tensor>& args, bool resumed,
                               JournalEncoder& je) {
  const bool int8 = opts_.precision == Precision::int8;
  const int64_t n = args.empty() ? 0 : std::min<int64_t>(kPrecisionCheckRows, args.front().size(0));
  const std::vector<torch::Tensor> head = model::slice_rows(args, 0, n);
  torch::Tensor want;  // float32's output of the batch's first rows
  if (int8) {
    const model::Int8Conversion c = enc.make_int8(head, &want);
    if (c.left > 0 && cb_.warn)
      cb_.warn("encoder '" + enc.name() + "': --precision int8 converted " + std::to_string(c.linears) +
               " linear layers; " + std::to_string(c.left) + " without a constant weight stay float32");
  } else {
    want = enc.forward(head);
  }
  double rel = precision_difference(enc, args, want);
  const char* name = model::precision_choices().name(opts_.precision);
  const double tolerance = precision_tolerance_for(opts_);
  if (!(rel <= tolerance) && !resumed && !int8 && std::string(enc.inference()) == "optimized") {
    enc.set_precision(Precision::fp32);
    enc.use_plain();
    const double plain = precision_difference(enc, args, enc.forward(head));
    if (plain <= tolerance && cb_.warn)
      cb_.warn("encoder '" + enc.name() + "': using the plain module: the optimised module's " + name +
               " output differs from float32 by " + percent(rel) + ", the plain module's by " + percent(plain));
    rel = plain;
  }
  if (!(rel <= tolerance)) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "%s output differs from float32 by %.3g%% of its largest value on the first batch (tolerance "
                  "%.3g%%): use --precision fp32, or a larger --precision-tolerance",
                  name, 100 * rel, 100 * tolerance);
    throw Error(Exit::data, "encoder '" + enc.name() + "'", buf);
  }
  if (!resumed) je.precision_max_rel_diff = rel;
}

std::string Encoding::percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g%%", 100 * fraction);
  return buf;
}

Encoding::UnitBatches Encoding::unit_batches(const std::string& enc, const Batch& batch) const {
  UnitBatches b;
  if (in_.unit <= opts_.batch_size || in_.per_encoder_text.at(enc).empty()) {
    for (int64_t a = opts_.batch_size; a < batch.count; a += opts_.batch_size) b.ends.push_back(a);
    b.ends.push_back(batch.count);
    return b;
  }
  torch::Tensor tokens = torch::zeros({batch.count}, torch::kLong);
  for (const auto& key : in_.per_encoder_text.at(enc)) tokens += batch.text.at(key)[1].sum(1);
  tokens = tokens.contiguous();
  const std::vector<int64_t> lengths(tokens.data_ptr<int64_t>(), tokens.data_ptr<int64_t>() + batch.count);
  text::LengthBatches lb = text::length_batches(lengths, opts_.batch_size, in_.max_tokens);
  b.order = torch::tensor(lb.order, torch::kLong);
  b.ends = std::move(lb.ends);
  return b;
}

std::vector<torch::Tensor> Encoding::forward_unit(std::size_t i, const std::vector<torch::Tensor>& args,
                                                  const std::vector<TextArgs>& text_args, const UnitBatches& batches,
                                                  bool first) {
  std::vector<torch::Tensor> outs;
  int64_t a = 0;
  for (const int64_t b : batches.ends) {
    const torch::Tensor rows = batches.order.defined() ? batches.order.slice(0, a, b) : torch::arange(a, b);
    const std::vector<torch::Tensor> part =
        batches.order.defined() ? rows_of(args, text_args, rows) : model::slice_rows(args, a, b);
    for (const auto& t : text_args) {
      tally_.tokens += t.mask.index_select(0, rows).sum().item<int64_t>();
      tally_.token_slots += (b - a) * part[t.first].size(1);
    }
    outs.push_back(forward_batch(i, part, b - a, first && a == 0));
    a = b;
  }
  if (first && !resumed_) measure_batch_noise(*encoders_[i], args, text_args, batches, outs);
  return outs;
}

std::vector<torch::Tensor> Encoding::rows_of(const std::vector<torch::Tensor>& args,
                                             const std::vector<TextArgs>& text_args, const torch::Tensor& rows) {
  std::vector<torch::Tensor> out;
  for (const auto& a : args) out.push_back(a.index_select(0, rows));
  for (const auto& t : text_args) model::trim_padding(&out[t.first], t.n, t.mask.index_select(0, rows));
  return out;
}

void Encoding::check_ragged_ids(model::Encoder& enc, const torch::Tensor& ids, const Batch& batch) {
  const auto& table = tables(enc).token;
  if (!table) return;
  const torch::Tensor row_max = std::get<0>(ids.max(1));
  const int64_t r = row_max.argmax().item<int64_t>(), id = row_max[r].item<int64_t>();
  if (id >= table->rows)
    throw Error(Exit::data, "encoder '" + enc.name() + "'",
                "token id " + std::to_string(id) + " of input row " + std::to_string(in_.input_row(batch.start + r)) +
                    " is beyond its embedding table " + table->name + " of " + std::to_string(table->rows) + " rows");
}

void Encoding::check_lengths(model::Encoder& enc, const torch::Tensor& mask, const Batch& batch) {
  const auto& table = tables(enc).position;
  if (!table) return;
  const torch::Tensor lengths = mask.sum(1);
  const int64_t r = lengths.argmax().item<int64_t>(), n = lengths[r].item<int64_t>();
  if (n > table->rows)
    throw Error(Exit::data, "encoder '" + enc.name() + "'",
                "input row " + std::to_string(in_.input_row(batch.start + r)) + " holds " + std::to_string(n) +
                    " tokens but the position table " + table->name + " has " + std::to_string(table->rows) +
                    " rows: give --max-length " + std::to_string(table->rows) + " (or less)");
}

const Encoding::Tables& Encoding::tables(model::Encoder& enc) {
  auto [it, added] = tables_.emplace(enc.name(), Tables{});
  if (added) {
    int64_t vocab = 0;
    for (const auto& key : in_.per_encoder_text.at(enc.name()))
      if (const auto& tok = in_.texts.at(key).tok) vocab = std::max(vocab, tok->vocab_size());
    it->second.token = model::token_table(enc.module(), vocab, opts_.tokenize.vocab_table);
    it->second.position = model::position_table(enc.module(), it->second.token ? it->second.token->name : "");
  }
  return it->second;
}

torch::Tensor Encoding::forward_batch(std::size_t i, const std::vector<torch::Tensor>& args, int64_t rows, bool first) {
  auto& enc = *encoders_[i];
  auto t_setup = Clock::now();
  if (first) first_batch_checks(enc, args, journal_.encoders[enc.name()]);
  // The first batch in reduced precision: the precision check's forward was the batch's own.
  const Checked checked = std::exchange(checked_, {});
  const double setup = seconds_since(t_setup) - checked.seconds;
  tally_.model_setup_seconds += setup;
  first_checks_seconds_ += setup;
  auto t_forward = Clock::now();
  torch::Tensor out = checked.out.defined() ? checked.out : enc.forward(args);
  // The forward's own time, apart from the copy back (which would wait for it anyway).
  if (main_stream_)
    main_stream_->synchronize();  // not the side stream, where the next unit converts
  else if (enc.device().is_cuda())
    torch::cuda::synchronize(enc.device().index());
  const double forward = seconds_since(t_forward) + checked.seconds;
  auto t_host = Clock::now();
  out = out.to(torch::kCPU, opts_.dtype == DType::f16 ? torch::kFloat16 : torch::kFloat32).contiguous();
  const double to_host = seconds_since(t_host);
  tally_.stage_seconds.forward += forward;
  tally_.stage_seconds.to_host += to_host;
  tally_.encode_seconds += forward + to_host;
  if (out.dim() < 1 || out.size(0) != rows)
    throw Error(Exit::data, "encoder '" + enc.name() + "'",
                "returned " + (out.dim() ? std::to_string(out.size(0)) : std::string("0-d")) + " rows for a batch of " +
                    std::to_string(rows));
  return out;
}

void Encoding::encode(std::size_t i, const Batch& batch, bool first, SerialWorker& store) {
  auto& enc = *encoders_[i];
  std::vector<torch::Tensor> args;
  std::vector<TextArgs> text_args;
  for (const auto& f : in_.per_encoder.at(enc.name())) args.push_back(batch.inputs.at(f));
  const auto& keys = in_.per_encoder_text.at(enc.name());
  if (first) check_vocabulary(enc);
  const std::size_t n = model::text_tensors(enc.arity(), args.size(), keys.size(), "encoder '" + enc.name() + "'");
  for (const auto& key : keys) {
    const auto& t = batch.text.at(key);
    if (!in_.texts.at(key).tok) check_ragged_ids(enc, t[0], batch);
    check_lengths(enc, t[1], batch);
    text_args.push_back({args.size(), n, t[1]});
    args.insert(args.end(), t.begin(), t.begin() + static_cast<std::ptrdiff_t>(n));
  }
  const UnitBatches batches = unit_batches(enc.name(), batch);
  std::vector<torch::Tensor> outs;
  try {
    outs = forward_unit(i, args, text_args, batches, first);
  } catch (const Error& e) {
    if (text_args.empty() || std::string(e.what()).find("index out of range") == std::string::npos) throw;
    const torch::Tensor lengths = text_args.front().mask.sum(1);
    const int64_t r = lengths.argmax().item<int64_t>();
    throw Error(e.code(), "",
                std::string(e.what()) + " (input rows " + std::to_string(in_.input_row(batch.start)) + ".." +
                    std::to_string(in_.input_row(batch.start + batch.count - 1)) + "; the longest, row " +
                    std::to_string(in_.input_row(batch.start + r)) + ", holds " +
                    std::to_string(lengths[r].item<int64_t>()) +
                    " tokens: a text longer than the encoder's position table, or a token id beyond its token "
                    "table, fails so)");
  }
  torch::Tensor out = outs.size() == 1 ? outs[0] : torch::cat(outs);
  if (batches.order.defined()) out = torch::empty_like(out).index_copy_(0, batches.order, out);
  if (!batch.skipped.empty()) out = zero_skipped(out, batch);
  std::vector<int64_t> shape(out.sizes().begin() + 1, out.sizes().end());
  if (!shape_known_[i]) {  // the first batch: before any commit is submitted (see journal_)
    JournalEncoder& je = journal_.encoders[enc.name()];
    row_shapes_[i] = shape;
    shape_known_[i] = true;
    je.has_shape = true;
    je.row_shape = shape;
    je.inference = enc.inference();
  } else if (shape != row_shapes_[i]) {
    throw Error(Exit::data, "encoder '" + enc.name() + "'", "output row shape changed between batches");
  }
  store.submit([this, i, out, start = batch.start, count = batch.count] { store_rows(i, out, start, count); });
}

void Encoding::measure_batch_noise(model::Encoder& enc, const std::vector<torch::Tensor>& args,
                                   const std::vector<TextArgs>& text_args, const UnitBatches& batches,
                                   const std::vector<torch::Tensor>& outs) {
  const int64_t count = batches.ends.back();
  if (count < 2) return;                               // a batch of one row: nothing to compare
  JournalEncoder& je = journal_.encoders[enc.name()];  // before any commit is submitted (see journal_)
  if (je.batch_max_abs_diff >= 0) return;              // measured once: the updated cache's first fill did
  auto t_check = Clock::now();
  const int64_t probes = std::min(kBatchNoiseRows, count);
  double most = 0, largest = 0;
  try {
    c10::InferenceMode guard;
    for (const auto& out : outs) largest = std::max(largest, out.abs().max().to(torch::kFloat64).item<double>());
    std::size_t unit = 0;
    for (int64_t j = 0; j < probes; ++j) {
      const int64_t at = j * (count - 1) / (probes - 1);  // spread: the first and the last included
      while (at >= batches.ends[unit]) ++unit;
      const int64_t in_unit = at - (unit == 0 ? 0 : batches.ends[unit - 1]);
      const int64_t row = batches.order.defined() ? batches.order[at].item<int64_t>() : at;
      const torch::Tensor in_batch = outs[unit].slice(0, in_unit, in_unit + 1);
      torch::Tensor alone = enc.forward(rows_of(args, text_args, torch::tensor({row}, torch::kLong)));
      alone = alone.to(torch::kCPU, in_batch.scalar_type()).to(torch::kFloat64);
      most = std::max(most, (alone - in_batch.to(torch::kFloat64)).abs().max().item<double>());
    }
    je.batch_max_abs_diff = most;
    je.batch_max_rel_diff = largest > 0 ? most / largest : 0;
  } catch (const std::exception&) {
    // An encoder that cannot take one row (or the memory for it): the noise stays unmeasured, and
    // the batch's own rows are what is stored.
  }
  if (je.batch_max_rel_diff > batch_dependent_share(std::max(0.0, je.precision_max_rel_diff)) && cb_.warn)
    cb_.warn(batch_dependence(enc.name(), most, je.batch_max_rel_diff) +
             ": cache-fill --update will refuse this cache");
  const double seconds = seconds_since(t_check);
  tally_.model_setup_seconds += seconds;
  first_checks_seconds_ += seconds;
}

void Encoding::store_rows(std::size_t i, const torch::Tensor& out, int64_t start, int64_t count) {
  auto t_store = Clock::now();
  if (!torch::isfinite(out).all().item<bool>()) {
    auto bad = (~torch::isfinite(out.reshape({count, -1})).all(1)).nonzero();
    int64_t row = in_.input_row(start + bad[0][0].item<int64_t>());
    throw Error(Exit::data, "encoder '" + encoders_[i]->name() + "'",
                "embedding of input row " + std::to_string(row) + " holds NaN or Inf");
  }
  std::size_t nbytes = static_cast<std::size_t>(out.numel()) * out.element_size();
  raws_[i].append(out.data_ptr(), nbytes);
  tally_.bytes_written += nbytes;
  tally_.store_seconds += seconds_since(t_store);
}

}  // namespace traincache::fill
