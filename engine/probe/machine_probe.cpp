#include "engine/probe/machine_probe.hpp"

#include <cblas.h>
#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <stdexcept>
#include <thread>

#include "core/plan.hpp"
#include "engine/build_info.hpp"
#include "engine/machine_info.hpp"
#include "engine/backend/cpu/kernels.hpp"
#include "engine/exec/executor.hpp"
#include "engine/io/nvme_store.hpp"
#include "engine/io/output_file.hpp"
#include "engine/memory/cpu_device_arena.hpp"
#include "engine/memory/staging_cache.hpp"
#include "engine/optim/cpu_adam.hpp"
#include "models/gpt.hpp"

namespace zinf::engine::probe {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
std::vector<float> touched(size_t n, float value = 0.5f) { return std::vector<float>(n, value); }

}  // namespace

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double time_median(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(seconds_since(t0));
  }
  return median(t);
}

LinearFit fit(const std::vector<std::pair<double, double>>& points) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto [x, y] : points) {
    const double w = 1.0 / (y * y);
    sw += w;
    sx += w * x;
    sy += w * y;
    sxx += w * x * x;
    sxy += w * x * y;
  }
  const double slope = (sw * sxy - sx * sy) / (sw * sxx - sx * sx);
  const double icept = (sy - slope * sx) / sw;
  LinearFit f;
  f.bandwidth = slope > 0 ? 1.0 / slope : points.back().first / points.back().second;
  f.latency = std::max(0.0, icept);
  return f;
}

std::vector<GemmPoint> measure_gemm(bool quick) {
  std::vector<int64_t> dims = {8, 16, 32, 64, 128, 256, 512, 1024};
  if (quick) dims = {16, 64, 256};
  std::vector<GemmPoint> out;
  for (int64_t x : dims) {
    const int64_t T = std::max<int64_t>(x, 512), in = x, outd = x;
    auto X = touched(size_t(T * in)), W = touched(size_t(outd * in)), B = touched(size_t(outd));
    auto Y = touched(size_t(T * outd)), dY = touched(size_t(T * outd)), dX = touched(size_t(T * in));
    auto dW = touched(size_t(outd * in)), dB = touched(size_t(outd));
    const double flops = 2.0 * double(T) * double(in) * double(outd);
    const int reps = std::clamp(int(3e8 / flops), 5, quick ? 5 : 60);
    const double fwd = time_median(reps, [&] {
      engine::cpu::linear_forward(Y.data(), X.data(), W.data(), B.data(), T, in, outd);
    });
    const double bwd = time_median(reps, [&] {
      engine::cpu::linear_backward(dX.data(), dW.data(), dB.data(), dY.data(), X.data(), W.data(), T, in, outd);
    });
    out.push_back({std::lround(core::gemm_intensity_dim(double(T), double(outd), double(in))), flops / fwd, 2.0 * flops / bwd});
  }
  return out;
}

Elementwise measure_elementwise(bool quick) {
  const int64_t T = 512, C = quick ? 256 : 512, n = T * C;
  auto x = touched(size_t(n)), y = touched(size_t(n)), z = touched(size_t(n));
  auto g = touched(size_t(C), 1.0f), b = touched(size_t(C), 0.0f), mean = touched(size_t(T)), rstd = touched(size_t(T));
  const double ln = time_median(21, [&] {
    engine::cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), T, C);
  });
  const double gelu = time_median(21, [&] { engine::cpu::gelu_forward(y.data(), x.data(), n); });
  const double res = time_median(21, [&] { engine::cpu::residual_forward(z.data(), x.data(), y.data(), n); });
  Elementwise e;
  e.bandwidth = 2.0 * 3 * double(n) / res;
  e.vector_flops = std::sqrt(8.0 * double(n) / ln * 10.0 * double(n) / gelu);
  return e;
}

std::vector<AttentionPoint> measure_attention(bool quick) {
  std::vector<AttentionPoint> out;
  for (int64_t hd : quick ? std::vector<int64_t>{32, 64} : std::vector<int64_t>{16, 32, 64, 128}) {
    const int64_t B = 2, S = 128, NH = 4, C = hd * NH, T = B * S;
    auto qkv = touched(size_t(T * 3 * C)), o = touched(size_t(T * C)), dout = touched(size_t(T * C));
    auto att = touched(size_t(B * NH * S * S)), dqkv = touched(size_t(T * 3 * C));
    const int reps = quick ? 5 : 15;
    const double fwd = time_median(reps, [&] { engine::cpu::attention_forward(o.data(), att.data(), qkv.data(), B, S, C, NH); });
    const double bwd = time_median(reps, [&] {
      engine::cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, S, C, NH);
    });
    const double flops = 4.0 * double(T) * double(S) * double(C);
    out.push_back({hd, flops / fwd, 2.0 * flops / bwd});
  }
  return out;
}

