#include "traincache/base/report.h"

#include <cstdio>
#include <stdexcept>

#include "traincache/base/json_text.h"

namespace traincache::report {

Record& Record::add(const std::string& key, Json value, std::optional<std::string> text) {
  json_[key] = std::move(value);
  if (text) text_[key] = std::move(*text);
  return *this;
}

Record& Record::note(const std::string& key, std::string text) {
  text_[key] = std::move(text);
  return *this;
}

const Json& Record::at(const std::string& key) const {
  auto it = json_.find(key);
  if (it == json_.end()) throw std::out_of_range("report: no field '" + key + "'");
  return *it;
}

namespace {

std::string value_text(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_null()) return "-";
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v.get<double>());
    return buf;
  }
  if (v.is_array()) {
    std::string t = "[";
    for (std::size_t i = 0; i < v.size(); ++i) t += (i ? "," : "") + value_text(v[i]);
    return t + "]";
  }
  return json_text(v);
}

// printf with one conversion of `v` ("%.2f", "%5lld", "%.12s").
std::string printf_text(const std::string& spec, const Json& v, const std::string& key) {
  char conv = spec.empty() ? '\0' : spec.back();
  if (spec.size() < 2 || spec[0] != '%' || spec.find('%', 1) != std::string::npos)
    throw std::logic_error("report: bad format '" + spec + "' for field '" + key + "'");
  char buf[256];
  if (conv == 's' && v.is_string()) {
    std::snprintf(buf, sizeof buf, spec.c_str(), v.get<std::string>().c_str());
  } else if ((conv == 'f' || conv == 'g' || conv == 'e') && v.is_number()) {
    std::snprintf(buf, sizeof buf, spec.c_str(), v.get<double>());
  } else if (conv == 'd' && v.is_number_integer()) {
    std::string s = spec.substr(0, spec.size() - 1) + "lld";
    std::snprintf(buf, sizeof buf, s.c_str(), static_cast<long long>(v.get<int64_t>()));
  } else {
    throw std::logic_error("report: format '" + spec + "' does not fit field '" + key + "'");
  }
  return buf;
}

}  // namespace

std::string Record::text(const std::string& key) const {
  auto t = text_.find(key);
  if (t != text_.end()) return t->second;
  return value_text(at(key));
}

std::string Record::format(const std::string& tmpl) const {
  std::string out;
  for (std::size_t i = 0; i < tmpl.size(); ++i) {
    const bool doubled = i + 1 < tmpl.size() && tmpl[i + 1] == tmpl[i];
    if ((tmpl[i] == '{' || tmpl[i] == '}') && doubled) {  // "{{" and "}}" print one brace
      out += tmpl[i];
      ++i;
      continue;
    }
    if (tmpl[i] != '{') {
      out += tmpl[i];
      continue;
    }
    auto close = tmpl.find('}', i);
    if (close == std::string::npos) throw std::logic_error("report: unclosed '{' in '" + tmpl + "'");
    std::string field = tmpl.substr(i + 1, close - i - 1);
    auto colon = field.find(':');
    if (colon == std::string::npos)
      out += text(field);
    else
      out += printf_text(field.substr(colon + 1), at(field.substr(0, colon)), field.substr(0, colon));
    i = close;
  }
  return out;
}

void print_json(const Json& doc) { std::printf("%s\n", json_text(doc).c_str()); }

std::string table_header(const std::vector<Column>& columns) {
  std::string line;
  char buf[256];
  for (const auto& c : columns) {
    std::snprintf(buf, sizeof buf, "%s%*s", &c == &columns.front() ? "" : " ", c.width, c.header.c_str());
    line += buf;
  }
  return line;
}

std::string table_row(const std::vector<Column>& columns, const Record& r) {
  std::string line;
  char buf[512];
  for (std::size_t i = 0; i < columns.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%*s", i ? " " : "", columns[i].width, r.text(columns[i].key).c_str());
    line += buf;
  }
  return line;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

std::string csv_header(const std::vector<Column>& columns) {
  std::string line;
  for (std::size_t i = 0; i < columns.size(); ++i) line += (i ? "," : "") + csv_field(columns[i].key);
  return line;
}

std::string csv_row(const std::vector<Column>& columns, const Record& r) {
  std::string line;
  for (std::size_t i = 0; i < columns.size(); ++i) {
    const Json& v = r.at(columns[i].key);
    line += (i ? "," : "") + csv_field(v.is_string() ? v.get<std::string>() : v.is_null() ? "" : json_text(v));
  }
  return line;
}

}  // namespace traincache::report
