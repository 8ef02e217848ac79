#include "traincache/dist.h"

#include <c10/util/Logging.h>
#include <torch/version.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "traincache_dist_config.h"  // before c10d: says which process groups there are
#ifdef TRAINCACHE_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef TRAINCACHE_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdlib>

#include "traincache/cli.h"
#include "traincache/encoder.h"
#include "traincache/error.h"

namespace traincache::dist {

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

// Since LibTorch 2.0 ProcessGroupGloo and ProcessGroupNCCL are c10d::Backend implementations (a
// ProcessGroup dispatches to them); in 1.13 they are ProcessGroups. Either has the collectives used.
#if TORCH_VERSION_MAJOR >= 2
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

struct Group::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<CollectiveBackend> pg;
};

namespace {

#ifdef TRAINCACHE_WITH_GLOO

// The Gloo transport devices: one per interface in GLOO_SOCKET_IFNAME (as torch.distributed does),
// else the address this host's name resolves to (loopback when it resolves to nothing).
std::vector<std::shared_ptr<::gloo::transport::Device>> gloo_devices() {
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
  if (const char* ifs = std::getenv("GLOO_SOCKET_IFNAME"); ifs && *ifs) {
    for (const auto& name : cli::split(ifs, ','))
      devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
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
  std::string m = encode::torch_error_message(c ? c->what_without_backtrace() : e.what());
  if (m.size() > 2 && m[0] == '[') {
    auto close = m.find("] ");
    if (close != std::string::npos && m.find(':') < close) m.erase(0, close + 2);
  }
  return m;
}

}  // namespace

Group::Group(const Launch& launch, Backend backend, std::chrono::milliseconds timeout, const torch::Device& device)
    : impl_(std::make_unique<Impl>()),
      rank_(launch.rank),
      size_(launch.world_size),
      backend_(backend),
      comm_device_(backend == Backend::nccl ? device : torch::Device(torch::kCPU)) {
  quiet_c10d_log();
  wait("connecting", [&] {
    c10d::TCPStoreOptions so;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
    // The libuv store backend (LibTorch's default since 2.4) is missing from builds without libuv,
    // Debian 13's among them, and matters only at thousands of ranks: used when USE_LIBUV=1 asks.
    const char* libuv = std::getenv("USE_LIBUV");
    so.useLibUV = libuv && std::string(libuv) == "1";
#endif
    so.port = static_cast<std::uint16_t>(launch.master_port);
    so.numWorkers = launch.world_size;
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
      impl_->store = c10::make_intrusive<c10d::TCPStore>(launch.master_addr, so);
    }
    auto store = c10::make_intrusive<c10d::PrefixStore>("traincache", impl_->store);
#ifdef TRAINCACHE_WITH_NCCL
    if (backend == Backend::nccl) {
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = timeout;
      impl_->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank_, size_, opts);
      return;
    }
#endif
#ifdef TRAINCACHE_WITH_GLOO
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    opts->devices = gloo_devices();
    opts->threads = 2;
    impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank_, size_, opts);
#endif
  });
  context_ = "start-up";
  collectives_ = 0;
  collective_seconds_ = 0;
}

Group::~Group() = default;

void Group::wait(const char* op, const std::function<void()>& run) {
  ++collectives_;
  auto t0 = std::chrono::steady_clock::now();
  try {
    run();
    collective_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(Exit::unavailable, "rank " + std::to_string(rank_) + " of " + std::to_string(size_),
                std::string(op) + " (" + context_ + ") failed: " + message_of(e) +
                    " (another rank exited, hung or cannot be reached)");
  }
}

torch::Tensor Group::all_gather_rows(const torch::Tensor& local, const std::vector<int64_t>& rows) {
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

void Group::all_reduce_sum(const std::vector<torch::Tensor>& tensors) {
  if (tensors.empty()) return;
  std::vector<torch::Tensor> buf{pack(tensors, comm_device_)};
  wait("all-reduce", [&] { impl_->pg->allreduce(buf)->wait(); });
  unpack(buf[0], tensors);
}

void Group::broadcast(const std::vector<torch::Tensor>& tensors, int root) {
  if (tensors.empty()) return;
  std::vector<torch::Tensor> buf{pack(tensors, comm_device_)};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  wait("broadcast", [&] { impl_->pg->broadcast(buf, opts)->wait(); });
  unpack(buf[0], tensors);
}

void Group::barrier() {
  wait("barrier", [&] { impl_->pg->barrier()->wait(); });
}

}  // namespace traincache::dist
