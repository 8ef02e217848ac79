#include "traincache/fill.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <torch/version.h>

#include "traincache/cache_file.h"
#include "traincache/content_hash.h"
#include "traincache/encoder.h"
#include "traincache/error.h"
#include "traincache/h5.h"
#include "traincache/interrupt.h"
#include "traincache/journal.h"
#include "traincache/row_digest.h"
#include "traincache/safe_file.h"
#include "traincache/sha256.h"
#include "traincache/shm_slab.h"
#include "traincache/version.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace traincache::fill {

std::string partial_path(const std::string& out) { return out + ".partial"; }

std::string shard_path(const std::string& out, int index, int count) {
  return out + ".shard-" + std::to_string(index) + "-of-" + std::to_string(count);
}

std::string runtime_info() {
  std::string s = std::string("LibTorch ") + TORCH_VERSION + "\nBLAS: " + active_blas() +
                  "\nCUDA: " + (torch::cuda::is_available() ? "available" : "not available") +
                  "\ncores: " + std::to_string(std::thread::hardware_concurrency()) +
                  " (intra-op threads default to one per core; see --threads)";
  return s;
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string absolute_path(const std::string& p) {
  char buf[PATH_MAX];
  if (realpath(p.c_str(), buf)) return buf;
  return p;
}

// An input dataset the fill reads, with its open handle.
struct Input {
  h5::DatasetInfo info;
  h5::Id dset;
  std::shared_ptr<shm::Slab> slab;  // set for --input shm:NAME

  torch::Tensor read(int64_t start, int64_t count, double scale) const {
    return slab ? encode::read_slab_rows(*slab, start, count, scale)
                : encode::read_input_rows(dset.get(), info, start, count, scale);
  }
};

constexpr const char* kShmScheme = "shm:";
bool is_shm(const std::string& input) { return input.rfind(kShmScheme, 0) == 0; }

json describe_json(const h5::DatasetInfo& info) {
  return json{{"shape", info.shape}, {"dtype", dtype_name(info.dtype)}};
}

// Paths of the fingerprint JSON that differ between two fingerprints ("/encoders/cnn/sha256").
std::string fingerprint_diff(const std::string& old_json, const json& now) {
  json old = json::parse(old_json, nullptr, false);
  if (old.is_discarded()) return "unreadable stored fingerprint";
  std::set<std::string> paths;
  for (const auto& op : json::diff(old, now)) {
    std::string p = op.value("path", "");
    // Report one setting, not an element of an array setting ("/input/rows/1" -> "input/rows").
    auto slash = p.rfind('/');
    if (slash != std::string::npos && slash + 1 < p.size() &&
        p.find_first_not_of("0123456789", slash + 1) == std::string::npos)
      p.resize(slash);
    paths.insert(p.size() > 1 ? p.substr(1) : "everything");
  }
  std::string s;
  for (const auto& p : paths) s += (s.empty() ? "" : ", ") + p;
  return s.empty() ? "unknown" : s;
}

// One batch of converted inputs, keyed by dataset name.
struct Batch {
  int64_t start = 0, count = 0;
  std::map<std::string, torch::Tensor> inputs;
};

// Reads batches ahead on `workers` threads and hands them out in order. Batch k is read by
// thread k % workers; at most `depth` batches are in flight.
class Prefetcher {
 public:
  Prefetcher(std::map<std::string, Input>& inputs, int64_t first_row, int64_t end_row,
             int64_t batch_size, int workers, double scale)
      : inputs_(inputs), first_(first_row), end_(end_row), bs_(batch_size), scale_(scale) {
    n_batches_ = (end_ - first_ + bs_ - 1) / bs_;
    workers = std::max(1, workers);
    depth_ = 2 * workers;
    for (int w = 0; w < workers; ++w) threads_.emplace_back([this, w, workers] { work(w, workers); });
  }

  ~Prefetcher() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  int64_t batches() const { return n_batches_; }

  // Blocks until batch `next_` is ready; rethrows a reader's error.
  Batch next() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return ready_.count(next_) || error_; });
    if (error_ && !ready_.count(next_)) std::rethrow_exception(error_);
    Batch b = std::move(ready_[next_]);
    ready_.erase(next_++);
    cv_.notify_all();
    return b;
  }

 private:
  void work(int w, int workers) {
    for (int64_t k = w; k < n_batches_; k += workers) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || k < next_ + depth_; });
        if (stop_) return;
      }
      Batch b;
      b.start = first_ + k * bs_;
      b.count = std::min(bs_, end_ - b.start);
      try {
        for (auto& [name, in] : inputs_)
          b.inputs[name] = in.read(b.start, b.count, scale_);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_) error_ = std::current_exception();
        cv_.notify_all();
        return;
      }
      std::lock_guard<std::mutex> lk(mu_);
      ready_[k] = std::move(b);
      cv_.notify_all();
    }
  }

  std::map<std::string, Input>& inputs_;
  int64_t first_, end_, bs_;
  double scale_;
  int64_t n_batches_ = 0, depth_ = 2, next_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, Batch> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// The journal in `partial`: adopted only when the directory is private to this user and the
