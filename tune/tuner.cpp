#include "tune/tuner.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <stdexcept>

#include "core/errors.hpp"
#include "core/memory_model.hpp"
#include "core/plan.hpp"
#include "core/run_config_bounds.hpp"
#include "core/timeline.hpp"
#include "core/units.hpp"
#include "models/gpt.hpp"
#include "sim/isolate.hpp"
#include "tune/scenario.hpp"

namespace zinf::tune {

using core::OptimizerTiming;
using core::Partitioning;
using core::RunConfig;
using core::Tier;

namespace {

constexpr int kOwnerBasedMaxRanks = 16;     // owner-based programs are scheduled rank by rank
constexpr size_t kPlanBatch = 4;            // candidates handed to the evaluators at once

const char* short_tier(Tier t) {
  switch (t) {
    case Tier::Device: return "device";
    case Tier::Host: return "host";
    case Tier::Nvme: return "nvme";
  }
  return "?";
}

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

// The structural knobs of a candidate (what the local search leaves alone): finalists differ in these.
std::string structure_key(const TuneCandidate& c) {
  const RunConfig& r = c.config;
  return fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", c.nodes, int(r.partitioning), int(r.params.tier),
                     int(r.optimizer.tier), r.checkpoint_interval, int(r.checkpoints.tier), r.tiling_factor,
                     r.micro_batch.value_or(0), r.gradient_accumulation, int(r.gradients.tier), r.tensor_parallel,
                     r.expert_parallel);
}

// The first entry of each distinct structure in `ranked`, at most `n` of them.
std::vector<TuneEntry> best_per_structure(const std::vector<TuneEntry>& ranked, size_t n) {
  std::vector<TuneEntry> out;
  std::vector<std::string> seen;
  for (const auto& e : ranked) {
    if (out.size() >= n) break;
    std::string k = structure_key(e.candidate);
    if (std::find(seen.begin(), seen.end(), k) != seen.end()) continue;
    seen.push_back(std::move(k));
    out.push_back(e);
  }
  return out;
}

double gpu_seconds_per_sample(double step, int nodes, const core::HwProfile& hw, int64_t global_batch) {
  return step * double(nodes * hw.node.gpus) / double(global_batch);
}

}  // namespace

std::string TuneCandidate::describe() const {
  const auto& c = config;
  std::string ckpt = c.checkpoint_interval > 0
                         ? fmt::format("ckpt {}/{}", short_tier(c.checkpoints.tier), c.checkpoint_interval)
                         : std::string("ckpt off");
  return fmt::format("{} node(s), {}{}params {}, optimizer {}, {}, tiling {}, mb {} x ga {}, prefetch {}/{}/{}, live {}, "
                     "sub-group {}, optimizer {}{}",
                     nodes, c.tensor_parallel > 1 ? fmt::format("tp {}, ", c.tensor_parallel) : std::string(),
                     c.expert_parallel > 1 ? fmt::format("ep {}, ", c.expert_parallel) : std::string(),
                     short_tier(c.params.tier), short_tier(c.optimizer.tier), ckpt, c.tiling_factor,
                     c.micro_batch.value_or(0), c.gradient_accumulation, c.nvme_prefetch_distance,
                     c.h2d_prefetch_distance, c.allgather_prefetch_distance, core::format_bytes(c.max_live_bytes),
                     core::format_count(double(c.sub_group_size)),
                     c.optimizer_timing == OptimizerTiming::OverlapBackward ? "overlaps backward" : "after backward",
                     c.partitioning == Partitioning::OwnerBased ? ", owner-based" : "");
}

// ---------------------------------------------------------------------------------------------------
// Evaluators

