// Overlap efficiency of the offload engine:
//   measured step time with states on NVMe
//   ÷ max(the same step with everything resident on the device,
//         the step's NVMe traffic alone at the store's bandwidth measured in this run).
// 1.0 means NVMe traffic is hidden entirely behind compute (or the reverse). Prints tokens/s and
// each lane's busy time of the offloaded step. Medians over the repetitions.
//
// Run twice over: with OpenBLAS on one thread, the CPU backend's "device" is one core and the
// offload engine's lanes (NVMe, copies, CPU Adam) have the other, as a GPU node's host CPU is beside
// its GPU; with two threads, compute and the offload lanes fight for both cores and the resident
// reference gets both. Both ratios are printed.
//   build/experiments/bench_overlap ; ZINF_BENCH_DIR picks the disk directory.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/hwprofile.hpp"
#include "core/run_config.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/io/nvme_store.hpp"
#include "engine/memory/pinned_pool.hpp"
#include "engine/train/trainer.hpp"
#include "models/gpt.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

using namespace zinf;
namespace fs = std::filesystem;

namespace {

fs::path bench_dir() {
  const char* d = std::getenv("ZINF_BENCH_DIR");
  fs::path p = fs::path(d && *d ? d : "/var/tmp") / fmt::format("zinf_overlap_{}", ::getpid());
  fs::create_directories(p);
  return p;
}

const char* kResident = "zero_stage: 3\nactivation_checkpoint: {interval: 1, tier: device}\n";
const char* kOffloaded =
    "zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\nactivation_checkpoint: {interval: 1, tier: host}\n"
    "optimizer: {sub_group_size: 500000, timing: overlap-backward}\naio: {block_size: 1 MiB, queue_depth: 32}\n";

std::map<std::string, std::vector<double>> samples;
std::map<int, std::map<std::string, double>> lane_busy;  // by BLAS threads
double nvme_read_bytes = 0, nvme_write_bytes = 0, tokens_per_step = 0;

engine::TrainerOptions options(const char* config, const fs::path& dir) {
  engine::TrainerOptions o;
  o.model = core::load_model_spec(std::string(ZINF_SOURCE_DIR) + "/models/gpt-overlap.yaml");
  o.hw = core::load_hwprofile(std::string(ZINF_SOURCE_DIR) + "/hwprofiles/cpu-dev.yaml");
  o.config = core::parse_run_config(config, "bench");
  fs::create_directories(dir);
  o.nvme_dir = dir.string();
  return o;
}

std::string key(const char* name, int threads) { return fmt::format("{}/{}", name, threads); }

void run_steps(benchmark::State& state, const char* name, const char* config) {
  const int threads = int(state.range(0));
  openblas_set_num_threads(threads);
  const fs::path dir = bench_dir();
  engine::LocalCollectives comm;
  engine::Trainer t(options(config, dir), comm);
  for (int i = 0; i < 2; ++i) t.step();  // warm-up: first touch of buffers, page cache
  for (auto _ : state) {
    auto s = t.step();
    state.SetIterationTime(s.seconds);
    samples[key(name, threads)].push_back(s.seconds);
    if (std::string(name) == "offloaded") {
      std::map<std::string, double> busy;
      for (const auto& e : s.timeline.events) busy[core::to_string(e.lane)] += e.end - e.start;
      lane_busy[threads] = busy;  // the last step's
    }
  }
  nvme_read_bytes = nvme_write_bytes = 0;
  for (const auto& task : t.program().tasks()) {
    if (task.kind == core::TaskKind::NvmeRead) nvme_read_bytes += task.bytes;
    if (task.kind == core::TaskKind::NvmeWrite) nvme_write_bytes += task.bytes;
  }
  const auto spec = core::load_model_spec(std::string(ZINF_SOURCE_DIR) + "/models/gpt-overlap.yaml");
  tokens_per_step = double(t.program().micro_batches() * spec.micro_batch * spec.seq);
  state.counters["tokens/s"] = benchmark::Counter(tokens_per_step, benchmark::Counter::kIsIterationInvariantRate);
  fs::remove_all(dir);
}

void BM_StepResident(benchmark::State& state) { run_steps(state, "resident", kResident); }
void BM_StepOffloaded(benchmark::State& state) { run_steps(state, "offloaded", kOffloaded); }

// The store's own bandwidth on a tensor as large as the step's NVMe traffic, written then read back.
void BM_StoreBandwidth(benchmark::State& state) {
  const fs::path dir = bench_dir();
  engine::NvmeStoreOptions so;
  so.dir = dir.string();
  engine::NvmeStore store(so);
  // Whole pages, as the engine's aligned transfers are: an unaligned tail would measure a bounce copy.
  const uint64_t traffic = uint64_t(std::max(nvme_read_bytes, nvme_write_bytes));
  const uint64_t bytes = std::max<uint64_t>(64ull << 20, (traffic + 4095) / 4096 * 4096);
  auto id = store.create("bw", bytes);
  engine::PinnedPoolOptions po;
  po.count = 1;
  po.buffer_size = bytes;
  engine::PinnedPool pool(po);
  auto buf = pool.acquire();
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    store.write(id, 0, buf.data(), bytes).wait_or_throw();
    auto t1 = std::chrono::steady_clock::now();
    store.read(id, 0, buf.data(), bytes).wait_or_throw();
    auto t2 = std::chrono::steady_clock::now();
    const double w = std::chrono::duration<double>(t1 - t0).count(), r = std::chrono::duration<double>(t2 - t1).count();
    samples["write_bw"].push_back(double(bytes) / w);
    samples["read_bw"].push_back(double(bytes) / r);
    state.SetIterationTime(w + r);
  }
  fs::remove_all(dir);
}

