#include "traincache/cli/cli.h"

#include "catch.h"

using namespace traincache;

CATCH_TEST_CASE("cli: --rows A:B parses half-open ranges with open ends", "[cli]") {
  CATCH_CHECK(cli::parse_row_range("10:50") == std::pair<int64_t, int64_t>{10, 50});
  CATCH_CHECK(cli::parse_row_range(":50") == std::pair<int64_t, int64_t>{0, 50});
  CATCH_CHECK(cli::parse_row_range("7:") == std::pair<int64_t, int64_t>{7, -1});
}

CATCH_TEST_CASE("cli: malformed or empty --rows is a usage error", "[cli]") {
  for (const char* bad : {"10", "a:5", "5:5", "9:3", "-1:4", "1:2x"}) {
    CATCH_INFO(bad);
    try {
      cli::parse_row_range(bad);
      CATCH_FAIL("accepted");
    } catch (const Error& e) {
      CATCH_CHECK(e.code() == Exit::usage);
      CATCH_CHECK(std::string(e.what()).rfind("--rows: ", 0) == 0);
    }
  }
}

CATCH_TEST_CASE("cli: NAME=VALUE splits at the first '='", "[cli]") {
  auto [n1, v1] = cli::split_assignment("cnn=models/a=b.pt");
  CATCH_CHECK(n1.value() == "cnn");
  CATCH_CHECK(v1 == "models/a=b.pt");
  auto [n2, v2] = cli::split_assignment("model.pt");
  CATCH_CHECK(!n2);
  CATCH_CHECK(v2 == "model.pt");
}

CATCH_TEST_CASE("cli: split drops empty parts", "[cli]") {
  CATCH_CHECK(cli::split("a,,b,", ',') == std::vector<std::string>{"a", "b"});
  CATCH_CHECK(cli::split("", ',').empty());
}

CATCH_TEST_CASE("cli: run_tool maps errors to exit codes and one-line messages", "[cli]") {
  CLI::App app{"t", "t"};
  char arg0[] = "t";
  char* argv[] = {arg0};
  CATCH_CHECK(cli::run_tool("t", app, 1, argv, [] { return 0; }) == 0);
  CATCH_CHECK(cli::run_tool("t", app, 1, argv,
                            []() -> int { throw Error(Exit::no_input, "x.h5", "no such file or directory"); }) == 66);
  CATCH_CHECK(cli::run_tool("t", app, 1, argv, []() -> int { throw std::runtime_error("boom"); }) == 70);
  char bad[] = "--nope";
  char* argv2[] = {arg0, bad};
  CATCH_CHECK(cli::run_tool("t", app, 2, argv2, [] { return 0; }) == 64);
}

CATCH_TEST_CASE("cli: --progress accepts auto, always, never only", "[cli]") {
  CATCH_CHECK(parse_progress_mode("auto") == ProgressMode::automatic);
  CATCH_CHECK(parse_progress_mode("never") == ProgressMode::never);
  CATCH_CHECK_THROWS_AS(parse_progress_mode("sometimes"), Error);
  Progress off("x", 10, ProgressMode::never);
  CATCH_CHECK_FALSE(off.enabled());
}

// gc-train showed 93,502 steps/s at the first tick (one step over the microseconds since the bar
// was made) and 0 on steps slower than a second.
CATCH_TEST_CASE("progress: the rate is unknown until measured, then smoothed", "[cli]") {
  RateMeter m;
  m.sample(1, 0.00001);  // the first item, as the bar is made: the baseline, not a rate
  CATCH_CHECK(m.rate() == 0);
  m.sample(2, 0.2);  // too soon to measure
  CATCH_CHECK(m.rate() == 0);
  m.sample(11, 1.00001);
  CATCH_CHECK(m.rate() == Approx(10.0));
  m.sample(12, 11.00001);  // one slow item: 0.1/s, averaged in
  CATCH_CHECK(m.rate() == Approx(0.3 * 0.1 + 0.7 * 10.0));
  CATCH_CHECK(rate_text(0) == "-");
  CATCH_CHECK(rate_text(0.125) == "0.125");
  CATCH_CHECK(rate_text(3.14159) == "3.14");
  CATCH_CHECK(rate_text(12.46) == "12.5");
  CATCH_CHECK(rate_text(1234.4) == "1234");
}

