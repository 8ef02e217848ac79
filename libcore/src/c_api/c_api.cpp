// The C ABI (traincache/c_api.h): thin wrappers over the slab and the cache description that turn
// the library's typed errors into negative exit codes and a thread-local message.
#include "traincache/c_api/c_api.h"

#include <setjmp.h>
#include <signal.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <string>

#include "traincache/base/error.h"
#include "traincache/base/json_text.h"
#include "traincache/base/version.h"
#include "traincache/io/describe.h"
#include "traincache/slab/sharing.h"
#include "traincache/slab/shm_slab.h"

using namespace traincache;

struct tc_slab {
  slab::Slab slab;
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

// ---- a slab truncated under us: SIGBUS inside a call becomes -74 --------------------------------
// A process-wide SIGBUS handler, installed at the first slab call, jumps back into the call that
// faulted (t_bus_jump, set only while a call touches a mapping); a bus error anywhere else goes to
// the disposition that was there before (restored, and the faulting access runs again under it).

thread_local sigjmp_buf* t_bus_jump = nullptr;
struct sigaction g_previous_bus {};

void on_bus(int sig, siginfo_t* info, void*) {
  if (sigjmp_buf* jump = t_bus_jump) siglongjmp(*jump, 1);
  sigaction(SIGBUS, &g_previous_bus, nullptr);
  if (info == nullptr || info->si_code <= 0) raise(sig);  // sent, not a fault: deliver it again
}

void install_bus_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_bus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;  // not blocked in the handler: siglongjmp need not restore a mask
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &g_previous_bus);
  });
}

// guarded(f) for a call that reads or writes `slab`'s mapping: a bus error inside it (the object
// was truncated while in use) returns -74 with a message naming the slab; `undo` then runs under
// the same guard (giving back a claim). `f` must not own anything a jump would leak but plain data.
template <typename F, typename U>
auto bus_guarded(const slab::Slab& slab, F&& f, U&& undo) -> decltype(f()) {
  using R = decltype(f());
  install_bus_handler();
  sigjmp_buf jump;
  sigjmp_buf* const outer = t_bus_jump;
  if (sigsetjmp(jump, 0) != 0) {
    t_bus_jump = nullptr;
    if (sigsetjmp(jump, 0) == 0) {
      t_bus_jump = &jump;
      undo();
    }
    t_bus_jump = outer;
    t_error = slab.name() + ": the slab's object was truncated while in use (a bus error reading it)";
    return -static_cast<R>(Exit::io);
  }
  t_bus_jump = &jump;
  R r = guarded(f);
  t_bus_jump = outer;
  return r;
}

template <typename F>
auto bus_guarded(const slab::Slab& slab, F&& f) -> decltype(f()) {
  return bus_guarded(slab, f, [] {});
}

char* copy_string(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (!out) throw std::bad_alloc();
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

// The slab's creation options from the JSON object of tc_slab_create (unknown keys refused).
slab::CreateOptions create_options(const char* text) {
  const auto j = report::Json::parse(text ? text : "", nullptr, false);
  if (!j.is_object()) throw Error(Exit::usage, "slab options", "expected a JSON object");
  slab::CreateOptions o;
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
    o.layout = layout == "fixed" ? slab::Layout::fixed : slab::Layout::variable;
    o.dtype = parse_dtype(j.value("dtype", "uint8"));
    o.dims = j.value("dims", std::vector<uint64_t>{});
    o.slots = j.value("slots", uint64_t{0});
    o.limit_bytes = j.value("limit_bytes", uint64_t{0});
    o.selection = slab::selection_choices().parse(j.value("selection", "first"), "selection");
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
    *json = copy_string(json_text(io::describe::cache_json(path ? path : "", stats != 0)));
    return 0;
  });
}

int tc_cache_check_structure(const char* path) {
  return guarded([&] {
    const std::string p = path ? path : "";
    io::cache::require_sound_structure(io::cache::read_info(p, false), p);
    return 0;
  });
}

int tc_slab_create(const char* options_json, tc_slab** out) {
  return guarded([&] {
    *out = new tc_slab{slab::Slab::create(create_options(options_json))};
    return 0;
  });
}

namespace {

// "length L, shape [a, b], float32, content id 'X'" (", hashed selection"): what a slab holds, as the
// Python package words it.
std::string holds(uint64_t length, slab::Layout layout, const std::vector<uint64_t>& dims, DType dtype,
                  const std::string& content_id, slab::Selection selection) {
  std::string shape = "variable";
  if (layout == slab::Layout::fixed) {
    shape = "[";
    for (std::size_t i = 0; i < dims.size(); ++i) shape += (i ? ", " : "") + std::to_string(dims[i]);
    shape += "]";
  }
  return "length " + std::to_string(length) + ", shape " + shape + ", " + dtype_name(dtype) + ", content id '" +
         content_id + "'" + (selection == slab::Selection::hashed ? ", hashed selection" : "");
}

}  // namespace

