// WebDataset tar shards as columns: shard patterns expanded, every shard's members indexed once
// (headers only) into samples by key, and members read through libarchive as streams, never
// unpacked to disk. docs/inputs.md describes the layout; docs/design.md why libarchive.
#include <archive.h>
#include <archive_entry.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "file_columns.h"
#include "file_source.h"

namespace traincache::io::source {

namespace {

// ---- shard patterns -----------------------------------------------------------------------------

// The most shards one pattern may name: several ranges multiply ({0..9999}{0..9999} is 10^8 names),
// and every name is built before any is opened.
constexpr uint64_t kMaxShards = 1000000;

// The position of the '}' closing the '{' at `open`, or npos.
std::size_t closing_brace(const std::string& s, std::size_t open) {
  int depth = 0;
  for (std::size_t i = open; i < s.size(); ++i) {
    if (s[i] == '{') ++depth;
    if (s[i] == '}' && --depth == 0) return i;
  }
  return std::string::npos;
}

// The alternatives of a brace body: "A..B" (integers; zero-padded numbers keep their width) or a
// comma list (commas inside nested braces do not split).
std::vector<std::string> brace_alternatives(const std::string& pattern, const std::string& body) {
  const auto dots = body.find("..");
  int64_t a = 0, b = 0;
  if (dots != std::string::npos && parse_int(body.substr(0, dots), a) && parse_int(body.substr(dots + 2), b)) {
    const std::string sa = body.substr(0, dots), sb = body.substr(dots + 2);
    auto padded = [](const std::string& s) { return s.size() > 1 && (s[0] == '0' || (s[0] == '-' && s[1] == '0')); };
    const std::size_t width = padded(sa) || padded(sb) ? std::max(sa.size(), sb.size()) : 0;
    // The count in unsigned arithmetic: b - a overflows int64 near its limits.
    const uint64_t span = a <= b ? static_cast<uint64_t>(b) - static_cast<uint64_t>(a)
                                 : static_cast<uint64_t>(a) - static_cast<uint64_t>(b);
    if (span >= kMaxShards) throw Error(Exit::usage, pattern, "names over 1,000,000 shards");
    std::vector<std::string> out;
    for (int64_t i = a;; i += a <= b ? 1 : -1) {
      std::string n = std::to_string(i < 0 ? 0 - static_cast<uint64_t>(i) : static_cast<uint64_t>(i));
      const std::size_t digits = width > 0 ? width - (i < 0 ? 1 : 0) : 0;
      if (n.size() < digits) n.insert(0, digits - n.size(), '0');
      out.push_back((i < 0 ? "-" : "") + n);
      if (i == b) break;
    }
    return out;
  }
  std::vector<std::string> out{""};
  int depth = 0;
  for (char c : body) {
    if (c == ',' && depth == 0) {
      out.emplace_back();
      continue;
    }
    depth += c == '{' ? 1 : c == '}' ? -1 : 0;
    out.back() += c;
  }
  if (out.size() < 2)
    throw Error(Exit::usage, pattern, "'{" + body + "}' is neither a range {A..B} of integers nor a list {a,b}");
  return out;
}

void expand_braces(const std::string& pattern, const std::string& s, std::vector<std::string>& out) {
  const auto open = s.find('{');
  if (open == std::string::npos) {
    if (s.find('}') != std::string::npos) throw Error(Exit::usage, pattern, "a '}' without its '{'");
    if (out.size() >= kMaxShards) throw Error(Exit::usage, pattern, "names over 1,000,000 shards");
    out.push_back(s);
    return;
  }
  const auto close = closing_brace(s, open);
  if (close == std::string::npos) throw Error(Exit::usage, pattern, "a '{' without its '}'");
  for (const auto& alt : brace_alternatives(pattern, s.substr(open + 1, close - open - 1))) {
    expand_braces(pattern, s.substr(0, open) + alt + s.substr(close + 1), out);
    if (out.size() > kMaxShards) throw Error(Exit::usage, pattern, "names over 1,000,000 shards");
  }
}

// ---- the index of samples -----------------------------------------------------------------------

struct ArchiveCloser {
  void operator()(archive* a) const { archive_read_free(a); }
};
using Archive = std::unique_ptr<archive, ArchiveCloser>;

// `path` opened for reading as a tar stream (any compression libarchive knows).
Archive open_archive(const std::string& path) {
  Archive a(archive_read_new());
  if (!a) throw Error(Exit::internal, path, "libarchive: out of memory");
  archive_read_support_filter_all(a.get());
  archive_read_support_format_tar(a.get());
  archive_read_support_format_gnutar(a.get());
  if (archive_read_open_filename(a.get(), path.c_str(), 1 << 16) != ARCHIVE_OK) {
    const int err = archive_errno(a.get());
    const char* why = archive_error_string(a.get());
    if (err == ENOENT) throw Error(Exit::no_input, path, errno_text(err));
    throw Error(Exit::data, path, std::string("not a readable tar file: ") + (why ? why : "cannot be opened"));
  }
  return a;
}

// The next member's header, or nullptr at the end of the archive; Error(data) for a damaged or
// truncated archive.
archive_entry* next_header(archive* a, const std::string& path) {
  archive_entry* e = nullptr;
  const int r = archive_read_next_header(a, &e);
  if (r == ARCHIVE_EOF) return nullptr;
  if (r < ARCHIVE_WARN) {
    const char* why = archive_error_string(a);
    throw Error(Exit::data, path, std::string("not a readable tar file: ") + (why ? why : "damaged"));
  }
  return e;
}

// The largest member of a kind that is read (docs/inputs.md, "Bad shards"): what a field of that
// kind can plausibly hold, so that a hostile or broken shard costs no more memory than that.
struct MemberLimit {
  int64_t bytes;
  const char* what;
};
constexpr MemberLimit kImageLimit{int64_t{256} << 20, "image members"};  // a JPEG or PNG within the pixel cap
constexpr MemberLimit kTextLimit{int64_t{16} << 20, "text and json members"};
constexpr MemberLimit kValueLimit{int64_t{1} << 20, "label and value members"};  // cls: a number or a name

struct Member {
  std::string field;  // the name after the key: "jpg", "seg.png"
  int64_t entry = 0;  // its position among the shard's members
  int64_t size = 0;
};

struct Sample {
  int shard = 0;
  std::string key;
  std::vector<Member> fields;
  // The member of `field`; of "jpg;png" (alternatives, as WebDataset's to_tuple takes them) the
  // first the sample has.
  const Member* find(const std::string& field) const {
    for (std::size_t start = 0; start <= field.size();) {
      const std::size_t end = std::min(field.find(';', start), field.size());
      for (const auto& m : fields)
        if (field.compare(start, end - start, m.field) == 0 && m.field.size() == end - start) return &m;
      start = end + 1;
    }
    return nullptr;
  }
};

// A member name WebDataset would write: relative, no "..", no empty part. "./" is dropped.
bool safe_name(std::string& name) {
  while (name.rfind("./", 0) == 0) name.erase(0, 2);
  if (name.empty() || name[0] == '/') return false;
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t end = std::min(name.find('/', start), name.size());
    const std::string part = name.substr(start, end - start);
    if (part == ".." || (part.empty() && end < name.size())) return false;
    start = end + 1;
  }
  return true;
}

// Every shard's members grouped into samples, and the readers that fetch their bytes.
class Shards {
 public:
  explicit Shards(std::vector<std::string> paths) : paths_(std::move(paths)) {
    std::unordered_map<std::string, int> seen;  // key -> its shard
    for (std::size_t i = 0; i < paths_.size(); ++i) scan(static_cast<int>(i), seen);
  }

