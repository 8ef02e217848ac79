#include "traincache/io/cache_export.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "traincache/base/error.h"
#include "traincache/base/files.h"
#include "traincache/base/format.h"
#include "traincache/io/cache_file.h"
#include "traincache/io/npy.h"
#include "traincache/io/source.h"

namespace traincache::cache {

namespace {

using Json = nlohmann::ordered_json;  // metadata lines: row, key, label, in this order

// A private folder beside `dest` under an unpredictable name, removed with what it holds unless
// publish() renamed it to `dest` (which must not exist then either).
class TempDir {
 public:
  explicit TempDir(std::string dest) : dest_(std::move(dest)) {
    for (int tries = 0;; ++tries) {
      path_ = files::unpredictable_name(dest_);
      if (::mkdir(path_.c_str(), 0700) == 0) return;
      if (errno != EEXIST || tries > 100) throw Error(Exit::cant_create, dest_, "cannot create: " + errno_text(errno));
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    if (!published_) files::remove_tree(path_);
  }
  const std::string& path() const { return path_; }
  // A folder inside (0777 less the umask: only the private folder around it keeps others out).
  void make_dir(const std::string& name) const {
    if (::mkdir((path_ + "/" + name).c_str(), 0777) != 0)
      throw Error(Exit::cant_create, dest_ + "/" + name, "cannot create: " + errno_text(errno));
  }

  void publish() {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    if (::chmod(path_.c_str(), 0777 & ~mask) != 0) throw Error(Exit::io, dest_, errno_text(errno));
    if (::renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, dest_.c_str(), RENAME_NOREPLACE) != 0)
      throw Error(Exit::cant_create, dest_, errno == EEXIST ? "exists (remove it first)" : errno_text(errno));
    published_ = true;
    const int fd = ::open(files::dir_name(dest_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
      ::fsync(fd);  // the rename is durable
      ::close(fd);
    }
  }

 private:
  std::string dest_, path_;
  bool published_ = false;
};

std::string numbered(const std::string& stem, int64_t k, const char* ext) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "_%05lld", static_cast<long long>(k));
  return stem + buf + ext;
}

// A column's rows [a, b) as JSON values: integers, or strings (keys and string labels).
std::vector<Json> json_values(const source::Column& col, int64_t a, int64_t b) {
  std::vector<Json> out;
  const auto& ci = col.info();
  if (ci.dtype == DType::string) {
    for (auto& s : col.read_strings(a, b - a)) out.emplace_back(std::move(s));
    return out;
  }
  if (!is_integer(ci.dtype) || ci.row_elements() != 1)
    throw Error(Exit::data, col.path(), "'" + ci.name + "' holds neither one integer nor one string per row");
  std::vector<char> raw(static_cast<std::size_t>(b - a) * ci.row_bytes());
  col.read(a, b - a, raw.data());
  std::vector<int64_t> v(static_cast<std::size_t>(b - a));
  to_int64(ci.dtype, raw.data(), v.data(), v.size());
  for (int64_t x : v) out.emplace_back(x);
  return out;
}

// One .npy file: rows [a, b) of `col`, as stored.
void write_npy(const source::Column& col, int64_t a, int64_t b, const std::string& path) {
  const auto& ci = col.info();
  std::vector<int64_t> shape = ci.shape;
  shape[0] = b - a;
  std::vector<char> rows(static_cast<std::size_t>(b - a) * ci.row_bytes());
  col.read(a, b - a, rows.data());
  files::TempFile out(path);
  const std::string header = npy::make_header(ci.dtype, shape);
  out.write_all(header.data(), header.size());
  out.write_all(rows.data(), rows.size());
  out.commit();
}

}  // namespace

ExportResult export_npy(const ExportOptions& o) {
  if (o.rows_per_file < 1) throw Error(Exit::usage, "--rows-per-file", "must be at least 1");
  const CacheInfo info = read_info(o.cache, false);
  if (!info.complete) throw Error(Exit::data, o.cache, "incomplete cache: nothing to export");
  struct stat st;
  if (::lstat(o.dir.c_str(), &st) == 0) throw Error(Exit::cant_create, o.dir, "exists (remove it first)");
  std::vector<std::unique_ptr<source::Column>> emb;
  ExportResult r;
  r.dir = o.dir;
  r.rows = info.rows;
  for (const auto& e : info.embeddings) {
    emb.push_back(source::open_column(o.cache, "/embeddings/" + e.name));
    r.encoders.push_back(e.name);
  }
  auto keys = info.keys_dtype ? source::open_column(o.cache, "/keys") : nullptr;
  auto labels = info.labels ? source::open_column(o.cache, "/labels") : nullptr;
  std::set<int64_t> skipped;
  if (info.skipped > 0) {
    auto col = source::open_column(o.cache, "/skipped/rows");
    for (const auto& v : json_values(*col, 0, col->info().rows())) skipped.insert(v.get<int64_t>());
  }
  TempDir tmp(o.dir);
  for (const auto& name : r.encoders) tmp.make_dir(name);
  tmp.make_dir("metadata");
  for (int64_t a = 0; a < info.rows; a += o.rows_per_file, ++r.files) {
    const int64_t b = std::min(info.rows, a + o.rows_per_file);
    for (std::size_t i = 0; i < emb.size(); ++i)
      write_npy(*emb[i], a, b, tmp.path() + "/" + r.encoders[i] + "/" + numbered(r.encoders[i], r.files, ".npy"));
    const auto k = keys ? json_values(*keys, a, b) : std::vector<Json>{};
    const auto l = labels ? json_values(*labels, a, b) : std::vector<Json>{};
    std::string lines;
    for (int64_t row = a; row < b; ++row) {
      const auto j = static_cast<std::size_t>(row - a);
      Json m{{"row", row}, {"key", keys ? k[j] : Json(info.row_start + row)}};
      if (labels) m["label"] = l[j];
      if (skipped.count(row)) m["skipped"] = true;
      lines += m.dump(-1, ' ', false, Json::error_handler_t::replace) + '\n';
    }
    files::TempFile meta(tmp.path() + "/metadata/" + numbered("metadata", r.files, ".jsonl"));
    meta.write_all(lines.data(), lines.size());
    meta.commit();
  }
  tmp.publish();
  return r;
}

}  // namespace traincache::cache
