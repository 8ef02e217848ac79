#include "traincache/train.h"

#include <ATen/CPUGeneratorImpl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>
#include <cstring>
#include <cerrno>

#include "traincache/cache_file.h"
#include "traincache/content_hash.h"
#include "traincache/dist.h"
#include "traincache/encoder.h"
#include "traincache/error.h"
#include "traincache/gradcache.h"
#include "traincache/h5.h"
#include "traincache/interrupt.h"
#include "traincache/safe_file.h"
#include "traincache/shm_slab.h"
#include "traincache/text.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace traincache::train {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// ---- models -------------------------------------------------------------------------------

// A built-in head "mlp:H1,...,Hn" (ReLU between layers) or "linear:D", as a TorchScript module so
// that --out is loadable with torch.jit.load. Weights are initialised like nn.Linear.
torch::jit::Module build_head(const std::string& spec, int64_t in_dim) {
  auto colon = spec.find(':');
  std::string kind = spec.substr(0, colon);
  if (kind != "mlp" && kind != "linear")
    throw Error(Exit::usage, "--head", "expected mlp:H1,...,Hn, linear:D or a TorchScript file, got '" + spec + "'");
  std::vector<int64_t> dims;
  std::string rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  std::size_t pos = 0;
  while (pos < rest.size()) {
    std::size_t next = rest.find(',', pos);
    if (next == std::string::npos) next = rest.size();
    try {
      dims.push_back(std::stoll(rest.substr(pos, next - pos)));
    } catch (const std::exception&) {
      throw Error(Exit::usage, "--head", "not a layer width in '" + spec + "'");
    }
    if (dims.back() <= 0) throw Error(Exit::usage, "--head", "layer widths must be positive");
    pos = next + 1;
  }
  if (dims.empty() || (kind == "linear" && dims.size() != 1))
    throw Error(Exit::usage, "--head", "'" + spec + "' names no layer widths");
  torch::jit::Module m("TraincacheHead");
  std::string body = "def forward(self, x):\n  h = x\n";
  int64_t fan_in = in_dim;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    auto w = torch::empty({dims[i], fan_in}).uniform_(-bound, bound);
    auto b = torch::empty({dims[i]}).uniform_(-bound, bound);
    m.register_parameter("weight" + std::to_string(i), w, false);
    m.register_parameter("bias" + std::to_string(i), b, false);
    body += "  h = torch.matmul(h, self.weight" + std::to_string(i) + ".t()) + self.bias" + std::to_string(i) + "\n";
    if (i + 1 < dims.size()) body += "  h = torch.relu(h)\n";
    fan_in = dims[i];
  }
  body += "  return h\n";
  m.define(body);
  return m;
}


void refuse_batchnorm(const torch::jit::Module& m, const std::string& what) {
  for (const auto& b : m.named_buffers())
    if (b.name.find("running_mean") != std::string::npos)
      throw Error(Exit::data, what,
                  "has BatchNorm layers (" + b.name +
                      "); gradient caching would update their running statistics twice: use "
                      "LayerNorm/GroupNorm, or --no-gradcache");
}

gc::Tower tower_of(torch::jit::Module* m, const std::string& name) {
  return [m, name](const std::vector<torch::Tensor>& inputs) {
    std::vector<torch::jit::IValue> args(inputs.begin(), inputs.end());
    torch::jit::IValue out;
    try {
      out = m->forward(args);
    } catch (const c10::Error& e) {
      throw Error(Exit::data, name, "rejected the input: " + encode::torch_error_message(e.what_without_backtrace()));
    } catch (const std::exception& e) {
      throw Error(Exit::data, name, "rejected the input: " + encode::torch_error_message(e.what()));
    }
    if (!out.isTensor()) throw Error(Exit::data, name, "forward() must return one tensor");
    auto t = out.toTensor();
    return t.dim() == 2 ? t : t.reshape({t.size(0), -1});
  };
}

// ---- data ---------------------------------------------------------------------------------

struct Data {
  std::vector<std::shared_ptr<shm::Slab>> slabs;          // keep shared embeddings mapped
  std::vector<torch::Tensor> query, passage, negatives;  // [N, ...]; negatives [N, k, ...]
  torch::Tensor labels;                                   // grouped mode
  int64_t rows = 0;
  int64_t hard_negatives = 0;
};

torch::Tensor read_all(hid_t file, const std::string& path, const std::string& ds, double scale,
                       torch::Device device, torch::Dtype float_type) {
  h5::Id d = h5::open_dataset(file, path, ds);
  auto info = h5::describe(d.get(), ds);
  encode::require_numeric_input(info, path);
  auto t = encode::read_input_rows(d.get(), info, 0, info.rows(), scale);
  if (t.is_floating_point()) t = t.to(float_type);
  return t.to(device);
}

void same_rows(const std::string& path, const std::string& a, int64_t na, const std::string& b, int64_t nb) {
  if (na != nb)
    throw Error(Exit::data, path,
                "rows mismatch: '" + a + "' has " + std::to_string(na) + " rows but '" + b + "' has " +
                    std::to_string(nb));
}

// Rows `idx` of every tensor.
std::vector<torch::Tensor> gather(const std::vector<torch::Tensor>& ts, const torch::Tensor& idx) {
  std::vector<torch::Tensor> out;
  for (const auto& t : ts) out.push_back(t.index_select(0, idx.to(t.device())));
  return out;
}

// Passages of a batch grouped per query: [pos_0, neg_0_1..neg_0_k, pos_1, ...].
std::vector<torch::Tensor> passage_group(const Data& d, const torch::Tensor& idx) {
  auto pos = gather(d.passage, idx);
  if (d.negatives.empty()) return pos;
  auto neg = gather(d.negatives, idx);
  std::vector<torch::Tensor> out;
  for (std::size_t i = 0; i < pos.size(); ++i) {
    auto g = torch::cat({pos[i].unsqueeze(1), neg[i]}, 1);  // [B, 1+k, ...]
    std::vector<int64_t> shape{-1};
    for (int64_t s = 2; s < g.dim(); ++s) shape.push_back(g.size(s));
    out.push_back(g.reshape(shape));
  }
  return out;
}

