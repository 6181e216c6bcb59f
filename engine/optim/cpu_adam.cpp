#include "engine/optim/cpu_adam.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include "engine/optim/adam_kernels.hpp"
#include "engine/thread_name.hpp"

namespace zinf::engine {

using adam_detail::Arrays;
using adam_detail::Coeffs;

AdamOptions AdamOptions::from_run_config(const core::RunConfig& config) {
  AdamOptions o;
  o.lr = config.lr;
  o.beta1 = config.beta1;
  o.beta2 = config.beta2;
  o.eps = config.eps;
  o.weight_decay = config.weight_decay;
  if (config.optimizer_type == "adamw")
    o.decoupled_weight_decay = true;
  else if (config.optimizer_type == "adam")
    o.decoupled_weight_decay = false;
  else
    throw std::invalid_argument("cpu adam: optimizer_type '" + config.optimizer_type + "' is not adam or adamw");
  return o;
}

const char* to_string(SimdLevel s) {
  switch (s) {
    case SimdLevel::Reference: return "reference";
    case SimdLevel::Avx2: return "avx2";
    case SimdLevel::Avx512: return "avx512";
  }
  return "?";
}

bool simd_supported(SimdLevel s) {
  switch (s) {
    case SimdLevel::Reference: return true;
    case SimdLevel::Avx2: return __builtin_cpu_supports("avx2");
    case SimdLevel::Avx512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  }
  return false;
}

SimdLevel best_simd_level() {
  if (simd_supported(SimdLevel::Avx512)) return SimdLevel::Avx512;
  if (simd_supported(SimdLevel::Avx2)) return SimdLevel::Avx2;
  return SimdLevel::Reference;
}

namespace {

Coeffs coeffs(const AdamOptions& o, int64_t step) {
  if (step < 1) throw std::invalid_argument("cpu adam: step counts from 1, got " + std::to_string(step));
  const double bc1 = 1.0 - std::pow(o.beta1, double(step));
  const double bc2 = 1.0 - std::pow(o.beta2, double(step));
  Coeffs c;
  c.beta1 = float(o.beta1);
  c.one_minus_beta1 = float(1.0 - o.beta1);
  c.beta2 = float(o.beta2);
  c.one_minus_beta2 = float(1.0 - o.beta2);
  c.step_size = float(o.lr / bc1);
  c.inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
  c.eps = float(o.eps);
  c.decay = o.decoupled_weight_decay ? float(o.lr * o.weight_decay) : 0.0f;
  c.l2 = o.decoupled_weight_decay ? 0.0f : float(o.weight_decay);
  return c;
}

inline float grad_value(float g) { return g; }
inline float grad_value(bf16 g) { return to_float(g); }

template <class G>
void reference_range(const Coeffs& c, Arrays a, size_t begin, size_t end) {
  auto* grad = static_cast<const G*>(a.grad);
  for (size_t i = begin; i < end; ++i) {
    float g = grad_value(grad[i]);
    float p = a.master[i];
    if (c.l2 != 0.0f) g = g + c.l2 * p;
    const float m = c.beta1 * a.m[i] + c.one_minus_beta1 * g;
    const float v = c.beta2 * a.v[i] + (c.one_minus_beta2 * g) * g;
    const float denom = std::sqrt(v) * c.inv_sqrt_bc2 + c.eps;
    if (c.decay != 0.0f) p = p - c.decay * p;
    p = p - c.step_size * (m / denom);
    a.m[i] = m;
    a.v[i] = v;
    a.master[i] = p;
    if (a.param_out) a.param_out[i] = to_bf16(p);
  }
}

using Kernel = void (*)(const Coeffs&, Arrays, size_t, size_t);

Kernel kernel_for(SimdLevel level, bool bf16_grad) {
  switch (level) {
    case SimdLevel::Reference: return bf16_grad ? reference_range<bf16> : reference_range<float>;
    case SimdLevel::Avx2: return bf16_grad ? adam_detail::adam_avx2_bf16 : adam_detail::adam_avx2_f32;
    case SimdLevel::Avx512: return bf16_grad ? adam_detail::adam_avx512_bf16 : adam_detail::adam_avx512_f32;
  }
  return nullptr;
}

}  // namespace

void adam_reference(const AdamOptions& o, int64_t step, size_t n, float* master, float* m, float* v, const float* grad,
                    bf16* param_out) {
  reference_range<float>(coeffs(o, step), {master, m, v, grad, param_out}, 0, n);
}

void adam_reference(const AdamOptions& o, int64_t step, size_t n, float* master, float* m, float* v, const bf16* grad,
                    bf16* param_out) {
  reference_range<bf16>(coeffs(o, step), {master, m, v, grad, param_out}, 0, n);
}

// Persistent workers: a step wakes them once instead of creating threads, which would cost more
// than a small sub-group's update.
struct CpuAdam::Workers {
  unsigned parts;
  std::vector<std::thread> threads;
  std::mutex mu;
  std::condition_variable start_cv;
  std::function<void(unsigned)> job;
  uint64_t generation = 0;
  bool stopping = false;
  std::atomic<unsigned> pending{0};
  std::mutex step_mu;  // one step at a time per instance

