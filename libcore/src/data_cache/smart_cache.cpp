#include "traincache/data_cache/smart_cache.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "traincache/base/error.h"

namespace traincache::data_cache {

void check_replace_rate(double replace_rate) {
  if (!(replace_rate > 0) || replace_rate > 1) throw Error(Exit::usage, "--replace-rate", "must be in (0, 1]");
}

WindowPlan make_plan(int64_t dataset_len, int64_t cache_num, double replace_rate) {
  if (dataset_len <= 0) throw Error(Exit::usage, "dataset", "is empty");
  if (cache_num <= 0) throw Error(Exit::usage, "--cache-num", "must be positive");
  check_replace_rate(replace_rate);
  WindowPlan p;
  p.dataset_len = dataset_len;
  p.cache_num = std::min(cache_num, dataset_len);
  const auto r = static_cast<int64_t>(std::ceil(static_cast<double>(p.cache_num) * replace_rate - 1e-9));
  p.replace_num = std::min(r, dataset_len - p.cache_num);
  return p;
}

std::vector<int64_t> WindowPlan::window(int64_t epoch) const {
  std::vector<int64_t> w;
  for (int64_t i = 0; i < cache_num; ++i) w.push_back((first_key(epoch) + i) % dataset_len);
  return w;
}

std::vector<int64_t> WindowPlan::incoming(int64_t epoch) const {
  std::vector<int64_t> in;
  for (int64_t i = 0; i < replace_num; ++i) in.push_back((first_key(epoch) + cache_num + i) % dataset_len);
  return in;
}

int64_t WindowPlan::epochs_to_cover() const {
  if (replace_num == 0) return 1;
  return 1 + (dataset_len - cache_num + replace_num - 1) / replace_num;
}

std::unique_ptr<WindowCache> WindowCache::open(const WindowOptions& o, Prepare prepare) {
  if (!o.items || static_cast<int64_t>(o.items->size()) != o.plan.dataset_len || o.plan.cache_num <= 0)
    throw Error(Exit::internal, o.name, "a window cache needs one item per position of its plan");
  std::unique_ptr<WindowCache> c(new WindowCache());
  c->plan_ = o.plan;
  c->items_ = o.items;
  c->prepare_ = std::move(prepare);
  c->chunk_ = std::max<std::size_t>(1, o.chunk);
  c->part_ = o.part;
  c->parts_ = std::max(1, o.parts);
  c->item_bytes_ = dtype_size(o.dtype);
  for (auto d : o.dims) c->item_bytes_ *= static_cast<std::size_t>(d);
  slab::CreateOptions want;
  want.name = o.name;
  want.length = want.slots = static_cast<uint64_t>(o.plan.slots());
  want.dtype = o.dtype;
  want.dims = o.dims;
  want.content_id = o.content_id;
  want.tool = o.tool;
  want.temporary = true;
  if (o.own) {
    c->slab_ = std::make_unique<slab::Slab>(slab::Slab::create(want));
    c->remove_at_end_ = true;
  } else {
    bool created = false;
    c->slab_ = data_cache::open_slab(want, want.slots * c->item_bytes_, o.trust_owner, &created);
    c->remove_at_end_ = created;
  }
  c->name_ = o.name;
  if (const char* d = std::getenv("TRAINCACHE_TEST_REPLACER_DELAY_MS")) c->delay_ms_ = std::atoi(d);
  for (int w = 0; w < std::max(1, o.workers); ++w) c->threads_.emplace_back([p = c.get()] { p->worker(); });
  return c;
}

WindowCache::~WindowCache() {
  shutdown();
  slab_.reset();
  if (!remove_at_end_) return;
  try {
    slab::remove_slab(name_);
  } catch (const Error&) {  // already removed (shm-cache rm): nothing to do
  }
}

int64_t WindowCache::item_of(int64_t key) const { return (*items_)[static_cast<std::size_t>(key % plan_.dataset_len)]; }

bool WindowCache::ready(int64_t key) const {
  return slab_->tag(static_cast<uint64_t>(key % plan_.slots())) == static_cast<uint64_t>(key) + 1;
}

void WindowCache::worker() {
  std::vector<unsigned char> buf;
  std::unique_lock<std::mutex> lk(mu_);
  while (true) {
    cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    const uint64_t gen = generation_;
    std::vector<int64_t> keys, items;
    int64_t window_jobs = 0;
    while (!queue_.empty() && keys.size() < chunk_) {
      const Job j = queue_.front();
      queue_.pop_front();
      window_jobs += j.window ? 1 : 0;
      if (ready(j.key)) continue;  // the training (or another rank) prepared it already
      keys.push_back(j.key);
      items.push_back(item_of(j.key));
    }
    lk.unlock();
    uint64_t stored = 0;
    std::exception_ptr failed;
    if (!keys.empty()) {
      try {
        buf.resize(keys.size() * item_bytes_);
        prepare_(items, buf.data());
        if (delay_ms_ > 0) {  // a slower Prepare; shutdown drops its items
          std::unique_lock<std::mutex> held(mu_);
          if (cv_.wait_for(held, std::chrono::milliseconds(delay_ms_), [&] { return stop_; })) return;
        }
        for (std::size_t j = 0; j < keys.size(); ++j)
          stored += slab_->set_tagged(static_cast<uint64_t>(keys[j] % plan_.slots()),
                                      static_cast<uint64_t>(keys[j]) + 1, buf.data() + j * item_bytes_, item_bytes_);
      } catch (...) {
        failed = std::current_exception();
      }
    }
    lk.lock();
    replaced_ += stored;
    if (failed && !error_) error_ = failed;
    if (failed) queue_.clear();  // the training reads the same items itself and reports the error
    if (gen == generation_) window_pending_ = failed ? 0 : window_pending_ - window_jobs;
    cv_.notify_all();
  }
}

Boundary WindowCache::begin_epoch(int64_t e, bool wait, bool prepare_next) {
  Boundary b;
  b.epoch = e;
  const int64_t first = plan_.first_key(e);
  std::vector<Job> jobs;
  for (int64_t k = first; k < first + plan_.cache_num; ++k) {
    if (ready(k)) continue;
    ++b.late;
    if (k % parts_ == part_) jobs.push_back({k, true});
  }
  const int64_t window_jobs = static_cast<int64_t>(jobs.size());
  if (prepare_next)
    for (int64_t k = first + plan_.cache_num; k < first + plan_.slots(); ++k)
      if (k % parts_ == part_) jobs.push_back({k, false});
  const auto t = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lk(mu_);
  if (error_) std::rethrow_exception(error_);
  ++generation_;
  queue_.assign(jobs.begin(), jobs.end());
  window_pending_ = window_jobs;
  cv_.notify_all();
  if (wait) {
    cv_.wait(lk, [&] { return stop_ || error_ || window_pending_ <= 0; });
    if (error_) std::rethrow_exception(error_);
    b.wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }
  return b;
}

std::vector<std::size_t> WindowCache::lookup(const std::vector<int64_t>& keys, void* out) {
  std::vector<std::size_t> misses;
  auto* dst = static_cast<char*>(out);
  for (std::size_t j = 0; j < keys.size(); ++j)
    if (!slab_->read_tagged(static_cast<uint64_t>(keys[j] % plan_.slots()), static_cast<uint64_t>(keys[j]) + 1,
                            dst + j * item_bytes_))
      misses.push_back(j);
  std::lock_guard<std::mutex> lk(mu_);
  hits_ += keys.size() - misses.size();
  misses_ += misses.size();
  return misses;
}

void WindowCache::store(int64_t key, const void* data) {
  const bool s =
      slab_->set_tagged(static_cast<uint64_t>(key % plan_.slots()), static_cast<uint64_t>(key) + 1, data, item_bytes_);
  std::lock_guard<std::mutex> lk(mu_);
  stored_ += s ? 1 : 0;
}

data_cache::Stats WindowCache::stats() const {
  data_cache::Stats s;
  {
    std::lock_guard<std::mutex> lk(mu_);
    s.hits = hits_;
    s.misses = misses_;
    s.stored = stored_;
    s.replaced = replaced_;
  }
  s.slots = static_cast<uint64_t>(plan_.slots());
  s.rows = static_cast<uint64_t>(plan_.dataset_len);
  s.bytes = s.slots * item_bytes_;
  s.slabs.push_back(name_);
  return s;
}

uint64_t WindowCache::filled_bytes() const { return slab_->counts().filled_bytes; }

void WindowCache::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    queue_.clear();
    cv_.notify_all();
  }
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

}  // namespace traincache::data_cache
