// A RunConfig as a DeepSpeed config that DeepSpeed 0.16.5 accepts for the hardware it targets:
// the base DeepSpeed config's own keys kept (precision, scheduler, loss scaling, overlap, HF
// "auto"), the tuned ones written over them with their current names, and what DeepSpeed cannot
// say named. Its inverse is read_deepspeed_config: deepspeed_round_trip says what a config loses
// on the way out and back.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "formats/deepspeed_config.hpp"
#include "formats/run_config_reader.hpp"

namespace zinf::core {

namespace {

using json = nlohmann::ordered_json;

const char* device_word(Tier t) { return t == Tier::Device ? "none" : t == Tier::Host ? "cpu" : "nvme"; }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    const size_t e = std::min(text.find('\n', i), text.size());
    out.push_back(text.substr(i, e - i));
    i = e + 1;
  }
  return out;
}

json& object_at(json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_object()) j[key] = json::object();
  return j[key];
}

void write_optimizer(const RunConfig& c, json& j) {
  if (j.contains("optimizer") && j["optimizer"].is_object() && j["optimizer"].contains("type")) return;  // the base's
  json params = {{"lr", c.lr}, {"betas", {c.beta1, c.beta2}}, {"eps", c.eps}, {"weight_decay", c.weight_decay}};
  std::string type = "AdamW";
  if (c.optimizer_type == "adam") {
    type = "Adam";
    params["adam_w_mode"] = false;  // DeepSpeed's Adam is AdamW otherwise
  } else if (c.optimizer_type == "lamb") {
    type = "Lamb";
  } else if (c.optimizer_type == "lion") {
    type = "Lion";
  } else if (c.optimizer_type == "adagrad") {
    type = "Adagrad";
  }
  j["optimizer"] = {{"type", type}, {"params", params}};
}

void write_precision(Precision p, const LossScaleConfig& l, json& j) {
  for (const char* k : {"fp16", "bf16", "bfloat16"})
    if (j.contains(k)) return;  // the base's own choice, which gave this precision
  if (p == Precision::Fp16)
    j["fp16"] = {{"enabled", true},         {"loss_scale", l.static_scale},
                 {"initial_scale_power", l.initial_scale_power}, {"loss_scale_window", l.window},
                 {"hysteresis", l.hysteresis}, {"consecutive_hysteresis", l.consecutive_hysteresis},
                 {"min_loss_scale", l.min_scale}};
  if (p == Precision::Bf16) j["bf16"] = {{"enabled", true}};
}

void write_zero(const RunConfig& c, const DeepSpeedTarget& t, json& j) {
  if (j.contains("zero_optimization") && !j["zero_optimization"].is_object()) j.erase("zero_optimization");
  json& z = object_at(j, "zero_optimization");
  z["stage"] = c.zero_stage;
  for (const char* old : {"cpu_offload", "cpu_offload_param", "cpu_offload_use_pin_memory"}) z.erase(old);
  const double eb = element_bytes(t.precision);
  auto offload = [&](const char* key, Tier tier) {
    if (tier == Tier::Device) {
      z.erase(key);
      return;
    }
    json& o = object_at(z, key);
    o["device"] = device_word(tier);
    if (!o.contains("pin_memory")) o["pin_memory"] = true;  // zinf's host buffers are pinned
    if (tier == Tier::Nvme && (!o.contains("nvme_path") || !t.nvme_path.empty()))
      o["nvme_path"] = t.nvme_path.empty() ? "/CHANGE_ME/path/to/nvme" : t.nvme_path;
  };
  offload("offload_param", c.zero_stage == 3 ? c.params.tier : Tier::Device);
  offload("offload_optimizer", c.optimizer.tier);
  if (!z.contains("overlap_comm")) z["overlap_comm"] = true;  // as zinf plans it
  if (c.zero_stage == 3) {
    // max_live_bytes is the larger of the live parameters and the prefetch bucket: the bucket is
    // written no larger, so that the file reads back to the same bound.
    const int64_t live = static_cast<int64_t>(std::llround(c.max_live_bytes / eb));
    for (const char* k : {"max_live_parameters", "max_reuse_distance", "prefetch_bucket_size"}) z.erase(k);
    z["stage3_max_live_parameters"] = live;
    z["stage3_max_reuse_distance"] = static_cast<int64_t>(std::llround(c.reuse_distance_bytes / eb));
    int64_t bucket = 50'000'000;
    if (z.contains("stage3_prefetch_bucket_size") && z["stage3_prefetch_bucket_size"].is_number())
      bucket = z["stage3_prefetch_bucket_size"].get<int64_t>();
    else if (t.model_hidden > 0 && z.contains("stage3_prefetch_bucket_size"))  // HF "auto": 0.9 hidden^2
      bucket = static_cast<int64_t>(0.9 * double(t.model_hidden) * double(t.model_hidden));
    z["stage3_prefetch_bucket_size"] = std::min(bucket, live);
    z["sub_group_size"] = c.sub_group_size;
  }
}

