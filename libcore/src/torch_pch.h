// Precompiled header for every translation unit that uses LibTorch (built once, reused by all).
#pragma once
#include <torch/script.h>
#include <torch/torch.h>
