// "auto" in a DeepSpeed config. Two tools write it. The Hugging Face Trainer and Accelerate fill it
// from their own arguments before DeepSpeed sees the file (transformers' HfTrainerDeepSpeedConfig:
// trainer_config_process, trainer_config_finalize; accelerate's DeepSpeedPlugin): zinf fills the
// same keys the same way from what it knows — the model file's micro-batch and hidden size, zinf's
// accumulation, clipping and Adam defaults, the hardware profile's precision. DeepSpeed's autotuner
// (autotuning.enabled) reads "auto" as "search this", which is zinf tune's work.
#include <fmt/format.h>

#include "formats/deepspeed_reader.hpp"

namespace zinf::core::deepspeed {

namespace {

bool is_auto(const json* v) { return v && v->is_string() && *v == "auto"; }

// The node holding the last part of `path` when every part before it exists (HF's find_config_node).
json* parent_of(json& root, const std::string& path, std::string& last) {
  json* cur = &root;
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    if (dot == std::string::npos) {
      last = path.substr(pos);
      return cur->is_object() ? cur : nullptr;
    }
    const std::string part = path.substr(pos, dot - pos);
    if (!cur->is_object() || !cur->contains(part)) return nullptr;
    cur = &(*cur)[part];
    pos = dot + 1;
  }
}

}  // namespace

void Reader::check_autotuner() {
  const json* a = section("autotuning");
  if (!a || !truthy(member(a, "enabled") ? *member(a, "enabled") : json(false))) return;
  out_.autotuner = true;
  std::vector<std::string> keys;
  for (const char* k : {"train_micro_batch_size_per_gpu", "gradient_accumulation_steps"})
    if (is_auto(at(k))) keys.push_back(k);
  const json* stage = at("zero_optimization.stage");
  if (stage && (stage->is_array() || (stage->is_string() && *stage == "all")))
    keys.push_back("zero_optimization.stage");
  out_.autotuner_keys = keys;
  if (!ctx_.for_tune)
    throw ConfigError(file_, "autotuning.enabled",
                      fmt::format("a config for DeepSpeed's autotuner: its {} say what to search, and zinf tune "
                                  "searches them (zinf tune --config {}); plan and sim need one configuration",
                                  keys.empty() ? std::string("settings") : fmt::format("{}", fmt::join(keys, ", ")),
                                  file_));
  // zinf tune searches the micro-batch and accumulation itself: start from the model's micro-batch.
  if (is_auto(at("train_micro_batch_size_per_gpu"))) root_["train_micro_batch_size_per_gpu"] = ctx_.model_micro_batch;
  if (is_auto(at("gradient_accumulation_steps"))) root_["gradient_accumulation_steps"] = 1;
  if (stage && !stage->is_number()) root_["zero_optimization"]["stage"] = 0;  // zinf tune sets each stage listed
  if (is_auto(at("train_batch_size"))) root_.erase("train_batch_size");
  note("autotuning", KeyFate::Mapped, "enabled",
       fmt::format("DeepSpeed's autotuner: zinf tune searches {}",
                   keys.empty() ? std::string("its space") : fmt::format("{}", fmt::join(keys, ", "))));
}

void Reader::resolve_hf_autos() {
  const std::string hw = ctx_.hw_name.empty() ? std::string("the hardware profile") : ctx_.hw_name;
  auto fill = [&](const std::string& path, const json& value, const std::string& source) {
    std::string last;
    json* parent = parent_of(root_, path, last);
    if (!parent || !parent->contains(last) || !is_auto(&(*parent)[last])) return;
    (*parent)[last] = value;
    autos_.emplace_back(path, fmt::format("{} ({})", shown(value), source));
    note(path, KeyFate::Auto, shown(value), "HF \"auto\": " + source);
  };
  const RunConfig zinf_defaults;
  // trainer_config_process: the batch triple from the Trainer's arguments, world x micro x accumulation.
  const int64_t micro = ctx_.model_micro_batch, gas = 1;
  fill("train_micro_batch_size_per_gpu", micro, "the model file's micro_batch");
  fill("gradient_accumulation_steps", gas, "zinf's default accumulation");
  fill("train_batch_size", micro * gas * ctx_.ranks,
       fmt::format("world size {} x micro-batch {} x accumulation {}", ctx_.ranks, micro, gas));
  fill("gradient_clipping", zinf_defaults.grad_clip, "zinf's default: no clipping");
  fill("optimizer.params.lr", zinf_defaults.lr, "zinf's default learning rate");
  fill("optimizer.params.betas", json::array({zinf_defaults.beta1, zinf_defaults.beta2}), "zinf's default betas");
  fill("optimizer.params.eps", zinf_defaults.eps, "zinf's default eps");
  fill("optimizer.params.weight_decay", zinf_defaults.weight_decay, "zinf's default weight decay");
  fill("scheduler.params.warmup_min_lr", 0, "HF: 0");
  // HF fills both with args.learning_rate, and refuses a config where they differ: the optimizer's.
  const json* lr = at("optimizer.params.lr");
  if (lr && lr->is_number())
    fill("scheduler.params.warmup_max_lr", *lr, "HF: the learning rate, the optimizer's");
  else
    fill("scheduler.params.warmup_max_lr", zinf_defaults.lr, "HF: the learning rate, zinf's default");
  fill("scheduler.params.warmup_num_steps", 0, "HF: warmup_steps, 0 by default");
  const bool fp16 = ctx_.hw_precision == Precision::Fp16, bf16 = ctx_.hw_precision == Precision::Bf16;
  fill("fp16.enabled", fp16, fmt::format("{} trains in {}", hw, to_string(ctx_.hw_precision)));
  fill("amp.enabled", false, "HF: apex only when asked for");
  fill("amp.opt_level", "O1", "HF's default fp16_opt_level");
  fill("bf16.enabled", bf16, fmt::format("{} trains in {}", hw, to_string(ctx_.hw_precision)));
  fill("zero_optimization.stage3_gather_16bit_weights_on_model_save", false, "Accelerate's default");
  // trainer_config_finalize: the buckets from the model's hidden size (the last two at stage 3 only).
  const json* stage = at("zero_optimization.stage");
  const bool zero3 = stage && stage->is_number() && stage->get<double>() == 3;
  std::vector<std::string> hidden_keys;
  for (const char* k : {"zero_optimization.reduce_bucket_size", "zero_optimization.stage3_prefetch_bucket_size",
                        "zero_optimization.stage3_param_persistence_threshold"})
    if (is_auto(at(k)) && (zero3 || std::string(k) == "zero_optimization.reduce_bucket_size")) hidden_keys.push_back(k);
  if (!hidden_keys.empty() && ctx_.hidden <= 0)
    throw ConfigError(file_, hidden_keys.front(),
                      "HF \"auto\" fills this from the model's hidden size, and the model has none");
  const int64_t h = ctx_.hidden;
  fill("zero_optimization.reduce_bucket_size", h * h, fmt::format("hidden {} squared", h));
  if (zero3) {
    fill("zero_optimization.stage3_prefetch_bucket_size", static_cast<int64_t>(0.9 * double(h) * double(h)),
         fmt::format("0.9 x hidden {} squared", h));
    fill("zero_optimization.stage3_param_persistence_threshold", 10 * h, fmt::format("10 x hidden {}", h));
  }
}

}  // namespace zinf::core::deepspeed
