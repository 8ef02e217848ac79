// NumPy's .npy format (version 1.0, 2.0 and 3.0): the header of a file, and columns over .npy
// files and .npz archives. Torch-free. See docs/inputs.md for what is accepted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "traincache/base/dtype.h"
#include "traincache/io/source.h"

namespace traincache::io::npy {

/// What the header of a .npy file says.
struct Header {
  DType dtype = DType::other;
  bool byteswap = false;        ///< stored big-endian: elements are swapped when read
  std::vector<int64_t> shape;   ///< at least one dimension
  std::size_t data_offset = 0;  ///< where the array's bytes start
  std::size_t data_bytes = 0;   ///< product(shape) * dtype_size(dtype)
};

/// Parses the header at the start of a .npy file, given its first `size` bytes (all of them, or
/// at least the header). Refuses with Error(data) naming `what`: not a .npy file, a truncated
/// header, Fortran order (of a multi-dimensional array), an object, string, structured or
/// complex dtype, a 0-dimensional array.
Header parse_header(const char* bytes, std::size_t size, const std::string& what);

/// A version 1.0 header for a C-order, little-endian array of `dtype` (numeric) and `shape`,
/// padded so that the data starts at a multiple of 64 bytes, as NumPy writes it.
std::string make_header(DType dtype, const std::vector<int64_t>& shape);

/// The array of a .npy file, memory-mapped.
std::unique_ptr<source::Column> open_npy(const std::string& path);

/// Member `name` (".npy" optional) of a .npz archive.
std::unique_ptr<source::Column> open_npz_member(const std::string& path, const std::string& name);

}  // namespace traincache::io::npy
