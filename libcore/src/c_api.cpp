// The C ABI (traincache/c_api.h): thin wrappers over the slab and the cache description that turn
// the library's typed errors into negative exit codes and a thread-local message.
#include "traincache/c_api.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "traincache/describe.h"
#include "traincache/error.h"
#include "traincache/shm_slab.h"
#include "traincache/version.h"

using namespace traincache;

struct tc_slab {
  shm::Slab slab;
};

namespace {

thread_local std::string t_error;

// Runs `f` (which returns the result, >= 0); a thrown error becomes -code and its message.
template <typename F>
auto guarded(F&& f) -> decltype(f()) {
  t_error.clear();
  try {
    return f();
  } catch (const Error& e) {
    t_error = e.what();
    return -static_cast<decltype(f())>(e.code());
  } catch (const std::bad_alloc&) {
    t_error = "out of memory";
  } catch (const std::exception& e) {
    t_error = std::string("internal error: ") + e.what();
  }
  return -static_cast<decltype(f())>(Exit::internal);
}

char* copy_string(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (!out) throw std::bad_alloc();
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

// The slab's creation options from the JSON object of tc_slab_create (unknown keys refused).
shm::CreateOptions create_options(const char* text) {
  const auto j = report::Json::parse(text ? text : "", nullptr, false);
  if (!j.is_object()) throw Error(Exit::usage, "slab options", "expected a JSON object");
  shm::CreateOptions o;
  static const char* const kKeys[] = {"name",       "length",      "layout",    "dtype", "dims",
                                      "slots",      "limit_bytes", "selection", "seed",  "mode",
                                      "content_id", "temporary",   "tool"};
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const char* k : kKeys) known = known || key == k;
    if (!known) throw Error(Exit::usage, "slab options", "unknown key '" + key + "'");
  }
  try {
    o.name = j.value("name", "");
    o.length = j.value("length", uint64_t{0});
    const std::string layout = j.value("layout", "fixed");
    if (layout != "fixed" && layout != "variable")
      throw Error(Exit::usage, "layout", "expected fixed or variable, got '" + layout + "'");
    o.layout = layout == "fixed" ? shm::Layout::fixed : shm::Layout::variable;
    o.dtype = parse_dtype(j.value("dtype", "uint8"));
    o.dims = j.value("dims", std::vector<uint64_t>{});
    o.slots = j.value("slots", uint64_t{0});
    o.limit_bytes = j.value("limit_bytes", uint64_t{0});
    o.selection = shm::selection_choices().parse(j.value("selection", "first"), "selection");
    o.seed = j.value("seed", uint64_t{0});
    o.mode = j.value("mode", 0600u);
    o.content_id = j.value("content_id", "");
    o.temporary = j.value("temporary", false);
    o.tool = j.value("tool", "");
  } catch (const report::Json::exception& e) {
    throw Error(Exit::usage, "slab options", std::string("a value has the wrong type (") + e.what() + ")");
  }
  return o;
}

}  // namespace

extern "C" {

int tc_abi_version(void) { return TC_ABI_VERSION; }

const char* tc_version(void) {
  static const std::string v = std::string(version()) + " (git " + git_revision() + ")";
  return v.c_str();
}

const char* tc_last_error(void) { return t_error.c_str(); }

void tc_free(char* s) { std::free(s); }

int tc_cache_describe(const char* path, int stats, char** json) {
  return guarded([&] {
    *json = copy_string(describe::cache_json(path ? path : "", stats != 0).dump());
    return 0;
  });
}

int tc_slab_create(const char* options_json, tc_slab** out) {
  return guarded([&] {
    *out = new tc_slab{shm::Slab::create(create_options(options_json))};
    return 0;
  });
}

int tc_slab_attach(const char* name, int writable, tc_slab** out) {
  return guarded([&] {
    *out = new tc_slab{shm::Slab::attach(name ? name : "", writable != 0)};
    return 0;
  });
}

void tc_slab_close(tc_slab* slab) { delete slab; }

int tc_slab_describe(const tc_slab* slab, int counts, char** json) {
  return guarded([&] {
    shm::SlotCounts c;
    if (counts) c = slab->slab.counts();
    *json = copy_string(describe::slab_record(slab->slab.info(), counts ? &c : nullptr).json().dump());
    return 0;
  });
}

int tc_slab_fd(const tc_slab* slab) { return slab->slab.fd(); }

int64_t tc_slab_slot(const tc_slab* slab, uint64_t index) {
  auto slot = slab->slab.slot_of(index);
  return slot ? static_cast<int64_t>(*slot) : -1;
}

int tc_slab_state(const tc_slab* slab, uint64_t index) {
  if (!slab->slab.slot_of(index)) return -1;
  return static_cast<int>(slab->slab.state(index));
}

int tc_slab_locate(const tc_slab* slab, uint64_t index, uint64_t* offset, uint64_t* bytes) {
  auto view = slab->slab.view(index);
  if (!view) return 0;
  *offset = static_cast<uint64_t>(static_cast<const char*>(view.data) - static_cast<const char*>(slab->slab.base()));
  *bytes = view.bytes;
  return 1;
}

int tc_slab_begin_write(tc_slab* slab, uint64_t index, uint64_t bytes, uint64_t* offset) {
  return guarded([&] {
    auto at = slab->slab.begin_write(index, bytes);
    if (!at) return 0;
    *offset = *at;
    return 1;
  });
}

int tc_slab_commit(tc_slab* slab, uint64_t index) {
  return guarded([&] { return slab->slab.commit(index) ? 1 : 0; });
}

int tc_slab_abort(tc_slab* slab, uint64_t index) {
  return guarded([&] { return slab->slab.abort(index) ? 1 : 0; });
}

int64_t tc_slab_repair(tc_slab* slab) {
  return guarded([&] { return static_cast<int64_t>(slab->slab.repair()); });
}

int tc_slab_remove(const char* name) {
  return guarded([&] {
    shm::remove_slab(name ? name : "");
    return 0;
  });
}

}  // extern "C"
