// What one NCCL collective call costs as NCCL's own tuning model prices it (src/graph/tuning.cc,
// ncclTopoTuneModel and ncclTopoGetAlgoTime; the choice in src/enqueue.cc, getAlgoInfo): for each
// algorithm (ring; tree, for all-reduce only) and protocol (LL, LL128, Simple) a latency that grows
// with the ranks and nodes the call spans, and a bandwidth; NCCL runs the pair of least time. The
// constants are those of the NCCL release a hwprofile names (`nccl.release`). Three releases are
// tabled: 2.7.8 (PyTorch 1.8's wheels, under DeepSpeed v0.3.x), 2.8.3 (NGC PyTorch 20.12's, under
// Megatron-LM in 2021) and 2.18.3 (the PyTorch 2.1 era, Hopper). What
// needs NCCL's topology search (its channel count: the per-channel bandwidth caps, the graph's
// network latency) and the algorithms beyond ring and tree (CollNet, NVLS) are not modelled.
// Pure functions, thread-safe.
#pragma once
#include <string>

#include "core/hwprofile.hpp"
#include "core/program.hpp"

namespace zinf::core {

enum class NcclAlgorithm { Tree, Ring };
enum class NcclProtocol { LL, LL128, Simple };
const char* to_string(NcclAlgorithm a);
const char* to_string(NcclProtocol p);

// The releases `nccl.release` may name.
bool known_nccl_release(const std::string& release);

// One collective call as NCCL runs it.
struct NcclCall {
  NcclAlgorithm algorithm = NcclAlgorithm::Ring;
  NcclProtocol protocol = NcclProtocol::Simple;
  double latency = 0;         // seconds, charged once per call
  // How many times longer the transfer takes than ring/Simple's: the protocol's share of the bus
  // bandwidth (LL sends a flag with every 4 bytes; LL128 one per 128) or the tree's bandwidth
  // against the ring's. The simulator scales a call's flows by it.
  double transfer_scale = 1;
  double seconds = 0;         // latency + transfer_scale x ring_simple_seconds
};

// The call NCCL picks for a collective of `kind` over `bytes` (the whole gathered or reduced
// buffer, as NCCL's nBytes counts it) among `ranks` ranks on `nodes` nodes (ranks / nodes per
// node), the GPUs joined by NVLink inside a node or not, given `ring_simple_seconds`: the time the
// platform moves the buffer in as a ring at full bandwidth, latency aside (NCCL's nBytes over its
// ring bandwidth). The bus bandwidth NCCL's other terms scale from is read off it. Throws
// std::invalid_argument for a release not tabled or a kind that is not a collective.
NcclCall nccl_call(const NcclSpec& nccl, TaskKind kind, double bytes, int ranks, int nodes, bool nvlink,
                   double ring_simple_seconds);

}  // namespace zinf::core
