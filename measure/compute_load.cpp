#include "measure/compute_load.hpp"

#include "engine/backend/cpu/kernels.hpp"

namespace zinf::measure {

ComputeLoad::ComputeLoad() : x_(size_t(kTokens * kIn)), w_(size_t(kOut * kIn)), y_(size_t(kTokens * kOut)) {
  for (size_t i = 0; i < x_.size(); ++i) x_[i] = float(i % 251) * 1e-3f;
  for (size_t i = 0; i < w_.size(); ++i) w_[i] = float(i % 509) * 1e-4f;
}

double ComputeLoad::rate_alone(double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  int64_t calls = 0;
  double wall = 0;
  do {
    call();
    ++calls;
    wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (wall < seconds);
  return double(calls) * kFlopsPerCall / wall;
}

void ComputeLoad::start() {
  start_ = std::chrono::steady_clock::now();
  worker_ = std::thread([this] {
    while (!stopping_.load(std::memory_order_relaxed)) {
      call();
      calls_.fetch_add(1, std::memory_order_relaxed);
    }
  });
}

double ComputeLoad::stop() {
  if (!worker_.joinable()) return 0;
  stopping_ = true;
  worker_.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return double(calls_.load()) * kFlopsPerCall / wall;
}

void ComputeLoad::call() {
  engine::cpu::linear_forward(y_.data(), x_.data(), w_.data(), nullptr, kTokens, kIn, kOut);
}

}  // namespace zinf::measure