// journal validates against this run. With --force, a foreign, damaged or other run's journal is
// discarded instead of refused.
Journal open_journal(const std::string& partial, const std::string& fingerprint,
                     const std::vector<std::string>& encoder_names, int64_t rows, const FillOptions& opts) {
  auto start_over = [&] {
    std::error_code ec;
    fs::remove_all(partial, ec);
    if (ec) throw Error(Exit::cant_create, partial, "cannot discard it: " + ec.message());
    files::make_or_adopt_private_dir(partial);
    return Journal(partial);
  };
  try {
    files::make_or_adopt_private_dir(partial);
  } catch (const Error&) {
    if (!opts.force) throw;
    return start_over();
  }
  Journal journal(partial);
  try {
    if (!journal.load()) return journal;
  } catch (const Error& e) {
    if (!opts.force || e.code() != Exit::data) throw;
    return start_over();
  }
  if (journal.fingerprint != fingerprint) {
    if (!opts.force)
      throw Error(Exit::cant_create, partial,
                  "holds progress of a run with another fingerprint; use --force to discard it");
    return start_over();
  }
  try {
    journal.validate(encoder_names, rows, opts.batch_size, dtype_size(opts.dtype));
  } catch (const Error& e) {
    if (!opts.force || e.code() != Exit::data) throw;
    return start_over();
  }
  return journal;
}

}  // namespace