namespace {

nlohmann::json outcome_json(const TuneOutcome& o) {
  nlohmann::json j = {{"ok", o.ok},           {"refused", o.refused},
                      {"message", o.message}, {"step_time", o.step_time},
                      {"tflops", o.tflops_per_gpu}, {"tiling", o.tiling_factor},
                      {"peak", {o.peak[0], o.peak[1], o.peak[2]}}};
  for (const auto& [k, v] : o.busy) j["busy"].push_back({k, v});
  return j;
}

TuneOutcome outcome_from_json(const std::string& text) {
  const auto j = nlohmann::json::parse(text);
  TuneOutcome o;
  o.ok = j.at("ok").get<bool>();
  o.refused = j.at("refused").get<bool>();
  o.message = j.at("message").get<std::string>();
  o.step_time = j.at("step_time").get<double>();
  o.tflops_per_gpu = j.at("tflops").get<double>();
  o.tiling_factor = j.at("tiling").get<int64_t>();
  for (size_t i = 0; i < 3; ++i) o.peak[i] = j.at("peak").at(i).get<double>();
  if (j.contains("busy"))
    for (const auto& b : j["busy"]) o.busy.emplace_back(b.at(0).get<std::string>(), b.at(1).get<double>());
  return o;
}

TuneOutcome failed(bool refused, const std::string& message) {
  TuneOutcome o;
  o.refused = refused;
  o.message = message;
  return o;
}

std::vector<TuneOutcome> run_forked(size_t count, int workers, const std::function<TuneOutcome(size_t)>& fn) {
  std::vector<TuneOutcome> out(count);
  sim::run_isolated_parallel(
      count, workers,
      [&](size_t i) {
        try {
          return outcome_json(fn(i)).dump();
        } catch (const core::PlanError& e) {
          return outcome_json(failed(true, e.what())).dump();
        }
      },
      [&](size_t i, bool ok, const std::string& text) { out[i] = ok ? outcome_from_json(text) : failed(false, text); });
  return out;
}

}  // namespace

TuneOutcome schedule_in_process(const core::ModelSpec& model, const core::HwProfile& hw, const TuneCandidate& c) {
  TuneOutcome o;
  try {
    const core::PlanResult r = models::plan_gpt(model, hw, c.config, c.nodes * hw.node.gpus).planned;
    o.ok = true;
    o.step_time = core::estimate_step_time(r.program, hw);
    o.tiling_factor = r.plan.tiling_factor;
    o.peak = r.plan.peak_bytes;
  } catch (const core::PlanError& e) {
    return failed(true, e.what());
  }
  return o;
}

TuneEvaluators isolated_evaluators(const core::ModelSpec& model, const core::HwProfile& hw, int workers) {
  TuneEvaluators e;
  e.schedule = [model, hw, workers](const std::vector<TuneCandidate>& cs) {
    return run_forked(cs.size(), workers, [&](size_t i) { return schedule_in_process(model, hw, cs[i]); });
  };
  e.simulate = [model, hw, workers](const std::vector<TuneCandidate>& cs) {
    return run_forked(cs.size(), workers, [&](size_t i) {
      sim::SimOptions opts;
      opts.timeline_ranks = {};
      const ScenarioResult r = run_scenario({model, hw, cs[i].config, cs[i].nodes}, opts);
      TuneOutcome o;
      o.ok = true;
      o.step_time = r.report.step_time;
      o.tflops_per_gpu = r.report.tflops_per_gpu;
      o.tiling_factor = r.plan.tiling_factor;
      o.peak = r.plan.peak_bytes;
      for (const auto& b : r.report.busy) o.busy.emplace_back(b.resource, b.busy);
      return o;
    });
  };
  return e;
}

// ---------------------------------------------------------------------------------------------------
// The space

