#include "formats/run_config_reader.hpp"

#include "core/program.hpp"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "formats/bounded_input.hpp"
#include "formats/config_reader.hpp"
#include "formats/deepspeed_config.hpp"
#include "core/run_config_bounds.hpp"
#include "formats/deepspeed_release.hpp"

namespace zinf::core {

namespace {

// Bounds of every number a run config gives: wide enough for any real run, narrow enough that the
// planner's arithmetic on them cannot overflow or allocate without end.
constexpr int64_t kMaxDistance = 1'000'000;
constexpr int64_t kMaxTiling = 65536;
constexpr double kMaxBytes = 1e18;
constexpr double kMaxBlock = 1 << 30;
constexpr int64_t kMaxQueueDepth = 65536;
constexpr int64_t kMaxRings = 64;
constexpr int64_t kMaxTasksInFlight = 64;
constexpr int64_t kMaxSubGroupsInFlight = 4096;
constexpr double kMinEps = 1e-30;

const std::vector<std::string> kTierWords = {"none", "device", "cpu", "host", "nvme", "auto"};

Placement parse_placement(const std::string& word) {
  if (word == "auto") return {true, Tier::Device};
  if (word == "none" || word == "device") return {false, Tier::Device};
  if (word == "cpu" || word == "host") return {false, Tier::Host};
  return {false, Tier::Nvme};
}

// The `optimizer:` section of zinf's YAML run config.
void read_optimizer(ConfigReader& o, RunConfig& c) {
  using U = UnitKind;
  c.optimizer_type = o.choice("type", {"adam", "adamw", "lamb", "lion", "adagrad", "sgd"}, "adamw");
  c.optimizer_states = o.int_in("states", 0, 4, c.optimizer_type == "adagrad" || c.optimizer_type == "lion" ? 1
                                                 : c.optimizer_type == "sgd"                                ? 0
                                                                                                            : 2);
  c.lr = o.positive_number("lr", U::Count, c.lr);
  c.beta1 = o.fraction_below_one("beta1", c.beta1);
  c.beta2 = o.fraction_below_one("beta2", c.beta2);
  c.eps = o.number_in("eps", U::Count, kMinEps, 1.0, c.eps);
  c.weight_decay = o.number_in("weight_decay", U::Count, 0, 1e3, c.weight_decay);
  c.grad_clip = o.non_negative_number("grad_clip", U::Count, c.grad_clip);
  c.sub_group_size = o.positive_int("sub_group_size", c.sub_group_size);
  c.sub_groups_whole_units = o.choice("sub_group_boundaries", {"elements", "units"}, "elements") == "units";
  c.optimizer_timing = o.choice("timing", {"after-backward", "overlap-backward"}, "after-backward") ==
                               "overlap-backward"
                           ? OptimizerTiming::OverlapBackward
                           : OptimizerTiming::AfterBackward;
  if (o.has("sub_groups_in_flight")) {
    c.optimizer_sub_groups_in_flight =
        o.str("sub_groups_in_flight") == "auto" ? 0 : o.int_in("sub_groups_in_flight", 1, kMaxSubGroupsInFlight);
  } else {
    o.ignore("sub_groups_in_flight");
  }
  c.optimizer_nvme_phases = o.boolean("nvme_phases", c.optimizer_nvme_phases);
  c.optimizer_read_ahead = o.boolean("read_ahead", c.optimizer_read_ahead);
  const std::string path = o.choice("host_path", {"fused", "deepspeed-0.3", "deepspeed-0.9"}, "fused");
  for (HostPath p : {HostPath::Fused, HostPath::DeepSpeed03, HostPath::DeepSpeed09})
    if (path == to_string(p)) c.optimizer_host_path = p;
}

// The `loss_scale:` section: fp16's loss scale, DeepSpeed's fp16 keys by shorter names.
void read_loss_scale(ConfigReader& l, LossScaleConfig& s) {
  using U = UnitKind;
  s.static_scale = l.non_negative_number("static", U::Count, s.static_scale);
  s.initial_scale_power = l.int_in("initial_scale_power", 0, 64, s.initial_scale_power);
  s.window = l.int_in("window", 1, 1'000'000'000, s.window);
  s.hysteresis = l.int_in("hysteresis", 1, 1'000'000, s.hysteresis);
  s.consecutive_hysteresis = l.boolean("consecutive_hysteresis", s.consecutive_hysteresis);
  s.min_scale = l.positive_number("min", U::Count, s.min_scale);
}

RunConfig read_yaml(ConfigReader& r) {
  using U = UnitKind;
  RunConfig c;
  r.ignore("description");
  c.zero_stage = static_cast<int>(r.int_in("zero_stage", 0, 3, 3));
  c.partitioning = r.choice("partitioning", {"bandwidth-centric", "owner-based"}, "bandwidth-centric") == "owner-based"
                       ? Partitioning::OwnerBased
                       : Partitioning::BandwidthCentric;
  if (auto o = r.maybe_child("offload")) {
    c.params = parse_placement(o->choice("params", kTierWords, "none"));
    c.optimizer = parse_placement(o->choice("optimizer", kTierWords, "none"));
    c.gradients = o->has("gradients") ? parse_placement(o->choice("gradients", kTierWords)) : c.params;
  }
  if (auto a = r.maybe_child("activation_checkpoint")) {
    c.checkpoint_interval = a->int_in("interval", 0, kMaxDistance, 1);
    c.checkpoints = parse_placement(a->choice("tier", kTierWords, "device"));
    c.checkpoint_copies_synchronous = a->choice("copies", {"overlapped", "synchronous"}, "overlapped") == "synchronous";
    c.checkpoints_partitioned = a->boolean("partitioned", false);
    c.checkpoints_per_block = a->int_in("per_block", 1, 2, 1);
  }
  if (auto a = r.maybe_child("activation_offload")) {
    const std::string policy = a->choice("policy", {"none", "lifetime", "offload_all"}, "none");
    c.activation_policy = policy == "lifetime"      ? ActivationPolicy::Lifetime
                          : policy == "offload_all" ? ActivationPolicy::OffloadAll
                                                    : ActivationPolicy::None;
    const std::string tier = a->choice("tier", {"auto", "cpu", "host", "nvme"}, "auto");
    c.activation_tier = parse_placement(tier);
    c.activation_prefetch_blocks = a->int_in("prefetch_blocks", 1, kMaxDistance, 2);
    c.activation_per_tensor = a->choice("granularity", {"tensor", "block"}, "tensor") == "tensor";
  }
  if (r.has("tiling_factor")) {
    std::string t = r.str("tiling_factor");
    c.tiling_factor = t == "auto" ? 0 : r.int_in("tiling_factor", 1, kMaxTiling);
  } else {
    r.ignore("tiling_factor");
  }
  if (r.has("vocabulary_tiles")) {
    std::string t = r.str("vocabulary_tiles");
    c.vocabulary_tiles = t == "auto" ? 0 : r.int_in("vocabulary_tiles", 1, kMaxTiling);
  } else {
    r.ignore("vocabulary_tiles");
  }
  if (auto p = r.maybe_child("prefetch")) {
    c.nvme_prefetch_distance = p->int_in("nvme_distance", 0, kMaxDistance, kDefaultNvmePrefetchDistance);
    c.h2d_prefetch_distance = p->int_in("h2d_distance", 0, kMaxDistance, kDefaultH2dPrefetchDistance);
    c.allgather_prefetch_distance = p->int_in("allgather_distance", 0, kMaxDistance, kDefaultAllgatherPrefetchDistance);
    c.max_live_bytes = p->number_in("max_live_bytes", U::Bytes, 1, kMaxBytes, c.max_live_bytes);
    c.reuse_distance_bytes = p->number_in("reuse_distance_bytes", U::Bytes, 0, kMaxBytes, c.reuse_distance_bytes);
  }
  if (auto a = r.maybe_child("aio")) {
    c.aio_block_size = static_cast<int64_t>(a->number_in("block_size", U::Bytes, 1, kMaxBlock, double(c.aio_block_size)));
    c.aio_queue_depth = a->int_in("queue_depth", 1, kMaxQueueDepth, c.aio_queue_depth);
    c.aio_rings = a->int_in("rings", 1, kMaxRings, c.aio_rings);
    c.aio_tasks_in_flight = a->int_in("tasks_in_flight", 1, kMaxTasksInFlight, c.aio_tasks_in_flight);
    c.swap_checksums = a->boolean("checksums", c.swap_checksums);
    if (c.aio_block_size % kIoAlignmentBytes != 0)
      a->fail("block_size", fmt::format("must be a multiple of {} bytes for O_DIRECT, got {}", kIoAlignmentBytes,
                                        c.aio_block_size));
  }
  if (r.has("deepspeed_release")) {
    try {
      c.deepspeed = deepspeed_release_behaviour(r.str("deepspeed_release"));
    } catch (const std::invalid_argument& e) {
      r.fail("deepspeed_release", e.what());
    }
  }
  if (auto b = r.maybe_child("deepspeed_behaviour")) {
    auto& d = c.deepspeed;
    d.fetch_syncs_device = b->boolean("fetch_syncs_device", d.fetch_syncs_device);
    d.backward_nvme_prefetch = b->boolean("backward_nvme_prefetch", d.backward_nvme_prefetch);
    d.gather_device_passes = static_cast<int>(b->int_in("gather_device_passes", 0, 8, d.gather_device_passes));
    d.reduce_device_passes = static_cast<int>(b->int_in("reduce_device_passes", 0, 8, d.reduce_device_passes));
    d.prefetch_while_under_live = b->boolean("prefetch_while_under_live", d.prefetch_while_under_live);
    d.trace_misaligned = b->boolean("trace_misaligned", d.trace_misaligned);
  }
  // pinned.buffer_count and pinned.buffer_size are gone: host staging is the Program's host buffers
  // (its MemEvents, counted in the plan's host peak), not a count x size of equal buffers.
  if (r.has("pinned"))
    r.fail("pinned", "pinned.buffer_count and pinned.buffer_size were removed: host staging buffers follow the "
                     "Program (their sizes and count are the plan's host peak); delete the pinned block");
  r.ignore("pinned");
  if (auto o = r.maybe_child("optimizer")) read_optimizer(*o, c);
  r.ignore("lr_schedule");  // changes no cost: read by load_lr_schedule (formats/lr_schedule_reader.hpp)
  if (const std::string p = r.choice("precision", {"auto", "bf16", "fp16", "fp32"}, "auto"); p != "auto")
    c.precision = parse_precision(p);
  if (auto l = r.maybe_child("loss_scale")) read_loss_scale(*l, c.loss_scaling);
  c.gradient_accumulation = r.int_in("gradient_accumulation", 1, kMaxGradientAccumulation, 1);
  if (r.has("micro_batch")) c.micro_batch = r.int_in("micro_batch", 1, kMaxMicroBatch);
  else r.ignore("micro_batch");
  if (r.has("seq")) c.seq = r.int_in("seq", 1, 1 << 24);
  else r.ignore("seq");
  c.reserve_nvme_for_checkpoint = r.boolean("reserve_nvme_for_checkpoint", true);
  c.gradient_stores_in_flight = r.int_in("gradient_stores_in_flight", 1, 1024, c.gradient_stores_in_flight);
  // Megatron's name for the same degree is accepted too, but not both.
  if (r.has("tensor_parallel") && r.has("tensor_model_parallel_size"))
    r.fail("tensor_model_parallel_size", "say tensor_parallel or tensor_model_parallel_size, not both");
  if (r.has("tensor_model_parallel_size")) c.tensor_parallel = r.int_in("tensor_model_parallel_size", 1, kMaxTensorParallel);
  else c.tensor_parallel = r.int_in("tensor_parallel", 1, kMaxTensorParallel, 1);
  c.expert_parallel = r.int_in("expert_parallel", 1, kMaxExpertParallel, 1);
  c.capacity_factor = r.number_in("capacity_factor", U::Count, 1e-3, kMaxCapacityFactor, c.capacity_factor);
  r.reject_unread();
  return c;
}

std::string slurp(const std::string& path) { return read_bounded_file(path, kMaxConfigBytes, "run config"); }

}  // namespace

RunConfig load_run_config(const std::string& path) {
  auto r = ConfigReader::from_file(path);
  return read_yaml(r);
}

RunConfig parse_run_config(const std::string& yaml_text, const std::string& name) {
  auto r = ConfigReader::from_string(yaml_text, name);
  return read_yaml(r);
}

RunConfig parse_deepspeed_config(const std::string& json_text, const std::string& name,
                                 std::vector<std::string>& warnings, const DeepSpeedContext& ctx) {
  DeepSpeedReading r = read_deepspeed_config(json_text, name, ctx);
  for (auto& m : r.messages) warnings.push_back(name + ": " + m);
  return r.config;
}

RunConfig parse_deepspeed_config(const std::string& json_text, const std::string& name,
                                 std::vector<std::string>& warnings) {
  return parse_deepspeed_config(json_text, name, warnings, DeepSpeedContext{});
}

RunConfig load_any_run_config(const std::string& path, std::vector<std::string>& warnings, const DeepSpeedContext& ctx) {
  std::string text = slurp(path);
  if (is_deepspeed_json(text)) return parse_deepspeed_config(text, path, warnings, ctx);
  return parse_run_config(text, path);
}

RunConfig load_any_run_config(const std::string& path, std::vector<std::string>& warnings) {
  return load_any_run_config(path, warnings, DeepSpeedContext{});
}

bool is_deepspeed_json(const std::string& text) {
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      ++i;
    } else if (c == '#' || (c == '/' && i + 1 < text.size() && text[i + 1] == '/')) {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      const size_t end = text.find("*/", i + 2);
      if (end == std::string::npos) return false;
      i = end + 2;
    } else {
      return c == '{';
    }
  }
  return false;
}

}  // namespace zinf::core