KernelThreads kernel_threads_from(const std::vector<GemmPoint>& many_gemm, const std::vector<GemmPoint>& one_gemm,
                                  const std::vector<AttentionPoint>& many_attention,
                                  const std::vector<AttentionPoint>& one_attention, int threads) {
  // Each shape's forward and backward (twice the FLOPs) on one thread over on `threads`, keyed by `key`;
  // a shape measured on one side only is left out.
  auto ratios = [threads](const auto& many, const auto& one, auto key) {
    auto seconds = [](const auto& p) { return 1.0 / p.forward + 2.0 / p.backward; };
    std::vector<std::pair<double, double>> out;
    for (const auto& m : many) {
      const auto o = std::find_if(one.begin(), one.end(), [&](const auto& p) { return key(p) == key(m); });
      if (o != one.end()) out.emplace_back(double(key(m)), std::clamp(seconds(*o) / seconds(m), 1.0, double(threads)));
    }
    return out;
  };
  KernelThreads out;
  out.gemm = ratios(many_gemm, one_gemm, [](const GemmPoint& p) { return p.dim; });
  out.attention = ratios(many_attention, one_attention, [](const AttentionPoint& p) { return p.head; });
  return out;
}

KernelThreads measure_kernel_threads(const std::vector<GemmPoint>& gemm, const std::vector<AttentionPoint>& attention,
                                     bool quick) {
  const int threads = openblas_get_num_threads();
  if (threads <= 1) return {};
  std::vector<GemmPoint> gemm1;
  std::vector<AttentionPoint> attention1;
  {
    const ScopedBlasThreads one(1);
    gemm1 = measure_gemm(quick);
    attention1 = measure_attention(quick);
  }
  return kernel_threads_from(gemm, gemm1, attention, attention1, threads);
}

double measure_memory_bandwidth(bool) {
  const size_t n = 1u << 20;  // floats
  auto a = touched(n), b = touched(n);
  const double t = time_median(41, [&] { std::memcpy(b.data(), a.data(), n * sizeof(float)); });
  return 2.0 * double(n * sizeof(float)) / t;
}

LinearFit measure_copy(bool quick) {
  engine::CpuDeviceArena arena(1e12);
  engine::Staging<uint16_t> src(size_t(8) << 20, 1);
  std::vector<std::pair<double, double>> pts;
  for (size_t bytes : {size_t(16) << 10, size_t(256) << 10, size_t(4) << 20, size_t(quick ? 4 : 16) << 20}) {
    const size_t n = std::min(bytes / 2, src.size());
    const double t = time_median(7, [&] {
      engine::DeviceVector<uint16_t> dst(n, engine::DeviceAllocator<uint16_t>(&arena));
      std::copy_n(src.data(), n, dst.data());
      if (dst.empty()) std::abort();
    });
    pts.push_back({double(n * 2), t});
  }
  return fit(pts);
}