// Attaches to slab `slab_name` when it exists and may be trusted (this user's, or any owner's with
// --trust-slab-owner; made for the same cache contents), or creates it.
std::shared_ptr<shm::Slab> shared_slab(const shm::CreateOptions& want, bool trust_owner, const std::string& cache) {
  std::shared_ptr<shm::Slab> slab;
  try {
    slab = std::make_shared<shm::Slab>(shm::Slab::attach(want.name, true));
  } catch (const Error& e) {
    if (e.code() != Exit::unavailable) throw;
  }
  if (!slab) {
    try {
      return std::make_shared<shm::Slab>(shm::Slab::create(want));
    } catch (const Error& e) {
      if (e.code() != Exit::cant_create) throw;
      slab = std::make_shared<shm::Slab>(shm::Slab::attach(want.name, true));  // lost a race
    }
  }
  auto si = slab->info();
  if (si.uid != ::geteuid() && !trust_owner)
    throw Error(Exit::data, want.name,
                "slab is owned by another user (uid " + std::to_string(si.uid) +
                    "); use --trust-slab-owner to share it, or another --cache-shm name");
  if (si.content_id != want.content_id)
    throw Error(Exit::data, want.name,
                "slab holds other embeddings than " + cache + " (remove it: shm-cache rm " + want.name + ")");
  if (si.layout != shm::Layout::fixed || si.dtype != DType::f32 || si.dims != want.dims || si.length != want.length ||
      si.slots != want.length || si.selection != shm::Selection::first)
    throw Error(Exit::data, want.name, "slab does not have the shape of the cache's embeddings");
  return slab;
}

