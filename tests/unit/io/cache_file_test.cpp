#include "traincache/io/cache_file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "catch.h"
#include "traincache/base/error.h"
#include "traincache/base/interrupt.h"
#include "traincache/io/cache_export.h"
#include "traincache/io/h5.h"
#include "traincache/io/row_digest.h"

using namespace traincache;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_raw(const std::string& path, const void* data, std::size_t n) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(data, 1, n, f);
  std::fclose(f);
}

// An input file with labels (int64) and keys (int64) for 5 rows.
void write_input(const std::string& path) {
  io::h5::Id f = io::h5::create_file(path);
  for (const char* name : {"labels", "keys"}) {
    hsize_t dims[1] = {5};
    io::h5::Id space(H5Screate_simple(1, dims, nullptr));
    io::h5::Id d(H5Dcreate2(f.get(), name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    int64_t labels[5] = {1, 0, 1, 1, 2}, keys[5] = {100, 101, 102, 103, 104};
    H5Dwrite(d.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, std::string(name) == "labels" ? labels : keys);
  }
}

// A 4-row cache from input rows 1..5 with a [4,3] float32 embedding whose row r is (r, 0, 0)
// except row 2 = (3, 4, 0): norms 0, 1, 5, 3.
io::cache::AssemblySpec small_spec(const std::string& dir, const std::string& out) {
  std::vector<float> emb = {0, 0, 0, 1, 0, 0, 3, 4, 0, 3, 0, 0};
  write_raw(dir + "emb.raw", emb.data(), emb.size() * sizeof(float));
  write_input(dir + "input.h5");
  io::cache::AssemblySpec spec;
  spec.out_path = out;
  spec.rows = 4;
  spec.row_start = 1;
  spec.labels = {{"labels", "labels", io::source::open_column(dir + "input.h5", "labels")},
                 {"id", "keys", io::source::open_column(dir + "input.h5", "keys")}};
  spec.keys = io::source::open_column(dir + "input.h5", "keys");
  spec.root_attrs = {{"fingerprint", std::string("f00d")}, {"input_scale", 0.5}};
  io::cache::EmbeddingSource e;
  e.name = "enc";
  e.raw_path = dir + "emb.raw";
  e.row_shape = {3};
  e.attrs = {{"inference", std::string("plain")}};
  spec.embeddings.push_back(e);
  return spec;
}

}  // namespace

CATCH_TEST_CASE("cache file: assemble writes a complete cache that read_info describes", "[cache]") {
  auto spec = small_spec("", "cache_test_a.h5");
  io::cache::assemble(spec);
  auto info = io::cache::read_info("cache_test_a.h5");
  CATCH_CHECK(info.format_version == io::cache::kFormatVersion);
  CATCH_CHECK(info.complete);
  CATCH_CHECK(info.rows == 4);
  CATCH_CHECK(info.row_start == 1);
  CATCH_CHECK(info.fingerprint == "f00d");
  CATCH_CHECK(info.input_scale == 0.5);
  CATCH_REQUIRE(info.embeddings.size() == 1);
  CATCH_CHECK(info.embeddings[0].shape == std::vector<int64_t>{4, 3});
  CATCH_CHECK(info.embeddings[0].dtype == DType::f32);
  CATCH_CHECK(info.embeddings[0].bytes == 48);
  CATCH_CHECK(info.embeddings[0].inference == "plain");
  CATCH_REQUIRE(info.labels);
  // Labels are the input's rows 1..5: {0, 1, 1, 2}.
  CATCH_CHECK(info.labels->counts == std::map<int64_t, int64_t>{{0, 1}, {1, 2}, {2, 1}});
  CATCH_CHECK(info.labels->name == "labels");
  CATCH_CHECK(info.labels->dataset == "/labels");
  // The second label column: /label_columns/id, the input's keys 101..104.
  CATCH_REQUIRE(info.more_labels.size() == 1);
  const io::cache::LabelInfo id = io::cache::label_column(info, "id", "--labels");
  CATCH_CHECK(id.dataset == "/label_columns/id");
  CATCH_CHECK(id.source == "keys");
  CATCH_CHECK(id.counts == std::map<int64_t, int64_t>{{101, 1}, {102, 1}, {103, 1}, {104, 1}});
  CATCH_CHECK(&io::cache::label_column(info, "", "--labels") == &*info.labels);
  CATCH_CHECK_THROWS_WITH(io::cache::label_column(info, "size", "--labels"),
                          "--labels: the cache has no label column 'size' (it has labels, id)");
  CATCH_CHECK(io::cache::check("cache_test_a.h5").ok());
  CATCH_CHECK_FALSE(io::h5::exists(io::h5::open_file("cache_test_a.h5").get(), "/nothing"));
}

CATCH_TEST_CASE("cache file: an update's rows come from the old cache and the raw file, in the new order", "[cache]") {
  io::cache::assemble(small_spec("", "cache_test_u_old.h5"));  // rows (0,0,0) (1,0,0) (3,4,0) (3,0,0)
  auto spec = small_spec("", "cache_test_u.h5");
  std::vector<float> encoded = {7, 7, 7, 8, 8, 8};  // the two rows the update encoded
  write_raw("emb_u.raw", encoded.data(), encoded.size() * sizeof(float));
  spec.embeddings[0].raw_path = "emb_u.raw";
  spec.embeddings[0].kept_rows = {2, -1, 0, -1};
  spec.embeddings[0].kept = io::source::open_column("cache_test_u_old.h5", "embeddings/enc");
  io::cache::assemble(spec);
  CATCH_CHECK(io::cache::read_embedding_rows("cache_test_u.h5", "enc", {0, 1, 2, 3}) ==
              std::vector<float>{3, 4, 0, 7, 7, 7, 0, 0, 0, 8, 8, 8});
  // Every row copied: no raw file is read.
  spec.embeddings[0].raw_path = "no_such.raw";
  spec.embeddings[0].kept_rows = {3, 3, 1, 0};
  spec.out_path = "cache_test_u2.h5";
  io::cache::assemble(spec);
  CATCH_CHECK(io::cache::read_embedding_rows("cache_test_u2.h5", "enc", {0, 1, 2, 3}) ==
              std::vector<float>{3, 0, 0, 3, 0, 0, 1, 0, 0, 0, 0, 0});
  // Rows that do not fit the cache being written are an internal error, not a torn file.
  spec.embeddings[0].kept_rows = {0, 1};
  spec.out_path = "cache_test_u3.h5";
  CATCH_CHECK_THROWS_AS(io::cache::assemble(spec), Error);
}

CATCH_TEST_CASE("source: a gathered column reads its base's rows in its own order", "[cache]") {
  write_input("gather_input.h5");  // keys 100..104
  auto keys = io::source::gathered(io::source::open_column("gather_input.h5", "keys"), {4, 0, 1, 3});
  CATCH_CHECK(keys->info().rows() == 4);
  std::vector<int64_t> got(3);
  keys->read(1, 3, got.data());  // base rows 0, 1 (one run) and 3
  CATCH_CHECK(got == std::vector<int64_t>{100, 101, 103});
  std::vector<int64_t> picked(2);
  keys->read_rows({3, 0}, picked.data());
  CATCH_CHECK(picked == std::vector<int64_t>{103, 104});
  CATCH_CHECK_THROWS_AS(keys->read(3, 2, got.data()), Error);
  CATCH_CHECK_THROWS_AS(io::source::gathered(io::source::open_column("gather_input.h5", "keys"), {5}), Error);
}

CATCH_TEST_CASE("source: digesting an input stops at an interrupt (SIGINT was ignored there)", "[cache]") {
  write_input("interrupt_input.h5");
  auto keys = io::source::open_column("interrupt_input.h5", "keys");
  ContentHash h;
  keys->digest(0, 5, h);  // no interrupt: it runs
  request_interrupt();
  int code = 0;
  try {
    keys->digest(0, 5, h);
  } catch (const Error& e) {
    code = static_cast<int>(e.code());
  }
  clear_interrupt();
  CATCH_CHECK(code == static_cast<int>(Exit::interrupted));
}

CATCH_TEST_CASE("cache file: the same spec gives byte-identical files", "[cache]") {
  io::cache::assemble(small_spec("", "cache_test_b1.h5"));
  io::cache::assemble(small_spec("", "cache_test_b2.h5"));
  CATCH_CHECK(slurp("cache_test_b1.h5") == slurp("cache_test_b2.h5"));
  CATCH_CHECK_FALSE(slurp("cache_test_b1.h5").empty());
}

CATCH_TEST_CASE("cache file: stats are the row-norm moments", "[cache]") {
  io::cache::assemble(small_spec("", "cache_test_c.h5"));
  auto st = io::cache::compute_stats("cache_test_c.h5");
  CATCH_REQUIRE(st.size() == 1);
  // norms 0, 1, 5, 3: mean 2.25, population std sqrt(35/4 - 2.25^2)
  CATCH_CHECK(st[0].norm_mean == Approx(2.25).epsilon(1e-12));
  CATCH_CHECK(st[0].norm_std == Approx(std::sqrt(35.0 / 4 - 2.25 * 2.25)).epsilon(1e-12));
  CATCH_CHECK(st[0].norm_min == 0);
  CATCH_CHECK(st[0].norm_max == 5);
  CATCH_CHECK(st[0].nan_count == 0);
}

CATCH_TEST_CASE("cache file: head rows carry keys, labels and values", "[cache]") {
  io::cache::assemble(small_spec("", "cache_test_d.h5"));
  auto rows = io::cache::read_head("cache_test_d.h5", 10);
  CATCH_REQUIRE(rows.size() == 4);
  CATCH_CHECK(rows[2].key == "103");
  CATCH_CHECK(rows[2].label.value() == "1");
  CATCH_CHECK(rows[2].embeddings.at("enc") == std::vector<float>{3, 4, 0});
  auto picked = io::cache::read_embedding_rows("cache_test_d.h5", "enc", {3, 0});
  CATCH_CHECK(picked == std::vector<float>{3, 0, 0, 0, 0, 0});
}

CATCH_TEST_CASE("cache file: check reports incomplete and non-finite caches", "[cache]") {
  io::cache::assemble(small_spec("", "cache_test_e.h5"));
  {
    io::h5::Id f = io::h5::open_file("cache_test_e.h5", true);
    io::h5::write_attr(f.get(), "complete", int64_t{0});
  }
  auto rep = io::cache::check("cache_test_e.h5");
  CATCH_REQUIRE(rep.problems.size() == 1);
  CATCH_CHECK(rep.problems[0] == "incomplete (complete attribute is not 1)");

  auto spec = small_spec("", "cache_test_f.h5");
  std::vector<float> emb = {0, NAN, 0, 1, 0, 0, INFINITY, 4, 0, 3, 0, 0};
  write_raw("emb.raw", emb.data(), emb.size() * sizeof(float));
  io::cache::assemble(spec);
  rep = io::cache::check("cache_test_f.h5");
  CATCH_REQUIRE(rep.problems.size() == 1);
  CATCH_CHECK(rep.problems[0] == "/embeddings/enc holds 1 NaN and 1 Inf values");
}

CATCH_TEST_CASE("cache file: float16 rows are stored as IEEE half and read back as float", "[cache]") {
  auto spec = small_spec("", "cache_test_g.h5");
  uint16_t half[12] = {0x3C00, 0xC000, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x3800};  // 1, -2, ..., 0.5
  write_raw("half.raw", half, sizeof half);
  spec.embeddings[0].raw_path = "half.raw";
  spec.embeddings[0].dtype = DType::f16;
  io::cache::assemble(spec);
  auto info = io::cache::read_info("cache_test_g.h5");
  CATCH_CHECK(info.embeddings[0].dtype == DType::f16);
  auto v = io::cache::read_embedding_rows("cache_test_g.h5", "enc", {0, 3});
  CATCH_CHECK(v == std::vector<float>{1, -2, 0, 0, 0, 0.5f});
}

CATCH_TEST_CASE("cache file: foreign and missing files are refused with their exit codes", "[cache]") {
  write_input("cache_test_foreign.h5");
  try {
    io::cache::read_info("cache_test_foreign.h5");
    CATCH_FAIL("accepted");
  } catch (const Error& e) {
    CATCH_CHECK(e.code() == Exit::data);
  }
  try {
    io::cache::read_info("cache_test_missing.h5");
    CATCH_FAIL("accepted");
  } catch (const Error& e) {
    CATCH_CHECK(e.code() == Exit::no_input);
    CATCH_CHECK(std::string(e.what()) == "cache_test_missing.h5: no such file or directory");
  }
  CATCH_CHECK_FALSE(io::cache::check("cache_test_missing.h5").ok());
}

CATCH_TEST_CASE("cache file: chunks hold about 1 MiB of rows", "[cache]") {
  CATCH_CHECK(io::cache::chunk_rows(256, 100000) == 4096);
  CATCH_CHECK(io::cache::chunk_rows(256, 10) == 10);
  CATCH_CHECK(io::cache::chunk_rows(8 << 20, 10) == 1);
}

CATCH_TEST_CASE("row digest: rows larger than a block stream in pieces with the same digest", "[digest]") {
  // [3, 5, 7] float64: 280-byte rows, read whole, or in pieces of 1-2 trailing rows, or per element.
  const std::string path = "digest_input.h5";
  std::vector<double> values(3 * 5 * 7);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.5 * static_cast<double>(i) - 3;
  {
    io::h5::Id f = io::h5::create_file(path);
    hsize_t dims[3] = {3, 5, 7};
    io::h5::Id space(H5Screate_simple(3, dims, nullptr));
    io::h5::Id d(H5Dcreate2(f.get(), "x", H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Dwrite(d.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  }
  io::h5::Id f = io::h5::open_file(path);
  io::h5::Id d = io::h5::open_dataset(f.get(), path, "x");
  auto info = io::h5::describe(d.get(), "x");
  auto digest = [&](int64_t a, int64_t b, int64_t block) {
    ContentHash h;
    io::hash_rows(d.get(), info, a, b, h, block);
    return h.hex_digest();
  };
  ContentHash want;
  want.update(std::string("x") + '\0');
  want.update(values.data() + 35, 2 * 35 * sizeof(double));  // rows 1 and 2
  for (int64_t block : {int64_t{8} << 20, int64_t{280}, int64_t{100}, int64_t{56}, int64_t{8}, int64_t{1}})
    CATCH_CHECK(digest(1, 3, block) == want.hex_digest());
  CATCH_CHECK(digest(0, 3, 8) != want.hex_digest());
  // Each row's own digest (its bytes alone) from the same reads, whole or in pieces.
  for (int64_t block : {int64_t{8} << 20, int64_t{100}, int64_t{8}}) {
    ContentHash h;
    Digest128 rows[2];
    io::hash_rows(d.get(), info, 1, 3, h, block, rows);
    CATCH_CHECK(h.hex_digest() == want.hex_digest());
    for (int r = 0; r < 2; ++r) {
      ContentHash own;
      own.update(values.data() + 35 * (r + 1), 35 * sizeof(double));
      CATCH_CHECK(rows[r] == own.digest());
    }
  }
}

CATCH_TEST_CASE("cache export: file numbers are as wide as the largest, so name order is row order", "[cache]") {
  CATCH_CHECK(io::cache::export_file_name("flat", 7, 3, ".npy") == "flat_00007.npy");
  CATCH_CHECK(io::cache::export_file_name("flat", 99999, 100000, ".npy") == "flat_99999.npy");
  CATCH_CHECK(io::cache::export_file_name("metadata", 7, 100001, ".jsonl") == "metadata_000007.jsonl");
  CATCH_CHECK(io::cache::export_file_name("flat", 100000, 100001, ".npy") == "flat_100000.npy");
  // Sorted as strings, the names of 100,001 files are in number order (with five digits, file
  // 100000 sorted between 10000 and 10001).
  std::vector<std::string> names;
  for (int64_t k : {int64_t{9999}, int64_t{10000}, int64_t{10001}, int64_t{100000}})
    names.push_back(io::cache::export_file_name("flat", k, 100001, ".npy"));
  CATCH_CHECK(std::is_sorted(names.begin(), names.end()));
}

CATCH_TEST_CASE("cache file: history is read and written in one format", "[cache]") {
  // What cache-fill writes: a fill, an update (its unchanged rows under both names, until 0.2), a
  // merged shard's run and the merge, an update with rows found by their content, each with its
  // keys in alphabetical order.
  const std::string stored =
      R"([{"encoded":40,"rows":40,"run":"fill"},)"
      R"({"added":10,"changed":2,"copied":38,"encoded":12,"kept":28,"matched_by":"key","removed":3,"rows":50,"run":"update","unchanged":28},)"
      R"({"encoded":25,"rows":25,"run":"fill","shard":1},)"
      R"({"rows":50,"run":"merge","shards":2},)"
      R"({"added":0,"changed":0,"copied":51,"copies":1,"encoded":0,"kept":45,"matched_by":"key","moved":5,"removed":5,"rows":51,"run":"update","unchanged":45}])";
  const io::cache::History h = io::cache::parse_history(stored);
  CATCH_REQUIRE(h.size() == 5);
  CATCH_CHECK(h[1].update->moved == 0);
  CATCH_CHECK(h[1].update->copies == 0);
  CATCH_REQUIRE(h[4].update);
  CATCH_CHECK(h[4].update->moved == 5);
  CATCH_CHECK(h[4].update->copies == 1);
  CATCH_CHECK(h[0].run == "fill");
  CATCH_CHECK(h[0].encoded == 40);
  CATCH_CHECK(!h[0].update);
  CATCH_CHECK(h[0].shard == -1);
  CATCH_REQUIRE(h[1].update);
  CATCH_CHECK(h[1].update->copied == 38);
  CATCH_CHECK(h[1].update->removed == 3);
  CATCH_CHECK(h[1].update->matched_by == "key");
  CATCH_CHECK(h[1].update->unchanged == 28);
  CATCH_CHECK(h[2].shard == 1);
  CATCH_CHECK(h[3].run == "merge");
  CATCH_CHECK(h[3].shards == 2);
  // Written back, the same bytes.
  CATCH_CHECK(io::cache::history_text(h) == stored);
  // A cache of 0.1 names its unchanged rows "kept" only; written again, it has both names.
  const io::cache::History old = io::cache::parse_history(
      R"([{"added":1,"changed":0,"copied":7,"encoded":1,"kept":7,"matched_by":"position","removed":0,"rows":8,"run":"update"}])");
  CATCH_REQUIRE(old.size() == 1);
  CATCH_REQUIRE(old[0].update);
  CATCH_CHECK(old[0].update->unchanged == 7);
  CATCH_CHECK(
      io::cache::history_text(old) ==
      R"([{"added":1,"changed":0,"copied":7,"encoded":1,"kept":7,"matched_by":"position","removed":0,"rows":8,"run":"update","unchanged":7}])");
  // What is not a list of objects reads as no entry.
  CATCH_CHECK(io::cache::parse_history("not json").empty());
  CATCH_CHECK(io::cache::parse_history(R"({"run":"fill"})").empty());
  CATCH_CHECK(io::cache::parse_history(R"([1, {"run":"fill","rows":3,"encoded":3}])").size() == 1);
  CATCH_CHECK(io::cache::history_text({}) == "[]");
}