  explicit Workers(unsigned n) : parts(n) {
    try {
      for (unsigned i = 1; i < n; ++i) threads.emplace_back([this, i] { loop(i); });
    } catch (const std::system_error& e) {
      // The threads already started are waiting for work: stop them before the error leaves, or
      // their std::thread objects would be destroyed joinable.
      stop();
      throw std::runtime_error("cpu adam: cannot start " + std::to_string(n) + " worker threads (started " +
                               std::to_string(threads.size() + 1) + "): " + e.what());
    }
  }
  ~Workers() { stop(); }
  void stop() {
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    start_cv.notify_all();
    for (auto& t : threads)
      if (t.joinable()) t.join();
  }
  void loop(unsigned part) {
    name_this_thread("zinf adam");
    uint64_t seen = 0;
    for (;;) {
      std::function<void(unsigned)> fn;
      {
        std::unique_lock lock(mu);
        start_cv.wait(lock, [&] { return stopping || generation != seen; });
        if (stopping) return;
        seen = generation;
        fn = job;
      }
      fn(part);
      if (pending.fetch_sub(1, std::memory_order_acq_rel) == 1) pending.notify_one();
    }
  }
  void run(const std::function<void(unsigned)>& fn) {
    if (parts == 1) return fn(0);
    pending.store(parts - 1, std::memory_order_release);
    {
      std::lock_guard lock(mu);
      job = fn;
      ++generation;
    }
    start_cv.notify_all();
    fn(0);
    for (unsigned p = pending.load(std::memory_order_acquire); p != 0; p = pending.load(std::memory_order_acquire))
      pending.wait(p, std::memory_order_acquire);
  }
};

CpuAdam::CpuAdam(AdamOptions options, unsigned threads, SimdLevel level)
    : options_(options), level_(level), workers_(std::make_unique<Workers>(std::max(1u, threads))) {
  if (!simd_supported(level))
    throw std::invalid_argument(std::string("cpu adam: this CPU does not support ") + to_string(level));
}

CpuAdam::~CpuAdam() = default;

unsigned CpuAdam::threads() const { return workers_->parts; }

namespace {

void run_step(CpuAdam::Workers& w, Kernel k, const Coeffs& c, Arrays a, size_t n) {
  // Parts start at multiples of 64 elements so only the array's end has a partial vector.
  const size_t per = (n + w.parts - 1) / w.parts;
  const size_t chunk = (per + 63) / 64 * 64;
  w.run([&](unsigned part) {
    const size_t b = std::min(n, size_t(part) * chunk), e = std::min(n, b + chunk);
    if (b < e) k(c, a, b, e);
  });
}

}  // namespace

void CpuAdam::set_options(const AdamOptions& options) {
  std::lock_guard lock(workers_->step_mu);
  options_ = options;
}

void CpuAdam::step(int64_t step, size_t n, float* master, float* m, float* v, const float* grad, bf16* param_out) {
  std::lock_guard lock(workers_->step_mu);
  run_step(*workers_, kernel_for(level_, false), coeffs(options_, step), {master, m, v, grad, param_out}, n);
}

void CpuAdam::step(int64_t step, size_t n, float* master, float* m, float* v, const bf16* grad, bf16* param_out) {
  std::lock_guard lock(workers_->step_mu);
  run_step(*workers_, kernel_for(level_, true), coeffs(options_, step), {master, m, v, grad, param_out}, n);
}

}  // namespace zinf::engine
