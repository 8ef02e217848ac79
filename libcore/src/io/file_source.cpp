// Image folders and manifests as columns: the listing of files (ImageFolder's order, or a
// manifest's lines), labels made from class names, and images decoded and preprocessed on read.
#include "file_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "file_columns.h"
#include "traincache/base/error.h"
#include "traincache/base/files.h"
#include "traincache/base/format.h"
#include "traincache/base/json_input.h"
#include "traincache/base/json_text.h"
#include "traincache/text/tokenizer.h"

namespace fs = std::filesystem;

namespace traincache::io::source {

namespace {

// ---- image folders ------------------------------------------------------------------------------

bool is_image_name(const std::string& name) {
  // torchvision's IMG_EXTENSIONS: files with these are items (the ones we cannot decode fail then).
  static const char* const kExt[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* e : kExt) {
    std::size_t n = std::strlen(e);
    if (lower.size() > n && lower.compare(lower.size() - n, n, e) == 0) return true;
  }
  return false;
}

struct Listing {
  std::vector<std::string> classes;
  std::vector<std::string> files;  // relative to the folder
  std::vector<int64_t> labels;
};

// The image files under class folder `dir` in torchvision's order: directories sorted by path,
// files sorted by name within each; links followed (each directory once); hidden entries skipped.
void list_class(const fs::path& root, const fs::path& dir, std::set<std::pair<dev_t, ino_t>>& seen,
                std::map<std::string, std::vector<std::string>>& by_dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !seen.insert({st.st_dev, st.st_ino}).second) return;
  std::error_code ec;
  std::vector<std::string>& names = by_dir[fs::relative(dir, root).generic_string()];
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    std::error_code entry_ec;  // a link loop or dangling link: an item that fails when it is read
    if (it->is_directory(entry_ec))
      list_class(root, it->path(), seen, by_dir);
    else if (is_image_name(name))
      names.push_back(name);
  }
  if (ec) throw Error(Exit::io, dir.string(), errno_text(ec.value()));
}

Listing list_folder(const std::string& dir) {
  std::error_code ec;
  Listing out;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code entry_ec;  // a link loop at the top level is not a class folder
    if (!name.empty() && name[0] != '.' && it->is_directory(entry_ec)) out.classes.push_back(name);
  }
  if (ec) throw Error(Exit::no_input, dir, errno_text(ec.value()));
  std::sort(out.classes.begin(), out.classes.end());
  if (out.classes.empty())
    throw Error(Exit::data, dir,
                "no class folders: an image folder holds one subfolder per class (ImageFolder layout)");
  std::set<std::pair<dev_t, ino_t>> seen;
  for (std::size_t k = 0; k < out.classes.size(); ++k) {
    std::map<std::string, std::vector<std::string>> by_dir;
    list_class(dir, fs::path(dir) / out.classes[k], seen, by_dir);
    std::size_t before = out.files.size();
    for (auto& [sub, names] : by_dir) {
      std::sort(names.begin(), names.end());
      for (const auto& n : names) {
        out.files.push_back(sub + "/" + n);
        out.labels.push_back(static_cast<int64_t>(k));
      }
    }
    if (out.files.size() == before)
      throw Error(Exit::data, (fs::path(dir) / out.classes[k]).string(),
                  "class folder holds no image files (.jpg, .jpeg, .png)");
  }
  return out;
}

// ---- manifests ----------------------------------------------------------------------------------

// A manifest's fields and rows; a cell is absent when the line lacks the field (JSON Lines) or
// holds something other than a string or a number.
struct Table {
  std::vector<std::string> fields;
  std::vector<std::vector<std::optional<std::string>>> rows;
  std::vector<int64_t> lines;                                 // the line each row starts on
  std::set<std::pair<std::size_t, std::size_t>> json_ints;    // (row, field) cells that were JSON integers
  std::set<std::pair<std::size_t, std::size_t>> json_floats;  // ... JSON numbers that are not integers
  std::map<std::pair<std::size_t, std::size_t>, std::vector<std::string>> json_lists;  // lists of strings
  std::map<std::size_t, int64_t> utf8_replaced;  // field -> ill-formed UTF-8 sequences replaced in JSON lines
};

