#include "formats/deepspeed_schema.hpp"

namespace zinf::core::deepspeed {

namespace {

using F = FieldSpec;
constexpr KeyFate kNone = KeyFate::NoEffect;
constexpr KeyFate kIgn = KeyFate::Ignored;

const char* const kLogging = "logging and profiling only: nothing of the step changes";
const char* const kNumerics = "numerics only: no memory, transfer or compute changes";
const char* const kSaving = "used when checkpoints are saved or loaded, not in a training step";

F field(std::string name, Check c, KeyFate fate, std::string reason, std::string alias = "") {
  F f;
  f.name = std::move(name);
  f.alias = std::move(alias);
  f.check = c;
  f.fate = fate;
  f.reason = std::move(reason);
  return f;
}

F section(std::string name, Check c, const std::vector<F>* fields, KeyFate fate, std::string reason) {
  F f = field(std::move(name), c, fate, std::move(reason));
  f.fields = fields;
  return f;
}

F same(F f, const char* when) {
  f.same_when = when;
  return f;
}

F deprecated(std::string name, Check c, std::string replaced_by) {
  F f = field(std::move(name), c, KeyFate::Mapped, "deprecated name");
  f.deprecated_for = std::move(replaced_by);
  return f;
}

// deepspeed/runtime/zero/offload_config.py
const std::vector<F>& offload_param_fields() {
  static const std::vector<F> f = {
      field("device", Check::OffloadDevice, KeyFate::Mapped, ""),
      field("nvme_path", Check::OptStr, kNone, "zinf puts its swap files under --nvme-dir"),
      field("buffer_count", Check::NonNegInt, kIgn,
            "DeepSpeed's pool of NVMe parameter buffers; zinf's host staging buffers follow the plan"),
      field("buffer_size", Check::NonNegInt, kIgn,
            "DeepSpeed's pool of NVMe parameter buffers; zinf's host staging buffers follow the plan"),
      field("max_in_cpu", Check::NonNegInt, kIgn,
            "parameters DeepSpeed keeps in host memory when they live on NVMe; zinf stages what the plan fetches"),
      field("pin_memory", Check::Bool, KeyFate::Mapped, ""),
  };
  return f;
}

const std::vector<F>& offload_optimizer_fields() {
  static const std::vector<F> f = {
      field("device", Check::OffloadDevice, KeyFate::Mapped, ""),
      field("nvme_path", Check::OptStr, kNone, "zinf puts its swap files under --nvme-dir"),
      field("buffer_count", Check::NonNegInt, kIgn,
            "DeepSpeed's pool of NVMe optimizer buffers; zinf's host buffers follow the plan"),
      field("pin_memory", Check::Bool, KeyFate::Mapped, ""),
      same(field("pipeline_read", Check::Bool, kIgn,
            "DeepSpeed's overlap of a sub-group's NVMe read with the previous update; zinf always pipelines "
            "sub-groups (optimizer.nvme_phases, optimizer.read_ahead)"), "true"),
      same(field("pipeline_write", Check::Bool, kIgn,
            "DeepSpeed's overlap of a sub-group's NVMe write with the next update; zinf always pipelines sub-groups"), "true"),
      field("fast_init", Check::Bool, kNone, "initialization only"),
      field("ratio", Check::Fraction, KeyFate::Mapped, ""),
  };
  return f;
}

// deepspeed/runtime/zero/config.py (DeepSpeedZeroConfig)
const std::vector<F>& zero_fields() {
  static const std::vector<F> f = [] {
    std::vector<F> v = {
        field("stage", Check::ZeroStage, KeyFate::Mapped, ""),
        same(field("contiguous_gradients", Check::Bool, kIgn,
              "DeepSpeed's copy of gradients into one buffer against fragmentation; zinf's buffers are planned, "
              "no fragmentation is modeled"), "true"),
        same(field("reduce_scatter", Check::Bool, kIgn,
              "false makes DeepSpeed all-reduce gradients; zinf reduce-scatters at stages 2-3"), "true"),
        field("reduce_bucket_size", Check::NonNegInt, kIgn,
              "DeepSpeed reduces gradients in buckets of this many elements; zinf reduces each operator's gradients "
              "as one collective"),
        same(field("use_multi_rank_bucket_allreduce", Check::Bool, kIgn, "DeepSpeed's bucketing of reductions"), "true"),
        same(field("allgather_partitions", Check::Bool, kIgn,
              "false makes DeepSpeed broadcast updated partitions (stages 1-2); zinf all-gathers"), "true"),
        field("allgather_bucket_size", Check::NonNegInt, kIgn,
              "DeepSpeed gathers updated partitions in buckets of this many elements (stages 1-2); zinf gathers per "
              "operator"),
        field("overlap_comm", Check::Bool, KeyFate::Mapped, ""),
        field("load_from_fp32_weights", Check::Bool, kNone, kSaving),
        field("elastic_checkpoint", Check::Bool, kNone, kSaving),
        section("offload_param", Check::Model, &offload_param_fields(), KeyFate::Mapped, ""),
        section("offload_optimizer", Check::Model, &offload_optimizer_fields(), KeyFate::Mapped, ""),
        field("sub_group_size", Check::NonNegInt, KeyFate::Mapped, ""),
        deprecated("cpu_offload_param", Check::Bool, "offload_param"),
        deprecated("cpu_offload_use_pin_memory", Check::Bool, ""),
        deprecated("cpu_offload", Check::Bool, "offload_optimizer"),
        field("prefetch_bucket_size", Check::NonNegInt, KeyFate::Mapped, "", "stage3_prefetch_bucket_size"),
        field("param_persistence_threshold", Check::NonNegInt, kIgn,
              "DeepSpeed keeps parameters smaller than this whole on every GPU (stage 3); zinf partitions every "
              "parameter",
              "stage3_param_persistence_threshold"),
        field("model_persistence_threshold", Check::NonNegInt, kIgn,
              "the bound on DeepSpeed's persistent parameters (stage 3); zinf partitions every parameter",
              "stage3_model_persistence_threshold"),
        field("max_live_parameters", Check::NonNegInt, KeyFate::Mapped, "", "stage3_max_live_parameters"),
        field("max_reuse_distance", Check::NonNegInt, KeyFate::Mapped, "", "stage3_max_reuse_distance"),
        field("gather_16bit_weights_on_model_save", Check::Bool, kNone, kSaving,
              "stage3_gather_16bit_weights_on_model_save"),
        field("module_granularity_threshold", Check::Int, kIgn,
              "DeepSpeed fetches small modules whole (stage 3); zinf fetches per operator",
              "stage3_module_granularity_threshold"),
        same(field("use_all_reduce_for_fetch_params", Check::Bool, kIgn,
              "DeepSpeed then fetches parameters with all-reduce; zinf all-gathers",
              "stage3_use_all_reduce_for_fetch_params"), "false"),
        deprecated("stage3_gather_fp16_weights_on_model_save", Check::Bool, "gather_16bit_weights_on_model_save"),
        field("ignore_unused_parameters", Check::Bool, kNone, "a check on the model code"),
        field("legacy_stage1", Check::Bool, KeyFate::Mapped, ""),
        same(field("round_robin_gradients", Check::Bool, kIgn,
              "DeepSpeed's order of gradient copies to the host (stages 1-2 with offload); zinf's order follows its "
              "lanes"), "false"),
        field("zero_hpz_partition_size", Check::NonNegInt, kIgn,
              "ZeRO++ secondary partitions of parameters within a node; zinf partitions over all data-parallel ranks"),
        same(field("zero_quantized_weights", Check::Bool, kIgn, "ZeRO++ quantized parameter gathers"), "false"),
        same(field("zero_quantized_nontrainable_weights", Check::Bool, kIgn, "quantized frozen parameters"), "false"),
        same(field("zero_quantized_gradients", Check::Bool, kIgn, "ZeRO++ quantized gradient reductions"), "false"),
        field("zeropp_loco_param", Check::Any, kIgn, "LoCo-ZeRO++ error feedback"),
        field("mics_shard_size", Check::Int, KeyFate::Mapped, ""),
        same(field("mics_hierarchical_params_gather", Check::Bool, kIgn, "MiCS hierarchical gathers"), "false"),
        field("memory_efficient_linear", Check::Bool, kNone,
              "DeepSpeed's linear that frees its input early (stage 3); zinf counts activations per operator"),
        field("pipeline_loading_checkpoint", Check::Bool, kNone, kSaving),
        field("override_module_apply", Check::Bool, kNone, "a hook on the model code"),
        field("log_trace_cache_warnings", Check::Bool, kNone, kLogging),
    };
    return v;
  }();
  return f;
}

// deepspeed/runtime/swap_tensor/aio_config.py (read with get_scalar_param)
const std::vector<F>& aio_fields() {
  static const std::vector<F> f = {
      field("block_size", Check::Any, KeyFate::Mapped, ""),
      field("queue_depth", Check::Any, KeyFate::Mapped, ""),
      field("intra_op_parallelism", Check::Any, kIgn,
            "DeepSpeed splits each request over this many threads; zinf's NVMe lanes keep requests in flight on "
            "io_uring (aio.rings, aio.tasks_in_flight in zinf's YAML)"),
      same(field("single_submit", Check::Any, kIgn, "DeepSpeed's submission mode; zinf submits in batches"), "false"),
      same(field("overlap_events", Check::Any, kIgn, "DeepSpeed's completion mode; zinf overlaps submission and completion"), "true"),
      same(field("use_gds", Check::Any, kIgn, "GPUDirect Storage: zinf takes it from the hardware profile (node.gds)"), "false"),
  };
  return f;
}

// deepspeed/runtime/activation_checkpointing/config.py
const std::vector<F>& activation_fields() {
  static const std::vector<F> f = {
      field("partition_activations", Check::Any, KeyFate::Mapped, ""),
      field("number_checkpoints", Check::Any, kNone,
            "DeepSpeed checkpoints every block the model code wraps, whatever this says (it sizes a buffer)"),
      field("contiguous_memory_optimization", Check::Any, kNone,
            "DeepSpeed's contiguous checkpoint buffer against fragmentation; zinf models no fragmentation, as if it were on"),
      field("cpu_checkpointing", Check::Any, KeyFate::Mapped, ""),
      field("profile", Check::Any, kNone, kLogging),
      same(field("synchronize_checkpoint_boundary", Check::Any, kIgn,
            "DeepSpeed synchronizes the device at each checkpoint; zinf's lanes do not"), "false"),
  };
  return f;
}

const std::vector<F>& fp16_fields() {
  static const std::vector<F> f = {
      field("enabled", Check::Any, KeyFate::Mapped, ""),
      field("auto_cast", Check::Any, kNone, "casts the model's inputs; the step's work is the same"),
      field("loss_scale", Check::Any, kNone, kNumerics),
      field("initial_scale_power", Check::Any, kNone, kNumerics),
      field("loss_scale_window", Check::Any, kNone, kNumerics),
      field("hysteresis", Check::Any, kNone, kNumerics),
      field("consecutive_hysteresis", Check::Any, kNone, kNumerics),
      field("min_loss_scale", Check::Any, kNone, kNumerics),
      field("fp16_master_weights_and_grads", Check::Any, KeyFate::Mapped, ""),
  };
  return f;
}

const std::vector<F>& bf16_fields() {
  static const std::vector<F> f = {
      field("enabled", Check::Any, KeyFate::Mapped, ""),
      field("immediate_grad_update", Check::Any, kNone, "the order of gradient accumulation in fp32"),
  };
  return f;
}

const std::vector<F>& optimizer_fields() {
  static const std::vector<F> f = {
      field("type", Check::Any, KeyFate::Mapped, ""),
      field("params", Check::Any, KeyFate::Mapped, ""),
      field("legacy_fusion", Check::Any, kNone, "a kernel choice of old DeepSpeed"),
  };
  return f;
}

const std::vector<F>& tp_fields() {
  static const std::vector<F> inner = {
      field("tp_size", Check::Int, kNone, "inference tensor parallelism"),
      field("tp_grain_size", Check::Int, kNone, "inference tensor parallelism"),
      field("mpu", Check::Any, kNone, "set by code"),
      field("tp_group", Check::Any, kNone, "set by code"),
  };
  static const std::vector<F> f = {
      field("dtype", Check::Any, kNone, "the model's dtype for AutoTP (set by code)"),
      field("autotp_size", Check::Int, KeyFate::Mapped, ""),
      [&] {
        F t = section("tensor_parallel", Check::Model, &inner, kNone, "inference tensor parallelism");
        t.alias = "tp";
        return t;
      }(),
      field("injection_policy_tuple", Check::Any, kNone, "set by code"),
      field("keep_module_on_host", Check::Bool, kNone, "loading only"),
      field("replace_with_kernel_inject", Check::Bool, kNone, "inference kernels", "kernel_inject"),
  };
  return f;
}

std::vector<F> logging_model(std::vector<std::string> names) {
  std::vector<F> v;
  for (auto& n : names) v.push_back(field(std::move(n), Check::Any, kNone, kLogging));
  return v;
}

const std::vector<F>& tensorboard_fields() {
  static const std::vector<F> f = logging_model({"enabled", "output_path", "job_name"});
  return f;
}
const std::vector<F>& wandb_fields() {
  static const std::vector<F> f = logging_model({"enabled", "group", "team", "project"});
  return f;
}
const std::vector<F>& comet_fields() {
  static const std::vector<F> f = logging_model({"enabled", "samples_log_interval", "project", "workspace", "api_key",
                                                 "experiment_name", "experiment_key", "online", "mode"});
  return f;
}
const std::vector<F>& comms_logger_fields() {
  static const std::vector<F> f = logging_model({"enabled", "prof_all", "prof_ops", "verbose", "debug"});
  return f;
}
const std::vector<F>& hybrid_engine_fields() {
  static const std::vector<F> f = [] {
    std::vector<F> v = {same(field("enabled", Check::Bool, kIgn,
                              "DeepSpeed-Chat's hybrid engine switches the model to inference kernels for generation"), "false")};
    for (const char* n : {"max_out_tokens", "inference_tp_size", "release_inference_cache", "pin_parameters",
                          "tp_gather_partition_size"})
      v.push_back(field(n, Check::Any, kNone, "the hybrid engine's generation"));
    return v;
  }();
  return f;
}

const std::vector<F>& timers_fields() {
  static const std::vector<F> throughput = logging_model({"enabled", "synchronized"});
  static const std::vector<F> f = {section("throughput", Check::Model, &throughput, kNone, kLogging)};
  return f;
}

}  // namespace

const FieldSpec* find_field(const std::vector<FieldSpec>& fields, const std::string& name) {
  for (const auto& f : fields)
    if (f.name == name || (!f.alias.empty() && f.alias == name)) return &f;
  return nullptr;
}

// DeepSpeed's AutoEP section (deepspeed/module_inject/auto_ep_config.py, parse_autoep_config: read
// with get(), its other keys never read): `enabled` and `autoep_size` are the expert-parallel degree;
// the rest say how AutoEP finds and runs the model's experts.
const std::vector<F>& expert_parallel_fields() {
  const char* const finding = "how AutoEP finds the model's experts and router (the plan reads them from the model)";
  static const std::vector<F> f = {
      field("enabled", Check::Bool, KeyFate::Mapped, ""),
      field("autoep_size", Check::Int, KeyFate::Mapped, ""),
      field("expert_tensor_parallel_size", Check::Int, kIgn,
            "expert tensor slicing splits each expert over GPUs; zinf plans whole experts"),
      field("preset_model", Check::Any, kNone, finding),
      field("moe_layer_pattern", Check::Any, kNone, finding),
      field("expert_pattern", Check::Any, kNone, finding),
      field("router_pattern", Check::Any, kNone, finding),
      field("num_experts_attr", Check::Any, kNone, finding),
      field("top_k_attr", Check::Any, kNone, finding),
      field("top_k", Check::Any, kNone, finding),
      field("has_shared_experts", Check::Any, kNone, finding),
      field("shared_experts_pattern", Check::Any, kNone, finding),
      field("shared_experts_gate_pattern", Check::Any, kNone, finding),
      field("expert_w1", Check::Any, kNone, finding),
      field("expert_w2", Check::Any, kNone, finding),
      field("expert_w3", Check::Any, kNone, finding),
      field("expert_activation", Check::Any, kNone, finding),
      field("use_grouped_mm", Check::Any, kNone, "a kernel choice for the experts' GEMMs"),
      field("disable_triton_grouped_mm", Check::Any, kNone, "a kernel choice for the experts' GEMMs"),
      field("gate_up_impl", Check::Any, kNone, "a kernel choice for the experts' GEMMs"),
      field("comm_backend", Check::Any, kIgn, "DeepEP's kernels move the tokens; zinf simulates NCCL's all-to-all"),
      field("comm_num_sm", Check::Any, kNone, "DeepEP's kernels only"),
      field("comm_qp_margin", Check::Any, kNone, "DeepEP's kernels only"),
      field("comm_max_tokens_per_rank", Check::Any, kNone, "DeepEP's kernels only"),
      field("score_func", Check::Any, kNone, kNumerics),
      field("score_apply", Check::Any, kNone, kNumerics),
      field("route_norm", Check::Any, kNone, kNumerics),
      field("route_scale", Check::Any, kNone, kNumerics),
      field("routed_scaling_factor", Check::Any, kNone, kNumerics),
      field("combine_impl", Check::Any, kNone, kNumerics),
      field("row_weighting_impl", Check::Any, kNone, kNumerics),
      field("load_balance_coeff", Check::Any, kNone, kNumerics),
      field("num_expert_groups", Check::Any, kIgn, "group-limited routing; zinf routes tokens evenly over all experts"),
      field("num_limited_groups", Check::Any, kIgn, "group-limited routing; zinf routes tokens evenly over all experts"),
      field("validate_folding_routing", Check::Any, kNone, "a check at start-up"),
      field("async_split_plan", Check::Any, kNone, "when AutoEP's layout is planned"),
  };
  return f;
}

const std::vector<FieldSpec>& top_level_fields() {
  static const std::vector<F> f = {
      field("train_batch_size", Check::Any, KeyFate::Mapped, ""),
      field("train_micro_batch_size_per_gpu", Check::Any, KeyFate::Mapped, ""),
      field("gradient_accumulation_steps", Check::Any, KeyFate::Mapped, ""),
      field("gradient_clipping", Check::Any, KeyFate::Mapped, ""),
      section("zero_optimization", Check::Model, &zero_fields(), KeyFate::Mapped, ""),
      section("fp16", Check::Dict, &fp16_fields(), KeyFate::Mapped, ""),
      section("bf16", Check::Dict, &bf16_fields(), KeyFate::Mapped, ""),
      section("bfloat16", Check::Dict, &bf16_fields(), KeyFate::Mapped, ""),
      field("amp", Check::Any, KeyFate::Mapped, ""),
      section("optimizer", Check::Dict, &optimizer_fields(), KeyFate::Mapped, ""),
      field("scheduler", Check::Any, KeyFate::Mapped, ""),
      section("aio", Check::Dict, &aio_fields(), KeyFate::Mapped, ""),
      section("activation_checkpointing", Check::Dict, &activation_fields(), KeyFate::Mapped, ""),
      section("tensor_parallel", Check::Model, &tp_fields(), KeyFate::Mapped, ""),
      section("expert_parallel", Check::Dict, &expert_parallel_fields(), KeyFate::Mapped, ""),
      field("zero_allow_untested_optimizer", Check::Any, kNone,
            "allows an optimizer DeepSpeed has not tested with ZeRO; zinf plans the optimizer it names"),
      field("zero_force_ds_cpu_optimizer", Check::Any, kNone,
            "a check on optimizers the model code brings to ZeRO-Offload"),
      field("steps_per_print", Check::Any, kNone, kLogging),
      field("wall_clock_breakdown", Check::Any, kNone, kLogging),
      field("memory_breakdown", Check::Any, kNone, kLogging),
      field("dump_state", Check::Any, kNone, kLogging),
      field("flops_profiler", Check::Any, kNone, kLogging),
      section("tensorboard", Check::Model, &tensorboard_fields(), kNone, kLogging),
      section("wandb", Check::Model, &wandb_fields(), kNone, kLogging),
      section("csv_monitor", Check::Model, &tensorboard_fields(), kNone, kLogging),
      section("comet", Check::Model, &comet_fields(), kNone, kLogging),
      section("comms_logger", Check::Model, &comms_logger_fields(), kNone, kLogging),
      section("timers", Check::Dict, &timers_fields(), kNone, kLogging),
      field("prescale_gradients", Check::Any, kNone, kNumerics),
      field("gradient_predivide_factor", Check::Any, kNone, kNumerics),
      field("communication_data_type", Check::Any, KeyFate::Mapped, ""),
      field("seq_parallel_comm_data_type", Check::Any, KeyFate::Mapped, ""),
      same(field("disable_allgather", Check::Any, kIgn, "DeepSpeed then broadcasts updated parameters; zinf all-gathers"), "false"),
      same(field("sparse_gradients", Check::Any, kIgn,
            "DeepSpeed reduces sparse embedding gradients as sparse tensors; zinf reduces them dense"), "false"),
      same(field("graph_harvesting", Check::Any, kIgn, "CUDA graphs in DeepSpeed's bf16 optimizer; zinf launches each kernel"), "false"),
      field("checkpoint", Check::Any, KeyFate::Mapped, ""),
      field("data_types", Check::Any, KeyFate::Mapped, ""),
      field("dataloader_drop_last", Check::Any, kNone, "the data loader's last partial batch"),
      field("nebula", Check::Any, kNone, kSaving),
      field("autotuning", Check::Any, KeyFate::Mapped, ""),
      field("elasticity", Check::Any, KeyFate::Mapped, ""),
      section("hybrid_engine", Check::Model, &hybrid_engine_fields(), kNone, ""),
      field("sparse_attention", Check::Any, kIgn,
            "DeepSpeed's block-sparse attention kernels; zinf plans dense attention"),
      field("pipeline", Check::Any, kNone,
            "read only for a PipelineModule (pipeline parallelism, which the model code sets up)"),
      field("progressive_layer_drop", Check::Any, KeyFate::Mapped, ""),
      field("curriculum_learning", Check::Any, KeyFate::Mapped, ""),
      field("data_efficiency", Check::Any, KeyFate::Mapped, ""),
      field("compression_training", Check::Any, kIgn,
            "DeepSpeed's compression (quantization, pruning, layer reduction) changes the model's work"),
      field("quantize_training", Check::Any, KeyFate::Mapped, ""),
      field("weight_quantization", Check::Any, kIgn, "quantized weights change the model's memory and work"),
      field("use_data_before_expert_parallelism", Check::Any, kNone, "expert-parallel group order (MoE)"),
      field("vocabulary_size", Check::Any, kNone, "a tensor-core alignment warning only"),
      field("sequence_parallel_size", Check::Any, kIgn,
            "DeepSpeed's sequence parallelism (with data_parallel_size) splits each sequence over GPUs"),
      field("data_parallel_size", Check::Any, kIgn,
            "with sequence_parallel_size, the data-parallel degree of DeepSpeed's device mesh"),
  };
  return f;
}

}  // namespace zinf::core::deepspeed