TuneSpace default_tune_space(const TuneRequest& req) {
  TuneSpace s = req.space;
  const RunConfig& b = req.base;
  const int ranks = req.nodes * req.hw.node.gpus;
  const std::vector<Tier> all = {Tier::Device, Tier::Host, Tier::Nvme};
  if (s.params_tiers.empty()) s.params_tiers = all;
  if (s.optimizer_tiers.empty()) s.optimizer_tiers = all;
  if (s.checkpoint_tiers.empty()) s.checkpoint_tiers = all;
  if (s.checkpoint_intervals.empty()) {
    for (int64_t ci : {int64_t(1), int64_t(2), int64_t(4)})
      if (ci <= req.model.layers) s.checkpoint_intervals.push_back(ci);
    s.checkpoint_intervals.push_back(0);
  }
  if (s.tiling_factors.empty())
    for (int64_t t = 1; t <= 64 && t <= req.model.hidden; t *= 2) s.tiling_factors.push_back(t);
  if (s.micro_batches.empty()) {
    for (int64_t m = 1; m <= 64; m *= 2) s.micro_batches.push_back(m);
    const int64_t own = b.micro_batch.value_or(req.model.micro_batch);
    if (std::find(s.micro_batches.begin(), s.micro_batches.end(), own) == s.micro_batches.end())
      s.micro_batches.push_back(own);
  }
  // Above the base config too: where twice the largest gathered operator exceeds the bound, gathers
  // cannot be prefetched (estimate_lanes), and the largest bound that fits is what a candidate takes.
  if (s.live_bytes.empty())
    s.live_bytes = {4 * b.max_live_bytes, b.max_live_bytes, b.max_live_bytes / 4, b.max_live_bytes / 16};
  if (s.partitionings.empty()) {
    s.partitionings = {Partitioning::BandwidthCentric};
    if (ranks > 1 && ranks <= kOwnerBasedMaxRanks && b.zero_stage == 3) s.partitionings.push_back(Partitioning::OwnerBased);
  }
  if (s.tensor_parallels.empty())
    for (int64_t t = 1; t <= req.hw.node.gpus; t *= 2) s.tensor_parallels.push_back(t);
  // Only degrees the planner accepts: dividing a node's GPUs, the heads and the widths.
  std::erase_if(s.tensor_parallels, [&](int64_t t) {
    return t < 1 || req.hw.node.gpus % t != 0 || req.model.heads % t != 0 || req.model.hidden % t != 0 ||
           req.model.ffn_hidden() % t != 0;
  });
  if (s.tensor_parallels.empty()) s.tensor_parallels = {1};
  if (s.expert_parallels.empty())
    for (int64_t e = 1; e <= ranks && req.model.experts > 0 && b.zero_stage == 3; e *= 2) s.expert_parallels.push_back(e);
  // Only degrees the planner accepts: dividing the experts and (at tensor parallelism 1) the ranks.
  std::erase_if(s.expert_parallels, [&](int64_t e) {
    return e < 1 || (e > 1 && (req.model.experts <= 0 || req.model.experts % e != 0 || ranks % e != 0 ||
                               e > req.hw.node.gpus || b.zero_stage != 3));
  });
  if (s.expert_parallels.empty()) s.expert_parallels = {1};
  if (s.node_counts.empty()) {
    if (req.objective == TuneObjective::Cost)
      for (int nn = 1; nn < req.nodes; nn *= 2) s.node_counts.push_back(nn);
    s.node_counts.push_back(req.nodes);
  }
  if (s.prefetch.empty()) {
    s.prefetch = {{b.nvme_prefetch_distance, b.h2d_prefetch_distance, b.allgather_prefetch_distance}, {1, 1, 1}, {6, 4, 2}};
  }
  if (s.sub_group_sizes.empty()) s.sub_group_sizes = {b.sub_group_size, std::max<int64_t>(1, b.sub_group_size / 10)};
  if (s.timings.empty()) s.timings = {OptimizerTiming::AfterBackward, OptimizerTiming::OverlapBackward};
  return s;
}

