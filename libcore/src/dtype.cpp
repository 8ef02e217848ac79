#include "traincache/dtype.h"

#include "traincache/error.h"

#include <cctype>
#include <cstring>

namespace traincache {

namespace {
struct Entry {
  DType type;
  const char* name;
  std::size_t size;
};
constexpr Entry kTable[] = {
    {DType::u8, "uint8", 1},     {DType::i8, "int8", 1},       {DType::u16, "uint16", 2},
    {DType::i16, "int16", 2},    {DType::u32, "uint32", 4},    {DType::i32, "int32", 4},
    {DType::u64, "uint64", 8},   {DType::i64, "int64", 8},     {DType::f16, "float16", 2},
    {DType::f32, "float32", 4},  {DType::f64, "float64", 8},   {DType::string, "string", 0},
    {DType::other, "other", 0},
};
}  // namespace

const char* dtype_name(DType t) {
  for (const auto& e : kTable)
    if (e.type == t) return e.name;
  return "other";
}

DType parse_dtype(const std::string& name) {
  for (const auto& e : kTable)
    if (name == e.name && e.type != DType::other) return e.type;
  throw Error(Exit::usage, name, "unknown dtype");
}

std::size_t dtype_size(DType t) {
  for (const auto& e : kTable)
    if (e.type == t) return e.size;
  return 0;
}

bool is_integer(DType t) {
  switch (t) {
    case DType::u8: case DType::i8: case DType::u16: case DType::i16:
    case DType::u32: case DType::i32: case DType::u64: case DType::i64:
      return true;
    default:
      return false;
  }
}

std::string errno_text(int err) {
  std::string s = std::strerror(err);
  if (!s.empty()) s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return s;
}

bool is_float(DType t) { return t == DType::f16 || t == DType::f32 || t == DType::f64; }

}  // namespace traincache