DiskFit measure_nvme(const std::string& dir_root, bool quick) {
  // mkdtemp on the disk under test, removed with its files: a pid-named directory there could be a
  // link someone planted first.
  const engine::PrivateDir scratch("zinf-profile-disk", dir_root);
  engine::NvmeStoreOptions o;
  o.dir = scratch.path();
  DiskFit f;
  {
    engine::NvmeStore store(o);
    const uint64_t file = uint64_t(quick ? 32 : 128) << 20;
    auto id = store.create("bench", file);
    engine::Staging<char> buf(file, 7);
    store.write(id, 0, buf.data(), file).wait_or_throw();
    std::vector<std::pair<double, double>> rd, wr;
    // From one page (a small model's shard) to half the file: the fit's latency comes from the small ones.
    for (uint64_t bytes : {uint64_t(4) << 10, uint64_t(16) << 10, uint64_t(64) << 10, uint64_t(1) << 20, uint64_t(8) << 20, file / 2}) {
      const int reps = bytes >= (uint64_t(16) << 20) ? 3 : 7;
      uint64_t off = 0;
      auto next = [&] {
        const uint64_t at = off;
        off = off + 2 * bytes + 4096 > file ? 0 : off + bytes + 4096;
        return at;
      };
      wr.push_back({double(bytes), time_median(reps, [&] { store.write(id, next(), buf.data(), bytes).wait_or_throw(); })});
      rd.push_back({double(bytes), time_median(reps, [&] { store.read(id, next(), buf.data(), bytes).wait_or_throw(); })});
    }
    f.read = fit(rd);
    f.write = fit(wr);
    // Do a read and a write in flight together overlap their latencies (a drive with deep queues)
    // or queue behind each other (a single-queue virtual disk)? 16 KiB requests, latency-bound: a
    // reader alone, then a reader and a writer on the two halves of the file.
    const uint64_t req = uint64_t(16) << 10;
    const double window = quick ? 0.1 : 0.3;
    auto stream = [&](bool write, uint64_t base) {
      uint64_t n = 0;
      const auto t0 = Clock::now();
      while (seconds_since(t0) < window) {
        const uint64_t at = base + (n * req) % (file / 2 - req);
        (write ? store.write(id, at, buf.data() + base, req) : store.read(id, at, buf.data() + base, req)).wait_or_throw();
        ++n;
      }
      return double(n) / seconds_since(t0);
    };
    const double alone = stream(false, 0);
    double reads = 0, writes = 0;
    std::thread writer([&] { writes = stream(true, file / 2); });
    reads = stream(false, 0);
    writer.join();
    f.overlap = (reads + writes) / alone;
    store.remove(id);
  }
  return f;
}

double measure_adam(bool quick) {
  const size_t n = quick ? (1u << 20) : (4u << 20);
  auto master = touched(n), m = touched(n, 0.0f), v = touched(n, 0.0f);
  std::vector<engine::bf16> g(n, engine::to_bf16(0.01f)), p(n);
  engine::CpuAdam adam(engine::AdamOptions{}, 1);
  int64_t step = 0;
  const double t = time_median(5, [&] { adam.step(++step, n, master.data(), m.data(), v.data(), g.data(), p.data()); });
  return double(n) / t;
}

double measure_task_overhead(const core::HwProfile& hw) {
  struct Noop : engine::TaskBackend {
    void run(const core::Task&) override {}
  } noop;
  // gpt-tiny's shape (models/gpt-tiny.yaml)
  const core::ModelSpec spec{.name = "gpt-tiny", .layers = 2, .hidden = 64, .heads = 4, .seq = 64, .vocab = 256, .micro_batch = 2};
  core::RunConfig cfg;
  cfg.params = {false, core::Tier::Host};
  cfg.optimizer = {false, core::Tier::Host};
  const auto planned = models::plan_gpt(spec, hw, cfg, 1).planned;
  engine::Executor ex(planned.program, 0, noop);
  std::vector<double> t;
  for (int i = 0; i < 7; ++i) {
    const auto tl = ex.run_step();
    t.push_back(tl.makespan());
  }
  size_t active = 0;
  for (const auto& task : planned.program.tasks())
    if (task.kind != core::TaskKind::Alloc && task.kind != core::TaskKind::Free) ++active;
  return median(t) / double(std::max<size_t>(1, active));
}

double measure_parallel_throughput(unsigned cores, bool quick) {
  const int64_t T = 512, x = 256;
  const double flops = 6.0 * double(T) * double(x) * double(x);
  auto rate_of = [&](double seconds) {
    auto X = touched(size_t(T * x)), W = touched(size_t(x * x)), B = touched(size_t(x));
    auto Y = touched(size_t(T * x)), dY = touched(size_t(T * x)), dX = touched(size_t(T * x));
    auto dW = touched(size_t(x * x)), dB = touched(size_t(x));
    const auto t0 = Clock::now();
    int64_t n = 0;
    while (seconds_since(t0) < seconds) {
      engine::cpu::linear_forward(Y.data(), X.data(), W.data(), B.data(), T, x, x);
      engine::cpu::linear_backward(dX.data(), dW.data(), dB.data(), dY.data(), X.data(), W.data(), T, x, x);
      ++n;
    }
    return double(n) * flops / seconds_since(t0);
  };
  const ScopedBlasThreads one(1);
  const double seconds = quick ? 0.1 : 0.4;
  const double alone = rate_of(seconds);
  std::vector<double> rates(cores, 0.0);
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < cores; ++i) threads.emplace_back([&rates, &rate_of, i, seconds] { rates[i] = rate_of(seconds); });
  for (auto& t : threads) t.join();
  const double together = std::accumulate(rates.begin(), rates.end(), 0.0);
  return std::clamp(together / alone, 1.0, double(cores));
}

