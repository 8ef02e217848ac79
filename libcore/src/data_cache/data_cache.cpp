#include "traincache/data_cache/data_cache.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "traincache/base/error.h"
#include "traincache/base/format.h"
#include "traincache/base/interrupt.h"
#include "traincache/base/sha256.h"
#include "traincache/slab/sharing.h"

namespace traincache::data_cache {

Spec parse(const std::string& text, const std::string& option) {
  Spec s;
  if (text == "none") return s;
  if (text == "full") {
    s.mode = Mode::full;
    return s;
  }
  const std::string prefix = "stochastic:";
  if (text.compare(0, prefix.size(), prefix) == 0) {
    const std::string f = text.substr(prefix.size());
    char* end = nullptr;
    double v = std::strtod(f.c_str(), &end);
    if (f.empty() || *end != '\0' || !(v > 0 && v <= 1))
      throw Error(Exit::usage, option, "stochastic:F needs a fraction 0 < F <= 1, got '" + f + "'");
    s.mode = Mode::stochastic;
    s.fraction = v;
    return s;
  }
  const std::string smart = "smart:";
  if (text.compare(0, smart.size(), smart) == 0) {
    const std::string nr = text.substr(smart.size());
    const auto comma = nr.find(',');
    char* end = nullptr;
    const std::string n_text = nr.substr(0, comma), r_text = comma == std::string::npos ? "" : nr.substr(comma + 1);
    long long n = std::strtoll(n_text.c_str(), &end, 10);
    const bool n_ok = !n_text.empty() && *end == '\0' && n > 0;
    double r = std::strtod(r_text.c_str(), &end);
    const bool r_ok = !r_text.empty() && *end == '\0' && r > 0 && r <= 1;
    if (!n_ok || !r_ok)
      throw Error(Exit::usage, option,
                  "smart:N,r needs a window of N > 0 rows and a replace rate 0 < r <= 1, got '" + nr + "'");
    s.mode = Mode::smart;
    s.cache_num = n;
    s.replace_rate = r;
    return s;
  }
  throw Error(Exit::usage, option, "expected none, full, stochastic:F or smart:N,r, got '" + text + "'");
}

std::string content_id(const std::string& parts) { return "gc-train-rows:" + sha256_hex(parts).substr(0, 32); }

Stats& Stats::operator+=(const Stats& o) {
  hits += o.hits;
  misses += o.misses;
  stored += o.stored;
  replaced += o.replaced;
  slots += o.slots;
  rows += o.rows;
  bytes += o.bytes;
  slabs.insert(slabs.end(), o.slabs.begin(), o.slabs.end());
  return *this;
}

struct RowCache::Counters {
  std::atomic<uint64_t> hits{0}, misses{0}, stored{0};
};

namespace {

// How the data caches refuse a slab they must not use (docs/gc-train.md, "The data cache").
// `what`: the rows (row caches, windows) or items (token slabs) a slab made for other data holds.
slab::Sharing data_cache_sharing(const std::string& name, bool trust_owner, const std::string& what) {
  slab::Sharing s;
  s.trust_owner = trust_owner;
  s.owner_hint = "another --data-cache-keep name";
  s.holds_other = "slab holds other " + what + " than this run's data (remove it: shm-cache rm " + name + ")";
  s.check_seal = true;
  return s;
}

}  // namespace

std::unique_ptr<slab::Slab> open_slab(const slab::CreateOptions& want, uint64_t need, bool trust_owner, bool* created) {
  auto slab = slab::open_shared(want, data_cache_sharing(want.name, trust_owner, "rows"), created, [&] {
    const auto space = slab::shm_space();
    if (need > space.free)
      throw Error(Exit::cant_create, "--data-cache",
                  "the cache needs " + format_size(need) + " but " + slab::shm_dir() + " has " +
                      format_size(space.free) + " free (cache a part: stochastic:F or --data-cache-limit)");
  });
  if (!*created) slab->repair();
  return slab;
}

slab::CreateOptions RowCache::slab_options(const Spec& spec, uint64_t rows, DType dtype,
                                           const std::vector<uint64_t>& dims, std::size_t* row_bytes) {
  *row_bytes = dtype_size(dtype);
  for (auto d : dims) *row_bytes *= static_cast<std::size_t>(d);
  slab::CreateOptions want;
  want.length = rows;
  want.dtype = dtype;
  want.dims = dims;
  uint64_t slots = rows;
  if (spec.mode == Mode::stochastic)
    slots = spec.limit_bytes > 0 ? spec.limit_bytes / std::max<std::size_t>(1, *row_bytes)
                                 : static_cast<uint64_t>(std::ceil(spec.fraction * static_cast<double>(rows)));
  if (slots == 0)
    throw Error(Exit::usage, "--data-cache-limit", "the budget holds no row of " + format_size(*row_bytes));
  want.slots = std::max<uint64_t>(1, std::min(slots, rows));
  return want;
}

std::unique_ptr<RowCache> RowCache::open(const Spec& spec, const std::string& id, uint64_t rows, DType dtype,
                                         const std::vector<uint64_t>& dims, bool trust_owner) {
  if (spec.mode == Mode::none) return nullptr;
  std::unique_ptr<RowCache> c(new RowCache());
  c->counts_ = std::make_unique<Counters>();
  c->rows_ = rows;
  slab::CreateOptions want = slab_options(spec, rows, dtype, dims, &c->row_bytes_);
  want.name = spec.keep.empty() ? "gc-train-" + id.substr(id.size() - 16) : spec.keep;
  slab::validate_name(want.name);
  want.content_id = id;
  want.tool = "gc-train";
  want.temporary = spec.keep.empty();
  bool created = false;
  c->slab_ = open_slab(want, want.slots * c->row_bytes_, trust_owner, &created);
  c->name_ = want.name;
  c->remove_at_end_ = created && spec.keep.empty();
  c->kept_ = !spec.keep.empty();
  return c;
}

std::unique_ptr<RowCache> RowCache::create_own(const Spec& spec, const std::string& name, const std::string& tool,
                                               uint64_t rows, DType dtype, const std::vector<uint64_t>& dims) {
  std::unique_ptr<RowCache> c(new RowCache());
  c->counts_ = std::make_unique<Counters>();
  c->rows_ = rows;
  slab::CreateOptions want = slab_options(spec, rows, dtype, dims, &c->row_bytes_);
  want.name = name;
  want.tool = tool;
  want.temporary = true;  // removed on exit; `shm-cache rm --stale` once the creator has died
  c->slab_ = std::make_unique<slab::Slab>(slab::Slab::create(want));
  c->name_ = name;
  c->remove_at_end_ = true;
  return c;
}

RowCache::~RowCache() {
  seal_if_complete();
  slab_.reset();
  if (!remove_at_end_) return;
  try {
    slab::remove_slab(name_);
  } catch (const Error&) {  // already removed (shm-cache rm): nothing to do
  }
}

void RowCache::seal_if_complete() {
  if (!kept_ || !slab_) return;
  try {
    const auto si = slab_->info();
    if (si.sealed_digest || slab_->counts().filled != si.slots) return;
    slab_->seal(slab_->data_digest());  // every slot filled: nothing in it changes any more
  } catch (const Error&) {              // a slab we cannot seal stays unsealed, as partly filled ones do
  }
}

std::vector<std::size_t> RowCache::lookup(const std::vector<int64_t>& rows, void* out) {
  std::vector<std::size_t> misses;
  auto* dst = static_cast<char*>(out);
  for (std::size_t k = 0; k < rows.size(); ++k) {
    auto v = slab_->view(static_cast<uint64_t>(rows[k]));
    if (v && v.bytes == row_bytes_)
      std::memcpy(dst + k * row_bytes_, v.data, row_bytes_);
    else
      misses.push_back(k);
  }
  counts_->hits += rows.size() - misses.size();
  counts_->misses += misses.size();
  return misses;
}

void RowCache::store(int64_t row, const void* data) {
  if (slab_->set(static_cast<uint64_t>(row), data, row_bytes_)) ++counts_->stored;
}

uint64_t RowCache::filled_bytes() const { return slab_->counts().filled_bytes; }

Stats RowCache::stats() const {
  Stats s;
  s.hits = counts_->hits;
  s.misses = counts_->misses;
  s.stored = counts_->stored;
  const auto si = slab_->info();
  s.slots = si.slots;
  s.rows = rows_;
  s.bytes = si.slots * row_bytes_;
  s.slabs.push_back(name_);
  return s;
}

namespace {

bool process_alive(int64_t pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

void pause_or_stop(const std::string& name) {
  if (interrupt_requested()) throw Error(Exit::interrupted, name, "interrupted while waiting for the slab");
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// The claim on making slab `name`: a file beside the slabs (hidden from their listing) holding the
// maker's pid; false when a live process holds it (a dead one's is removed).
bool take_claim(const std::string& path) {
  int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) {
    const std::string pid = std::to_string(getpid());
    const bool ok = ::write(fd, pid.data(), pid.size()) == static_cast<ssize_t>(pid.size());
    ::close(fd);
    if (!ok) {
      ::unlink(path.c_str());
      throw Error(Exit::cant_create, path, errno_text(errno ? errno : EIO));
    }
    return true;
  }
  if (errno != EEXIST) throw Error(Exit::cant_create, path, errno_text(errno));
  char buf[32] = "";
  int rfd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (rfd >= 0) {
    const ssize_t n = ::read(rfd, buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = '\0';
    ::close(rfd);
  }
  const long long holder = std::atoll(buf);
  if (holder > 0 && !process_alive(holder)) ::unlink(path.c_str());  // its maker died
  return false;
}

}  // namespace

std::unique_ptr<SealedSlab> SealedSlab::open(slab::CreateOptions want, bool trust_owner,
                                             const std::function<SealedItems()>& make) {
  std::unique_ptr<SealedSlab> c(new SealedSlab());
  c->name_ = want.name;
  want.layout = slab::Layout::variable;  // items of any size
  const std::string claim = slab::shm_dir() + "/." + slab::object_prefix() + want.name + ".claim";
  for (;;) {
    std::unique_ptr<slab::Slab> slab;
    try {
      slab = std::make_unique<slab::Slab>(slab::Slab::attach(want.name, false));
    } catch (const Error& e) {
      if (e.code() != Exit::unavailable) throw;
    }
    if (slab) {
      const auto si = slab->info();
      slab::check_shared(si, want, data_cache_sharing(want.name, trust_owner, "items"));
      if (si.sealed_digest) {
        if (slab->data_digest() != *si.sealed_digest)
          throw Error(Exit::data, want.name,
                      "slab changed since it was sealed (remove it: shm-cache rm " + want.name + ")");
        c->slab_ = std::move(slab);
        return c;
      }
      slab.reset();
      if (!process_alive(si.creator_pid)) {  // made by a process that died before sealing it
        try {
          slab::remove_slab(want.name);
        } catch (const Error&) {  // someone else removed it first
        }
        continue;
      }
      pause_or_stop(want.name);
      continue;
    }
    if (!take_claim(claim)) {
      pause_or_stop(want.name);
      continue;
    }
    struct Unclaim {
      const std::string& path;
      ~Unclaim() { ::unlink(path.c_str()); }
    } unclaim{claim};
    const auto names = slab::list_slabs();
    if (std::find(names.begin(), names.end(), want.name) != names.end()) continue;  // made since we looked
    SealedItems items = make();
    want.length = items.count;
    want.slots = items.count;
    want.limit_bytes = std::max<uint64_t>(1, items.bytes);
    auto made = std::make_unique<slab::Slab>(slab::Slab::create(want));
    try {
      items.fill(*made);
      made->seal(made->data_digest());
    } catch (...) {
      made.reset();
      slab::remove_slab(want.name);
      throw;
    }
    c->slab_ = std::move(made);
    c->made_ = true;
    c->remove_at_end_ = want.temporary;
    return c;
  }
}

SealedSlab::~SealedSlab() {
  slab_.reset();
  if (!remove_at_end_) return;
  try {
    slab::remove_slab(name_);
  } catch (const Error&) {  // already removed (shm-cache rm): nothing to do
  }
}

Stats SealedSlab::stats() const {
  Stats s;
  const auto si = slab_->info();
  s.stored = made_ ? si.slots : 0;
  s.slots = si.slots;
  s.rows = si.length;
  s.bytes = si.arena_bytes;
  s.slabs.push_back(name_);
  return s;
}

}  // namespace traincache::data_cache
