// model/'s part of libtraincache_cuda.so, the module that holds what runs only on CUDA devices and
// needs CUDA's libraries at link time: nvJPEG's decoder here, NCCL's process group in
// train/nccl_group.h. The engines module links LibTorch's CPU libraries only and reaches these
// through cuda_symbol (base/module.h), so that a run on the CPU never loads CUDA's libraries (with
// pip's CUDA LibTorch they are 40% of LibTorch's load); a tool whose options name a CUDA device loads
// this module before the engines (load_cuda_module). Built with a CUDA LibTorch only.
#pragma once

#include <c10/core/Device.h>

#include "traincache/base/module.h"
#include "traincache/model/jpeg_gpu.h"

extern "C" {
/// A new nvJPEG decoder on *device into *out (the caller owns it).
void tc_cuda_jpeg_decoder(const c10::Device* device, traincache::model::JpegDecoder** out,
                          traincache::ModuleFailure* failure);
}
