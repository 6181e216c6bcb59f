// NvmeStore read and write bandwidth (O_DIRECT, io_uring) against fio on the same file with the
// same block size and queue depth, measured alternately in the same run. Each iteration streams
// the whole file through the store, then runs fio once; counters give both GB/s and the ratio.
//
// The store streams through pinned-pool buffers on 2 MiB pages; fio uses malloc'd 4 KiB pages. On
// this virtio disk that alone is worth 3-5x (measured: 1.7 vs 0.3-0.4 GB/s reads through the
// same store), which is why the store can beat fio here: the pool's huge pages are part of the design.
// The crc=1 rows measure the cost of the swap files' checksums (aio.checksums: true), each shape
// with and without them in the same run.
//
//   bench_nvme_store [--dir D] [google benchmark flags]
//   ZINF_BENCH_DIR=D, ZINF_BENCH_BYTES (default 4 GiB). The default directory is a fresh one
//   under /var/tmp (refused if that is tmpfs); the benchmark removes what it creates.
#include <benchmark/benchmark.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/io/nvme_store.hpp"
#include "engine/io/stream_io.hpp"
#include "engine/memory/pinned_pool.hpp"

using namespace zinf::engine;

namespace {

std::string g_dir;
uint64_t g_bytes = uint64_t(4) << 30;
constexpr size_t kBufferBytes = 64 << 20;
constexpr size_t kBuffers = 4;

struct Fixture {
  std::unique_ptr<PinnedPool> pool;
  std::vector<PinnedBuffer> loans;
  std::vector<std::byte*> buffers;
  std::unique_ptr<NvmeStore> store;
  NvmeStore::TensorId id = 0;
  uint64_t block = 0;
  unsigned qd = 0;
  bool crc = false;

  void open(uint64_t block_size, unsigned queue_depth, bool checksums) {
    if (!pool) {
      pool = std::make_unique<PinnedPool>(PinnedPoolOptions{kBuffers, kBufferBytes});
      for (size_t i = 0; i < kBuffers; ++i) {
        loans.push_back(pool->try_acquire());
        buffers.push_back(loans.back().data());
        for (size_t j = 0; j < kBufferBytes; ++j) buffers.back()[j] = std::byte(j * 131 + i);
      }
    }
    if (store && block == block_size && qd == queue_depth && crc == checksums) return;
    // Checksums start from a full write: a change of them writes the tensor afresh.
    bool fresh = !store || crc != checksums;
    if (store && fresh) store->remove(id);
    store.reset();
    NvmeStoreOptions o;
    o.dir = g_dir;
    o.block_size = block = block_size;
    o.queue_depth = qd = queue_depth;
    o.checksums = crc = checksums;
    store = std::make_unique<NvmeStore>(o);
    auto regions = pool->regions();
    store->register_buffers(regions);
    if (fresh) {
      id = store->create("bench", g_bytes);
      // Fill once so every later pass, ours and fio's, overwrites or reads written blocks.
      stream_tensor(*store, id, g_bytes, true, buffers, kBufferBytes);
    } else {
      id = store->open("bench");
    }
  }
  std::string path() const { return store->path(id); }
};

Fixture g_fx;

double run_fio(const std::string& file, bool write, uint64_t block, unsigned qd, uint64_t bytes) {
  std::string cmd = "fio --name=zinf --filename=" + file + " --ioengine=io_uring --direct=1 --rw=" + (write ? "write" : "read") +
                    " --bs=" + std::to_string(block) + " --iodepth=" + std::to_string(qd) + " --size=" + std::to_string(bytes) +
                    " --numjobs=1 --output-format=json 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw std::runtime_error("cannot run fio");
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  int rc = pclose(p);
  if (rc != 0) throw std::runtime_error("fio failed (" + std::to_string(rc) + "): " + cmd);
  auto j = nlohmann::json::parse(out.substr(out.find('{')));
  return j["jobs"][0][write ? "write" : "read"]["bw_bytes"].get<double>();
}

void BM_Store(benchmark::State& state, bool write) {
  const uint64_t block = uint64_t(state.range(0));
  const unsigned qd = unsigned(state.range(1));
  const bool crc = state.range(2) != 0;
  try {
    g_fx.open(block, qd, crc);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  double store_seconds = 0, fio_bps = 0;
  int n = 0;
  for (auto _ : state) {
    double s = stream_tensor(*g_fx.store, g_fx.id, g_bytes, write, g_fx.buffers, kBufferBytes);
    state.SetIterationTime(s);
    store_seconds += s;
    fio_bps += run_fio(g_fx.path(), write, block, qd, g_bytes);
    ++n;
  }
  const double store_gbps = double(g_bytes) * n / store_seconds / 1e9, fio_gbps = fio_bps / n / 1e9;
  state.SetBytesProcessed(int64_t(g_bytes) * n);
  state.counters["store_GBps"] = store_gbps;
  state.counters["fio_GBps"] = fio_gbps;
  state.counters["ratio_to_fio"] = store_gbps / fio_gbps;
}

bool on_tmpfs(const std::string& dir) {
  struct statfs s;
  return statfs(dir.c_str(), &s) == 0 && s.f_type == TMPFS_MAGIC;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc) g_dir = argv[++i];
    else if (a.rfind("--dir=", 0) == 0) g_dir = a.substr(6);
    else args.push_back(argv[i]);
  }
  if (g_dir.empty() && std::getenv("ZINF_BENCH_DIR")) g_dir = std::getenv("ZINF_BENCH_DIR");
  if (const char* b = std::getenv("ZINF_BENCH_BYTES")) g_bytes = std::stoull(b);
  std::string parent;
  if (g_dir.empty()) {
    std::string tmpl = "/var/tmp/zinf-bench-XXXXXX";
    if (!mkdtemp(tmpl.data())) {
      perror("mkdtemp /var/tmp");
      return 1;
    }
    parent = tmpl;
    g_dir = tmpl + "/store";
  }
  if (on_tmpfs(parent.empty() ? g_dir : parent)) {
    std::cerr << "bench_nvme_store: " << g_dir << " is on tmpfs, which has no O_DIRECT; pass --dir on a disk\n";
    return 1;
  }
  std::cout << "store directory: " << g_dir << ", file " << (g_bytes >> 20) << " MiB\n";
  int n = int(args.size());
  benchmark::Initialize(&n, args.data());
  for (bool write : {true, false}) {
    auto* b = benchmark::RegisterBenchmark(write ? "BM_StoreWrite" : "BM_StoreRead", [write](benchmark::State& s) { BM_Store(s, write); });
    // crc: the swap files' CRC32C per 4 KiB page (aio.checksums), computed on write, verified on read.
    // Every shape without checksums, then with them: a change of checksums rewrites the file once.
    b->ArgNames({"block", "qd", "crc"});
    for (int64_t crc : {0, 1})
      b->Args({128 << 10, 32, crc})->Args({1 << 20, 8, crc})->Args({1 << 20, 32, crc})->Args({8 << 20, 32, crc});
    b->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1)->Repetitions(5)->ReportAggregatesOnly(true);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (g_fx.store) g_fx.store->remove(g_fx.id);
  g_fx.store.reset();
  g_fx.loans.clear();
  g_fx.pool.reset();
  std::error_code ec;
  std::filesystem::remove_all(parent.empty() ? g_dir + "/bench.zt" : parent, ec);
  return 0;
}
