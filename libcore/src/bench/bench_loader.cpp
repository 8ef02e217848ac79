// The torch-free side of smart-bench's engine: the strategies' names, which the command line
// needs, and the entry point into libtraincache_engines.so (bench_module.cpp), loaded on the first
// call.
#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench_module.h"
#include "traincache/base/error.h"
#include "traincache/data_cache/smart_cache.h"

namespace traincache::bench {

const Choices<Caching>& caching_choices() {
  static const Choices<Caching> c{{Caching::none, "none"},
                                  {Caching::full, "full"},
                                  {Caching::stochastic, "stochastic"},
                                  {Caching::smart, "smart"},
                                  {Caching::embed, "embed"}};
  return c;
}

namespace {

// True when the items are images decoded by the source (an image folder, a manifest, tar shards).
bool image_source(const BenchOptions& o) {
  const auto kind = o.data.empty() ? io::source::Kind::shm : io::source::kind_of(o.data);
  return kind == io::source::Kind::image_folder || kind == io::source::Kind::manifest || kind == io::source::Kind::tar;
}

}  // namespace

std::vector<int64_t> array_resize(const BenchOptions& o) {
  const io::image::Spec& spec = o.images.preprocess;
  if (image_source(o)) return {};
  const char* image_only = spec.resize_short > 0 ? "--resize"
                           : spec.crop_h > 0     ? "--center-crop"
                           : !spec.mean.empty()  ? "--normalize"
                           : spec.exif_transpose ? "--exif-transpose"
                                                 : nullptr;
  if (image_only)
    throw Error(
        Exit::usage, image_only,
        std::string(spec.resize_short > 0 ? "S (the shorter side) " : "") +
            "applies to images (an image folder, a manifest or tar shards); uint8 arrays take --resize H,W only");
  if (spec.resize_h > 0) return {spec.resize_h, spec.resize_w};
  return {};
}

void validate_options(const BenchOptions& o) {
  int sources = !o.data.empty() + !o.files.empty() + !o.shm.empty();
  if (sources != 1) throw Error(Exit::usage, "--data", "give exactly one of --data, --files and --shm");
  auto chosen = [&o](Caching c) {
    return std::find(o.strategies.begin(), o.strategies.end(), c) != o.strategies.end();
  };
  const bool embed = chosen(Caching::embed);
  if (embed && (o.frozen_encoder.empty() || o.cache.empty()))
    throw Error(Exit::usage, "--strategy", "embed needs --frozen-encoder and --cache");
  if (o.batch_size <= 0 || o.epochs <= 0)
    throw Error(Exit::usage, "--batch-size", "batch size and epochs must be positive");
  if (!(o.cache_fraction > 0) || o.cache_fraction > 1)
    throw Error(Exit::usage, "--cache-fraction", "must be in (0, 1]");
  if (chosen(Caching::smart)) data_cache::check_replace_rate(o.replace_rate);
  if (const auto hw = array_resize(o); !hw.empty()) {
    // One resized sample in float32, times the batches the loaders keep in flight.
    const uint64_t pixels = static_cast<uint64_t>(hw[0]) * static_cast<uint64_t>(hw[1]);
    require_memory("--resize " + std::to_string(hw[0]) + "," + std::to_string(hw[1]), pixels,
                   4 * static_cast<uint64_t>(std::max<int64_t>(1, o.batch_size)));
  }
}

FileMeta read_file_meta(const std::string& dir) {
  const std::string path = dir + "/meta.json";
  std::ifstream in(path);
  if (!in) throw Error(Exit::no_input, path, "cannot open (see docs/smart-bench.md)");
  auto j = nlohmann::json::parse(in, nullptr, false);
  auto bad = [&] {
    return Error(Exit::data, path, "expected {\"count\": N, \"dims\": [positive sizes], \"labels\": [N integers]}");
  };
  auto is_int_list = [](const nlohmann::json& v) {
    return v.is_array() && std::all_of(v.begin(), v.end(), [](const auto& x) { return x.is_number_integer(); });
  };
  if (!j.is_object() || !j.contains("count") || !j["count"].is_number_integer() || j["count"].get<int64_t>() < 0 ||
      j["count"].get<int64_t>() > (int64_t{1} << 32) || !j.contains("dims") || !is_int_list(j["dims"]) ||
      (j.contains("labels") && !is_int_list(j["labels"])))
    throw bad();
  FileMeta m;
  m.count = j["count"].get<int64_t>();
  m.dims = j["dims"].get<std::vector<int64_t>>();
  int64_t item = 1;
  for (auto d : m.dims)
    if (d <= 0 || __builtin_mul_overflow(item, d, &item) || item > (int64_t{1} << 40)) throw bad();
  m.labels = j.value("labels", std::vector<int64_t>(static_cast<std::size_t>(m.count), 0));
  if (static_cast<int64_t>(m.labels.size()) != m.count) throw Error(Exit::data, path, "one label per item");
  return m;
}

std::string data_column(const BenchOptions& o) {
  if (!o.dataset.empty()) return o.dataset;
  return io::source::kind_of(o.data) == io::source::Kind::hdf5 ? "images" : io::source::default_column(o.data);
}

void check_item_column(const io::source::Column& col, const std::string& path) {
  const auto& ci = col.info();
  if (ci.dtype != DType::u8 && !(ci.dtype == DType::f32 && col.preprocess()))
    throw Error(Exit::data, path, "'" + ci.name + "' must hold uint8 items or images");
}

void check_source(const BenchOptions& o) {
  if (!o.files.empty()) {
    read_file_meta(o.files);
    return;
  }
  if (o.data.empty()) return;
  using io::source::Kind;
  const Kind kind = io::source::kind_of(o.data);
  if (kind != Kind::hdf5 && kind != Kind::npy && kind != Kind::npz) return;  // files listed once, by the run
  check_item_column(*io::source::open_column(o.data, data_column(o), o.images, io::source::Role::images), o.data);
}

void run_in_module(const BenchOptions& opts, const RecordFn& record, const InfoFn& info) {
  validate_options(opts);  // a refused command line loads no LibTorch, nor a source it cannot read
  check_source(opts);
  call_engines<decltype(tc_bench_run)>("tc_bench_run", &opts, &record, &info);
}

}  // namespace traincache::bench