  const std::vector<std::string>& paths() const { return paths_; }
  const std::vector<Sample>& samples() const { return samples_; }
  // "shards/00001.tar: KEY" (and ".FIELD"), for messages.
  std::string where(const Sample& s, const std::string& field = {}) const {
    return paths_[static_cast<std::size_t>(s.shard)] + ": " + s.key + (field.empty() ? "" : "." + field);
  }

  // The bytes of member `m` of sample `s`, refused before reading when larger than `limit` allows.
  // Thread-safe: each call takes a reader of the shard that has not passed the member (the one
  // nearest to it), so reading in order streams each shard once.
  std::string read(const Sample& s, const Member& m, const MemberLimit& limit) const {
    if (m.size > limit.bytes)
      throw Error(Exit::data, where(s, m.field),
                  "is " + format_size(static_cast<uint64_t>(m.size)) + ": " + limit.what + " over " +
                      format_size(static_cast<uint64_t>(limit.bytes)) + " are not read");
    Cursor c = take(s.shard, m.entry);
    const std::string& path = paths_[static_cast<std::size_t>(s.shard)];
    std::string bytes;
    for (; c.next <= m.entry; ++c.next) {
      archive_entry* e = next_header(c.a.get(), path);
      if (!e) throw Error(Exit::data, where(s, m.field), "the shard ended before this member (did it change?)");
      if (c.next < m.entry) continue;
      if (archive_entry_size(e) != m.size)
        throw Error(Exit::data, where(s, m.field), "the member changed since the shard was indexed");
      bytes.resize(static_cast<std::size_t>(m.size));
      std::size_t got = 0;
      while (got < bytes.size()) {
        const la_ssize_t n = archive_read_data(c.a.get(), &bytes[got], bytes.size() - got);
        if (n <= 0) {
          const char* why = archive_error_string(c.a.get());
          throw Error(Exit::data, where(s, m.field),
                      std::string("cannot be read: ") + (n == 0 ? "the shard is truncated"
                                                         : why  ? why
                                                                : "damaged"));
        }
        got += static_cast<std::size_t>(n);
      }
    }
    give_back(std::move(c));
    return bytes;
  }

