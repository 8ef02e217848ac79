// Columns held or read by the file sources (image folders, manifests, tar shards): integers and
// strings in memory, labels made from names, and images decoded and preprocessed on read
// (internal to the source layer).
#pragma once

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "traincache/base/content_hash.h"
#include "traincache/base/cores.h"
#include "traincache/base/error.h"
#include "traincache/base/files.h"
#include "traincache/base/format.h"
#include "traincache/base/interrupt.h"
#include "traincache/base/prefetch.h"
#include "traincache/base/stages.h"
#include "traincache/io/source.h"
#include "traincache/text/tokenizer.h"

namespace traincache::io::source {

// A whole input file (symbolic links followed: datasets are often linked into place); anything
// but a regular file is refused without blocking.
inline std::string read_input_file(const std::string& path) { return files::read_input(path); }

inline bool parse_int(const std::string& s, int64_t& v) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return !s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// ---- columns ------------------------------------------------------------------------------------

// int64 values held in memory (labels, integer keys), with the names labels were made from.
class IntColumn : public Column {
 public:
  IntColumn(Kind kind, const std::string& path, const std::string& name, std::vector<int64_t> values,
            std::vector<std::string> names, std::string warning = {})
      : Column(kind, path), values_(std::move(values)), names_(std::move(names)), warning_(std::move(warning)) {
    info_ = {name, {static_cast<int64_t>(values_.size())}, DType::i64};
  }
  void read(int64_t start, int64_t count, void* out) const override {
    check_range(start, count);
    std::memcpy(out, values_.data() + start, static_cast<std::size_t>(count) * sizeof(int64_t));
  }
  void digest(int64_t a, int64_t b, ContentHash& h) const override {
    Column::digest(a, b, h);
    for (const auto& n : names_) h.update(n + '\0');
  }
  const std::vector<std::string>& label_names() const override { return names_; }
  std::string warning() const override { return warning_; }

 private:
  std::vector<int64_t> values_;
  std::vector<std::string> names_;
  std::string warning_;
};

// float64 values held in memory (a manifest's labels that are numbers, not all integers).
class FloatColumn : public Column {
 public:
  FloatColumn(Kind kind, const std::string& path, const std::string& name, std::vector<double> values)
      : Column(kind, path), values_(std::move(values)) {
    info_ = {name, {static_cast<int64_t>(values_.size())}, DType::f64};
  }
  void read(int64_t start, int64_t count, void* out) const override {
    check_range(start, count);
    std::memcpy(out, values_.data() + start, static_cast<std::size_t>(count) * sizeof(double));
  }

 private:
  std::vector<double> values_;
};

// Strings held in memory (an image folder's paths, a manifest's string keys).
class StringColumn : public Column {
 public:
  // `width` > 0: rows of `width` strings each ([rows, width], row-major in `values`).
  StringColumn(Kind kind, const std::string& path, const std::string& name, std::vector<std::string> values,
               int64_t utf8_replaced = 0, int64_t width = 0)
      : Column(kind, path), values_(std::move(values)), replaced_(utf8_replaced), width_(std::max<int64_t>(1, width)) {
    info_ = {name, {static_cast<int64_t>(values_.size()) / width_}, DType::string};
    if (width > 0) info_.shape.push_back(width);
  }
  int64_t utf8_replaced() const override { return replaced_; }
  void read(int64_t, int64_t, void*) const override {
    throw Error(Exit::data, path(), "'" + info_.name + "' holds strings, not numbers");
  }
  std::vector<std::string> read_strings(int64_t start, int64_t count) const override {
    check_range(start, count);
    return {values_.begin() + start * width_, values_.begin() + (start + count) * width_};
  }
  void digest(int64_t a, int64_t b, ContentHash& h) const override {
    h.update(info_.name + '\0' + "string" + '\0');
    for (int64_t i = a; i < b; ++i) h.update(values_[static_cast<std::size_t>(i)] + '\0');
  }

