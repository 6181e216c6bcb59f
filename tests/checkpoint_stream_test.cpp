// Checkpoints of a model whose states live on NVMe are saved and resumed group by group: the
// resumed run continues bitwise like the uninterrupted one, and the host memory a save or a resume
// holds at once stays within a few of the largest group's tensors and the fixed buffers, far below
// the model's whole state. Host memory is counted by replacing the global operator new and delete
// in this test program (every std::vector and std::string) and by the staging cache's peak (the
// page-aligned buffers NVMe transfers use); the two peaks are added, an upper bound of their sum.
#include <catch2/catch.hpp>

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>

#include "core/hwprofile.hpp"
#include "core/run_config.hpp"
#include "engine/comm/collectives.hpp"
#include "engine/memory/staging_cache.hpp"
#include "engine/model/safetensors.hpp"
#include "engine/train/trainer.hpp"
#include "models/gpt.hpp"
#include "forwarding_io_env.hpp"
#include "temp_dir.hpp"
#include "test_paths.hpp"
#include "formats/hwprofile_reader.hpp"
#include "formats/model_spec_reader.hpp"
#include "formats/run_config_reader.hpp"

namespace {

std::atomic<int64_t> g_live{0}, g_peak{0};

void* counted(void* p) {
  if (!p) throw std::bad_alloc();
  const int64_t now = g_live.fetch_add(int64_t(malloc_usable_size(p))) + int64_t(malloc_usable_size(p));
  int64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
  return p;
}

// The replaced operator new takes its memory from malloc, so its operator delete gives it back with
// free. GCC, inlining this into a delete of memory from `new`, can call the pair mismatched
// (-Wmismatched-new-delete) without seeing the replacement: the pairing here is by design.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void uncounted(void* p) {
  if (!p) return;
  g_live.fetch_sub(int64_t(malloc_usable_size(p)));
  std::free(p);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

void* aligned(std::size_t n, std::align_val_t al) {
  const std::size_t a = std::max(std::size_t(al), sizeof(void*));
  return std::aligned_alloc(a, (std::max<std::size_t>(n, 1) + a - 1) / a * a);
}

}  // namespace

