#include "core/hwprofile_writer.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace zinf::core {

namespace {

// Emits `key: value` lines at an indentation, each with its note when the notes name its path.
class Emitter {
public:
  explicit Emitter(const HwProfileNotes& notes) : notes_(notes), digits_(notes.significant_digits) {}

  void open(const std::string& key) {
    line(key + ":", path(key));
    stack_.push_back(key);
  }
  void close() { stack_.pop_back(); }
  void value(const std::string& key, const std::string& v) { line(key + ": " + v, path(key)); }
  void number(const std::string& key, double v) { value(key, num(v)); }
  void integer(const std::string& key, long long v) { value(key, std::to_string(v)); }
  void boolean(const std::string& key, bool v) { value(key, v ? "true" : "false"); }
  void text(const std::string& key, const std::string& v) { value(key, quote(v)); }
  void curve(const std::string& key, const Curve& c) {
    if (c.points.empty()) return;  // absent: the reader's default
    std::string s;
    for (const auto& [x, y] : c.points) s += fmt::format("{}[{}, {}]", s.empty() ? "" : ", ", num(x), num(y));
    value(key, "[" + s + "]");
  }
  void raw(const std::string& text) { out_ += text; }
  std::string take() { return std::move(out_); }

  std::string num(double v) const { return digits_ > 0 ? fmt::format("{:.{}g}", v, digits_) : fmt::format("{}", v); }
  static std::string quote(const std::string& s) {
    std::string q = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') q += '\\';
      q += c;
    }
    return q + "\"";
  }

private:
  std::string path(const std::string& key) const {
    std::string p;
    for (const auto& k : stack_) p += k + ".";
    return p + key;
  }
  void line(const std::string& body, const std::string& field) {
    std::string l = std::string(2 * stack_.size(), ' ') + body;
    if (auto it = notes_.fields.find(field); it != notes_.fields.end() && !it->second.empty())
      l += std::string(std::max<size_t>(2, 40 - std::min<size_t>(l.size(), 38)), ' ') + "# " + it->second;
    out_ += l + "\n";
  }
  const HwProfileNotes& notes_;
  int digits_;
  std::vector<std::string> stack_;
  std::string out_;
};

}  // namespace

std::string hwprofile_to_yaml(const HwProfile& hw, const HwProfileNotes& notes) {
  Emitter e(notes);
  for (const auto& h : notes.header) e.raw("# " + h + "\n");
  e.text("name", hw.name);
  if (!hw.description.empty()) e.text("description", hw.description);
  if (!notes.sources.empty()) {
    e.raw("sources:\n");
    for (const auto& s : notes.sources) e.raw("  - " + Emitter::quote(s) + "\n");
  }
  if (!hw.measured_on.empty()) {
    const auto& m = hw.measured_on;
    e.open("measured_on");
    e.text("cpu", m.cpu);
    std::string flags;
    for (const auto& f : m.cpu_flags) flags += (flags.empty() ? "" : " ") + f;
    e.text("cpu_flags", flags);
    e.integer("cores", m.cores);
    e.number("memory", m.memory);
    if (!m.disk.empty()) e.text("disk", m.disk);
    e.close();
  }
  const NodeSpec& n = hw.node;
  e.open("node");
  e.integer("gpus", n.gpus);
  {
    const GpuSpec& g = n.gpu;
    e.open("gpu");
    e.text("name", g.name);
    e.number("memory", g.memory);
    if (g.working_bytes == 4) e.text("working_precision", "fp32");  // bf16, the default, is left out
    e.number("peak_flops", g.peak_flops);
    e.number("memory_bandwidth", g.memory_bandwidth);
    e.number("kernel_launch", g.kernel_launch);
    e.curve("gemm_efficiency", g.gemm_efficiency);
    e.curve("gemm_forward_efficiency", g.gemm_forward_efficiency);
    e.number("elementwise_efficiency", g.elementwise_efficiency);
    e.number("vector_flops", g.vector_flops);
    e.curve("attention_forward_efficiency", g.attention_forward_efficiency);
    e.curve("attention_backward_efficiency", g.attention_backward_efficiency);
    if (!g.in_step_slowdown.empty()) {
      e.open("in_step_slowdown");
      for (const auto& key : in_step_keys())  // the reader's order; unknown keys cannot be in a profile
        if (auto it = g.in_step_slowdown.find(key); it != g.in_step_slowdown.end()) e.number(key, it->second);
      e.close();
    }
    e.close();
  }
  e.open("host");
  e.number("memory", n.host_memory);
  e.number("memory_bandwidth", n.host_memory_bandwidth);
  e.integer("sockets", n.cpu_sockets);
  e.integer("cores", n.cpu_cores);
  e.number("adam_params_per_s", n.cpu_adam_rate);
  e.boolean("device_shares_cores", n.device_shares_host_cores);
  e.number("background_threads", n.background_threads);
  e.number("parallel_throughput", n.parallel_throughput);
  e.curve("rank_skew", n.rank_skew);
  e.close();
  e.open("nvme");
  e.number("capacity", n.nvme_capacity);
  e.integer("drives", n.nvme_drives);
  e.number("read_bandwidth", n.nvme_read_bandwidth);
  e.number("write_bandwidth", n.nvme_write_bandwidth);
  e.number("latency", n.nvme_latency);
  e.boolean("serial_requests", n.nvme_serial_requests);
  e.value("in_step_slowdown",
          fmt::format("{{read: {}, write: {}}}", e.num(n.nvme_read_in_step), e.num(n.nvme_write_in_step)));
  e.close();
  e.open("pcie");
  e.number("bandwidth_per_gpu", n.pcie_bandwidth);
  e.integer("gpus_per_switch", n.gpus_per_pcie_switch);
  e.number("switch_uplink", n.pcie_switch_uplink);
  e.number("latency", n.pcie_latency);
  e.close();
  e.open("nvlink");
  e.number("bandwidth_per_gpu", n.nvlink_bandwidth);
  e.number("latency", n.nvlink_latency);
  e.close();
  e.open("nic");
  e.integer("count", n.nics);
  e.number("bandwidth", n.nic_bandwidth);
  e.close();
  if (n.has_gds()) {
    e.open("gds");
    e.number("bandwidth_per_switch", n.gds_bandwidth);
    e.close();
  }
  e.close();  // node
  e.open("fabric");
  e.text("topology", hw.fabric.topology);
  e.number("latency", hw.fabric.latency);
  e.close();
  e.open("reserve");
  e.number("gpu", hw.reserve.gpu);
  e.number("host", hw.reserve.host);
  e.number("nvme", hw.reserve.nvme);
  e.close();
  return e.take();
}

}  // namespace zinf::core
