#include "formats/hwprofile_writer.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

namespace zinf::core {

namespace {

// yaml-cpp's Emitter with the profile's conventions on top: every field's note (looked up by its
// path) as a comment after its value, numbers as fmt's shortest round-tripping text or rounded to
// `significant_digits` (yaml-cpp's own double output is max_digits10, e.g. 0.068 as
// 0.068000000000000005), strings double-quoted.
class ProfileEmitter {
public:
  explicit ProfileEmitter(const HwProfileNotes& notes) : notes_(notes) {
    out_.SetIndent(2);
    out_.SetBoolFormat(YAML::TrueFalseBool);
  }

  void open(const std::string& key) {
    out_ << YAML::Key << key << YAML::Value;
    note(path(key));
    out_ << YAML::BeginMap;
    stack_.push_back(key);
  }
  void close() {
    out_ << YAML::EndMap;
    stack_.pop_back();
  }
  void number(const std::string& key, double v) { field(key, [&] { scalar(v); }); }
  void integer(const std::string& key, long long v) { field(key, [&] { out_ << v; }); }
  void boolean(const std::string& key, bool v) { field(key, [&] { out_ << v; }); }
  void text(const std::string& key, const std::string& v) { field(key, [&] { out_ << YAML::DoubleQuoted << v; }); }
  void curve(const std::string& key, const Curve& c) {
    if (c.points.empty()) return;  // absent: the reader's default
    field(key, [&] {
      out_ << YAML::Flow << YAML::BeginSeq;
      for (const auto& [x, y] : c.points) {
        out_ << YAML::Flow << YAML::BeginSeq;
        scalar(x);
        scalar(y);
        out_ << YAML::EndSeq;
      }
      out_ << YAML::EndSeq;
    });
  }
  // A flow map of numbers on one line: `key: {a: 1, b: 2}`.
  void numbers(const std::string& key, const std::vector<std::pair<std::string, double>>& values) {
    field(key, [&] {
      out_ << YAML::Flow << YAML::BeginMap;
      for (const auto& [k, v] : values) {
        out_ << YAML::Key << k << YAML::Value;
        scalar(v);
      }
      out_ << YAML::EndMap;
    });
  }
  void integers(const std::string& key, const std::vector<int>& values) {
    field(key, [&] {
      out_ << YAML::Flow << YAML::BeginSeq;
      for (int v : values) out_ << v;
      out_ << YAML::EndSeq;
    });
  }
  void texts(const std::string& key, const std::vector<std::string>& values) {
    field(key, [&] {
      out_ << YAML::BeginSeq;
      for (const auto& v : values) out_ << YAML::DoubleQuoted << v;
      out_ << YAML::EndSeq;
    });
  }
  // The header: comment lines above the document.
  void header(const std::vector<std::string>& lines) {
    std::string text;
    for (const auto& l : lines) text += (text.empty() ? "" : "\n") + l;
    if (!text.empty()) out_ << YAML::Comment(text);
  }
  void begin() { out_ << YAML::BeginMap; }
  std::string end() {
    out_ << YAML::EndMap;
    if (!out_.good()) throw std::logic_error("hwprofile_to_yaml: yaml-cpp's emitter: " + out_.GetLastError());
    return std::string(out_.c_str()) + "\n";
  }

private:
  template <class Write>
  void field(const std::string& key, Write write) {
    out_ << YAML::Key << key << YAML::Value;
    write();
    note(path(key));
  }
  void scalar(double v) {
    if (!std::isfinite(v)) {
      out_ << v;  // yaml-cpp's .inf / .nan
      return;
    }
    const int digits = notes_.significant_digits;
    out_ << (digits > 0 ? fmt::format("{:.{}g}", v, digits) : fmt::format("{}", v));
  }
  void note(const std::string& field) {
    if (auto it = notes_.fields.find(field); it != notes_.fields.end() && !it->second.empty()) out_ << YAML::Comment(it->second);
  }
  std::string path(const std::string& key) const {
    std::string p;
    for (const auto& k : stack_) p += k + ".";
    return p + key;
  }
  const HwProfileNotes& notes_;
  YAML::Emitter out_;
  std::vector<std::string> stack_;
};

// node.gpu: its rates, curves, variability and in-step factors.
void write_gpu(ProfileEmitter& e, const GpuSpec& g) {
  e.open("gpu");
  e.text("name", g.name);
  e.number("memory", g.memory);
  if (g.working_bytes == 4) e.text("working_precision", "fp32");  // bf16, the default, is left out
  e.number("peak_flops", g.peak_flops);
  if (!(g.bf16_native && g.fp16_native))  // both, the default, is left out
    e.texts("half_precisions", g.bf16_native ? std::vector<std::string>{"bf16"} : std::vector<std::string>{"fp16"});
  if (g.peak_flops_fp32 > 0) e.number("peak_flops_fp32", g.peak_flops_fp32);
  e.number("memory_bandwidth", g.memory_bandwidth);
  e.number("kernel_launch", g.kernel_launch);
  e.curve("gemm_efficiency", g.gemm_efficiency);
  e.curve("gemm_forward_efficiency", g.gemm_forward_efficiency);
  e.number("elementwise_efficiency", g.elementwise_efficiency);
  e.number("vector_flops", g.vector_flops);
  e.curve("attention_forward_efficiency", g.attention_forward_efficiency);
  e.curve("attention_backward_efficiency", g.attention_backward_efficiency);
  e.curve("gemm_threads", g.gemm_threads);
  e.curve("attention_threads", g.attention_threads);
  if (g.has_variability()) {
    e.open("variability");
    e.number("spread", g.variability_spread);
    e.number("outliers", g.variability_outliers);
    e.number("slowest", g.variability_slowest);
    e.close();
  }
  if (!g.in_step_slowdown.empty()) {
    e.open("in_step_slowdown");
    for (const auto& key : in_step_keys())  // the reader's order; unknown keys cannot be in a profile
      if (auto it = g.in_step_slowdown.find(key); it != g.in_step_slowdown.end()) e.number(key, it->second);
    e.close();
  }
  e.close();
}

}  // namespace

std::string hwprofile_to_yaml(const HwProfile& hw, const HwProfileNotes& notes) {
  ProfileEmitter e(notes);
  e.header(notes.header);
  e.begin();
  e.text("name", hw.name);
  if (!hw.description.empty()) e.text("description", hw.description);
  if (!notes.sources.empty()) e.texts("sources", notes.sources);
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
    if (!m.blas.empty()) e.text("blas", m.blas);
    if (m.blas_threads > 0) e.integer("blas_threads", m.blas_threads);
    if (!m.blas_threads_from.empty()) e.text("blas_threads_from", m.blas_threads_from);
    if (!m.round_trips.empty()) e.numbers("round_trips", m.round_trips);
    e.close();
  }
  const NodeSpec& n = hw.node;
  e.open("node");
  e.integer("gpus", n.gpus);
  write_gpu(e, n.gpu);
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
  e.numbers("in_step_slowdown", {{"read", n.nvme_read_in_step}, {"write", n.nvme_write_in_step}});
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
  if (hw.fabric.is_tree()) {
    e.open("tree");
    e.integers("children", hw.fabric.tree_children);
    e.integers("parents", hw.fabric.tree_parents);
    e.number("link_bandwidth", hw.fabric.tree_link_bandwidth);
    e.text("placement", hw.fabric.placement);
    e.close();
  }
  e.close();
  if (hw.nccl.enabled()) {
    e.open("nccl");
    e.text("release", hw.nccl.release);
    e.integer("sm", hw.nccl.sm);
    e.boolean("ll128", hw.nccl.ll128);
    e.text("cpu", hw.nccl.amd_cpu ? "amd" : "intel");
    e.close();
  }
  e.open("reserve");
  e.number("gpu", hw.reserve.gpu);
  e.number("host", hw.reserve.host);
  e.number("nvme", hw.reserve.nvme);
  e.close();
  return e.end();
}

}  // namespace zinf::core