// Resident and offloaded steps alternate per thread count so both see the same machine load.
BENCHMARK(BM_StepResident)->Arg(1)->UseManualTime()->Iterations(9)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StepOffloaded)->Arg(1)->UseManualTime()->Iterations(9)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StepResident)->Arg(2)->UseManualTime()->Iterations(9)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StepOffloaded)->Arg(2)->UseManualTime()->Iterations(9)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StoreBandwidth)->UseManualTime()->Iterations(9)->Unit(benchmark::kMillisecond);

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  const double rbw = median(samples["read_bw"]), wbw = median(samples["write_bw"]);
  if (rbw == 0) return 0;  // a filter left the store out
  const double io_alone = nvme_read_bytes / rbw + nvme_write_bytes / wbw;
  fmt::print("\noverlap efficiency (gpt-overlap, params + optimizer on NVMe, optimizer overlapping backward,\n"
             "checkpoints on host), medians:\n");
  fmt::print("  step NVMe traffic alone          {:8.1f} ms  ({:.1f} MB read at {:.2f} GB/s, {:.1f} MB written at {:.2f} GB/s)\n",
             io_alone * 1e3, nvme_read_bytes / 1e6, rbw / 1e9, nvme_write_bytes / 1e6, wbw / 1e9);
  for (int threads : {1, 2}) {
    const double resident = median(samples[key("resident", threads)]);
    const double offloaded = median(samples[key("offloaded", threads)]);
    if (resident == 0 || offloaded == 0) continue;
    const double bound = std::max(resident, io_alone);
    fmt::print("  OpenBLAS threads {}:\n", threads);
    fmt::print("    step, everything resident       {:8.1f} ms\n", resident * 1e3);
    fmt::print("    step, states on NVMe (measured)  {:8.1f} ms  {:.0f} tokens/s\n", offloaded * 1e3,
               tokens_per_step / offloaded);
    fmt::print("    overlap efficiency = {:.1f} / max({:.1f}, {:.1f}) = {:.3f}   (goal <= 1.15)\n", offloaded * 1e3,
               resident * 1e3, io_alone * 1e3, offloaded / bound);
    fmt::print("    lane busy time of the offloaded step:");
    for (const auto& [lane, b] : lane_busy[threads]) fmt::print(" {} {:.1f} ms;", lane, b * 1e3);
    fmt::print("\n");
  }
  return 0;
}
