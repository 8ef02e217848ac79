#include "traincache/bench/smart_bench.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>
#include <unordered_map>

#include "traincache/base/error.h"
#include "traincache/base/interrupt.h"
#include "traincache/base/prefetch.h"
#include "traincache/base/timing.h"
#include "traincache/data_cache/data_cache.h"
#include "traincache/data_cache/smart_cache.h"
#include "traincache/io/h5.h"
#include "traincache/io/source.h"
#include "traincache/model/encode.h"
#include "traincache/slab/sharing.h"
#include "traincache/slab/shm_slab.h"

namespace traincache::bench {

namespace {

// This thread's CPU time in microseconds.
double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return 1e6 * static_cast<double>(ts.tv_sec) + 1e-3 * static_cast<double>(ts.tv_nsec);
}

// Burns `us` microseconds of this thread's CPU time: emulated preprocessing or model compute, a
// fixed amount of work as real compute is (on a busy machine it takes longer, as a forward would;
// timed by the wall clock it would do less work there instead).
void spin_us(double us) {
  if (us <= 0) return;
  const double end = thread_cpu_us() + us;
  volatile uint64_t x = 0;
  while (thread_cpu_us() < end) x = x + 1;
}

// ---- sources: raw uint8 (or other) items by index ------------------------------------------

class Source {
 public:
  virtual ~Source() = default;
  virtual int64_t size() const = 0;
  virtual std::vector<int64_t> dims() const = 0;  // item shape
  // Item i's values: uint8, or float32 in [0, 1] when floating() (decoded images).
  virtual void read(int64_t i, std::vector<unsigned char>& out) = 0;
  virtual bool floating() const { return false; }
  // read() may run on several threads at once.
  virtual bool thread_safe() const { return false; }
  std::vector<int64_t> labels;  // one per item (zeros when the source has none)
};

// A column of the source layer (traincache/source.h): an HDF5 dataset, a .npy file, an .npz
// member, or the images of an image folder or a manifest, decoded on every read.
class ColumnSource : public Source {
 public:
  ColumnSource(const std::string& path, const std::string& name, const std::string& labels_name,
               const io::source::FileOptions& files) {
    col_ = io::source::open_column(path, name, files, io::source::Role::images);
    check_item_column(*col_, path);
    const auto& ci = col_->info();
    labels.assign(static_cast<std::size_t>(ci.rows()), 0);
    if (!labels_name.empty()) {
      auto l = io::source::open_column(path, labels_name, files, io::source::Role::labels);
      if (l->info().rows() != ci.rows() || !is_integer(l->info().dtype) || l->info().shape.size() != 1)
        throw Error(Exit::data, path,
                    "'" + labels_name + "' must hold one integer label per item of '" + ci.name + "'");
      // Labels of any integer type, as train.cpp reads them: converted, then int64.
      auto t = model::read_column_rows(*l, 0, ci.rows(), 1.0).to(torch::kLong).contiguous();
      labels.assign(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
    }
  }
  int64_t size() const override { return col_->info().rows(); }
  std::vector<int64_t> dims() const override { return {col_->info().shape.begin() + 1, col_->info().shape.end()}; }
  void read(int64_t i, std::vector<unsigned char>& out) override {
    out.resize(col_->info().row_bytes());
    col_->read(i, 1, out.data());
  }
  bool floating() const override { return col_->info().dtype == DType::f32; }
  bool thread_safe() const override { return true; }

 private:
  std::unique_ptr<io::source::Column> col_;
};

// A directory with meta.json (read_file_meta) and one file
// "<index>.bin" of raw uint8 values per item.
class FileSource : public Source {
 public:
  FileSource(std::string dir, bool page_cache) : dir_(std::move(dir)), page_cache_(page_cache) {
    FileMeta meta = read_file_meta(dir_);
    count_ = meta.count;
    dims_ = std::move(meta.dims);
    labels = std::move(meta.labels);
  }
  int64_t size() const override { return count_; }
  std::vector<int64_t> dims() const override { return dims_; }
  void read(int64_t i, std::vector<unsigned char>& out) override {
    int64_t n = std::accumulate(dims_.begin(), dims_.end(), int64_t{1}, std::multiplies<int64_t>());
    out.resize(static_cast<std::size_t>(n));
    std::string p = dir_ + "/" + std::to_string(i) + ".bin";
    int fd = ::open(p.c_str(), O_RDONLY);
    if (fd < 0) throw Error(Exit::no_input, p, errno_text(errno));
    ssize_t got = ::read(fd, out.data(), out.size());
    // Drop the pages so that the next epoch reads storage again, unless asked not to.
    if (!page_cache_) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    if (got != static_cast<ssize_t>(out.size())) throw Error(Exit::data, p, "short file");
  }

