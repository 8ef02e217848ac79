// .npy files are parsed here: the format is a magic string, a version, and a Python dict literal
// with three keys (NumPy's NEP 1), and what we need from it is a dtype, a shape and an offset to
// memory-map. No Debian package reads .npy from C++ without copying the array; .npz archives are
// zip files, read through libzip.
#include "traincache/io/npy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "traincache/base/error.h"
#include "traincache/base/files.h"

namespace traincache::io::npy {

namespace {

[[noreturn]] void refuse(const std::string& what, const std::string& why) { throw Error(Exit::data, what, why); }

// A cursor over the header's dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class DictParser {
 public:
  DictParser(std::string text, std::string what) : s_(std::move(text)), what_(std::move(what)) {}

  Header parse() {
    Header h;
    bool descr = false, order = false, shape = false, fortran = false;
    expect('{');
    while (true) {
      skip();
      if (peek() == '}') break;
      std::string key = string_literal();
      expect(':');
      if (key == "descr") {
        skip();
        if (peek() == '[') refuse(what_, "a structured dtype (record array) is not supported; save a numeric array");
        set_dtype(string_literal(), h);
        descr = true;
      } else if (key == "fortran_order") {
        fortran = boolean();
        order = true;
      } else if (key == "shape") {
        h.shape = tuple();
        shape = true;
      } else {
        refuse(what_, "unexpected key '" + key + "' in the .npy header");
      }
      skip();
      if (peek() == ',') ++i_;
    }
    if (!descr || !order || !shape) refuse(what_, "the .npy header lacks descr, fortran_order or shape");
    if (h.shape.empty()) refuse(what_, "a 0-dimensional array has no rows");
    if (fortran && h.shape.size() > 1)
      refuse(what_, "a Fortran-order array is not supported; save it in C order (numpy.ascontiguousarray)");
    return h;
  }

 private:
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void expect(char c) {
    skip();
    if (peek() != c) refuse(what_, std::string("malformed .npy header (expected '") + c + "')");
    ++i_;
  }
  std::string string_literal() {
    skip();
    char q = peek();
    if (q != '\'' && q != '"') refuse(what_, "malformed .npy header (expected a quoted string)");
    std::size_t end = s_.find(q, i_ + 1);
    if (end == std::string::npos) refuse(what_, "malformed .npy header (unterminated string)");
    std::string out = s_.substr(i_ + 1, end - i_ - 1);
    i_ = end + 1;
    return out;
  }
  bool boolean() {
    skip();
    for (auto [word, value] : {std::pair{"True", true}, std::pair{"False", false}})
      if (s_.compare(i_, std::strlen(word), word) == 0) {
        i_ += std::strlen(word);
        return value;
      }
    refuse(what_, "malformed .npy header (fortran_order is not True or False)");
  }
  std::vector<int64_t> tuple() {
    expect('(');
    std::vector<int64_t> dims;
    while (true) {
      skip();
      if (peek() == ')') break;
      std::size_t start = i_;
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++i_;
      if (i_ == start || i_ - start > 18) refuse(what_, "malformed .npy header (bad shape)");
      dims.push_back(std::stoll(s_.substr(start, i_ - start)));
      skip();
      if (peek() == ',') ++i_;
    }
    ++i_;
    return dims;
  }
  void set_dtype(const std::string& descr, Header& h) {
    std::string d = descr;
    char order = '=';
    if (!d.empty() && std::strchr("<>|=", d[0])) order = d[0], d = d.substr(1);
    char kind = d.empty() ? '?' : d[0];
    int size = 0;
    if (d.size() >= 2 && std::all_of(d.begin() + 1, d.end(), [](char c) { return std::isdigit((unsigned char)c); }))
      size = std::stoi(d.substr(1));
    static const std::vector<std::tuple<char, int, DType>> kTypes = {
        {'b', 1, DType::u8},  {'u', 1, DType::u8},  {'u', 2, DType::u16}, {'u', 4, DType::u32},
        {'u', 8, DType::u64}, {'i', 1, DType::i8},  {'i', 2, DType::i16}, {'i', 4, DType::i32},
        {'i', 8, DType::i64}, {'f', 2, DType::f16}, {'f', 4, DType::f32}, {'f', 8, DType::f64}};
    for (auto [k, n, t] : kTypes)
      if (k == kind && n == size) {
        h.dtype = t;
        h.byteswap = order == '>' && size > 1;
        return;
      }
    if (kind == 'O') refuse(what_, "an object array (Python objects, needs pickle) is not supported; save numbers");
    if (kind == 'U' || kind == 'S')
      refuse(what_, "a string array (dtype '" + descr + "') is not supported as an array input");
    refuse(what_, "dtype '" + descr + "' is not supported (integers, floats and bool are)");
  }

