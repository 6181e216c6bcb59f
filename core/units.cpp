#include "core/units.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fmt/format.h>

namespace zinf::core {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Multiplier of a metric or binary prefix at the start of `unit`; consumes it.
double take_prefix(std::string_view& unit) {
  struct P { const char* name; double mult; };
  static const P prefixes[] = {
      {"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0},
      {"Pi", 1125899906842624.0}, {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15},
      {"E", 1e18}};
  for (const auto& p : prefixes) {
    std::string_view n(p.name);
    if (unit.substr(0, n.size()) == n && unit.size() > n.size()) {
      unit.remove_prefix(n.size());
      return p.mult;
    }
  }
  return 1.0;
}

}  // namespace

static std::optional<double> parse_quantity_unchecked(std::string_view text, UnitKind kind) {
  text = trim(text);
  if (text.empty()) return std::nullopt;
  std::string buf(text);
  char* end = nullptr;
  double value = std::strtod(buf.c_str(), &end);
  if (end == buf.c_str() || !std::isfinite(value)) return std::nullopt;
  std::string_view unit = trim(std::string_view(end));
  if (unit.empty()) return value;
  if (kind == UnitKind::Count) {
    // 1.4B, 70B, 1T, 10k, 2M for parameter counts
    if (unit == "k" || unit == "K") return value * 1e3;
    if (unit == "M") return value * 1e6;
    if (unit == "B") return value * 1e9;
    if (unit == "T") return value * 1e12;
    return std::nullopt;
  }
  if (kind == UnitKind::Seconds) {
    if (unit == "s") return value;
    if (unit == "ms") return value * 1e-3;
    if (unit == "us") return value * 1e-6;
    if (unit == "ns") return value * 1e-9;
    return std::nullopt;
  }
  double mult = take_prefix(unit);
  switch (kind) {
    case UnitKind::Bytes:
      if (unit == "B") return value * mult;
      return std::nullopt;
    case UnitKind::BytesPerSecond:
      if (unit == "B/s") return value * mult;
      if (unit == "b/s" || unit == "bit/s") return value * mult / 8.0;  // 100 Gb/s links
      return std::nullopt;
    case UnitKind::FlopsPerSecond:
      if (unit == "FLOP/s" || unit == "FLOPS" || unit == "flop/s") return value * mult;
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

// A value and unit that multiply past the largest double (1e300 T) are no number either.
std::optional<double> parse_quantity(std::string_view text, UnitKind kind) {
  auto v = parse_quantity_unchecked(text, kind);
  if (v && !std::isfinite(*v)) return std::nullopt;
  return v;
}

namespace {
std::string with_prefix(double v, const char* unit) {
  static const char* names[] = {"", "k", "M", "G", "T", "P", "E"};
  int i = 0;
  double a = std::fabs(v);
  while (a >= 1000.0 && i < 6) { a /= 1000.0; v /= 1000.0; ++i; }
  int decimals = a >= 100 ? 0 : a >= 10 ? 1 : 2;
  return fmt::format("{:.{}f} {}{}", v, decimals, names[i], unit);
}
}  // namespace

std::string format_bytes(double bytes) { return with_prefix(bytes, "B"); }
std::string format_bandwidth(double bps) { return with_prefix(bps, "B/s"); }
std::string format_flops(double f) { return with_prefix(f, "FLOP/s"); }
std::string format_seconds(double s) {
  if (s >= 1.0) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.3f} ms", s * 1e3);
  return fmt::format("{:.3f} us", s * 1e6);
}
std::string format_count(double n) {
  static const char* names[] = {"", "K", "M", "B", "T"};
  int i = 0;
  while (std::fabs(n) >= 1000.0 && i < 4) { n /= 1000.0; ++i; }
  int decimals = std::fabs(n) >= 100 ? 0 : std::fabs(n) >= 10 ? 1 : 2;
  return fmt::format("{:.{}f}{}", n, decimals, names[i]);
}

}  // namespace zinf::core
