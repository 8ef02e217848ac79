#include "traincache/train/dist.h"

#include <c10/util/Logging.h>
#include <torch/version.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "traincache_dist_config.h"  // before c10d: says which process groups there are
#ifdef TRAINCACHE_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

#include <csignal>
#include <cstdlib>
#include <thread>

#include "nccl_group.h"
#include "traincache/base/error.h"
#include "traincache/base/format.h"
#include "traincache/base/interrupt.h"
#include "traincache/model/encode.h"

namespace traincache::train {

Backend choose_backend(Backend requested, const torch::Device& device) {
  Backend b = requested != Backend::automatic ? requested : device.is_cuda() ? Backend::nccl : Backend::gloo;
#ifndef TRAINCACHE_WITH_NCCL
  if (b == Backend::nccl)
    throw Error(Exit::unavailable, "--dist-backend",
                "this LibTorch has no NCCL (build against a CUDA LibTorch, or use --dist-backend gloo)");
#endif
#ifndef TRAINCACHE_WITH_GLOO
  if (b == Backend::gloo)
    throw Error(Exit::unavailable, "--dist-backend",
                "gloo: traincache was built without Gloo (this LibTorch ships no Gloo headers; see docs/gpu.md)" +
                    std::string(device.is_cuda() ? "; use --dist-backend nccl" : ""));
#endif
  if (b == Backend::nccl && !device.is_cuda()) throw Error(Exit::usage, "--dist-backend", "nccl needs a CUDA --device");
  return b;
}

struct RankGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;    // the job's store (ours or torchrun's agent's)
  c10::intrusive_ptr<c10d::Store> control;  // our keys in it: "ready", "failed", "ended"
  c10::intrusive_ptr<CollectiveBackend> pg;
  std::chrono::milliseconds timeout{0};
  bool hosts_store = false;
};

namespace {

#ifdef TRAINCACHE_WITH_GLOO

// The Gloo transport devices: one per interface in GLOO_SOCKET_IFNAME (as torch.distributed does),
// else the address this host's name resolves to (loopback when it resolves to nothing).
std::vector<std::shared_ptr<::gloo::transport::Device>> gloo_devices() {
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
  if (const char* ifs = std::getenv("GLOO_SOCKET_IFNAME"); ifs && *ifs) {
    for (const auto& name : split(ifs, ',')) devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
  } else {
    devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  return devices;
}
#endif

// c10d logs failures as well as throwing them; the exception becomes our one-line error, so its
// log stays quiet unless TORCH_CPP_LOG_LEVEL asks for it. LibTorch logs through glog when it was
// built with it (Debian 12), else through c10's own logging (Debian 13, pip).
void quiet_c10d_log() {
  if (std::getenv("TORCH_CPP_LOG_LEVEL")) return;
#ifdef C10_USE_GLOG
  FLAGS_minloglevel = std::max(FLAGS_minloglevel, google::GLOG_FATAL);
#else
  FLAGS_caffe2_log_level = std::max(FLAGS_caffe2_log_level, c10::GLOG_FATAL);
#endif
}

// The exception's message without Gloo's "[file.cc:line] " prefix.
std::string message_of(const std::exception& e) {
  auto* c = dynamic_cast<const c10::Error*>(&e);
  std::string m = model::torch_error_message(c ? c->what_without_backtrace() : e.what());
  if (m.size() > 2 && m[0] == '[') {
    auto close = m.find("] ");
    if (close != std::string::npos && m.find(':') < close) m.erase(0, close + 2);
  }
  return m;
}

}  // namespace

RankGroup::RankGroup(const Launch& launch, Backend backend, std::chrono::milliseconds timeout,
                     const torch::Device& device)
    : impl_(std::make_unique<Impl>()),
      rank_(launch.rank),
      size_(launch.world_size),
      backend_(backend),
      comm_device_(backend == Backend::nccl ? device : torch::Device(torch::kCPU)) {
  // Gloo writes to its peers with writev(), which cannot ask for MSG_NOSIGNAL: a write to a rank
  // that has just died would end this one with SIGPIPE, without a word (exit 141), instead of the
  // failed collective's error (69, "another rank exited"). Ignored, the write fails with EPIPE.
  // (Python ignores SIGPIPE from its start, so torch.distributed's Python users never meet it.)
  ::signal(SIGPIPE, SIG_IGN);
  quiet_c10d_log();
  impl_->timeout = timeout;
  wait("connecting", [&] {
    c10d::TCPStoreOptions so;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
    // The libuv store backend (LibTorch's default since 2.4) is missing from builds without libuv,
    // Debian 13's among them, and matters only at thousands of ranks: used when USE_LIBUV=1 asks.
    const char* libuv = std::getenv("USE_LIBUV");
    so.useLibUV = libuv && std::string(libuv) == "1";
#endif
    so.port = static_cast<std::uint16_t>(launch.master_port);
    so.waitWorkers = false;  // start() waits for the ranks, watching for failures and signals
    so.timeout = timeout;
    if (launch.agent_store) {
      // torchrun's agent already serves the store on MASTER_PORT; its workers use a prefix per attempt.
      so.isServer = false;
      auto tcp = c10::make_intrusive<c10d::TCPStore>(launch.master_addr, so);
      impl_->store =
          c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(launch.restart_count), tcp);
    } else {
      so.isServer = launch.rank == 0;
      so.multiTenant = true;
      impl_->hosts_store = so.isServer;
      impl_->store = c10::make_intrusive<c10d::TCPStore>(launch.master_addr, so);
    }
    impl_->control = c10::make_intrusive<c10d::PrefixStore>("traincache-control", impl_->store);
  });
}

