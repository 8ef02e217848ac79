// What every traincache tool's main() shares: common options, one error path, one exit-code map.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "traincache/base/choices.h"
#include "traincache/base/error.h"
#include "traincache/base/format.h"
#include "traincache/base/progress.h"
#include "traincache/base/report.h"

namespace traincache {
struct CpuContention;
}

namespace traincache::text {
struct TokenizeOptions;
}
namespace traincache::io::source {
struct FileOptions;
}

namespace traincache::cli {

/// Options every tool accepts. Defaults are the behaviour without the flag.
struct CommonOptions {
  int verbose = 0;                                  ///< -v (repeatable); -vv also prints HDF5 error stacks
  bool quiet = false;                               ///< -q: no informational messages on stderr
  bool json = false;                                ///< --json: machine-readable output on stdout
  ProgressMode progress = ProgressMode::automatic;  ///< --progress=auto|always|never
  int threads = 0;                                  ///< --threads (0 = library default)
  std::string device = "cpu";                       ///< --device cpu|cuda[:N]

  /// The progress to show: --progress, except that -q silences the automatic kind (log lines).
  ProgressMode progress_mode() const {
    return quiet && progress == ProgressMode::automatic ? ProgressMode::never : progress;
  }
};

/// Which of the compute options (--threads, --device) a tool takes.
enum class Compute { none, threads_only, full };

/// Adds -v/-q, --json, --progress, --version and, per `compute`, --threads/--device to `app`.
/// `version_extra` supplies lines appended to the version banner (LibTorch version, BLAS).
void add_common_options(CLI::App& app, CommonOptions& opts, Compute compute,
                        std::function<std::string()> version_extra = {});

/// Adds --no-tf32 (CUDA: float32 convolutions in full precision instead of cuDNN's default TF32)
/// for the tools that run models (cache-fill, gc-train). Sets `*tf32` to false when given.
CLI::Option* add_tf32_option(CLI::App& app, bool* tf32);

/// Refuses (Error(usage)) any of the options `names` given more than once. Single-value options take
/// their last value (add_common_options); a data option must not, or a second --cache would
/// silently train on one of the two.
void refuse_repeated(const CLI::App& app, const std::vector<std::string>& names);

/// Parses argv and runs `body`, mapping every outcome to an exit code in one place:
/// --help/--version -> 0 on stdout; CLI11 errors -> 64; traincache::Error -> its code;
/// any other exception -> 70. Messages are one line: "tool: error: <what>" after flushing stdout.
/// A write error on stdout discovered at the end -> 74. Returns the exit status (a tool's main
/// ends with `return cli::end_process(cli::run_tool(...))`).
int run_tool(const std::string& tool, CLI::App& app, int argc, char** argv, const std::function<int()>& body);

/// Ends the process with `status` once every output is written, without the static destructors: a
/// tool that loaded LibTorch spent ~0.06 s in them (its operator registry taken apart one operator
/// at a time), 5% of a small fill, and nothing of the tools' is left to them (files are closed and
/// renamed, temporary slabs removed, inside the tool's body; HDF5's exit cleanup is off). LLVM's
/// tools end the same way. Sanitizer builds return `status`, for their exit-time checks. Only a
/// tool's main calls it: a test calling run_tool goes on to its next check.
int end_process(int status);

/// Prints "tool: error: msg" to stderr (stdout is flushed first).
void print_error(const std::string& tool, const std::string& msg);

/// A tool's result through its one printer: with --json the record's fields as one JSON document on
/// stdout; otherwise, unless -q, one line "tool: <template filled from the record>" on stderr per
/// text template (empty templates are skipped).
void print_result(const std::string& tool, const CommonOptions& opts, const report::Record& result,
                  const std::vector<std::string>& text_templates);

/// Adds field "contention" (what a run measured of other processes holding its cores: null where the
/// kernel keeps no scheduler statistics); its text is contention_note's, ending with `remedy`, and
/// empty unless they competed (CpuContention::competed: the caller then prints the line).
void add_contention(report::Record& rec, const CpuContention& c, const std::string& remedy);

/// Prints "tool: warning: msg" to stderr.
void print_warning(const std::string& tool, const std::string& msg);

/// Parses "A:B" (either side may be empty: ":B", "A:") into [A, B); B = -1 means "to the end".
std::pair<int64_t, int64_t> parse_row_range(const std::string& spec, const std::string& option = "--rows");

/// Splits "NAME=VALUE" into {NAME, VALUE}; without '=' returns {nullopt, spec}.
std::pair<std::optional<std::string>, std::string> split_assignment(const std::string& spec);

// Splitting and integer parsing live in base/format.h, below every folder that parses text.
using traincache::parse_int;
using traincache::split;

/// A number given as a decimal ("0.5") or a fraction ("1/255"); throws Error(usage) naming `option`.
double parse_fraction(const std::string& s, const std::string& option);

/// A CLI11 check for integers >= 1 with a readable message ("must be a positive integer").
CLI::Validator positive_integer();

/// The most intra-op threads --threads accepts (like --workers, a bound that stops a typo from
/// starting thousands of threads).
inline constexpr int64_t kMaxThreads = 256;

/// A CLI11 check for integers in [lo, hi] ("must be an integer from 0 to 256").
CLI::Validator integer_range(int64_t lo, int64_t hi);

/// A CLI11 check and transform for "auto" (made 0) or an integer in [1, hi].
CLI::Validator auto_or_integer(int64_t hi);

/// A CLI11 check for numbers > 0 (or >= 0 with `zero_ok`), with a readable message.
CLI::Validator positive_number(bool zero_ok = false);

/// An option whose value is one of `choices`' names (checked, with the names in --help), stored
/// in `target` as the enum: strings become enums here, once. `choices` must outlive parsing.
template <class E>
CLI::Option* add_choice(CLI::App& app, const std::string& flag, E& target, const Choices<E>& choices,
                        const std::string& description) {
  auto* opt = app.add_option_function<std::string>(
      flag, [&target, &choices, flag](const std::string& s) { target = choices.parse(s, flag); }, description);
  opt->check(CLI::IsMember(choices.names()));
  opt->default_str(choices.name(target));
  return opt;
}

/// The options of image folders and manifests, into `files`: --resize, --center-crop, --channels,
/// --normalize, --exif-transpose (the preprocessing spec) and, with `labels`, --label-order, in
/// group `group`.
void add_file_options(CLI::App& app, io::source::FileOptions& files, const std::string& group, bool labels = true);

/// Adds the tokenisation options of text inputs: --max-length, --padding, --strict-utf8, --pad-id.
void add_tokenize_options(CLI::App& app, text::TokenizeOptions& opts, const std::string& group);

/// The exit code as an int.
inline int code(Exit e) { return static_cast<int>(e); }

}  // namespace traincache::cli