namespace {

struct Enumerated {
  TuneCandidate candidate;
  bool fits = false;
  double short_ratio = 0;  // shortfall over budget of the first short tier
  std::string short_text;
};

// The largest live-bytes bound, then the smallest tiling factor, with which `c` fits the memory
// model; or, if none does, how far short the first of them is.
Enumerated fit(const TuneRequest& req, const TuneSpace& s, RunConfig c, int nodes) {
  Enumerated e;
  std::optional<core::MemoryReport> first;
  for (double live : s.live_bytes) {
    for (int64_t t : s.tiling_factors) {
      RunConfig probe = c;
      probe.max_live_bytes = live;
      probe.tiling_factor = t;
      core::MemoryReport r = core::memory_requirement({req.model, req.hw, nodes, probe});
      if (!first) first = r;
      if (r.fits) {
        e.candidate = {probe, nodes};
        e.fits = true;
        return e;
      }
    }
  }
  c.max_live_bytes = s.live_bytes.front();
  c.tiling_factor = s.tiling_factors.front();
  const auto& r = *first;
  const double budget = *r.short_tier == Tier::Device ? r.budget.device
                        : *r.short_tier == Tier::Host ? r.budget.host
                                                      : r.budget.nvme;
  e.short_ratio = budget > 0 ? r.shortfall / budget : 1e30;
  e.short_text = fmt::format("{} short by {} ({})", core::to_string(*r.short_tier), core::format_bytes(r.shortfall),
                             *r.short_tier == Tier::Device ? "per GPU" : "per node");
  e.candidate = {c, nodes};
  return e;
}

std::vector<Enumerated> enumerate(const TuneRequest& req, const TuneSpace& s, int64_t global_batch) {
  std::vector<Enumerated> out;
  const RunConfig& base = req.base;
  // Structural choices first (nodes, tensor parallelism, micro-batch, partitioning) ...
  struct Shape {
    int nodes;
    int64_t tp, ep, mb, ga;
    Partitioning part;
  };
  std::vector<Shape> shapes;
  for (int nodes : s.node_counts) {
    for (int64_t tp : s.tensor_parallels) {
      const int64_t dp = int64_t(nodes) * req.hw.node.gpus / tp;  // data-parallel ranks share the batch
      for (int64_t ep : s.expert_parallels) {
        if (ep > 1 && (tp > 1 || dp % ep != 0)) continue;  // as the planner takes it
        for (int64_t mb : s.micro_batches) {
          if (global_batch % (dp * mb) != 0) continue;
          const int64_t ga = global_batch / (dp * mb);
          if (ga < 1 || ga > core::kMaxGradientAccumulation) continue;
          for (Partitioning part : s.partitionings)
            if ((part != Partitioning::OwnerBased || (dp > 1 && tp == 1)) && (part != Partitioning::OwnerBased || ep == 1))
              shapes.push_back({nodes, tp, ep, mb, ga, part});
        }
      }
    }
  }
  // ... then the placement of each state and of the checkpoints.
  for (const Shape& sh : shapes) {
    for (Tier pt : s.params_tiers) {
      if (pt != Tier::Device && base.zero_stage < 3) continue;  // stages 0-2 keep parameters on the device
      for (Tier ot : s.optimizer_tiers) {
        for (int64_t ci : s.checkpoint_intervals) {
          for (Tier ct : s.checkpoint_tiers) {
            if (ci == 0 && ct != s.checkpoint_tiers.front()) continue;  // no checkpoints: tier is moot
            RunConfig c = base;
            c.tensor_parallel = sh.tp;
            c.expert_parallel = sh.ep;
            c.partitioning = sh.part;
            c.params = {false, pt};
            c.gradients = {false, s.gradients_tier.value_or(pt)};
            c.optimizer = {false, ot};
            c.checkpoint_interval = ci;
            c.checkpoints = {false, ci == 0 ? Tier::Device : ct};
            c.micro_batch = sh.mb;
            c.gradient_accumulation = sh.ga;
            out.push_back(fit(req, s, c, sh.nodes));
          }
        }
      }
    }
  }
  return out;
}

int64_t resolve_global_batch(const TuneRequest& req) {
  if (req.global_batch > 0) return req.global_batch;
  // The base config's data-parallel ranks (its tensor-parallel groups share a batch) x its batch per rank.
  const int64_t dp = std::max<int64_t>(1, int64_t(req.nodes) * req.hw.node.gpus / std::max<int64_t>(1, req.base.tensor_parallel));
  return dp * req.base.micro_batch.value_or(req.model.micro_batch) * req.base.gradient_accumulation;
}

double objective_of(const TuneRequest& req, const TuneCandidate& c, double step, int64_t global_batch) {
  return req.objective == TuneObjective::Cost ? gpu_seconds_per_sample(step, c.nodes, req.hw, global_batch) : step;
}

// Every candidate with its memory-model fit and closed-form estimate (`entries`, in enumeration
// order, beside `all`), and the order the search plans them in: those the memory model admits by
// estimated objective, then the others, closest to fitting first (the memory model is a closed
// form; the planner may still accept what it calls short).
struct Ranked {
  std::vector<Enumerated> all;
  std::vector<TuneEntry> entries;
  std::vector<size_t> order;
};

Ranked rank(const TuneRequest& req, const TuneSpace& space, int64_t global_batch) {
  Ranked r;
  r.all = enumerate(req, space, global_batch);
  r.entries.reserve(r.all.size());
  for (const auto& e : r.all) {
    TuneEntry t;
    t.candidate = e.candidate;
    t.memory_fits = e.fits;
    t.estimate = estimate_lanes(req.model, req.hw, e.candidate.nodes, e.candidate.config);
    t.score = objective_of(req, t.candidate, t.estimate.step_time, global_batch);
    t.found_by = "closed form";
    r.entries.push_back(std::move(t));
  }
  r.order.resize(r.entries.size());
  std::iota(r.order.begin(), r.order.end(), 0);
  std::stable_sort(r.order.begin(), r.order.end(), [&](size_t a, size_t b) {
    if (r.entries[a].memory_fits != r.entries[b].memory_fits) return r.entries[a].memory_fits;
    if (r.entries[a].memory_fits) return r.entries[a].score < r.entries[b].score;
    return r.all[a].short_ratio < r.all[b].short_ratio;
  });
  return r;
}

}  // namespace

std::vector<TuneEntry> ranked_candidates(const TuneRequest& req) {
  Ranked r = rank(req, default_tune_space(req), resolve_global_batch(req));
  std::vector<TuneEntry> out;
  out.reserve(r.order.size());
  for (size_t i : r.order) out.push_back(std::move(r.entries[i]));
  return out;
}

