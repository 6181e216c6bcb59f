#pragma once
// The run config's bounds on what a file may ask for, shared by zinf's own reader, the DeepSpeed
// reader (which refuses a file past them up front, with the figure) and the tuner's search.
// What the plan may build is bounded separately, by what it adds up to: tasks per rank and
// sub-groups (core/plan_partition.cpp, core/plan_optimizer.cpp).
#include <cstdint>

namespace zinf::core {

inline constexpr int64_t kMaxParams = int64_t(1) << 50;
inline constexpr int64_t kMaxMicroBatch = 65536;
inline constexpr int64_t kMaxTensorParallel = 64;
// Expert parallelism splits experts, and no mixture zinf reads has more than a few hundred.
inline constexpr int64_t kMaxExpertParallel = 1024;
inline constexpr double kMaxCapacityFactor = 64;
// DeepSpeed sets no bound: a large batch on one GPU derives thousands of steps (2048 in recipes
// written for a node, run on one GPU). This one only keeps the arithmetic far from overflow; the
// tasks-per-rank bound is what refuses a Program too large to build.
inline constexpr int64_t kMaxGradientAccumulation = int64_t(1) << 20;

}  // namespace zinf::core
