// gc-train's text fields without LibTorch: the texts of a manifest field or an HDF5 string
// dataset, and the check that two datasets of a file have as many rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "traincache/train/train.h"

namespace traincache::train {

/// The texts of field `field` of `file` and how many each row holds (1, or k for lists).
std::vector<std::string> read_texts(const TrainOptions& o, const std::string& file, const std::string& field,
                                    bool lists, int64_t& per_row, int64_t& replaced);

/// Error(data) unless datasets `a` and `b` of `path` have as many rows.
void same_rows(const std::string& path, const std::string& a, int64_t na, const std::string& b, int64_t nb);

}  // namespace traincache::train
