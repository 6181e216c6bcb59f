// Checks engine::Collectives under mpirun: every collective against the values it must produce on
// every rank; with --die-rank R, rank R kills itself before an all-gather and the survivors must
// end with an error instead of hanging. Prints "N passed, M failed"; exits non-zero on failure.
#include <fmt/format.h>

#include <csignal>
#include <cstring>
#include <string>
#include <vector>

#include "engine/comm/collectives.hpp"

using zinf::engine::Collectives;

namespace {

int passed = 0, failed = 0;

void expect(bool ok, const std::string& what, int rank) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    fmt::print(stderr, "rank {}: FAILED: {}\n", rank, what);
  }
}

void run_checks(Collectives& c) {
  const int r = c.rank(), n = c.size();
  // all-gather: shard r holds r*100 + i
  const std::size_t shard = 37;
  std::vector<float> mine(shard), full(shard * n);
  for (std::size_t i = 0; i < shard; ++i) mine[i] = float(r * 100 + int(i));
  c.all_gather(mine.data(), shard * sizeof(float), full.data(), "check");
  bool ok = true;
  for (int q = 0; q < n; ++q)
    for (std::size_t i = 0; i < shard; ++i) ok &= full[q * shard + i] == float(q * 100 + int(i));
  expect(ok, "all_gather", r);

  // reduce-scatter: every rank contributes (rank+1) at every element -> n(n+1)/2 everywhere
  std::vector<float> contrib(shard * n, float(r + 1)), out(shard);
  c.reduce_scatter(contrib.data(), out.data(), shard, "check");
  ok = true;
  for (float v : out) ok &= v == float(n * (n + 1) / 2);
  expect(ok, "reduce_scatter", r);

  std::vector<double> norm = {double(r + 1)};
  c.all_reduce(norm.data(), 1, "check");
  expect(norm[0] == double(n * (n + 1) / 2), "all_reduce(double)", r);

  std::vector<float> fs = {1.0f, float(r)};
  c.all_reduce(fs.data(), 2, "check");
  expect(fs[0] == float(n) && fs[1] == float(n * (n - 1) / 2), "all_reduce(float)", r);

  const int root = n - 1;
  std::vector<char> msg(16, 0);
  if (r == root) std::strcpy(msg.data(), "from the root");
  c.broadcast(msg.data(), msg.size(), root, "check");
  expect(std::string(msg.data()) == "from the root", "broadcast", r);

  std::vector<float> in = {float(r)}, sum = {0};
  c.reduce(in.data(), sum.data(), 1, 0, "check");
  if (r == 0) expect(sum[0] == float(n * (n - 1) / 2), "reduce", r);
  c.barrier("check");
}

}  // namespace

int main(int argc, char** argv) {
  int die_rank = -1;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--die-rank") die_rank = std::stoi(argv[i + 1]);
  try {
    auto c = zinf::engine::make_collectives(std::chrono::seconds(die_rank >= 0 ? 5 : 60));
    if (die_rank >= 0) {
      c->barrier("start");
      if (c->rank() == die_rank) std::raise(SIGKILL);
      std::vector<float> x(8), all(8 * c->size());
      try {
        c->all_gather(x.data(), x.size() * sizeof(float), all.data(), "params of h.0.attn.c_attn");
      } catch (const zinf::engine::CommError& e) {
        c->abort(e.what());
      }
      fmt::print("rank {}: all-gather completed although rank {} died\n", c->rank(), die_rank);
      return 1;
    }
    run_checks(*c);
    if (c->rank() == 0) fmt::print("{} passed, {} failed\n", passed, failed);
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return failed == 0 ? 0 : 1;
}
