// What each section of a DeepSpeed config means for the plan, with DeepSpeed 0.16.5's rules: the
// ZeRO stage and where states live (zero/config.py, zero/offload_config.py, stage_1_and_2.py,
// stage3.py), the precision and the optimizer (runtime/config.py, runtime/engine.py), the batch
// triple (DeepSpeedConfig._set_batch_related_parameters and _batch_assertion).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <type_traits>

#include "formats/deepspeed_reader.hpp"
#include "formats/config_reader.hpp"
#include "formats/lr_schedule_reader.hpp"
#include "core/program.hpp"
#include "core/run_config_bounds.hpp"

namespace zinf::core::deepspeed {

namespace {


std::string placement_word(Tier t) { return t == Tier::Device ? "none" : t == Tier::Host ? "cpu" : "nvme"; }

Tier device_tier(const json& v) {
  const std::string d = v.get<std::string>();
  return d == "cpu" ? Tier::Host : d == "nvme" ? Tier::Nvme : Tier::Device;
}

}  // namespace

void Reader::read_precision() {
  const json* fp16 = member(&root_, "fp16");
  bool fp16_on = false, bf16_on = false;
  if (fp16) {
    if (!fp16->is_object()) refuse("fp16", "must be a mapping of keys (DeepSpeed reads fp16.enabled from it)");
    if (const json* e = member(fp16, "enabled")) fp16_on = truthy(*e);
  }
  std::string bf16_key;
  for (const char* k : {"bf16", "bfloat16"}) {
    const json* b = member(&root_, k);
    if (!b) continue;
    if (!b->is_object()) refuse(k, "must be a mapping of keys (DeepSpeed reads enabled from it)");
    bf16_key = k;
    if (const json* e = member(b, "enabled")) bf16_on = truthy(*e);
    break;
  }
  if (!bf16_key.empty() && bf16_key == "bf16" && member(&root_, "bfloat16"))
    note("bfloat16", KeyFate::NoEffect, shown(*member(&root_, "bfloat16")),
         "DeepSpeed reads bf16 and ignores bfloat16 (its old name) when both are given");
  if (fp16_on && bf16_on) refuse(bf16_key + ".enabled", "bfloat16 and fp16 modes cannot be simultaneously enabled");
  const json* amp = member(&root_, "amp");
  const bool amp_on = amp && amp->is_object() && member(amp, "enabled") && truthy(*member(amp, "enabled"));
  if (amp_on) {
    if (fp16_on || bf16_on) refuse("amp.enabled", "Cannot enable both amp with (legacy) fp16 or bfloat16 mode");
    if (stage_ > 0)
      refuse("amp.enabled", "Amp and ZeRO are not currently compatible, please use (legacy) fp16 mode which performs "
                            "similar to amp opt_mode=O2");
  }
  if (fp16_on) c_.precision = Precision::Fp16;
  else if (bf16_on) c_.precision = Precision::Bf16;
  else if (amp_on) c_.precision = Precision::Fp16;
  else c_.precision = Precision::Fp32;
  const std::string p = to_string(*c_.precision);
  if (fp16) note("fp16.enabled", KeyFate::Mapped, fp16_on ? "true" : "false",
                 member(fp16, "enabled") ? "precision " + p : "absent: DeepSpeed's default false");
  if (!bf16_key.empty())
    note(bf16_key + ".enabled", KeyFate::Mapped, bf16_on ? "true" : "false",
         member(member(&root_, bf16_key), "enabled") ? "precision " + p : "absent: DeepSpeed's default false");
  if (amp) note("amp", amp_on ? KeyFate::Mapped : KeyFate::NoEffect, shown(*amp),
                amp_on ? "apex AMP: planned as fp16 mixed precision" : "apex AMP, not enabled");
  if (c_.precision == Precision::Fp32) {
    note("precision", KeyFate::Defaulted, "fp32", "neither fp16 nor bf16 is enabled: DeepSpeed trains in fp32");
    message("precision fp32: neither fp16.enabled nor bf16.enabled is set, so DeepSpeed trains in fp32 (4-byte "
            "parameters, gradients and activations, at the GPU's fp32 rate)");
  }
  if (fp16_on) read_loss_scale(fp16);
  if (fp16_on && member(fp16, "fp16_master_weights_and_grads") && truthy(*member(fp16, "fp16_master_weights_and_grads"))) {
    if (stage_ != 2)
      refuse("fp16.fp16_master_weights_and_grads",
             "Fp16_master_weights_and_grads is only supported with ZeRO Stage 2 for now.");
    note("fp16.fp16_master_weights_and_grads", KeyFate::Ignored, "true",
         "DeepSpeed then keeps fp16 master weights and gradients; zinf plans fp32 master weights");
  }
}

// fp16's loss scale, as DeepSpeed's get_fp16 keys read it (runtime/config.py): loss_scale 0 is
// dynamic (DynamicLossScaler, from 2^initial_scale_power), above 0 static.
void Reader::read_loss_scale(const json* fp16) {
  LossScaleConfig& l = c_.loss_scaling;
  const auto read = [&](const char* key, double lowest, double highest, auto& into) {
    const json* v = member(fp16, key);
    if (!v) return;
    const std::string path = std::string("fp16.") + key;
    if (!v->is_number()) refuse(path, "must be a number");
    const double x = v->get<double>();
    if (!(x >= lowest && x <= highest)) refuse(path, fmt::format("must lie in [{}, {}], not {}", lowest, highest, shown(*v)));
    into = static_cast<std::remove_reference_t<decltype(into)>>(x);
    note(path, KeyFate::Mapped, shown(*v), "fp16 loss scaling in zinf train");
  };
  read("loss_scale", 0, 1e30, l.static_scale);
  read("initial_scale_power", 0, 64, l.initial_scale_power);
  read("loss_scale_window", 1, 1e9, l.window);
  read("hysteresis", 1, 1e6, l.hysteresis);
  read("min_loss_scale", 1e-30, 1e30, l.min_scale);
  if (const json* v = member(fp16, "consecutive_hysteresis")) {
    l.consecutive_hysteresis = truthy(*v);
    note("fp16.consecutive_hysteresis", KeyFate::Mapped, shown(*v), "fp16 loss scaling in zinf train");
  }
}

void Reader::read_zero() {
  const json* z = member(&root_, "zero_optimization");
  if (zero_legacy_bool_) {
    stage_ = z->get<bool>() ? 1 : 0;
    note("zero_optimization", KeyFate::Mapped, z->dump(),
         fmt::format("DeepSpeed's oldest form: {} is stage {}", z->dump(), stage_));
    if (member(&root_, "allgather_size"))
      note("allgather_size", KeyFate::Ignored, shown(*member(&root_, "allgather_size")),
           "the legacy form's gather bucket; zinf gathers per operator");
    z = nullptr;
  } else if (z && z->is_null()) {
    refuse("zero_optimization", "must be a mapping of keys (DeepSpeedZeroConfig(**None) fails)");
  } else if (!z) {
    note("zero_optimization.stage", KeyFate::Defaulted, "0",
         "no zero_optimization section: DeepSpeed runs without ZeRO (stage 0)");
    message("ZeRO stage 0: the file has no zero_optimization section, and DeepSpeed's default is no ZeRO (every GPU "
            "holds all parameters, gradients and optimizer states)");
  }
  const std::string zp = "zero_optimization";
  if (z) {
    if (const json* s = field(z, zp, "stage")) {
      stage_ = static_cast<int>(s->get<double>());
      note(zp + ".stage", KeyFate::Mapped, std::to_string(stage_), "");
    } else {
      note(zp + ".stage", KeyFate::Defaulted, "0", "absent: DeepSpeed's default stage 0 (no ZeRO)");
      message("ZeRO stage 0: zero_optimization gives no stage, and DeepSpeed's default is 0");
    }
    if (const json* l = field(z, zp, "legacy_stage1"); l && model_bool(*l))
      refuse(zp + ".legacy_stage1", "The deprecated version of ZeRO Stage 1 is not supported in deepspeed >= 0.5.9.");
    if (const json* m = field(z, zp, "mics_shard_size"); m && m->get<double>() > 0)
      note(zp + ".mics_shard_size", KeyFate::Ignored, shown(*m),
           "MiCS partitions states within groups of this many GPUs; zinf partitions over all data-parallel ranks");
    else if (m)
      note(zp + ".mics_shard_size", KeyFate::NoEffect, shown(*m), "MiCS off");
  }
  read_precision();
  c_.zero_stage = stage_;
  read_offload(z);
  read_zero_schedule(z);
}

void Reader::read_offload(const json* z) {
  const std::string zp = "zero_optimization";
  // Where states live: offload_* and their deprecated booleans (DeepSpeedZeroConfig's new_param_fn).
  auto offload = [&](const std::string& key, const std::string& old_key) -> const json* {
    const json* o = z ? field(z, zp, key) : nullptr;
    const json* legacy = z ? field(z, zp, old_key) : nullptr;
    if (legacy) {
      if (o)
        refuse(zp + "." + old_key, fmt::format("Cannot provide deprecated parameter '{}' and replacing parameter '{}' "
                                               "together",
                                               old_key, key));
      note(zp + "." + old_key, KeyFate::Mapped, shown(*legacy),
           model_bool(*legacy) ? fmt::format("deprecated: DeepSpeed maps it to {}.device cpu", key)
                               : fmt::format("deprecated: DeepSpeed maps false to no {}", key));
      static const json cpu = json{{"device", "cpu"}};
      return model_bool(*legacy) ? &cpu : nullptr;
    }
    return o;
  };
  if (z && field(z, zp, "cpu_offload_use_pin_memory"))
    note(zp + ".cpu_offload_use_pin_memory", KeyFate::NoEffect, shown(*field(z, zp, "cpu_offload_use_pin_memory")),
         "deprecated, and DeepSpeed ignores it (pin_memory is a key of offload_param and offload_optimizer)");
  if (z && field(z, zp, "stage3_gather_fp16_weights_on_model_save") && field(z, zp, "gather_16bit_weights_on_model_save"))
    refuse(zp + ".stage3_gather_fp16_weights_on_model_save",
           "Cannot provide deprecated parameter 'stage3_gather_fp16_weights_on_model_save' and replacing parameter "
           "'gather_16bit_weights_on_model_save' together");

  const json* op = offload("offload_param", "cpu_offload_param");
  const json* oo = offload("offload_optimizer", "cpu_offload");
  auto device_of = [&](const json* o) { return o && member(o, "device") ? device_tier(*member(o, "device")) : Tier::Device; };
  const Tier param_tier = device_of(op), optim_tier = device_of(oo);
  const bool own_op = z && field(z, zp, "offload_param"), own_oo = z && field(z, zp, "offload_optimizer");

  if (param_tier != Tier::Device && stage_ < 3) {
    if (own_op)
      note(zp + ".offload_param.device", KeyFate::NoEffect, placement_word(param_tier),
           fmt::format("DeepSpeed reads offload_param only at stage 3: at stage {} parameters stay on the GPU", stage_));
    message(fmt::format("offload_param is read by DeepSpeed only at stage 3; at stage {} parameters stay on the GPU",
                        stage_));
  } else {
    c_.params = {false, param_tier};
    if (own_op) note(zp + ".offload_param.device", KeyFate::Mapped, placement_word(param_tier), "parameter shards");
  }
  c_.gradients = c_.params;

  const json* ratio = oo && oo != nullptr ? member(oo, "ratio") : nullptr;
  if (ratio && ratio->get<double>() < 1.0) {
    if (stage_ != 3) refuse(zp + ".offload_optimizer.ratio", "Partial offloading only supported for ZeRO Stage 3.");
    if (optim_tier != Tier::Device)
      note(zp + ".offload_optimizer.ratio", KeyFate::Ignored, shown(*ratio),
           fmt::format("DeepSpeed keeps {:.0f}% of the optimizer states on the GPU; zinf places them all on {}",
                       100 * (1 - ratio->get<double>()), to_string(optim_tier)));
  }
  // Offload with no optimizer type: the model code's optimizer. DeepSpeed refuses it unless it is
  // DeepSpeedCPUAdam or zero_force_ds_cpu_optimizer is false (engine.py _configure_optimizer).
  const json* type = at("optimizer.type");
  const json* force = member(&root_, "zero_force_ds_cpu_optimizer");
  if (optim_tier != Tier::Device && !type && (!force || truthy(*force)))
    message("DeepSpeed would refuse this file unless the model code's optimizer is DeepSpeedCPUAdam: with "
            "offload_optimizer and no optimizer type, DeepSpeed 0.16.5 raises ZeRORuntimeException for any other "
            "optimizer (the HF Trainer's default torch AdamW included) while zero_force_ds_cpu_optimizer is true, its "
            "default. Give an optimizer section or set zero_force_ds_cpu_optimizer false; zinf plans DeepSpeedCPUAdam");
  if (optim_tier != Tier::Device && stage_ == 0) {
    // Stage 0 has no ZeRO optimizer to hold states elsewhere: DeepSpeed builds its CPU optimizer over
    // parameters that stay on the GPU, or runs the model code's optimizer on the GPU.
    if (type)
      refuse(zp + ".offload_optimizer.device",
             "at stage 0 DeepSpeed builds DeepSpeedCPUAdam over parameters on the GPU, and its first step fails: "
             "\"CPUAdam param is on cuda:0 and must be 'cpu', make sure you enabled 'offload_optimizer': 'cpu' in your "
             "ZeRO config.\"");
    note(zp + ".offload_optimizer.device", KeyFate::NoEffect, placement_word(optim_tier),
         "stage 0: the model code's optimizer runs on the GPU");
  } else if (optim_tier == Tier::Nvme && stage_ < 3) {
    c_.optimizer = {false, Tier::Host};
    if (own_oo)
      note(zp + ".offload_optimizer.device", KeyFate::Mapped, "nvme",
           fmt::format("stage {}: DeepSpeed's stages 1-2 keep offloaded optimizer states in CPU memory (only stage 3 "
                       "swaps them to NVMe): planned on the host",
                       stage_));
    message(fmt::format("offload_optimizer.device nvme at stage {}: DeepSpeed keeps the optimizer states in CPU memory "
                        "below stage 3, and so does the plan",
                        stage_));
  } else {
    c_.optimizer = {false, optim_tier};
    if (own_oo) note(zp + ".offload_optimizer.device", KeyFate::Mapped, placement_word(optim_tier), "optimizer states");
  }
  for (const auto& [o, key] : {std::pair{op, std::string("offload_param")}, {oo, std::string("offload_optimizer")}}) {
    if (!o || !z || !field(z, zp, key)) continue;
    if (const json* pin = member(o, "pin_memory")) {
      const bool pinned = model_bool(*pin);
      note(zp + "." + key + ".pin_memory", pinned ? KeyFate::Mapped : KeyFate::Ignored, shown(*pin),
           pinned ? "zinf's host buffers are pinned"
                  : "DeepSpeed then copies through pageable host memory; zinf's host buffers are pinned");
    } else if (member(o, "device") && *member(o, "device") != "none") {
      note(zp + "." + key + ".pin_memory", KeyFate::Ignored, "false",
           "absent: DeepSpeed's default false copies through pageable host memory; zinf's host buffers are pinned");
    }
  }

}

void Reader::read_zero_schedule(const json* z) {
  const std::string zp = "zero_optimization";
  // Communication overlap: DeepSpeed's default is on at stage 3 only.
  const json* overlap = z ? field(z, zp, "overlap_comm") : nullptr;
  const bool overlapping = overlap ? model_bool(*overlap) : stage_ == 3;
  if (stage_ > 0) {
    if (overlapping)
      note(zp + ".overlap_comm", overlap ? KeyFate::Mapped : KeyFate::Defaulted, "true",
           overlap ? "zinf overlaps communication with compute" : "DeepSpeed's default at stage 3");
    else
      note(zp + ".overlap_comm", KeyFate::Ignored, "false",
           fmt::format("{}DeepSpeed then reduces gradients on the compute stream; zinf overlaps them",
                       overlap ? "" : fmt::format("absent: DeepSpeed's default at stage {}; ", stage_)));
  } else if (overlap) {
    note(zp + ".overlap_comm", KeyFate::NoEffect, shown(*overlap), "stage 0 has no ZeRO communication to overlap");
  }

  // Stage-3 fetching: parameters in flight and kept, as bytes of the training precision.
  const double eb = element_bytes(*c_.precision);
  auto stage3 = [&](const char* name, const char* alias, double fallback, auto apply) {
    const json* v = z ? field(z, zp, name, alias) : nullptr;
    const std::string key = zp + "." + (v && z && member(z, alias) ? alias : name);
    if (stage_ < 3) {
      if (v) note(key, KeyFate::NoEffect, shown(*v), "a stage-3 setting");
      return;
    }
    const double n = v ? v->get<double>() : fallback;
    if (n > double(kMaxParams)) unsupported(key, fmt::format("{} is above zinf's bound of 2^50 parameters", shown(*v)));
    apply(n);
    note(key, v ? KeyFate::Mapped : KeyFate::Defaulted, fmt::format("{:.0f}", n),
         v ? "" : fmt::format("DeepSpeed's default {:.0f}", fallback));
  };
  stage3("max_live_parameters", "stage3_max_live_parameters", 1e9,
         [&](double n) { c_.max_live_bytes = std::max(1.0, eb * n); });
  stage3("max_reuse_distance", "stage3_max_reuse_distance", 1e9, [&](double n) { c_.reuse_distance_bytes = eb * n; });
  // DeepSpeed prefetches up to this many parameters ahead; zinf counts operators ahead and bounds
  // the bytes in flight with max_live_bytes, so the bucket caps that bound.
  stage3("prefetch_bucket_size", "stage3_prefetch_bucket_size", 5e7,
         [&](double n) { c_.max_live_bytes = std::max(c_.max_live_bytes, eb * n); });

  // Sub-groups: stage 3 updates its partition in sub-groups of this many parameters; stages 1-2
  // update each rank's partition whole.
  const json* sg = z ? field(z, zp, "sub_group_size") : nullptr;
  c_.sub_groups_whole_units = true;  // DeepSpeed's sub-groups hold whole parameters
  if (stage_ == 3) {
    const double n = sg ? sg->get<double>() : 1e9;
    if (n > double(kMaxParams)) c_.sub_group_size = kMaxParams;
    else c_.sub_group_size = std::max<int64_t>(1, static_cast<int64_t>(n));
    note(zp + ".sub_group_size", sg ? KeyFate::Mapped : KeyFate::Defaulted, std::to_string(c_.sub_group_size),
         sg ? "sub-groups of whole parameters, closed once they reach this many elements (a parameter of its own "
              "when it is larger)"
            : "DeepSpeed's default 1e9");
  } else {
    c_.sub_group_size = kMaxParams;
    if (sg) note(zp + ".sub_group_size", KeyFate::NoEffect, shown(*sg), "stages 1-2 update each partition whole");
  }
}

void Reader::read_batch() {
  // Each of the triple as DeepSpeed holds it after the HF autos: a number, or absent.
  auto get = [&](const char* key) -> std::optional<double> {
    const json* v = member(&root_, key);
    if (!v || v->is_null()) return std::nullopt;
    if (v->is_boolean() || !v->is_number())
      refuse(key, fmt::format("'{}' is not a number (DeepSpeed compares it with 0 and fails)", shown(*v)));
    return v->get<double>();
  };
  auto tb = get("train_batch_size"), mb = get("train_micro_batch_size_per_gpu"), ga = get("gradient_accumulation_steps");
  const double world = ctx_.ranks;
  const std::string world_text =
      fmt::format("world size {}{}", ctx_.ranks, ctx_.ranks_text.empty() ? "" : " (" + ctx_.ranks_text + ")");
  std::string derived;  // the member DeepSpeed computed, for the ledger
  if (tb && mb && ga) {
  } else if (tb && mb) {
    ga = std::floor(std::floor(*tb / *mb) / world);
    derived = "gradient_accumulation_steps";
  } else if (tb && ga) {
    mb = std::floor(std::floor(*tb / world) / *ga);
    derived = "train_micro_batch_size_per_gpu";
  } else if (mb && ga) {
    tb = *mb * *ga * world;
    derived = "train_batch_size";
  } else if (tb) {
    ga = 1;
    mb = std::floor(*tb / world);
    derived = "train_micro_batch_size_per_gpu";
  } else if (mb) {
    tb = *mb * world;
    ga = 1;
    derived = "train_batch_size";
  } else {
    refuse("train_batch_size", "Either train_batch_size or train_micro_batch_size_per_gpu needs to be provided");
  }
  if (!(*tb > 0)) refuse("train_batch_size", fmt::format("Train batch size: {} has to be greater than 0", *tb));
  if (!(*mb > 0))
    refuse("train_micro_batch_size_per_gpu",
           fmt::format("Micro batch size per gpu: {} has to be greater than 0 (from train_batch_size {}{} over {})", *mb,
                       *tb, derived == "train_micro_batch_size_per_gpu" && ga && member(&root_, "gradient_accumulation_steps")
                                ? fmt::format(" and gradient_accumulation_steps {}", *ga)
                                : std::string(),
                       world_text));
  if (!(*ga > 0))
    refuse("gradient_accumulation_steps",
           fmt::format("Gradient accumulation steps: {} has to be greater than 0 (from train_batch_size {} over "
                       "micro-batch {} x {})",
                       *ga, *tb, *mb, world_text));
  if (*tb != *mb * *ga * world)
    refuse("train_batch_size",
           fmt::format("Check batch related parameters. train_batch_size is not equal to micro_batch_per_gpu * "
                       "gradient_acc_step * world_size {} != {} * {} * {} ({} as zinf runs it)",
                       *tb, *mb, *ga, ctx_.ranks, world_text));
  for (const auto& [v, key] : {std::pair{*mb, "train_micro_batch_size_per_gpu"}, {*ga, "gradient_accumulation_steps"}})
    if (v != std::floor(v)) refuse(key, fmt::format("{} is not a whole number of sequences or steps", v));
  if (*mb > kMaxMicroBatch)
    unsupported("train_micro_batch_size_per_gpu",
                fmt::format("micro-batch {} is above zinf's bound of {} sequences per GPU", *mb, kMaxMicroBatch));
  if (*ga > kMaxGradientAccumulation)
    unsupported(derived == "gradient_accumulation_steps" ? "train_batch_size" : "gradient_accumulation_steps",
                fmt::format("{} gradient accumulation steps{} are above zinf's bound of {} (every micro-batch is a "
                            "set of tasks in the plan); lower train_batch_size or raise the micro-batch",
                            *ga, derived == "gradient_accumulation_steps" ? " (derived)" : "", kMaxGradientAccumulation));
  c_.micro_batch = static_cast<int64_t>(*mb);
  c_.gradient_accumulation = static_cast<int64_t>(*ga);
  out_.world_size = ctx_.ranks;
  out_.train_batch_size = static_cast<int64_t>(*tb);
  const std::map<std::string, double> values = {
      {"train_batch_size", *tb}, {"train_micro_batch_size_per_gpu", *mb}, {"gradient_accumulation_steps", *ga}};
  for (const auto& [key, v] : values) {
    if (key == derived) {
      note(key, KeyFate::Derived, fmt::format("{:.0f}", v),
           fmt::format("DeepSpeed's rule: train_batch_size = micro-batch x accumulation x {}", world_text));
    } else if (!notes_.count(key) || notes_[key].fate != KeyFate::Auto) {
      note(key, KeyFate::Mapped, fmt::format("{:.0f}", v), key == "train_batch_size" ? world_text : "");
    }
  }
  if (const json* g = member(&root_, "gradient_clipping")) {
    if (!g->is_number()) refuse("gradient_clipping", fmt::format("'{}' is not a number", shown(*g)));
    c_.grad_clip = std::max(0.0, g->get<double>());
    if (!notes_.count("gradient_clipping"))
      note("gradient_clipping", KeyFate::Mapped, shown(*g), c_.grad_clip > 0 ? "" : "0 or below: no clipping");
  } else {
    c_.grad_clip = 0;
  }
}

void Reader::read_aio() {
  const bool nvme = c_.params.tier == Tier::Nvme || c_.optimizer.tier == Tier::Nvme;
  const json* a = member(&root_, "aio");
  c_.aio_block_size = 1048576;  // DeepSpeed's AIO_DEFAULT_DICT
  c_.aio_queue_depth = 8;
  if (a && !a->is_null() && !a->is_object()) refuse("aio", "must be a mapping of keys");
  auto value = [&](const char* key, int64_t fallback, int64_t lowest, int64_t highest) {
    const json* v = a ? member(a, key) : nullptr;
    if (!v) {
      if (nvme) note(std::string("aio.") + key, KeyFate::Defaulted, std::to_string(fallback), "DeepSpeed's default");
      return fallback;
    }
    if (!v->is_number_integer() || v->get<int64_t>() < lowest)
      refuse(std::string("aio.") + key, fmt::format("'{}' is not a positive integer", shown(*v)));
    if (v->get<int64_t>() > highest)
      unsupported(std::string("aio.") + key, fmt::format("{} is above zinf's bound of {}", v->get<int64_t>(), highest));
    return v->get<int64_t>();
  };
  int64_t block = value("block_size", c_.aio_block_size, 1, int64_t(1) << 30);
  c_.aio_queue_depth = value("queue_depth", c_.aio_queue_depth, 1, 65536);
  if (block % kIoAlignmentBytes != 0) {
    const int64_t rounded = (block / kIoAlignmentBytes + 1) * kIoAlignmentBytes;
    note("aio.block_size", KeyFate::Mapped, std::to_string(rounded),
         fmt::format("{} rounded up to a multiple of {} bytes, as zinf's O_DIRECT requests must be", block,
                     kIoAlignmentBytes));
    block = rounded;
  } else if (a && member(a, "block_size")) {
    note("aio.block_size", nvme ? KeyFate::Mapped : KeyFate::NoEffect, std::to_string(block),
         nvme ? "" : "nothing lives on NVMe");
  }
  c_.aio_block_size = block;
  if (a && member(a, "queue_depth"))
    note("aio.queue_depth", nvme ? KeyFate::Mapped : KeyFate::NoEffect, std::to_string(c_.aio_queue_depth),
         nvme ? "" : "nothing lives on NVMe");
  if (a && member(a, "thread_count"))
    note("aio.thread_count", KeyFate::NotRead, shown(*member(a, "thread_count")),
         "DeepSpeed 0.16.5 does not read it (older releases did; the current key is intra_op_parallelism)");
}

void Reader::read_activation_checkpointing() {
  const json* a = member(&root_, "activation_checkpointing");
  if (!a) {
    c_.checkpoint_interval = 0;
    note("activation_checkpointing", KeyFate::Defaulted, "none",
         "no activation_checkpointing section: no checkpoints planned. In a real run the model code decides "
         "(Megatron's --checkpoint-activations, HF's gradient_checkpointing); add the section to plan one per block");
    return;
  }
  if (!a->is_object()) refuse("activation_checkpointing", "must be a mapping of keys");
  // The section configures deepspeed.checkpointing, which the model code calls on each block it wraps.
  c_.checkpoint_interval = 1;
  note("activation_checkpointing", KeyFate::Mapped, "one checkpoint per block",
       "the section configures deepspeed.checkpointing, which the model code applies to each transformer block");
  if (const json* cpu = member(a, "cpu_checkpointing"); cpu && truthy(*cpu)) {
    c_.checkpoints = {false, Tier::Host};
    c_.checkpoint_copies_synchronous = true;  // DeepSpeed copies them on the compute stream
    note("activation_checkpointing.cpu_checkpointing", KeyFate::Mapped, "true",
         "checkpoints in host memory, copied on the compute stream as DeepSpeed does");
  }
  if (const json* p = member(a, "partition_activations")) {
    c_.checkpoints_partitioned = truthy(*p);
    note("activation_checkpointing.partition_activations", KeyFate::Mapped, truthy(*p) ? "true" : "false",
         truthy(*p) ? "each tensor-parallel rank keeps a slice of every checkpoint" : "");
  }
}

void Reader::read_tensor_parallel() {
  const json* t = member(&root_, "tensor_parallel");
  if (!t || t->is_null()) return;
  const json* a = field(t, "tensor_parallel", "autotp_size");
  const int64_t n = a ? static_cast<int64_t>(a->get<double>()) : 0;
  if (n > 1 && stage_ == 3)
    refuse("tensor_parallel.autotp_size", "Currently, the compatibility between 'autotp' and 'zero_stage = 3' has not "
                                          "been validated");
  if (n > kMaxTensorParallel)
    unsupported("tensor_parallel.autotp_size", fmt::format("{} is above zinf's bound of {}", n, kMaxTensorParallel));
  c_.tensor_parallel = std::max<int64_t>(1, n);
  if (a)
    note("tensor_parallel.autotp_size", KeyFate::Mapped, std::to_string(c_.tensor_parallel),
         n > 1 ? "AutoTP: each layer split over this many GPUs of a node" : "AutoTP off");
}

// AutoEP (recent DeepSpeed: deepspeed/runtime/config.py, get_expert_parallel_config): with
// `enabled`, `autoep_size` ranks split each layer's routed experts, DeepSpeed-MoE's ep_size. The
// older DeepSpeed-MoE takes ep_size as an argument of deepspeed.moe.layer.MoE, never from the JSON.
void Reader::read_expert_parallel() {
  const json* e = member(&root_, "expert_parallel");
  if (!e || e->is_null() || !e->is_object()) return;
  const json* on = member(e, "enabled");
  const json* size = member(e, "autoep_size");
  const bool enabled = on && truthy(*on);
  const int64_t n = size && size->is_number() ? static_cast<int64_t>(size->get<double>()) : 1;
  if (enabled && n > kMaxExpertParallel)
    unsupported("expert_parallel.autoep_size", fmt::format("{} is above zinf's bound of {}", n, kMaxExpertParallel));
  c_.expert_parallel = enabled ? std::max<int64_t>(1, n) : 1;
  if (on) note("expert_parallel.enabled", KeyFate::Mapped, enabled ? "true" : "false", enabled ? "" : "AutoEP off");
  if (size)
    note("expert_parallel.autoep_size", KeyFate::Mapped, std::to_string(c_.expert_parallel),
         enabled ? "each mixture layer's routed experts split over this many ranks (expert_parallel)"
                 : "not read: expert_parallel.enabled is not true");
}

void Reader::read_other_sections() {
  auto check_dtype_word = [&](const char* key) {
    const json* v = member(&root_, key);
    if (!v || v->is_null()) return;
    std::string w = v->is_string() ? v->get<std::string>() : std::string();
    for (char& ch : w) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (w != "fp32" && w != "fp16" && w != "bf16")
      refuse(key, fmt::format("Invalid communication_data_type. Supported data types: ['fp16', 'bf16', 'fp32']. Got: {}",
                              shown(*v)));
    const bool same = w == to_string(*c_.precision);
    note(key, same ? KeyFate::NoEffect : KeyFate::Ignored, w,
         same ? "the training precision, as zinf communicates"
              : fmt::format("DeepSpeed then communicates in {}; zinf communicates in {}", w, to_string(*c_.precision)));
  };
  check_dtype_word("communication_data_type");
  if (member(&root_, "seq_parallel_comm_data_type")) {
    check_dtype_word("seq_parallel_comm_data_type");
    note("seq_parallel_comm_data_type", KeyFate::NoEffect, shown(*member(&root_, "seq_parallel_comm_data_type")),
         "no sequence parallelism is planned");
  }
  if (const json* ck = member(&root_, "checkpoint")) {
    if (!ck->is_object()) refuse("checkpoint", "must be a mapping of keys");
    if (const json* tv = member(ck, "tag_validation")) {
      std::string w = tv->is_string() ? tv->get<std::string>() : "";
      for (char& ch : w) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      if (w != "IGNORE" && w != "WARN" && w != "FAIL")
        refuse("checkpoint.tag_validation", fmt::format("Checkpoint config contains invalid tag_validation value of {}, "
                                                        "expecting one of ['IGNORE', 'WARN', 'FAIL']",
                                                        shown(*tv)));
    }
    if (const json* pw = member(ck, "parallel_write"); pw && pw->is_object())
      if (const json* ps = member(pw, "pipeline_stage"); ps && !ps->is_boolean())
        refuse("checkpoint.parallel_write.pipeline_stage",
               fmt::format("checkpoint::parallel_write::pipeline_stage value of '{}' is invalid, expecting: true or "
                           "false",
                           shown(*ps)));
    note("checkpoint", KeyFate::NoEffect, "…", "used when checkpoints are saved or loaded, not in a training step");
  }
  if (const json* dt = member(&root_, "data_types")) {
    const json* g = dt->is_object() ? member(dt, "grad_accum_dtype") : nullptr;
    std::string w = g && g->is_string() ? g->get<std::string>() : "";
    static const std::map<std::string, std::string> dtypes = {
        {"fp16", "fp16"}, {"float16", "fp16"}, {"half", "fp16"}, {"torch.float16", "fp16"},
        {"fp32", "fp32"}, {"float32", "fp32"}, {"float", "fp32"}, {"torch.float32", "fp32"},
        {"bf16", "bf16"}, {"bfloat16", "bf16"}, {"torch.bfloat16", "bf16"}};
    if (g && !g->is_null() && !dtypes.count(w))
      refuse("data_types.grad_accum_dtype", fmt::format("'{}' is not a valid DtypeEnum", shown(*g)));
    if (g && !g->is_null()) {
      const std::string acc = dtypes.at(w), model = to_string(*c_.precision);
      if (stage_ == 0 && model == "bf16" && acc == "bf16")
        refuse("data_types.grad_accum_dtype", "Bfloat16 wrapper must use a gradient accumulation type of fp32, enable "
                                              "ZeRO to use Bfloat16 gradient accumulation");
      if (stage_ == 0 && model != acc && !(model == "bf16" && acc == "fp32"))
        refuse("data_types.grad_accum_dtype", "unsupported mix of model dtype and gradient accumulation type");
      note("data_types.grad_accum_dtype", acc == model ? KeyFate::NoEffect : KeyFate::Ignored, acc,
           acc == model ? "the training precision"
                        : fmt::format("DeepSpeed accumulates gradients in {}; zinf accumulates in {}", acc, model));
    } else {
      note("data_types", KeyFate::NoEffect, shown(*dt), "no grad_accum_dtype: the default");
    }
  }
  // Sections that change the model's work when enabled.
  for (const auto& [key, what] :
       {std::pair{"progressive_layer_drop", "DeepSpeed skips layers at random (fewer FLOPs than planned)"},
        {"curriculum_learning", "DeepSpeed's curriculum shortens early sequences (less work than planned)"},
        {"data_efficiency", "DeepSpeed's data sampling and routing change the work per step"},
        {"quantize_training", "DeepSpeed's MoQ quantizes weights during training"}}) {
    const json* s = member(&root_, key);
    if (!s) continue;
    const bool on = s->is_object() && member(s, "enabled") && truthy(*member(s, "enabled"));
    if (std::string(key) == "quantize_training" && on && member(s, "eigenvalue") && member(s, "eigenvalue")->is_object() &&
        member(member(s, "eigenvalue"), "enabled") && truthy(*member(member(s, "eigenvalue"), "enabled")))
      refuse("quantize_training.eigenvalue.enabled", "Eigenvalue based MoQ is temporarily disabled");
    note(key, on ? KeyFate::Ignored : KeyFate::NoEffect, on ? "enabled" : "not enabled", on ? what : "not enabled");
  }
  if (const json* e = member(&root_, "elasticity"); e && e->is_object() && member(e, "enabled") &&
                                                      truthy(*member(e, "enabled"))) {
    const json* ignore = member(e, "ignore_non_elastic_batch_info");
    if (!(ignore && truthy(*ignore)))
      for (const char* k : {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"})
        if (member(&root_, k))
          refuse(k, "One or more batch related parameters were found in your ds_config (train_batch_size, "
                    "train_micro_batch_size_per_gpu, and/or gradient_accumulation_steps). These parameters *will not "
                    "be used* since elastic training is enabled");
    unsupported("elasticity.enabled", "DeepSpeed picks the batch by its elastic search over GPU counts, which zinf "
                                      "does not reproduce; give the batch triple instead");
  } else if (const json* e2 = member(&root_, "elasticity")) {
    note("elasticity", KeyFate::NoEffect, shown(*e2), "not enabled");
  }
  if (const json* s = member(&root_, "sparse_attention"); s && s->is_object()) {
    const json* mode = member(s, "mode");
    static const std::set<std::string> modes = {"dense", "fixed", "variable", "bigbird", "bslongformer"};
    if (mode && !(mode->is_string() && modes.count(mode->get<std::string>())))
      refuse("sparse_attention.mode", fmt::format("Given sparsity mode, {}, has not been implemented yet!", shown(*mode)));
  }
  if (const json* a = member(&root_, "autotuning"); a && !out_.autotuner)
    note("autotuning", KeyFate::NoEffect, shown(*a), "DeepSpeed's autotuner, not enabled");
  read_scheduler();
}

void Reader::read_scheduler() {
  const json* s = member(&root_, "scheduler");
  if (!s) return;
  // The schedule is read beside the RunConfig (it changes no plan or simulation): by the LR
  // schedule reader, which refuses what DeepSpeed's scheduler constructors refuse.
  ConfigReader whole = ConfigReader::from_string(root_.dump(), file_);
  ConfigReader section = whole.child("scheduler");
  std::vector<std::string> warnings;
  const LrSchedule schedule = read_deepspeed_scheduler(section, warnings);
  for (const auto& w : warnings) message(w);
  note("scheduler", KeyFate::Mapped, describe(schedule),
       "zinf train's learning rate, as DeepSpeed's lr_schedules.py computes it (no plan or simulation depends on it)");
}

}  // namespace zinf::core::deepspeed
