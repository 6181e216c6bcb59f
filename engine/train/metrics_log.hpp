// MetricsLog writes a training run's record as JSON Lines (`zinf train --metrics FILE.jsonl`): one
// object per step ("kind": "step": loss, learning rate, gradient norm, tokens/s, step time, each
// lane's busy seconds, peak bytes per tier) and per evaluation ("kind": "eval"), each line flushed as
// it is written, so a run stopped at any point leaves whole lines. A resumed run appends; a reader
// keeps the last line of each step (a run that went on past its last checkpoint repeats those
// steps after resuming). analysis/train_report.py plots it. Used by rank 0 only; not thread-safe.
#pragma once
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/train/trainer.hpp"

namespace zinf::engine {

// A step as its metrics line holds it.
nlohmann::json step_record(const StepStats& s);
// An evaluation as its metrics line holds it: "kind": "eval", the step, the held-out loss and
// perplexity, the batches and tokens it covered, its seconds and peak bytes per tier.
nlohmann::json eval_record(const EvalStats& e);

class MetricsLog {
 public:
  // Opens `path` for appending (`append`) or anew; throws naming the path when it cannot.
  MetricsLog(const std::string& path, bool append);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const nlohmann::json& record);  // one line; throws naming the path when writing fails
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace zinf::engine
