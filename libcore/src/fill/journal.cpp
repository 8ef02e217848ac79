#include "traincache/fill/journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <nlohmann/json.hpp>

#include "traincache/base/content_hash.h"
#include "traincache/base/error.h"
#include "traincache/base/files.h"
#include "traincache/base/json_text.h"

using nlohmann::json;

namespace traincache::fill {

void journal_damaged(const std::string& file, const std::string& why) {
  throw Error(Exit::data, file, "journal damaged: " + why + "; " + kJournalRemedy);
}

int64_t row_bytes_of(const std::vector<int64_t>& row_shape, std::size_t element_bytes) {
  int64_t n = static_cast<int64_t>(element_bytes);
  for (auto d : row_shape)
    if (d <= 0 || __builtin_mul_overflow(n, d, &n))
      throw Error(Exit::data, "row shape", "dimensions must be positive and their product fit 63 bits");
  return n;
}

namespace {

JournalEncoder parse_encoder(const std::string& file, const std::string& name, const json& j) {
  JournalEncoder e;
  if (!j.is_object()) journal_damaged(file, "encoder '" + name + "' is not an object");
  if (j.contains("row_shape")) {
    const json& s = j.at("row_shape");
    e.has_shape = true;
    if (!s.is_array()) journal_damaged(file, "row_shape of '" + name + "' is not a list of sizes");
    for (const auto& d : s) {
      if (!d.is_number_integer() || d.get<int64_t>() <= 0)
        journal_damaged(file, "row_shape of '" + name + "' holds a size that is not a positive integer");
      e.row_shape.push_back(d.get<int64_t>());
    }
  }
  if (j.contains("inference")) {
    if (!j.at("inference").is_string()) journal_damaged(file, "inference of '" + name + "' is not a string");
    e.inference = j.at("inference").get<std::string>();
    if (e.inference != "plain" && e.inference != "optimized")
      journal_damaged(file, "inference of '" + name + "' is '" + e.inference + "'");
  }
  if (j.contains("optimize_max_abs_diff")) {
    if (!j.at("optimize_max_abs_diff").is_number())
      journal_damaged(file, "optimize_max_abs_diff of '" + name + "' is not a number");
    e.optimize_max_abs_diff = j.at("optimize_max_abs_diff").get<double>();
  }
  if (j.contains("precision_max_rel_diff")) {  // absent in journals of float32 runs
    if (!j.at("precision_max_rel_diff").is_number())
      journal_damaged(file, "precision_max_rel_diff of '" + name + "' is not a number");
    e.precision_max_rel_diff = j.at("precision_max_rel_diff").get<double>();
  }
  if (j.contains("batch_max_abs_diff")) {  // absent: not measured (older journals, batches of one row)
    if (!j.at("batch_max_abs_diff").is_number())
      journal_damaged(file, "batch_max_abs_diff of '" + name + "' is not a number");
    e.batch_max_abs_diff = j.at("batch_max_abs_diff").get<double>();
  }
  if (j.contains("batch_max_rel_diff")) {  // absent: not measured, or a journal from before it was
    if (!j.at("batch_max_rel_diff").is_number())
      journal_damaged(file, "batch_max_rel_diff of '" + name + "' is not a number");
    e.batch_max_rel_diff = j.at("batch_max_rel_diff").get<double>();
  }
  if (j.contains("chunks")) {
    if (!j.at("chunks").is_array()) journal_damaged(file, "chunks of '" + name + "' is not a list");
    int64_t last = 0;
    for (const auto& c : j.at("chunks")) {
      if (!c.is_array() || c.size() != 2 || !c[0].is_number_integer() || !c[1].is_string() ||
          c[0].get<int64_t>() <= last)
        journal_damaged(file, "chunks of '" + name + "' holds an entry that is not [end row, digest] in order");
      last = c[0].get<int64_t>();
      e.chunks.emplace_back(last, c[1].get<std::string>());
    }
  }
  return e;
}

// Checks encoder `name`'s raw file against the digests of its committed chunks.
void check_chunks(const std::string& file, const std::string& raw_path, const std::string& name,
                  const JournalEncoder& e, int64_t committed_rows, int64_t row_bytes) {
  if (e.chunks.empty())
    journal_damaged(file, "rows of '" + name + "' are committed without chunk digests (an older version's journal)");
  if (e.chunks.back().first != committed_rows)
    journal_damaged(file, "the chunks of '" + name + "' end at row " + std::to_string(e.chunks.back().first) +
                              ", not at " + std::to_string(committed_rows));
  const int fd = ::open(raw_path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) journal_damaged(file, name + ".raw cannot be read (" + errno_text(errno) + ")");
  std::vector<char> buf(1 << 20);
  int64_t begin = 0;
  for (const auto& [end, digest] : e.chunks) {
    ContentHash h;
    for (int64_t left = (end - begin) * row_bytes; left > 0;) {
      const ssize_t n = ::read(fd, buf.data(), static_cast<std::size_t>(std::min<int64_t>(left, buf.size())));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fd);
        journal_damaged(file, name + ".raw cannot be read");
      }
      h.update(buf.data(), static_cast<std::size_t>(n));
      left -= n;
    }
    if (h.hex_digest() != digest) {
      ::close(fd);
      journal_damaged(file, name + ".raw rows " + std::to_string(begin) + "-" + std::to_string(end - 1) +
                                " differ from what was committed (their digest does not match)");
    }
    begin = end;
  }
  ::close(fd);
}

}  // namespace