Spread spread(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  auto rank = [&v](double q) {  // nearest rank: the ceil(q n)-th smallest
    return v[std::clamp<size_t>(size_t(std::ceil(q * double(v.size()))), 1, v.size()) - 1];
  };
  return {rank(0.1), median(v), rank(0.9)};
}

BlasSteadiness measure_blas_steadiness(double seconds, double window, int64_t width) {
  if (!(window > 0) || !(seconds > 0) || width < 1)
    throw std::invalid_argument(fmt::format("measure_blas_steadiness: seconds {} and window {} must be positive, width {} at least 1",
                                            seconds, window, width));
  BlasSteadiness out;
  out.width = width;
  out.threads = openblas_get_num_threads();
  if (out.threads <= 1) return out;
  const int64_t T = 512, x = width;
  const double flops = 6.0 * double(T) * double(x) * double(x);
  auto X = touched(size_t(T * x)), W = touched(size_t(x * x)), B = touched(size_t(x));
  auto Y = touched(size_t(T * x)), dY = touched(size_t(T * x)), dX = touched(size_t(T * x));
  auto dW = touched(size_t(x * x)), dB = touched(size_t(x));
  auto rate_for = [&](double s) {
    const auto t0 = Clock::now();
    int64_t n = 0;
    while (n == 0 || seconds_since(t0) < s) {
      engine::cpu::linear_forward(Y.data(), X.data(), W.data(), B.data(), T, x, x);
      engine::cpu::linear_backward(dX.data(), dW.data(), dB.data(), dY.data(), X.data(), W.data(), T, x, x);
      ++n;
    }
    return double(n) * flops / seconds_since(t0);
  };
  rate_for(window);  // warm-up: OpenBLAS's workers awake, buffers touched
  const int pairs = std::max(1, int(std::lround(seconds / (2.0 * window))));
  bool time_trips = usable_cores() >= 2;
  for (int i = 0; i < pairs; ++i) {
    const double shared = rate_for(window);
    double one = 0;
    {
      const ScopedBlasThreads single(1);
      one = rate_for(window);
    }
    out.cores_kept.push_back(shared / one);
    out.one_thread.push_back(one);
    if (time_trips) {
      if (const auto trip = cache_line_round_trip()) {
        out.round_trip.push_back(*trip);
      } else {  // a pair without one would misalign the rest: none at all
        out.round_trip.clear();
        time_trips = false;
      }
    }
  }
  return out;
}

void append_steadiness(BlasSteadiness& into, const BlasSteadiness& more) {
  const bool trips = into.round_trip.size() == into.cores_kept.size() && more.round_trip.size() == more.cores_kept.size();
  into.cores_kept.insert(into.cores_kept.end(), more.cores_kept.begin(), more.cores_kept.end());
  into.one_thread.insert(into.one_thread.end(), more.one_thread.begin(), more.one_thread.end());
  if (trips)
    into.round_trip.insert(into.round_trip.end(), more.round_trip.begin(), more.round_trip.end());
  else
    into.round_trip.clear();
}

std::optional<double> cache_line_round_trip(int batches, int per_batch, double deadline) {
  if (batches < 1 || per_batch < 1)
    throw std::invalid_argument(fmt::format("cache_line_round_trip: {} batches of {} round trips: both must be at least 1", batches, per_batch));
  // The line alone on its cache line, so that nothing else's traffic shares it.
  struct alignas(64) Line {
    std::atomic<int64_t> v{0};  // odd: the other thread's turn; negative: stop
    char pad[64 - sizeof(std::atomic<int64_t>)];
  };
  static_assert(sizeof(Line) == 64);
  Line line;
  std::thread other([&line] {
    // Compare-and-swap, so that a stop written while it answers is not overwritten.
    for (int64_t v; (v = line.v.load(std::memory_order_acquire)) >= 0;)
      if (v & 1) line.v.compare_exchange_strong(v, v + 1, std::memory_order_acq_rel);
  });
  const auto start = Clock::now();
  std::vector<double> per_trip;
  bool late = false;
  for (int b = 0; b < batches && !late && seconds_since(start) < deadline; ++b) {
    const auto t0 = Clock::now();
    for (int i = 0; i < per_batch && !late; ++i) {
      const int64_t v = line.v.load(std::memory_order_relaxed);  // even: ours
      line.v.store(v + 1, std::memory_order_release);
      for (uint32_t spins = 1; line.v.load(std::memory_order_acquire) == v + 1; ++spins)
        if (spins % 4096 == 0 && seconds_since(start) >= deadline) {
          late = true;
          break;
        }
    }
    if (!late) per_trip.push_back(seconds_since(t0) / per_batch);
  }
  line.v.store(-1, std::memory_order_release);
  other.join();
  if (per_trip.empty()) return std::nullopt;
  return *std::min_element(per_trip.begin(), per_trip.end());
}

