// zinf validate's comparison arithmetic on synthetic Timelines, the colocated profile of N ranks on
// one machine, and `zinf profile-hw --quick` writing a profile that loads with every field set.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <algorithm>
#include <sstream>
#include <string>

#include "core/hwprofile.hpp"
#include "formats/hwprofile_writer.hpp"
#include "core/validation.hpp"
#include "engine/build_info.hpp"
#include "engine/machine_info.hpp"
#include "test_paths.hpp"
#include "formats/hwprofile_reader.hpp"

using namespace zinf::core;

namespace {
std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

TEST_CASE("summarize_steps skips the warm-up step and gives median and spread") {
  auto s = summarize_steps({9.0, 1.0, 3.0, 2.0, 4.0});
  CHECK(s.steps == 4);
  CHECK(s.median == Approx(2.5));
  CHECK(s.min == 1.0);
  CHECK(s.max == 4.0);
  CHECK(summarize_steps({5.0, 1.0, 2.0, 3.0}).median == 2.0);
  CHECK(summarize_steps({7.0}).median == 7.0);  // nothing left after the skip: all of them
  CHECK_THROWS(summarize_steps({}));
}

TEST_CASE("lane_busy sums each lane's durations and averages over ranks") {
  Timeline t;
  t.events.push_back({0, Lane::Compute, 1, TaskKind::Forward, "a", 0.0, 1.0, 0, 0});
  t.events.push_back({0, Lane::Compute, 2, TaskKind::Backward, "b", 1.5, 2.0, 0, 0});
  t.events.push_back({1, Lane::Compute, 1, TaskKind::Forward, "a", 0.0, 0.5, 0, 0});
  t.events.push_back({1, Lane::NvmeRead, 3, TaskKind::NvmeRead, "c", 0.0, 0.4, 0, 0});
  auto b = lane_busy(t);
  CHECK(b[size_t(Lane::Compute)] == Approx((1.5 + 0.5) / 2));
  CHECK(b[size_t(Lane::NvmeRead)] == Approx(0.2));
  CHECK(b[size_t(Lane::Comm)] == 0.0);
  CHECK(lane_busy(Timeline{})[0] == 0.0);

  LaneSeconds x{}, y{}, z{};
  x[0] = 1;
  y[0] = 3;
  z[0] = 2;
  CHECK(median_lane_busy({x, y, z})[0] == 2.0);
}

TEST_CASE("relative error and the suite's error summary") {
  CHECK(relative_error(1.1, 1.0) == Approx(0.1));
  CHECK(relative_error(0.8, 1.0) == Approx(-0.2));
  CHECK(relative_error(0.0, 0.0) == 0.0);
  CHECK(relative_error(1.0, 0.0) == std::numeric_limits<double>::infinity());
  auto s = summarize_errors({0.1, -0.3, 0.02, -0.05});
  CHECK(s.median_abs == Approx(0.075));
  CHECK(s.max_abs == Approx(0.3));
}

TEST_CASE("colocate: N ranks share one profiled machine") {
  auto hw = load_hwprofile(zinf::test::source("hwprofiles/cpu-dev.yaml"));
  REQUIRE(hw.node.cpu_cores == 2);
  auto one = colocate(hw, 1);
  CHECK(one.node.gpus == 1);
  CHECK(one.node.gpu.peak_flops == hw.node.gpu.peak_flops);
  auto two = colocate(hw, 2);
  CHECK(two.node.gpus == 2);
  CHECK(two.node.gpu.peak_flops == hw.node.gpu.peak_flops);  // a core each
  CHECK(two.node.cpu_adam_rate == 2 * hw.node.cpu_adam_rate);
  auto four = colocate(hw, 4);
  CHECK(four.node.gpus == 4);
  CHECK(four.node.gpu.peak_flops == Approx(hw.node.gpu.peak_flops / 2));  // two ranks per core
  CHECK(four.node.cpu_adam_rate == 2 * hw.node.cpu_adam_rate);
  CHECK(four.node.nvme_read_bandwidth == hw.node.nvme_read_bandwidth);  // one disk, shared in the simulation
  CHECK_THROWS(colocate(hw, 0));
  // A profile whose device shares the host's cores keeps one thread's rates: the simulator's
  // core pool shares them.
  hw.node.device_shares_host_cores = true;
  auto shared = colocate(hw, 4);
  CHECK(shared.node.gpus == 4);
  CHECK(shared.node.gpu.peak_flops == hw.node.gpu.peak_flops);
  CHECK(shared.node.cpu_adam_rate == hw.node.cpu_adam_rate);
}

TEST_CASE("zinf profile-hw --quick writes a profile that loads with every measured field") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("zinf-profile-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string out = (dir / "local.yaml").string();
  const std::string cmd = "OPENBLAS_NUM_THREADS=1 " + std::string(ZINF_BINARY_DIR) + "/zinf profile-hw --quick --no-mpi --out " +
                          out + " --nvme-dir " + dir.string() + " > " + (dir / "log.txt").string() + " 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  auto hw = load_hwprofile(out);
  CHECK(hw.name == "local");
  CHECK(hw.node.gpus == 1);
  CHECK(hw.node.gpu.peak_flops > 0);
  CHECK(hw.node.gpu.memory_bandwidth > 0);
  CHECK(hw.node.gpu.kernel_launch > 0);
  CHECK(hw.node.gpu.gemm_efficiency.points.size() >= 3);
  for (const auto& [x, y] : hw.node.gpu.gemm_efficiency.points) CHECK((y > 0 && y <= 1));
  CHECK(hw.node.gpu.elementwise_efficiency > 0);
  CHECK(hw.node.gpu.vector_flops > 0);
  CHECK(hw.node.gpu.gemm_forward_efficiency.points.size() == hw.node.gpu.gemm_efficiency.points.size());
  CHECK(hw.node.gpu.attention_forward_efficiency.points.size() >= 2);
  CHECK(hw.node.gpu.attention_backward_efficiency.points.size() >= 2);
  // Kernels inside a step, per kind, from the two calibration models: every kind a GPT runs.
  for (const char* key : {"linear_forward", "linear_backward", "attention_forward", "attention_backward", "layernorm_forward",
                          "gelu_backward", "residual_forward", "loss_forward", "optimizer"}) {
    INFO(key);
    CHECK(hw.node.gpu.in_step_slowdown.count(key) == 1);
    CHECK((hw.node.gpu.in_step(key) >= 0.1 && hw.node.gpu.in_step(key) <= 20));
  }
  // Two hand-offs: a compute task's in a compute-bound step is kernel_launch; the one of a step
  // whose lanes wake one another is part of every transfer's latency. Both are printed.
  CHECK(hw.node.nvme_latency > 0);
  CHECK(hw.node.pcie_latency > 0);
  {
    std::ifstream log(dir / "log.txt");
    const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    CHECK(text.find("in a compute-bound step") != std::string::npos);
  }
  CHECK(hw.node.nvme_read_in_step > 0);
  CHECK(hw.node.nvme_write_in_step > 0);
  CHECK(hw.node.host_memory > 0);
  CHECK(hw.node.cpu_cores >= 1);
  CHECK(hw.node.cpu_adam_rate > 0);
  CHECK(hw.node.device_shares_host_cores);  // the CPU backend's compute runs on these cores
  CHECK(hw.node.background_threads >= 0);
  CHECK((hw.node.parallel_throughput >= 1 && hw.node.parallel_throughput <= hw.node.cpu_cores));
  CHECK(hw.node.nvme_capacity > 0);
  CHECK(hw.node.nvme_read_bandwidth > 0);
  CHECK(hw.node.nvme_write_bandwidth > 0);
  CHECK(hw.node.nvme_latency > 0);
  CHECK(hw.node.pcie_bandwidth > 0);
  CHECK(hw.node.nvlink_bandwidth > 0);
  CHECK(hw.node.nic_bandwidth > 0);
  // It records the machine it measured, and says so when asked; a profile from another machine is named.
  CHECK(hw.measured_on.cpu == zinf::engine::this_machine(dir.string()).cpu);
  CHECK(hw.measured_on.blas_threads == 1);
  CHECK(hw.measured_on.blas_threads_from == "OPENBLAS_NUM_THREADS");
  // This process stands in for a zinf command run as the profile was: one BLAS thread.
  zinf::engine::pin_blas_threads("1");
  CHECK(machine_differences(hw.measured_on, zinf::engine::this_machine(dir.string())).empty());
  const std::string zinf = std::string(ZINF_BINARY_DIR) + "/zinf";
  const std::string check_log = (dir / "check.txt").string();
  CHECK(std::system((zinf + " profile-hw --threads 1 --check " + out + " --nvme-dir " + dir.string() + " > " + check_log + " 2>&1").c_str()) == 0);
  std::string text = read_text(check_log);
  CHECK_THAT(text, Catch::Contains("measured on this machine"));
  std::string other = read_text(out);
  const std::string cores_line = "  cores: " + std::to_string(hw.measured_on.cores) + "\n";
  REQUIRE(other.find(cores_line) != std::string::npos);
  other.replace(other.find(cores_line), cores_line.size(), "  cores: 4096\n");
  const std::string other_path = (dir / "other.yaml").string();
  std::ofstream(other_path) << other;
  CHECK(std::system((zinf + " profile-hw --check " + other_path + " > " + check_log + " 2>&1").c_str()) != 0);
  text = read_text(check_log);
  CHECK_THAT(text, Catch::Contains(other_path) && Catch::Contains("another machine") && Catch::Contains("cores: 4096 profiled") &&
                       Catch::Contains("zinf profile-hw --out " + other_path));
  // Measured on two BLAS threads before profile-hw measured the cores each kernel keeps: named too.
  std::string two = read_text(out);
  const std::string threads_line = "  blas_threads: 1\n";
  REQUIRE(two.find(threads_line) != std::string::npos);
  two.replace(two.find(threads_line), threads_line.size(), "  blas_threads: 2\n");
  std::ofstream(other_path) << two;
  CHECK(std::system(("OPENBLAS_NUM_THREADS=2 " + zinf + " profile-hw --check " + other_path + " --nvme-dir " + dir.string() +
                     " > " + check_log + " 2>&1").c_str()) != 0);
  text = read_text(check_log);
  CHECK_THAT(text, Catch::Contains("2 OpenBLAS threads per process without the cores") && !Catch::Contains("another machine"));
  fs::remove(other_path);
  fs::remove(check_log);
  // Nothing left behind on the measured disk but the profile and the log.
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_directory() ? 100 : 1;
  CHECK(files == 2);
  fs::remove_all(dir);
}

TEST_CASE("machine records: parsed from measured_on, each difference named, bad fields refused") {
  const std::string base = "name: t\nmeasured_on:\n  cpu: \"X 1\"\n  cpu_flags: \"fma avx2\"\n  cores: 2\n  memory: 24 GiB\n"
                           "  disk: \"vda (ext4)\"\n";
  const std::string node =
      "node:\n  gpus: 1\n  gpu: {name: g, memory: 1 GiB, peak_flops: 1e12, memory_bandwidth: 1e10}\n"
      "  host: {memory: 8 GiB, memory_bandwidth: 1e10, cores: 2, adam_params_per_s: 1e9}\n"
      "  nvme: {capacity: 1 TB, read_bandwidth: 1e9, write_bandwidth: 1e9}\n  pcie: {bandwidth_per_gpu: 1e10}\n"
      "  nvlink: {bandwidth_per_gpu: 1e10}\n  nic: {bandwidth: 1e9}\n";
  const auto hw = parse_hwprofile(base + node, "t.yaml");
  CHECK(hw.measured_on.cpu == "X 1");
  CHECK(hw.measured_on.cpu_flags == std::vector<std::string>{"avx2", "fma"});
  CHECK(hw.measured_on.cores == 2);
  CHECK(hw.measured_on.disk == "vda (ext4)");
  CHECK(machine_differences(hw.measured_on, hw.measured_on).empty());
  MachineRecord here = hw.measured_on;
  here.cpu = "Y 2";
  here.cpu_flags = {"avx2", "avx512f"};
  here.memory *= 1.02;  // within 5 %: the same memory
  auto d = machine_differences(hw.measured_on, here);
  REQUIRE(d.size() == 3);
  CHECK_THAT(d[0], Catch::Contains("'X 1'") && Catch::Contains("'Y 2'"));
  CHECK_THAT(d[1], Catch::Contains("lacks: fma"));
  CHECK_THAT(d[2], Catch::Contains("lacked: avx512f"));
  here = hw.measured_on;
  here.memory *= 2;
  here.disk = "nvme0n1 (xfs)";
  d = machine_differences(hw.measured_on, here);
  REQUIRE(d.size() == 2);
  CHECK_THAT(d[0], Catch::StartsWith("memory:"));
  CHECK_THAT(d[1], Catch::Contains("nvme0n1 (xfs)"));
  // OpenBLAS's kernels: compared where both records name them (older profiles do not).
  CHECK(hw.measured_on.blas.empty());
  here = hw.measured_on;
  here.blas = "Cooperlake";
  CHECK(machine_differences(hw.measured_on, here).empty());
  const auto with_blas = parse_hwprofile(base + "  blas: \"Haswell\"\n" + node, "t.yaml");
  CHECK(with_blas.measured_on.blas == "Haswell");
  d = machine_differences(with_blas.measured_on, here);
  REQUIRE(d.size() == 1);
  CHECK_THAT(d[0], Catch::Contains("'Haswell' profiled") && Catch::Contains("'Cooperlake' here") &&
                       Catch::Contains("OPENBLAS_CORETYPE"));
  // OpenBLAS's threads per process, likewise: a profile taken on 1 thread predicts runs on 1.
  const auto with_threads = parse_hwprofile(base + "  blas_threads: 1\n" + node, "t.yaml");
  CHECK(with_threads.measured_on.blas_threads == 1);
  here = with_threads.measured_on;
  CHECK(machine_differences(with_threads.measured_on, here).empty());
  here.blas_threads = 2;
  d = machine_differences(with_threads.measured_on, here);
  REQUIRE(d.size() == 1);
  CHECK_THAT(d[0], Catch::Contains("OpenBLAS threads: 1 profiled, 2 here") && Catch::Contains("OPENBLAS_NUM_THREADS"));
  CHECK(machine_differences(hw.measured_on, here).empty());  // not recorded in the profile: not compared
  // Who chose the count: read back; anything else is refused by name.
  CHECK(parse_hwprofile(base + "  blas_threads: 2\n  blas_threads_from: cores\n" + node, "t.yaml").measured_on.blas_threads_from ==
        "cores");
  CHECK_THROWS_WITH(parse_hwprofile(base + "  blas_threads_from: magic\n" + node, "t.yaml"),
                    Catch::Contains("blas_threads_from") && Catch::Contains("magic"));
  // The round trips around the in-step steps: read and written back; not a difference between machines.
  CHECK(hw.measured_on.round_trips.empty());
  const auto with_trips = parse_hwprofile(base + "  round_trips: {before_kernels: 1.1e-07, after_steps: 4.2e-07}\n" + node, "t.yaml");
  REQUIRE(with_trips.measured_on.round_trips.size() == 2);
  CHECK(with_trips.measured_on.round_trips[0].first == "before_kernels");
  CHECK(with_trips.measured_on.round_trips[0].second == Approx(1.1e-7));
  CHECK(with_trips.measured_on.round_trips[1].first == "after_steps");
  CHECK(machine_differences(with_trips.measured_on, hw.measured_on).empty());
  const auto again = parse_hwprofile(hwprofile_to_yaml(with_trips), "again.yaml");
  CHECK(again.measured_on.round_trips == with_trips.measured_on.round_trips);
  CHECK_THROWS_WITH(parse_hwprofile(base + "  round_trips: {after_steps: 2}\n" + node, "t.yaml"),
                    Catch::Contains("measured_on.round_trips.after_steps"));
  CHECK_THROWS_WITH(parse_hwprofile(base + "  round_trips: {during_lunch: 1.0e-07}\n" + node, "t.yaml"),
                    Catch::Contains("measured_on.round_trips.during_lunch"));
  std::string bad = base + node;
  bad.replace(bad.find("cores: 2\n  memory"), 8, "cores: 0");
  CHECK_THROWS_WITH(parse_hwprofile(bad, "t.yaml"), Catch::Contains("t.yaml") && Catch::Contains("measured_on.cores"));
}

TEST_CASE("this machine's record: its CPU, the recorded features only, cores, memory, disk, OpenBLAS kernels") {
  const auto m = zinf::engine::this_machine(std::filesystem::temp_directory_path().string());
  CHECK_FALSE(m.cpu.empty());
  CHECK(std::is_sorted(m.cpu_flags.begin(), m.cpu_flags.end()));
  for (const auto& f : m.cpu_flags) {
    INFO(f);
    const auto& known = zinf::engine::recorded_cpu_flags();
    CHECK(std::find(known.begin(), known.end(), f) != known.end());
  }
  CHECK(m.cores >= 1);
  CHECK(m.memory > 1e8);
  CHECK_THAT(m.disk, Catch::Contains("("));
  CHECK(m.blas == zinf::engine::cpu_paths().blas_core);  // what `zinf --version` names
  CHECK(m.blas_threads >= 1);                               // OpenBLAS threads of this process
  // A directory that does not exist yet is looked up through its parent.
  CHECK(zinf::engine::this_machine("/tmp/no-such-dir-of-zinf/below").disk == zinf::engine::this_machine("/tmp").disk);
}

TEST_CASE("zinf profile-hw refuses a calibration of no steps, naming the option, and writes nothing") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("zinf-profile-bad-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path out = dir / "local.yaml", log = dir / "log.txt";
  const std::string cmd = std::string(ZINF_BINARY_DIR) + "/zinf profile-hw --calibration-steps 0 --no-mpi --out " + out.string() +
                          " --nvme-dir " + dir.string() + " > " + log.string() + " 2>&1";
  CHECK(std::system(cmd.c_str()) != 0);
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.find("--calibration-steps") != std::string::npos);
  CHECK(!fs::exists(out));
  fs::remove_all(dir);
}