// Fills the slab's missing rows from dataset `d` of `cache` (set() skips filled slots, so
// concurrent processes cooperate) until every row is filled. Slots left WRITING by a dead process
// are repaired and refilled at once; an invalid slot state means a corrupt slab.
void fill_shared(shm::Slab& slab, hid_t d, const std::string& cache, int64_t rows, int64_t dim) {
  constexpr int64_t kBlock = 4096;
  std::vector<float> buf;
  for (int tries = 0;; ++tries) {
    for (int64_t s = 0; s < rows; s += kBlock) {
      int64_t n = std::min(kBlock, rows - s);
      bool missing = false;
      for (int64_t i = 0; i < n && !missing; ++i) missing = slab.state(uint64_t(s + i)) == shm::SlotState::empty;
      if (!missing) continue;
      buf.resize(static_cast<std::size_t>(n * dim));
      h5::read_rows(d, cache, s, n, H5T_NATIVE_FLOAT, buf.data());
      for (int64_t i = 0; i < n; ++i) slab.set(uint64_t(s + i), buf.data() + i * dim, dim * sizeof(float));
    }
    auto c = slab.counts();
    if (c.invalid > 0)
      throw Error(Exit::data, slab.info().name,
                  std::to_string(c.invalid) + " slot(s) hold an invalid state: corrupt slab (remove it: shm-cache rm " +
                      slab.info().name + ")");
    if (c.filled == uint64_t(rows)) return;
    if (slab.repair() > 0) continue;  // writers that died mid-row: their rows are ours to write
    if (tries > 12000)
      throw Error(Exit::temp_failure, slab.info().name, "still being filled by another process after 120 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// The whole slab against the cache file, block by block; Error(data) at the first difference.
void compare_with_cache(const shm::Slab& slab, hid_t d, const std::string& cache, int64_t rows, int64_t dim) {
  constexpr int64_t kBlock = 4096;
  std::vector<float> buf;
  const char* items = static_cast<const char*>(slab.items());
  for (int64_t s = 0; s < rows; s += kBlock) {
    int64_t n = std::min(kBlock, rows - s);
    buf.resize(static_cast<std::size_t>(n * dim));
    h5::read_rows(d, cache, s, n, H5T_NATIVE_FLOAT, buf.data());
    if (std::memcmp(items + s * dim * sizeof(float), buf.data(), buf.size() * sizeof(float)) != 0)
      throw Error(Exit::data, slab.info().name,
                  "slab holds other embeddings than " + cache + " (remove it: shm-cache rm " + slab.info().name + ")");
  }
}

// Embeddings `name` of the cache placed in the slab "<shm>-<name>", shared by every process on
// the machine: the first one creates and fills it, the others attach (and help fill). The first
// process to see it complete compares it with the cache file in full and seals it with a digest;
// later ones check the digest. Returns a zero-copy [rows, dim] float32 view of the slab.
torch::Tensor shared_embeddings(Data& data, const std::string& shm_name, bool trust_owner, const std::string& cache,
                                const std::string& fingerprint, const std::string& name, int64_t rows) {
  h5::Id f = h5::open_file(cache);
  std::string dpath = "/embeddings/" + name;
  h5::Id d = h5::open_dataset(f.get(), cache, dpath);
  auto di = h5::describe(d.get(), dpath);
  const int64_t dim = di.row_elements();
  shm::CreateOptions c;
  c.name = shm_name + "-" + name;
  c.length = static_cast<uint64_t>(rows);
  c.dtype = DType::f32;
  c.dims = {static_cast<uint64_t>(dim)};
  c.slots = c.length;
  c.content_id = fingerprint.substr(0, 64) + "/" + name.substr(0, 60);
  c.tool = "gc-train";
  auto slab = shared_slab(c, trust_owner, cache);
  fill_shared(*slab, d.get(), cache, rows, dim);
  auto sealed = slab->info().sealed_digest;
  std::string digest = slab->data_digest();
  if (!sealed) {
    compare_with_cache(*slab, d.get(), cache, rows, dim);
    slab->seal(digest);
  } else if (*sealed != digest) {
    throw Error(Exit::data, c.name,
                "slab contents changed after it was filled and sealed (remove it: shm-cache rm " + c.name + ")");
  }
  data.slabs.push_back(slab);
  return torch::from_blob(const_cast<void*>(slab->items()), {rows, dim}, torch::kFloat32);
}

// A path as the file system resolves it (so that "./a.h5" and "a.h5" are one setting); a value
// that names no file (a built-in head spec) stays as it is.
std::string canonical(const std::string& path) {
  if (path.empty()) return path;
  std::error_code ec;
  auto p = fs::canonical(path, ec);
  return ec ? path : p.string();
}

// ---- checkpoints --------------------------------------------------------------------------

std::vector<torch::Tensor> unique_params(const std::vector<torch::jit::Module*>& mods) {
  std::vector<torch::Tensor> params;
  std::set<const void*> seen;
  for (auto* m : mods)
    for (const auto& p : m->parameters())
      if (seen.insert(p.unsafeGetTensorImpl()).second) params.push_back(p);
  return params;
}

torch::Tensor rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_rng_state(const torch::Tensor& s) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(s);
}

// Checkpoint files wrap the archive of the training state in an outer archive that carries its
// digest, so that a flipped byte anywhere is refused on resume instead of trained on.
constexpr const char* kCheckpointFormat = "traincache-checkpoint/2";

std::string payload_digest(const std::string& bytes) {
  ContentHash h;
  h.update(bytes);
  return h.hex_digest();
}

// Writes `bytes` to `path` through an unpredictable temporary name, renamed into place when
// complete; write errors (a full disk) -> Error(io), the old file left as it was.
void write_atomically(const std::string& path, const std::string& bytes) {
  files::TempFile tmp(path);
  tmp.write_all(bytes.data(), bytes.size());
  tmp.commit();
}

// `rngs` holds every rank's generator state, one row per rank ([1, n] for one process).
void save_checkpoint(const std::string& dir, int64_t step, const std::vector<torch::Tensor>& params,
                     torch::optim::Optimizer& opt, const std::string& config, const torch::Tensor& rngs) {
  torch::serialize::OutputArchive ar;
  ar.write("step", torch::tensor(step));
  ar.write("rng", rngs[0].contiguous());
  ar.write("rng_ranks", rngs.contiguous());
  ar.write("world_size", torch::tensor(rngs.size(0)));
  ar.write("config", c10::IValue(config));
  for (std::size_t i = 0; i < params.size(); ++i) ar.write("param" + std::to_string(i), params[i].detach());
  torch::serialize::OutputArchive opt_ar;
  opt.save(opt_ar);
  ar.write("optimizer", opt_ar);
  std::ostringstream inner;
  ar.save_to(inner);
  std::string payload = inner.str();
  torch::serialize::OutputArchive outer;
  outer.write("format", c10::IValue(std::string(kCheckpointFormat)));
  outer.write("payload", torch::from_blob(payload.data(), {static_cast<int64_t>(payload.size())}, torch::kUInt8));
  outer.write("payload_xxh3", c10::IValue(payload_digest(payload)));
  std::ostringstream bytes;
  outer.save_to(bytes);
  write_atomically(dir + "/checkpoint.pt", bytes.str());
}

// The training state inside a checkpoint file, after its digest was checked.
std::string checkpoint_payload(const std::string& path) {
  torch::serialize::InputArchive outer;
  c10::IValue format, digest;
  torch::Tensor payload;
  try {
    outer.load_from(path);
    outer.read("format", format);
    outer.read("payload", payload);
    outer.read("payload_xxh3", digest);
  } catch (const std::exception&) {
    throw Error(Exit::data, path, "unreadable checkpoint (damaged, or written by an older gc-train)");
  }
  if (!format.isString() || format.toStringRef() != kCheckpointFormat || !digest.isString() ||
      payload.scalar_type() != torch::kUInt8 || payload.dim() != 1)
    throw Error(Exit::data, path, "unreadable checkpoint (not a " + std::string(kCheckpointFormat) + " file)");
  payload = payload.contiguous();
  std::string bytes(static_cast<const char*>(payload.data_ptr()), static_cast<std::size_t>(payload.numel()));
  if (payload_digest(bytes) != digest.toStringRef())
    throw Error(Exit::data, path, "checkpoint damaged: its contents do not match their digest");
  return bytes;
}

// Settings whose values differ between two config documents ("data, optimizer").
std::string config_diff(const std::string& stored, const std::string& now) {
  json a = json::parse(stored, nullptr, false), b = json::parse(now, nullptr, false);
  if (a.is_discarded() || !a.is_object()) return "unknown";
  std::string out;
  std::set<std::string> keys;
  for (const auto& [k, v] : a.items()) keys.insert(k);
  for (const auto& [k, v] : b.items()) keys.insert(k);
  for (const auto& k : keys)
    if (a.value(k, json()) != b.value(k, json())) out += (out.empty() ? "" : ", ") + k;
  return out.empty() ? "unknown" : out;
}

// Returns the step stored in the checkpoint. Rank `rank` of `world_size` takes its own generator state.
int64_t load_checkpoint(const std::string& path, const std::vector<torch::Tensor>& params,
                        torch::optim::Optimizer& opt, const std::string& config, int rank, int world_size) {
  const std::string payload = checkpoint_payload(path);
  torch::serialize::InputArchive ar;
  torch::Tensor step, rng, world;
  c10::IValue stored;
  try {
    ar.load_from(payload.data(), payload.size());
    ar.read("step", step);
    ar.read("rng_ranks", rng);
    ar.read("world_size", world);
    ar.read("config", stored);
  } catch (const std::exception&) {
    throw Error(Exit::data, path, "unreadable checkpoint");
  }
  if (!stored.isString()) throw Error(Exit::data, path, "unreadable checkpoint (no settings)");
  if (stored.toStringRef() != config)
    throw Error(Exit::data, path,
                "checkpoint was written with other settings (changed: " + config_diff(stored.toStringRef(), config) +
                    ")");
  if (world.item<int64_t>() != world_size || rng.size(0) != world_size)
    throw Error(Exit::usage, path,
                "checkpoint was written by " + std::to_string(world.item<int64_t>()) +
                    " process(es); resume it with WORLD_SIZE=" + std::to_string(world.item<int64_t>()) +
                    " (this run has " + std::to_string(world_size) + ")");
  rng = rng[rank];
  try {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params.size(); ++i) {
      torch::Tensor t;
      ar.read("param" + std::to_string(i), t);
      if (t.sizes() != params[i].sizes()) throw Error(Exit::data, path, "parameter shapes differ");
      params[i].copy_(t);
    }
    torch::serialize::InputArchive opt_ar;
    ar.read("optimizer", opt_ar);
    opt.load(opt_ar);
  } catch (const Error&) {
    throw;
  } catch (const std::exception&) {
    throw Error(Exit::data, path, "unreadable checkpoint");
  }
  set_rng_state(rng);
  return step.item<int64_t>();
}

void save_module(torch::jit::Module& m, const std::string& path) {
  std::ostringstream bytes;
  try {
    m.save(bytes);
  } catch (const std::exception& e) {
    throw Error(Exit::internal, path, "cannot serialise the trained model: " + encode::torch_error_message(e.what()));
  }
  write_atomically(path, bytes.str());
}

// ---- evaluation ---------------------------------------------------------------------------

torch::Tensor encode_eval(const gc::Tower& tower, const std::vector<torch::Tensor>& inputs, int64_t chunk) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> reps;
  int64_t n = inputs.front().size(0);
  for (int64_t a = 0; a < n; a += chunk) reps.push_back(tower(gc::slice_rows(inputs, a, std::min(a + chunk, n))));
  return torch::cat(reps);
}