  std::string s_, what_;
  std::size_t i_ = 0;
};

uint32_t little(const char* p, int n) {
  uint32_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// Reverses the bytes of each `elem`-byte element of `n` bytes at `p`.
void swap_elements(char* p, std::size_t n, std::size_t elem) {
  for (std::size_t i = 0; i + elem <= n; i += elem) std::reverse(p + i, p + i + elem);
}

// Bytes before the dict and the dict's length, from the first 12 (or `size`) bytes.
std::pair<std::size_t, std::size_t> preamble(const char* b, std::size_t size, const std::string& what) {
  if (size < 10 || std::memcmp(b, "\x93NUMPY", 6) != 0) refuse(what, "not a .npy file (no NumPy magic)");
  int major = static_cast<unsigned char>(b[6]);
  if (major == 1) return {10, little(b + 8, 2)};
  if (major != 2 && major != 3)
    refuse(what, "unsupported .npy format version " + std::to_string(major) + "." +
                     std::to_string(static_cast<unsigned char>(b[7])));
  if (size < 12) refuse(what, "truncated .npy header");
  return {12, little(b + 8, 4)};
}

Header finish(Header h, std::size_t data_offset, const std::string& what) {
  h.data_offset = data_offset;
  uint64_t n = dtype_size(h.dtype);
  for (auto d : h.shape)
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) refuse(what, "the .npy shape is too large");
  h.data_bytes = n;
  return h;
}

// A .npy file, mapped read-only.
class NpyColumn : public source::Column {
 public:
  explicit NpyColumn(const std::string& path) : Column(source::Kind::npy, path) {
    int fd = files::open_input(path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      throw Error(Exit::io, path, errno_text(err));
    }
    size_ = static_cast<std::size_t>(st.st_size);
    void* map = size_ > 0 ? ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
    int err = errno;
    ::close(fd);
    if (map == MAP_FAILED) throw Error(Exit::io, path, "cannot map: " + errno_text(err));
    map_ = map;
    try {
      h_ = parse_header(static_cast<const char*>(map_), size_, path);
      if (size_ - h_.data_offset < h_.data_bytes)
        refuse(path, "truncated: the header promises " + std::to_string(h_.data_bytes) +
                         " bytes of data, the file holds " + std::to_string(size_ - h_.data_offset));
    } catch (...) {
      if (map_) ::munmap(map_, size_);
      throw;
    }
    info_.name = source::default_column(path);
    info_.shape = h_.shape;
    info_.dtype = h_.dtype;
  }
  ~NpyColumn() override {
    if (map_) ::munmap(map_, size_);
  }

  void read(int64_t start, int64_t count, void* out) const override {
    check_range(start, count);
    const std::size_t row = info_.row_bytes();
    const char* src = static_cast<const char*>(map_) + h_.data_offset + static_cast<std::size_t>(start) * row;
    std::memcpy(out, src, static_cast<std::size_t>(count) * row);
    if (h_.byteswap)
      swap_elements(static_cast<char*>(out), static_cast<std::size_t>(count) * row, dtype_size(h_.dtype));
  }

  void digest_rows(int64_t a, int64_t b, ContentHash& h, Digest128* rows) const override {
    digest_numbers(a, b, h, rows);
  }

