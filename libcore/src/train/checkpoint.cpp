#include "traincache/train/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "traincache/base/content_hash.h"
#include "traincache/base/error.h"
#include "traincache/base/files.h"
#include "traincache/train/checkpoint_file.h"

using nlohmann::json;

namespace traincache::train {

namespace {

std::string payload_digest(const std::string& bytes) {
  ContentHash h;
  h.update(bytes);
  return h.hex_digest();
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
    throw Error(Exit::data, path, kUnreadableCheckpoint);
  }
  if (!format.isString() || format.toStringRef() != kFormat || !digest.isString() ||
      payload.scalar_type() != torch::kUInt8 || payload.dim() != 1)
    throw Error(Exit::data, path, "unreadable checkpoint (not a " + std::string(kFormat) + " file)");
  payload = payload.contiguous();
  std::string bytes(static_cast<const char*>(payload.data_ptr()), static_cast<std::size_t>(payload.numel()));
  if (payload_digest(bytes) != digest.toStringRef()) throw Error(Exit::data, path, kDamagedCheckpoint);
  return bytes;
}

}  // namespace

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

void save_checkpoint(const std::string& path, int64_t step, const Trained& trained, const std::string& config,
                     const torch::Tensor& rngs, const std::string& state) {
  const std::vector<torch::Tensor>& params = trained.params;
  torch::optim::Optimizer& opt = trained.opt;
  torch::serialize::OutputArchive ar;
  ar.write("step", torch::tensor(step));
  ar.write("rng", rngs[0].contiguous());
  ar.write("rng_ranks", rngs.contiguous());
  ar.write("world_size", torch::tensor(rngs.size(0)));
  ar.write("config", c10::IValue(config));
  ar.write("state", c10::IValue(state));
  for (std::size_t i = 0; i < params.size(); ++i) ar.write("param" + std::to_string(i), params[i].detach());
  torch::serialize::OutputArchive opt_ar;
  opt.save(opt_ar);
  ar.write("optimizer", opt_ar);
  std::ostringstream inner;
  ar.save_to(inner);
  std::string payload = inner.str();
  torch::serialize::OutputArchive outer;
  outer.write("format", c10::IValue(std::string(kFormat)));
  outer.write("payload", torch::from_blob(payload.data(), {static_cast<int64_t>(payload.size())}, torch::kUInt8));
  outer.write("payload_xxh3", c10::IValue(payload_digest(payload)));
  std::ostringstream bytes;
  outer.save_to(bytes);
  files::write_file_atomically(path, bytes.str());
}

std::string checkpoint_config_diff(const std::string& stored, const std::string& now) {
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

int64_t load_checkpoint(const std::string& path, const Trained& trained, const std::string& config, int rank,
                        int world_size, std::string* state) {
  const std::vector<torch::Tensor>& params = trained.params;
  torch::optim::Optimizer& opt = trained.opt;
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
                "checkpoint was written with other settings (changed: " +
                    checkpoint_config_diff(stored.toStringRef(), config) + ")");
  if (world.item<int64_t>() != world_size || rng.size(0) != world_size)
    throw Error(Exit::usage, path,
                "checkpoint was written by " + std::to_string(world.item<int64_t>()) +
                    " process(es); resume it with WORLD_SIZE=" + std::to_string(world.item<int64_t>()) +
                    " (this run has " + std::to_string(world_size) + ")");
  rng = rng[rank].clone();  // its own storage: a row of the stacked states starts at an offset
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
  if (state) {
    c10::IValue stored_state;
    *state = ar.try_read("state", stored_state) && stored_state.isString() ? stored_state.toStringRef() : "{}";
  }
  set_rng_state(rng);
  return step.item<int64_t>();
}

}  // namespace traincache::train
