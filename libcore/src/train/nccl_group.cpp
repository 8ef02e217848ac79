// NCCL's process group, in libtraincache_cuda.so (nccl_group.h).
#include "nccl_group.h"

#include <chrono>

#include "traincache_dist_config.h"  // before c10d's process groups: says which there are
#ifdef TRAINCACHE_WITH_NCCL          // always, where this module is built (a CUDA LibTorch)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

void tc_cuda_nccl_group(const c10::intrusive_ptr<c10d::Store>* store, int rank, int size, int64_t timeout_ms,
                        c10::intrusive_ptr<traincache::train::CollectiveBackend>* out,
                        traincache::ModuleFailure* failure) {
  traincache::guarded(failure, [&] {
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = std::chrono::milliseconds(timeout_ms);
    *out = c10::make_intrusive<c10d::ProcessGroupNCCL>(*store, rank, size, opts);
  });
}

void tc_cuda_nccl_close(traincache::train::CollectiveBackend* group, bool abort, traincache::ModuleFailure* failure) {
  traincache::guarded(failure, [&] {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    if (auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(group)) {
      if (abort)
        nccl->abort();
      else
        nccl->shutdown();
    }
#else
    (void)group;
    (void)abort;
#endif
  });
}
