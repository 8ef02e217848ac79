#include "traincache/fill/merge.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>

#include "traincache/base/error.h"
#include "traincache/base/files.h"
#include "traincache/base/format.h"
#include "traincache/base/interrupt.h"
#include "traincache/base/json_text.h"
#include "traincache/base/sha256.h"
#include "traincache/base/timing.h"
#include "traincache/io/cache_file.h"
#include "traincache/io/h5.h"

namespace traincache::fill {

namespace {

struct Shard {
  std::string path, abs_path;
  io::cache::CacheInfo info;
  std::string job;
  int64_t count = 0, job_begin = 0, job_end = 0;
};

std::string range_text(int64_t a, int64_t b) { return std::to_string(a) + ".." + std::to_string(b); }

// The datasets every shard holds, with their file types.
// The datasets of the merged cache: the first shard's, and the row digests where every shard has
// them (a one-process --update of the merged cache compares them).
std::vector<std::string> dataset_names(const std::vector<Shard>& shards) {
  const io::cache::CacheInfo& c = shards.front().info;
  std::vector<std::string> names;
  for (const auto& e : c.embeddings) names.push_back("/embeddings/" + e.name);
  for (const io::cache::LabelInfo* l : io::cache::label_columns(c)) names.push_back(l->dataset);
  if (c.keys_dtype) names.push_back("/keys");
  auto every = [&](bool io::cache::CacheInfo::*has) {
    return std::all_of(shards.begin(), shards.end(), [&](const Shard& s) { return s.info.*has; });
  };
  if (every(&io::cache::CacheInfo::row_digests)) names.push_back("/row_digests");
  if (every(&io::cache::CacheInfo::row_digests) && every(&io::cache::CacheInfo::row_file_digests))
    names.push_back("/row_file_digests");
  return names;
}

void copy_attributes(hid_t src, hid_t dst) {
  const hsize_t n = io::h5::attribute_count(src);
  for (hsize_t i = 0; i < n; ++i) {
    io::h5::Id a(H5Aopen_by_idx(src, ".", H5_INDEX_CRT_ORDER, H5_ITER_INC, i, H5P_DEFAULT, H5P_DEFAULT));
    if (!a) a = io::h5::Id(H5Aopen_by_idx(src, ".", H5_INDEX_NAME, H5_ITER_INC, i, H5P_DEFAULT, H5P_DEFAULT));
    if (!a) continue;
    char name[256];
    H5Aget_name(a.get(), sizeof name, name);
    io::h5::Id type(H5Aget_type(a.get()));
    io::h5::Id space(H5Aget_space(a.get()));
    std::vector<char> buf(H5Tget_size(type.get()) * std::max<hssize_t>(1, H5Sget_simple_extent_npoints(space.get())));
    H5Aread(a.get(), type.get(), buf.data());
    if (H5Aexists(dst, name) > 0) H5Adelete(dst, name);
    io::h5::Id b(H5Acreate2(dst, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
    H5Awrite(b.get(), type.get(), buf.data());
    if (H5Tis_variable_str(type.get()) > 0) H5Dvlen_reclaim(type.get(), space.get(), H5P_DEFAULT, buf.data());
  }
}

// Every shard file, read and checked to be a complete shard.
std::vector<Shard> load_shards(const std::vector<std::string>& paths) {
  std::vector<Shard> shards;
  for (const auto& p : paths) {
    Shard s;
    s.path = p;
    s.abs_path = files::absolute_path(p);
    s.info = io::cache::read_info(p, false);
    if (!s.info.complete) throw Error(Exit::data, p, "incomplete shard");
    io::h5::Id f = io::h5::open_file(p);
    auto job = io::h5::read_attr_string(f.get(), "job_fingerprint");
    if (!job) throw Error(Exit::data, p, "not a shard (no job_fingerprint; was it written with --shard?)");
    s.job = *job;
    s.count = io::h5::read_attr_int(f.get(), "shard_count").value_or(0);
    s.job_begin = io::h5::read_attr_int(f.get(), "job_row_start").value_or(0);
    s.job_end = io::h5::read_attr_int(f.get(), "job_row_end").value_or(0);
    shards.push_back(std::move(s));
  }
  return shards;
}

// The shards are of one job, with the same embeddings, and cover the job's rows exactly once;
// sorts them by first row.
void check_coverage(std::vector<Shard>& shards) {
  const Shard ref = shards.front();
  for (const auto& s : shards) {
    if (s.job != ref.job)
      throw Error(Exit::data, s.path,
                  "belongs to another job than " + ref.path + " (encoders, options, input or shard count differ)");
    for (std::size_t i = 0; i < s.info.embeddings.size(); ++i)
      if (s.info.embeddings.size() != ref.info.embeddings.size() ||
          s.info.embeddings[i].name != ref.info.embeddings[i].name ||
          s.info.embeddings[i].dtype != ref.info.embeddings[i].dtype ||
          std::vector<int64_t>(s.info.embeddings[i].shape.begin() + 1, s.info.embeddings[i].shape.end()) !=
              std::vector<int64_t>(ref.info.embeddings[i].shape.begin() + 1, ref.info.embeddings[i].shape.end()))
        throw Error(Exit::data, s.path, "its embeddings differ in name, dtype or shape from " + ref.path);
  }
  std::sort(shards.begin(), shards.end(),
            [](const Shard& x, const Shard& y) { return x.info.row_start < y.info.row_start; });
  int64_t at = ref.job_begin;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const auto& s = shards[i];
    int64_t begin = s.info.row_start, end = s.info.row_start + s.info.rows;
    if (begin > at)
      throw Error(Exit::data, "merge",
                  "gap: rows " + range_text(at, begin) + " are in no shard (before " + s.path + ")");
    if (begin < at)
      throw Error(Exit::data, "merge",
                  "overlap: rows " + range_text(begin, std::min(at, end)) + " of " + s.path + " are also in " +
                      shards[i - 1].path);
    at = end;
  }
  if (at != ref.job_end)
    throw Error(Exit::data, "merge",
                "gap: rows " + range_text(at, ref.job_end) + " are in no shard (after " + shards.back().path + ")");
  if (static_cast<int64_t>(shards.size()) != ref.count)
    throw Error(Exit::data, "merge",
                std::to_string(shards.size()) + " shards given, the job has " + std::to_string(ref.count));
}

// The merged cache's history: each shard's fills and updates, marked with its shard (in row order),
// then the merge itself.
io::cache::History merged_history(const std::vector<Shard>& shards, int64_t rows) {
  io::cache::History history;
  for (std::size_t i = 0; i < shards.size(); ++i)
    for (auto entry : shards[i].info.history) {
      entry.shard = static_cast<int64_t>(i);
      history.push_back(std::move(entry));
    }
  io::cache::HistoryEntry merge;
  merge.run = "merge";
  merge.rows = rows;
  merge.shards = static_cast<int64_t>(shards.size());
  history.push_back(merge);
  return history;
}

// Writes the merged cache (virtual datasets over the shards, or copies) and renames it into place.
void write_merged(const MergeOptions& o, const std::vector<Shard>& shards) {
  const Shard& ref = shards.front();
  const int64_t rows = ref.job_end - ref.job_begin;
  files::TempPath tmp(o.out);
  {
    io::h5::Id out = io::h5::create_temp_file(tmp);
    io::h5::Id first = io::h5::open_file(ref.path);
    copy_attributes(first.get(), out.get());
    for (const char* a : {"shard_index", "shard_count", "job_row_start", "job_row_end"})
      if (H5Aexists(out.get(), a) > 0) H5Adelete(out.get(), a);
    io::h5::write_attr(out.get(), "complete", int64_t{0});
    io::h5::write_attr(out.get(), "rows", rows);
    io::h5::write_attr(out.get(), "row_start", ref.job_begin);
    nlohmann::json parts = nlohmann::json::array();
    for (const auto& s : shards) {
      parts.push_back({{"path", s.abs_path},
                       {"fingerprint", s.info.fingerprint},
                       {"row_start", s.info.row_start},
                       {"rows", s.info.rows}});
    }
    nlohmann::json fp{{"job_fingerprint", ref.job}, {"shards", parts}};
    io::h5::write_attr(out.get(), "fingerprint", sha256_hex(json_text(fp)));
    io::h5::write_attr(out.get(), "fingerprint_json", json_text(fp));
    io::h5::write_attr(out.get(), "merged_from", json_text(parts));
    io::h5::write_attr(out.get(), "merge", std::string(o.copy ? "copy" : "virtual"));
    if (H5Aexists(out.get(), "history") > 0) H5Adelete(out.get(), "history");
    io::h5::write_attr(out.get(), "history", io::cache::history_text(merged_history(shards, rows)));

    for (const auto& name : dataset_names(shards)) {
      io::h5::Id src0 = io::h5::open_dataset(first.get(), ref.path, name);
      auto di = io::h5::describe(src0.get(), name);
      io::h5::Id ftype(H5Dget_type(src0.get()));
      std::vector<hsize_t> dims(di.shape.begin(), di.shape.end());
      dims[0] = static_cast<hsize_t>(rows);
      io::h5::Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
      io::h5::Id dcpl = io::h5::untimed_create_plist(H5P_DATASET_CREATE);
      int64_t row_bytes = static_cast<int64_t>(H5Tget_size(ftype.get())) * di.row_elements();
      if (o.copy) {
        std::vector<hsize_t> chunk = dims;
        chunk[0] = static_cast<hsize_t>(io::cache::chunk_rows(row_bytes, rows));
        H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data());
      } else {
        for (const auto& s : shards) {
          std::vector<hsize_t> off(dims.size(), 0), cnt = dims;
          off[0] = static_cast<hsize_t>(s.info.row_start - ref.job_begin);
          cnt[0] = static_cast<hsize_t>(s.info.rows);
          io::h5::Id vspace(H5Scopy(space.get()));
          H5Sselect_hyperslab(vspace.get(), H5S_SELECT_SET, off.data(), nullptr, cnt.data(), nullptr);
          io::h5::Id sspace(H5Screate_simple(static_cast<int>(cnt.size()), cnt.data(), nullptr));
          io::h5::check(H5Pset_virtual(dcpl.get(), vspace.get(), s.abs_path.c_str(), name.c_str(), sspace.get()),
                        Exit::cant_create, o.out, "cannot map " + s.path);
        }
      }
      io::h5::create_parent_groups(out.get(), name);
      io::h5::Id d(H5Dcreate2(out.get(), name.c_str(), ftype.get(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
      io::h5::check(d.get(), Exit::cant_create, o.out, "cannot create " + name);
      copy_attributes(src0.get(), d.get());
      if (!o.copy) continue;
      for (const auto& s : shards) {
        io::h5::Id sf = io::h5::open_file(s.path);
        io::h5::Id sd = io::h5::open_dataset(sf.get(), s.path, name);
        io::h5::copy_rows(sd.get(), s.path + ": " + name, 0, d.get(), o.out + ": " + name,
                          s.info.row_start - ref.job_begin, s.info.rows);
      }
    }
    // Each shard's skipped rows, as rows of the merged cache (always a copy: a short list).
    std::vector<std::pair<int64_t, std::string>> skipped;
    for (const auto& s : shards)
      for (auto& [row, why] : io::cache::read_skipped(s.path))
        skipped.emplace_back(row + s.info.row_start - ref.job_begin, std::move(why));
    io::cache::write_skipped(out.get(), skipped);
    io::h5::write_attr(out.get(), "complete", int64_t{1});
    io::h5::close_file(out, o.out);
  }
  tmp.publish();
}

}  // namespace

void merge_shards(const MergeOptions& o) {
  if (o.shards.empty()) throw Error(Exit::usage, "merge", "no shard files given");
  for (const auto& p : o.shards)
    if (files::same_file(p, o.out))
      throw Error(Exit::usage, o.out, "is also one of the shards to merge (" + p + "); choose another output");
  files::OutputLock lock(o.out, "cache-fill merge");
  std::vector<Shard> shards = load_shards(o.shards);
  check_coverage(shards);
  write_merged(o, shards);
}

void wait_for_shards(const std::vector<std::string>& paths, double timeout_seconds) {
  const auto t0 = Clock::now();
  for (std::vector<std::string> missing = paths;;) {
    std::vector<std::string> still;
    for (const auto& p : missing)
      if (::access(p.c_str(), F_OK) != 0) still.push_back(p);
    missing.swap(still);
    if (missing.empty()) return;
    if (interrupt_requested())
      throw Error(Exit::interrupted, "--merge", "interrupted while waiting for the other shards");
    if (timeout_seconds > 0 && seconds_since(t0) >= timeout_seconds) {
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g", timeout_seconds);
      throw Error(Exit::temp_failure, "--merge",
                  std::string("gave up after ") + limit + " s waiting for " + name_list(missing) +
                      " (run their shards, then cache-fill merge)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace traincache::fill
