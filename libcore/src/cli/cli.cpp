#include "traincache/cli/cli.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <new>
#include <sstream>

#include "traincache/base/cpu_contention.h"
#include "traincache/base/format.h"
#include "traincache/base/version.h"
#include "traincache/io/h5.h"
#include "traincache/io/image.h"
#include "traincache/io/source.h"
#include "traincache/slab/shm_slab.h"
#include "traincache/text/tokenizer.h"

namespace traincache::cli {

void add_common_options(CLI::App& app, CommonOptions& opts, Compute compute,
                        std::function<std::string()> version_extra) {
  std::string name = app.get_name();
  // A repeated single-value option takes its last value, as in most Unix tools, so that scripts
  // can append overrides (list options still collect every value).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.set_version_flag("--version", [name, version_extra] {
    std::string s = version_banner(name);
    if (version_extra) s += "\n" + version_extra();
    return s + "\nimage SIMD: " + io::image::simd_text();
  });
  app.add_flag("-v,--verbose", opts.verbose, "More messages on stderr (-vv: HDF5 error stacks)");
  // Common options take effect here, once parsing is done, so that no tool applies them itself.
  app.parse_complete_callback([&opts] { io::h5::set_verbose(opts.verbose >= 2); });
  app.add_flag("-q,--quiet", opts.quiet, "Only errors on stderr");
  app.add_flag("--json", opts.json, "Machine-readable JSON on stdout");
  add_choice(app, "--progress", opts.progress, progress_choices(),
             "Progress on stderr: auto (a bar on a terminal; else, past 10 s, a line each tenth or 30 s), always, "
             "never");
  if (compute != Compute::none)
    app.add_option("--threads", opts.threads, "Intra-op threads (0: all usable cores)")
        ->check(integer_range(0, kMaxThreads))
        ->capture_default_str();
  if (compute == Compute::full)
    app.add_option("--device", opts.device, "cpu or cuda[:N] (needs a CUDA build of LibTorch)")->capture_default_str();
}

CLI::Option* add_tf32_option(CLI::App& app, bool* tf32) {
  return app.add_flag_callback(
      "--no-tf32", [tf32] { *tf32 = false; },
      "CUDA: float32 convolutions in full float32 (cuDNN's TF32 is on by default on Ampere and later, as in "
      "PyTorch)");
}

void print_error(const std::string& tool, const std::string& msg) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s: error: %s\n", tool.c_str(), msg.c_str());
}

void print_result(const std::string& tool, const CommonOptions& opts, const report::Record& result,
                  const std::vector<std::string>& text_templates) {
  if (opts.json) {
    report::print_json(result.json());
    return;
  }
  if (opts.quiet) return;
  for (const auto& t : text_templates)
    if (!t.empty()) std::fprintf(stderr, "%s: %s\n", tool.c_str(), result.format(t).c_str());
}

void add_contention(report::Record& rec, const CpuContention& c, const std::string& remedy) {
  if (!c.measured) {
    rec.add("contention", report::Json(nullptr), "");
    return;
  }
  const std::string note = contention_note(c, remedy);
  rec.add("contention",
          report::Json{{"cores", c.cores},
                       {"seconds", c.seconds},
                       {"running_seconds", c.running_seconds},
                       {"waiting_seconds", c.waiting_seconds},
                       {"inferred_others_seconds", c.inferred_others_seconds},
                       {"others_seconds", c.inferred_others_seconds},  // its name in 0.1: written until 0.2
                       {"others_cores", c.others_cores},
                       {"competed", c.competed()},
                       {"note", note}},
          note);
}

void print_warning(const std::string& tool, const std::string& msg) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s: warning: %s\n", tool.c_str(), msg.c_str());
}

namespace {
std::string first_line_lower(std::string s) {
  auto nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  if (!s.empty()) s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  while (!s.empty() && (s.back() == '.' || s.back() == ' ')) s.pop_back();
  return s;
}

// `text` with every line longer than `width` broken at spaces; a continuation line starts with
// the broken line's own indentation. Lines without a space to break at stay as they are.
std::string wrap_lines(const std::string& text, std::size_t width) {
  std::string out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    const std::string indent =
        line.substr(0, line.find_first_not_of(' ') == std::string::npos ? 0 : line.find_first_not_of(' '));
    while (line.size() > width) {
      std::size_t cut = line.rfind(' ', width);
      if (cut == std::string::npos || cut <= indent.size()) break;
      out += line.substr(0, cut) + '\n';
      line = indent + line.substr(cut + 1);
    }
    out += line;
    if (nl < text.size()) out += '\n';
    pos = nl + 1;
  }
  return out;
}