 private:
  std::string dir_;
  bool page_cache_;
  int64_t count_ = 0;
  std::vector<int64_t> dims_;
};

class ShmSource : public Source {
 public:
  ShmSource(const std::string& name, bool trust_owner) : slab_(slab::Slab::attach(name, false)) {
    slab::require_own_slab(slab_.info(), name, trust_owner, "--trust-slab-owner to read it");
    auto i = slab_.info();
    if (i.layout != slab::Layout::fixed || i.dtype != DType::u8)
      throw Error(Exit::data, name, "the slab must hold fixed-shape uint8 items");
    for (auto d : i.dims) dims_.push_back(static_cast<int64_t>(d));
    labels.assign(i.length, 0);
  }
  int64_t size() const override { return static_cast<int64_t>(slab_.info().length); }
  std::vector<int64_t> dims() const override { return dims_; }
  void read(int64_t i, std::vector<unsigned char>& out) override {
    if (!slab_.get(static_cast<uint64_t>(i), out))
      throw Error(Exit::data, slab_.info().name, "item " + std::to_string(i) + " is not cached");
  }

 private:
  slab::Slab slab_;
  std::vector<int64_t> dims_;
};

// ---- the pipeline stages ------------------------------------------------------------------

struct Pipeline {
  const BenchOptions& o;
  Source& src;
  std::vector<int64_t> resize;  // arrays: H,W of the bilinear resize (empty: keep)
  std::mutex read_mu;           // sources are read one item at a time (HDF5 is serialised anyway)

  torch::Tensor deterministic(int64_t i) {
    std::vector<unsigned char> raw;
    if (src.thread_safe()) {
      src.read(i, raw);
    } else {
      std::lock_guard<std::mutex> lk(read_mu);
      src.read(i, raw);
    }
    if (o.read_latency_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(o.read_latency_us));
    auto dims = src.dims();
    auto x = src.floating() ? torch::from_blob(raw.data(), dims, torch::kFloat32).clone()
                            : torch::from_blob(raw.data(), dims, torch::kUInt8).to(torch::kFloat32).div_(255.0);
    if (!src.floating()) x.sub_(0.5).div_(0.5);  // decoded images are as the preprocessing made them
    if (!resize.empty()) {
      auto img = x.dim() == 2 ? x.unsqueeze(0) : x;  // [C, H, W]
      x = torch::nn::functional::interpolate(img.unsqueeze(0), torch::nn::functional::InterpolateFuncOptions()
                                                                   .size(std::vector<int64_t>{resize[0], resize[1]})
                                                                   .mode(torch::kBilinear)
                                                                   .align_corners(false))
              .squeeze(0);
    }
    spin_us(static_cast<double>(o.deterministic_cost_us));
    return x.contiguous();
  }

