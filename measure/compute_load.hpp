// ComputeLoad is the CPU backend's compute lane as a load: one thread calling the engine's linear
// layer (an OpenBLAS GEMM on all of BLAS's threads, as a training step's forward and backward do) at
// a shape of the memory-wall model (128 tokens x 3200 -> 12800: 10.5 GFLOP a call). `zinf io-bench
// --compute-load` measures the disk while it runs: on a VM whose virtual disk needs its vCPUs (virtio
// here: reads and writes at about half their idle rates while both cores compute, at full rates
// with one), the disk a CPU-backend run gets is that one. Used from one thread; start/stop once.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace zinf::measure {

class ComputeLoad {
public:
  static constexpr int64_t kTokens = 128, kIn = 3200, kOut = 12800;
  static constexpr double kFlopsPerCall = 2.0 * kTokens * kIn * kOut;

  ComputeLoad();
  ComputeLoad(const ComputeLoad&) = delete;
  ComputeLoad& operator=(const ComputeLoad&) = delete;
  ~ComputeLoad() { stop(); }

  // GEMM FLOP/s with nothing else running, over about `seconds`.
  double rate_alone(double seconds);
  // Starts the load on its own thread.
  void start();
  // Stops the load; its GEMM FLOP/s while it ran (0 when it never started).
  double stop();

private:
  void call();
  std::vector<float> x_, w_, y_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> calls_{0};
  std::chrono::steady_clock::time_point start_;
  std::thread worker_;
};

}  // namespace zinf::measure
