#include "sim/gpu_variability.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace zinf::sim {

namespace {

constexpr double kNormalIqr = 1.3489795003921634;  // Q3 - Q1 of the standard normal

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// A uniform in (0, 1) for (seed, rank, stream): counter-based, so a rank's draw never depends on
// how many others were drawn.
double uniform(uint64_t seed, int rank, uint64_t stream) {
  const uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(rank)) ^ stream);
  return (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53;
}

struct Shape {
  double sigma = 0;    // the normal core's standard deviation, as a fraction of the median
  double fence = 1;    // the upper whisker: 1 + 2 IQR
  double outliers = 0;
  double slowest = 1;
};

Shape shape(const core::GpuSpec& g) {
  Shape s;
  s.sigma = g.variability_spread / 4 / kNormalIqr;
  s.fence = 1 + g.variability_spread / 2;
  s.outliers = g.variability_outliers;
  s.slowest = std::max(g.variability_slowest, s.fence);
  return s;
}

double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

double cdf(const Shape& s, double t) {
  const double core = s.sigma > 0 ? normal_cdf((t - 1) / s.sigma) : (t >= 1 ? 1.0 : 0.0);
  const double tail = s.slowest > s.fence ? std::clamp((t - s.fence) / (s.slowest - s.fence), 0.0, 1.0) : (t >= s.fence ? 1.0 : 0.0);
  return (1 - s.outliers) * core + s.outliers * tail;
}

}  // namespace

// Acklam's rational approximation, then one Halley step on the exact CDF (relative error < 1e-15).
double normal_quantile(double u) {
  if (!(u > 0 && u < 1)) throw std::invalid_argument("normal_quantile: u must be in (0, 1)");
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                             1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01,  -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00};
  const double low = 0.02425;
  double x;
  if (u < low) {
    const double q = std::sqrt(-2 * std::log(u));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (u <= 1 - low) {
    const double q = u - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  } else {
    const double q = std::sqrt(-2 * std::log(1 - u));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  const double e = normal_cdf(x) - u;
  const double g = e * std::sqrt(2 * M_PI) * std::exp(x * x / 2);
  return x - g / (1 + x * g / 2);
}

double gpu_time_factor(const core::GpuSpec& gpu, uint64_t seed, int rank) {
  if (!gpu.has_variability()) return 1.0;
  const Shape s = shape(gpu);
  if (uniform(seed, rank, 1) < s.outliers) return s.fence + uniform(seed, rank, 2) * (s.slowest - s.fence);
  // A kernel never runs faster than half the median's time: the normal's far tail is not a GPU.
  return std::max(0.5, 1 + s.sigma * normal_quantile(uniform(seed, rank, 3)));
}

double slowest_gpu(const core::GpuSpec& gpu, uint64_t seed, int ranks) {
  double worst = 1.0;
  for (int r = 0; r < ranks; ++r) worst = r == 0 ? gpu_time_factor(gpu, seed, r) : std::max(worst, gpu_time_factor(gpu, seed, r));
  return worst;
}

double gpu_time_quantile(const core::GpuSpec& gpu, double u) {
  if (!(u > 0 && u < 1)) throw std::invalid_argument("gpu_time_quantile: u must be in (0, 1)");
  const Shape s = shape(gpu);
  double lo = 1 - 12 * s.sigma - 1e-12, hi = std::max(s.slowest, 1 + 12 * s.sigma) + 1e-12;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (cdf(s, mid) < u ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// E[max] = lo + integral from lo to hi of (1 - F(t)^n) dt, by the trapezoid rule on a fine grid
// (F is 0 below lo and 1 above hi to double precision).
double expected_slowest_gpu(const core::GpuSpec& gpu, int ranks) {
  if (!gpu.has_variability() || ranks < 1) return 1.0;
  const Shape s = shape(gpu);
  const double lo = 1 - 12 * s.sigma, hi = std::max(s.slowest, 1 + 12 * s.sigma);
  const int steps = 200000;
  const double h = (hi - lo) / steps;
  double sum = 0;
  for (int i = 0; i <= steps; ++i) {
    const double f = 1 - std::pow(cdf(s, lo + i * h), ranks);
    sum += (i == 0 || i == steps) ? f / 2 : f;
  }
  return lo + sum * h;
}

}  // namespace zinf::sim