  // Random flip, shift and noise, seeded by (seed, epoch, index).
  torch::Tensor random(const torch::Tensor& x, int64_t epoch, int64_t i) const {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed * 1000003ull + static_cast<uint64_t>(epoch) * 7919ull +
                                                        static_cast<uint64_t>(i));
    std::mt19937 rng(static_cast<unsigned>(o.seed + 31 * epoch + 131 * i));
    auto y = x;
    if (rng() & 1) y = y.flip({-1});
    int64_t dy = static_cast<int64_t>(rng() % 5) - 2, dx = static_cast<int64_t>(rng() % 5) - 2;
    y = y.roll({dy, dx}, {-2, -1});
    return y + torch::randn(y.sizes(), gen) * 0.01;
  }
};

// ---- strategies: where the deterministic prefix of an item comes from ------------------------

class Strategy {
 public:
  virtual ~Strategy() = default;
  // Items of epoch `e`, in training order.
  virtual std::vector<int64_t> epoch_items(int64_t e) = 0;
  // The deterministic prefix of item i; sets *hit when it came from the cache.
  virtual torch::Tensor prefix(int64_t i, bool* hit) = 0;
  // Called before epoch e; returns seconds blocked.
  virtual double begin_epoch(int64_t e) { return 0; }
  virtual uint64_t bytes() const { return 0; }
  // Whether samples get the random transform (embeddings do not).
  virtual bool augment() const { return true; }
  // What the model step trains on, from a batch of samples (the embed strategies' encoder).
  virtual torch::Tensor features(const torch::Tensor& batch) { return batch; }
};

std::vector<int64_t> shuffled(int64_t n, uint64_t seed) {
  std::vector<int64_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

class NoCache : public Strategy {
 public:
  NoCache(Pipeline& p, int64_t n, uint64_t seed) : p_(p), n_(n), seed_(seed) {}
  std::vector<int64_t> epoch_items(int64_t e) override { return shuffled(n_, seed_ + static_cast<uint64_t>(e)); }
  torch::Tensor prefix(int64_t i, bool* hit) override {
    *hit = false;
    return p_.deterministic(i);
  }

 protected:
  Pipeline& p_;
  int64_t n_;
  uint64_t seed_;
};

// Full (MONAI CacheDataset: every item kept after first use) and stochastic (stocaching: the first
// fraction of the items), on gc-train's data cache: a slab of this process's own, named
// smart-bench-STRATEGY-PID, removed at the end (and on SIGINT/SIGTERM).
class SlabCache : public NoCache {
 public:
  SlabCache(Pipeline& p, int64_t n, uint64_t seed, const data_cache::Spec& spec, const std::string& strategy,
            std::vector<int64_t> shape)
      : NoCache(p, n, seed), shape_(std::move(shape)) {
    std::vector<uint64_t> dims;
    for (auto d : shape_) dims.push_back(static_cast<uint64_t>(d));
    cache_ = data_cache::RowCache::create_own(spec, "smart-bench-" + strategy + "-" + std::to_string(getpid()),
                                              "smart-bench", static_cast<uint64_t>(n), DType::f32, dims);
  }
  torch::Tensor prefix(int64_t i, bool* hit) override {
    auto t = torch::empty(shape_, torch::kFloat32);
    *hit = cache_->lookup({i}, t.data_ptr()).empty();
    if (*hit) return t;
    t = p_.deterministic(i);
    cache_->store(i, t.data_ptr());
    return t;
  }
  uint64_t bytes() const override { return cache_->filled_bytes(); }

 private:
  std::vector<int64_t> shape_;
  std::unique_ptr<data_cache::RowCache> cache_;
};

// MONAI SmartCache: each epoch trains on the window; the replacer prepares the next items; the
// epoch starts once the window is ready (MONAI waits there: boundary_blocked_seconds). The window
// lives in a slab of the process's own (smart-bench-smart-PID), gc-train's --data-cache smart code.
class SmartStrategy : public Strategy {
 public:
  SmartStrategy(Pipeline& p, int64_t n, const BenchOptions& o, const std::vector<int64_t>& shape)
      : p_(p), shape_(shape), seed_(o.seed), epochs_(o.epochs) {
    data_cache::WindowOptions w;
    w.plan = data_cache::make_plan(n, o.cache_num > 0 ? o.cache_num : std::max<int64_t>(1, n / 2), o.replace_rate);
    w.items = std::make_shared<const std::vector<int64_t>>(shuffled(n, o.seed + 999));
    w.dtype = DType::f32;
    for (auto d : shape) w.dims.push_back(static_cast<uint64_t>(d));
    w.name = "smart-bench-smart-" + std::to_string(getpid());
    w.tool = "smart-bench";
    w.own = true;
    w.workers = o.replace_workers;
    w.chunk = 1;
    plan_ = w.plan;
    cache_ = data_cache::WindowCache::open(w, [&p](const std::vector<int64_t>& items, void* out) {
      auto* dst = static_cast<char*>(out);
      for (auto i : items) {
        auto t = p.deterministic(i);
        std::memcpy(dst, t.data_ptr(), t.nbytes());
        dst += t.nbytes();
      }
    });
  }
  double begin_epoch(int64_t e) override { return cache_->begin_epoch(e, true, e + 1 < epochs_).wait_seconds; }
  std::vector<int64_t> epoch_items(int64_t e) override {
    std::vector<int64_t> keys(static_cast<std::size_t>(plan_.cache_num));
    std::iota(keys.begin(), keys.end(), plan_.first_key(e));
    std::mt19937_64 rng(seed_ + static_cast<uint64_t>(e));
    std::shuffle(keys.begin(), keys.end(), rng);
    key_of_.clear();
    std::vector<int64_t> items;
    for (auto k : keys) {
      items.push_back(cache_->item_of(k));
      key_of_[items.back()] = k;
    }
    return items;
  }
  torch::Tensor prefix(int64_t i, bool* hit) override {
    const int64_t key = key_of_.at(i);
    auto t = torch::empty(shape_, torch::kFloat32);
    *hit = cache_->lookup({key}, t.data_ptr()).empty();
    if (*hit) return t;
    t = p_.deterministic(i);
    cache_->store(key, t.data_ptr());
    return t;
  }
  uint64_t bytes() const override { return cache_->filled_bytes(); }

 private:
  Pipeline& p_;
  std::vector<int64_t> shape_;
  uint64_t seed_;
  int64_t epochs_;
  data_cache::WindowPlan plan_;
  std::unordered_map<int64_t, int64_t> key_of_;  // the epoch's items -> their keys
  std::unique_ptr<data_cache::WindowCache> cache_;
};

// The embed strategies: a frozen encoder run on every batch, or its embeddings read from a
// cache-fill cache; both train the same linear head.
class EmbedEncoder : public NoCache {
 public:
  EmbedEncoder(Pipeline& p, int64_t n, uint64_t seed, const std::string& encoder)
      : NoCache(p, n, seed), enc_("frozen", encoder, torch::kCPU) {
    auto sample = p.deterministic(0).unsqueeze(0);
    enc_.try_optimize({sample}, 1e-4);
  }
  bool augment() const override { return false; }
  torch::Tensor features(const torch::Tensor& batch) override {
    return enc_.forward({batch}).reshape({batch.size(0), -1});
  }

 private:
  model::Encoder enc_;
};

class EmbedCache : public Strategy {
 public:
  EmbedCache(int64_t n, uint64_t seed, const std::string& cache, std::string name) : n_(n), seed_(seed), path_(cache) {
    file_ = io::h5::open_file(cache);
    if (name.empty()) {
      auto names = io::h5::list_group(file_.get(), "/embeddings");
      if (names.size() != 1) throw Error(Exit::usage, "--embeddings", "the cache has several encoders; name one");
      name = names[0];
    }
    dset_ = io::h5::open_dataset(file_.get(), cache, "/embeddings/" + name);
    info_ = io::h5::describe(dset_.get(), name);
    if (info_.rows() < n) throw Error(Exit::data, cache, "has fewer rows than the benchmark's items");
  }
  std::vector<int64_t> epoch_items(int64_t e) override { return shuffled(n_, seed_ + static_cast<uint64_t>(e)); }
  torch::Tensor prefix(int64_t i, bool* hit) override {
    *hit = true;
    auto t = torch::empty({info_.row_elements()}, torch::kFloat32);
    std::lock_guard<std::mutex> lk(mu_);
    io::h5::read_rows(dset_.get(), path_, i, 1, H5T_NATIVE_FLOAT, t.data_ptr());
    return t;
  }
  bool augment() const override { return false; }

 private:
  int64_t n_;
  uint64_t seed_;
  std::string path_;
  std::mutex mu_;
  io::h5::Id file_, dset_;
  io::h5::DatasetInfo info_;
};

// ---- the model step -------------------------------------------------------------------------

class Step {
 public:
  Step(const BenchOptions& o) : o_(o) {
    if (!o.model.empty()) {
      model_ = model::load_module(o.model, torch::kCPU);  // missing: 66, not TorchScript: 65
      model_.train();
      for (auto p : model_.parameters()) {
        p.set_requires_grad(true);
        params_.push_back(p);
      }
      opt_ = std::make_unique<torch::optim::SGD>(params_, torch::optim::SGDOptions(o.lr));
    }
  }
  // A linear classifier on features (the embed strategies), trained with SGD.
  void run_head(const torch::Tensor& features, const torch::Tensor& labels, int64_t classes) {
    if (!head_) {
      head_ = torch::nn::Linear(features.size(1), classes);
      head_opt_ = std::make_unique<torch::optim::SGD>(head_->parameters(), torch::optim::SGDOptions(o_.lr));
    }
    head_opt_->zero_grad();
    auto loss = torch::nn::functional::cross_entropy(head_->forward(features), labels);
    loss.backward();
    head_opt_->step();
  }

  void run(const torch::Tensor& batch, const torch::Tensor& labels) {
    if (o_.model.empty()) {
      spin_us(o_.model_ms * 1000.0);
      return;
    }
    opt_->zero_grad();
    torch::jit::IValue result = model::call_forward(model_, {batch}, o_.model);
    if (!result.isTensor()) throw Error(Exit::data, o_.model, "forward() must return one tensor");
    auto out = result.toTensor();
    auto loss = out.dim() == 2 && out.size(1) > labels.max().item<int64_t>()
                    ? torch::nn::functional::cross_entropy(out, labels)
                    : out.pow(2).mean();
    loss.backward();
    opt_->step();
  }

 private:
  const BenchOptions& o_;
  torch::jit::Module model_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::SGD> opt_;
  torch::nn::Linear head_{nullptr};
  std::unique_ptr<torch::optim::SGD> head_opt_;
};

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  auto k = static_cast<std::size_t>(std::min<double>(v.size() - 1, q * (v.size() - 1) + 0.5));
  return v[k];
}

// Everything a strategy is built from.
struct Context {
  const BenchOptions& o;
  Pipeline& pipe;
  int64_t n;
  std::vector<int64_t> shape;
};

using Factory = std::function<std::unique_ptr<Strategy>(Context&)>;

// What each strategy runs (record names) and how each run's strategy is built; the names
// --strategy accepts are caching_choices().
using Runs = std::vector<std::pair<std::string, Factory>>;

Runs strategy_runs(Caching c) {
  switch (c) {
    case Caching::none:
      return {{"none", [](Context& c) { return std::unique_ptr<Strategy>(new NoCache(c.pipe, c.n, c.o.seed)); }}};
    case Caching::full:
      return {{"full", [](Context& c) {
                 data_cache::Spec spec;
                 spec.mode = data_cache::Mode::full;
                 return std::unique_ptr<Strategy>(new SlabCache(c.pipe, c.n, c.o.seed, spec, "full", c.shape));
               }}};
    case Caching::stochastic:
      return {{"stochastic", [](Context& c) {
                 data_cache::Spec spec;
                 spec.mode = data_cache::Mode::stochastic;
                 spec.fraction = c.o.cache_fraction;
                 return std::unique_ptr<Strategy>(new SlabCache(c.pipe, c.n, c.o.seed, spec, "stochastic", c.shape));
               }}};
    case Caching::smart:
      return {{"smart",
               [](Context& c) { return std::unique_ptr<Strategy>(new SmartStrategy(c.pipe, c.n, c.o, c.shape)); }}};
    case Caching::embed:
      return {{"embed_encoder",
               [](Context& c) {
                 return std::unique_ptr<Strategy>(new EmbedEncoder(c.pipe, c.n, c.o.seed, c.o.frozen_encoder));
               }},
              {"embed_cache", [](Context& c) {
                 return std::unique_ptr<Strategy>(new EmbedCache(c.n, c.o.seed, c.o.cache, c.o.embeddings));
               }}};
  }
  return {};
}

std::unique_ptr<Source> open_source(const BenchOptions& o) {
  if (!o.data.empty()) {
    const std::string labels = o.labels.empty() ? io::source::default_labels(o.data) : o.labels;
    return std::make_unique<ColumnSource>(o.data, data_column(o), labels, o.images);
  }
  if (!o.files.empty()) return std::make_unique<FileSource>(o.files, o.page_cache);
  return std::make_unique<ShmSource>(o.shm, o.images.trust_slab_owner);
}

// Loader threads prepare one epoch's samples in order, at most 4 batches ahead of the step.
class EpochLoader {
 public:
  EpochLoader(const BenchOptions& o, Strategy& strat, Pipeline& pipe, const std::vector<int64_t>& items, int64_t epoch)
      : pf_(static_cast<int64_t>(items.size()), o.workers, 4 * o.batch_size,
            [this, &strat, &pipe, &items, epoch](int64_t k) {
              bool hit = false;
              auto x = strat.prefix(items[k], &hit);
              if (strat.augment()) x = pipe.random(x, epoch, items[k]);
              hits_ += hit;
              return x;
            }) {}

