// The DeepSpeed reader's working state, shared by its source files (deepspeed_config.cpp: the
// passes, the ledger, the messages; deepspeed_auto.cpp: Hugging Face's "auto"; deepspeed_sections.cpp:
// each section's meaning). Internal; one Reader per file being read, not thread-safe.
#pragma once
#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "formats/deepspeed_config.hpp"
#include "formats/deepspeed_schema.hpp"
#include "core/errors.hpp"

namespace zinf::core::deepspeed {

using json = nlohmann::ordered_json;

// Python's truthiness, which DeepSpeed applies to the values it reads with get_scalar_param.
bool truthy(const json& v);
// A value as a short text for notes and messages.
std::string shown(const json& v);

class Reader {
public:
  Reader(json root, std::string file, const DeepSpeedContext& ctx);
  DeepSpeedReading run();

  // --- the ledger ---
  // What became of `path` (a dotted key of the file, or a default that decides the plan).
  void note(const std::string& path, KeyFate fate, const std::string& value, const std::string& reason);
  [[noreturn]] void refuse(const std::string& path, const std::string& why) const;
  // A refusal of zinf's own (DeepSpeed would run the file): names the limit.
  [[noreturn]] void unsupported(const std::string& path, const std::string& why) const;
  void message(const std::string& line) { messages_.push_back(line); }

  // --- the tree ---
  const json* at(const std::string& path) const;  // nullptr when absent
  const json* section(const std::string& key) const;  // a top-level mapping, nullptr when absent or not a mapping
  static const json* member(const json* obj, const std::string& key);
  // A pydantic field: present with a value pydantic keeps (an "auto" dropped at a model's top
  // level reads as absent).
  const json* field(const json* obj, const std::string& path, const std::string& name, const std::string& alias = "");

  // Typed values as DeepSpeed's validation leaves them (the file was validated before these run).
  bool model_bool(const json& v) const;        // pydantic bool
  double number(const json& v) const;          // a validated number

  // --- the passes (deepspeed_auto.cpp) ---
  void resolve_hf_autos();
  void check_autotuner();

  // --- the sections (deepspeed_sections.cpp) ---
  void read_precision();
  void read_loss_scale(const json* fp16);  // fp16 enabled: its loss-scale keys
  void read_zero();
  void read_offload(const json* zero);        // where parameters and optimizer states live
  void read_zero_schedule(const json* zero);  // overlap, stage-3 fetching, sub-groups
  void read_optimizer();
  // The optimizer's params as FusedAdam, DeepSpeedCPUAdam or torch's Adam take them.
  void check_adam_params(const json* params, const std::string& ds_name, int& states, std::string& implementation,
                         bool& decoupled);
  void read_optimizer_numbers(const json* params, const std::string& ds_name);
  void read_batch();
  void read_aio();
  void read_activation_checkpointing();
  void read_tensor_parallel();
  void read_expert_parallel();
  void read_other_sections();
  void read_scheduler();  // through formats/lr_schedule_reader.hpp

  // --- validation (deepspeed_config.cpp) ---
  void validate();

  json root_;
  std::string file_;
  DeepSpeedContext ctx_;
  RunConfig c_;
  DeepSpeedReading out_;
  int stage_ = 0;
  bool zero_legacy_bool_ = false;
  std::map<std::string, KeyNote> notes_;           // explicit notes by path
  std::vector<std::string> defaulted_order_;       // notes for keys absent from the file, in the order made
  std::vector<std::pair<std::string, std::string>> autos_;  // HF "auto" keys resolved: key, "value (source)"
  std::vector<std::string> dropped_autos_;         // "auto" values DeepSpeed's pydantic drops for its default
  std::vector<std::string> messages_;

private:
  // Both coerce what pydantic coerces (a numeric string to its number, "yes" to true) in place.
  void validate_model(json& obj, const std::string& path, const std::vector<FieldSpec>& fields, bool top);
  void check_value(json& v, const std::string& path, const FieldSpec& f);
};

}  // namespace zinf::core::deepspeed