EvalMetrics evaluate(const Data& d, const torch::Tensor& idx, const gc::Tower& q_tower,
                     const gc::Tower& p_tower, bool grouped, gc::Similarity sim, int64_t chunk) {
  EvalMetrics m;
  m.present = true;
  m.rows = idx.size(0);
  torch::NoGradGuard no_grad;
  auto norm = [&](torch::Tensor x) {
    return sim == gc::Similarity::cos ? torch::nn::functional::normalize(
                                            x, torch::nn::functional::NormalizeFuncOptions().dim(1))
                                      : x;
  };
  auto q = norm(encode_eval(q_tower, gather(d.query, idx), chunk)).to(torch::kFloat64);
  if (grouped) {
    auto labels = d.labels.index_select(0, idx.to(d.labels.device())).cpu();
    int64_t correct = 0;
    for (int64_t a = 0; a < q.size(0); a += 1024) {
      int64_t b = std::min(a + 1024, q.size(0));
      auto s = torch::matmul(q.slice(0, a, b), q.t());
      auto rows = torch::arange(a, b, torch::kLong);
      s.index_put_({torch::arange(b - a, torch::kLong), rows}, -INFINITY);
      auto nn = s.argmax(1).cpu();
      correct += labels.index_select(0, nn).eq(labels.slice(0, a, b)).sum().item<int64_t>();
    }
    m.nn_accuracy = static_cast<double>(correct) / std::max<int64_t>(1, q.size(0));
    return m;
  }
  auto p = norm(encode_eval(p_tower, gather(d.passage, idx), chunk)).to(torch::kFloat64);
  double r1 = 0, r10 = 0, mrr = 0;
  for (int64_t a = 0; a < q.size(0); a += 1024) {
    int64_t b = std::min(a + 1024, q.size(0));
    auto s = torch::matmul(q.slice(0, a, b), p.t());
    auto diag = s.gather(1, torch::arange(a, b, torch::kLong).unsqueeze(1));
    auto rank = s.gt(diag).sum(1).to(torch::kFloat64);  // passages scored above the right one
    r1 += rank.lt(1).sum().item<double>();
    r10 += rank.lt(10).sum().item<double>();
    mrr += (1.0 / (rank + 1)).sum().item<double>();
  }
  double n = static_cast<double>(std::max<int64_t>(1, q.size(0)));
  m.recall_at_1 = r1 / n;
  m.recall_at_10 = r10 / n;
  m.mrr = mrr / n;
  return m;
}

double scheduled_lr(const TrainOptions& o, int64_t step, int64_t total) {
  if (o.warmup_steps > 0 && step < o.warmup_steps) return o.lr * (step + 1) / o.warmup_steps;
  if (o.schedule == "constant") return o.lr;
  double span = std::max<int64_t>(1, total - o.warmup_steps);
  double t = std::min(1.0, (step - o.warmup_steps) / span);
  if (o.schedule == "linear") return o.lr * (1.0 - t);
  return o.lr * 0.5 * (1.0 + std::cos(M_PI * t));
}

}  // namespace