namespace {

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

}  // namespace

void RankGroup::start() {
  const auto deadline = std::chrono::steady_clock::now() + impl_->timeout;
  auto& control = *impl_->control;
  int64_t ready = 0;
  wait("start-up", [&] { ready = control.add("ready", 1); });
  while (ready < size_) {
    if (auto why = peer_failure()) throw_peer_failure(*why);
    if (interrupt_requested()) throw Error(Exit::interrupted, label(), "interrupted while waiting for the other ranks");
    if (std::chrono::steady_clock::now() > deadline) {
      passing_on_ = failed_ = true;  // about the others: not this rank's failure to report
      throw Error(Exit::unavailable, label(),
                  "start-up failed: " + std::to_string(ready) + " of " + std::to_string(size_) +
                      " ranks were ready after waiting " + std::to_string(impl_->timeout.count()) +
                      "ms (another rank exited, hung or cannot be reached)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    wait("start-up", [&] { ready = control.add("ready", 0); });
  }
  wait("connecting", [&] {
    auto store = c10::make_intrusive<c10d::PrefixStore>("traincache", impl_->store);
#ifdef TRAINCACHE_WITH_NCCL
    if (backend_ == Backend::nccl) {
      const c10::intrusive_ptr<c10d::Store> base = store;  // NCCL's group is in libtraincache_cuda.so
      call_cuda<decltype(tc_cuda_nccl_group)>("tc_cuda_nccl_group", &base, rank_, size_,
                                              static_cast<int64_t>(impl_->timeout.count()), &impl_->pg);
      return;
    }
#endif
#ifdef TRAINCACHE_WITH_GLOO
    auto opts = c10d::ProcessGroupGloo::Options::create(impl_->timeout);
    opts->devices = gloo_devices();
    opts->threads = 2;
    impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank_, size_, opts);
#endif
  });
  context_ = "start-up";
  collectives_ = 0;
  collective_seconds_ = 0;
}

std::string RankGroup::label() const { return "rank " + std::to_string(rank_) + " of " + std::to_string(size_); }

std::optional<std::string> RankGroup::peer_failure() {
  try {
    if (!impl_->control || !impl_->control->check({"failed"})) return std::nullopt;
    auto v = impl_->control->get("failed");
    return std::string(v.begin(), v.end());
  } catch (const std::exception&) {
    return std::nullopt;  // the store is gone with its host: nothing more to learn
  }
}

void RankGroup::throw_peer_failure(const std::string& reason) {
  passing_on_ = failed_ = true;
  linger_ms_ = 5000;  // the others may still need the message from the store this rank may serve
  try {
    impl_->control->add("ended", 1);
  } catch (const std::exception&) {
  }
  throw Error(Exit::unavailable, label(), reason);
}

// Shuts the collectives down: NCCL's communicators are destroyed cleanly (LibTorch >= 2.4 warns
// at exit otherwise), or aborted after a failure so that nothing waits on a peer that is gone.
void RankGroup::close_backend() noexcept {
  if (!impl_->pg) return;
  try {
#ifdef TRAINCACHE_WITH_NCCL
    if (backend_ == Backend::nccl)
      call_cuda<decltype(tc_cuda_nccl_close)>("tc_cuda_nccl_close", impl_->pg.get(), failed_);
#endif
    impl_->pg.reset();
  } catch (const std::exception&) {
  }
}

void RankGroup::report_failure(const std::exception& e) noexcept {
  failed_ = true;
  if (passing_on_ || !impl_->control) return;
  auto* err = dynamic_cast<const Error*>(&e);
  // A signal asks to stop now: the others get a moment to read why, not the usual few seconds.
  linger_ms_ = err && err->code() == Exit::interrupted ? 1000 : 5000;
  try {
    std::string what = err ? e.what() : std::string("internal error: ") + e.what();
    impl_->control->compareSet("failed", {}, bytes_of("rank " + std::to_string(rank_) + " failed: " + what));
    impl_->control->add("ended", 1);  // a reply: the store has the failure before our sockets close
  } catch (const std::exception&) {
  }
  close_backend();  // the others' collectives with this rank fail now, not after their timeout
}

RankGroup::~RankGroup() {
  close_backend();
  if (linger_ms_ > 0 && impl_->hosts_store) {
    // The others read the failure from the store this process serves: wait (a few seconds at
    // most) until every rank has ended.
    const auto until =
        std::chrono::steady_clock::now() + std::min(impl_->timeout, std::chrono::milliseconds(linger_ms_));
    try {
      while (impl_->control->add("ended", 0) < size_ && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } catch (const std::exception&) {
    }
  }
}

void RankGroup::wait(const char* op, const std::function<void()>& run) {
  ++collectives_;
  auto t0 = std::chrono::steady_clock::now();
  try {
    run();
    collective_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    if (auto why = peer_failure()) throw_peer_failure(*why);
    passing_on_ = failed_ = true;  // another rank died, hung or went away without a word
    throw Error(Exit::unavailable, label(),
                std::string(op) + " (" + context_ + ") failed: " + message_of(e) +
                    " (another rank exited, hung or cannot be reached)");
  }
}

torch::Tensor RankGroup::all_gather_rows(const torch::Tensor& local, const std::vector<int64_t>& rows) {
  if (static_cast<int>(rows.size()) != size_ || rows[rank_] != local.size(0))
    throw Error(Exit::internal, "all_gather_rows", "row counts do not match the group");
  torch::NoGradGuard no_grad;
  const int64_t most = *std::max_element(rows.begin(), rows.end());
  auto shape = local.sizes().vec();
  shape[0] = most;
  auto options = local.options().device(comm_device_);
  std::vector<torch::Tensor> in{torch::zeros(shape, options)};
  in[0].slice(0, 0, local.size(0)).copy_(local);
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int r = 0; r < size_; ++r) out[0].push_back(torch::empty(shape, options));
  wait("all-gather", [&] { impl_->pg->allgather(out, in)->wait(); });
  std::vector<torch::Tensor> parts;
  for (int r = 0; r < size_; ++r) parts.push_back(out[0][r].slice(0, 0, rows[r]));
  return torch::cat(parts).to(local.device());
}

namespace {

torch::Tensor pack(const std::vector<torch::Tensor>& ts, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat;
  for (const auto& t : ts) flat.push_back(t.reshape({-1}).to(device));
  return torch::cat(flat);
}

void unpack(const torch::Tensor& buf, const std::vector<torch::Tensor>& ts) {
  torch::NoGradGuard no_grad;
  int64_t at = 0;
  for (const auto& t : ts) {
    t.copy_(buf.slice(0, at, at + t.numel()).view(t.sizes()).to(t.device()));
    at += t.numel();
  }
}

}  // namespace

void RankGroup::all_reduce_sum(const std::vector<torch::Tensor>& tensors) {
  if (tensors.empty()) return;
  std::vector<torch::Tensor> buf{pack(tensors, comm_device_)};
  wait("all-reduce", [&] { impl_->pg->allreduce(buf)->wait(); });
  unpack(buf[0], tensors);
}

void RankGroup::broadcast(const std::vector<torch::Tensor>& tensors, int root) {
  if (tensors.empty()) return;
  std::vector<torch::Tensor> buf{pack(tensors, comm_device_)};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  wait("broadcast", [&] { impl_->pg->broadcast(buf, opts)->wait(); });
  unpack(buf[0], tensors);
}

void RankGroup::barrier() {
  wait("barrier", [&] { impl_->pg->barrier()->wait(); });
}

}  // namespace traincache::train
