// The DeepSpeed config reader: a DeepSpeed JSON (Hjson) config read with DeepSpeed's own semantics,
// as DeepSpeed 0.16.5 reads it (deepspeed/runtime/config.py, zero/config.py, zero/offload_config.py,
// swap_tensor/aio_config.py, runtime/engine.py): its defaults (ZeRO stage 0, fp32), the batch triple
// derived or refused against the world size, deprecated keys mapped as DeepSpeed maps them, the
// precision, the optimizer by DeepSpeed's names (Adam is AdamW unless adam_w_mode is false), the
// stage rules, and Hugging Face's "auto" values resolved as the HF Trainer resolves them from what
// zinf knows. A file DeepSpeed refuses is refused with DeepSpeed's reason; every key the file gives
// is accounted for in a ledger (mapped, derived, defaulted, auto, ignored, no effect, not read).
// Stateless functions; safe from several threads.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/precision.hpp"
#include "core/run_config.hpp"

namespace zinf::core {

// The DeepSpeed release whose config semantics this reader follows.
inline constexpr const char* kDeepSpeedVersion = "0.16.5";

// What zinf knows of the run that DeepSpeed or the HF Trainer would take from elsewhere.
struct DeepSpeedContext {
  // GPUs of the run (nodes x GPUs per node): DeepSpeed's world size for the batch triple.
  int ranks = 1;
  std::string ranks_text;            // how it came about, for messages ("1 node x 16 GPUs")
  // What HF "auto" takes from the Trainer's arguments and the model, here from zinf's model file
  // and hardware profile.
  int64_t model_micro_batch = 1;     // per_device_train_batch_size
  int64_t hidden = 0;                // model.config.hidden_size (0: unknown, bucket autos refused)
  Precision hw_precision = Precision::Bf16;  // the 16-bit format the hardware runs natively
  std::string hw_name;
  // zinf tune reads a DeepSpeed-autotuner config (autotuning.enabled) as the space to search; the
  // other commands send such a config to zinf tune.
  bool for_tune = false;
};

// What became of one key of the file (or of one default that decides the plan).
enum class KeyFate {
  Mapped,     // read and planned with (a deprecated name mapped as DeepSpeed maps it included)
  Derived,    // computed by DeepSpeed's rule from other keys (the batch triple)
  Defaulted,  // absent: DeepSpeed's default is planned with
  Auto,       // an HF "auto", resolved
  Ignored,    // DeepSpeed honours it and zinf does not model it: the plan may differ from DeepSpeed's run
  NoEffect,   // DeepSpeed reads it, and it changes nothing zinf plans (logging, checkpoint files, numerics)
  NotRead,    // DeepSpeed does not read this key at all (a misspelling, another tool's key)
};
const char* to_string(KeyFate f);

struct KeyNote {
  std::string key;     // dotted path in the file
  KeyFate fate = KeyFate::Mapped;
  std::string value;   // as planned (JSON text)
  std::string reason;
};

struct DeepSpeedReading {
  RunConfig config;
  std::vector<KeyNote> notes;         // file order, then defaults
  // Lines for the user: one per kind of note that changes what they expect (the HF autos with the
  // values used, defaults DeepSpeed applies, keys not honoured, keys DeepSpeed does not read).
  std::vector<std::string> messages;
  int world_size = 1;                 // DeepSpeed's world size for the batch triple
  int64_t train_batch_size = 0;       // micro x accumulation x world
  bool autotuner = false;             // autotuning.enabled: a config for DeepSpeed's autotuner
  std::vector<std::string> autotuner_keys;  // its "auto" keys, for zinf tune
};

// Reads `text` (Hjson/JSON) named `name`. Throws ConfigError with DeepSpeed's reason for any file
// DeepSpeed refuses, naming the key.
DeepSpeedReading read_deepspeed_config(const std::string& text, const std::string& name, const DeepSpeedContext& ctx);

// Where a RunConfig is written as a DeepSpeed config for (run_config_to_deepspeed_json).
struct DeepSpeedTarget {
  int ranks = 1;                     // DeepSpeed's world size: every GPU of the run
  int64_t model_micro_batch = 1;     // when the config leaves the micro-batch to the model
  int64_t model_hidden = 0;          // what an HF "auto" prefetch bucket of the base is
  Precision precision = Precision::Bf16;  // as the run trains: the config's, or the hardware's own
  std::string nvme_path;             // NVMe directory for offloaded states ("": a placeholder to edit)
  const nlohmann::ordered_json* base = nullptr;  // the base DeepSpeed config, whose other keys are kept
};

// `config` as a DeepSpeed config DeepSpeed 0.16.5 accepts: tuned keys written over the base's (if
// any), current key names, and what DeepSpeed cannot say named in `not_expressed`.
std::string run_config_to_deepspeed_json(const RunConfig& config, const DeepSpeedTarget& target,
                                         std::vector<std::string>& not_expressed);

// How `config` and its DeepSpeed config as read back differ in what a plan depends on, one line
// per key of zinf's YAML ("old -> new"); empty when DeepSpeed expresses it exactly.
std::vector<std::string> deepspeed_round_trip(const RunConfig& config, const RunConfig& read_back, Precision precision);

// The ledger as a JSON array of {key, fate, value, reason}.
std::string notes_json(const std::vector<KeyNote>& notes);

}  // namespace zinf::core
