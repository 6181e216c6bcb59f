// splitmix64 (Steele, Lea and Flood 2014): the engine's one small deterministic generator, the same
// numbers on every platform and library. Used for GPT-2's initialization, the data order and
// io-bench's incompressible buffers.
#pragma once
#include <cstdint>

namespace zinf::engine {

// The finalizer: a well-mixed 64-bit value of z.
inline uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The next number of the stream whose state is `state` (advanced).
inline uint64_t splitmix64_next(uint64_t& state) { return splitmix64_mix(state += 0x9e3779b97f4a7c15ull); }

}  // namespace zinf::engine