 private:
  std::vector<std::string> values_;
  int64_t replaced_ = 0;
  int64_t width_ = 1;
};

// Image files, decoded and preprocessed on every read into float32 [C, H, W] rows. Every image
// must come out the same shape: checked from the headers at open unless the spec fixes the size.
class ImageColumn : public Column {
 public:
  // The encoded bytes of image i (Error naming it as shown otherwise).
  using Bytes = std::function<std::string(std::size_t i)>;

  // `files` are opened; `shown` name them in messages ("dir/a.png", "m.csv:3: a.png"); `ids` name
  // them in the content digest, relative to the input ("c1/a.png", a manifest's value as written),
  // so that the same files named through another path digest alike.
  ImageColumn(Kind kind, const std::string& path, const std::string& name, std::vector<std::string> files,
              std::vector<std::string> shown, std::vector<std::string> ids, const image::Spec& spec, bool tolerate)
      : ImageColumn(kind, path, name, file_bytes(std::move(files), shown), shown, std::move(ids), spec, tolerate) {}

  // One image per name of `shown`, its bytes from `bytes` (a tar shard's members: `ids` KEY.FIELD).
  ImageColumn(Kind kind, const std::string& path, const std::string& name, Bytes bytes, std::vector<std::string> shown,
              std::vector<std::string> ids, const image::Spec& spec, bool tolerate)
      : Column(kind, path),
        bytes_(std::move(bytes)),
        shown_(std::move(shown)),
        ids_(std::move(ids)),
        spec_(spec),
        tolerate_(tolerate),
        seen_(new std::atomic<uint64_t>[shown_.size()]()) {
    image::validate(spec_);
    info_.name = name;
    info_.dtype = DType::f32;
    std::vector<int64_t> shape = spec_.fixed_size() ? image::output_shape(spec_, 1, 1) : common_shape();
    info_.shape = {static_cast<int64_t>(shown_.size())};
    info_.shape.insert(info_.shape.end(), shape.begin(), shape.end());
  }

  void read(int64_t start, int64_t count, void* out) const override {
    float* dst = static_cast<float*>(out);
    for_each_image(start, count, [&](const image::Image& img) {
      image::preprocess(img, spec_, dst);
      dst += info_.row_elements();
    });
  }

  void read_pixels(int64_t start, int64_t count, uint8_t* out) const override {
    for_each_image(start, count, [&](const image::Image& img) {
      image::preprocess_pixels(img, spec_, out);
      out += info_.row_elements();
    });
  }

  // A range of more than one block of files is read on several threads, a block at a time, and fed
  // to `h` in order: the same bytes in the same order as one thread would feed (a cache-fill of
  // 20,000 files reads ~400 MB here on every run, up-to-date checks included). Row digests ask for
  // one row at a time, from threads of their own: those are read here, without starting any.
  void digest(int64_t a, int64_t b, ContentHash& h) const override { digest_files(a, b, h, nullptr, nullptr); }

  // The rows' own digests are taken by the threads that read the files, from the same bytes.
  void digest_rows(int64_t a, int64_t b, ContentHash& h, Digest128* rows) const override {
    digest_files(a, b, h, rows, nullptr);
  }

  bool digest_rows_and_files(int64_t a, int64_t b, ContentHash& h, Digest128* rows, Digest128* files) const override {
    digest_files(a, b, h, rows, files);
    return true;
  }

  const image::Spec* preprocess() const override { return &spec_; }

  EncodedImage read_encoded(int64_t row) const override {
    check_range(row, 1);
    const std::size_t i = static_cast<std::size_t>(row);
    EncodedImage e;
    e.bytes = read_checked(i);
    const auto* b = reinterpret_cast<const unsigned char*>(e.bytes.data());
    // A JPEG without its end-of-image marker is decoded by pixels_of too, which refuses it as
    // truncated where a device's decoder would decode the part that is there.
    const bool soi = e.bytes.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF;
    const image::JpegLayout layout = soi ? image::jpeg_layout(b, e.bytes.size()) : image::JpegLayout{};
    e.jpeg = layout.complete;
    e.baseline = e.jpeg && layout.baseline();
    if (!e.jpeg) return e;  // decoded by pixels_of, which checks it
    const auto [h, w] = image::probe_size(b, e.bytes.size(), spec_.exif_transpose, shown_[i]);
    check_shape(h, w, i);
    if (spec_.exif_transpose) e.orientation = image::exif_orientation(b, e.bytes.size());
    return e;
  }