void write_aio(const RunConfig& c, json& j) {
  if (c.params.tier != Tier::Nvme && c.optimizer.tier != Tier::Nvme) return;
  json& a = object_at(j, "aio");
  a.erase("thread_count");  // read by DeepSpeed before 0.10; intra_op_parallelism now
  a["block_size"] = c.aio_block_size;
  a["queue_depth"] = c.aio_queue_depth;
  if (!a.contains("intra_op_parallelism")) a["intra_op_parallelism"] = 1;
  if (!a.contains("single_submit")) a["single_submit"] = false;
  if (!a.contains("overlap_events")) a["overlap_events"] = true;
}

std::vector<std::string> what_deepspeed_cannot_say(const RunConfig& c) {
  std::vector<std::string> out;
  if (c.gradients.tier != c.params.tier)
    out.push_back(fmt::format("gradients on {} (DeepSpeed keeps them with the parameters, on {})", to_string(c.gradients.tier),
                              to_string(c.params.tier)));
  if (c.tensor_parallel > 1 && c.zero_stage == 3)
    out.push_back("AutoTP with ZeRO stage 3 (DeepSpeed 0.16.5 refuses it)");
  if (c.checkpoint_interval > 1)
    out.push_back(fmt::format("a checkpoint every {} blocks (DeepSpeed checkpoints every block it wraps)",
                              c.checkpoint_interval));
  if (c.checkpoint_interval > 0 && c.checkpoints_per_block == 2)
    out.push_back("two checkpoints per block (Megatron's --split-transformers, a flag of the model code)");
  if (c.checkpoint_interval > 0 && c.checkpoints.tier == Tier::Nvme)
    out.push_back("activation checkpoints on NVMe (DeepSpeed: device or cpu_checkpointing)");
  if (c.checkpoint_interval > 0 && c.checkpoints.tier == Tier::Host && !c.checkpoint_copies_synchronous)
    out.push_back("overlapped checkpoint copies (DeepSpeed's cpu_checkpointing copies on the compute stream)");
  if (c.activation_policy != ActivationPolicy::None)
    out.push_back(fmt::format("activation offload ({}; DeepSpeed has no per-block offload of activations)",
                              to_string(c.activation_policy)));
  if (c.tiling_factor != 1)
    out.push_back(fmt::format("tiling factor {} (DeepSpeed tiles linears in the model code, deepspeed.zero.TiledLinear)",
                              c.tiling_factor > 0 ? std::to_string(c.tiling_factor) : "auto"));
  if (c.vocabulary_tiles != 1)
    out.push_back(fmt::format("{} vocabulary tiles (DeepSpeed tiles neither the embedding nor the LM head)",
                              c.vocabulary_tiles > 0 ? std::to_string(c.vocabulary_tiles) : "auto"));
  if (c.nvme_prefetch_distance != 3 || c.h2d_prefetch_distance != 2 || c.allgather_prefetch_distance != 1)
    out.push_back(fmt::format("prefetch distances {}/{}/{} (DeepSpeed bounds prefetch by bytes only)",
                              c.nvme_prefetch_distance, c.h2d_prefetch_distance, c.allgather_prefetch_distance));
  if (c.partitioning == Partitioning::OwnerBased) out.push_back("owner-based partitioning");
  if (c.optimizer_timing == OptimizerTiming::OverlapBackward)
    out.push_back("optimizer sub-groups updated during backward");
  return out;
}

}  // namespace