FillResult run_fill(const FillOptions& opts, const FillCallbacks& cb) {
  auto t_start = Clock::now();
  auto warn = [&](const std::string& m) {
    if (cb.warn) cb.warn(m);
  };
  if (opts.encoders.empty()) throw Error(Exit::usage, "--encoder", "at least one encoder is required");
  if (opts.out.empty()) throw Error(Exit::usage, "--out", "an output file is required");
  if (opts.batch_size <= 0) throw Error(Exit::usage, "--batch-size", "must be positive");
  if (opts.dtype != DType::f32 && opts.dtype != DType::f16)
    throw Error(Exit::usage, "--dtype", "must be float32 or float16");
  std::set<std::string> names;
  for (const auto& e : opts.encoders) {
    if (e.name.empty() || e.name.find_first_of("/.") != std::string::npos)
      throw Error(Exit::usage, "--encoder", "invalid encoder name '" + e.name + "'");
    if (!names.insert(e.name).second)
      throw Error(Exit::usage, "--encoder", "encoder name '" + e.name + "' given twice");
  }
  torch::Device device = encode::parse_device(opts.device);
  encode::configure_threads(opts.threads);

  // ---- inputs
  const bool from_slab = is_shm(opts.input);
  h5::Id in_file;
  std::map<std::string, Input> inputs;
  std::map<std::string, std::vector<std::string>> enc_features;
  if (from_slab) {
    // A shared-memory slab: its items are the one input of every encoder.
    if (!opts.labels.empty() || !opts.keys.empty())
      throw Error(Exit::usage, "--labels", "labels and keys need an HDF5 input, not " + opts.input);
    Input in;
    in.slab = std::make_shared<shm::Slab>(shm::Slab::attach(opts.input.substr(std::strlen(kShmScheme)), false));
    auto si = in.slab->info();
    if (si.layout != shm::Layout::fixed)
      throw Error(Exit::data, opts.input, "an encoder input slab must have a fixed layout");
    in.info.name = opts.input;
    in.info.dtype = si.dtype;
    in.info.shape = {static_cast<int64_t>(si.length)};
    for (auto d : si.dims) in.info.shape.push_back(static_cast<int64_t>(d));
    for (const auto& e : opts.encoders) {
      auto feats = e.features.empty() ? opts.features : e.features;
      if (!feats.empty() && feats != std::vector<std::string>{opts.input})
        throw Error(Exit::usage, "--features", "with --input " + opts.input + " the slab is the only input");
      enc_features[e.name] = {opts.input};
    }
    inputs.emplace(opts.input, std::move(in));
  } else {
    in_file = h5::open_file(opts.input);
  }
  for (const auto& e : opts.encoders) {
    if (from_slab) break;
    auto feats = e.features.empty() ? opts.features : e.features;
    if (feats.empty())
      throw Error(Exit::usage, "--features", "no input dataset for encoder '" + e.name + "'");
    enc_features[e.name] = feats;
    for (const auto& f : feats) {
      if (inputs.count(f)) continue;
      Input in;
      in.dset = h5::open_dataset(in_file.get(), opts.input, f);
      in.info = h5::describe(in.dset.get(), f);
      encode::require_numeric_input(in.info, opts.input);
      inputs.emplace(f, std::move(in));
    }
  }
  const h5::DatasetInfo& first = inputs.begin()->second.info;
  int64_t n_input = first.rows();
  if (n_input == 0) throw Error(Exit::data, opts.input, "dataset '" + first.name + "' has no rows: nothing to encode");
  auto same_rows = [&](const h5::DatasetInfo& info) {
    if (info.rows() != n_input)
      throw Error(Exit::data, opts.input,
                  "rows mismatch: '" + first.name + "' has " + std::to_string(n_input) + " rows but '" +
                      info.name + "' has " + std::to_string(info.rows()));
  };
  for (const auto& [name, in] : inputs) same_rows(in.info);
  std::optional<Input> labels, keys;
  for (auto [which, name] : {std::pair{&labels, opts.labels}, std::pair{&keys, opts.keys}}) {
    if (name.empty()) continue;
    Input in;
    in.dset = h5::open_dataset(in_file.get(), opts.input, name);
    in.info = h5::describe(in.dset.get(), name);
    if (in.info.dtype == DType::other)
      throw Error(Exit::data, opts.input, "dataset '" + name + "' has an unsupported dtype");
    same_rows(in.info);
    *which = std::move(in);
  }
  if (keys && (keys->info.shape.size() != 1 ||
               !(is_integer(keys->info.dtype) || keys->info.dtype == DType::string)))
    throw Error(Exit::data, opts.input, "key dataset '" + opts.keys + "' must be 1-D integers or strings");
  int64_t a = opts.row_begin, b = opts.row_end < 0 ? n_input : opts.row_end;
  if (a >= n_input || b > n_input || a >= b)
    throw Error(Exit::usage, "--rows",
                std::to_string(a) + ":" + std::to_string(b) + " is outside the input's " +
                    std::to_string(n_input) + " rows");
  // Sharding: a contiguous, balanced range of whole batches, so that every row is encoded in the
  // same batch as by a single process.
  const int64_t job_begin = a, job_end = b;
  const bool sharded = opts.shard_count > 0;
  if (sharded) {
    if (opts.shard_index < 0 || opts.shard_index >= opts.shard_count)
      throw Error(Exit::usage, "--shard", "expected I/N with 0 <= I < N");
    const int64_t nb = (b - a + opts.batch_size - 1) / opts.batch_size;
    const int64_t lo = nb * opts.shard_index / opts.shard_count, hi = nb * (opts.shard_index + 1) / opts.shard_count;
    if (lo >= hi)
      throw Error(Exit::usage, "--shard",
                  std::to_string(opts.shard_count) + " shards for only " + std::to_string(nb) + " batches");
    a = job_begin + lo * opts.batch_size;
    b = std::min(job_end, job_begin + hi * opts.batch_size);
  }
  const std::string out = sharded ? shard_path(opts.out, opts.shard_index, opts.shard_count) : opts.out;
  const int64_t rows = b - a;
  // One run per output at a time: a second one would share the journal and publish torn rows.
  files::OutputLock lock(out, "cache-fill");

  // ---- encoders (digest first: a missing file is reported before a load error)
  std::vector<std::string> enc_sha;
  for (const auto& e : opts.encoders) enc_sha.push_back(sha256_file(e.path));
  auto t_load = Clock::now();
  std::vector<std::unique_ptr<encode::Encoder>> encoders;
  for (const auto& e : opts.encoders)
    encoders.push_back(std::make_unique<encode::Encoder>(e.name, e.path, device, e.output));
  double model_setup_seconds = seconds_since(t_load);

  // ---- fingerprint: every input byte and every option that changes the stored values
  auto t_digest = Clock::now();
  ContentHash content;
  for (const auto& [name, in] : inputs) {
    if (in.slab) hash_slab_rows(*in.slab, a, b, content);
    else hash_rows(in.dset.get(), in.info, a, b, content);
  }
  if (labels) hash_rows(labels->dset.get(), labels->info, a, b, content);
  if (keys) hash_rows(keys->dset.get(), keys->info, a, b, content);
  json fp;
  fp["format_version"] = cache::kFormatVersion;
  fp["input"]["path"] = from_slab ? opts.input : absolute_path(opts.input);
  for (const auto& [name, in] : inputs) fp["input"]["features"][name] = describe_json(in.info);
  fp["input"]["labels"] = labels ? describe_json(labels->info) : json(nullptr);
  if (labels) fp["input"]["labels"]["name"] = opts.labels;
  fp["input"]["keys"] = keys ? describe_json(keys->info) : json(nullptr);
  if (keys) fp["input"]["keys"]["name"] = opts.keys;
  fp["input"]["rows"] = {a, b};
  fp["input"]["content_xxh3"] = content.hex_digest();
  for (std::size_t i = 0; i < opts.encoders.size(); ++i) {
    const auto& e = opts.encoders[i];
    fp["encoders"][e.name] = {{"sha256", enc_sha[i]}, {"features", enc_features[e.name]}, {"output", e.output}};
  }
  fp["options"] = {{"input_scale", opts.input_scale},
                   {"dtype", dtype_name(opts.dtype)},
                   {"batch_size", opts.batch_size},
                   {"optimize", opts.optimize},
                   {"device_type", device.is_cuda() ? "cuda" : "cpu"}};
  const std::string fp_json = fp.dump();
  // What every shard of one job shares: everything but its own rows and their digest.
  json job = fp;
  job["input"].erase("rows");
  job["input"].erase("content_xxh3");
  job["input"]["job_rows"] = {job_begin, job_end};
  job["shards"] = opts.shard_count;
  const std::string job_fingerprint = sha256_hex(job.dump());
  const double digest_seconds = seconds_since(t_digest);
  const std::string fingerprint = sha256_hex(fp_json);

  FillResult result;
  result.out = out;
  result.fingerprint = fingerprint;
  result.digest_seconds = digest_seconds;
  result.model_setup_seconds = model_setup_seconds;
  result.rows = rows;
  const std::string partial = partial_path(out);

  // ---- an existing cache: up to date, or in the way
  struct stat st;
  if (stat(out.c_str(), &st) == 0) {
    std::optional<cache::CacheInfo> old;
    try {
      old = cache::read_info(out, false);
    } catch (const Error&) {
      if (!opts.force)
        throw Error(Exit::cant_create, out,
                    "exists and is not a readable traincache cache; use --force to overwrite it");
    }
    if (old && !opts.force) {
      if (old->complete && old->fingerprint == fingerprint) {
        std::error_code ec;
        fs::remove_all(partial, ec);  // left over from a run killed after its rename
        result.status = FillStatus::up_to_date;
        result.seconds = seconds_since(t_start);
        for (const auto& e : old->embeddings)
          result.encoders.push_back({e.name, e.shape, e.inference, 0});
        return result;
      }
      throw Error(Exit::cant_create, out,
                  "exists with another fingerprint (changed: " +
                      fingerprint_diff(old->fingerprint_json, fp) + "); use --force to overwrite it");
    }
  }

  // ---- partial progress: resume (after validating the journal), or refuse to mix fingerprints
  std::vector<std::string> encoder_names;
  for (const auto& e : opts.encoders) encoder_names.push_back(e.name);
  Journal journal = open_journal(partial, fingerprint, encoder_names, rows, opts);
  journal.fingerprint = fingerprint;
  const std::map<std::string, JournalEncoder> committed_encoders =
      journal.committed_rows > 0 ? journal.encoders : std::map<std::string, JournalEncoder>{};
  if (journal.committed_rows == 0) journal.encoders.clear();
  result.resumed_from = journal.committed_rows;
  bool keep_partial_on_error = journal.committed_rows > 0;
  auto discard_partial = [&] {
    std::error_code ec;
    fs::remove_all(partial, ec);
  };

  std::vector<RawFile> raws;
  std::vector<std::vector<int64_t>> row_shapes(encoders.size());
  int64_t done = journal.committed_rows;
  bool interrupted = false;
  try {
    for (std::size_t i = 0; i < encoders.size(); ++i) {
      auto it = committed_encoders.find(encoders[i]->name());
      int64_t keep = 0;
      if (it != committed_encoders.end()) {
        row_shapes[i] = it->second.row_shape;
        keep = journal.committed_rows * row_bytes_of(row_shapes[i], dtype_size(opts.dtype));
      }
      raws.emplace_back(journal.raw(encoders[i]->name()), keep);
    }

    auto commit = [&](int64_t committed) {
      for (auto& r : raws) r.sync();
      journal.committed_rows = committed;
      journal.save();
      keep_partial_on_error = committed > 0;
    };

    if (done < rows) {
      Prefetcher pf(inputs, a + done, b, opts.batch_size, opts.workers, opts.input_scale);
      int64_t last_commit = done;
      bool first_batch = true;
      if (cb.progress) cb.progress(done, rows);
      for (int64_t k = 0; k < pf.batches(); ++k) {
        if (interrupt_requested()) {
          interrupted = true;
          break;
        }
        Batch batch = pf.next();
        for (std::size_t i = 0; i < encoders.size(); ++i) {
          auto& enc = *encoders[i];
          std::vector<torch::Tensor> args;
          for (const auto& f : enc_features[enc.name()]) args.push_back(batch.inputs.at(f));
          auto committed = committed_encoders.find(enc.name());
          const bool resumed = committed != committed_encoders.end();
          JournalEncoder& je = journal.encoders[enc.name()];
          auto t_setup = Clock::now();
          if (first_batch) {
            bool want_opt = resumed ? committed->second.inference == "optimized" : opts.optimize;
            if (want_opt) {
              auto o = enc.try_optimize(args, kOptimizeTolerance);
              if (!o.used && resumed)
                throw Error(Exit::data, "encoder '" + enc.name() + "'",
                            "the optimised module used for the committed rows is no longer usable (" +
                                o.why_not + "); use --force to start over");
              if (!o.used && !o.plain_nonfinite) warn("encoder '" + enc.name() + "': using the plain module: " + o.why_not);
              if (!resumed) je.optimize_max_abs_diff = o.max_abs_diff;
            }
          }
          if (first_batch && opts.check_determinism) {
            torch::Tensor once = enc.forward(args), again = enc.forward(args);
            if (!torch::equal(once, again))
              throw Error(Exit::data, "encoder '" + enc.name() + "'",
                          "not deterministic: two runs on the first batch differ (dropout or "
                          "randomness left on?)");
          }
          result.model_setup_seconds += seconds_since(t_setup);
          auto t_enc = Clock::now();
          torch::Tensor out = enc.forward(args);
          out = out.to(torch::kCPU, opts.dtype == DType::f16 ? torch::kFloat16 : torch::kFloat32)
                    .contiguous();
          result.encode_seconds += seconds_since(t_enc);
          if (out.dim() < 1 || out.size(0) != batch.count)
            throw Error(Exit::data, "encoder '" + enc.name() + "'",
                        "returned " + (out.dim() ? std::to_string(out.size(0)) : std::string("0-d")) +
                            " rows for a batch of " + std::to_string(batch.count));
          std::vector<int64_t> shape(out.sizes().begin() + 1, out.sizes().end());
          if (!je.has_shape) {
            row_shapes[i] = shape;
            je.has_shape = true;
            je.row_shape = shape;
            je.inference = enc.inference();
          } else if (shape != row_shapes[i]) {
            throw Error(Exit::data, "encoder '" + enc.name() + "'",
                        "output row shape changed between batches");
          }
          if (!torch::isfinite(out).all().item<bool>()) {
            auto bad = (~torch::isfinite(out.reshape({batch.count, -1})).all(1)).nonzero();
            int64_t row = batch.start + bad[0][0].item<int64_t>();
            throw Error(Exit::data, "encoder '" + enc.name() + "'",
                        "embedding of input row " + std::to_string(row) + " holds NaN or Inf");
          }
          std::size_t nbytes = static_cast<std::size_t>(out.numel()) * out.element_size();
          raws[i].append(out.data_ptr(), nbytes);
          result.bytes_written += nbytes;
        }
        first_batch = false;
        done += batch.count;
        result.rows_encoded += batch.count;
        if (done - last_commit >= opts.commit_rows || done == rows) {
          commit(done);
          last_commit = done;
        }
        if (cb.progress) cb.progress(done, rows);
      }
      if (interrupted && done > last_commit) commit(done);
    }
    if (interrupted) {
      result.status = FillStatus::interrupted;
      result.partial_path = partial;
      result.rows = done;
      result.seconds = seconds_since(t_start);
      return result;
    }
    for (auto& r : raws) r.close();

    // ---- publish: build the HDF5 file from the journal and rename it into place
    cache::AssemblySpec spec;
    spec.out_path = out;
    spec.rows = rows;
    spec.input_path = opts.input;
    spec.row_start = a;
    spec.labels_dataset = opts.labels;
    spec.keys_dataset = opts.keys;
    json all_features = json::array();
    for (const auto& [name, in] : inputs) all_features.push_back(name);
    spec.root_attrs = {{"created_by", version_banner("cache-fill")},
                       {"fingerprint", fingerprint},
                       {"fingerprint_json", fp_json},
                       {"input_path", from_slab ? opts.input : absolute_path(opts.input)},
                       {"features", all_features.dump()},
                       {"input_scale", opts.input_scale},
                       {"labels_source", opts.labels},
                       {"keys_source", opts.keys},
                       {"device_type", std::string(device.is_cuda() ? "cuda" : "cpu")},
                       {"batch_size", opts.batch_size}};
    if (sharded) {
      spec.root_attrs.push_back({"job_fingerprint", job_fingerprint});
      spec.root_attrs.push_back({"job_fingerprint_json", job.dump()});
      spec.root_attrs.push_back({"shard_index", int64_t{opts.shard_index}});
      spec.root_attrs.push_back({"shard_count", int64_t{opts.shard_count}});
      spec.root_attrs.push_back({"job_row_start", job_begin});
      spec.root_attrs.push_back({"job_row_end", job_end});
    }
    for (std::size_t i = 0; i < encoders.size(); ++i) {
      const auto& enc = *encoders[i];
      const JournalEncoder& je = journal.encoders[enc.name()];
      cache::EmbeddingSource src;
      src.name = enc.name();
      src.raw_path = journal.raw(enc.name());
      src.row_shape = row_shapes[i];
      src.dtype = opts.dtype;
      src.attrs = {{"encoder_path", absolute_path(enc.path())},
                   {"encoder_sha256", enc_sha[i]},
                   {"features", json(enc_features[enc.name()]).dump()},
                   {"output", enc.output()},
                   {"inference", je.inference},
                   {"optimize_max_abs_diff", je.optimize_max_abs_diff}};
      spec.embeddings.push_back(src);
      std::vector<int64_t> shape{rows};
      shape.insert(shape.end(), row_shapes[i].begin(), row_shapes[i].end());
      result.encoders.push_back({enc.name(), shape, je.inference, je.optimize_max_abs_diff});
    }
    auto t_publish = Clock::now();
    cache::assemble(spec);
    discard_partial();
    result.publish_seconds = seconds_since(t_publish);
  } catch (const Error& e) {
    raws.clear();
    bool resumable = keep_partial_on_error && (e.code() == Exit::io || e.code() == Exit::cant_create ||
                                               e.code() == Exit::temp_failure);
    if (!resumable) {
      discard_partial();
      throw;
    }
    throw Error(e.code(), "", std::string(e.what()) + "; progress kept in " + partial +
                                 " (run again to resume)");
  }
  result.seconds = seconds_since(t_start);
  return result;
}

}  // namespace traincache::fill