TrainResult run_train(const TrainOptions& o, const TrainCallbacks& cb) {
  const dist::Launch launch = dist::read_launch();
  const int rank = launch.rank, world = launch.world_size;
  auto info = [&](const std::string& m) {
    if (cb.info && rank == 0) cb.info(m);
  };
  auto t_start = Clock::now();
  TrainResult result;
  result.rank = rank;
  result.world_size = world;
  torch::Device device = encode::parse_device(o.device);
  // One GPU per process: a bare "cuda" means the launcher's LOCAL_RANK.
  if (launch.distributed() && device.is_cuda() && !device.has_index())
    device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(launch.local_rank));
  torch::Device cache_device = encode::parse_device(o.cache_device, "--cache-device");
  // Processes of one machine share its cores unless --threads says otherwise.
  encode::configure_threads(o.threads > 0 || launch.local_world_size <= 1
                                ? o.threads
                                : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / launch.local_world_size));
  if (o.dtype != "float32" && o.dtype != "float64")
    throw Error(Exit::usage, "--dtype", "expected float32 or float64");
  torch::Dtype float_type = o.dtype == "float64" ? torch::kFloat64 : torch::kFloat32;
  if (o.optimizer != "sgd" && o.optimizer != "adamw")
    throw Error(Exit::usage, "--optimizer", "expected sgd or adamw, got '" + o.optimizer + "'");
  if (o.schedule != "constant" && o.schedule != "linear" && o.schedule != "cosine")
    throw Error(Exit::usage, "--schedule", "expected constant, linear or cosine");
  if (!(o.temperature > 0)) throw Error(Exit::usage, "--temperature", "must be positive");
  if (o.batch_size <= 0 || o.query_chunk <= 0 || o.passage_chunk <= 0)
    throw Error(Exit::usage, "--batch-size", "batch and chunk sizes must be positive");
  const bool cached = !o.cache.empty();
  // Raw datasets may also be shared-memory slabs ("shm:NAME"); --data is needed for the others.
  auto is_slab = [](const std::string& ds) { return ds.rfind("shm:", 0) == 0; };
  bool all_slabs = !o.query.empty() && !o.passage.empty();
  for (const auto* list : {&o.query, &o.passage, &o.negatives})
    for (const auto& ds : *list) all_slabs = all_slabs && is_slab(ds);
  if (cached == (!o.data.empty() || all_slabs))
    throw Error(Exit::usage, "--data", "give exactly one of --data (raw inputs) and --cache (embeddings)");

  // ---- data parallelism: connect before anything can fail on one rank only, so that a rank that
  // stops is seen by the others in their next collective instead of leaving them waiting.
  std::unique_ptr<dist::Group> group;
  if (launch.distributed()) {
    std::string backend = dist::choose_backend(o.dist_backend, device);
    if (!(o.dist_timeout > 0)) throw Error(Exit::usage, "--dist-timeout", "must be positive");
    if (o.batch_size < world)
      throw Error(Exit::usage, "--batch-size",
                  std::to_string(o.batch_size) + " rows cannot be shared by " + std::to_string(world) + " ranks");
    group = std::make_unique<dist::Group>(
        launch, backend, std::chrono::milliseconds(static_cast<int64_t>(o.dist_timeout * 1000)), device);
    result.backend = backend;
    info("rank 0 of " + std::to_string(world) + " (" + backend + "); every rank encodes 1/" +
         std::to_string(world) + " of each batch of " + std::to_string(o.batch_size));
  }
  torch::manual_seed(o.seed);

  gc::LossConfig loss_cfg;
  loss_cfg.similarity = gc::parse_similarity(o.similarity);
  loss_cfg.temperature = o.temperature;
  loss_cfg.kind = o.symmetric ? gc::LossKind::symmetric : gc::LossKind::infonce;
  loss_cfg.anchor_chunk = o.loss_chunk > 0 ? o.loss_chunk : o.query_chunk;

  // ---- data and models
  Data data;
  bool grouped = false;
  // Raw datasets of `file` (slabs for names "shm:NAME").
  auto load_raw = [&](const std::string& file) {
    Data d;
    h5::Id f = file.empty() ? h5::Id() : h5::open_file(file);
    auto load = [&](const std::string& ds) {
      if (is_slab(ds)) {
        auto slab = shm::Slab::attach(ds.substr(4), false);
        auto t = encode::read_slab_rows(slab, 0, static_cast<int64_t>(slab.info().length), o.input_scale);
        if (t.is_floating_point()) t = t.to(float_type);
        return t.to(device);
      }
      if (file.empty()) throw Error(Exit::usage, "--data", "dataset '" + ds + "' needs --data");
      return read_all(f.get(), file, ds, o.input_scale, device, float_type);
    };
    for (const auto& q : o.query) d.query.push_back(load(q));
    for (const auto& p : o.passage) d.passage.push_back(load(p));
    for (const auto& n : o.negatives) d.negatives.push_back(load(n));
    d.rows = d.query.front().size(0);
    for (std::size_t i = 0; i < o.query.size(); ++i) same_rows(file, o.query[0], d.rows, o.query[i], d.query[i].size(0));
    for (std::size_t i = 0; i < o.passage.size(); ++i) same_rows(file, o.query[0], d.rows, o.passage[i], d.passage[i].size(0));
    if (!o.negatives.empty()) {
      if (o.negatives.size() != o.passage.size())
        throw Error(Exit::usage, "--negatives", "give one negatives dataset per passage dataset");
      for (std::size_t i = 0; i < o.negatives.size(); ++i) {
        same_rows(file, o.query[0], d.rows, o.negatives[i], d.negatives[i].size(0));
        if (d.negatives[i].dim() != d.passage[i].dim() + 1 ||
            d.negatives[i].sizes().slice(2) != d.passage[i].sizes().slice(1) ||
            d.negatives[i].size(1) != d.negatives.front().size(1))
          throw Error(Exit::data, file, "negatives '" + o.negatives[i] + "' must be shaped [rows, k, ...] like the passages");
      }
      d.hard_negatives = d.negatives.front().size(1);
    }
    return d;
  };
  // Embeddings (and labels) of a cache file; through slabs when `shared`.
  auto load_cached = [&](const std::string& path, bool shared, std::string* fingerprint) {
    Data d;
    auto cinfo = cache::read_info(path, false);
    if (!cinfo.complete) throw Error(Exit::data, path, "incomplete cache");
    if (fingerprint) *fingerprint = cinfo.fingerprint;
    h5::Id f = h5::open_file(path);
    auto read_emb = [&](const std::string& name) {
      if (std::none_of(cinfo.embeddings.begin(), cinfo.embeddings.end(), [&](const auto& e) { return e.name == name; }))
        throw Error(Exit::data, path, "no encoder named '" + name + "' in the cache");
      auto dev_it = o.cache_devices.find(name);
      torch::Device dev = dev_it == o.cache_devices.end() ? cache_device : encode::parse_device(dev_it->second, "--cache-device " + name + "=");
      if (shared)
        return shared_embeddings(d, o.cache_shm, o.trust_slab_owner, path, cinfo.fingerprint, name, cinfo.rows)
            .to(dev, float_type);
      return read_all(f.get(), path, "/embeddings/" + name, 1.0, dev, float_type).reshape({cinfo.rows, -1});
    };
    if (grouped) {
      if (!cinfo.labels) throw Error(Exit::data, path, "grouped mode needs labels in the cache (cache-fill --labels)");
      d.query.push_back(read_emb(o.embeddings));
      auto labels = read_all(f.get(), path, "/labels", 1.0, torch::kCPU, float_type);
      if (labels.dim() != 1 && !(labels.dim() == 2 && labels.size(1) == 1))
        throw Error(Exit::data, path,
                    "/labels must hold one value per row, not rows of shape " +
                        shape_text(std::vector<int64_t>(labels.sizes().begin() + 1, labels.sizes().end())));
      d.labels = labels.to(torch::kLong).reshape({-1});
    } else {
      d.query.push_back(read_emb(o.query_embeddings));
      d.passage.push_back(read_emb(o.passage_embeddings));
      if (d.query[0].size(1) != d.passage[0].size(1))
        throw Error(Exit::data, path,
                    "embedding widths differ between sides (" + std::to_string(d.query[0].size(1)) + " vs " +
                        std::to_string(d.passage[0].size(1)) + "); one head cannot serve both");
    }
    d.rows = cinfo.rows;
    return d;
  };

  std::vector<torch::jit::Module> modules;  // 1 (tied or head) or 2 (separate)
  modules.reserve(2);
  json config;
  if (!cached) {
    if (o.query.empty() || o.passage.empty())
      throw Error(Exit::usage, "--query", "raw mode needs --query and --passage datasets");
    data = load_raw(o.data);
    bool tied = !o.encoder.empty();
    if (tied == (!o.query_encoder.empty() || !o.passage_encoder.empty()))
      throw Error(Exit::usage, "--encoder", "give --encoder (tied) or both --query-encoder and --passage-encoder");
    if (!tied && (o.query_encoder.empty() || o.passage_encoder.empty()))
      throw Error(Exit::usage, "--query-encoder", "separate encoders need both --query-encoder and --passage-encoder");
    if (!tied && !o.out.empty() && o.passage_out.empty())
      throw Error(Exit::usage, "--passage-out", "separate encoders need --passage-out as well as --out");
    if (tied) modules.push_back(encode::load_module(o.encoder, device));
    else {
      modules.push_back(encode::load_module(o.query_encoder, device));
      modules.push_back(encode::load_module(o.passage_encoder, device));
    }
    result.mode = tied ? "raw-tied" : "raw-separate";
    config["encoders"] = tied ? json{canonical(o.encoder)} : json{canonical(o.query_encoder), canonical(o.passage_encoder)};
  } else {
    grouped = !o.embeddings.empty();
    if (grouped == (!o.query_embeddings.empty() || !o.passage_embeddings.empty()))
      throw Error(Exit::usage, "--embeddings",
                  "give --embeddings NAME (grouped by labels) or --query-embeddings and --passage-embeddings (aligned)");
    if (!grouped && (o.query_embeddings.empty() || o.passage_embeddings.empty()))
      throw Error(Exit::usage, "--query-embeddings", "aligned mode needs --query-embeddings and --passage-embeddings");
    if (grouped) loss_cfg.kind = gc::LossKind::supcon;
    std::string fingerprint;
    data = load_cached(o.cache, !o.cache_shm.empty(), &fingerprint);
    int64_t in_dim = data.query[0].size(1);
    struct stat st;
    bool head_file = stat(o.head.c_str(), &st) == 0;
    modules.push_back(head_file ? encode::load_module(o.head, device) : build_head(o.head, in_dim));
    result.mode = grouped ? "cached-grouped" : "cached-aligned";
    config["cache_fingerprint"] = fingerprint;
    config["head"] = canonical(o.head);
  }
  std::vector<std::string> module_names =
      cached ? std::vector<std::string>{o.head}
             : (!o.encoder.empty() ? std::vector<std::string>{o.encoder}
                                   : std::vector<std::string>{o.query_encoder, o.passage_encoder});
  for (std::size_t i = 0; i < modules.size(); ++i) {
    modules[i].to(device);
    modules[i].to(float_type);
    modules[i].train();
    if (o.gradcache) refuse_batchnorm(modules[i], module_names[i]);
  }
  torch::jit::Module* qm = &modules[0];
  torch::jit::Module* pm = modules.size() > 1 ? &modules[1] : &modules[0];
  std::vector<torch::jit::Module*> mods{qm};
  if (pm != qm) mods.push_back(pm);
  // Built-in heads are trained whole; a loaded module keeps its own requires_grad flags, so a
  // frozen part (requires_grad=False when it was saved) stays frozen.
  bool builtin_head = cached && !fs::exists(o.head);
  std::vector<torch::Tensor> params;
  for (auto& p : unique_params(mods)) {
    if (builtin_head) p.set_requires_grad(true);
    if (p.requires_grad()) params.push_back(p);
  }
  if (params.empty()) throw Error(Exit::data, module_names[0], "has no parameter that requires grad: nothing to train");
  if (group) {
    // Same start everywhere (rank 0's weights), then each rank its own randomness (dropout).
    group->broadcast(unique_params(mods), 0);
    if (rank > 0) torch::manual_seed(o.seed + 1000003ull * static_cast<uint64_t>(rank));
  }
  gc::Tower q_tower = tower_of(qm, "query encoder"), p_tower = tower_of(pm, "passage encoder");
  if (cached) {
    auto dev = device;
    q_tower = [t = tower_of(qm, "head"), dev](const std::vector<torch::Tensor>& in) {
      return t({in[0].to(dev)});
    };
    p_tower = q_tower;
  }

  // ---- rows: held-out evaluation rows are excluded from training
  std::vector<int64_t> train_rows, eval_rows;
  int64_t eb = o.eval_end > 0 ? std::min(o.eval_end, data.rows) : 0, ea = o.eval_begin;
  if (o.eval_end > 0 && (ea >= eb || ea >= data.rows))
    throw Error(Exit::usage, "--eval-rows", "outside the data's " + std::to_string(data.rows) + " rows");
  for (int64_t i = 0; i < data.rows; ++i) (i >= ea && i < eb ? eval_rows : train_rows).push_back(i);
  auto train_idx = torch::tensor(train_rows, torch::kLong);
  const int64_t n_train = static_cast<int64_t>(train_rows.size());
  if (n_train == 0)
    throw Error(Exit::usage, "--eval-rows", "leaves no training rows (the data has " + std::to_string(data.rows) + ")");
  if (o.batch_size > n_train && o.drop_last)
    throw Error(Exit::usage, "--batch-size",
                std::to_string(o.batch_size) + " is larger than the " + std::to_string(n_train) +
                    " training rows (use a smaller batch or --no-drop-last)");
  const int64_t per_epoch = o.drop_last ? n_train / o.batch_size : (n_train + o.batch_size - 1) / o.batch_size;
  const int64_t total = o.steps > 0 ? o.steps : per_epoch * o.epochs;
  result.total_steps = total;

  // ---- optimiser
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (o.optimizer == "sgd")
    opt = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay));
  else
    opt = std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));

  config["mode"] = result.mode;
  config["data"] = canonical(cached ? o.cache : o.data);
  config["loss"] = {o.similarity, o.temperature, o.symmetric};
  config["batch"] = {o.batch_size, o.shuffle, o.drop_last, o.seed};
  config["optimizer"] = {o.optimizer, o.lr, o.momentum, o.weight_decay, o.warmup_steps, o.schedule};
  config["eval"] = {ea, eb, canonical(o.eval_data)};
  config["dtype"] = o.dtype;
  const std::string config_text = config.dump();

  // ---- resume
  int64_t start = 0;
  const std::string ckpt = o.checkpoint_dir.empty() ? "" : o.checkpoint_dir + "/checkpoint.pt";
  // One run per checkpoint directory at a time (rank 0 writes it): a second run exits 75.
  std::unique_ptr<files::OutputLock> ckpt_lock;
  if (!ckpt.empty() && rank == 0) {
    std::error_code ec;
    fs::create_directories(o.checkpoint_dir, ec);
    if (ec) throw Error(Exit::cant_create, o.checkpoint_dir, ec.message());
    ckpt_lock = std::make_unique<files::OutputLock>(ckpt, "gc-train");
  }
  if (o.resume) {
    if (ckpt.empty()) throw Error(Exit::usage, "--resume", "needs --checkpoint-dir");
    if (fs::exists(ckpt)) {
      start = load_checkpoint(ckpt, params, *opt, config_text, rank, world);
      result.checkpoint = ckpt;
      info("resuming at step " + std::to_string(start) + " from " + ckpt);
    } else {
      info("no checkpoint in " + o.checkpoint_dir + "; starting from step 0");
    }
  }
  if (group) {
    auto starts = group->all_gather_rows(torch::tensor({start}, torch::kLong).view({1, 1}), std::vector<int64_t>(world, 1));
    if (!starts.eq(start).all().item<bool>()) {
      std::string steps;
      for (int r = 0; r < world; ++r) steps += (r ? ", " : "") + std::to_string(starts[r][0].item<int64_t>());
      throw Error(Exit::data, o.checkpoint_dir.empty() ? "--resume" : o.checkpoint_dir,
                  "ranks would start at different steps (" + steps +
                      "): every rank must see the same checkpoint directory");
    }
  }
  result.start_step = start;

  // Evaluation: held-out rows of the training data, or a separate file with the same layout.
  Data eval_set;
  const bool external_eval = !o.eval_data.empty();
  if (external_eval) {
    if (o.eval_end > 0) throw Error(Exit::usage, "--eval-data", "give --eval-data or --eval-rows, not both");
    eval_set = cached ? load_cached(o.eval_data, false, nullptr) : load_raw(o.eval_data);
    for (std::size_t i = 0; i < data.query.size(); ++i)
      if (eval_set.query[i].sizes().slice(1) != data.query[i].sizes().slice(1))
        throw Error(Exit::data, o.eval_data, "holds rows of another shape than the training data");
  }
  auto eval_idx = external_eval ? torch::arange(eval_set.rows, torch::kLong) : torch::tensor(eval_rows, torch::kLong);
  const bool evaluating = external_eval || !eval_rows.empty();
  auto run_eval = [&] {
    for (auto* m : mods) m->eval();
    auto r = evaluate(external_eval ? eval_set : data, eval_idx, q_tower, p_tower, grouped, loss_cfg.similarity,
                      std::max(o.query_chunk, o.passage_chunk));
    for (auto* m : mods) m->train();
    return r;
  };
  if (evaluating && start == 0 && rank == 0) result.eval_before = run_eval();

  std::unique_ptr<std::ofstream> metrics;
  if (!o.metrics.empty() && rank == 0) {
    metrics = std::make_unique<std::ofstream>(o.metrics, start > 0 ? std::ios::app : std::ios::trunc);
    if (!*metrics) throw Error(Exit::cant_create, o.metrics, errno_text(errno));
    metrics->exceptions(std::ios::goodbit);
  }

  // ---- the loop: batch b of epoch e is rows perm_e[bB, (b+1)B) (perm_e = identity without shuffle)
  int64_t current_epoch = -1;
  torch::Tensor perm;
  auto t_loop = Clock::now();
  int64_t samples = 0;
  gc::StepMode mode;
  mode.gradcache = o.gradcache;
  gc::Parallel par;
  if (group) {
    par.rank = rank;
    par.all_gather_rows = [&](const torch::Tensor& t, const std::vector<int64_t>& rows) {
      return group->all_gather_rows(t, rows);
    };
    par.all_reduce_sum = [&](const std::vector<torch::Tensor>& ts) { group->all_reduce_sum(ts); };
  }
  // Every rank's generator state, one row per rank, for checkpoints (a collective).
  auto rng_states = [&] {
    auto mine = rng_state().unsqueeze(0);
    return group ? group->all_gather_rows(mine, std::vector<int64_t>(world, 1)) : mine;
  };
  bool stop_all = false;  // data parallel: some rank was interrupted, all stop after the same step
  int64_t s = start;
  for (; s < total; ++s) {
    if (group ? stop_all : interrupt_requested()) {
      result.interrupted = true;
      break;
    }
    int64_t epoch = s / per_epoch, b = s % per_epoch;
    if (epoch != current_epoch) {
      current_epoch = epoch;
      if (o.shuffle) {
        auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed * 1000003ull + static_cast<uint64_t>(epoch));
        perm = train_idx.index_select(0, torch::randperm(n_train, gen, torch::kLong));
      } else {
        perm = train_idx;
      }
    }
    auto idx = perm.slice(0, b * o.batch_size, std::min((b + 1) * o.batch_size, n_train));
    auto own = idx;  // the rows this process encodes: rank r has [rB/W, (r+1)B/W) of the batch
    if (group) {
      group->set_context("step " + std::to_string(s + 1));
      const int64_t n = idx.size(0);
      if (n < world) {
        info("step " + std::to_string(s + 1) + ": skipped: its batch has " + std::to_string(n) + " row(s), fewer than the " +
             std::to_string(world) + " ranks");
        continue;
      }
      par.rows.clear();
      for (int r = 0; r < world; ++r) par.rows.push_back((r + 1) * n / world - r * n / world);
      own = idx.slice(0, rank * n / world, (rank + 1) * n / world);
    }
    auto t_step = Clock::now();
    double lr = scheduled_lr(o, s, total);
    for (auto& g : opt->param_groups()) g.options().set_lr(lr);
    opt->zero_grad();
    gc::SideBatch qb{q_tower, gather(data.query, own), o.query_chunk};
    gc::SideBatch pb{p_tower, grouped ? std::vector<torch::Tensor>{} : passage_group(data, own), o.passage_chunk};
    torch::Tensor labels = grouped ? data.labels.index_select(0, idx) : torch::Tensor();
    double l = gc::step(qb, pb, labels, loss_cfg, mode, group ? &par : nullptr);
    if (group) {
      // The one all-reduce of parameter gradients per step; an interrupt flag rides along.
      std::vector<torch::Tensor> sums;
      for (auto& p : params) {
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
        sums.push_back(p.grad());
      }
      auto flag = torch::full({1}, interrupt_requested() ? 1.0 : 0.0,
                              torch::TensorOptions().dtype(params[0].dtype()).device(params[0].device()));
      sums.push_back(flag);
      group->all_reduce_sum(sums);
      stop_all = flag.item<double>() > 0;
    }
    if (!std::isfinite(l))
      throw Error(Exit::data, "step " + std::to_string(s),
                  "loss is " + std::string(std::isnan(l) ? "NaN" : "infinite") +
                      (ckpt.empty() ? "" : "; the last good checkpoint is kept in " + ckpt));
    if (o.clip_norm > 0) torch::nn::utils::clip_grad_norm_(params, o.clip_norm);
    opt->step();
    result.last_loss = l;
    samples += idx.size(0);
    double step_s = seconds_since(t_step);
    if (metrics) {
      nlohmann::ordered_json line{{"step", s + 1}, {"epoch", epoch}, {"loss", l}, {"lr", lr}, {"seconds", step_s},
                {"samples_per_second", idx.size(0) / step_s}};
      errno = 0;
      *metrics << line.dump() << "\n";
      metrics->flush();
      if (!*metrics) throw Error(Exit::io, o.metrics, "write failed: " + errno_text(errno ? errno : EIO));
    }
    if (cb.progress && rank == 0) cb.progress(s + 1, total, l);
    if (!ckpt.empty() && o.checkpoint_every > 0 && (s + 1) % o.checkpoint_every == 0) {
      auto rngs = rng_states();
      if (rank == 0) save_checkpoint(o.checkpoint_dir, s + 1, params, *opt, config_text, rngs);
      result.checkpoint = ckpt;
    }
  }
  result.steps_done = s;
  double loop_s = seconds_since(t_loop);
  result.samples_per_second = loop_s > 0 ? samples / loop_s : 0;
  result.seconds_per_epoch = s > start ? loop_s / (s - start) * per_epoch : 0;
  if (!ckpt.empty() && (result.interrupted || s == total) && s > start) {
    if (group) group->set_context("final checkpoint");
    auto rngs = rng_states();
    if (rank == 0) save_checkpoint(o.checkpoint_dir, s, params, *opt, config_text, rngs);
    result.checkpoint = ckpt;
  }
  if (group) {
    result.collectives = group->collectives();
    result.collective_seconds = group->collective_seconds();
  }
  if (result.interrupted) {
    result.seconds = seconds_since(t_start);
    return result;
  }
  if (rank > 0) {  // outputs, evaluation and the summary are rank 0's
    result.seconds = seconds_since(t_start);
    return result;
  }
  if (evaluating) result.eval_after = run_eval();
  if (!o.out.empty()) {
    qm->eval();
    save_module(*qm, o.out);
  }
  if (pm != qm && !o.passage_out.empty()) {
    pm->eval();
    save_module(*pm, o.passage_out);
  }
  result.seconds = seconds_since(t_start);
  return result;
}

}  // namespace traincache::train