  void pixels_of(const EncodedImage& e, int64_t row, uint8_t* out) const override {
    check_range(row, 1);
    thread_local image::Image img;
    decode(e.bytes, static_cast<std::size_t>(row), img);
    StageTimer resize(Stage::resize);
    image::preprocess_pixels(img, spec_, out);
  }

 private:
  using Block = std::vector<std::optional<std::string>>;  // nullopt: missing, and tolerated

  // Feeds file i as the digest holds it: its id, size and bytes (or its id and "missing").
  void feed_file(ContentHash& h, std::size_t i, const std::optional<std::string>& bytes) const {
    if (!bytes) {
      h.update(ids_[i] + '\0' + "missing" + '\0');  // skipped when read; it counts as it is
      return;
    }
    h.update(ids_[i] + '\0');
    feed_bytes(h, *bytes);
  }

  // Feeds a file's size and bytes.
  static void feed_bytes(ContentHash& h, const std::string& bytes) {
    h.update(std::to_string(bytes.size()) + '\0');
    h.update(bytes);
  }

  // digest(a, b, h), and with `rows` each file's own digest (digest(r, r + 1)'s) from the same read,
  // with `files` its digest without its id (a missing file's keeps the id: it matches no other).
  void digest_files(int64_t a, int64_t b, ContentHash& h, Digest128* rows, Digest128* files) const {
    const std::string prefix = info_.name + '\0' + "images" + '\0';  // the spec is the fingerprint's "preprocess"
    h.update(prefix);
    constexpr int64_t kBlock = 64;
    const int64_t blocks = (b - a + kBlock - 1) / kBlock;
    auto read_block = [&](int64_t k) {
      Block out;
      for (int64_t r = a + k * kBlock; r < std::min(b, a + (k + 1) * kBlock); ++r) {
        const auto i = static_cast<std::size_t>(r);
        try {
          out.emplace_back(read_file_of(i));
          note_digested(i, &*out.back());
        } catch (const Error& e) {
          if (!tolerate_ || e.code() != Exit::no_input) throw;
          note_digested(i, nullptr);
          out.emplace_back(std::nullopt);
        }
        if (rows) {
          ContentHash own;
          own.update(prefix);
          feed_file(own, i, out.back());
          rows[r - a] = own.digest();
        }
        if (files) {
          ContentHash bytes_only;
          bytes_only.update(prefix);
          if (out.back())
            feed_bytes(bytes_only, *out.back());
          else
            feed_file(bytes_only, i, std::nullopt);
          files[r - a] = bytes_only.digest();
        }
      }
      return out;
    };
    auto feed = [&](int64_t k, const Block& files) {
      stop_if_interrupted("digesting the input's files (nothing was written)");
      for (std::size_t j = 0; j < files.size(); ++j)
        feed_file(h, static_cast<std::size_t>(a + k * kBlock) + j, files[j]);
    };
    in_order<Block>(blocks, read_block, feed);
  }

  // Rows [start, start + count) decoded in order, each checked against the column's row shape.
  template <class Use>
  void for_each_image(int64_t start, int64_t count, Use use) const {
    check_range(start, count);
    thread_local image::Image img;  // its buffer reused from image to image
    for (int64_t r = start; r < start + count; ++r) {
      decode(read_checked(static_cast<std::size_t>(r)), static_cast<std::size_t>(r), img);
      StageTimer resize(Stage::resize);  // resize, crop and normalise (cache-fill's bottleneck report)
      use(img);
    }
  }

  // Image i's bytes decoded into img (only the part the spec reads, where that is less), its size
  // checked against the column's row shape.
  void decode(const std::string& bytes, std::size_t i, image::Image& img) const {
    {
      StageTimer decode(Stage::decode);
      image::decode_for(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), spec_, shown_[i], img);
    }
    const auto [h, w] = img.file_size();
    check_shape(h, w, i);
  }