std::vector<TuneCandidate> enumerate_candidates(const TuneRequest& req, const TuneSpace& space) {
  std::vector<TuneCandidate> out;
  for (auto& e : enumerate(req, space, resolve_global_batch(req))) out.push_back(std::move(e.candidate));
  return out;
}

// ---------------------------------------------------------------------------------------------------
// The search

namespace {

// One run of `tune`: its inputs, the clock and the report it fills, with one method per step.
class Search {
public:
  Search(const TuneRequest& req, const TuneEvaluators& eval, const TuneProgress& progress)
      : req_(req), eval_(eval), progress_(progress), t0_(clock_type::now()) {
    rep_.global_batch = resolve_global_batch(req);
    space_ = default_tune_space(req);
    budget_ = static_cast<size_t>(std::max(1, req.plan_budget));
  }

  TuneReport run() {
    say_not_searched();
    estimate_all();
    plan_promising();
    for (const TuneEntry& start : local_search_starts())
      if (!over_time(0.6)) local_search(start);
    std::stable_sort(planned_.begin(), planned_.end(), by_score);
    rep_.seconds_plan = since(t1_);
    simulate_finalists();
    rep_.seconds_total = since(t0_);
    if (req_.time_limit > 0 && rep_.plans < budget_ && next_ < order_.size()) rep_.time_limited = true;
    return std::move(rep_);
  }

private:
  static bool by_score(const TuneEntry& a, const TuneEntry& b) { return a.score < b.score; }
  double score_of(const TuneCandidate& c, double step) const { return objective_of(req_, c, step, rep_.global_batch); }
  bool over_time(double fraction) const { return req_.time_limit > 0 && since(t0_) > fraction * req_.time_limit; }

  void say_not_searched() {
    if (space_.tensor_parallels.size() == 1 && space_.tensor_parallels.front() == 1)
      rep_.not_searched.push_back(
          "tensor parallelism (no degree above 1 divides this node's GPUs and the model's heads and widths)");
    rep_.not_searched.push_back(fmt::format("ZeRO stage (the base config's, {})", req_.base.zero_stage));
    rep_.not_searched.push_back("gradients on another tier than the parameters");
    if (std::find(space_.partitionings.begin(), space_.partitionings.end(), Partitioning::OwnerBased) ==
        space_.partitionings.end())
      rep_.not_searched.push_back(
          fmt::format("owner-based partitioning (searched on 2 to {} ranks only)", kOwnerBasedMaxRanks));
  }

  // 1. Enumerate, check the memory model, estimate every lane in closed form.
  void estimate_all() {
    Ranked r = rank(req_, space_, rep_.global_batch);
    all_ = std::move(r.all);
    entries_ = std::move(r.entries);
    order_ = std::move(r.order);
    if (all_.empty())
      throw std::invalid_argument(fmt::format(
          "global batch {} cannot be split into micro-batches of {} on {} rank(s) with at most {} accumulation steps",
          rep_.global_batch, fmt::join(space_.micro_batches, "/"), req_.nodes * req_.hw.node.gpus, core::kMaxGradientAccumulation));
    rep_.enumerated = all_.size();
    for (const auto& e : all_) rep_.memory_fit += e.fits ? 1 : 0;
    rep_.seconds_enumerate = since(t0_);
  }