std::string run_config_to_deepspeed_json(const RunConfig& c, const DeepSpeedTarget& t,
                                         std::vector<std::string>& not_expressed) {
  json j = t.base && t.base->is_object() ? *t.base : json::object();
  const int64_t mb = c.micro_batch.value_or(t.model_micro_batch);
  // DeepSpeed 0.16.5 checks the batch against every rank, AutoTP's included.
  j["train_batch_size"] = mb * c.gradient_accumulation * t.ranks;
  j["train_micro_batch_size_per_gpu"] = mb;
  j["gradient_accumulation_steps"] = c.gradient_accumulation;
  if (!j.contains("gradient_clipping") && c.grad_clip > 0) j["gradient_clipping"] = c.grad_clip;
  write_precision(t.precision, c.loss_scaling, j);
  write_optimizer(c, j);
  write_zero(c, t, j);
  write_aio(c, j);
  if (c.checkpoint_interval > 0) {
    json& a = object_at(j, "activation_checkpointing");
    a["partition_activations"] = c.checkpoints_partitioned;
    a["cpu_checkpointing"] = c.checkpoints.tier == Tier::Host;
  } else {
    j.erase("activation_checkpointing");
  }
  // AutoTP with stage 3 is refused by DeepSpeed 0.16.5: not written (and named as not expressed).
  if (c.tensor_parallel > 1 && c.zero_stage < 3) object_at(j, "tensor_parallel")["autotp_size"] = c.tensor_parallel;
  else if (j.contains("tensor_parallel") && j["tensor_parallel"].is_object()) j["tensor_parallel"].erase("autotp_size");
  for (auto& s : what_deepspeed_cannot_say(c)) not_expressed.push_back(std::move(s));
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

std::vector<std::string> deepspeed_round_trip(const RunConfig& c, const RunConfig& read_back, Precision precision) {
  RunConfig a = c, b = read_back;
  a.precision = b.precision = precision;
  // What zinf train alone reads (the learning rate, Adam's numbers, the loss scale) does not change a plan.
  b.lr = a.lr, b.beta1 = a.beta1, b.beta2 = a.beta2, b.eps = a.eps, b.weight_decay = a.weight_decay;
  b.loss_scaling = a.loss_scaling;  // fp16's loss scale: numerics only
  const std::vector<std::string> x = lines_of(run_config_to_yaml(a, "")), y = lines_of(run_config_to_yaml(b, ""));
  // Walk both: a line whose key both have at this point changed; one the other lacks was dropped or
  // added (a key written only when set: vocabulary_tiles, micro_batch).
  auto key = [](const std::string& l) { return l.substr(0, l.find(':')); };
  std::vector<std::string> out;
  size_t i = 0, k = 0;
  while (i < x.size() || k < y.size()) {
    if (i < x.size() && k < y.size() && x[i] == y[k]) {
      ++i, ++k;
    } else if (i < x.size() && k < y.size() && key(x[i]) == key(y[k])) {
      out.push_back(fmt::format("{} -> {}", x[i++], y[k++]));
    } else if (i < x.size() && (k == y.size() || std::find(y.begin() + long(k), y.end(), x[i]) == y.end())) {
      out.push_back(fmt::format("{} -> (absent)", x[i++]));
    } else {
      out.push_back(fmt::format("(absent) -> {}", y[k++]));
    }
  }
  return out;
}

}  // namespace zinf::core