 private:
  void* map_ = nullptr;
  std::size_t size_ = 0;
  Header h_;
};

std::string zip_message(int code) {
  zip_error_t e;
  zip_error_init_with_code(&e, code);
  std::string msg = zip_error_strerror(&e);
  zip_error_fini(&e);
  return msg;
}

// A member of a .npz archive: a stored member is read in place (seeks within the archive, one
// reader at a time); a compressed one is inflated into memory when opened.
class NpzColumn : public source::Column {
 public:
  NpzColumn(const std::string& path, const std::string& name) : Column(source::Kind::npz, path) {
    ::close(files::open_input(path));  // a regular file: libzip would block on a FIFO
    int code = 0;
    za_.reset(zip_open(path.c_str(), ZIP_RDONLY, &code));
    if (!za_) refuse(path, "not a .npz archive (" + zip_message(code) + ")");
    zip_int64_t idx = locate(name);
    zip_stat_t zs;
    zip_stat_init(&zs);
    if (zip_stat_index(za_.get(), static_cast<zip_uint64_t>(idx), 0, &zs) != 0 || !(zs.valid & ZIP_STAT_SIZE))
      refuse(path, "cannot read member '" + name + "': " + zip_strerror(za_.get()));
    zf_.reset(zip_fopen_index(za_.get(), static_cast<zip_uint64_t>(idx), 0));
    if (!zf_) refuse(path, "cannot read member '" + name + "': " + zip_strerror(za_.get()));
    const std::string what = path + ": " + name;
    stored_ = (zs.valid & ZIP_STAT_COMP_METHOD) && zs.comp_method == ZIP_CM_STORE;
    std::vector<char> head = read_exactly(std::min<zip_uint64_t>(zs.size, 12), what);
    auto [pre, dict] = preamble(head.data(), head.size(), what);
    if (zs.size < pre + dict) refuse(what, "truncated .npy header");
    std::vector<char> rest = read_exactly(pre + dict - head.size(), what);
    head.insert(head.end(), rest.begin(), rest.end());
    h_ = parse_header(head.data(), head.size(), what);
    if (zs.size - h_.data_offset < h_.data_bytes) refuse(what, "truncated member");
    if (!stored_) memory_ = read_exactly(h_.data_bytes, what);  // inflated once
    check_crc(zs, head, what);
    info_.name = name;
    info_.shape = h_.shape;
    info_.dtype = h_.dtype;
  }

  void digest_rows(int64_t a, int64_t b, ContentHash& h, Digest128* rows) const override {
    digest_numbers(a, b, h, rows);
  }

  void read(int64_t start, int64_t count, void* out) const override {
    check_range(start, count);
    const std::size_t row = info_.row_bytes(), n = static_cast<std::size_t>(count) * row;
    const std::size_t at = static_cast<std::size_t>(start) * row;
    if (!stored_) {
      std::memcpy(out, memory_.data() + at, n);
    } else {
      std::lock_guard<std::mutex> lk(mu_);
      if (zip_fseek(zf_.get(), static_cast<zip_int64_t>(h_.data_offset + at), SEEK_SET) != 0 ||
          zip_fread(zf_.get(), out, n) != static_cast<zip_int64_t>(n))
        throw Error(Exit::io, path(), "cannot read member '" + info_.name + "': " + zip_file_strerror(zf_.get()));
    }
    if (h_.byteswap) swap_elements(static_cast<char*>(out), n, dtype_size(h_.dtype));
  }

 private:
  zip_int64_t locate(const std::string& name) {
    for (const std::string& candidate : {name, name + ".npy"}) {
      zip_int64_t i = zip_name_locate(za_.get(), candidate.c_str(), 0);
      if (i >= 0) return i;
    }
    std::string members;
    zip_int64_t n = zip_get_num_entries(za_.get(), 0);
    for (zip_int64_t i = 0; i < n; ++i) {
      std::string m = zip_get_name(za_.get(), static_cast<zip_uint64_t>(i), 0);
      if (m.size() > 4 && m.compare(m.size() - 4, 4, ".npy") == 0) m.resize(m.size() - 4);
      members += (members.empty() ? "" : ", ") + m;
    }
    refuse(path(), "no member '" + name + "' (members: " + (members.empty() ? "none" : members) + ")");
  }

