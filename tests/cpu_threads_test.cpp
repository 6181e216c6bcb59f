// The BLAS threads a zinf process takes (engine/cpu_threads.hpp): cgroup quota files parsed, the
// tightest quota over a cgroup's ancestors found, the ranks on a node read from the launcher, and
// the choice between --threads, OPENBLAS_NUM_THREADS and the cores, all from injected values.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "engine/cpu_threads.hpp"

using namespace zinf::engine;

TEST_CASE("cgroup v2 cpu.max: a quota over a period, or none when 'max'") {
  const auto q = parse_cpu_max("150000 100000\n", "/cg/cpu.max");
  REQUIRE(q);
  CHECK(q->cores == Approx(1.5));
  CHECK(q->file == "/cg/cpu.max");
  CHECK_FALSE(parse_cpu_max("max 100000\n", "/cg/cpu.max"));
  CHECK(parse_cpu_max("50000 100000", "f")->cores == Approx(0.5));
  CHECK_THROWS_WITH(parse_cpu_max("", "/cg/cpu.max"), Catch::Contains("/cg/cpu.max") && Catch::Contains("<quota|max> <period>"));
  CHECK_THROWS_WITH(parse_cpu_max("max", "/cg/cpu.max"), Catch::Contains("/cg/cpu.max"));
  CHECK_THROWS_WITH(parse_cpu_max("lots 100000", "/cg/cpu.max"), Catch::Contains("'lots'"));
  CHECK_THROWS_WITH(parse_cpu_max("100000 -5", "/cg/cpu.max"), Catch::Contains("'-5'"));
  CHECK_THROWS_WITH(parse_cpu_max("100000 0", "/cg/cpu.max"), Catch::Contains("period of 0"));
}

TEST_CASE("cgroup v1 cfs quota: -1 is none, else quota over period") {
  CHECK_FALSE(parse_cfs_quota("-1\n", "100000\n", "/v1/cpu.cfs_quota_us"));
  const auto q = parse_cfs_quota("300000\n", "100000\n", "/v1/cpu.cfs_quota_us");
  REQUIRE(q);
  CHECK(q->cores == Approx(3.0));
  CHECK_THROWS_WITH(parse_cfs_quota("300000", "", "/v1/cpu.cfs_quota_us"), Catch::Contains("cpu.cfs_period_us"));
  CHECK_THROWS_WITH(parse_cfs_quota("-7", "100000", "/v1/cpu.cfs_quota_us"), Catch::Contains("'-7'"));
}