// CSV as RFC 4180 (quotes, doubled quotes, line breaks inside quotes) or TSV (tab-separated, no
// quoting). The first record is the header; blank lines are skipped.
Table parse_delimited(const std::string& path, const std::string& text, char sep) {
  Table t;
  std::vector<std::string> rec;
  std::string field;
  bool quoted = false, any = false, have_header = false;
  int64_t line = 1, rec_line = 1;
  auto end_record = [&] {
    rec.push_back(std::move(field));
    field.clear();
    if (!(rec.size() == 1 && rec[0].empty() && !any)) {
      if (!have_header) {
        t.fields = rec;
        have_header = true;
      } else {
        if (rec.size() != t.fields.size())
          throw Error(Exit::data, path + ":" + std::to_string(rec_line),
                      std::to_string(rec.size()) + " fields, but the header has " + std::to_string(t.fields.size()));
        t.rows.emplace_back(rec.begin(), rec.end());
        t.lines.push_back(rec_line);
      }
    }
    rec.clear();
    any = false;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        if (c == '\n') ++line;
        field += c;
      }
    } else if (c == '"' && sep == ',' && field.empty()) {
      quoted = any = true;
    } else if (c == sep) {
      rec.push_back(std::move(field));
      field.clear();
      any = true;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      end_record();
      rec_line = ++line;
    } else {
      field += c;
      any = true;
    }
  }
  if (quoted) throw Error(Exit::data, path + ":" + std::to_string(rec_line), "unterminated quoted field");
  if (!field.empty() || !rec.empty() || any) end_record();
  if (!have_header) throw Error(Exit::data, path, "empty manifest: no header line");
  return t;
}

// A marker for the ill-formed UTF-8 of a JSON line: a noncharacter (U+FDD0..U+FDEF) that the line
// holds neither as UTF-8 nor escaped, so that each field's replacements can be counted after
// parsing. U+FFFD (counted by line, not by field) when every one occurs.
std::string utf8_marker(const std::string& line) {
  std::string lower = line;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (int c = 0xFDD0; c <= 0xFDEF; ++c) {
    const std::string utf8{'\xEF', '\xB7', static_cast<char>(0x90 + c - 0xFDD0)};
    char escaped[8];
    std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
    if (line.find(utf8) == std::string::npos && lower.find(escaped) == std::string::npos) return utf8;
  }
  return "\xEF\xBF\xBD";
}

// Replaces `marker` in `s` with U+FFFD; returns how many there were.
int64_t unmark(std::string& s, const std::string& marker) {
  int64_t n = 0;
  for (std::size_t at = s.find(marker); at != std::string::npos; at = s.find(marker, at + 3), ++n)
    s.replace(at, marker.size(), "\xEF\xBF\xBD");
  return n;
}

// Why a JSON Lines line does not parse, as nlohmann's parser says, without its exception prefix and
// the text it had read: " at byte 11: invalid string: surrogate U+D800..U+DBFF must be followed by
// U+DC00..U+DFFF".
std::string json_reason(const std::string& line) {
  try {
    const nlohmann::json parsed = nlohmann::json::parse(line);
    (void)parsed;
  } catch (const nlohmann::json::parse_error& e) {
    std::string why = e.what();
    if (auto dash = why.find(" - "); dash != std::string::npos) why = why.substr(dash + 3);
    if (auto read = why.find("; last read:"); read != std::string::npos) why.resize(read);
    return " at byte " + std::to_string(e.byte) + ": " + why;
  } catch (const nlohmann::json::exception&) {
  }
  return "";
}

