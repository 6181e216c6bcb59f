// The number format a run trains in: bf16 or fp16 mixed precision (16-bit parameters, gradients
// and activations beside fp32 master weights and optimizer states), or plain fp32 (DeepSpeed with
// neither fp16 nor bf16 enabled). Plain values; no state.
#pragma once
#include <optional>
#include <string>

namespace zinf::core {

enum class Precision { Bf16, Fp16, Fp32 };

inline const char* to_string(Precision p) {
  switch (p) {
    case Precision::Bf16: return "bf16";
    case Precision::Fp16: return "fp16";
    case Precision::Fp32: return "fp32";
  }
  return "?";
}

inline std::optional<Precision> parse_precision(const std::string& word) {
  if (word == "bf16") return Precision::Bf16;
  if (word == "fp16") return Precision::Fp16;
  if (word == "fp32") return Precision::Fp32;
  return std::nullopt;
}

// Bytes per element of a parameter, a gradient or an activation in `p`.
inline double element_bytes(Precision p) { return p == Precision::Fp32 ? 4.0 : 2.0; }

}  // namespace zinf::core