  // Blocks until samples [lo, hi) are ready and hands them over; rethrows a loader's error.
  std::vector<torch::Tensor> take(int64_t lo, int64_t hi) {
    std::vector<torch::Tensor> xs;
    for (int64_t k = lo; k < hi; ++k) xs.push_back(pf_.next());
    return xs;
  }

  int64_t hits() const { return hits_; }

 private:
  std::atomic<int64_t> hits_{0};  // before pf_: the loaders count into it until pf_ is destroyed
  OrderedPrefetcher<torch::Tensor> pf_;
};

// This process's CPU time so far (user and system, every thread).
double process_cpu_seconds() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// One epoch of one strategy, timed: the step waits for the loaders, then trains on the batch.
EpochRecord run_epoch(const BenchOptions& o, const std::string& name, Strategy& strat, Pipeline& pipe,
                      const Source& src, Step& step, int64_t e, int64_t classes) {
  const bool head = name.rfind("embed_", 0) == 0;
  EpochRecord r;
  r.strategy = name;
  r.epoch = e + 1;
  auto t_epoch = Clock::now();
  const double cpu_start = process_cpu_seconds();
  r.boundary_blocked_seconds = strat.begin_epoch(e);
  auto items = strat.epoch_items(e);
  const int64_t m = static_cast<int64_t>(items.size());
  const int64_t batches = (m + o.batch_size - 1) / o.batch_size;
  std::vector<double> step_ms;
  double wait = 0;
  EpochLoader loader(o, strat, pipe, items, e);
  for (int64_t b = 0; b < batches; ++b) {
    // Unwinding from here removes the strategy's temporary slab.
    if (interrupt_requested()) throw Error(Exit::interrupted, "", "interrupted");
    int64_t lo = b * o.batch_size, hi = std::min(m, lo + o.batch_size);
    auto t_wait = Clock::now();
    std::vector<torch::Tensor> xs = loader.take(lo, hi);
    std::vector<int64_t> ys;
    for (int64_t k = lo; k < hi; ++k) ys.push_back(src.labels[items[k]]);
    wait += seconds_since(t_wait);
    auto t_step = Clock::now();
    auto batch = torch::stack(xs);
    auto labels = torch::tensor(ys, torch::kLong);
    if (head) {
      torch::Tensor f;
      {
        c10::InferenceMode guard;
        f = strat.features(batch);
      }
      step.run_head(f.clone(), labels, classes);
    } else {
      step.run(batch, labels);
    }
    step_ms.push_back(seconds_since(t_step) * 1000);
  }
  r.samples = m;
  r.wall_seconds = seconds_since(t_epoch);
  r.samples_per_second = m / r.wall_seconds;
  r.cpu_seconds = process_cpu_seconds() - cpu_start;
  r.samples_per_cpu_second = r.cpu_seconds > 0 ? m / r.cpu_seconds : 0;
  r.step_ms_mean = step_ms.empty() ? 0 : std::accumulate(step_ms.begin(), step_ms.end(), 0.0) / step_ms.size();
  r.step_ms_p50 = percentile(step_ms, 0.5);
  r.step_ms_p95 = percentile(step_ms, 0.95);
  r.data_wait_seconds = wait + r.boundary_blocked_seconds;
  r.model_idle_fraction = r.data_wait_seconds / r.wall_seconds;
  r.hit_rate = m ? static_cast<double>(loader.hits()) / m : 0;
  r.bytes_cached = strat.bytes();
  r.peak_rss_bytes = peak_rss_bytes();
  return r;
}

}  // namespace

void run(const BenchOptions& o, const std::function<void(const EpochRecord&)>& record,
         const std::function<void(const std::string&)>& info) {
  validate_options(o);
  model::configure_threads(o.threads);
  std::unique_ptr<Source> src = open_source(o);
  const int64_t n = o.items > 0 ? std::min(o.items, src->size()) : src->size();
  Pipeline pipe{o, *src, array_resize(o), {}};
  Context ctx{o, pipe, n, pipe.deterministic(0).sizes().vec()};
  Step step(o);
  int64_t classes = 1;
  for (int64_t i = 0; i < n; ++i) classes = std::max(classes, src->labels[i] + 1);
  for (Caching chosen : o.strategies) {
    for (const auto& [name, make] : strategy_runs(chosen)) {
      std::unique_ptr<Strategy> strat = make(ctx);
      for (int64_t e = 0; e < o.epochs; ++e) {
        if (info) info(name + ": epoch " + std::to_string(e + 1) + "/" + std::to_string(o.epochs));
        record(run_epoch(o, name, *strat, pipe, *src, step, e, classes));
      }
    }
  }
}

}  // namespace traincache::bench