// --help within kHelpWidth columns: option names in a column of kNameColumn, their descriptions
// wrapped beside them, the description and footer wrapped as they are.
constexpr std::size_t kHelpWidth = 100, kNameColumn = 36;
class WrappedHelp : public CLI::Formatter {
 public:
  WrappedHelp() { column_width(kNameColumn); }
  std::string make_option_desc(const CLI::Option* opt) const override {
    return wrap_lines(CLI::Formatter::make_option_desc(opt), kHelpWidth - kNameColumn);
  }
  std::string make_description(const CLI::App* app) const override {
    return wrap_lines(CLI::Formatter::make_description(app), kHelpWidth);
  }
  std::string make_footer(const CLI::App* app) const override {
    return wrap_lines(CLI::Formatter::make_footer(app), kHelpWidth);
  }
  std::string make_subcommand(const CLI::App* sub) const override {
    std::ostringstream out;
    CLI::detail::format_help(out, sub->get_display_name(), wrap_lines(sub->get_description(), kHelpWidth - kNameColumn),
                             kNameColumn);
    return out.str();
  }
};

// "; did you mean --batch-size?" for the first --option in argv that `app` (or a subcommand of it)
// does not know and that is within two edits of one it does; "" otherwise.
std::string suggestion(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> known;
  std::vector<CLI::App*> apps{&app};
  for (auto* sub : app.get_subcommands({})) apps.push_back(sub);
  for (auto* a : apps)
    for (const auto* opt : a->get_options())
      for (const auto& n : opt->get_lnames()) known.push_back("--" + n);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0 || arg.size() < 3) continue;
    arg = arg.substr(0, arg.find('='));
    if (std::find(known.begin(), known.end(), arg) != known.end()) continue;
    std::string best;
    std::size_t best_d = 3;
    for (const auto& k : known) {
      std::size_t d = edit_distance(arg, k);
      if (d < best_d) best_d = d, best = k;
    }
    return best.empty() ? "" : "; did you mean " + best + "?";
  }
  return "";
}

}  // namespace

void refuse_repeated(const CLI::App& app, const std::vector<std::string>& names) {
  for (const auto& name : names) {
    const CLI::Option* opt = app.get_option_no_throw(name);
    if (opt && opt->count() > 1)
      throw Error(Exit::usage, name,
                  "given " + std::to_string(opt->count()) +
                      " times; give it once (only the last would be used, "
                      "silently)");
  }
}

int end_process(int status) {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(status);
#else
  return status;
#endif
}

int run_tool(const std::string& tool, CLI::App& app, int argc, char** argv, const std::function<int()>& body) {
  int status = 0;
  slab::install_sigbus_handler(tool);
  io::h5::skip_exit_cleanup();
  auto help = std::make_shared<WrappedHelp>();
  app.formatter(help);
  for (auto* sub : app.get_subcommands({})) sub->formatter(help);
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version: stdout, exit 0
      print_error(tool, first_line_lower(e.what()) + suggestion(app, argc, argv) + " (see --help)");
      return code(Exit::usage);
    }
    io::h5::require_thread_safe();
    io::image::check_max_cpu_isa();
    status = body();
  } catch (const Error& e) {
    print_error(tool, e.what());
    status = code(e.code());
  } catch (const std::bad_alloc&) {
    print_error(tool, "out of memory: an allocation failed");
    status = code(Exit::unavailable);
  } catch (const std::exception& e) {
    print_error(tool, std::string("internal error: ") + first_line_lower(e.what()));
    status = code(Exit::internal);
  }
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "%s: error: stdout: write error\n", tool.c_str());
    if (status == 0) status = code(Exit::io);
  }
  return status;
}

std::pair<int64_t, int64_t> parse_row_range(const std::string& spec, const std::string& option) {
  auto colon = spec.find(':');
  if (colon == std::string::npos) throw Error(Exit::usage, option, "expected A:B, got '" + spec + "'");
  auto num = [&](const std::string& s, int64_t dflt) -> int64_t {
    if (s.empty()) return dflt;
    auto v = parse_int(s);
    if (!v || *v < 0) throw Error(Exit::usage, option, "not a row number: '" + s + "'");
    return *v;
  };
  int64_t a = num(spec.substr(0, colon), 0);
  int64_t b = num(spec.substr(colon + 1), -1);
  if (b >= 0 && b <= a) throw Error(Exit::usage, option, "empty range '" + spec + "'");
  return {a, b};
}

double parse_fraction(const std::string& s, const std::string& option) {
  auto decimal = [](const std::string& t) -> std::optional<double> {
    std::size_t used = 0;
    try {
      double v = std::stod(t, &used);
      if (used == t.size()) return v;
    } catch (const std::exception&) {
    }
    return std::nullopt;
  };
  auto slash = s.find('/');
  std::optional<double> v;
  if (slash == std::string::npos) {
    v = decimal(s);
  } else {
    auto num = decimal(s.substr(0, slash)), den = decimal(s.substr(slash + 1));
    if (num && den && *den != 0) v = *num / *den;
  }
  if (!v) throw Error(Exit::usage, option, "not a number: '" + s + "'");
  if (!std::isfinite(*v)) throw Error(Exit::usage, option, "must be a finite number, got '" + s + "'");
  return *v;
}

