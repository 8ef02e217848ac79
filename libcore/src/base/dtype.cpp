#include "traincache/base/dtype.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstring>

#include "traincache/base/error.h"
#include "traincache/base/format.h"

namespace traincache {

namespace {
struct Entry {
  DType type;
  const char* name;
  std::size_t size;
};
constexpr Entry kTable[] = {
    {DType::u8, "uint8", 1},    {DType::i8, "int8", 1},     {DType::u16, "uint16", 2},  {DType::i16, "int16", 2},
    {DType::u32, "uint32", 4},  {DType::i32, "int32", 4},   {DType::u64, "uint64", 8},  {DType::i64, "int64", 8},
    {DType::f16, "float16", 2}, {DType::f32, "float32", 4}, {DType::f64, "float64", 8}, {DType::string, "string", 0},
    {DType::other, "other", 0},
};
}  // namespace

const char* dtype_name(DType t) {
  for (const auto& e : kTable)
    if (e.type == t) return e.name;
  return "other";
}

DType parse_dtype(const std::string& name) {
  // Numbers only: what parses here is what a slab can hold, so the list of valid names is true.
  auto numeric = [](DType t) { return t != DType::other && t != DType::string; };
  for (const auto& e : kTable)
    if (name == e.name && numeric(e.type)) return e.type;
  std::vector<std::string> valid;
  for (const auto& e : kTable)
    if (numeric(e.type)) valid.push_back(e.name);
  throw Error(Exit::usage, name, "unknown dtype (valid: " + name_list(valid) + ")");
}

std::size_t dtype_size(DType t) {
  for (const auto& e : kTable)
    if (e.type == t) return e.size;
  return 0;
}

bool is_integer(DType t) {
  switch (t) {
    case DType::u8:
    case DType::i8:
    case DType::u16:
    case DType::i16:
    case DType::u32:
    case DType::i32:
    case DType::u64:
    case DType::i64:
      return true;
    default:
      return false;
  }
}

void require_memory(const std::string& what, uint64_t count, uint64_t element_bytes) {
  const uint64_t physical =
      static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint64_t bytes = 0;
  bool overflow = __builtin_mul_overflow(count, element_bytes, &bytes);
  if (overflow || bytes > physical)
    throw Error(Exit::unavailable, what,
                "needs " + (overflow ? std::string("more than 16 EiB") : format_size(bytes)) +
                    " of memory but this machine has " + format_size(physical));
}

uint64_t peak_rss_bytes() {
  if (std::FILE* f = std::fopen("/proc/self/status", "re")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f)) found = std::sscanf(line, "VmHWM: %llu kB", &kib) == 1;
    std::fclose(f);
    if (found) return static_cast<uint64_t>(kib) * 1024;
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

std::string errno_text(int err) {
  std::string s = std::strerror(err);
  if (!s.empty()) s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return s;
}

bool is_float(DType t) { return t == DType::f16 || t == DType::f32 || t == DType::f64; }

namespace {
template <class From>
void widen(const void* in, int64_t* out, std::size_t n) {
  const From* src = static_cast<const From*>(in);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<int64_t>(src[i]);
}
}  // namespace

void to_int64(DType t, const void* in, int64_t* out, std::size_t n) {
  switch (t) {
    case DType::u8:
      return widen<uint8_t>(in, out, n);
    case DType::i8:
      return widen<int8_t>(in, out, n);
    case DType::u16:
      return widen<uint16_t>(in, out, n);
    case DType::i16:
      return widen<int16_t>(in, out, n);
    case DType::u32:
      return widen<uint32_t>(in, out, n);
    case DType::i32:
      return widen<int32_t>(in, out, n);
    case DType::u64:
      return widen<uint64_t>(in, out, n);
    case DType::i64:
      return widen<int64_t>(in, out, n);
    default:
      throw Error(Exit::internal, "", std::string("no int64 conversion from ") + dtype_name(t));
  }
}

}  // namespace traincache
