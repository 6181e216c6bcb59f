// `zinf plan`: does this model fit on this cluster, where do its bytes go, and how large a model
// of the same shape fits under each of the paper's strategies.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/file_checks.hpp"
#include "cli/inputs.hpp"
#include "core/errors.hpp"
#include "core/fit.hpp"
#include "formats/lr_schedule_reader.hpp"
#include "core/memory_model.hpp"
#include "core/plan.hpp"
#include "core/timeline.hpp"
#include "core/units.hpp"
#include "engine/io/output_file.hpp"
#include "models/gpt.hpp"
#include "tune/auto_config.hpp"

namespace zinf::cli {
namespace {

using namespace zinf::core;

// The config file's learning-rate schedule, as training reads it (it changes no cost: reported only).
LrSchedule lr_schedule_of(const std::string& config_path) {
  std::vector<std::string> warnings;
  LrSchedule s = load_lr_schedule(config_path, warnings);
  for (const auto& w : warnings) fmt::print(stderr, "zinf: warning: {}\n", w);
  return s;
}

nlohmann::json tier_json(const TierBytes& t) {
  return {{"device_per_gpu", t.device}, {"host_per_node", t.host}, {"nvme_per_node", t.nvme}};
}

struct ProgramOutputs {
  std::string program;  // --program: the Program as JSON
  std::string trace;    // --trace: a Chrome trace of the idealized schedule
};

// Writes what was asked for of the planned Program. Returns a line for the report.
std::string write_program_outputs(const Inputs& in, const PlanResult& r, const ProgramOutputs& outs) {
  std::string line = fmt::format("program: {} tasks per rank, {} units, {} optimizer sub-groups, tiling {}",
                                 r.program.tasks().size(), r.program.units().size(), r.program.sub_groups().size(),
                                 r.plan.tiling_factor);
  if (!outs.program.empty()) {
    engine::OutputFile out(engine::default_io_env(), outs.program, "zinf plan --program");
    r.program.write_json(out.stream());
    out.commit();
    line += fmt::format("; written to {}", outs.program);
  }
  if (!outs.trace.empty()) {
    Timeline tl = schedule_ideal(r.program, in.hw, {0});
    engine::OutputFile out(engine::default_io_env(), outs.trace, "zinf plan --trace");
    tl.write_chrome_trace(out.stream());
    out.commit();
    line += fmt::format("; idealized step {} (rank 0) traced to {}", format_seconds(tl.makespan()), outs.trace);
  }
  return line;
}

// The one planning of the run: its Program's accounting and the verdict (core/fit.hpp), what
// `auto` the planner itself resolved, and the activation pass's choices.
struct Planned {
  Fit fit;
  std::optional<PlanResult> result;  // absent when the planner refused
  const Plan* plan() const { return result ? &result->plan : nullptr; }
};

Planned plan_once(const Inputs& in, int nodes, const std::shared_ptr<const models::GptPlan>& made_by_auto) {
  Planned out;
  try {
    // `auto` planned this run while deciding it: that plan is the run's.
    out.result = made_by_auto ? made_by_auto->planned : models::plan_gpt(in.model, in.hw, in.config, nodes * in.hw.node.gpus).planned;
    out.fit = judge_fit(out.result->plan.accounting, in.config);
  } catch (const PlanError& e) {
    out.fit = fit_of(e);
  }
  return out;
}

// `auto` that the closed form left to the planner (none of its first choices fit): the report uses what
// the planner chose, so that it describes the Program `--program` writes and `sim` and `train` run.
// Returns a line saying what was chosen, or that the planner refused (then the memory model's own
// smallest fitting tiling factor is reported, and everything `auto` counted on the device).
std::string planner_auto_line(const Inputs& in, const Planned& p, MemoryModelInput& mm) {
  const auto& c = in.config;
  const bool any_auto = c.tiling_factor == 0 || c.params.automatic || c.gradients.automatic ||
                        c.optimizer.automatic || c.checkpoints.automatic;
  if (!any_auto) return "";
  if (const Plan* planned = p.plan()) {
    const Plan& pl = *planned;
    mm.config.tiling_factor = pl.tiling_factor;
    mm.config.params = {false, pl.params};
    mm.config.gradients = {false, pl.gradients};
    mm.config.optimizer = {false, pl.optimizer};
    mm.config.checkpoints = {false, pl.checkpoints};
    std::string line = "auto, as the planner chose:";
    if (c.tiling_factor == 0) line += fmt::format(" tiling {} ({})", pl.tiling_factor, pl.tiling_reason);
    for (const auto& d : pl.placements)
      if (d.automatic) line += fmt::format("; {} on {} ({})", d.state, to_string(d.tier), d.reason);
    return line;
  }
  if (c.tiling_factor == 0) {
    int64_t t = auto_tiling_factor(mm);
    mm.config.tiling_factor = t > 0 ? t : 1;
  }
  return "auto: the planner refused this configuration; the closed form counts the memory model's smallest fitting "
         "tiling factor and auto tiers on the device";
}

// With an activation_offload policy, what the planner's activation pass chose per segment.
std::vector<std::string> activation_lines(const Inputs& in, const Planned& p) {
  if (in.config.activation_policy == ActivationPolicy::None || !p.plan()) return {};
  const Plan& pl = *p.plan();
  std::vector<std::string> out;
  int counts[3] = {0, 0, 0};
  double bytes[3] = {0, 0, 0};
  bool per_tensor = false;
  for (const auto& d : pl.activations) {
    ++counts[static_cast<int>(d.choice.action)];
    bytes[static_cast<int>(d.choice.action)] += d.lifetime.bytes;
    per_tensor = per_tensor || d.lifetime.tensor >= 0;
  }
  out.push_back(fmt::format("activation offload ({}): {} {} kept, {} offloaded, {} recomputed ({} kept, {} offloaded, {} "
                            "recomputed per micro-batch); device peak {} of {}; {} offloaded and {} written to NVMe per step ({})",
                            to_string(in.config.activation_policy), counts[0], per_tensor ? "tensor(s)" : "segment(s)",
                            counts[1], counts[2], format_bytes(bytes[0]), format_bytes(bytes[1]), format_bytes(bytes[2]),
                            format_bytes(at(pl.peak_bytes, Tier::Device)), format_bytes(at(pl.budget, Tier::Device)),
                            format_bytes(pl.activation_bytes_offloaded), format_bytes(pl.nvme_bytes_written),
                            pl.activation_note.empty() ? "everything it kept fit at once" : pl.activation_note));
  for (const auto& d : pl.activations)
    out.push_back(d.lifetime.tensor >= 0
                      ? fmt::format("  block {} {} ({}, idle {:.3g} s): {}", d.lifetime.first_block, d.lifetime.name,
                                    format_bytes(d.lifetime.bytes), d.lifetime.idle_seconds, d.choice.reason)
                      : fmt::format("  blocks {}-{} ({}, idle {:.3g} s): {}", d.lifetime.first_block, d.lifetime.last_block,
                                    format_bytes(d.lifetime.bytes), d.lifetime.idle_seconds, d.choice.reason));
  return out;
}

// What each operator's tiles cost in the planned Program (core::Plan::operator_tiles): block 0's
// operators stand for every block's.
struct TileTable {
  std::vector<OperatorTiles> rows;
  double device_peak = 0;
  int64_t vocabulary_tiles = 1, tiling_factor = 1;
  std::string vocabulary_reason, refused;
};

TileTable tile_table(const Inputs& in, const Planned& p) {
  TileTable t;
  const Plan* plan = p.plan();
  if (!plan) {
    t.refused = p.fit.message();
    return t;
  }
  const auto graph = models::build_gpt(in.model, in.config);
  for (const auto& o : plan->operator_tiles)
    if (graph.ops[static_cast<size_t>(o.op)].block <= 0) t.rows.push_back(o);
  t.device_peak = at(plan->peak_bytes, Tier::Device);
  t.vocabulary_tiles = plan->vocabulary_tiles;
  t.vocabulary_reason = plan->vocabulary_tiles_reason;
  t.tiling_factor = plan->tiling_factor;
  return t;
}

void print_tile_table(const TileTable& t) {
  if (!t.refused.empty()) return fmt::print("\noperators' tiles: the planner refused this configuration ({})\n", t.refused);
  fmt::print("\noperators' tiles (one rank; block 0 stands for every block), the Program's device peak {}:\n",
             format_bytes(t.device_peak));
  fmt::print("  {:<22}{:>7}{:>16}{:>16}{:>13}{:>13}\n", "operator", "tiles", "gathered/tile", "gradient/tile", "fwd/tile",
             "bwd/tile");
  for (const auto& o : t.rows)
    fmt::print("  {:<22}{:>7}{:>16}{:>16}{:>13}{:>13}\n", o.name, o.tiles, format_bytes(o.gathered_bytes),
               format_bytes(o.gradient_bytes), format_count(o.fwd_flops) + "F", format_count(o.bwd_flops) + "F");
  fmt::print("  tiling factor {}; vocabulary tiles {} ({})\n", t.tiling_factor, t.vocabulary_tiles, t.vocabulary_reason);
}

nlohmann::json tile_json(const TileTable& t) {
  if (!t.refused.empty()) return {{"refused", t.refused}};
  nlohmann::json j = {{"device_peak_per_gpu", t.device_peak}, {"tiling_factor", t.tiling_factor},
                      {"vocabulary_tiles", t.vocabulary_tiles}, {"vocabulary_tiles_reason", t.vocabulary_reason}};
  for (const auto& o : t.rows)
    j["operators"].push_back({{"operator", o.name}, {"tiles", o.tiles}, {"gathered_bytes_per_tile", o.gathered_bytes},
                              {"gradient_bytes_per_tile", o.gradient_bytes}, {"fwd_flops_per_tile", o.fwd_flops},
                              {"bwd_flops_per_tile", o.bwd_flops}});
  return j;
}

struct StrategyRow {
  Strategy s;
  LargestModel largest;
  MemoryReport this_model;
};

// What `zinf plan` reports besides the inputs, computed once for the JSON and the text.
struct PlanFigures {
  RunConfig config;  // with `auto` resolved as the planner resolved it
  MemoryReport rep;
  std::vector<EfficiencyRow> eff;
  std::vector<StrategyRow> strategies;
  // The largest hidden size at this depth, untiled and with the probe's tiling factor (the paper's
  // §5.1.3 figure uses 16).
  int64_t hidden_untiled = 0, hidden_tiled = 0, probe_tiling = 1;
  std::string auto_line, program_line;
  std::vector<std::string> act_lines;
  Fit fit;  // the one verdict (core/fit.hpp), from the Program
  double auto_seconds = 0, plan_seconds = 0;  // wall time resolving `auto`, and planning in all
  TileTable tiles;
  // A DeepSpeed config's ZeRO-3 with an offloaded optimizer as DeepSpeed itself allocates it
  // (optimizer.host_path: deepspeed-0.9), beside zinf's engine running the same config.
  std::optional<MemoryReport> deepspeed_own;
};

// What DeepSpeed's stage3.py (v0.9.0-v0.10.0) holds for a DeepSpeed config that zinf plans on its
// own engine's host path: the closed form with DeepSpeed's path, only where the paths differ.
std::optional<MemoryReport> deepspeed_own_memory(const Inputs& in, const MemoryModelInput& mm) {
  if (!in.deepspeed || mm.config.zero_stage != 3 || mm.config.optimizer_host_path != HostPath::Fused ||
      mm.config.optimizer.tier == Tier::Device || mm.config.gradients.tier == Tier::Device)
    return std::nullopt;
  MemoryModelInput ds = mm;
  ds.config.optimizer_host_path = HostPath::DeepSpeed09;
  return memory_requirement(ds);
}

TierBytes model_states(const MemoryReport& r) {
  for (const auto& row : r.rows)
    if (row.category == MemCategory::States) return row.bytes;
  return {};
}

// The Program's accounting as JSON: per tier its peak, budget and items, in the units a user reads
// (device per GPU, host and NVMe per node).
nlohmann::json accounting_json(const Accounting& a) {
  nlohmann::json j = nlohmann::json::object();
  for (Tier t : {Tier::Device, Tier::Host, Tier::Nvme}) {
    const TierAccount& ta = a.at(t);
    nlohmann::json tj = {{"per", t == Tier::Device ? "gpu" : "node"},
                         {"peak", a.shown(t, ta.peak)},
                         {"budget", a.shown(t, ta.budget)},
                         {"rank", ta.rank},
                         {"items", nlohmann::json::array()}};
    for (const auto& i : ta.items)
      tj["items"].push_back({{"what", i.what}, {"category", to_string(i.category)}, {"bytes", a.shown(t, i.bytes)}});
    j[to_string(t)] = tj;
  }
  return j;
}

nlohmann::json fit_json(const Fit& f) {
  nlohmann::json j = {{"verdict", to_string(f.verdict)}, {"fits", f.fits()}, {"message", f.message()}};
  if (f.verdict == Verdict::Short) {
    j["tier"] = to_string(f.tier);
    j["shortfall_per_rank"] = f.shortfall;
    j["shortfall"] = f.accounting.shown(f.tier, f.shortfall);
    j["largest_item"] = {{"what", f.largest.what}, {"bytes_per_rank", f.largest.bytes}};
    j["knob"] = f.knob;
  }
  if (f.verdict == Verdict::Refused) j["reason"] = f.reason;
  return j;
}

void print_plan_json(const Inputs& in, int nodes, const PlanFigures& f) {
  const MemoryReport& rep = f.rep;
  nlohmann::json j;
  j["model"] = {{"name", in.model.name}, {"params", rep.params}, {"layers", in.model.layers},
                {"hidden", in.model.hidden}, {"heads", in.model.heads}, {"seq", in.model.seq},
                {"micro_batch", in.config.micro_batch.value_or(in.model.micro_batch)},
                {"architecture", to_string(in.model.family)}, {"total_params", exact_params(in.model).total},
                {"active_params", exact_params(in.model).active}};
  j["hwprofile"] = in.hw.name;
  j["nodes"] = nodes;
  j["gpus_per_node"] = in.hw.node.gpus;
  j["ranks"] = rep.ranks;
  j["tiling_factor"] = rep.tiling_factor;
  const RunConfig& c = f.config;
  j["config"] = {{"name", in.config_name},
                 {"zero_stage", c.zero_stage},
                 {"params", to_string(c.params)},
                 {"gradients", to_string(c.gradients)},
                 {"optimizer", to_string(c.optimizer)},
                 {"checkpoints", to_string(c.checkpoints)},
                 {"checkpoint_interval", c.checkpoint_interval},
                 {"checkpoints_partitioned", c.checkpoints_partitioned},
                 {"checkpoints_per_block", c.checkpoints_per_block},
                 {"tiling_factor", rep.tiling_factor},
                 {"tensor_parallel", c.tensor_parallel},
                 {"data_parallel_ranks", rep.ranks / std::max<int64_t>(1, c.tensor_parallel)},
                 {"expert_parallel", c.expert_parallel},
                 {"capacity_factor", c.capacity_factor},
                 {"gradient_accumulation", c.gradient_accumulation},
                 {"micro_batch", c.micro_batch.value_or(in.model.micro_batch)},
                 {"precision", to_string(c.precision.value_or(native_precision(in.hw.node.gpu)))},
                 {"optimizer_type", c.optimizer_type},
                 {"optimizer_states", c.optimizer_states},
                 {"weight_decay_decoupled", decoupled_weight_decay(c.optimizer_type)},
                 {"max_live_bytes", c.max_live_bytes},
                 {"lr_schedule", core::to_json(lr_schedule_of(in.config_path))}};
  // A DeepSpeed config: what became of each of its keys, as DeepSpeed reads it.
  if (in.deepspeed) {
    nlohmann::json keys = nlohmann::json::array();
    for (const auto& n : in.deepspeed->notes)
      keys.push_back({{"key", n.key}, {"fate", to_string(n.fate)}, {"value", n.value}, {"reason", n.reason}});
    j["config"]["deepspeed"] = {{"version", kDeepSpeedVersion},
                                {"world_size", in.deepspeed->world_size},
                                {"train_batch_size", in.deepspeed->train_batch_size},
                                {"messages", in.deepspeed->messages},
                                {"keys", keys}};
  }
  j["largest_hidden"] = {{"untiled", f.hidden_untiled}, {"tiled", f.hidden_tiled}, {"tiling_factor", f.probe_tiling}};
  // The headline: the Program's memory and the one verdict; the paper's closed form beside it.
  j["fits"] = f.fit.fits();
  j["fit"] = fit_json(f.fit);
  j["memory"] = accounting_json(f.fit.accounting);
  nlohmann::json cf;
  for (const auto& r : rep.rows)
    cf["rows"].push_back({{"what", r.what}, {"category", to_string(r.category)}, {"bytes", tier_json(r.bytes)}});
  cf["total"] = tier_json(rep.total);
  cf["budget"] = tier_json(rep.budget);
  cf["fits"] = rep.fits;
  if (rep.short_tier) cf["short"] = {{"tier", to_string(*rep.short_tier)}, {"bytes", rep.shortfall}};
  j["closed_form"] = cf;
  if (f.fit.verdict != Verdict::Refused)
    for (const auto& v : compare_views(f.fit.accounting, rep))
      j["difference"].push_back({{"category", to_string(v.category)},
                                 {"program", tier_json(v.program)},
                                 {"closed_form", tier_json(v.closed_form)},
                                 {"program_less_closed_form", tier_json(v.difference)}});
  for (const auto& s : f.strategies)
    j["strategies"].push_back({{"strategy", to_string(s.s)},
                               {"largest_layers", s.largest.layers},
                               {"largest_params", s.largest.params},
                               {"fits_this_model", s.this_model.fits}});
  for (const auto& e : f.eff)
    j["efficiency"].push_back({{"what", e.what}, {"tier", to_string(e.tier)}, {"ait", e.ait},
                               {"bandwidth_per_gpu", e.bandwidth}, {"efficiency", e.efficiency}});
  if (f.deepspeed_own)
    j["deepspeed_own"] = {{"release", "0.9.0-0.10.0"},
                          {"host_path", to_string(HostPath::DeepSpeed09)},
                          {"model_states", tier_json(model_states(*f.deepspeed_own))},
                          {"total", tier_json(f.deepspeed_own->total)},
                          {"fits", f.deepspeed_own->fits}};
  if (!f.program_line.empty()) j["program"] = f.program_line;
  if (!f.auto_line.empty()) j["auto"] = f.auto_line;
  j["wall_seconds"] = {{"auto", f.auto_seconds}, {"plan", f.plan_seconds}};
  for (const auto& l : f.act_lines) j["activation_offload"].push_back(l);
  j["operator_tiles"] = tile_json(f.tiles);
  std::cout << j.dump(2) << "\n";
}

void print_row(const std::string& what, const TierBytes& t, bool blank_zero = false) {
  auto cell = [&](double b) { return blank_zero && std::abs(b) < 0.5 ? std::string() : format_bytes(b); };
  fmt::print("{:<40}{:>16}{:>16}{:>16}\n", what, cell(t.device), cell(t.host), cell(t.nvme));
}

// The headline: what the Program holds on each tier at that tier's worst moment of the idealized
// schedule, heading by heading with the items under each, its budget, and the one verdict.
void print_program_memory(const Fit& fit) {
  if (fit.verdict == Verdict::Refused) {
    fmt::print("fits: NO - {}\n\n", fit.message());
    return;
  }
  const Accounting& a = fit.accounting;
  auto shown = [&](auto per_rank) {
    return TierBytes{a.shown(Tier::Device, per_rank(Tier::Device)), a.shown(Tier::Host, per_rank(Tier::Host)),
                     a.shown(Tier::Nvme, per_rank(Tier::Nvme))};
  };
  fmt::print("{:<40}{:>16}{:>16}{:>16}\n", "the Program's memory at its peak", "device / GPU", "host / node", "NVMe / node");
  for (int c = 0; c < kMemCategoryCount; ++c) {
    const auto cat = static_cast<MemCategory>(c);
    const TierBytes total = shown([&](Tier t) { return a.at(t).category_bytes(cat); });
    if (total.device + total.host + total.nvme < 0.5) continue;
    print_row(to_string(cat), total);
    std::vector<std::string> names;
    for (Tier t : {Tier::Device, Tier::Host, Tier::Nvme})
      for (const auto& i : a.at(t).items)
        if (i.category == cat && std::find(names.begin(), names.end(), i.what) == names.end()) names.push_back(i.what);
    if (names.size() < 2 && names.size() == 1 && names[0] == to_string(cat)) continue;
    for (const auto& n : names)
      print_row("  " + n, shown([&](Tier t) {
                  double b = 0;
                  for (const auto& i : a.at(t).items)
                    if (i.what == n) b += i.bytes;
                  return b;
                }),
                true);
  }
  print_row("peak", shown([&](Tier t) { return a.at(t).peak; }));
  print_row("budget (after reserve)", shown([&](Tier t) { return a.at(t).budget; }));
  fmt::print("(each tier at its own worst moment of the idealized schedule, on rank {} / {} / {})\n", a.at(Tier::Device).rank,
             a.at(Tier::Host).rank, a.at(Tier::Nvme).rank);
  if (fit.fits()) fmt::print("fits: yes\n\n");
  else fmt::print("fits: NO - {}\n\n", fit.message());
}

// The paper's closed-form model (§3), labelled as such, and how the Program differs from it.
void print_closed_form(const PlanFigures& f) {
  const MemoryReport& rep = f.rep;
  fmt::print("{:<40}{:>16}{:>16}{:>16}\n", "the paper's closed form (§3), for comparison", "device / GPU", "host / node",
             "NVMe / node");
  for (const auto& r : rep.rows) print_row(r.what, r.bytes);
  print_row("total", rep.total);
  fmt::print("closed form: {}\n", rep.fits ? "fits"
                                            : fmt::format("{} short by {} ({})", to_string(*rep.short_tier),
                                                          format_bytes(rep.shortfall),
                                                          *rep.short_tier == Tier::Device ? "per GPU" : "per node"));
  if (f.fit.verdict == Verdict::Refused) {
    fmt::print("\n");
    return;
  }
  fmt::print("{:<40}{:>16}{:>16}{:>16}\n", "Program less closed form, by heading", "device / GPU", "host / node", "NVMe / node");
  for (const auto& c : compare_views(f.fit.accounting, rep)) {
    const TierBytes& d = c.difference;
    if (std::abs(d.device) < 0.5 && std::abs(d.host) < 0.5 && std::abs(d.nvme) < 0.5) continue;
    auto signed_bytes = [](double b) {
      return std::abs(b) < 0.5 ? std::string() : (b < 0 ? "-" : "+") + format_bytes(std::abs(b));
    };
    fmt::print("{:<40}{:>16}{:>16}{:>16}\n", to_string(c.category), signed_bytes(d.device), signed_bytes(d.host),
               signed_bytes(d.nvme));
  }
  fmt::print("\n");
}

// The architecture and its exact parameter count, total and per token (transformers' count: every
// parameter once, a tied head once), with a mixture's experts.
void print_model_params(const ModelSpec& m) {
  const ExactParams p = exact_params(m);
  std::string line = fmt::format("parameters: {} total, {} active per token ({}; {} architecture", p.total, p.active,
                                 format_count(double(p.total)), to_string(m.family));
  if (m.experts > 0)
    line += fmt::format(", {} experts of which {} per token{}", m.experts, m.experts_per_token,
                        m.shared_expert_intermediate > 0 ? ", shared experts" : "");
  fmt::print("{})\n", line);
}

// DeepSpeed's own allocation of the same config, where it holds more than zinf's engine would.
void print_deepspeed_own(const PlanFigures& f) {
  if (!f.deepspeed_own) return;
  const MemoryReport& ds = *f.deepspeed_own;
  fmt::print("DeepSpeed itself (ZeRO-3 as stage3.py v0.9.0-v0.10.0 allocates it) would hold per node on the host:\n"
             "  model states {}: zinf's {} and the fp32 gradient partition its CPU Adam reads (4 B/param, +{})\n"
             "  in all {} with the closed form's buffers; {}\n"
             "  (to plan or simulate the whole run as DeepSpeed runs it: optimizer.host_path: deepspeed-0.9 in a run config)\n\n",
             format_bytes(model_states(ds).host), format_bytes(model_states(f.rep).host),
             format_bytes(model_states(ds).host - model_states(f.rep).host), format_bytes(ds.total.host),
             ds.fits ? "fits" : fmt::format("short on {} by {}", to_string(*ds.short_tier), format_bytes(ds.shortfall)));
}

// The header and the memory table: what is planned, per tier, and whether it fits.
void print_plan_memory(const Inputs& in, int nodes, const RunConfig& asked, const PlanFigures& f) {
  const auto& m = in.model;
  const MemoryReport& rep = f.rep;
  auto shown = [](const Placement& a, const Placement& r) {
    return a.automatic && !r.automatic ? fmt::format("auto -> {}", to_string(r.tier)) : to_string(r);
  };
  fmt::print("zinf plan: {} on {} x {} node(s) = {} GPUs ({})\n", m.name, in.hw.name, nodes, rep.ranks,
             in.hw.node.gpu.name);
  fmt::print("model: {} params ({} layers, hidden {}, {} heads, seq {}, micro-batch {})\n", format_count(double(rep.params)),
             m.layers, m.hidden, m.heads, m.seq, in.config.micro_batch.value_or(m.micro_batch));
  print_model_params(m);
  fmt::print("config: {} | ZeRO stage {}, params {}, gradients {}, optimizer {}, checkpoints {} every {} block(s), tiling {}\n\n",
             in.config_name, in.config.zero_stage, shown(asked.params, in.config.params),
             shown(asked.gradients, in.config.gradients), shown(asked.optimizer, in.config.optimizer),
             shown(asked.checkpoints, in.config.checkpoints), in.config.checkpoint_interval,
             asked.tiling_factor == 0 ? fmt::format("auto -> {}", rep.tiling_factor) : std::to_string(rep.tiling_factor));
  if (!f.auto_line.empty()) fmt::print("{}\n\n", f.auto_line);
  if (in.config.tensor_parallel > 1)
    fmt::print("tensor_parallel {}: a rank holds its group's share of every layer; ZeRO partitions it over the {} "
               "data-parallel ranks that hold the same share{}\n\n",
               in.config.tensor_parallel, rep.ranks / in.config.tensor_parallel,
               in.config.checkpoints_partitioned ? "; activation checkpoints are partitioned across the group" : "");
  if (in.config.expert_parallel > 1)
    fmt::print("expert_parallel {}: a rank holds {} of the {} routed experts of each mixture layer, partitioned over the "
               "{} ranks that hold the same ones; two all-to-alls per mixture layer carry the tokens (capacity "
               "factor {})\n\n",
               in.config.expert_parallel, m.experts / in.config.expert_parallel, m.experts,
               rep.ranks / in.config.expert_parallel, in.config.capacity_factor);
  print_program_memory(f.fit);
  print_closed_form(f);
  print_deepspeed_own(f);
}

// The largest models per strategy, the largest hidden size, the efficiency estimate and the rest.
void print_plan_outlook(const Inputs& in, int nodes, const PlanFigures& f) {
  const auto& m = in.model;
  fmt::print("largest model of this shape (hidden {}, layers scaled) on {} node(s):\n", m.hidden, nodes);
  fmt::print("  {:<22}{:>10}{:>12}   {}\n", "strategy", "layers", "params", "this model");
  for (const auto& s : f.strategies)
    fmt::print("  {:<22}{:>10}{:>12}   {}\n", to_string(s.s), s.largest.layers, format_count(double(s.largest.params)),
               s.this_model.fits ? "fits" : fmt::format("short on {}", to_string(*s.this_model.short_tier)));

  // Scaling the hidden size keeps a GPT-2's shape (4·hidden MLP, heads of one size); another
  // architecture's intermediate and head sizes do not follow it, so the line would mislead.
  if (m.is_gpt2())
    fmt::print("\nlargest hidden size with this config ({} layers): {} untiled, {} with tiling factor {}\n", m.layers,
               f.hidden_untiled, f.hidden_tiled, f.probe_tiling);
  else
    fmt::print("\nlargest hidden size: probed for the GPT-2 architecture only ({} is {})\n", m.name, to_string(m.family));

  fmt::print("\nbandwidth efficiency (paper §4), peak {} per GPU:\n", format_flops(in.hw.node.gpu.peak_flops));
  for (const auto& e : f.eff)
    fmt::print("  {:<24} from {:<6} ait {:>9.0f}  bw/GPU {:>12}  efficiency {:5.1f}%\n", e.what, to_string(e.tier), e.ait,
               format_bandwidth(e.bandwidth), 100.0 * e.efficiency);
  if (!f.act_lines.empty()) fmt::print("\n");
  for (const auto& l : f.act_lines) fmt::print("{}\n", l);
  print_tile_table(f.tiles);
  if (!f.program_line.empty()) fmt::print("\n{}\n", f.program_line);
}

void run_plan(const InputOptions& opts, bool json, int64_t probe_tiling, const ProgramOutputs& outs) {
  check_output("plan", "--program", outs.program);
  check_output("plan", "--trace", outs.trace);
  Inputs in = load_inputs(opts);
  const RunConfig asked = in.config;
  // `auto` decided as every other command decides it (tune/auto_config.hpp).
  const auto t0 = std::chrono::steady_clock::now();
  const tune::AutoResolution resolved = tune::resolve_auto(in.model, in.hw, opts.nodes, in.config);
  in.config = resolved.config;
  const auto t_auto = std::chrono::steady_clock::now();
  MemoryModelInput mm{in.model, in.hw, opts.nodes, in.config};
  PlanFigures f;
  const Planned planned = plan_once(in, opts.nodes, resolved.planned);
  f.fit = planned.fit;
  f.auto_seconds = std::chrono::duration<double>(t_auto - t0).count();
  f.plan_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  f.auto_line = resolved.searched ? resolved.summary : planner_auto_line(in, planned, mm);
  f.config = mm.config;
  f.rep = memory_requirement(mm);
  f.deepspeed_own = deepspeed_own_memory(in, mm);
  f.eff = efficiency_rows(in.model, in.hw, mm.config);
  f.act_lines = activation_lines(in, planned);
  f.tiles = tile_table(in, planned);
  if (!outs.program.empty() || !outs.trace.empty()) {
    // A refused plan has no Program to write: the refusal, as every command reports it.
    if (!planned.result) throw_fit(planned.fit);
    f.program_line = write_program_outputs(in, *planned.result, outs);
  }
  for (Strategy s : all_strategies()) {
    MemoryModelInput si = mm;
    si.config = strategy_config(s, mm.config);
    f.strategies.push_back({s, largest_model(si), memory_requirement(si)});
  }
  MemoryModelInput untiled = mm, tiled = mm;
  untiled.config.tiling_factor = 1;
  tiled.config.tiling_factor = probe_tiling;
  f.hidden_untiled = largest_hidden(untiled);
  f.hidden_tiled = largest_hidden(tiled);
  f.probe_tiling = probe_tiling;
  if (json) return print_plan_json(in, opts.nodes, f);
  print_plan_memory(in, opts.nodes, asked, f);
  print_plan_outlook(in, opts.nodes, f);
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan", "Memory per tier, fit, largest model per strategy, efficiency estimate");
  auto opts = std::make_shared<InputOptions>();
  auto json = std::make_shared<bool>(false);
  auto probe_tiling = std::make_shared<int64_t>(16);
  auto outs = std::make_shared<ProgramOutputs>();
  add_input_options(*cmd, *opts);
  cmd->add_flag("--json", *json, "Print the report as JSON");
  cmd->add_option("--program", outs->program, "Write the planned Program (one training step, every rank) as JSON");
  cmd->add_option("--trace", outs->trace,
                  "Write a Chrome trace (Perfetto) of the Program under the idealized list scheduler");
  cmd->add_option("--tiling-probe", *probe_tiling,
                  "Tiling factor for the 'largest hidden size' line (the paper's §5.1.3 figure uses 16)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(1024)));
  cmd->callback([opts, json, probe_tiling, outs] { run_plan(*opts, *json, *probe_tiling, *outs); });
}

}  // namespace zinf::cli