Table parse_jsonl(const std::string& path, const std::string& text, bool strict_utf8) {
  Table t;
  std::map<std::string, std::size_t> index;
  std::size_t pos = 0;
  for (int64_t line = 1; pos < text.size(); ++line) {
    std::size_t nl = text.find('\n', pos);
    std::string s = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text.size() : nl + 1;
    if (s.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string marker;  // set when the line's ill-formed UTF-8 was marked
    nlohmann::json j = parse_json_input(s, path + ":" + std::to_string(line));
    const std::size_t bad = j.is_discarded() ? traincache::text::first_invalid_utf8(s) : std::string::npos;
    if (bad != std::string::npos) {
      if (strict_utf8)
        throw Error(
            Exit::data, path + ":" + std::to_string(line),
            "invalid UTF-8 at byte " + std::to_string(bad + 1) + " (without --strict-utf8 it is replaced with U+FFFD)");
      marker = utf8_marker(s);
      traincache::text::repair_utf8(s, marker);
      j = parse_json_input(s, path + ":" + std::to_string(line));
    }
    if (j.is_discarded()) throw Error(Exit::data, path + ":" + std::to_string(line), "invalid JSON" + json_reason(s));
    if (!j.is_object()) throw Error(Exit::data, path + ":" + std::to_string(line), "not a JSON object");
    std::vector<std::optional<std::string>> row(t.fields.size());
    for (auto& [key, v] : j.items()) {
      std::string k = key;
      if (!marker.empty()) unmark(k, marker);
      auto [it, added] = index.emplace(k, t.fields.size());
      if (added) {
        t.fields.push_back(k);
        for (auto& r : t.rows) r.emplace_back();
        row.emplace_back();
      }
      if (v.is_string()) {
        row[it->second] = v.get<std::string>();
        if (!marker.empty()) t.utf8_replaced[it->second] += unmark(*row[it->second], marker);
      } else if (v.is_number_integer()) {
        row[it->second] = json_text(v);
        t.json_ints.emplace(t.rows.size(), it->second);
      } else if (v.is_number_float()) {  // its shortest text, which reads back as the same double
        row[it->second] = json_text(v);
        t.json_floats.emplace(t.rows.size(), it->second);
      } else if (v.is_array() && std::all_of(v.begin(), v.end(), [](const auto& e) { return e.is_string(); })) {
        auto& list = t.json_lists[{t.rows.size(), it->second}] = v.get<std::vector<std::string>>();
        for (auto& e : list)
          if (!marker.empty()) t.utf8_replaced[it->second] += unmark(e, marker);
      }
    }
    t.rows.push_back(std::move(row));
    t.lines.push_back(line);
  }
  if (t.rows.empty()) throw Error(Exit::data, path, "empty manifest: no JSON lines");
  return t;
}

bool ends_with(const std::string& s, const char* suffix) {
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  std::size_t n = std::strlen(suffix);
  return lower.size() >= n && lower.compare(lower.size() - n, n, suffix) == 0;
}

Table read_manifest(const std::string& path, bool strict_utf8 = false) {
  std::string text = read_input_file(path);
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);  // a UTF-8 byte order mark (Excel writes one)
  if (ends_with(path, ".jsonl") || ends_with(path, ".ndjson")) return parse_jsonl(path, text, strict_utf8);
  return parse_delimited(path, text, ends_with(path, ".tsv") ? '\t' : ',');
}

// The values of field `name`, every row's present (else Error(data) naming the line).
std::vector<std::string> field_values(const std::string& path, const Table& t, const std::string& name) {
  auto it = std::find(t.fields.begin(), t.fields.end(), name);
  if (it == t.fields.end()) {
    std::string hint;
    for (const auto& f : t.fields)
      if (edit_distance(f, name) <= 2) hint = "; did you mean '" + f + "'?";
    throw Error(Exit::usage, path, "no field '" + name + "' (fields: " + name_list(t.fields) + ")" + hint);
  }
  const std::size_t k = static_cast<std::size_t>(it - t.fields.begin());
  std::vector<std::string> out;
  out.reserve(t.rows.size());
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    if (!t.rows[r][k])
      throw Error(Exit::data, path + ":" + std::to_string(t.lines[r]),
                  "field '" + name + "' is missing or not a string or integer");
    out.push_back(*t.rows[r][k]);
  }
  return out;
}

}  // namespace

