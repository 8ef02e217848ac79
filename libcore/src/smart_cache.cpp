#include "traincache/smart_cache.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "traincache/error.h"

namespace traincache::smart {

WindowPlan make_plan(int64_t dataset_len, int64_t cache_num, double replace_rate) {
  if (dataset_len <= 0) throw Error(Exit::usage, "dataset", "is empty");
  if (cache_num <= 0) throw Error(Exit::usage, "--cache-num", "must be positive");
  if (!(replace_rate > 0) || replace_rate > 1) throw Error(Exit::usage, "--replace-rate", "must be in (0, 1]");
  WindowPlan p;
  p.dataset_len = dataset_len;
  p.cache_num = std::min(cache_num, dataset_len);
  p.replace_num = p.cache_num == dataset_len
                      ? 0
                      : static_cast<int64_t>(std::ceil(static_cast<double>(p.cache_num) * replace_rate - 1e-9));
  return p;
}

std::vector<int64_t> WindowPlan::window(int64_t epoch) const {
  std::vector<int64_t> w;
  int64_t start = (epoch * replace_num) % dataset_len;
  for (int64_t i = 0; i < cache_num; ++i) w.push_back((start + i) % dataset_len);
  return w;
}

std::vector<int64_t> WindowPlan::incoming(int64_t epoch) const {
  std::vector<int64_t> in;
  int64_t start = (epoch * replace_num + cache_num) % dataset_len;
  for (int64_t i = 0; i < replace_num; ++i) in.push_back((start + i) % dataset_len);
  return in;
}

int64_t WindowPlan::epochs_to_cover() const {
  if (replace_num == 0) return 1;
  return 1 + (dataset_len - cache_num + replace_num - 1) / replace_num;
}

SmartCache::SmartCache(WindowPlan plan, std::vector<int64_t> order, Prepare prepare, int replace_workers)
    : plan_(plan), order_(std::move(order)), prepare_(std::move(prepare)), workers_(std::max(1, replace_workers)) {
  if (static_cast<int64_t>(order_.size()) != plan_.dataset_len)
    throw Error(Exit::internal, "smart cache", "the dataset order must list every index once");
}

SmartCache::~SmartCache() { shutdown(); }

void SmartCache::worker() {
  while (true) {
    int64_t index;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      index = queue_.back();
      queue_.pop_back();
    }
    std::vector<unsigned char> item;
    try {
      item = prepare_(index);
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = std::current_exception();
      --pending_;
      cv_.notify_all();
      continue;
    }
    std::lock_guard<std::mutex> lk(mu_);
    incoming_[index] = std::move(item);
    --pending_;
    cv_.notify_all();
  }
}

void SmartCache::schedule(int64_t epoch) {
  std::lock_guard<std::mutex> lk(mu_);
  auto positions = plan_.incoming(epoch);
  // Queue in reverse so that workers take them in order (pop from the back).
  for (auto it = positions.rbegin(); it != positions.rend(); ++it) queue_.push_back(order_[*it]);
  pending_ += static_cast<int64_t>(positions.size());
  cv_.notify_all();
}

void SmartCache::start() {
  for (int w = 0; w < workers_; ++w) threads_.emplace_back([this] { worker(); });
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto positions = plan_.window(0);
    for (auto it = positions.rbegin(); it != positions.rend(); ++it) queue_.push_back(order_[*it]);
    pending_ += static_cast<int64_t>(positions.size());
    cv_.notify_all();
  }
  {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return pending_ == 0 || stop_; });
    if (error_) std::rethrow_exception(error_);
    window_ = std::move(incoming_);
    incoming_.clear();
  }
  epoch_ = 0;
  if (plan_.replace_num > 0) schedule(0);
}

std::vector<int64_t> SmartCache::window_indices() const {
  std::vector<int64_t> out;
  for (int64_t pos : plan_.window(epoch_)) out.push_back(order_[pos]);
  return out;
}

const std::vector<unsigned char>& SmartCache::item(int64_t dataset_index) const {
  auto it = window_.find(dataset_index);
  if (it == window_.end())
    throw Error(Exit::internal, "smart cache", "index " + std::to_string(dataset_index) + " is not in the window");
  return it->second;
}

double SmartCache::advance() {
  if (plan_.replace_num == 0) {
    ++epoch_;
    return 0;
  }
  auto t = std::chrono::steady_clock::now();
  {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return pending_ == 0 || stop_; });
    if (error_) std::rethrow_exception(error_);
    // The R oldest positions leave, the prepared ones enter.
    for (int64_t i = 0; i < plan_.replace_num; ++i) {
      int64_t leaving = order_[(epoch_ * plan_.replace_num + i) % plan_.dataset_len];
      window_.erase(leaving);
    }
    for (auto& [index, item] : incoming_) window_[index] = std::move(item);
    incoming_.clear();
  }
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  ++epoch_;
  schedule(epoch_);
  return waited;
}

uint64_t SmartCache::bytes_cached() const {
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t b = 0;
  for (const auto& [i, v] : window_) b += v.size();
  for (const auto& [i, v] : incoming_) b += v.size();
  return b;
}

void SmartCache::shutdown() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    queue_.clear();
    cv_.notify_all();
  }
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
  std::lock_guard<std::mutex> lk(mu_);
  std::map<int64_t, std::vector<unsigned char>>().swap(window_);
  std::map<int64_t, std::vector<unsigned char>>().swap(incoming_);
}

}  // namespace traincache::smart