  void check_shape(int h, int w, std::size_t i) const {
    const std::vector<int64_t> want(info_.shape.begin() + 1, info_.shape.end());
    if (image::output_shape(spec_, h, w) != want)
      throw Error(Exit::data, shown_[i],
                  "gives an image of " + shape_text(image::output_shape(spec_, h, w)) + " but the column's rows are " +
                      shape_text(want) + " (did the file change?)");
  }

  // Files read whole; errors name file i as `shown[i]` (with its manifest line).
  static Bytes file_bytes(std::vector<std::string> files, const std::vector<std::string>& shown) {
    return [files = std::move(files), shown](std::size_t i) {
      try {
        return read_input_file(files[i]);
      } catch (const Error& e) {
        std::string why = e.what();
        const std::string prefix = files[i] + ": ";
        if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
        throw Error(e.code(), shown[i], why);
      }
    };
  }
  std::string read_file_of(std::size_t i) const { return bytes_(i); }

  // What a digest saw of each file, so that a file rewritten during a run is noticed when it is read
  // for its row: kUnseen (not digested in this process), kMissing (tolerated as missing), or a hash
  // of its bytes. A fill digests every file before it reads one; without the check a row would hold
  // the new bytes and the cache's fingerprint the old ones.
  static constexpr uint64_t kUnseen = 0, kMissing = 1;
  static uint64_t bytes_hash(const std::string& bytes) {
    const uint64_t h = hash64(bytes.data(), bytes.size()) ^ (static_cast<uint64_t>(bytes.size()) << 1);
    return h <= kMissing ? h + 2 : h;
  }
  [[noreturn]] void changed(std::size_t i) const {
    throw Error(Exit::data, shown_[i],
                "changed while this run read it (its bytes differ from those the input's digest was taken of); "
                "run again when the files stay as they are");
  }
  // Records what a digest read of file i (`bytes` null: missing), refusing bytes other than those an
  // earlier digest of this run saw.
  void note_digested(std::size_t i, const std::string* bytes) const {
    const uint64_t h = bytes ? bytes_hash(*bytes) : kMissing;
    uint64_t was = kUnseen;
    if (!seen_[i].compare_exchange_strong(was, h, std::memory_order_relaxed) && was != h) changed(i);
  }
  // File i's bytes for its row: Error(data) when they are not those its digest saw.
  std::string read_checked(std::size_t i) const {
    const uint64_t saw = seen_[i].load(std::memory_order_relaxed);
    std::string bytes;
    try {
      bytes = read_file_of(i);
    } catch (const Error& e) {
      if (saw > kMissing && e.code() == Exit::no_input) changed(i);
      throw;
    }
    if (saw != kUnseen && saw != bytes_hash(bytes)) changed(i);
    return bytes;
  }

  // produce(k) for blocks k of files, on one thread per usable core (at most 16; none started for
  // one block), and consume(k, item) in block order on this thread.
  template <class T>
  static void in_order(int64_t blocks, const std::function<T(int64_t)>& produce,
                       const std::function<void(int64_t, const T&)>& consume) {
    // usable_cores() reads the cgroup's files: once per call, not once per row
    const int threads = blocks > 1 ? static_cast<int>(std::min<int64_t>(blocks, std::min(usable_cores(), 16u))) : 1;
    if (threads <= 1) {
      for (int64_t k = 0; k < blocks; ++k) consume(k, produce(k));
      return;
    }
    OrderedPrefetcher<T> ahead(blocks, threads, 2 * threads, produce);
    for (int64_t k = 0; k < blocks; ++k) consume(k, ahead.next());
  }