 private:
  struct Cursor {
    Archive a;
    int shard = 0;
    int64_t next = 0;  // the member next_header() gives next
  };

  void scan(int shard, std::unordered_map<std::string, int>& seen) {
    const std::string& path = paths_[static_cast<std::size_t>(shard)];
    Archive a = open_archive(path);
    Sample* cur = nullptr;
    int64_t entry = -1;
    while (archive_entry* e = next_header(a.get(), path)) {
      ++entry;
      if (archive_entry_filetype(e) != AE_IFREG) continue;  // directories, links
      const char* raw = archive_entry_pathname(e);
      std::string name = raw ? raw : "";
      if (!safe_name(name))
        throw Error(Exit::data, path,
                    "member '" + std::string(raw ? raw : "") + "': not a relative name inside the shard");
      const std::size_t slash = name.rfind('/');
      const std::size_t dot = name.find('.', slash == std::string::npos ? 0 : slash + 1);
      const std::size_t base = slash == std::string::npos ? 0 : slash + 1;
      if (dot == std::string::npos || dot == base) continue;  // no field (WebDataset skips these too)
      const std::string key = name.substr(0, dot), field = name.substr(dot + 1);
      if (!cur || cur->key != key) {
        if (auto [it, fresh] = seen.emplace(key, shard); !fresh)
          throw Error(Exit::data, path,
                      "duplicate key '" + key + "'" +
                          (it->second == shard ? " (its members are not together)"
                                               : " (also in " + paths_[static_cast<std::size_t>(it->second)] + ")"));
        samples_.push_back({shard, key, {}});
        cur = &samples_.back();
      } else if (std::any_of(cur->fields.begin(), cur->fields.end(),
                             [&](const Member& m) { return m.field == field; })) {
        throw Error(Exit::data, path, "duplicate member '" + name + "'");
      }
      cur->fields.push_back({field, entry, static_cast<int64_t>(archive_entry_size(e))});
    }
    check_end_blocks(a.get(), path);
  }

  // A plain tar ends with two zero blocks (writers pad its last record with more); libarchive reads
  // a shard cut at a member boundary (an interrupted download or copy) as a shorter, whole one.
  // Compressed shards are not checked here: a cut breaks their stream, which libarchive reports.
  static void check_end_blocks(archive* a, const std::string& path) {
    if (archive_filter_code(a, 0) != ARCHIVE_FILTER_NONE) return;
    const int fd = files::open_input(path);
    struct stat st {};
    char tail[1024] = {};
    const bool read = ::fstat(fd, &st) == 0 && st.st_size >= static_cast<off_t>(sizeof tail) &&
                      ::pread(fd, tail, sizeof tail, st.st_size - static_cast<off_t>(sizeof tail)) ==
                          static_cast<ssize_t>(sizeof tail);
    ::close(fd);
    if (!read || std::any_of(tail, tail + sizeof tail, [](char c) { return c != 0; }))
      throw Error(Exit::data, path,
                  "ends without the end-of-archive blocks: truncated (an interrupted download or copy?)");
  }

  Cursor take(int shard, int64_t entry) const {
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto best = idle_.end();
      for (auto it = idle_.begin(); it != idle_.end(); ++it)
        if (it->shard == shard && it->next <= entry && (best == idle_.end() || it->next > best->next)) best = it;
      if (best != idle_.end()) {
        Cursor c = std::move(*best);
        idle_.erase(best);
        return c;
      }
    }
    return {open_archive(paths_[static_cast<std::size_t>(shard)]), shard, 0};
  }

