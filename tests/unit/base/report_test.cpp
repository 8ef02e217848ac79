#include "traincache/base/report.h"

#include <stdexcept>

#include "catch.h"

using traincache::report::Column;
using traincache::report::Record;

namespace {

Record sample() {
  Record r;
  r.add("out", "c.h5").add("rows", 300).add("seconds", 1.23456, "1.23").add("ok", true).add("none", nullptr);
  r.add("shape", {300, 32}).add("rate", 2.5e6).note("resumed", ", resumed at 64");
  return r;
}

}  // namespace

CATCH_TEST_CASE("report: JSON holds every added field in order, and no notes", "[report]") {
  CATCH_CHECK(sample().json().dump() ==
              R"({"out":"c.h5","rows":300,"seconds":1.23456,"ok":true,"none":null,"shape":[300,32],"rate":2500000.0})");
}

CATCH_TEST_CASE("report: text of a field is its given text, else the value written plainly", "[report]") {
  Record r = sample();
  CATCH_CHECK(r.text("seconds") == "1.23");
  CATCH_CHECK(r.text("rows") == "300");
  CATCH_CHECK(r.text("ok") == "yes");
  CATCH_CHECK(r.text("none") == "-");
  CATCH_CHECK(r.text("shape") == "[300,32]");
  CATCH_CHECK(r.text("rate") == "2.5e+06");
  CATCH_CHECK(r.text("resumed") == ", resumed at 64");
}

CATCH_TEST_CASE("report: templates name fields, with printf conversions and {{ escapes", "[report]") {
  Record r = sample();
  CATCH_CHECK(r.format("{out}: {rows} rows{resumed} in {seconds} s") == "c.h5: 300 rows, resumed at 64 in 1.23 s");
  CATCH_CHECK(r.format("{seconds:%.3f} {rows:%5d} {out:%.2s} {rate:%.0f}") == "1.235   300 c. 2500000");
  CATCH_CHECK(r.format("{{x}} {rows}") == "{x} 300");
  CATCH_CHECK(r.format("}}{{{rows}}}") == "}{300}");
}

CATCH_TEST_CASE("report: an unknown field or a format that does not fit is a logic error", "[report]") {
  Record r = sample();
  CATCH_CHECK_THROWS_AS(r.format("{nope}"), std::out_of_range);
  CATCH_CHECK_THROWS_AS(r.format("{rows"), std::logic_error);
  CATCH_CHECK_THROWS_AS(r.format("{out:%d}"), std::logic_error);
  CATCH_CHECK_THROWS_AS(r.format("{rows:%s %s}"), std::logic_error);
  CATCH_CHECK_THROWS_AS(r.format("{rows:%n}"), std::logic_error);
}

CATCH_TEST_CASE("report: tables and CSV take their columns from the record; CSV quotes per RFC 4180", "[report]") {
  Record r;
  r.add("name", "a,\"b\"\nc").add("n", 7).add("x", 0.5, "0.500").add("z", nullptr);
  std::vector<Column> cols = {{"name", "NAME", -10}, {"n", "N", 3}, {"x", "X", 6}, {"z", "Z", 2}};
  CATCH_CHECK(traincache::report::table_header(cols) == "NAME         N      X  Z");
  CATCH_CHECK(traincache::report::table_row(cols, r) == "a,\"b\"\nc      7  0.500  -");
  CATCH_CHECK(traincache::report::csv_header(cols) == "name,n,x,z");
  CATCH_CHECK(traincache::report::csv_row(cols, r) == "\"a,\"\"b\"\"\nc\",7,0.5,");
  CATCH_CHECK(traincache::report::csv_field("plain") == "plain");
}