TEST_CASE("the tightest quota over the cgroup and its ancestors, v2 and v1") {
  std::map<std::string, std::string> files = {
      {"/sys/fs/cgroup/cpu.max", "max 100000\n"},
      {"/sys/fs/cgroup/job/cpu.max", "250000 100000\n"},
      {"/sys/fs/cgroup/job/step/cpu.max", "max 100000\n"},
  };
  const FileReader read = [&](const std::string& path) -> std::optional<std::string> {
    auto it = files.find(path);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
  auto q = cgroup_cpu_quota("0::/job/step\n", "/sys/fs/cgroup", read);
  REQUIRE(q);
  CHECK(q->cores == Approx(2.5));
  CHECK(q->file == "/sys/fs/cgroup/job/cpu.max");
  files["/sys/fs/cgroup/job/step/cpu.max"] = "120000 100000\n";
  q = cgroup_cpu_quota("0::/job/step\n", "/sys/fs/cgroup", read);
  REQUIRE(q);
  CHECK(q->cores == Approx(1.2));
  // A container's own cgroup at the root of its namespace.
  CHECK_FALSE(cgroup_cpu_quota("0::/\n", "/sys/fs/cgroup", read));
  files["/sys/fs/cgroup/cpu.max"] = "400000 100000";
  CHECK(cgroup_cpu_quota("0::/\n", "/sys/fs/cgroup", read)->cores == Approx(4.0));
  // Nothing readable: no quota.
  CHECK_FALSE(cgroup_cpu_quota("0::/elsewhere\n", "/nowhere", read));
  // v1: the cpu controller's hierarchy, whichever of its usual mount names holds it.
  files = {{"/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "200000\n"},
           {"/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n"},
           {"/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n"},
           {"/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n"}};
  q = cgroup_cpu_quota("12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n", "/sys/fs/cgroup", read);
  REQUIRE(q);
  CHECK(q->cores == Approx(2.0));
  CHECK_FALSE(cgroup_cpu_quota("12:memory:/docker/abc\n", "/sys/fs/cgroup", read));
  // A malformed file is an error naming it.
  files["/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us"] = "many\n";
  CHECK_THROWS_WITH(cgroup_cpu_quota("4:cpu,cpuacct:/docker/abc\n", "/sys/fs/cgroup", read),
                    Catch::Contains("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us"));
}

TEST_CASE("the ranks on this node come from the launcher's environment") {
  std::map<std::string, std::string> env;
  const EnvReader get = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  std::string source = "stale";
  CHECK(ranks_on_this_node(get, &source) == 1);
  CHECK(source.empty());
  env["MPI_LOCALNRANKS"] = std::string("3");
  CHECK(ranks_on_this_node(get, &source) == 3);
  CHECK(source == "MPI_LOCALNRANKS");
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = std::string("4");
  CHECK(ranks_on_this_node(get, &source) == 4);
  CHECK(source == "OMPI_COMM_WORLD_LOCAL_SIZE");
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = std::string("0");  // not a count of ranks: the next variable
  CHECK(ranks_on_this_node(get, &source) == 3);
  env.erase("MPI_LOCALNRANKS");
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = std::string("two");
  CHECK(ranks_on_this_node(get) == 1);
}

TEST_CASE("by default a process takes its usable cores over the ranks on its node; the flag, then the environment, choose") {
  CoreBudget b;
  b.affinity = 2;
  ThreadChoice c = choose_threads(std::nullopt, nullptr, b);
  CHECK(c.threads == 2);
  CHECK(c.source == ThreadSource::Cores);
  CHECK(describe(c) == "2 BLAS threads: 2 usable cores (affinity), 1 rank on this node");
  // A quota below the affinity, rounded down.
  b.affinity = 8;
  b.quota = CpuQuota{3.7, "/sys/fs/cgroup/cpu.max"};
  CHECK(usable_cores(b) == 3);
  c = choose_threads(std::nullopt, nullptr, b);
  CHECK(c.threads == 3);
  CHECK_THAT(describe(c), Catch::StartsWith("3 BLAS threads: 3 usable cores") && Catch::Contains("3.7 cores in /sys/fs/cgroup/cpu.max") &&
                              Catch::Contains("affinity 8"));
  // Under a core's worth of quota: one.
  b.quota = CpuQuota{0.5, "q"};
  CHECK(usable_cores(b) == 1);
  CHECK(choose_threads(std::nullopt, nullptr, b).threads == 1);
  // Shared among the node's ranks, rounded down, at least one each.
  b.quota.reset();
  b.ranks_on_node = 3;
  b.ranks_source = "OMPI_COMM_WORLD_LOCAL_SIZE";
  c = choose_threads(std::nullopt, nullptr, b);
  CHECK(c.threads == 2);
  CHECK(describe(c) == "2 BLAS threads: 8 usable cores (affinity), shared by 3 ranks on this node (OMPI_COMM_WORLD_LOCAL_SIZE)");
  b.ranks_on_node = 16;
  CHECK(choose_threads(std::nullopt, nullptr, b).threads == 1);
  // A launcher that bound each rank to its own cores gave it its share already.
  b.ranks_on_node = 2;
  b.affinity = 4;
  b.online = 8;
  c = choose_threads(std::nullopt, nullptr, b);
  CHECK(c.threads == 4);
  CHECK(describe(c) == "4 BLAS threads: 4 usable cores (affinity) of 8 online, this rank's own (bound by the launcher); 2 ranks "
                       "on this node (OMPI_COMM_WORLD_LOCAL_SIZE)");
  b.affinity = 8;  // every online core in its mask: shared
  CHECK(choose_threads(std::nullopt, nullptr, b).threads == 4);
  b.online = 0;  // not known: shared
  CHECK(choose_threads(std::nullopt, nullptr, b).threads == 4);
  // The environment names a count: taken; what is not a positive count is not.
  for (const char* ignored : {"", "0", "-3", "two", "2x"}) {
    INFO(ignored);
    CHECK(choose_threads(std::nullopt, ignored, b).source == ThreadSource::Cores);
  }
  c = choose_threads(std::nullopt, "5", b);
  CHECK(c.threads == 5);
  CHECK(c.source == ThreadSource::Environment);
  CHECK_THAT(describe(c), Catch::StartsWith("5 BLAS threads: OPENBLAS_NUM_THREADS=5 (the default here: 4,"));
  // The flag wins over both.
  c = choose_threads(7, "5", b);
  CHECK(c.threads == 7);
  CHECK(c.source == ThreadSource::Flag);
  CHECK_THAT(describe(c), Catch::StartsWith("7 BLAS threads: --threads 7"));
  CHECK(std::string(to_string(ThreadSource::Cores)) == "cores");
  CHECK(std::string(to_string(ThreadSource::Environment)) == "OPENBLAS_NUM_THREADS");
  CHECK(std::string(to_string(ThreadSource::Flag)) == "--threads");
}

TEST_CASE("this process's budget: at least one core, its ranks one outside a launcher") {
  const CoreBudget b = this_process_cores();
  CHECK(b.affinity >= 1);
  CHECK(usable_cores(b) >= 1);
  CHECK(usable_cores(b) <= b.affinity);
  CHECK(b.ranks_on_node >= 1);
}