  void give_back(Cursor c) const {
    std::lock_guard<std::mutex> lk(mu_);
    if (idle_.size() >= kIdle) idle_.erase(idle_.begin());  // the oldest
    idle_.push_back(std::move(c));
  }

  static constexpr std::size_t kIdle = 64;
  std::vector<std::string> paths_;
  std::vector<Sample> samples_;
  mutable std::mutex mu_;
  mutable std::vector<Cursor> idle_;
};

// The shards of `pattern`, indexed once per process while a column holds them (and again when a
// shard's size or modification time changes).
std::shared_ptr<const Shards> open_shards(const std::string& pattern) {
  const auto paths = expand_shards(pattern);
  std::string id = pattern + '\0';
  for (const auto& p : paths) {
    // Missing, unreadable or not a regular file (a FIFO would block the index): 66, as any input.
    const int fd = files::open_input(p);
    struct stat st;
    const int got = ::fstat(fd, &st);
    ::close(fd);
    if (got != 0) throw Error(Exit::io, p, errno_text(errno));
    id += p + '\0' + std::to_string(st.st_size) + '\0' + std::to_string(st.st_mtim.tv_sec) + '.' +
          std::to_string(st.st_mtim.tv_nsec) + '\0';
  }
  // One slot per set of shards: two columns over the same shards index them once, columns over
  // different ones index them side by side, and slots whose index nobody holds are dropped.
  struct Slot {
    std::mutex mu;
    std::weak_ptr<const Shards> shards;
  };
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<Slot>> open;
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> lk(mu);
    for (auto it = open.begin(); it != open.end();)
      it = it->second.use_count() == 1 && it->second->shards.expired() ? open.erase(it) : std::next(it);
    auto& s = open[id];
    if (!s) s = std::make_shared<Slot>();
    slot = s;
  }
  std::lock_guard<std::mutex> lk(slot->mu);
  if (auto held = slot->shards.lock()) return held;
  auto shards = std::make_shared<const Shards>(paths);
  slot->shards = shards;
  // The latest index is kept while the process lives: a tool that looks at the shards' fields
  // before it opens its columns (defaults, messages) must not index them twice.
  static std::shared_ptr<const Shards> latest;
  std::lock_guard<std::mutex> keep(mu);
  latest = shards;
  return shards;
}

// ---- columns ------------------------------------------------------------------------------------

// True when `field` (or each of its ';' alternatives) names images by its extension.
bool image_field(const std::string& field) {
  static const std::set<std::string> kImages{"jpg", "jpeg", "png", "ppm", "pgm", "bmp", "webp", "tif", "tiff"};
  for (std::size_t start = 0; start <= field.size();) {
    const std::size_t end = std::min(field.find(';', start), field.size());
    const std::string alt = field.substr(start, end - start);
    std::string low;
    for (char c : alt.substr(alt.rfind('.') + 1)) low += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!kImages.count(low)) return false;
    start = end + 1;
  }
  return true;
}

// The samples that are rows: those with every field `need` names. A sample without one is an
// error, or with `tolerate` left out (counted in `left_out`, the first described in `first`).
std::vector<const Sample*> rows_of(const Shards& sh, const std::vector<std::string>& need, bool tolerate,
                                   int64_t& left_out, std::string& first) {
  std::vector<const Sample*> rows;
  for (const auto& s : sh.samples()) {
    const auto missing = std::find_if(need.begin(), need.end(), [&](const std::string& f) { return !s.find(f); });
    if (missing == need.end()) {
      rows.push_back(&s);
      continue;
    }
    if (!tolerate) throw Error(Exit::data, sh.where(s), "no field '" + *missing + "'");
    if (left_out++ == 0) first = sh.where(s) + " has no '" + *missing + "'";
  }
  return rows;
}

