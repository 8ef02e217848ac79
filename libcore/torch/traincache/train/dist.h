// Data parallelism over torch.distributed (c10d): a process group of the ranks of one job, created
// from the launcher's environment (torchrun, or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT by hand).
// Gloo on CPU, NCCL on CUDA when LibTorch was built with it. The c10d headers stay in dist.cpp.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "traincache/train/dist_launch.h"

namespace traincache::train {

/// The backend to use for `requested` on `device` (automatic: NCCL for CUDA devices, Gloo
/// otherwise); Error(unavailable) for NCCL in a LibTorch built without it, Error(usage) for NCCL
/// on a CPU device.
Backend choose_backend(Backend requested, const torch::Device& device);

/// One process group, made in two steps: the constructor connects to the job's store, start()
/// creates the process group once every rank got ready. A rank that fails in between, or later,
/// says so through the store (report_failure) and the others stop with its reason instead of
/// waiting. Every collective must be called by every rank in the same order. A failed or
/// timed-out collective (a rank died, hung or disconnected) throws Error(unavailable) naming this
/// rank, the collective and the context set with set_context(), and the failed rank's own
/// message when it left one.
class RankGroup {
 public:
  /// Connects to the job's store (rank 0 hosts it unless torchrun's agent does); waits at most
  /// `timeout` for it, and the same in start() and every later collective. Tensors travel on
  /// `device` for NCCL and on the CPU for Gloo; results come back where the inputs were.
  RankGroup(const Launch& launch, Backend backend, std::chrono::milliseconds timeout, const torch::Device& device);
  /// Tears the process group down (NCCL's communicators shut down cleanly), then the store; the
  /// rank that hosts the store first gives the others a few seconds to read a failure.
  ~RankGroup();

  /// Says this rank is ready, waits until every rank is, then creates the process group.
  /// Error(unavailable) with the other rank's reason when one reported a failure, on timeout, or
  /// Error(interrupted) on SIGINT/SIGTERM while waiting.
  void start();

  /// Leaves `e` (this rank's error) in the store for the other ranks and closes this rank's side
  /// of the process group, so that they stop within moments with its reason. Does nothing when
  /// this rank is only passing on another's failure. Never throws.
  void report_failure(const std::exception& e) noexcept;
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  Backend backend() const { return backend_; }

  /// Collectives run so far (each all_gather_rows, all_reduce_sum, broadcast or barrier is one).
  int64_t collectives() const { return collectives_; }
  /// Seconds spent in them: transfer plus waiting for slower ranks.
  double collective_seconds() const { return collective_seconds_; }

  /// What the ranks are doing, for error messages ("step 12").
  void set_context(std::string context) { context_ = std::move(context); }

  /// Every rank's `local` rows, concatenated in rank order. rows[r] is rank r's row count (shapes
  /// past the first dimension agree); shorter shares are padded for the transfer.
  torch::Tensor all_gather_rows(const torch::Tensor& local, const std::vector<int64_t>& rows);

  /// Element-wise sum over the ranks, in place, as one collective: the tensors are packed into
  /// one buffer (they must share dtype and device) and unpacked again.
  void all_reduce_sum(const std::vector<torch::Tensor>& tensors);

  /// Overwrites `tensors` with rank `root`'s values, as one collective.
  void broadcast(const std::vector<torch::Tensor>& tensors, int root);

  /// Waits until every rank arrives.
  void barrier();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1;
  Backend backend_ = Backend::gloo;
  torch::Device comm_device_ = torch::kCPU;
  std::string context_ = "start-up";
  int64_t collectives_ = 0;
  double collective_seconds_ = 0;
  bool passing_on_ = false;  // this rank stops because of another rank (report_failure stays quiet)
  bool failed_ = false;      // a failure ends this rank: NCCL communicators are aborted, not shut down
  int linger_ms_ = 0;        // a failure message is in the store: its host waits for the others to read it
  void wait(const char* op, const std::function<void()>& run);
  void close_backend() noexcept;
  std::string label() const;  // "rank R of N", the subject of this rank's errors
  std::optional<std::string> peer_failure();
  [[noreturn]] void throw_peer_failure(const std::string& reason);
};

}  // namespace traincache::train