void* operator new(std::size_t n) { return counted(std::malloc(std::max<std::size_t>(n, 1))); }
void* operator new[](std::size_t n) { return counted(std::malloc(std::max<std::size_t>(n, 1))); }
void* operator new(std::size_t n, std::align_val_t al) { return counted(aligned(n, al)); }
void* operator new[](std::size_t n, std::align_val_t al) { return counted(aligned(n, al)); }
void operator delete(void* p) noexcept { uncounted(p); }
void operator delete[](void* p) noexcept { uncounted(p); }
void operator delete(void* p, std::size_t) noexcept { uncounted(p); }
void operator delete[](void* p, std::size_t) noexcept { uncounted(p); }
void operator delete(void* p, std::align_val_t) noexcept { uncounted(p); }
void operator delete[](void* p, std::align_val_t) noexcept { uncounted(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { uncounted(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { uncounted(p); }

using namespace zinf;
using zinf::test::source;
using zinf::test::TempDir;
namespace fs = std::filesystem;

namespace {

// Host bytes a piece of work held at most beyond what was held when it started (or at mark()).
struct PeakHostBytes {
  int64_t heap_base = 0;
  uint64_t staging_base = 0;
  PeakHostBytes() { mark(); }
  void mark() {
    heap_base = g_live.load();
    staging_base = engine::StagingCache::instance().stats().in_use_bytes;
    g_peak.store(heap_base);
    engine::StagingCache::instance().reset_peak();
  }
  int64_t above(int64_t heap_after) const {
    const auto st = engine::StagingCache::instance().stats();
    return (g_peak.load() - std::max(heap_base, heap_after)) + int64_t(st.peak_in_use_bytes - staging_base);
  }
};

// Sixteen blocks of gpt-tiny's width: the whole state is many times its largest group.
engine::TrainerOptions options(const std::string& config_yaml, const fs::path& dir) {
  engine::TrainerOptions o;
  o.model = core::load_model_spec(source("models/gpt-tiny.yaml"));
  o.model.layers = 16;
  o.hw = core::load_hwprofile(source("hwprofiles/cpu-dev.yaml"));
  o.config = core::parse_run_config(config_yaml, "test");
  o.nvme_dir = (dir / "nvme").string();
  o.checkpoint_dir = (dir / "ckpt").string();
  fs::create_directories(o.nvme_dir);
  return o;
}

const char* kNvme =
    "zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\nactivation_checkpoint: {interval: 1, tier: nvme}\n"
    "optimizer: {lr: 1.0e-3, grad_clip: 1.0, sub_group_size: 20000}\n";
const char* kNvmeTiled =
    "zero_stage: 3\noffload: {params: nvme, optimizer: nvme}\nactivation_checkpoint: {interval: 1, tier: nvme}\n"
    "tiling_factor: 4\noptimizer: {lr: 1.0e-3, grad_clip: 1.0, sub_group_size: 20000}\n";

// Marks the start of a resume's load: the first thing it does is to open the state file to verify
// its checksum (after the plan, the Program and the backend are made, which are not model state).
class LoadMarker final : public test::ForwardingIoEnv {
public:
  PeakHostBytes* peak = nullptr;
  int open(const std::string& p, int f, mode_t m) override {
    const std::string tail = "/state.safetensors";
    if (peak && p.size() > tail.size() && p.compare(p.size() - tail.size(), tail.size(), tail) == 0) peak->mark();
    return real().open(p, f, m);
  }
};

}  // namespace

TEST_CASE("a checkpoint of NVMe-resident states saves and resumes a group at a time, bitwise exact",
          "[trainer][checkpoint][memory]") {
  const std::string config = GENERATE(std::string(kNvme), std::string(kNvmeTiled));
  TempDir dir("resume");
  engine::LocalCollectives comm;
  std::vector<double> straight;
  {
    engine::Trainer t(options(config, dir.path / "a"), comm);
    for (int i = 0; i < 4; ++i) straight.push_back(t.step().loss);
  }

  const auto graph = models::build_gpt(options(config, dir.path).model);
  int64_t total = 0, largest = 0;
  for (const auto& pg : graph.params) {
    total += pg.numel;
    largest = std::max(largest, pg.numel);
  }
  const int64_t whole_state = 3 * total * 4;  // master, m and v in fp32
  // One fp32 tensor of the largest group, three unit-sized buffers of it (a tile, a shard slice,
  // its bf16 rounding or the gathered shard; at most the group's size each, rounded up to pages),
  // the 1 MiB buffer that verifies the file's checksum, and 256 KiB for everything small.
  const int64_t bound = largest * 4 + 3 * (largest * 4 + 2 * 4096) + (1 << 20) + (256 << 10);
  INFO("whole state " << whole_state << " bytes, largest group " << largest * 4 << " bytes, bound " << bound);
  REQUIRE(whole_state > 3 * bound);  // the bound would catch a whole-state copy

  std::vector<double> resumed;
  {
    engine::Trainer t(options(config, dir.path / "b"), comm);
    for (int i = 0; i < 2; ++i) t.step();
    PeakHostBytes during_save;
    t.save_checkpoint();
    const int64_t held = during_save.above(g_live.load());
    INFO("save held " << held << " bytes");
    CHECK(held < bound);
  }
  {
    auto o = options(config, dir.path / "b");
    o.start = engine::CheckpointStart::Resume;
    PeakHostBytes during_load;
    LoadMarker marker;
    marker.peak = &during_load;
    o.env = &marker;
    auto t = std::make_unique<engine::Trainer>(o, comm);
    const int64_t held = during_load.above(g_live.load());
    INFO("resume held " << held << " bytes from the checksum's check to the end of the load");
    CHECK(held < bound);
    CHECK(t->step_count() == 2);
    for (int i = 0; i < 2; ++i) resumed.push_back(t->step().loss);
  }
  for (int i = 0; i < 2; ++i) CHECK(resumed[size_t(i)] == straight[size_t(i + 2)]);  // bitwise
}

TEST_CASE("a streamed export of NVMe-resident weights holds one group at a time and reads back",
          "[trainer][safetensors][memory]") {
  TempDir dir("export");
  engine::LocalCollectives comm;
  engine::Trainer t(options(kNvmeTiled, dir.path), comm);
  t.step();
  const auto graph = models::build_gpt(options(kNvme, dir.path).model);
  int64_t largest = 0;
  for (const auto& pg : graph.params) largest = std::max(largest, pg.numel);
  const std::string path = (dir.path / "out.safetensors").string();
  PeakHostBytes during_export;
  t.export_safetensors(path);
  const int64_t held = during_export.above(g_live.load());
  INFO("export held " << held << " bytes; largest group " << largest * 4);
  CHECK(held < 4 * largest * 4 + (256 << 10));  // the group, a transposed band and a tile of it, a shard
  const auto weights = engine::load_gpt2_safetensors(path, graph);
  REQUIRE(weights.size() == graph.params.size());
  for (size_t g = 0; g < weights.size(); ++g) CHECK(int64_t(weights[g].size()) == graph.params[g].numel);
}
