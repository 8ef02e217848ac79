// train/'s part of libtraincache_cuda.so (model/cuda_module.h says why that module stands apart):
// NCCL's process group, which dist.cpp makes for CUDA devices (nccl_group.cpp includes c10d's
// process group after traincache_dist_config.h, as dist.cpp does).
#pragma once

#include <torch/version.h>

#include <torch/csrc/distributed/c10d/Store.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#include <cstdint>

#include "traincache/base/module.h"

namespace traincache::train {

// Since LibTorch 2.0 ProcessGroupGloo and ProcessGroupNCCL are c10d::Backend implementations (a
// ProcessGroup dispatches to them); in 1.13 they are ProcessGroups. Either has the collectives used.
#if TORCH_VERSION_MAJOR >= 2
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

}  // namespace traincache::train

extern "C" {
/// NCCL's process group of SIZE ranks over *store, this process rank RANK, its collectives timing
/// out after TIMEOUT_MS, into *out.
void tc_cuda_nccl_group(const c10::intrusive_ptr<c10d::Store>* store, int rank, int size, int64_t timeout_ms,
                        c10::intrusive_ptr<traincache::train::CollectiveBackend>* out,
                        traincache::ModuleFailure* failure);

/// Ends *group's (NCCL's) communicators before the group is released: aborted where ABORT (after a
/// failure, so that nothing waits on a peer that is gone), else shut down cleanly (LibTorch >= 2.4
/// warns at exit otherwise; before 2.4, nothing).
void tc_cuda_nccl_close(traincache::train::CollectiveBackend* group, bool abort, traincache::ModuleFailure* failure);
}