CLI::Validator positive_integer() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        auto v = parse_int(s);
        if (!v || *v < 1) return "must be a positive integer, got '" + s + "'";
        return "";
      },
      "POSITIVE");
}

CLI::Validator integer_range(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        auto v = parse_int(s);
        // Past int64's range an integer is still one: the message then names the bound it passed.
        const bool too_long =
            !v && !s.empty() && s.find_first_not_of("0123456789", s[0] == '-' ? 1 : 0) == std::string::npos;
        if (!v || *v < lo || *v > hi)
          return (hi == INT64_MAX && !too_long
                      ? "must be an integer >= " + std::to_string(lo)
                      : "must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi)) +
                 ", got '" + s + "'";
        return "";
      },
      "INT[" + std::to_string(lo) + "-" + std::to_string(hi) + "]");
}

CLI::Validator auto_or_integer(int64_t hi) {
  return CLI::Validator(
      [hi](std::string& s) -> std::string {
        if (s == "auto") {
          s = "0";
          return "";
        }
        auto v = parse_int(s);
        if (!v || *v < 1 || *v > hi)
          return "must be auto or an integer from 1 to " + std::to_string(hi) + ", got '" + s + "'";
        return "";
      },
      "");
}

CLI::Validator positive_number(bool zero_ok) {
  return CLI::Validator(
      [zero_ok](std::string& s) -> std::string {
        char* end = nullptr;
        double v = std::strtod(s.c_str(), &end);
        bool ok = !s.empty() && end && *end == '\0' && std::isfinite(v) && (zero_ok ? v >= 0 : v > 0);
        if (!ok)
          return std::string(zero_ok ? "must be a number >= 0" : "must be a positive number") + ", got '" + s + "'";
        return "";
      },
      zero_ok ? "NONNEGATIVE" : "POSITIVE");
}

std::pair<std::optional<std::string>, std::string> split_assignment(const std::string& spec) {
  auto eq = spec.find('=');
  if (eq == std::string::npos) return {std::nullopt, spec};
  return {spec.substr(0, eq), spec.substr(eq + 1)};
}

void add_file_options(CLI::App& app, io::source::FileOptions& files, const std::string& group, bool labels) {
  io::image::Spec& spec = files.preprocess;
  app.add_option_function<std::string>(
         "--resize", [&spec](const std::string& s) { io::image::parse_resize(s, spec); },
         "Images: S resizes the shorter side to S (aspect kept), H,W to exactly HxW (PIL bilinear, antialiased)")
      ->group(group);
  app.add_option_function<std::string>(
         "--center-crop", [&spec](const std::string& s) { io::image::parse_center_crop(s, spec); },
         "Images: crop the centre H,W (or S,S) after --resize, zero-padded when larger")
      ->group(group);
  add_choice(app, "--channels", spec.channels, io::image::channels_choices(), "Images: convert to rgb or gray")
      ->group(group);
  app.add_option_function<std::string>(
         "--normalize", [&spec](const std::string& s) { io::image::parse_normalize(s, spec); },
         "Images: (x - MEAN) / STD per channel after scaling to [0,1]: MEAN,..:STD,.. or imagenet")
      ->group(group);
  app.add_flag("--exif-transpose", spec.exif_transpose, "Images: apply the EXIF orientation tag (off, as in PIL)")
      ->group(group);
  app.add_flag("--jpeg-draft", spec.jpeg_draft,
               "Images: decode large JPEGs at 1/2, 1/4 or 1/8 size where --resize still shrinks them (PIL's "
               "draft; faster, not exact: off)")
      ->group(group);
  if (!labels) return;
  add_choice(app, "--label-order", files.label_order, io::source::label_order_choices(),
             "Manifests: string labels numbered in sorted or first-seen order")
      ->group(group);
}

void add_tokenize_options(CLI::App& app, text::TokenizeOptions& opts, const std::string& group) {
  app.add_option("--max-length", opts.max_length,
                 "Tokens per text at most, special tokens included (default: a sentence-transformers folder's "
                 "max_seq_length, else the tokenizer file's, else 512)")
      ->check(positive_integer())
      ->group(group);
  add_choice(app, "--padding", opts.padding, text::padding_choices(),
             "Pad each batch (and training chunk) to its longest text, or every text to --max-length")
      ->group(group);
  app.add_flag("--strict-utf8", opts.strict_utf8,
               "Refuse ill-formed UTF-8 in text fields (default: replace it with U+FFFD and count it)")
      ->group(group);
  app.add_option("--pad-id", opts.pad_id,
                 "Padding id of token sequences read from variable-layout slabs (ragged rows, no tokenizer)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group(group);
  app.add_option("--vocab-table", opts.vocab_table,
                 "The encoder's token embedding table, by module path (default: the smallest nn.Embedding that "
                 "holds the tokenizer's vocabulary; none: no check)")
      ->group(group);
}

}  // namespace traincache::cli