// Every row's value of field `field` as text: the member's bytes, or (json.FIELD) a field of its
// json member (a string, or a number as written).
std::vector<std::string> text_values(const Shards& sh, const std::vector<const Sample*>& rows, const std::string& field,
                                     Role role) {
  const bool json_field = field.rfind("json.", 0) == 0;
  const std::string member = json_field ? "json" : field;
  const MemberLimit& limit = json_field || role == Role::text ? kTextLimit : kValueLimit;
  std::vector<std::string> out;
  out.reserve(rows.size());
  for (const Sample* s : rows) {
    std::string bytes = sh.read(*s, *s->find(member), limit);
    if (!json_field) {
      out.push_back(std::move(bytes));
      continue;
    }
    const std::string name = field.substr(5);
    nlohmann::json doc = nlohmann::json::parse(bytes, nullptr, false);
    if (doc.is_discarded() || !doc.is_object()) throw Error(Exit::data, sh.where(*s, "json"), "not a JSON object");
    auto it = doc.find(name);
    if (it == doc.end()) throw Error(Exit::data, sh.where(*s, "json"), "no field '" + name + "'");
    if (it->is_string())
      out.push_back(it->get<std::string>());
    else if (it->is_number_integer())
      out.push_back(it->dump());
    else
      throw Error(Exit::data, sh.where(*s, "json"), "field '" + name + "' is neither a string nor an integer");
  }
  return out;
}

// A field that no sample has is a mistake in the command, not in the data (64, as a manifest's
// unknown field is): named with the fields the shards do have, and the nearest of them.
void require_known_fields(const Shards& sh, const std::string& pattern, const std::vector<std::string>& need) {
  std::set<std::string> have;
  for (const auto& s : sh.samples())
    for (const auto& m : s.fields) have.insert(m.field);
  if (have.empty()) return;  // no samples at all: said by the caller
  for (const auto& f : need) {
    bool known = false;
    for (std::size_t start = 0; start <= f.size() && !known;) {
      const std::size_t end = std::min(f.find(';', start), f.size());
      known = have.count(f.substr(start, end - start)) > 0;
      start = end + 1;
    }
    if (known) continue;
    std::string hint;
    std::size_t best = 3;
    for (const auto& h : have)
      if (const std::size_t d = edit_distance(h, f); d < best) best = d, hint = "; did you mean '" + h + "'?";
    throw Error(Exit::usage, pattern,
                "no sample has a field '" + f + "' (the shards' fields: " +
                    name_list(std::vector<std::string>(have.begin(), have.end())) + ")" + hint);
  }
}

std::string trimmed(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// What every column of tar shards says beside its rows: how many samples were left out, and
// where each shard's rows begin.
struct TarRows {
  std::string warning;
  std::vector<int64_t> groups;
};

template <class Base>
class TarColumn : public Base {
 public:
  template <class... Args>
  explicit TarColumn(TarRows tar, Args&&... args) : Base(std::forward<Args>(args)...), tar_(std::move(tar)) {}
  std::string warning() const override { return tar_.warning.empty() ? Base::warning() : tar_.warning; }
  std::vector<int64_t> row_groups() const override { return tar_.groups; }

 private:
  TarRows tar_;
};

// Labels and values: integers when every (trimmed) value is one, else strings (labels: names
// numbered in --label-order).
std::unique_ptr<Column> value_column(const std::string& pattern, const std::string& name, Role role,
                                     std::vector<std::string> values, const FileOptions& files,
                                     const std::vector<std::string>& where, const TarRows& tar) {
  std::vector<int64_t> ints(values.size());
  bool all_int = true;
  for (std::size_t i = 0; i < values.size() && all_int; ++i) all_int = parse_int(trimmed(values[i]), ints[i]);
  if (all_int)
    return std::make_unique<TarColumn<IntColumn>>(tar, Kind::tar, pattern, name, std::move(ints),
                                                  std::vector<std::string>{});
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i].find('\0') != std::string::npos) throw Error(Exit::data, where[i], "holds a NUL byte");
    if (role == Role::labels) values[i] = trimmed(values[i]);
  }
  values = utf8_names(std::move(values), files.strict_utf8, [&](std::size_t i) { return where[i]; });
  if (role == Role::labels) return labels_from_names(Kind::tar, pattern, name, values, files.label_order, tar.warning);
  return std::make_unique<TarColumn<StringColumn>>(tar, Kind::tar, pattern, name, std::move(values));
}

}  // namespace

std::vector<std::string> brace_expansion(const std::string& pattern) {
  std::vector<std::string> names;
  expand_braces(pattern, pattern, names);
  return names;
}