  // The member's bytes against the CRC-32 its zip entry records, checked once when opened (a
  // stored member is read through to its end): a flipped byte is refused, not trained on.
  void check_crc(const zip_stat_t& zs, const std::vector<char>& head, const std::string& what) {
    if (!(zs.valid & ZIP_STAT_CRC)) return;
    auto bytes = [](const std::vector<char>& v) { return reinterpret_cast<const Bytef*>(v.data()); };
    uLong crc = crc32_z(crc32(0L, Z_NULL, 0), bytes(head), head.size());
    if (!memory_.empty()) crc = crc32_z(crc, bytes(memory_), memory_.size());  // a null buffer restarts the CRC
    std::vector<char> buf(std::size_t(1) << 20);
    for (;;) {
      zip_int64_t n = zip_fread(zf_.get(), buf.data(), buf.size());
      if (n < 0) refuse(what, std::string("cannot read: ") + zip_file_strerror(zf_.get()));
      if (n == 0) break;
      crc = crc32_z(crc, bytes(buf), static_cast<std::size_t>(n));
    }
    if (crc != zs.crc) refuse(what, "damaged member: its bytes do not match the CRC-32 the archive records");
  }

  std::vector<char> read_exactly(std::size_t n, const std::string& what) {
    std::vector<char> buf(n);
    if (n > 0 && zip_fread(zf_.get(), buf.data(), n) != static_cast<zip_int64_t>(n))
      refuse(what, std::string("cannot read: ") + zip_file_strerror(zf_.get()));
    return buf;
  }

  struct ArchiveCloser {
    void operator()(zip_t* z) const { zip_discard(z); }
  };
  struct FileCloser {
    void operator()(zip_file_t* f) const { zip_fclose(f); }
  };
  std::unique_ptr<zip_t, ArchiveCloser> za_;
  std::unique_ptr<zip_file_t, FileCloser> zf_;
  bool stored_ = false;
  Header h_;
  std::vector<char> memory_;
  mutable std::mutex mu_;
};

}  // namespace

Header parse_header(const char* bytes, std::size_t size, const std::string& what) {
  auto [pre, dict] = preamble(bytes, size, what);
  if (size < pre + dict) refuse(what, "truncated .npy header");
  return finish(DictParser(std::string(bytes + pre, dict), what).parse(), pre + dict, what);
}

std::string make_header(DType dtype, const std::vector<int64_t>& shape) {
  static const std::vector<std::pair<DType, const char*>> kDescr = {
      {DType::u8, "|u1"},  {DType::i8, "|i1"},  {DType::u16, "<u2"}, {DType::i16, "<i2"},
      {DType::u32, "<u4"}, {DType::i32, "<i4"}, {DType::u64, "<u8"}, {DType::i64, "<i8"},
      {DType::f16, "<f2"}, {DType::f32, "<f4"}, {DType::f64, "<f8"}};
  auto it = std::find_if(kDescr.begin(), kDescr.end(), [&](const auto& p) { return p.first == dtype; });
  if (it == kDescr.end()) throw Error(Exit::internal, "", std::string("no .npy dtype for ") + dtype_name(dtype));
  std::string dims;
  for (auto d : shape) dims += std::to_string(d) + ", ";
  if (!dims.empty()) dims.pop_back();     // "(3,)" for one dimension,
  if (shape.size() > 1) dims.pop_back();  // "(3, 4)" for more
  std::string dict = std::string("{'descr': '") + it->second + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  std::size_t total = 10 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

std::unique_ptr<source::Column> open_npy(const std::string& path) { return std::make_unique<NpyColumn>(path); }

std::unique_ptr<source::Column> open_npz_member(const std::string& path, const std::string& name) {
  return std::make_unique<NpzColumn>(path, name);
}

}  // namespace traincache::io::npy
