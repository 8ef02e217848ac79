// Precompiled header for the torch-free core and every target that reuses it (tools, core tests):
// CLI11 and nlohmann-json are header-only and cost seconds per translation unit.
#pragma once
#include <hdf5.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>
