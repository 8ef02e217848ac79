#include "traincache/io/npy.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "catch.h"
#include "test_util.h"
#include "traincache/io/h5.h"
#include "traincache/io/source.h"

using namespace traincache;

namespace {

// A version 1.0 header around `dict`, as NumPy lays it out.
std::string with_dict(std::string dict) {
  dict += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

std::string refusal(const std::string& dict) {
  std::string h = with_dict(dict);
  return test::message_of([&] { io::npy::parse_header(h.data(), h.size(), "x.npy"); });
}

void write(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

}  // namespace

CATCH_TEST_CASE("npy: headers we write parse back, data 64-byte aligned", "[npy]") {
  for (auto [dtype, shape] :
       {std::pair{DType::u8, std::vector<int64_t>{7}}, std::pair{DType::f32, std::vector<int64_t>{60000, 28, 28}},
        std::pair{DType::i64, std::vector<int64_t>{0, 3}}, std::pair{DType::f16, std::vector<int64_t>{2, 1, 1, 5}}}) {
    std::string h = io::npy::make_header(dtype, shape);
    auto p = io::npy::parse_header(h.data(), h.size(), "x.npy");
    CATCH_CHECK(p.dtype == dtype);
    CATCH_CHECK(p.shape == shape);
    CATCH_CHECK(!p.byteswap);
    CATCH_CHECK(p.data_offset == h.size());
    CATCH_CHECK(p.data_offset % 64 == 0);
    int64_t n = 1;
    for (auto d : shape) n *= d;
    CATCH_CHECK(p.data_bytes == static_cast<std::size_t>(n) * dtype_size(dtype));
  }
  CATCH_CHECK(io::npy::make_header(DType::u8, {7}).find("'shape': (7,)") != std::string::npos);
}

CATCH_TEST_CASE("npy: NumPy's spellings of every accepted dtype", "[npy]") {
  const std::vector<std::tuple<std::string, DType, bool>> cases = {
      {"|u1", DType::u8, false}, {"|b1", DType::u8, false},  {"|i1", DType::i8, false},  {"<u2", DType::u16, false},
      {">i2", DType::i16, true}, {"<u4", DType::u32, false}, {"<i4", DType::i32, false}, {"<u8", DType::u64, false},
      {">i8", DType::i64, true}, {"<f2", DType::f16, false}, {"=f4", DType::f32, false}, {">f8", DType::f64, true}};
  for (const auto& [descr, dtype, swap] : cases) {
    std::string h = with_dict("{'descr': '" + descr + "', 'fortran_order': False, 'shape': (2, 3), }");
    auto p = io::npy::parse_header(h.data(), h.size(), "x.npy");
    CATCH_CHECK(p.dtype == dtype);
    CATCH_CHECK(p.byteswap == swap);
    CATCH_CHECK(p.shape == std::vector<int64_t>{2, 3});
  }
  // Version 2.0: a four-byte header length.
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }\n";
  std::string v2 = std::string("\x93NUMPY\x02\x00", 8) + static_cast<char>(dict.size()) + std::string(3, '\0') + dict;
  auto p = io::npy::parse_header(v2.data(), v2.size(), "x.npy");
  CATCH_CHECK(p.data_offset == 12 + dict.size());
  CATCH_CHECK(p.shape == std::vector<int64_t>{4});
}

CATCH_TEST_CASE("npy: what the tools cannot read is refused with the reason", "[npy]") {
  CATCH_CHECK(refusal("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }") ==
              "x.npy: a Fortran-order array is not supported; save it in C order (numpy.ascontiguousarray)");
  CATCH_CHECK(refusal("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }") ==
              "x.npy: an object array (Python objects, needs pickle) is not supported; save numbers");
  CATCH_CHECK(refusal("{'descr': '<U10', 'fortran_order': False, 'shape': (2,), }") ==
              "x.npy: a string array (dtype '<U10') is not supported as an array input");
  CATCH_CHECK(refusal("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }") ==
              "x.npy: a structured dtype (record array) is not supported; save a numeric array");
  CATCH_CHECK(refusal("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }") ==
              "x.npy: dtype '<c8' is not supported (integers, floats and bool are)");
  CATCH_CHECK(refusal("{'descr': '<f4', 'fortran_order': False, 'shape': (), }") ==
              "x.npy: a 0-dimensional array has no rows");
  CATCH_CHECK(refusal("{'descr': '<f4', 'shape': (2,), }") ==
              "x.npy: the .npy header lacks descr, fortran_order or shape");
  // A one-dimensional array is the same in either order: accepted.
  CATCH_CHECK(refusal("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }").empty());

  std::string h = io::npy::make_header(DType::f32, {2});
  CATCH_CHECK(test::message_of([&] { io::npy::parse_header(h.data(), 20, "x.npy"); }) ==
              "x.npy: truncated .npy header");
  CATCH_CHECK(test::message_of([&] { io::npy::parse_header("PK\x03\x04zipzipzip", 12, "x.npy"); }) ==
              "x.npy: not a .npy file (no NumPy magic)");
  std::string v9 = h;
  v9[6] = 9;
  CATCH_CHECK(test::message_of([&] { io::npy::parse_header(v9.data(), v9.size(), "x.npy"); }) ==
              "x.npy: unsupported .npy format version 9.0");
}

CATCH_TEST_CASE("npy: a .npy column reads rows in place, swapping big-endian elements", "[npy]") {
  std::string bytes = io::npy::make_header(DType::i32, {3, 2});
  for (int32_t v : {1, 2, 3, 4, 5, 6}) bytes.append(reinterpret_cast<const char*>(&v), 4);
  write("rows.npy", bytes);
  auto col = io::source::open_column("rows.npy", "");
  CATCH_CHECK(col->kind() == io::source::Kind::npy);
  CATCH_CHECK(col->info().name == "rows");
  CATCH_CHECK(col->info().shape == std::vector<int64_t>{3, 2});
  int32_t out[4];
  col->read(1, 2, out);
  CATCH_CHECK(std::vector<int32_t>(out, out + 4) == std::vector<int32_t>{3, 4, 5, 6});
  // A list of rows: any order, repeats, runs read together.
  int32_t picked[10];
  col->read_rows({2, 0, 1, 2, 2}, picked);
  CATCH_CHECK(std::vector<int32_t>(picked, picked + 10) == std::vector<int32_t>{5, 6, 1, 2, 3, 4, 5, 6, 5, 6});
  CATCH_CHECK(test::code_of([&] { col->read_rows({1, 3}, picked); }) == Exit::internal);

  std::string be = with_dict("{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }");
  for (unsigned char c : {0, 0, 1, 2, 0xff, 0xff, 0xff, 0xfe}) be += static_cast<char>(c);
  write("be.npy", be);
  auto bcol = io::source::open_column("be.npy", "be");
  int32_t two[2];
  bcol->read(0, 2, two);
  CATCH_CHECK(two[0] == 258);
  CATCH_CHECK(two[1] == -2);

  // The digest follows the values, not the container: the same values little-endian digest alike.
  std::string le = io::npy::make_header(DType::i32, {2});
  for (int32_t v : {258, -2}) le.append(reinterpret_cast<const char*>(&v), 4);
  std::filesystem::create_directories("le");
  write("le/be.npy", le);
  ContentHash a, b;
  bcol->digest(0, 2, a);
  io::source::open_column("le/be.npy", "")->digest(0, 2, b);
  CATCH_CHECK(a.hex_digest() == b.hex_digest());

  // Row digests beside the digest (read twice here): each row's bytes, and digest() unchanged.
  std::vector<Digest128> rows(3);
  ContentHash whole, alone;
  col->digest_rows(0, 3, whole, rows.data());
  col->digest(0, 3, alone);
  CATCH_CHECK(whole.hex_digest() == alone.hex_digest());
  for (int r = 0; r < 3; ++r) {
    ContentHash own;
    own.update(bytes.data() + bytes.size() - 24 + 8 * r, 8);
    CATCH_CHECK(rows[static_cast<std::size_t>(r)] == own.digest());
  }

  write("short.npy", bytes.substr(0, bytes.size() - 3));
  CATCH_CHECK(test::message_of([] { io::source::open_column("short.npy", ""); }) ==
              "short.npy: truncated: the header promises 24 bytes of data, the file holds 21");
  CATCH_CHECK(test::code_of([] { io::source::open_column("missing.npy", ""); }) == Exit::no_input);
  CATCH_CHECK(test::message_of([] { io::source::open_column("rows.npy", "other"); }) ==
              "rows.npy: a .npy file holds one array; 'other' names no other");
}

CATCH_TEST_CASE("source: kinds are chosen by what the path is", "[npy]") {
  CATCH_CHECK(io::source::kind_of("shm:emb") == io::source::Kind::shm);
  CATCH_CHECK(io::source::kind_of("a/b.NPY") == io::source::Kind::npy);
  CATCH_CHECK(io::source::kind_of("b.npz") == io::source::Kind::npz);
  CATCH_CHECK(io::source::kind_of("b.h5") == io::source::Kind::hdf5);
  CATCH_CHECK(io::source::names_own_file("labels.npy"));
  CATCH_CHECK(!io::source::names_own_file("labels"));
  CATCH_CHECK(io::source::default_column("dir/images.npy") == "images");
  CATCH_CHECK(io::source::default_column("data.h5").empty());
}

CATCH_TEST_CASE("source: an input resolved once has its kind and the columns it gives unasked", "[npy]") {
  const io::source::Resolved npy = io::source::resolve("dir/images.npy");
  CATCH_CHECK(npy.path == "dir/images.npy");
  CATCH_CHECK(npy.kind == io::source::Kind::npy);
  CATCH_CHECK(npy.column == "images");
  CATCH_CHECK((npy.labels.empty() && npy.keys.empty()));
  const io::source::Resolved tar = io::source::resolve("shards/{a,b}.tar");
  CATCH_CHECK(tar.kind == io::source::Kind::tar);
  CATCH_CHECK((tar.column.empty() && tar.labels.empty() && tar.keys == "__key__"));
  const io::source::Resolved slab = io::source::resolve("shm:emb");
  CATCH_CHECK((slab.kind == io::source::Kind::shm && slab.column == "shm:emb"));
  // A directory is an image folder: its images, labels and paths.
  const io::source::Resolved folder = io::source::resolve(".");
  CATCH_CHECK(folder.kind == io::source::Kind::image_folder);
  CATCH_CHECK((folder.column == "image" && folder.labels == "label" && folder.keys == "path"));
  CATCH_CHECK(io::source::resolve("data.h5").kind == io::source::Kind::hdf5);
}

// Writes dataset `name` [10, 3] holding 0..29 as `type`: chunks of 4 rows (0: contiguous),
// deflated when `deflate`.
void write_rows_dataset(hid_t f, const char* name, hid_t type, hsize_t chunk_rows, bool deflate) {
  hsize_t dims[2] = {10, 3}, chunk[2] = {chunk_rows, 3};
  hid_t space = H5Screate_simple(2, dims, nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (chunk_rows) H5Pset_chunk(dcpl, 2, chunk);
  if (deflate) H5Pset_deflate(dcpl, 1);
  hid_t d = H5Dcreate2(f, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  std::vector<int32_t> v(30);
  for (int i = 0; i < 30; ++i) v[static_cast<std::size_t>(i)] = i;
  H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(space);
}

CATCH_TEST_CASE("source: an HDF5 column reads a list of rows directly or in one selection", "[npy]") {
  hid_t f = H5Fcreate("rows.h5", H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  write_rows_dataset(f, "chunked", H5T_NATIVE_INT32, 4, false);  // read directly from the file
  write_rows_dataset(f, "contiguous", H5T_NATIVE_INT32, 0, false);
  write_rows_dataset(f, "deflated", H5T_NATIVE_INT32, 4, true);  // through HDF5: one selection
  write_rows_dataset(f, "big_endian", H5T_STD_I32BE, 4, false);
  H5Fclose(f);
  {  // Which datasets are read directly: stored as read, unfiltered, read-only.
    auto file = io::h5::open_file("rows.h5");
    auto direct = [&](const char* name, hid_t fh) {
      auto d = io::h5::open_dataset(fh, "rows.h5", name);
      return io::h5::RowMap::of(fh, d.get(), H5T_NATIVE_INT32).has_value();
    };
    CATCH_CHECK(direct("chunked", file.get()));
    CATCH_CHECK(direct("contiguous", file.get()));
    CATCH_CHECK(!direct("deflated", file.get()));
    CATCH_CHECK(!direct("big_endian", file.get()));
    file.reset();
    auto writable = io::h5::open_file("rows.h5", true);
    CATCH_CHECK(!direct("chunked", writable.get()));
  }
  for (const char* name : {"chunked", "contiguous", "deflated", "big_endian"}) {
    CATCH_INFO(name);
    auto col = io::source::open_column("rows.h5", name);
    auto rows_of = [&](const std::vector<int64_t>& rows) {
      std::vector<int32_t> out(rows.size() * 3);
      col->read_rows(rows, out.data());
      std::vector<int32_t> first;  // each row's first element: 3 * row
      for (std::size_t i = 0; i < rows.size(); ++i) {
        CATCH_CHECK(out[i * 3 + 2] == out[i * 3] + 2);
        first.push_back(out[i * 3]);
      }
      return first;
    };
    // Ascending runs spanning chunk boundaries (3..4, 7..9), straight into the output.
    CATCH_CHECK(rows_of({0, 3, 4, 6, 7, 8, 9}) == std::vector<int32_t>{0, 9, 12, 18, 21, 24, 27});
    // Any order with repeats: read once each, then placed.
    CATCH_CHECK(rows_of({9, 0, 5, 5, 1, 9}) == std::vector<int32_t>{27, 0, 15, 15, 3, 27});
    CATCH_CHECK(rows_of({}).empty());
    // Both digests from one read: digest()'s, and each row's as feed_rows takes it alone.
    std::vector<Digest128> rows(8);
    ContentHash whole, alone;
    col->digest_rows(1, 9, whole, rows.data());
    col->digest(1, 9, alone);
    CATCH_CHECK(whole.hex_digest() == alone.hex_digest());
    std::vector<ContentHash> each(8);
    col->feed_rows(1, 9, each.data());
    for (std::size_t r = 0; r < 8; ++r) {
      CATCH_CHECK(rows[r] == each[r].digest());
      ContentHash own;  // row 1 + r: 3 * (1 + r) .. + 2 in the machine's order
      const int32_t v[3] = {3 * static_cast<int32_t>(r + 1), 3 * static_cast<int32_t>(r + 1) + 1,
                            3 * static_cast<int32_t>(r + 1) + 2};
      own.update(v, sizeof v);
      CATCH_CHECK(rows[r] == own.digest());
    }
    int32_t out[6];
    CATCH_CHECK(test::code_of([&] { col->read_rows({2, 10}, out); }) == Exit::internal);
    CATCH_CHECK(test::code_of([&] { col->read_rows({-1, 2}, out); }) == Exit::internal);
  }
  // A file cut short under an open column: an I/O error, not zeros.
  auto col = io::source::open_column("rows.h5", "chunked");
  int32_t out[6];
  col->read_rows({0, 9}, out);
  std::filesystem::resize_file("rows.h5", 1024);
  CATCH_CHECK(test::message_of([&] { col->read_rows({0, 9}, out); }) == "rows.h5: cannot read rows: file truncated");
}