std::optional<CoresByRoundTrip> cores_by_round_trip(const BlasSteadiness& s) {
  if (s.round_trip.size() != s.cores_kept.size() || s.round_trip.empty()) return std::nullopt;
  const Spread trip = spread(s.round_trip);
  if (trip.ratio() <= 1.5) return std::nullopt;
  const double cut = std::sqrt(trip.p10 * trip.p90);
  std::vector<double> near, far, near_trip, far_trip;
  for (size_t i = 0; i < s.round_trip.size(); ++i) {
    (s.round_trip[i] < cut ? near : far).push_back(s.cores_kept[i]);
    (s.round_trip[i] < cut ? near_trip : far_trip).push_back(s.round_trip[i]);
  }
  if (near.size() < 2 || far.size() < 2) return std::nullopt;
  return CoresByRoundTrip{median(near), median(far), median(near_trip), median(far_trip)};
}

std::string steadiness_warning(const BlasSteadiness& s) {
  if (s.threads <= 1 || s.cores_kept.empty()) return "";
  const Spread kept = spread(s.cores_kept), one = spread(s.one_thread);
  if (kept.ratio() <= 1.15) return "";
  const bool held = one.ratio() <= 1.10;
  const auto split = cores_by_round_trip(s);
  // The round trip explains the cores only where the cores moved with it.
  const bool follows = split && std::max(split->near_cores, split->far_cores) > 1.15 * std::min(split->near_cores, split->far_cores);
  std::string why;
  if (!held)
    why = fmt::format("and one thread's rate moved by {:.0f} % too: the cores' own speed moved as well (other work "
                      "competing for them, or the host)",
                      100.0 * (one.ratio() - 1.0));
  else if (follows)
    why = fmt::format("while one thread's rate held within {:.0f} %: the cores kept their speed, what moved is how cheaply "
                      "they share data",
                      100.0 * (one.ratio() - 1.0));
  else
    why = fmt::format("while one thread's rate held within {:.0f} %: the cores kept their speed, what moved is how "
                      "cheaply they share data or wait for each other (cause not identified here)",
                      100.0 * (one.ratio() - 1.0));
  if (follows)
    why += fmt::format(". In the windows where a cache line went from one core to the other and back in {:.0f} ns the GEMM "
                       "kept {:.2f} cores, where it took {:.0f} ns {:.2f} (on a virtual machine, as when the host moves its "
                       "virtual cores between physical cores that share a cache and cores that do not)",
                       1e9 * split->near_round_trip, split->near_cores, 1e9 * split->far_round_trip, split->far_cores);
  else if (split)
    why += fmt::format(". A cache line's round trip between two cores moved too ({:.0f} ns in some windows, {:.0f} ns in "
                       "others), but the GEMM kept {:.2f} and {:.2f} cores at each: it does not explain the spread",
                       1e9 * split->near_round_trip, 1e9 * split->far_round_trip, split->near_cores, split->far_cores);
  return fmt::format(
      "a GEMM shared by {} BLAS threads kept {:.2f} cores busy in some windows and {:.2f} in others ({:.0f} % apart), {}. "
      "A step on {} BLAS threads can run at either rate for seconds at a time, and the profile holds the one it measured: "
      "predictions on this machine at OPENBLAS_NUM_THREADS={} are uncertain by at least that much (smaller GEMMs, which "
      "synchronize more often per FLOP, can move further). One thread per process "
      "(--threads 1, for the profile and the runs alike) does not depend on it.",
      s.threads, kept.p10, kept.p90, 100.0 * (kept.ratio() - 1.0), why, s.threads, s.threads);
}