int tc_slab_open_shared(const char* options_json, int trust_owner, tc_slab** out, int* created) {
  return guarded([&] {
    const slab::CreateOptions want = create_options(options_json);
    slab::Sharing sharing;
    sharing.trust_owner = trust_owner != 0;
    sharing.trust_hint = "trust_owner=True";
    sharing.owner_hint = "use another name";
    sharing.holds_other_of = [&want](const slab::SlabInfo& si) {
      return "the slab holds other items (" +
             holds(si.length, si.layout, si.dims, si.dtype, si.content_id, si.selection) + "; wanted " +
             holds(want.length, want.layout, want.dims, want.dtype, want.content_id, want.selection) +
             "): remove it (shm-cache rm " + want.name + ") or use another name";
    };
    bool made = false;
    auto slab = slab::open_shared(want, sharing, &made);
    *out = new tc_slab{std::move(*slab)};
    *created = made ? 1 : 0;
    return 0;
  });
}

int tc_slab_attach(const char* name, int writable, tc_slab** out) {
  return guarded([&] {
    *out = new tc_slab{slab::Slab::attach(name ? name : "", writable != 0)};
    return 0;
  });
}

void tc_slab_close(tc_slab* slab) { delete slab; }

int tc_slab_describe(const tc_slab* slab, int counts, char** json) {
  return bus_guarded(slab->slab, [&] {
    slab->slab.check_size();
    slab::SlotCounts c;
    if (counts) c = slab->slab.counts();
    *json = copy_string(json_text(io::describe::slab_record(slab->slab.info(), counts ? &c : nullptr).json()));
    return 0;
  });
}

int tc_slab_fd(const tc_slab* slab) { return slab->slab.fd(); }

int64_t tc_slab_slot(const tc_slab* slab, uint64_t index) {
  return bus_guarded(slab->slab, [&]() -> int64_t {
    auto slot = slab->slab.slot_of(index);
    return slot ? static_cast<int64_t>(*slot) : -1;
  });
}

int tc_slab_state(const tc_slab* slab, uint64_t index) {
  return bus_guarded(slab->slab, [&] {
    if (!slab->slab.slot_of(index)) return -1;
    return static_cast<int>(slab->slab.state(index));
  });
}

int tc_slab_locate(const tc_slab* slab, uint64_t index, uint64_t* offset, uint64_t* bytes) {
  return bus_guarded(slab->slab, [&] {
    auto view = slab->slab.view(index);
    if (!view) return 0;
    *offset = static_cast<uint64_t>(static_cast<const char*>(view.data) - static_cast<const char*>(slab->slab.base()));
    *bytes = view.bytes;
    return 1;
  });
}

int tc_slab_read(const tc_slab* slab, uint64_t index, void* dst, uint64_t capacity, uint64_t* bytes) {
  return bus_guarded(slab->slab, [&] {
    auto view = slab->slab.view(index);
    if (!view) return 0;
    if (bytes) *bytes = view.bytes;
    if (view.bytes > capacity)
      throw Error(Exit::data, slab->slab.name(),
                  "index " + std::to_string(index) + ": the item's " + std::to_string(view.bytes) +
                      " bytes do not fit in " + std::to_string(capacity));
    std::memcpy(dst, view.data, view.bytes);
    return 1;
  });
}

int tc_slab_begin_write(tc_slab* slab, uint64_t index, uint64_t bytes, uint64_t* offset) {
  return bus_guarded(slab->slab, [&] {
    auto at = slab->slab.begin_write(index, bytes);
    if (!at) return 0;
    *offset = *at;
    return 1;
  });
}

int tc_slab_put(tc_slab* slab, uint64_t index, const void* src, uint64_t bytes) {
  bool claimed = false;
  return bus_guarded(
      slab->slab,
      [&] {
        auto at = slab->slab.begin_write(index, bytes);
        if (!at) return 0;
        claimed = true;
        if (bytes) std::memcpy(static_cast<char*>(const_cast<void*>(slab->slab.base())) + *at, src, bytes);
        if (!slab->slab.commit(index))
          throw Error(Exit::internal, slab->slab.name(),
                      "index " + std::to_string(index) + ": the claim was lost before it was published");
        claimed = false;
        return 1;
      },
      [&] {
        if (claimed) slab->slab.abort(index);
      });
}

int tc_slab_commit(tc_slab* slab, uint64_t index) {
  return bus_guarded(slab->slab, [&] { return slab->slab.commit(index) ? 1 : 0; });
}

int tc_slab_abort(tc_slab* slab, uint64_t index) {
  return bus_guarded(slab->slab, [&] { return slab->slab.abort(index) ? 1 : 0; });
}

int64_t tc_slab_repair(tc_slab* slab) {
  return bus_guarded(slab->slab, [&] { return static_cast<int64_t>(slab->slab.repair()); });
}

int tc_slab_remove(const char* name) {
  return guarded([&] {
    slab::remove_slab(name ? name : "");
    return 0;
  });
}

}  // extern "C"