CATCH_TEST_CASE("cli: choices map names to enums once, with the valid names in errors", "[cli]") {
  enum class Fruit { apple, pear, plum };
  const Choices<Fruit> fruits{{Fruit::apple, "apple"}, {Fruit::pear, "pear"}, {Fruit::plum, "plum"}};
  CATCH_CHECK(std::string(fruits.name(Fruit::pear)) == "pear");
  CATCH_CHECK(fruits.parse("plum", "--fruit") == Fruit::plum);
  CATCH_CHECK_FALSE(fruits.find("Plum").has_value());
  CATCH_CHECK(fruits.list() == "apple, pear or plum");
  CATCH_CHECK(fruits.list(", ") == "apple, pear, plum");
  try {
    fruits.parse("fig", "--fruit");
    CATCH_FAIL("accepted");
  } catch (const Error& e) {
    CATCH_CHECK(e.code() == Exit::usage);
    CATCH_CHECK(std::string(e.what()) == "--fruit: expected apple, pear or plum, got 'fig'");
  }
  // On a command line: the default is the enum's name; a bad value is a parse error (exit 64).
  Fruit f = Fruit::apple;
  CLI::App app{"t", "t"};
  auto* opt = cli::add_choice(app, "--fruit", f, fruits, "a fruit");
  CATCH_CHECK(opt->get_default_str() == "apple");
  app.parse(std::vector<std::string>{"pear", "--fruit"});  // CLI11 takes the vector reversed
  CATCH_CHECK(f == Fruit::pear);
  CATCH_CHECK_THROWS_AS(app.parse(std::vector<std::string>{"fig", "--fruit"}), CLI::ValidationError);
}

CATCH_TEST_CASE("cli: integers must be whole strings", "[cli]") {
  CATCH_CHECK(cli::parse_int("42").value() == 42);
  CATCH_CHECK(cli::parse_int("-3").value() == -3);
  CATCH_CHECK_FALSE(cli::parse_int("4x"));
  CATCH_CHECK_FALSE(cli::parse_int(""));
  CATCH_CHECK_FALSE(cli::parse_int("99999999999999999999"));
}

CATCH_TEST_CASE("cli: scales are decimals or fractions", "[cli]") {
  CATCH_CHECK(cli::parse_fraction("0.5", "--s") == 0.5);
  CATCH_CHECK(cli::parse_fraction("1/255", "--s") == 1.0 / 255);
  for (const char* bad : {"half", "1/0", "1/", "/2", "1/2/3"}) {
    CATCH_INFO(bad);
    CATCH_CHECK_THROWS_WITH(cli::parse_fraction(bad, "--s"), "--s: not a number: '" + std::string(bad) + "'");
  }
}

CATCH_TEST_CASE("progress: without a terminal, a log line at each tenth and every 30 s once a run is long", "[cli]") {
  // A short run says nothing until its closing line: not in its first 10 seconds.
  CATCH_CHECK_FALSE(log_line_due(9.9, 9.9, 500, 1000, -1));
  CATCH_CHECK(log_line_due(10.0, 10.0, 500, 1000, -1));
  // After a line at 50%: the next at 60%, or after 30 s without one.
  CATCH_CHECK_FALSE(log_line_due(40, 5, 599, 1000, 5));
  CATCH_CHECK(log_line_due(40, 5, 600, 1000, 5));
  CATCH_CHECK(log_line_due(70, 30, 599, 1000, 5));
  // Never at the end (the tool's closing line follows), and every 30 s when the total is unknown.
  CATCH_CHECK_FALSE(log_line_due(100, 60, 1000, 1000, 9));
  CATCH_CHECK_FALSE(log_line_due(100, 29, 5, 0, -1));
  CATCH_CHECK(log_line_due(100, 30, 5, 0, -1));
}