std::string steadiness_note(const BlasSteadiness& s) {
  if (s.threads <= 1 || s.cores_kept.empty()) return "";
  const Spread kept = spread(s.cores_kept);
  std::string trip;
  if (!s.round_trip.empty()) {
    const Spread t = spread(s.round_trip);
    trip = fmt::format(", a cache line's round trip between two cores {:.0f}..{:.0f} ns", 1e9 * t.p10, 1e9 * t.p90);
  }
  return fmt::format("; over time a shared GEMM (512 x {0} x {0}) kept {1:.2f}..{2:.2f} cores (p10..p90 of {3} window pairs){4}",
                     s.width, kept.p10, kept.p90, s.cores_kept.size(), trip);
}

// Round trips this far apart (longest over shortest) were taken in two states of the cores. Where this
// was found, one state's round trips were 64-131 ns and the other's 370-450 ns: within a state they
// moved by up to 2x, between states by 2.8x or more.
constexpr double kTwoStates = 2.0;

std::string phase_round_trips(const std::vector<PhaseRoundTrip>& trips) {
  std::string out;
  for (const auto& t : trips) out += fmt::format("{}{} {:.0f} ns", out.empty() ? "" : ", ", t.phase, 1e9 * t.seconds);
  return out;
}

namespace {
// The shortest and the longest of `trips` (not empty).
auto extremes(const std::vector<PhaseRoundTrip>& trips) {
  return std::minmax_element(trips.begin(), trips.end(),
                             [](const PhaseRoundTrip& a, const PhaseRoundTrip& b) { return a.seconds < b.seconds; });
}
// Whether `trips` were taken in two states of the cores.
bool two_states(const std::vector<PhaseRoundTrip>& trips) {
  if (trips.size() < 2) return false;
  const auto [lo, hi] = extremes(trips);
  return lo->seconds > 0 && hi->seconds > kTwoStates * lo->seconds;
}
}  // namespace

std::string phase_round_trip_warning(const std::vector<PhaseRoundTrip>& trips, int blas_threads) {
  if (blas_threads <= 1 || !two_states(trips)) return "";
  const auto [lo, hi] = extremes(trips);
  return fmt::format(
      "a cache line went between two cores and back in {:.0f} ns ({}) but in {:.0f} ns ({}): the phases were measured in two "
      "states of this machine, its cores sharing data cheaply in one and not in the other, and a GEMM shared by {} BLAS "
      "threads runs at a different rate in each. The in-step factors (a kernel in a step over the same kernel alone) then "
      "compare the two states, and predictions at OPENBLAS_NUM_THREADS={} mix them: profile again until the round trips "
      "agree, or run one BLAS thread per process (--threads 1, for the profile and the runs alike)",
      1e9 * lo->seconds, lo->phase, 1e9 * hi->seconds, hi->phase, blas_threads, blas_threads);
}

std::string run_state_note(const std::vector<PhaseRoundTrip>& profile, const std::vector<PhaseRoundTrip>& run, int blas_threads) {
  if (blas_threads <= 1 || profile.empty() || run.empty()) return "";
  std::vector<PhaseRoundTrip> all = profile;
  all.insert(all.end(), run.begin(), run.end());
  if (!two_states(all)) return "";
  const char* where = two_states(profile) ? "the profile itself saw both states, so its figures mix them"
                      : two_states(run)   ? "the state changed during this run"
                                          : "the state changed between the profile and this run";
  return fmt::format(
      "a cache line between two cores and back took {} while the profile measured, and {} around this run: this "
      "machine's cores share data at two costs, a GEMM shared by {} BLAS threads runs at a different rate in each, "
      "and {}; the error includes that change (see `zinf profile-hw`'s \"shared GEMM over time\")",
      phase_round_trips(profile), phase_round_trips(run), blas_threads, where);
}

double measure_background_threads(unsigned cores, double seconds) {
  std::vector<double> share(cores, 1.0);
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < cores; ++i)
    threads.emplace_back([&share, i, seconds] {
      timespec c0{}, c1{};
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
      const auto t0 = Clock::now();
      volatile uint64_t spin = 0;
      while (seconds_since(t0) < seconds)
        for (int k = 0; k < 1000; ++k) spin = spin + 1;
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
      const double cpu = double(c1.tv_sec - c0.tv_sec) + 1e-9 * double(c1.tv_nsec - c0.tv_nsec);
      share[i] = std::clamp(cpu / seconds_since(t0), 1e-3, 1.0);
    });
  for (auto& t : threads) t.join();
  return std::max(0.0, double(cores) / median(share) - double(cores));
}

}  // namespace zinf::engine::probe