bool Journal::load() {
  std::string text;
  try {
    text = files::read_file(file());
  } catch (const Error& e) {
    if (e.code() == Exit::no_input) return false;
    throw;
  }
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) journal_damaged(file(), "not a JSON object");
  if (!j.contains("format") || j.at("format") != "traincache-journal")
    journal_damaged(file(), "format is not traincache-journal");
  if (!j.contains("fingerprint") || !j.at("fingerprint").is_string())
    journal_damaged(file(), "fingerprint is missing or not a string");
  if (!j.contains("committed_rows") || !j.at("committed_rows").is_number_integer() ||
      j.at("committed_rows").get<int64_t>() < 0)
    journal_damaged(file(), "committed_rows is missing or not a non-negative integer");
  fingerprint = j.at("fingerprint").get<std::string>();
  fingerprint_json = j.contains("fingerprint_json") && j.at("fingerprint_json").is_string()
                         ? j.at("fingerprint_json").get<std::string>()
                         : "";
  committed_rows = j.at("committed_rows").get<int64_t>();
  if (j.contains("update_of") && !j.at("update_of").is_string()) journal_damaged(file(), "update_of is not a string");
  update_of = j.contains("update_of") ? j.at("update_of").get<std::string>() : "";
  encoders.clear();
  if (j.contains("encoders")) {
    if (!j.at("encoders").is_object()) journal_damaged(file(), "encoders is not an object");
    for (const auto& [name, e] : j.at("encoders").items()) encoders[name] = parse_encoder(file(), name, e);
  }
  skipped.clear();
  if (j.contains("skipped")) {
    if (!j.at("skipped").is_array()) journal_damaged(file(), "skipped is not an array");
    for (const auto& s : j.at("skipped")) {
      if (!s.is_array() || s.size() != 2 || !s[0].is_number_integer() || !s[1].is_string() || s[0].get<int64_t>() < 0 ||
          s[0].get<int64_t>() >= committed_rows)
        journal_damaged(file(), "skipped holds an entry that is not [committed row, reason]");
      skipped.emplace_back(s[0].get<int64_t>(), s[1].get<std::string>());
    }
  }
  return true;
}