  // 2. Plan and schedule the most promising, a batch at a time.
  void plan_promising() {
    t1_ = clock_type::now();
    size_t refused_unfit = 0;
    std::string first_refusal;
    while (next_ < order_.size()) {
      const bool have = !planned_.empty();
      if (have && (rep_.plans >= budget_ || over_time(0.5))) break;
      if (!have && over_time(0.8)) break;
      // With nothing accepted yet, go on through every candidate the memory model accepts and the
      // `budget` closest of those it refuses.
      if (!entries_[order_[next_]].memory_fits && refused_unfit >= budget_) break;
      std::vector<size_t> batch;
      while (next_ < order_.size() && batch.size() < kPlanBatch) batch.push_back(order_[next_++]);
      std::vector<TuneCandidate> cs;
      for (size_t i : batch) cs.push_back(entries_[i].candidate);
      const auto outcomes = eval_.schedule(cs);
      for (size_t k = 0; k < batch.size(); ++k) {
        TuneEntry& e = entries_[batch[k]];
        ++rep_.plans;
        if (!e.memory_fits) ++refused_unfit;
        e.planned = outcomes[k];
        if (!outcomes[k].ok) {
          ++rep_.plans_refused;
          if (first_refusal.empty()) first_refusal = fmt::format("{}: {}", e.candidate.describe(), outcomes[k].message);
          continue;
        }
        e.candidate.config.tiling_factor = outcomes[k].tiling_factor;
        e.score = score_of(e.candidate, outcomes[k].step_time);
        planned_.push_back(e);
      }
      if (progress_) progress_("plan", std::min(rep_.plans, budget_), budget_);
    }
    if (planned_.empty()) {
      std::string closest = first_refusal;
      if (closest.empty() && !order_.empty()) {  // nothing was planned in time: the planner's verdict on the closest
        const TuneCandidate& c = entries_[order_[0]].candidate;
        closest = c.describe() + ": " + eval_.schedule({c}).front().message;
      }
      throw core::PlanError(fmt::format("no configuration of {} on {} x {} node(s) fits: {} searched, {} planned; the closest, {}",
                                        req_.model.name, req_.hw.name, req_.nodes, rep_.enumerated, rep_.plans, closest));
    }
    std::stable_sort(planned_.begin(), planned_.end(), by_score);
  }

  // 3. Local search over the schedule knobs of the best planned candidates: each knob's values in
  // turn, keeping any that lowers the idealized objective. It starts from the best planned
  // candidate of each of the first `local_search_top` structures.
  std::vector<TuneEntry> local_search_starts() const {
    return best_per_structure(planned_, static_cast<size_t>(std::max(0, req_.local_search_top)));
  }

  void local_search(TuneEntry best) {
    const RunConfig& c0 = best.candidate.config;
    std::vector<std::pair<std::string, RunConfig>> v;
    for (const auto& p : space_.prefetch) {
      if (p.nvme == c0.nvme_prefetch_distance && p.h2d == c0.h2d_prefetch_distance && p.allgather == c0.allgather_prefetch_distance)
        continue;
      RunConfig c = c0;
      c.nvme_prefetch_distance = p.nvme;
      c.h2d_prefetch_distance = p.h2d;
      c.allgather_prefetch_distance = p.allgather;
      v.push_back({fmt::format("{}/{}/{}", p.nvme, p.h2d, p.allgather), c});
    }
    try_variants(best, "prefetch", v);
    v.clear();
    for (double live : {best.candidate.config.max_live_bytes * 4}) {
      RunConfig c = best.candidate.config;
      c.max_live_bytes = live;
      v.push_back({core::format_bytes(live), c});
    }
    try_variants(best, "live bytes", v);
    v.clear();
    for (int64_t sg : space_.sub_group_sizes) {
      if (sg == best.candidate.config.sub_group_size) continue;
      RunConfig c = best.candidate.config;
      c.sub_group_size = sg;
      v.push_back({core::format_count(double(sg)), c});
    }
    try_variants(best, "sub-group", v);
    v.clear();
    for (OptimizerTiming t : space_.timings) {
      if (t == best.candidate.config.optimizer_timing) continue;
      RunConfig c = best.candidate.config;
      c.optimizer_timing = t;
      v.push_back({t == OptimizerTiming::OverlapBackward ? "overlap-backward" : "after-backward", c});
    }
    try_variants(best, "timing", v);
  }

  // Schedules each variant of `best`; every accepted one joins the planned, and the best of them
  // replaces `best` when it lowers the objective.
  void try_variants(TuneEntry& best, const std::string& knob, const std::vector<std::pair<std::string, RunConfig>>& variants) {
    if (variants.empty() || over_time(0.6)) return;
    std::vector<TuneCandidate> cs;
    for (const auto& v : variants) cs.push_back({v.second, best.candidate.nodes});
    const auto outcomes = eval_.schedule(cs);
    std::optional<TuneEntry> winner;
    for (size_t k = 0; k < cs.size(); ++k) {
      ++rep_.plans;
      if (!outcomes[k].ok) {
        ++rep_.plans_refused;
        continue;
      }
      TuneEntry e = best;
      e.candidate = cs[k];
      e.candidate.config.tiling_factor = outcomes[k].tiling_factor;
      e.planned = outcomes[k];
      e.estimate = estimate_lanes(req_.model, req_.hw, e.candidate.nodes, e.candidate.config);
      e.score = score_of(e.candidate, outcomes[k].step_time);
      e.found_by = fmt::format("local search: {} {}", knob, variants[k].first);
      planned_.push_back(e);
      if (e.score < (winner ? winner->score : best.score) * (1 - 1e-9)) winner = e;
    }
    if (winner) best = *winner;
  }