std::vector<std::string> manifest_fields(const std::string& path) { return read_manifest(path).fields; }

void require_input(const std::string& path) { require_input(resolve(path)); }

void require_input(const Resolved& input) {
  const std::string& path = input.path;
  if (path.empty() || input.kind == Kind::shm) return;
  const auto files = input.kind == Kind::tar ? expand_shards(path) : std::vector<std::string>{path};
  for (const auto& f : files) {
    struct stat st;
    if (::stat(f.c_str(), &st) != 0) throw Error(Exit::no_input, f, errno_text(errno));
  }
}

std::unique_ptr<Column> open_folder_column(const std::string& dir, const std::string& name, const FileOptions& files) {
  if (name != "image" && name != "label" && name != "path")
    throw Error(Exit::usage, dir, "an image folder has the columns image, label and path; '" + name + "' is none");
  Listing l = list_folder(dir);
  if (name == "label")
    return std::make_unique<IntColumn>(Kind::image_folder, dir, name, l.labels,
                                       utf8_names(l.classes, files.strict_utf8, [&](std::size_t i) {
                                         return (fs::path(dir) / l.classes[i]).string();
                                       }));
  if (name == "path")
    return std::make_unique<StringColumn>(
        Kind::image_folder, dir, name,
        utf8_names(l.files, files.strict_utf8, [&](std::size_t i) { return (fs::path(dir) / l.files[i]).string(); }));
  std::vector<std::string> full, shown;
  for (const auto& f : l.files) {
    full.push_back((fs::path(dir) / f).string());
    shown.push_back(full.back());
  }
  return std::make_unique<ImageColumn>(Kind::image_folder, dir, name, std::move(full), std::move(shown), l.files,
                                       files.preprocess, files.tolerate_unreadable);
}

