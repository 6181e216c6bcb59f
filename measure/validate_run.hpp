// The library behind `zinf validate`: a model trained for real on this machine for K steps (in
// child processes: the zinf executable, under mpirun for N > 1 ranks, so that the simulation has
// this process's SimGrid engine to itself) and the same Program simulated on the machine's
// measured profile; step time and each lane's busy time, measured against predicted. Writes both
// Timelines (CSV and Chrome trace) and a JSON summary to the output directory.
#pragma once
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace zinf::measure {

struct ValidateOptions {
  std::string model = "gpt-mini";     // name (models/NAME.yaml) or path
  std::string hw = "local";           // this machine's measured profile: name or path
  std::string config = "train-nvme";  // run config: name or path
  int ranks = 1;
  bool force_ranks = false;  // run more ranks than 4 per usable core
  int steps = 8;
  int warmup = 3;  // steps not summarized: staging caches, arena and page faults settle
  std::string out_dir = "validate-out";
  std::string nvme_dir;  // "" : <out_dir>/nvme
  std::string label;     // "" : "<model> <config> x<ranks>"
  std::string executable;  // the zinf binary that runs the measuring ranks (`validate --worker`)
  std::string source_dir;  // the tree with models/, hwprofiles/ and configs/
};

// Measures, simulates, writes <out_dir>/{measured,predicted}.{csv,trace.json} and validate.json,
// and returns that summary: label, model, config, ranks, steps, warmup, hwprofile,
// profile_machine_mismatch ("" when the profile was measured here), measured {median, min, max,
// steps, all}, predicted, error, lanes {lane: {measured, predicted}}, machine_state
// {profile_round_trips, run_round_trips, note}: on several BLAS threads, a cache line's round trip
// between two cores around the profile's in-step steps and around this run, and a note when they
// differ by over 1.5x (probe::run_state_note). `say` gets progress lines
// (the command it runs; a warning when the profile describes another machine). Throws with the
// log's path when the measured run fails, ChildStopped (measure/child_process.hpp) when a signal
// stopped it, and std::invalid_argument naming the option for bad ranks (more than 4 per usable
// core without force_ranks), warm-up or output directory.
nlohmann::json validate(const ValidateOptions& options, const std::function<void(const std::string&)>& say);

// One measuring rank (what `zinf validate --worker` runs): trains `steps` steps and writes
// <out_dir>/measured.rank<R>.json with its step times, per-step lane busy times and losses, and the
// last step's Timeline.
void validate_worker(const ValidateOptions& options);

}  // namespace zinf::measure
