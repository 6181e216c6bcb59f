// The element types a run stores its parameters and gradients in, one per core::Precision: bf16
// (engine/bf16.hpp), fp16 (engine/fp16.hpp) or fp32 itself, with one spelling of the conversions for
// code written once for all three (`to_float(s)`, `from_float<S>(f)`). Header-only, no state,
// thread-safe.
#pragma once
#include "core/precision.hpp"
#include "engine/bf16.hpp"
#include "engine/fp16.hpp"

namespace zinf::engine {

inline float to_float(float v) { return v; }

template <class S>
S from_float(float f);
template <>
inline bf16 from_float<bf16>(float f) { return to_bf16(f); }
template <>
inline fp16 from_float<fp16>(float f) { return to_fp16(f); }
template <>
inline float from_float<float>(float f) { return f; }

// The storage type's precision.
template <class S>
constexpr core::Precision precision_of();
template <>
constexpr core::Precision precision_of<bf16>() { return core::Precision::Bf16; }
template <>
constexpr core::Precision precision_of<fp16>() { return core::Precision::Fp16; }
template <>
constexpr core::Precision precision_of<float>() { return core::Precision::Fp32; }

}  // namespace zinf::engine
