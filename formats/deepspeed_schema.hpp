// How DeepSpeed 0.16.5 reads each key of its config, as data: which sections are pydantic models
// (unknown keys refused, values validated, an "auto" at their top level dropped for the default)
// and which are plain dicts read with get_scalar_param (unknown keys never looked at), the type
// each field must have, and what becomes of the key in zinf's plan when zinf's reader does not map
// it. Internal to the DeepSpeed reader. Constant tables; safe from several threads.
#pragma once
#include <string>
#include <vector>

#include "formats/deepspeed_config.hpp"

namespace zinf::core::deepspeed {

enum class Check {
  Any,          // taken as given
  Bool,         // pydantic bool: true/false, 0/1, or "true"/"yes"/"on"/"1"/... strings
  Int,          // pydantic int: an integer (or a float without fraction)
  NonNegInt,    // ... at least 0 (Field(ge=0))
  Number,       // pydantic float
  Fraction,     // ... in [0, 1]
  Str,          // pydantic str
  OptStr,       // Optional[str] / Optional[Path]
  OffloadDevice,  // OffloadDeviceEnum: "none", "cpu" or "nvme"
  ZeroStage,    // ZeroStageEnum: 0, 1, 2 or 3
  Dict,         // a mapping DeepSpeed reads with get_scalar_param: its unknown keys are never read
  Model,        // a nested pydantic model: its unknown keys are refused
};

struct FieldSpec {
  std::string name;
  std::string alias;         // the other name pydantic accepts ("" if none)
  Check check = Check::Any;
  KeyFate fate = KeyFate::NoEffect;  // when zinf's reader does not map the key itself
  std::string reason;
  const std::vector<FieldSpec>* fields = nullptr;  // Dict or Model: its keys
  // An Ignored key whose value (as true or false) is what zinf does anyway: "true", "false", or "".
  std::string same_when;
  // A deprecated field: the field DeepSpeed moves its value to ("" if none).
  std::string deprecated_for;
};

// The top-level keys DeepSpeed reads. Any other top-level key is never read by DeepSpeed.
const std::vector<FieldSpec>& top_level_fields();

// The field `name` (or its alias) of `fields`, or nullptr.
const FieldSpec* find_field(const std::vector<FieldSpec>& fields, const std::string& name);

}  // namespace zinf::core::deepspeed