  // 4. Simulate the finalists: the best planned candidate of each of the best structures.
  void simulate_finalists() {
    const auto t2 = clock_type::now();
    std::vector<TuneEntry> finalists = best_per_structure(planned_, static_cast<size_t>(std::max(1, req_.finalists)));
    // With a time limit, simulate what the time left allows (at least the best one).
    size_t simulated = 0;
    double last_batch = 0;
    while (simulated < finalists.size()) {
      // Another batch would take about as long as the last one: start it only if it ends in time.
      if (simulated > 0 && req_.time_limit > 0 && since(t0_) + last_batch > req_.time_limit) {
        rep_.time_limited = true;
        break;
      }
      const auto tb = clock_type::now();
      const size_t n = req_.time_limit > 0 ? std::min<size_t>(2, finalists.size() - simulated) : finalists.size() - simulated;
      std::vector<TuneCandidate> cs;
      for (size_t k = simulated; k < simulated + n; ++k) cs.push_back(finalists[k].candidate);
      const auto outcomes = eval_.simulate(cs);
      for (size_t k = 0; k < n; ++k) {
        TuneEntry& f = finalists[simulated + k];
        f.simulated = outcomes[k];
        ++rep_.simulations;
        if (outcomes[k].ok) f.score = score_of(f.candidate, outcomes[k].step_time);
      }
      simulated += n;
      last_batch = since(tb);
      if (progress_) progress_("simulate", simulated, finalists.size());
    }
    finalists.resize(simulated);
    simulate_incumbents(finalists);
    std::stable_sort(finalists.begin(), finalists.end(), [](const TuneEntry& a, const TuneEntry& b) {
      const bool ao = a.simulated && a.simulated->ok, bo = b.simulated && b.simulated->ok;
      if (ao != bo) return ao;
      if (a.score != b.score) return a.score < b.score;
      // Equal predictions: the one that needs less device memory.
      return a.planned->peak[0] < b.planned->peak[0];
    });
    for (auto& e : finalists) set_samples_per_s(e);
    for (auto& e : planned_) set_samples_per_s(e);
    rep_.finalists = std::move(finalists);
    rep_.planned = std::move(planned_);
    rep_.seconds_simulate = since(t2);
  }

  // The request's incumbents that are not finalists already: planned, then simulated beside them.
  void simulate_incumbents(std::vector<TuneEntry>& finalists) {
    auto key = [](const RunConfig& c, int nodes) {
      return fmt::format("{} | {} {} {} {}", TuneCandidate{c, nodes}.describe(), int(c.activation_policy),
                         c.activation_tier.automatic, int(c.activation_tier.tier), c.activation_per_tensor);
    };
    for (const auto& [name, config] : req_.incumbents) {
      const TuneCandidate c{config, req_.nodes};
      if (std::any_of(finalists.begin(), finalists.end(),
                      [&](const TuneEntry& f) { return key(f.candidate.config, f.candidate.nodes) == key(config, req_.nodes); }))
        continue;
      TuneEntry e;
      e.candidate = c;
      e.found_by = name;
      e.estimate = estimate_lanes(req_.model, req_.hw, c.nodes, c.config);
      e.planned = eval_.schedule({c}).front();
      ++rep_.plans;
      if (!e.planned->ok) {
        ++rep_.plans_refused;
        continue;
      }
      e.simulated = eval_.simulate({c}).front();
      ++rep_.simulations;
      if (!e.simulated->ok) continue;
      e.score = score_of(c, e.simulated->step_time);
      finalists.push_back(std::move(e));
    }
  }

  void set_samples_per_s(TuneEntry& e) const {
    const double step = e.simulated && e.simulated->ok ? e.simulated->step_time
                        : e.planned && e.planned->ok  ? e.planned->step_time
                                                      : e.estimate.step_time;
    e.samples_per_s = step > 0 ? double(rep_.global_batch) / step : 0;
  }

  const TuneRequest& req_;
  const TuneEvaluators& eval_;
  const TuneProgress& progress_;
  const clock_type::time_point t0_;
  clock_type::time_point t1_;
  TuneReport rep_;
  TuneSpace space_;
  size_t budget_ = 1;               // plans to make before local search, once one is accepted
  std::vector<Enumerated> all_;     // every candidate, as enumerated
  std::vector<TuneEntry> entries_;  // the same, with their closed-form estimates
  std::vector<size_t> order_;       // indices into both, most promising first
  size_t next_ = 0;                 // the next of `order_` to plan
  std::vector<TuneEntry> planned_;  // accepted by the planner, and the local search's variants
};

}  // namespace

