// An ordered prefetcher: worker threads produce items 0..count-1 ahead of a consumer that takes
// them strictly in order. cache-fill reads input batches with it; smart-bench prepares samples.
// A serial worker: one thread runs tasks in the order they are submitted, behind the thread that
// submits them (cache-fill stores and commits its outputs on one while the next batch encodes).
// Torch-free: the item type is a template parameter.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace traincache {

template <class T>
class OrderedPrefetcher {
 public:
  /// Item k is `produce(k)`, called on one of `workers` threads (at least one). At most `depth`
  /// items (at least one) are produced ahead of the consumer: items k >= taken + depth wait.
  /// `produce` must be safe to call from several threads at once. A thread that cannot be started
  /// (std::system_error: the process is out of threads) stops and joins those already running
  /// before the error leaves the constructor: no joinable thread is left to std::terminate.
  OrderedPrefetcher(int64_t count, int workers, int64_t depth, std::function<T(int64_t)> produce)
      : count_(count), depth_(std::max<int64_t>(1, depth)), produce_(std::move(produce)) {
    try {
      for (int w = 0; w < std::max(1, workers); ++w) threads_.emplace_back([this] { work(); });
    } catch (...) {
      stop_and_join();
      throw;
    }
  }

  /// Stops the workers (items in flight are finished and dropped) and joins them.
  ~OrderedPrefetcher() { stop_and_join(); }

  OrderedPrefetcher(const OrderedPrefetcher&) = delete;
  OrderedPrefetcher& operator=(const OrderedPrefetcher&) = delete;

  int64_t count() const { return count_; }

  /// Blocks until the next item is ready and hands it over. After a worker fails, the items
  /// already produced are still handed out in order; the first one that was not rethrows the
  /// first exception a worker raised.
  T next() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return ready_.count(taken_) || error_; });
    auto it = ready_.find(taken_);
    if (it == ready_.end()) std::rethrow_exception(error_);
    T item = std::move(it->second);
    ready_.erase(it);
    ++taken_;
    lk.unlock();
    cv_.notify_all();
    return item;
  }

 private:
  void stop_and_join() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void work() {
    while (true) {
      int64_t k = claimed_++;
      if (k >= count_) return;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || k < taken_ + depth_; });
        if (stop_) return;
      }
      try {
        T item = produce_(k);
        std::lock_guard<std::mutex> lk(mu_);
        ready_.emplace(k, std::move(item));
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_) error_ = std::current_exception();
        stop_ = true;
      }
      cv_.notify_all();
    }
  }

  const int64_t count_, depth_;
  std::function<T(int64_t)> produce_;
  std::atomic<int64_t> claimed_{0};
  int64_t taken_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, T> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

class SerialWorker {
 public:
  /// At most `depth` tasks (at least one) wait to run: submit() blocks beyond.
  explicit SerialWorker(std::size_t depth) : depth_(std::max<std::size_t>(1, depth)), thread_([this] { work(); }) {}

  /// Waits for the tasks submitted (their errors are dropped: call drain() first to see them).
  ~SerialWorker() {
    {
      std::unique_lock<std::mutex> lk(mu_);
      idle_.wait(lk, [&] { return tasks_.empty() && !running_; });
      stop_ = true;
    }
    more_.notify_all();
    thread_.join();
  }

  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  /// Queues `task`. Rethrows the first error of an earlier task; once one failed, no task runs.
  void submit(std::function<void()> task) {
    std::unique_lock<std::mutex> lk(mu_);
    idle_.wait(lk, [&] { return tasks_.size() < depth_ || error_; });
    if (error_) std::rethrow_exception(error_);
    tasks_.push_back(std::move(task));
    lk.unlock();
    more_.notify_all();
  }

  /// Waits until every task submitted has run; rethrows the first error of one.
  void drain() {
    std::unique_lock<std::mutex> lk(mu_);
    idle_.wait(lk, [&] { return (tasks_.empty() && !running_) || error_; });
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work() {
    std::unique_lock<std::mutex> lk(mu_);
    while (true) {
      more_.wait(lk, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stop_
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      running_ = !error_;
      idle_.notify_all();  // a place in the queue is free
      lk.unlock();
      std::exception_ptr failed;
      if (running_) {
        try {
          task();
        } catch (...) {
          failed = std::current_exception();
        }
      }
      lk.lock();
      if (failed && !error_) error_ = failed;
      running_ = false;
      idle_.notify_all();
    }
  }

  const std::size_t depth_;
  std::mutex mu_;
  std::condition_variable more_, idle_;
  std::deque<std::function<void()>> tasks_;
  std::exception_ptr error_;
  bool running_ = false, stop_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace traincache