  // A file's probe error, an unreadable or undecodable file as UnreadableFile.
  [[noreturn]] static void rethrow_unreadable(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      if (e.code() != Exit::data && e.code() != Exit::no_input) throw;
      throw UnreadableFile(e.code(), "", e.what());
    }
  }

  // The output shape every image shares; Error(data) naming the first two that differ. The files
  // are probed on several threads, a block each, and met in the folder's order: the same error as
  // one thread would meet first.
  std::vector<int64_t> common_shape() const {
    struct Probe {  // neither: unreadable and tolerated
      std::vector<int64_t> shape;
      std::exception_ptr error;
    };
    constexpr int64_t kBlock = 64;
    const auto n = static_cast<int64_t>(shown_.size());
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    auto probe_block = [&](int64_t k) {
      std::vector<Probe> out(static_cast<std::size_t>(std::min(n, (k + 1) * kBlock) - k * kBlock));
      for (std::size_t j = 0; j < out.size(); ++j) try {
          const std::string bytes = read_file_of(static_cast<std::size_t>(k * kBlock) + j);
          auto hw = image::probe_size(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                                      spec_.exif_transpose, shown_[static_cast<std::size_t>(k * kBlock) + j]);
          out[j].shape = image::output_shape(spec_, hw.first, hw.second);
        } catch (const Error& e) {
          if (!tolerate_ || (e.code() != Exit::data && e.code() != Exit::no_input))
            out[j].error = std::current_exception();
        } catch (...) {
          out[j].error = std::current_exception();
        }
      return out;
    };
    std::vector<int64_t> first;
    std::size_t first_i = 0;
    auto meet = [&](int64_t k, const std::vector<Probe>& probes) {
      stop_if_interrupted("reading the images' sizes (nothing was written)");
      for (std::size_t j = 0; j < probes.size(); ++j) {
        const std::size_t i = static_cast<std::size_t>(k * kBlock) + j;
        if (probes[j].error) rethrow_unreadable(probes[j].error);
        const auto& shape = probes[j].shape;
        if (shape.empty()) continue;
        if (first.empty()) first = shape, first_i = i;
        if (shape != first)
          throw Error(Exit::data, path(),
                      "images differ in shape: " + shown_[first_i] + " gives " + shape_text(first) + " but " +
                          shown_[i] + " gives " + shape_text(shape) +
                          "; add --resize and/or --center-crop to bring them to one size");
      }
    };
    in_order<std::vector<Probe>>(blocks, probe_block, meet);
    if (first.empty()) throw Error(Exit::data, path(), "no image can be read");
    return first;
  }

  Bytes bytes_;
  std::vector<std::string> shown_, ids_;
  image::Spec spec_;
  bool tolerate_ = false;
  std::shared_ptr<std::atomic<uint64_t>[]> seen_;
};

// Labels from names: ids in sorted or first-seen order.
inline std::unique_ptr<Column> labels_from_names(Kind kind, const std::string& path, const std::string& name,
                                                 const std::vector<std::string>& values, LabelOrder order,
                                                 std::string warning = {}) {
  std::vector<std::string> names;
  std::map<std::string, int64_t> id;
  for (const auto& v : values)
    if (id.emplace(v, 0).second) names.push_back(v);
  if (order == LabelOrder::sorted) std::sort(names.begin(), names.end());
  for (std::size_t i = 0; i < names.size(); ++i) id[names[i]] = static_cast<int64_t>(i);
  std::vector<int64_t> ids;
  ids.reserve(values.size());
  for (const auto& v : values) ids.push_back(id[v]);
  return std::make_unique<IntColumn>(kind, path, name, std::move(ids), std::move(names), std::move(warning));
}

// Names as the cache stores them (class folders, file paths, label and key strings): HDF5 strings
// are UTF-8 and h5py decodes them, so ill-formed UTF-8 (a Latin-1 file name) is replaced with
// U+FFFD, as Python's decode(errors="replace") does, or with --strict-utf8 refused before anything
// is encoded. `where(i)` names item i for the refusal; `replaced` (when given) counts the
// sequences replaced.
inline std::vector<std::string> utf8_names(std::vector<std::string> names, bool strict,
                                           const std::function<std::string(std::size_t)>& where,
                                           int64_t* replaced = nullptr) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::size_t bad = traincache::text::first_invalid_utf8(names[i]);
    if (bad == std::string::npos) continue;
    if (strict)
      throw Error(
          Exit::data, where(i),
          "invalid UTF-8 at byte " + std::to_string(bad + 1) + " (without --strict-utf8 it is replaced with U+FFFD)");
    const int64_t n = traincache::text::repair_utf8(names[i]);
    if (replaced) *replaced += n;
  }
  return names;
}

}  // namespace traincache::io::source
