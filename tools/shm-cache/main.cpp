// shm-cache: create, fill, list, inspect and remove shared-memory slabs under /dev/shm.
// See docs/shm-cache.md.
#include <unistd.h>

#include <cinttypes>
#include <cstdio>

#include "traincache/cli/cli.h"
#include "traincache/data_cache/shm_fill.h"
#include "traincache/io/describe.h"
#include "traincache/slab/shm_slab.h"

using namespace traincache;

namespace {

constexpr const char* kTool = "shm-cache";

constexpr const char* kStatText =
    "{name}\n  path       {path}\n  layout     {layout}, {selection} selection\n"
    "  indices    {length} ({slots} cacheable)\n  size       {total_bytes}{arena}\n  slots      {counts}\n"
    "  creator    {creator}, {created_unix} ago, mode {mode}{temporary}";

// shm-cache list's columns.
const std::vector<report::Column> kListColumns = {{"name", "NAME", -24},       {"layout", "LAYOUT", -28},
                                                  {"total_bytes", "SIZE", 10}, {"filled_percent", "FILLED", 8},
                                                  {"creator", "CREATOR", -28}, {"created_unix", "AGE", 0}};

// One document {"schema": "shm-cache/1", <key>: <value>} on stdout.
void print_json(const char* key, const report::Json& value) {
  report::print_json(report::Json{{"schema", "shm-cache/1"}, {key, value}});
}

struct Options {
  cli::CommonOptions common;
  // create
  std::string name, dims, dtype = "uint8", limit, mode = "0600";
  slab::Selection select = slab::Selection::first;
  uint64_t len = 0, slots = 0, seed = 0;
  bool variable = false;
  // fill / get / rm
  std::string from, dataset, rows;
  io::source::FileOptions files;
  int workers = 1;
  std::string index;
  std::vector<std::string> names;
  bool all = false, stale = false;
};

int do_create(Options& o) {
  slab::CreateOptions c;
  c.name = o.name;
  c.length = o.len;
  c.layout = o.variable ? slab::Layout::variable : slab::Layout::fixed;
  c.dtype = parse_dtype(o.dtype);
  if (!o.variable) {
    if (o.dims.empty()) throw Error(Exit::usage, "--dims", "a fixed layout needs --dims (or use --variable)");
    for (const auto& d : cli::split(o.dims, ',')) {
      auto v = cli::parse_int(d);
      if (!v || *v <= 0)
        throw Error(Exit::usage, "--dims", "expected positive integers like 1,28,28, got '" + o.dims + "'");
      c.dims.push_back(static_cast<uint64_t>(*v));
    }
  } else if (!o.dims.empty()) {
    throw Error(Exit::usage, "--dims", "a variable layout has no fixed item shape");
  }
  if (!o.limit.empty()) c.limit_bytes = slab::parse_size(o.limit);
  c.slots = o.slots;
  c.selection = o.select;
  c.seed = o.seed;
  try {
    std::size_t used = 0;
    c.mode = static_cast<unsigned>(std::stoul(o.mode, &used, 8));
    if (used != o.mode.size() || c.mode > 0777) throw std::invalid_argument("mode");
  } catch (const std::exception&) {
    throw Error(Exit::usage, "--mode", "expected octal permission bits like 0640, got '" + o.mode + "'");
  }
  auto slab = slab::Slab::create(c);
  auto i = slab.info();
  auto rec = io::describe::slab_record(i, nullptr);
  if (o.common.json)
    print_json("created", rec.json());
  else if (!o.common.quiet)
    std::fprintf(
        stderr, "%s: %s\n", kTool,
        rec.format("created {name}: {layout}, {length} indices, {slots} cacheable, {total_bytes} ({path})").c_str());
  return 0;
}

int do_list(Options& o) {
  report::Json arr = report::Json::array();
  if (!o.common.json) std::printf("%s\n", report::table_header(kListColumns).c_str());
  for (const auto& n : slab::list_slabs()) {
    try {
      auto slab = slab::Slab::attach(n, false);
      auto c = slab.counts();
      auto rec = io::describe::slab_record(slab.info(), &c);
      if (o.common.json)
        arr.push_back(rec.json());
      else
        std::printf("%s\n", report::table_row(kListColumns, rec).c_str());
    } catch (const Error& e) {
      if (o.common.json)
        arr.push_back({{"name", n}, {"error", e.what()}});
      else
        std::printf("%-24s %s\n", n.c_str(), e.what());
    }
  }
  if (o.common.json) print_json("slabs", arr);
  return 0;
}

int do_stat(Options& o) {
  auto slab = slab::Slab::attach(o.name, false);
  auto c = slab.counts();
  auto rec = io::describe::slab_record(slab.info(), &c);
  if (o.common.json)
    print_json("slab", rec.json());
  else
    std::printf("%s\n", rec.format(kStatText).c_str());
  return 0;
}

int do_fill(Options& o) {
  data_cache::FillFromOptions f;
  f.slab = o.name;
  f.file = o.from;
  f.dataset = o.dataset;
  f.files = o.files;
  f.workers = o.workers;
  if (!o.rows.empty()) std::tie(f.row_begin, f.row_end) = cli::parse_row_range(o.rows);
  auto r = data_cache::fill_from_hdf5(f);
  report::Record rec;
  rec.add("schema", "shm-cache/1")
      .add("name", o.name)
      .add("rows", r.rows)
      .add("stored", r.stored)
      .add("skipped", r.skipped)
      .add("bytes", r.bytes, format_size(r.bytes))
      .add("seconds", r.seconds)
      .add("bytes_per_second", r.seconds > 0 ? r.bytes / r.seconds : 0.0);
  cli::print_result(kTool, o.common, rec,
                    {"{name}: {rows} rows, {stored} stored, {skipped} skipped, {bytes} in {seconds:%.2f} s"});
  return 0;
}

int do_get(Options& o) {
  auto slab = slab::Slab::attach(o.name, false);
  auto parsed = cli::parse_int(o.index);
  if (!parsed || *parsed < 0)
    throw Error(Exit::usage, "index", "expected a non-negative integer, got '" + o.index + "'");
  const auto index = static_cast<uint64_t>(*parsed);
  if (index >= slab.info().length)  // no item there: an index out of range, not a miss
    throw Error(Exit::usage, "index",
                std::to_string(index) + " is beyond the slab's " + std::to_string(slab.info().length) + " items (0.." +
                    std::to_string(slab.info().length - 1) + ")");
  auto view = slab.view(index);
  auto slot = slab.slot_of(index);
  if (slot && slab.state(index) == slab::SlotState::invalid)
    throw Error(Exit::data, o.name,
                "slot " + std::to_string(*slot) + " of index " + std::to_string(index) +
                    " holds an invalid state: corrupt slab (shm-cache repair resets it)");
  const char* state = !slot ? "not cacheable" : slab::state_name(slab.state(index));
  if (o.common.json) {
    auto i = slab.info();
    report::Record rec;
    rec.add("schema", "shm-cache/1")
        .add("name", o.name)
        .add("index", index)
        .add("slot", slot ? report::Json(*slot) : report::Json(nullptr))
        .add("state", state)
        .add("hit", bool(view))
        .add("bytes", view.bytes)
        .add("dtype", dtype_name(i.dtype))
        .add("dims", i.dims);
    report::print_json(rec.json());
  } else if (view) {
    if (std::fwrite(view.data, 1, view.bytes, stdout) != view.bytes) throw Error(Exit::io, "stdout", "write error");
  }
  if (!view) {
    if (!o.common.json) cli::print_error(kTool, o.name + ": index " + std::to_string(index) + ": miss (" + state + ")");
    return cli::code(Exit::negative);
  }
  return 0;
}

int do_repair(Options& o) {
  auto slab = slab::Slab::attach(o.name, true);
  uint64_t n = slab.repair();
  report::Record rec;
  rec.add("schema", "shm-cache/1").add("name", o.name).add("repaired", n).note("s", n == 1 ? "" : "s");
  cli::print_result(kTool, o.common, rec, {"{name}: {repaired} slot{s} left by dead writers returned to empty"});
  return 0;
}

int do_rm(Options& o) {
  if (int(o.all) + int(o.stale) + int(!o.names.empty()) != 1)
    throw Error(Exit::usage, "rm", "give slab names, --all or --stale");
  auto names = o.all ? slab::list_slabs() : o.stale ? slab::stale_slabs() : o.names;
  int status = 0;
  report::Json removed = report::Json::array();
  for (const auto& n : names) {
    try {
      slab::remove_slab(n);
      removed.push_back(n);
    } catch (const Error& e) {
      cli::print_error(kTool, e.what());
      if (status == 0) status = cli::code(e.code());
    }
  }
  if (o.common.json)
    print_json("removed", removed);
  else if (!o.common.quiet)
    for (const auto& n : removed) std::fprintf(stderr, "%s: removed %s\n", kTool, n.get<std::string>().c_str());
  return status;
}

int do_df(Options& o) {
  auto space = slab::shm_space();
  uint64_t used = 0;
  auto names = slab::list_slabs();
  for (const auto& n : names) used += slab::resident_bytes(n);
  report::Record rec;
  rec.add("schema", "shm-cache/1")
      .add("path", slab::shm_dir())
      .add("total_bytes", space.total, format_size(space.total))
      .add("free_bytes", space.free, format_size(space.free))
      .add("slabs", names.size())
      .add("slab_resident_bytes", used, format_size(used))
      .note("s", names.size() == 1 ? "" : "s");
  if (o.common.json)
    report::print_json(rec.json());
  else
    std::printf("%s\n", rec.format("{path}: {total_bytes} total, {free_bytes} free; {slabs} slab{s} holding "
                                   "{slab_resident_bytes}")
                            .c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Shared-memory slabs under /dev/shm that every process on a machine shares without copies.", kTool};
  Options o;
  cli::add_common_options(app, o.common, cli::Compute::none);
  app.require_subcommand(1);
  auto* create = app.add_subcommand("create", "Create a slab");
  create->add_option("name", o.name, "Slab name ([A-Za-z0-9._-])")->required();
  create->add_option("--len", o.len, "Dataset length (indices 0..len-1)")->required();
  create->add_option("--dims", o.dims, "Item shape of a fixed layout, e.g. 1,28,28");
  create->add_option("--dtype", o.dtype, "Element type")->capture_default_str();
  create->add_flag("--variable", o.variable, "Variable-size items (an arena with per-index offset/length)");
  create->add_option("--limit", o.limit, "Byte budget for the data, e.g. 2GiB");
  create->add_option("--slots", o.slots, "Number of cacheable items (fixed layout; instead of --limit)");
  cli::add_choice(*create, "--select", o.select, slab::selection_choices(),
                  "Cacheable indices: the first N, or a seeded hashed subset");
  create->add_option("--seed", o.seed, "Seed of --select hashed")->capture_default_str();
  create->add_option("--mode", o.mode, "Permission bits, e.g. 0640 to share with a group")->capture_default_str();
  app.add_subcommand("list", "List slabs: name, layout, size, filled %, creator, age");
  auto* stat_cmd = app.add_subcommand("stat", "Slot counts per state and bytes of one slab");
  stat_cmd->add_option("name", o.name)->required();
  auto* fill = app.add_subcommand("fill", "Fill a slab from a dataset, array or image source (rows = indices)");
  fill->add_option("name", o.name)->required();
  fill->add_option("--from", o.from, "HDF5 file, .npy, .npz, image folder, .csv/.tsv/.jsonl manifest or tar shards")
      ->required();
  fill->add_option("--dataset", o.dataset,
                   "Dataset, .npz member or manifest path field (default: a .npy file's array, a folder's images)");
  cli::add_file_options(*fill, o.files, "Images", false);
  fill->add_flag("--trust-slab-owner", o.files.trust_slab_owner, "Read a --from shm:NAME slab of another user");
  fill->add_option("--rows", o.rows, "Only rows A:B");
  fill->add_option("--workers", o.workers, "Threads")->check(CLI::Range(1, 256))->capture_default_str();
  auto* get = app.add_subcommand("get", "Write one item's raw bytes to stdout (--json: its metadata)");
  get->add_option("name", o.name)->required();
  get->add_option("index", o.index)->required();
  auto* repair = app.add_subcommand("repair", "Return slots left WRITING by dead writers (or invalid) to EMPTY");
  repair->add_option("name", o.name)->required();
  auto* rm = app.add_subcommand("rm", "Remove slabs");
  rm->add_option("names", o.names);
  rm->add_flag("--all", o.all, "Remove every slab");
  rm->add_flag("--stale", o.stale, "Remove temporary slabs whose creating process has died (smart-bench's orphans)");
  app.add_subcommand("df", "Size and free space of /dev/shm");
  // Common options are accepted after the subcommand too.
  for (auto* sub : app.get_subcommands({})) sub->fallthrough();
  app.footer(
      "EXAMPLES\n"
      "  shm-cache create imgs --len 60000 --dims 3,32,32 --dtype uint8 --slots 20000\n"
      "  shm-cache fill imgs --from data.h5 --dataset images\n"
      "  shm-cache list\n"
      "  shm-cache rm imgs\n\n"
      "EXIT STATUS\n  0 ok; 1 get: a miss; 64 usage (bad name, size or option); 65 a corrupt or foreign object,\n"
      "  a dataset whose shape does not fit; 66 input file missing; 69 no such slab; 70 internal;\n"
      "  73 cannot create (exists, or /dev/shm too small); 74 I/O error. See docs/shm-cache.md.");
  return cli::end_process(cli::run_tool(kTool, app, argc, argv, [&]() -> int {
    if (create->parsed()) return do_create(o);
    if (app.got_subcommand("list")) return do_list(o);
    if (stat_cmd->parsed()) return do_stat(o);
    if (fill->parsed()) return do_fill(o);
    if (get->parsed()) return do_get(o);
    if (repair->parsed()) return do_repair(o);
    if (rm->parsed()) return do_rm(o);
    return do_df(o);
  }));
}
