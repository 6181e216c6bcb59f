#include "tune/auto_config.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "core/errors.hpp"
#include "core/hwprofile_writer.hpp"
#include "core/plan.hpp"
#include "core/self_exe.hpp"
#include "models/gpt.hpp"
#include "tune/tuner.hpp"

namespace zinf::sim {

using core::RunConfig;
using core::Tier;

namespace {

bool has_tier_knobs(const RunConfig& c) {
  return c.tiling_factor == 0 || c.params.automatic || c.gradients.automatic || c.optimizer.automatic ||
         (c.checkpoints.automatic && c.checkpoint_interval > 0);
}

// Set while the whole activation choices are simulated: the children the evaluators fork inherit
// it, so a candidate that leaves the path to the pass is simulated as the pass plans it.
int comparing_activation_choices = 0;

}  // namespace

PassActivationChoice::PassActivationChoice() { ++comparing_activation_choices; }
PassActivationChoice::~PassActivationChoice() { --comparing_activation_choices; }

bool activation_choice_open(const RunConfig& c) {
  return c.activation_policy == core::ActivationPolicy::Lifetime && c.activation_tier.automatic && comparing_activation_choices == 0;
}

bool has_auto_knobs(const RunConfig& c) { return has_tier_knobs(c) || activation_choice_open(c); }

namespace {

constexpr int kPlanBudget = 32;
constexpr int kFinalists = 2;

// This executable, by size and modification time: a rebuilt zinf may decide differently.
std::string build_identity() {
  std::error_code ec;
  const auto exe = core::self_exe(ec);
  struct stat st {};
  if (ec || ::stat(exe.c_str(), &st) != 0) return "unknown-build";
  return fmt::format("{}:{}:{}", exe.string(), int64_t(st.st_size), int64_t(st.st_mtime));
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

// Everything the decision depends on, as text.
std::string cache_key_text(const core::ModelSpec& m, const core::HwProfile& hw, int nodes, const RunConfig& c) {
  std::ostringstream k;
  k << "zinf auto v1\n" << build_identity() << "\n";
  k << fmt::format("model {} {} {} {} {} {} {} {} {}\n", m.name, m.layers, m.hidden, m.heads, m.ffn_multiple, m.seq,
                   m.vocab, m.micro_batch, m.tied_embeddings);
  k << "nodes " << nodes << "\n";
  k << core::hwprofile_to_yaml(hw) << "\n";
  // The writer spells auto knobs as their fallback tier: add what is auto.
  k << fmt::format("auto {} {} {} {} {}\n", c.params.automatic, c.gradients.automatic, c.optimizer.automatic,
                   c.checkpoints.automatic, c.tiling_factor == 0);
  k << core::run_config_to_yaml(c, "");
  return k.str();
}

std::string cache_dir() {
  if (const char* d = std::getenv("ZINF_CACHE_DIR")) return std::string(d) == "off" ? "" : std::string(d);
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/zinf";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/zinf";
  return "";
}

// The cached resolution: the resolved knobs and the summary, one per line.
struct Cached {
  Tier params, gradients, optimizer, checkpoints;
  int64_t tiling = 1;
  std::string summary;
};

std::map<uint64_t, Cached>& memo() {
  static std::map<uint64_t, Cached> m;
  return m;
}

Tier tier_of(int v) { return v == 1 ? Tier::Host : v == 2 ? Tier::Nvme : Tier::Device; }

bool read_cached(const std::string& path, const std::string& key_text, Cached& out) {
  std::ifstream in(path);
  if (!in) return false;
  std::string first;
  std::getline(in, first);
  int p = 0, g = 0, o = 0, ck = 0;
  long long t = 0;
  std::string summary;
  if (!(in >> p >> g >> o >> ck >> t)) return false;
  in.ignore(1);
  std::getline(in, summary);
  // The whole key follows: a hash collision or a foreign file is not taken for ours.
  std::stringstream rest;
  rest << in.rdbuf();
  auto tier_ok = [](int v) { return v >= 0 && v <= 2; };
  if (first != "zinf auto cache" || rest.str() != key_text || t < 1 || !tier_ok(p) || !tier_ok(g) || !tier_ok(o) ||
      !tier_ok(ck))
    return false;
  out = {tier_of(p), tier_of(g), tier_of(o), tier_of(ck), t, summary};
  return true;
}

void write_cached(const std::string& dir, const std::string& path, const std::string& key_text, const Cached& c) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return;  // a cache: without it the search runs again next time
  const std::string tmp = fmt::format("{}.{}.tmp", path, ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "zinf auto cache\n"
        << int(c.params) << ' ' << int(c.gradients) << ' ' << int(c.optimizer) << ' ' << int(c.checkpoints) << ' '
        << c.tiling << '\n'
        << c.summary << '\n'
        << key_text;
    if (!out) {
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

RunConfig apply(RunConfig c, const Cached& k) {
  c.params = {false, k.params};
  c.gradients = {false, k.gradients};
  c.optimizer = {false, k.optimizer};
  if (c.checkpoints.automatic) c.checkpoints = {false, k.checkpoints};
  c.tiling_factor = k.tiling;
  return c;
}

}  // namespace

namespace {

// The tuner's search over what `config` leaves to auto; every other knob is held at its value.
TuneRequest tier_search_request(const core::ModelSpec& model, const core::HwProfile& hw, int nodes, const RunConfig& config) {
  TuneRequest req;
  req.model = model;
  req.hw = hw;
  req.nodes = nodes;
  req.base = config;
  req.plan_budget = kPlanBudget;
  req.local_search_top = 0;
  req.finalists = kFinalists;
  const std::vector<Tier> all = {Tier::Device, Tier::Host, Tier::Nvme};
  TuneSpace& s = req.space;
  // Parameters and gradients move together unless one of them is fixed.
  if (config.params.automatic && config.gradients.automatic) s.params_tiers = all;
  else if (config.params.automatic) s.params_tiers = {config.gradients.tier};
  else s.params_tiers = {config.params.tier};
  if (!config.gradients.automatic) s.gradients_tier = config.gradients.tier;
  s.optimizer_tiers = config.optimizer.automatic ? all : std::vector<Tier>{config.optimizer.tier};
  s.checkpoint_intervals = {config.checkpoint_interval};
  s.checkpoint_tiers = config.checkpoints.automatic && config.checkpoint_interval > 0 ? all
                                                                                      : std::vector<Tier>{config.checkpoints.tier};
  if (config.tiling_factor > 0) s.tiling_factors = {config.tiling_factor};
  s.micro_batches = {config.micro_batch.value_or(model.micro_batch)};
  s.live_bytes = {config.max_live_bytes};
  s.partitionings = {config.partitioning};
  s.tensor_parallels = {config.tensor_parallel};
  s.node_counts = {nodes};
  s.prefetch = {{config.nvme_prefetch_distance, config.h2d_prefetch_distance, config.allgather_prefetch_distance}};
  s.sub_group_sizes = {config.sub_group_size};
  s.timings = {config.optimizer_timing};
  return req;
}

// The planner's own greedy choice, or nothing when it refuses.
std::optional<TuneCandidate> greedy_candidate(const core::ModelSpec& model, const core::HwProfile& hw, int nodes,
                                              const RunConfig& config) {
  try {
    const core::PlanResult g = models::plan_gpt(model, hw, config, nodes * hw.node.gpus).planned;
    RunConfig c = config;
    c.params = {false, g.plan.params};
    c.gradients = {false, g.plan.gradients};
    c.optimizer = {false, g.plan.optimizer};
    if (c.checkpoints.automatic) c.checkpoints = {false, g.plan.checkpoints};
    c.tiling_factor = g.plan.tiling_factor;
    return TuneCandidate{c, nodes};
  } catch (const core::PlanError&) {
    return std::nullopt;
  }
}

struct Judged {
  RunConfig config;
  double step;
  bool greedy_simulated = false;  // the greedy choice was not among the finalists and was simulated beside them
};

// The fastest simulated finalist, or the greedy choice when it simulates faster (it is simulated
// only when no finalist has its knobs); without either, the best planned candidate.
std::optional<Judged> fastest(const TuneReport& rep, const std::optional<TuneCandidate>& greedy, const TuneEvaluators& eval) {
  std::optional<Judged> best;
  for (const auto& f : rep.finalists)
    if (f.simulated && f.simulated->ok && (!best || f.simulated->step_time < best->step))
      best = Judged{f.candidate.config, f.simulated->step_time};
  auto same_knobs = [](const RunConfig& a, const RunConfig& b) {
    return a.params.tier == b.params.tier && a.gradients.tier == b.gradients.tier && a.optimizer.tier == b.optimizer.tier &&
           a.checkpoints.tier == b.checkpoints.tier && a.tiling_factor == b.tiling_factor;
  };
  bool greedy_simulated = false;
  if (greedy) {
    bool among = false;
    for (const auto& f : rep.finalists) among = among || same_knobs(f.candidate.config, greedy->config);
    if (!among) {
      const TuneOutcome o = eval.simulate({*greedy}).front();
      greedy_simulated = true;
      if (o.ok && (!best || o.step_time < best->step)) best = Judged{greedy->config, o.step_time};
    }
  }
  if (!best && !rep.planned.empty()) {
    const auto& p = rep.planned.front();
    best = Judged{p.candidate.config, p.planned ? p.planned->step_time : 0.0};
  }
  if (best) best->greedy_simulated = greedy_simulated;
  return best;
}

// What the search chose for each knob `config` left to auto, and how it knows.
std::string search_summary(const RunConfig& config, const Judged& best, const TuneReport& rep) {
  const RunConfig& b = best.config;
  std::string chosen;
  auto add = [&](bool is_auto, const std::string& what) {
    if (!is_auto) return;
    if (!chosen.empty()) chosen += ", ";
    chosen += what;
  };
  add(config.params.automatic, fmt::format("params {}", core::to_string(b.params.tier)));
  add(config.gradients.automatic, fmt::format("gradients {}", core::to_string(b.gradients.tier)));
  add(config.optimizer.automatic, fmt::format("optimizer {}", core::to_string(b.optimizer.tier)));
  add(config.checkpoints.automatic && config.checkpoint_interval > 0,
      fmt::format("checkpoints {}", core::to_string(b.checkpoints.tier)));
  add(config.tiling_factor == 0, fmt::format("tiling {}", b.tiling_factor));
  return fmt::format("auto, by the tuner's search: {} — predicted step {:.4g} s, the fastest of {} planned ({} "
                     "combinations searched, {} within the memory model, {} simulated{})",
                     chosen, best.step, rep.planned.size(), rep.enumerated, rep.memory_fit,
                     rep.simulations + (best.greedy_simulated ? 1 : 0),
                     best.greedy_simulated ? ", the planner's greedy choice among them" : "");
}

AutoResolution resolve_tiers(const core::ModelSpec& model, const core::HwProfile& hw, int nodes, const RunConfig& config) {
  AutoResolution r;
  r.config = config;
  if (!has_tier_knobs(config)) return r;

  const std::string key_text = cache_key_text(model, hw, nodes, config);
  const uint64_t key = fnv1a(key_text);
  const std::string dir = cache_dir();
  const std::string path = dir.empty() ? "" : fmt::format("{}/auto-{:016x}.txt", dir, key);
  Cached k;
  bool found = false;
  if (auto it = memo().find(key); it != memo().end()) {
    k = it->second;
    found = true;
  } else if (!path.empty() && read_cached(path, key_text, k)) {
    found = true;
  }
  if (found) {
    memo()[key] = k;
    r.config = apply(config, k);
    r.searched = r.cached = true;
    r.summary = k.summary + " (cached)";
    return r;
  }

  // The planner's own greedy choice is a candidate too, simulated beside the search's finalists,
  // so that the search never settles on something slower than what it replaces.
  const std::optional<TuneCandidate> greedy = greedy_candidate(model, hw, nodes, config);
  const TuneEvaluators eval = isolated_evaluators(model, hw, 2);
  TuneReport rep;
  try {
    rep = tune(tier_search_request(model, hw, nodes, config), eval);
  } catch (const core::PlanError&) {
    // Nothing the search covers fits: the planner's own auto decides, or says why not.
    return r;
  }
  const std::optional<Judged> best = fastest(rep, greedy, eval);
  if (!best) return r;
  const RunConfig& b = best->config;
  k = Cached{b.params.tier, b.gradients.tier, b.optimizer.tier, b.checkpoints.tier, b.tiling_factor,
             search_summary(config, *best, rep)};
  memo()[key] = k;
  if (!path.empty()) write_cached(dir, path, key_text, k);
  r.config = apply(config, k);
  r.searched = true;
  r.summary = k.summary;
  return r;
}

// The activation pass decides greedily, item by item, with a closed-form cost; given several paths it
// can settle on one that the simulator finds slower than another alone (host offloads where NVMe
// over GDS is faster). The whole choices are compared by simulated step: the pass's own (tier
// auto), each single path, and checkpoint-and-recompute without offload.
AutoResolution compare_activation_choices(const core::ModelSpec& model, const core::HwProfile& hw, int nodes, AutoResolution r) {
  const std::string key_text = "activation choices\n" + cache_key_text(model, hw, nodes, r.config);
  static std::map<uint64_t, std::pair<RunConfig, std::string>> memo_act;
  const uint64_t key = fnv1a(key_text);
  if (auto it = memo_act.find(key); it != memo_act.end()) {
    r.config = it->second.first;
    r.summary += (r.summary.empty() ? "" : "; ") + it->second.second + " (cached)";
    r.searched = true;
    return r;
  }
  struct Choice {
    std::string name;
    RunConfig config;
  };
  std::vector<Choice> choices;
  choices.push_back({fmt::format("the pass's own (host or NVMe per {})", r.config.activation_per_tensor ? "tensor" : "block"),
                     r.config});
  if (r.config.activation_per_tensor) {
    RunConfig blocks = r.config;
    blocks.activation_per_tensor = false;
    choices.push_back({"the pass's own per block", blocks});
  }
  RunConfig host = r.config;
  host.activation_tier = {false, Tier::Host};
  choices.push_back({"host only", host});
  if (hw.nvme_budget() > 0) {
    RunConfig nvme = r.config;
    nvme.activation_tier = {false, Tier::Nvme};
    choices.push_back({hw.node.has_gds() ? "NVMe only (over GDS)" : "NVMe only", nvme});
  }
  RunConfig recompute = r.config;
  recompute.activation_policy = core::ActivationPolicy::None;
  recompute.checkpoint_interval = std::max<int64_t>(1, recompute.checkpoint_interval);
  choices.push_back({"checkpoint and recompute", recompute});
  std::vector<TuneCandidate> cands;
  for (const auto& c : choices) cands.push_back({c.config, nodes});
  std::vector<TuneOutcome> outs;
  {
    const PassActivationChoice as_planned;
    outs = isolated_evaluators(model, hw, 2).simulate(cands);
  }
  size_t best = choices.size();
  std::string steps;
  for (size_t i = 0; i < choices.size(); ++i) {
    steps += fmt::format("{}{} {}", i ? ", " : "", choices[i].name,
                         outs[i].ok ? fmt::format("{:.4g} s", outs[i].step_time) : std::string("refused"));
    if (outs[i].ok && (best == choices.size() || outs[i].step_time < outs[best].step_time)) best = i;
  }
  if (best == choices.size()) return r;  // nothing ran: the planner decides, or says why not
  const std::string line = fmt::format("activation offload: {}, the fastest whole choice by simulated step ({})", choices[best].name, steps);
  memo_act[key] = {choices[best].config, line};
  // The pass's own choice keeps tier auto: whoever asked plans it as the pass does.
  r.config = choices[best].config;
  r.summary += (r.summary.empty() ? "" : "; ") + line;
  r.searched = true;
  return r;
}

}  // namespace

AutoResolution resolve_auto(const core::ModelSpec& model, const core::HwProfile& hw, int nodes, const RunConfig& config) {
  AutoResolution r = resolve_tiers(model, hw, nodes, config);
  if (!activation_choice_open(r.config)) return r;
  return compare_activation_choices(model, hw, nodes, std::move(r));
}

AutoResolution resolve_auto_for_ranks(const core::ModelSpec& model, const core::HwProfile& hw, int ranks,
                                      const core::RunConfig& config) {
  const int gpus = std::max(1, hw.node.gpus);
  if (ranks % gpus != 0) return {config, false, false, ""};
  return resolve_auto(model, hw, ranks / gpus, config);
}

}  // namespace zinf::sim
