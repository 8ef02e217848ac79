// Element types of datasets and tensors, independent of HDF5 and torch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace traincache {

/// Element type of a dataset, a slab or a tensor.
enum class DType { u8, i8, u16, i16, u32, i32, u64, i64, f16, f32, f64, string, other };

/// Short lower-case name: "uint8", "float32", "string", ...
const char* dtype_name(DType t);

/// Parses the name of a numeric type produced by dtype_name() (not "string": no element of fixed
/// size); throws Error(usage) listing the valid names for anything else.
DType parse_dtype(const std::string& name);

/// Bytes per element (0 for string and other).
std::size_t dtype_size(DType t);

/// True for the integer types.
bool is_integer(DType t);

/// True for f16, f32 and f64.
bool is_float(DType t);

/// Converts `n` integers of type `t` at `in` to int64 (uint64 above 2^63 wraps, as in torch).
/// Error(internal) for other types.
void to_int64(DType t, const void* in, int64_t* out, std::size_t n);

}  // namespace traincache