void Journal::validate(const std::vector<std::string>& encoder_names, const std::vector<int64_t>& unit_ends,
                       std::size_t element_bytes) const {
  const int64_t rows = unit_ends.empty() ? 0 : unit_ends.back();
  if (committed_rows > rows)
    journal_damaged(file(),
                    std::to_string(committed_rows) + " rows committed but the run has only " + std::to_string(rows));
  if (committed_rows != 0 && !std::binary_search(unit_ends.begin(), unit_ends.end(), committed_rows))
    journal_damaged(file(), std::to_string(committed_rows) + " committed rows do not end a batch of this input");
  if (committed_rows == 0) return;
  for (const auto& name : encoder_names) {
    auto it = encoders.find(name);
    if (it == encoders.end() || !it->second.has_shape)
      journal_damaged(file(), "rows are committed but encoder '" + name + "' has no row shape");
    int64_t need = 0;
    if (__builtin_mul_overflow(row_bytes_of(it->second.row_shape, element_bytes), committed_rows, &need))
      journal_damaged(file(), "the committed rows of '" + name + "' do not fit 63 bits");
    struct stat st;
    std::string raw_path = raw(name);
    if (::lstat(raw_path.c_str(), &st) != 0)
      journal_damaged(file(), name + ".raw is missing (" + errno_text(errno) + ")");
    if (!S_ISREG(st.st_mode)) journal_damaged(file(), name + ".raw is not a regular file");
    if (st.st_size < need)
      journal_damaged(file(), name + ".raw holds " + std::to_string(st.st_size) + " bytes but " +
                                  std::to_string(committed_rows) + " committed rows need " + std::to_string(need));
    check_chunks(file(), raw_path, name, it->second, committed_rows, need / committed_rows);
  }
}

void Journal::save() const {
  json enc = json::object();
  for (const auto& [name, e] : encoders) {
    json je{{"inference", e.inference}, {"optimize_max_abs_diff", e.optimize_max_abs_diff}};
    if (e.precision_max_rel_diff != 0) je["precision_max_rel_diff"] = e.precision_max_rel_diff;
    if (e.batch_max_abs_diff >= 0) je["batch_max_abs_diff"] = e.batch_max_abs_diff;
    if (e.batch_max_rel_diff >= 0) je["batch_max_rel_diff"] = e.batch_max_rel_diff;
    if (e.has_shape) je["row_shape"] = e.row_shape;
    if (!e.chunks.empty()) je["chunks"] = e.chunks;
    enc[name] = je;
  }
  json j{{"format", "traincache-journal"},
         {"fingerprint", fingerprint},
         {"committed_rows", committed_rows},
         {"encoders", enc}};
  if (!fingerprint_json.empty()) j["fingerprint_json"] = fingerprint_json;
  if (!update_of.empty()) j["update_of"] = update_of;
  if (!skipped.empty()) j["skipped"] = skipped;
  std::string text = json_text(j, 1) + "\n";
  try {
    files::TempFile tmp(file());
    tmp.write_all(text.data(), text.size());
    tmp.commit();
  } catch (const Error& e) {
    throw Error(Exit::io, "", std::string("cannot commit progress: ") + e.what());
  }
}

RawFile::RawFile(const std::string& path, int64_t keep_bytes) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd_ < 0) throw Error(Exit::io, path, errno_text(errno));
  if (::ftruncate(fd_, keep_bytes) != 0 || ::lseek(fd_, 0, SEEK_END) < 0)
    throw Error(Exit::io, path, errno_text(errno));
}

RawFile::~RawFile() {
  if (fd_ >= 0) ::close(fd_);
}

void RawFile::append(const void* data, std::size_t n) {
  files::write_all(fd_, data, n, files::dir_name(path_));
  if (!hash_) hash_ = std::make_unique<ContentHash>();
  hash_->update(data, n);
}

std::string RawFile::take_digest() {
  if (!hash_) hash_ = std::make_unique<ContentHash>();
  std::string d = hash_->hex_digest();
  hash_ = std::make_unique<ContentHash>();
  return d;
}

void RawFile::sync() {
  if (::fsync(fd_) != 0) throw Error(Exit::io, files::dir_name(path_), "cannot write progress: " + errno_text(errno));
}

void RawFile::close() {
  int fd = fd_;
  fd_ = -1;
  if (fd >= 0 && ::close(fd) != 0) throw Error(Exit::io, path_, "close failed: " + errno_text(errno));
}

}  // namespace traincache::fill