TuneReport tune(const TuneRequest& req, const TuneEvaluators& eval, const TuneProgress& progress) {
  return Search(req, eval, progress).run();
}

// ---------------------------------------------------------------------------------------------------
// JSON

namespace {

nlohmann::json config_json(const TuneCandidate& c) {
  const RunConfig& r = c.config;
  return {{"nodes", c.nodes},
          {"tensor_parallel", r.tensor_parallel},
          {"expert_parallel", r.expert_parallel},
          {"params", short_tier(r.params.tier)},
          {"gradients", short_tier(r.gradients.tier)},
          {"optimizer", short_tier(r.optimizer.tier)},
          {"checkpoint_interval", r.checkpoint_interval},
          {"checkpoints", short_tier(r.checkpoints.tier)},
          {"tiling_factor", r.tiling_factor},
          {"micro_batch", r.micro_batch.value_or(0)},
          {"gradient_accumulation", r.gradient_accumulation},
          {"prefetch", {r.nvme_prefetch_distance, r.h2d_prefetch_distance, r.allgather_prefetch_distance}},
          {"max_live_bytes", r.max_live_bytes},
          {"sub_group_size", r.sub_group_size},
          {"optimizer_timing", r.optimizer_timing == OptimizerTiming::OverlapBackward ? "overlap-backward" : "after-backward"},
          {"partitioning", r.partitioning == Partitioning::OwnerBased ? "owner-based" : "bandwidth-centric"}};
}

nlohmann::json peak_json(const core::PerTier& p) {
  return {{"device_per_rank", p[0]}, {"host_per_rank", p[1]}, {"nvme_per_rank", p[2]}};
}

nlohmann::json entry_json(const TuneEntry& e) {
  nlohmann::json j;
  j["describe"] = e.candidate.describe();
  j["config"] = config_json(e.candidate);
  j["found_by"] = e.found_by;
  j["score"] = e.score;
  j["samples_per_s"] = e.samples_per_s;
  j["estimate"] = {{"step_time", e.estimate.step_time}, {"bottleneck", e.estimate.bottleneck}};
  for (const auto& l : e.estimate.lanes) j["estimate"]["lanes"][l.lane] = l.seconds;
  if (e.planned && e.planned->ok)
    j["planned"] = {{"step_time", e.planned->step_time}, {"peak", peak_json(e.planned->peak)}};
  if (e.simulated) {
    const auto& s = *e.simulated;
    j["simulated"] = {{"ok", s.ok}, {"step_time", s.step_time}, {"tflops_per_gpu", s.tflops_per_gpu}};
    if (!s.ok) j["simulated"]["message"] = s.message;
    for (const auto& [k, v] : s.busy) j["simulated"]["busy"][k] = v;
  }
  return j;
}

}  // namespace

std::string tune_report_json(const TuneRequest& req, const TuneReport& rep) {
  nlohmann::json j;
  j["model"] = req.model.name;
  j["hwprofile"] = req.hw.name;
  j["nodes"] = req.nodes;
  j["gpus_per_node"] = req.hw.node.gpus;
  j["global_batch"] = rep.global_batch;
  j["objective"] = req.objective == TuneObjective::Cost ? "cost" : "throughput";
  j["budget_per_rank"] = {{"device", req.hw.gpu_budget()},
                          {"host", req.hw.host_budget() / req.hw.node.gpus},
                          {"nvme", req.hw.nvme_budget() / req.hw.node.gpus}};
  j["searched"] = {{"enumerated", rep.enumerated}, {"memory_fit", rep.memory_fit}, {"plans", rep.plans},
                   {"plans_refused", rep.plans_refused}, {"simulations", rep.simulations},
                   {"time_limited", rep.time_limited}};
  j["seconds"] = {{"enumerate", rep.seconds_enumerate}, {"plan", rep.seconds_plan},
                  {"simulate", rep.seconds_simulate}, {"total", rep.seconds_total}};
  j["not_searched"] = rep.not_searched;
  j["finalists"] = nlohmann::json::array();
  for (const auto& e : rep.finalists) j["finalists"].push_back(entry_json(e));
  j["planned"] = nlohmann::json::array();
  for (const auto& e : rep.planned) j["planned"].push_back(entry_json(e));
  return j.dump(2);
}

}  // namespace zinf::tune