// A JSON Lines field of lists of strings, as one list per row, each `width` long (a string counts
// as a list of one); `width` stays 0 when no row holds a list.
std::vector<std::string> list_values(const std::string& path, const Table& t, const std::string& name, int64_t& width) {
  const std::size_t k = static_cast<std::size_t>(std::find(t.fields.begin(), t.fields.end(), name) - t.fields.begin());
  width = 0;
  for (const auto* cells : {&t.json_ints, &t.json_floats})
    for (const auto& cell : *cells)
      if (cell.second == k)
        throw Error(Exit::data, path + ":" + std::to_string(t.lines[cell.first]),
                    "field '" + name + "' is a number, not a string");
  if (std::none_of(t.json_lists.begin(), t.json_lists.end(), [&](const auto& c) { return c.first.second == k; }))
    return field_values(path, t, name);
  std::vector<std::string> out;
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    const std::string where = path + ":" + std::to_string(t.lines[r]);
    auto list = t.json_lists.find({r, k});
    std::vector<std::string> one;
    if (list == t.json_lists.end() && t.rows[r][k]) one.push_back(*t.rows[r][k]);
    const auto& v = list == t.json_lists.end() ? one : list->second;
    if (v.empty())
      throw Error(Exit::data, where,
                  "field '" + name + "' is " +
                      (list == t.json_lists.end() ? "missing or not a string or a list of strings" : "an empty list"));
    if (width == 0) width = static_cast<int64_t>(v.size());
    if (static_cast<int64_t>(v.size()) != width)
      throw Error(Exit::data, where,
                  "field '" + name + "' holds " + std::to_string(v.size()) + " strings but the first row holds " +
                      std::to_string(width) + " (every row needs the same number)");
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// A text field: JSON values must be strings (or lists of strings, the same number in every row);
// ill-formed UTF-8 in CSV/TSV values is replaced (or, strictly, refused) here, in JSON Lines while
// parsing.
std::unique_ptr<Column> text_column(const std::string& path, const std::string& name, const Table& t,
                                    bool strict_utf8) {
  int64_t width = 0;
  std::vector<std::string> values = list_values(path, t, name, width);
  auto field = t.utf8_replaced.find(
      static_cast<std::size_t>(std::find(t.fields.begin(), t.fields.end(), name) - t.fields.begin()));
  int64_t replaced = field == t.utf8_replaced.end() ? 0 : field->second;
  for (std::size_t r = 0; r < values.size(); ++r) {
    const std::string where = path + ":" + std::to_string(t.lines[width > 0 ? r / static_cast<std::size_t>(width) : r]);
    const std::size_t bad = traincache::text::first_invalid_utf8(values[r]);
    if (bad == std::string::npos) continue;
    if (strict_utf8)
      throw Error(Exit::data, where,
                  "invalid UTF-8 in field '" + name + "' at byte " + std::to_string(bad + 1) +
                      " (without --strict-utf8 it is replaced with U+FFFD)");
    replaced += traincache::text::repair_utf8(values[r]);
  }
  return std::make_unique<StringColumn>(Kind::manifest, path, name, std::move(values), replaced, width);
}

// A label field holding numbers and names alike is numbered as names (the integer 3 need not stay
// class 3, nor 0.5 stay 0.5): the reader is told, naming the first value that is not a number
// (`kind`: "integer" or "numeric").
std::string mixed_labels_warning(const std::string& path, const Table& t, const std::string& name,
                                 const std::vector<std::string>& values, std::size_t n_num, std::size_t first_other,
                                 const std::string& kind) {
  if (n_num == 0) return {};
  return path + ":" + std::to_string(t.lines[first_other]) + ": field '" + name + "' holds " + std::to_string(n_num) +
         " " + kind + " labels and " + std::to_string(values.size() - n_num) + " that are not ('" +
         values[first_other] + "' the first): every label is read as a name and numbered 0..K-1 in --label-order, " +
         "so the " + (kind == "integer" ? "integers" : "numbers") + " do not keep their values";
}

// v as a float label's value: a JSON number in JSON Lines (`json_number`), else text of digits with
// a point or an exponent (std::from_chars: locale-free, no hex, no "nan"; "007" or "+5" are not
// numbers here, as they are not integers: codes stay as written); finite.
bool parse_number(const std::string& v, bool jsonl, bool json_number, double& out) {
  const bool decimal_text =
      v.find_first_not_of("0123456789.eE+-") == std::string::npos && v.find_first_of(".eE") != std::string::npos;
  if (!(jsonl ? json_number : decimal_text) || v.find_first_of("0123456789") == std::string::npos) return false;
  const char* begin = v.data() + (v[0] == '+' ? 1 : 0);
  const auto [end, ec] = std::from_chars(begin, v.data() + v.size(), out);
  return ec == std::errc() && end == v.data() + v.size() && std::isfinite(out);
}

// Field k's values as numbers where every one is: the integers open_manifest_column found
// (`is_int`, `ints`) and the other numbers (first_other: the first value that is neither, else
// values.size()); how many are.
std::size_t numbers_of(const Table& t, std::size_t k, bool jsonl, const std::vector<std::string>& values,
                       const std::vector<bool>& is_int, const std::vector<int64_t>& ints, std::vector<double>& nums,
                       std::size_t& first_other) {
  std::size_t n = 0;
  nums.assign(values.size(), 0);
  first_other = values.size();
  for (std::size_t i = 0; i < values.size(); ++i) {
    const bool json_number = t.json_ints.count({i, k}) || t.json_floats.count({i, k});
    if (is_int[i]) nums[i] = static_cast<double>(ints[i]);
    if (is_int[i] || parse_number(values[i], jsonl, json_number, nums[i]))
      ++n;
    else if (first_other == values.size())
      first_other = i;
  }
  return n;
}

std::unique_ptr<Column> open_manifest_column(const std::string& path, const std::string& name, Role role,
                                             const FileOptions& files) {
  Table t = read_manifest(path, role == Role::text && files.strict_utf8);
  if (role == Role::text) return text_column(path, name, t, files.strict_utf8);
  std::vector<std::string> values = field_values(path, t, name);
  for (std::size_t i = 0; i < values.size(); ++i)
    if (values[i].find('\0') != std::string::npos)
      throw Error(Exit::data, path + ":" + std::to_string(t.lines[i]), "field '" + name + "' holds a NUL byte");
  // Integers when every value is one as written: a JSON string ("5") or a number with a sign or
  // leading zeros ("007", "+5") keeps the whole column as strings, so keys stay as the user wrote them.
  const std::size_t k = static_cast<std::size_t>(std::find(t.fields.begin(), t.fields.end(), name) - t.fields.begin());
  const bool jsonl = ends_with(path, ".jsonl") || ends_with(path, ".ndjson");
  std::vector<int64_t> ints(values.size());
  std::vector<bool> is_int(values.size());
  std::size_t n_int = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::string& v = values[i];
    const bool plain = !v.empty() && v[0] != '+' && !(v.size() > 1 && (v[0] == '0' || (v[0] == '-' && v[1] == '0')));
    is_int[i] = plain && (!jsonl || t.json_ints.count({i, k})) && parse_int(v, ints[i]);
    n_int += is_int[i];
  }
  const bool all_int = n_int == values.size();
  if (role != Role::labels)  // JSON numbers that are not integers serve as labels only
    for (const auto& cell : t.json_floats)
      if (cell.second == k)
        throw Error(Exit::data, path + ":" + std::to_string(t.lines[cell.first]),
                    "field '" + name + "' is missing or not a string or integer");
  if (role == Role::images) {
    const fs::path base = fs::path(path).parent_path();
    std::vector<std::string> full, shown;
    for (std::size_t i = 0; i < values.size(); ++i) {
      const std::string where = path + ":" + std::to_string(t.lines[i]) + ": " + values[i];
      if (values[i].empty()) throw Error(Exit::data, path + ":" + std::to_string(t.lines[i]), "empty path");
      full.push_back(fs::path(values[i]).is_absolute() ? values[i] : (base / values[i]).string());
      struct stat st;
      if (::stat(full.back().c_str(), &st) != 0 && !files.tolerate_unreadable)
        throw UnreadableFile(Exit::no_input, where, errno_text(errno));
      shown.push_back(where);
    }
    return std::make_unique<ImageColumn>(Kind::manifest, path, name, std::move(full), std::move(shown), values,
                                         files.preprocess, files.tolerate_unreadable);
  }
  if (all_int)
    return std::make_unique<IntColumn>(Kind::manifest, path, name, std::move(ints), std::vector<std::string>{});
  // Labels that are all numbers, not all integers (a CSV's 0.75, a JSON 0.75): their values, float64.
  std::vector<double> nums;
  std::size_t first_not_number = values.size();
  const std::size_t n_num =
      role == Role::labels ? numbers_of(t, k, jsonl, values, is_int, ints, nums, first_not_number) : 0;
  if (role == Role::labels && n_num == values.size())
    return std::make_unique<FloatColumn>(Kind::manifest, path, name, std::move(nums));
  values = utf8_names(std::move(values), files.strict_utf8, [&](std::size_t i) {
    return path + ":" + std::to_string(t.lines[i]) + ": field '" + name + "'";
  });
  if (role == Role::labels)
    return labels_from_names(
        Kind::manifest, path, name, values, files.label_order,
        mixed_labels_warning(path, t, name, values, n_num, first_not_number, n_num > n_int ? "numeric" : "integer"));
  return std::make_unique<StringColumn>(Kind::manifest, path, name, std::move(values));
}

}  // namespace traincache::io::source
