// One printer per tool. A result becomes a Record of named fields, declared once where the record
// is built; every output reads that record: --json writes it as one object, text output fills a
// template that names fields ("{rows} rows in {seconds} s"), tables and CSV take columns from it.
// A field's value is computed once, so text and JSON cannot disagree. Torch-free.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace traincache::report {

using Json = nlohmann::ordered_json;

/// Named fields in declaration order, each with a JSON value and, optionally, its text.
class Record {
 public:
  /// Adds field `key` with `value`. `text`, when given, is how text output shows it (units,
  /// rounding); otherwise see text().
  Record& add(const std::string& key, Json value, std::optional<std::string> text = std::nullopt);
  /// Adds a field that only text output shows (wording that depends on values, such as
  /// ", resumed at 64"); it is not part of the JSON object.
  Record& note(const std::string& key, std::string text);

  /// The JSON object of every add()ed field, in order.
  const Json& json() const { return json_; }
  /// The value of field `key`; std::out_of_range naming it when there is none.
  const Json& at(const std::string& key) const;

  /// The text of one field: the text given to add()/note(), else strings as they are, integers in
  /// decimal, other numbers with %g, booleans "yes"/"no", null "-", lists "[a,b]".
  std::string text(const std::string& key) const;

  /// `tmpl` with every "{key}" replaced by text(key), and "{key:%.2f}" (any printf conversion of
  /// one number or string) by the value formatted so; "{{" and "}}" are literal braces. An unknown key or a
  /// malformed placeholder is a bug in the caller: std::logic_error naming it.
  std::string format(const std::string& tmpl) const;

 private:
  Json json_ = Json::object();
  std::map<std::string, std::string> text_;
};

/// Writes `doc` to stdout as one compact JSON document on one line (every tool's --json style).
void print_json(const Json& doc);

/// A column of a text table or CSV file.
struct Column {
  std::string key;     ///< field of the record (and CSV header)
  std::string header;  ///< header of the text table
  int width;           ///< width of the text table's column (right-aligned; negative: left)
};

/// A table's header line ("  strategy  epoch ..."; one space between columns), without a newline.
std::string table_header(const std::vector<Column>& columns);
/// A table row of `r`'s fields, without a newline.
std::string table_row(const std::vector<Column>& columns, const Record& r);

/// A CSV header line (the keys), without a newline.
std::string csv_header(const std::vector<Column>& columns);
/// A CSV row of `r`'s JSON values (strings as text, numbers as JSON writes them), without a newline.
std::string csv_row(const std::vector<Column>& columns, const Record& r);
/// One CSV field per RFC 4180: quoted when it holds a comma, quote, CR or LF; quotes doubled.
std::string csv_field(const std::string& s);

}  // namespace traincache::report
