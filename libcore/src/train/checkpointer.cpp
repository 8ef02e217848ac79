#include "checkpointer.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "traincache/base/error.h"
#include "traincache/base/json_text.h"
#include "traincache/model/precision_torch.h"
#include "traincache/train/checkpoint.h"
#include "traincache/train/checkpoint_file.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace traincache::train {

Checkpointer::Checkpointer(const TrainOptions& o, const Setup& s, train::RankGroup* group, std::string config)
    : o_(o),
      s_(s),
      group_(group),
      config_(std::move(config)),
      path_(o.checkpoint_dir.empty() ? "" : checkpoint_path(o.checkpoint_dir)) {
  if (path_.empty() || s.rank != 0) return;
  std::error_code ec;
  fs::create_directories(o.checkpoint_dir, ec);
  if (ec) throw Error(Exit::cant_create, o.checkpoint_dir, errno_text(ec.value()));
  lock_ = std::make_unique<files::OutputLock>(path_, "gc-train");  // a second run exits 75
}

int64_t Checkpointer::resume(const std::vector<torch::Tensor>& params, torch::optim::Optimizer& opt,
                             TrainResult& result, const std::function<void(const std::string&)>& info) {
  int64_t start = 0;
  if (o_.resume) {
    if (fs::exists(path_)) {
      start = train::load_checkpoint(path_, {params, opt}, config_, s_.rank, s_.world, &resumed_state_);
      result.checkpoint = path_;
      info("resuming at step " + std::to_string(start) + " from " + path_);
    } else {
      info("no checkpoint in " + o_.checkpoint_dir + "; starting from step 0");
    }
  }
  if (group_) {
    auto starts =
        group_->all_gather_rows(torch::tensor({start}, torch::kLong).view({1, 1}), std::vector<int64_t>(s_.world, 1));
    if (!starts.eq(start).all().item<bool>()) {
      std::string steps;
      for (int r = 0; r < s_.world; ++r) steps += (r ? ", " : "") + std::to_string(starts[r][0].item<int64_t>());
      throw Error(
          Exit::data, o_.checkpoint_dir.empty() ? "--resume" : o_.checkpoint_dir,
          "ranks would start at different steps (" + steps + "): every rank must see the same checkpoint directory");
    }
  }
  return start;
}

void Checkpointer::save(int64_t step, const std::vector<torch::Tensor>& params, torch::optim::Optimizer& opt,
                        bool best) {
  auto mine = train::rng_state().unsqueeze(0);
  auto rngs = group_ ? group_->all_gather_rows(mine, std::vector<int64_t>(s_.world, 1)) : mine;
  if (s_.rank == 0)
    train::save_checkpoint(best ? o_.checkpoint_dir + "/best.pt" : path_, step, {params, opt}, config_, rngs,
                           state ? state() : "{}");
}

// What a checkpoint must have been written with to be resumed by this run.
std::string checkpoint_config(const TrainOptions& o, const Setup& s, Models& m, const RowSplit& split) {
  json config = m.config;
  config["mode"] = m.mode;
  config["data"] = s.cached ? canonical(o.cache) : io::source::recorded_path(o.data);
  config["loss"] = {similarity_choices().name(o.similarity), o.temperature, o.symmetric};
  const ObjectiveSpec& obj = s.objective;
  if (obj.kind != Objective::infonce && obj.kind != Objective::supcon)  // as before objectives existed
    config["objective"] = {obj.name(), obj.margin, obj.scale, mining_choices().name(obj.mining)};
  if (!o.labels.empty()) config["labels"] = o.labels;
  config["batch"] = {o.batch_size, o.shuffle, o.drop_last, o.seed};
  config["optimizer"] = {optimizer_choices().name(o.optimizer), o.lr, o.momentum, o.weight_decay, o.warmup_steps,
                         schedule_choices().name(o.schedule)};
  config["eval"] = {split.eval_begin, split.eval_end, canonical(o.eval_data), o.eval_split, o.stratify};
  if (!o.select_best.empty()) config["select_best"] = {o.select_best, o.eval_k};
  config["dtype"] = float_dtype_choices().name(o.dtype);
  if (o.precision != Precision::fp32) config["precision"] = model::precision_choices().name(o.precision);
  // TF32 steps differ from full-float32 ones (absent: ieee, as every CPU run and older checkpoints).
  if (std::string(model::math_mode(s.device)) == "tf32") config["math_mode"] = "tf32";
  if (!s.cached) {  // a cache has a content fingerprint; raw files are told apart by size and time
    json stamps = json::object();
    for (const std::string* f : {&o.data, &o.eval_data}) {
      if (f->empty() || io::source::kind_of(*f) == io::source::Kind::shm) continue;
      // Tar shards: every shard the pattern names.
      const auto paths = io::source::kind_of(*f) == io::source::Kind::tar ? io::source::expand_shards(*f)
                                                                          : std::vector<std::string>{*f};
      for (const auto& p : paths) {
        std::error_code size_ec, time_ec;
        const auto bytes = fs::file_size(p, size_ec);
        const auto time = fs::last_write_time(p, time_ec).time_since_epoch().count();
        if (!size_ec && !time_ec) stamps[canonical(p)] = {{"bytes", bytes}, {"modified", time}};
      }
    }
    if (!stamps.empty()) config["data_files"] = stamps;
  }
  return json_text(config);
}

}  // namespace traincache::train