std::vector<std::string> expand_shards(const std::string& pattern) {
  if (pattern.empty()) throw Error(Exit::usage, "--input", "an empty shard pattern");
  std::vector<std::string> out;
  const std::vector<std::string> names = brace_expansion(pattern);
  for (const auto& n : names) {
    if (n.find_first_of("*?[") == std::string::npos) {
      out.push_back(n);
      continue;
    }
    glob_t g{};
    const int r = ::glob(n.c_str(), GLOB_ERR, nullptr, &g);
    if (r == 0)
      for (std::size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    globfree(&g);
    if (r == GLOB_NOMATCH) throw Error(Exit::no_input, n, "matches no file");
    if (r != 0) throw Error(Exit::no_input, n, "cannot be matched (a folder cannot be read)");
  }
  std::set<std::string> once;
  for (const auto& p : out)
    if (!once.insert(p).second) throw Error(Exit::usage, pattern, "names shard " + p + " twice");
  return out;
}

TarFields tar_fields(const std::string& pattern) {
  auto shards = open_shards(pattern);
  std::set<std::string> all;
  for (const auto& s : shards->samples())
    for (const auto& m : s.fields) all.insert(m.field);
  TarFields f;
  for (const auto& name : all) {
    f.all.push_back(name);
    if (image_field(name)) f.images.push_back(name);
  }
  return f;
}

std::unique_ptr<Column> open_tar_column(const std::string& pattern, const std::string& name, Role role,
                                        const FileOptions& files) {
  if (name.empty())
    throw Error(Exit::usage, pattern, "name the field of the tar shards to read (jpg, cls, txt, json.FIELD, __key__)");
  auto shards = open_shards(pattern);
  const bool keys = name == "__key__";
  const std::string own = name.rfind("json.", 0) == 0 ? "json" : name;
  std::vector<std::string> need = files.sample_fields;
  need.erase(std::remove(need.begin(), need.end(), "__key__"), need.end());
  for (auto& f : need)
    if (f.rfind("json.", 0) == 0) f = "json";
  if (!keys && std::find(need.begin(), need.end(), own) == need.end()) need.push_back(own);
  int64_t left_out = 0;
  std::string first;
  TarRows tar;
  require_known_fields(*shards, pattern, need);
  auto rows = rows_of(*shards, need, files.tolerate_unreadable, left_out, first);
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (i == 0 || rows[i]->shard != rows[i - 1]->shard) tar.groups.push_back(static_cast<int64_t>(i));
  if (left_out > 0)
    tar.warning = std::to_string(left_out) + (left_out == 1 ? " sample" : " samples") +
                  " without every field named left out (--on-error skip); the first: " + first;
  if (rows.empty() && left_out == 0) throw Error(Exit::data, pattern, "the shards hold no samples");
  if (rows.empty()) throw Error(Exit::data, pattern, "no sample has every field named; the first: " + first);
  std::vector<std::string> where;
  for (const Sample* s : rows) where.push_back(shards->where(*s, keys ? "" : own));
  if (keys) {
    std::vector<std::string> k;
    for (const Sample* s : rows) k.push_back(s->key);
    k = utf8_names(std::move(k), files.strict_utf8, [&](std::size_t i) { return where[i]; });
    return std::make_unique<TarColumn<StringColumn>>(tar, Kind::tar, pattern, name, std::move(k));
  }
  if (role == Role::images) {
    if (!image_field(name))
      throw Error(
          Exit::data, pattern,
          "field '" + name + "' holds no images (image fields end in jpg, png, webp, ...; text is read with --text)");
    ImageColumn::Bytes bytes = [shards, rows, name](std::size_t i) {
      const Sample* s = rows[i];
      return shards->read(*s, *s->find(name), kImageLimit);
    };
    std::vector<std::string> ids;  // KEY.FIELD: the same samples digest alike whatever the shards are called
    for (const Sample* s : rows) ids.push_back(s->key + "." + s->find(name)->field);
    return std::make_unique<TarColumn<ImageColumn>>(tar, Kind::tar, pattern, name, std::move(bytes), std::move(where),
                                                    std::move(ids), files.preprocess, files.tolerate_unreadable);
  }
  std::vector<std::string> values = text_values(*shards, rows, name, role);
  if (role != Role::text) return value_column(pattern, name, role, std::move(values), files, where, tar);
  int64_t replaced = 0;
  values = utf8_names(
      std::move(values), files.strict_utf8, [&](std::size_t i) { return where[i]; }, &replaced);
  return std::make_unique<TarColumn<StringColumn>>(tar, Kind::tar, pattern, name, std::move(values), replaced);
}

}  // namespace traincache::io::source
