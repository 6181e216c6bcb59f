// A sweep spec's points: its groups' product, expanded in spec order. Pure functions.
#include <fmt/format.h>

#include "core/errors.hpp"
#include "core/sweep_spec.hpp"

namespace zinf::core {

const char* to_string(SweepTarget t) {
  switch (t) {
    case SweepTarget::Model: return "model";
    case SweepTarget::Hwprofile: return "hwprofile";
    case SweepTarget::Config: return "config";
  }
  return "?";
}

std::string SweepAxis::column() const {
  return std::string(to_string(target)) + "." + key + (scale ? " (scale)" : "");
}

std::vector<const SweepAxis*> SweepSpec::field_axes() const {
  std::vector<const SweepAxis*> out;
  for (const auto& g : groups)
    for (const auto& a : g.axes)
      if (a.kind == SweepAxis::Kind::Field) out.push_back(&a);
  return out;
}

std::string SweepPoint::key() const {
  std::string k = model + "|" + hwprofile + "|" + std::to_string(nodes) + "|" + config;
  for (const auto& c : coords) {
    k += '|';
    k += c;
  }
  return k;
}

uint64_t point_count(const SweepSpec& spec) {
  uint64_t n = 1;
  std::string sizes;
  for (const auto& g : spec.groups) {
    const uint64_t size = g.size();
    sizes += (sizes.empty() ? "" : " x ") + std::to_string(size);
    if (__builtin_mul_overflow(n, size, &n) || n > kMaxSweepPoints)
      throw ConfigError(spec.path, "",
                        fmt::format("the axes multiply to more than {} points ({}{}); zinf sweep runs at most {} points "
                                    "per spec: split it, or zip axes that advance together",
                                    kMaxSweepPoints, sizes, g.size() && &g != &spec.groups.back() ? " x ..." : "",
                                    kMaxSweepPoints));
  }
  return spec.groups.empty() ? 0 : n;
}

std::vector<SweepPoint> expand(const SweepSpec& spec) {
  std::vector<SweepPoint> out;
  out.reserve(size_t(point_count(spec)));
  std::vector<size_t> at(spec.groups.size(), 0);
  for (const auto& g : spec.groups)
    if (g.size() == 0) return out;
  while (true) {
    SweepPoint p;
    for (size_t gi = 0; gi < spec.groups.size(); ++gi) {
      const size_t i = at[gi];
      for (const auto& a : spec.groups[gi].axes) {
        switch (a.kind) {
          case SweepAxis::Kind::Models: p.model = a.texts[i]; break;
          case SweepAxis::Kind::Hwprofiles: p.hwprofile = a.texts[i]; break;
          case SweepAxis::Kind::Configs: p.config = a.texts[i]; break;
          case SweepAxis::Kind::Nodes: p.nodes = std::stoi(a.texts[i]); break;
          case SweepAxis::Kind::Field: {
            FieldOverride o{a.target, a.key, a.scale, a.scale ? YAML::Node() : a.values[i],
                            a.scale ? a.factors[i] : 1.0, fmt::format("{}:{}", spec.path, a.lines[i])};
            p.overrides.push_back(std::move(o));
            p.coords.push_back(a.texts[i]);
            break;
          }
        }
      }
    }
    out.push_back(std::move(p));
    // Odometer: the last group turns fastest.
    size_t gi = spec.groups.size();
    while (gi > 0) {
      --gi;
      if (++at[gi] < spec.groups[gi].size()) break;
      at[gi] = 0;
      if (gi == 0) return out;
    }
    if (spec.groups.empty()) return out;
  }
}

}  // namespace zinf::core
