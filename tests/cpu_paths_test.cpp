// The engine's CPU-dependent choices: the paths reported by `zinf --version` are the ones the
// dispatchers take. tests/emulated_cpu.sh runs this and the other CPU-dependent tests (crc32c_test,
// cpu_adam_test, cpu_kernels_test) again on emulated CPUs without AVX-512 and without AVX2. The
// BLAS threads zinf sets for every command, and what profile-hw measures of them.
#include <catch2/catch.hpp>
#include <cblas.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>

#include "engine/build_info.hpp"
#include "engine/machine_info.hpp"
#include "engine/io/crc32c.hpp"
#include "engine/optim/cpu_adam.hpp"
#include "engine/probe/machine_probe.hpp"

using namespace zinf::engine;

TEST_CASE("the reported CPU paths are the ones the dispatchers take") {
  const CpuPaths p = cpu_paths();
  CHECK(p.adam == to_string(best_simd_level()));
  CHECK(p.adam == std::string(to_string(CpuAdam(AdamOptions{}).level())));
  CHECK(p.crc32c == crc32c_implementation());
  CHECK(p.blas_core == std::string(openblas_get_corename()));
  CHECK_FALSE(p.blas_core.empty());
  const std::string text = describe(p);
  CHECK_THAT(text, Catch::Contains("adam " + p.adam) && Catch::Contains("openblas " + p.blas_core));
}

TEST_CASE("a warning when OPENBLAS_CORETYPE holds an AVX-512 CPU to narrower kernels, and only then") {
  const CpuPaths haswell_on_avx512{"avx512", "sse4.2", "Haswell"};
  const std::string w = blas_kernel_warning(haswell_on_avx512, "Haswell");
  CHECK_THAT(w, Catch::Contains("Haswell kernels") && Catch::Contains("OPENBLAS_CORETYPE=Haswell") &&
                    Catch::Contains("AVX-512") && Catch::Contains("unset OPENBLAS_CORETYPE"));
  CHECK(blas_kernel_warning(haswell_on_avx512, nullptr).empty());                  // chosen by OpenBLAS itself
  CHECK(blas_kernel_warning(haswell_on_avx512, "").empty());
  CHECK(blas_kernel_warning({"avx2", "sse4.2", "Haswell"}, "Haswell").empty());     // the CPU's best already
  CHECK(blas_kernel_warning({"avx512", "sse4.2", "Cooperlake"}, "COOPERLAKE").empty());
  CHECK(blas_kernel_warning({"avx512", "sse4.2", "SkylakeX"}, "skylakex").empty());
  CHECK_FALSE(blas_kernel_warning({"avx512", "sse4.2", "Zen"}, "Zen").empty());
}

// Pins OpenBLAS to two threads; where it runs only one, unpins, says so and returns false.
static bool pin_two_blas_threads() {
  pin_blas_threads("2");
  if (openblas_get_num_threads() >= 2) return true;
  pin_blas_threads(nullptr);
  WARN("OpenBLAS runs one thread here: the two-thread measurement was not made");
  return false;
}

TEST_CASE("zinf runs OpenBLAS on the cores this process may use unless OPENBLAS_NUM_THREADS or --threads names a count") {
  const int cores = usable_cores();
  for (const char* unset : {static_cast<const char*>(nullptr), "", "0", "-3", "two", "2x"}) {
    INFO((unset ? unset : "(null)"));
    const BlasThreads b = pin_blas_threads(unset);
    CHECK(b.threads == cores);  // one rank outside mpirun
    CHECK(b.source == ThreadSource::Cores);
    CHECK(openblas_get_num_threads() == std::min(cores, openblas_get_num_procs()));
    CHECK_THAT(describe(b), Catch::Contains("usable core") && Catch::Contains("1 rank on this node"));
    CHECK(pinned_blas_threads().threads == b.threads);
  }
  // A count the environment names is taken as it is (OpenBLAS may run fewer where it has fewer cores).
  const BlasThreads three = pin_blas_threads("3");
  CHECK(three.threads == 3);
  CHECK(three.source == ThreadSource::Environment);
  CHECK(openblas_get_num_threads() >= 1);
  CHECK_THAT(describe(three), Catch::StartsWith("3 BLAS threads: OPENBLAS_NUM_THREADS=3"));
  const BlasThreads flag = pin_blas_threads("3", 1);
  CHECK(flag.threads == 1);
  CHECK(flag.source == ThreadSource::Flag);
  CHECK(openblas_get_num_threads() == 1);
  CHECK(pinned_blas_threads().source == ThreadSource::Flag);
  CHECK(this_machine("").blas_threads_from == "--threads");
  pin_blas_threads(nullptr);
  CHECK(this_machine("").blas_threads_from == "cores");
}

TEST_CASE("ScopedBlasThreads runs OpenBLAS on the count it names and restores the count it found") {
  pin_blas_threads("2");
  const int found = openblas_get_num_threads();
  {
    const ScopedBlasThreads one(1);
    CHECK(openblas_get_num_threads() == 1);
  }
  CHECK(openblas_get_num_threads() == found);
  pin_blas_threads("1");
  {
    const ScopedBlasThreads none(0);  // below one: one
    CHECK(openblas_get_num_threads() == 1);
  }
  CHECK(openblas_get_num_threads() == 1);
  pin_blas_threads(nullptr);
}

TEST_CASE("profile-hw measures the cores per kernel only on several BLAS threads: one core or two on two") {
  pin_blas_threads("1");
  const auto gemm1 = probe::measure_gemm(true);
  const auto attention1 = probe::measure_attention(true);
  const auto one = probe::measure_kernel_threads(gemm1, attention1, true);
  CHECK(one.gemm.empty());
  CHECK(one.attention.empty());
  if (!pin_two_blas_threads()) return;
  const auto gemm2 = probe::measure_gemm(true);
  const auto attention2 = probe::measure_attention(true);
  const auto two = probe::measure_kernel_threads(gemm2, attention2, true);
  CHECK(openblas_get_num_threads() >= 2);  // the one-thread measurement gave the threads back
  pin_blas_threads(nullptr);
  REQUIRE(two.gemm.size() == gemm2.size());
  REQUIRE(two.attention.size() == attention2.size());
  for (size_t i = 0; i < gemm2.size(); ++i) {
    CHECK(two.gemm[i].first == double(gemm2[i].dim));
    CHECK((two.gemm[i].second >= 1.0 && two.gemm[i].second <= 2.0));
  }
  for (size_t i = 0; i < attention2.size(); ++i) {
    CHECK(two.attention[i].first == double(attention2[i].head));
    CHECK((two.attention[i].second >= 1.0 && two.attention[i].second <= 2.0));
  }
  // The cores' throughput is one BLAS thread's whatever the process runs: between one and the cores.
  pin_blas_threads("2");
  const double throughput = probe::measure_parallel_throughput(2, true);
  CHECK(openblas_get_num_threads() >= 2);
  pin_blas_threads(nullptr);
  CHECK((throughput >= 1.0 && throughput <= 2.0));
}

TEST_CASE("the cores a kernel keeps are its one-thread time over its time on the process's threads, from one core up to the threads") {
  // Forward and backward weigh by their FLOPs: time = 1 / forward + 2 / backward.
  const std::vector<probe::GemmPoint> many = {{24, 10e9, 10e9}, {307, 40e9, 20e9}, {1024, 90e9, 90e9}};
  const std::vector<probe::GemmPoint> one = {{24, 12e9, 12e9}, {307, 20e9, 16e9}, {1024, 30e9, 30e9}};
  const std::vector<probe::AttentionPoint> many_att = {{32, 8e9, 4e9}};
  const std::vector<probe::AttentionPoint> one_att = {{32, 4e9, 4e9}};
  const probe::KernelThreads k = probe::kernel_threads_from(many, one, many_att, one_att, 2);
  REQUIRE(k.gemm.size() == 3);
  CHECK(k.gemm[0] == std::pair<double, double>{24.0, 1.0});  // faster on one thread: never below one core
  CHECK(k.gemm[1].first == 307.0);
  // one thread: 1/20 + 2/16 = 0.175; two: 1/40 + 2/20 = 0.125 -> 1.4 cores
  CHECK(k.gemm[1].second == Approx(1.4));
  CHECK(k.gemm[2].second == 2.0);  // three times as fast on two threads: at most two cores
  REQUIRE(k.attention.size() == 1);
  // one thread: 1/4 + 2/4 = 0.75; two: 1/8 + 2/4 = 0.625 -> 1.2 cores
  CHECK(k.attention[0].first == 32.0);
  CHECK(k.attention[0].second == Approx(1.2));
  // Shapes pair by their key, not their place; a shape measured on one side only is left out.
  const probe::KernelThreads partial = probe::kernel_threads_from(many, {one[1]}, {}, one_att, 4);
  REQUIRE(partial.gemm.size() == 1);
  CHECK(partial.gemm[0].first == 307.0);
  CHECK(partial.gemm[0].second == Approx(1.4));
  CHECK(partial.attention.empty());
}

TEST_CASE("spread gives the nearest-rank 10th and 90th percentiles and the median") {
  const probe::Spread none = probe::spread({});
  CHECK(none.p10 == 0.0);
  CHECK(none.ratio() == 1.0);
  const probe::Spread ten = probe::spread({10, 1, 9, 2, 8, 3, 7, 4, 6, 5});
  CHECK(ten.p10 == 1.0);
  CHECK(ten.median == 5.5);
  CHECK(ten.p90 == 9.0);
  CHECK(ten.ratio() == 9.0);
  const probe::Spread twenty = probe::spread({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20});
  CHECK(twenty.p10 == 2.0);
  CHECK(twenty.p90 == 18.0);
  const probe::Spread one = probe::spread({3});
  CHECK((one.p10 == 3.0 && one.median == 3.0 && one.p90 == 3.0));
}

TEST_CASE("profile-hw warns when a shared GEMM's cores move while one thread's rate holds, and tells the two apart") {
  probe::BlasSteadiness steady;
  steady.threads = 2;
  steady.cores_kept = {1.90, 1.92, 1.88, 1.91, 1.93, 1.89, 1.90, 1.92, 1.91, 1.90};
  steady.one_thread = std::vector<double>(10, 80e9);
  CHECK(probe::steadiness_warning(steady).empty());
  CHECK_THAT(probe::steadiness_note(steady), Catch::Contains("1.88..1.92 cores") && Catch::Contains("10 window pairs"));

  probe::BlasSteadiness flipping = steady;  // two levels, the cores' own speed steady
  flipping.cores_kept = {1.95, 1.95, 1.96, 1.94, 1.95, 1.40, 1.41, 1.39, 1.40, 1.42};
  const std::string w = probe::steadiness_warning(flipping);
  CHECK_THAT(w, Catch::Contains("1.39 cores busy in some windows and 1.95 in others (40 % apart)") &&
                    Catch::Contains("while one thread's rate held within 0 %") &&
                    Catch::Contains("OPENBLAS_NUM_THREADS=2") && Catch::Contains("One thread per process (--threads 1"));

  probe::BlasSteadiness loaded = flipping;  // the one-thread reference moved as well
  loaded.one_thread = {80e9, 80e9, 80e9, 80e9, 80e9, 60e9, 60e9, 60e9, 60e9, 60e9};
  CHECK_THAT(probe::steadiness_warning(loaded), Catch::Contains("one thread's rate moved by 33 % too"));

  // The round trip beside each pair splits the windows: near (short trip) kept more cores than far.
  probe::BlasSteadiness placed = flipping;
  placed.round_trip = {100e-9, 96e-9, 98e-9, 95e-9, 97e-9, 440e-9, 430e-9, 450e-9, 445e-9, 435e-9};
  const auto split = probe::cores_by_round_trip(placed);
  REQUIRE(split);
  CHECK(split->near_cores == Approx(1.95));
  CHECK(split->far_cores == Approx(1.40));
  CHECK(split->near_round_trip == Approx(97e-9));
  CHECK(split->far_round_trip == Approx(440e-9));
  CHECK_THAT(probe::steadiness_warning(placed),
             Catch::Contains("back in 97 ns the GEMM kept 1.95 cores, where it took 440 ns 1.40") &&
                 Catch::Contains("physical cores that share a cache"));
  CHECK_THAT(probe::steadiness_note(placed), Catch::Contains("round trip between two cores 95..445 ns"));
  probe::BlasSteadiness placed_loaded = placed;  // one thread moved too: said, and the split still given
  placed_loaded.one_thread = loaded.one_thread;
  CHECK_THAT(probe::steadiness_warning(placed_loaded),
             Catch::Contains("moved by 33 % too") && Catch::Contains("back in 97 ns the GEMM kept 1.95 cores"));
  // A round trip that held (under 1.5x) or one not measured beside every pair splits nothing.
  probe::BlasSteadiness steady_trip = flipping;
  steady_trip.round_trip = std::vector<double>(10, 100e-9);
  CHECK_FALSE(probe::cores_by_round_trip(steady_trip));
  CHECK_THAT(probe::steadiness_warning(steady_trip), !Catch::Contains("ns the GEMM kept"));
  probe::BlasSteadiness short_trip = placed;
  short_trip.round_trip.pop_back();
  CHECK_FALSE(probe::cores_by_round_trip(short_trip));
  // A side of a single window pair splits nothing either.
  probe::BlasSteadiness lone = placed;
  lone.round_trip = {100e-9, 96e-9, 98e-9, 95e-9, 97e-9, 99e-9, 96e-9, 97e-9, 98e-9, 440e-9};
  CHECK_FALSE(probe::cores_by_round_trip(lone));
  // The round trip split the windows but the cores did not follow it: said, and not given as the cause.
  probe::BlasSteadiness unrelated = flipping;
  unrelated.round_trip = {100e-9, 96e-9, 440e-9, 430e-9, 450e-9, 98e-9, 97e-9, 445e-9, 435e-9, 442e-9};
  const auto level = probe::cores_by_round_trip(unrelated);
  REQUIRE(level);
  CHECK(level->near_cores == Approx(1.68));  // (1.41 + 1.95) / 2 over windows 0, 1, 5, 6
  CHECK(level->far_cores == Approx(1.68));   // (1.42 + 1.94) / 2 over the rest
  const std::string u = probe::steadiness_warning(unrelated);
  CHECK_THAT(u, Catch::Contains("cause not identified here") && Catch::Contains("does not explain the spread") &&
                    !Catch::Contains("physical cores that share a cache"));

  // The thresholds: the shared GEMM's cores over 15 % apart (p90 over p10), one thread's rate within 10 %.
  probe::BlasSteadiness edge = steady;
  edge.cores_kept = {1.0, 1.0, 1.0, 1.0, 1.0, 1.14, 1.14, 1.14, 1.14, 1.14};
  CHECK(probe::steadiness_warning(edge).empty());
  edge.cores_kept = {1.0, 1.0, 1.0, 1.0, 1.0, 1.16, 1.16, 1.16, 1.16, 1.16};
  CHECK_THAT(probe::steadiness_warning(edge), Catch::Contains("(16 % apart)") && Catch::Contains("held within 0 %"));
  edge.one_thread = {80e9, 80e9, 80e9, 80e9, 80e9, 87.2e9, 87.2e9, 87.2e9, 87.2e9, 87.2e9};  // 9 %
  CHECK_THAT(probe::steadiness_warning(edge), Catch::Contains("held within 9 %"));
  edge.one_thread = {80e9, 80e9, 80e9, 80e9, 80e9, 88.8e9, 88.8e9, 88.8e9, 88.8e9, 88.8e9};  // 11 %
  CHECK_THAT(probe::steadiness_warning(edge), Catch::Contains("moved by 11 % too"));

  probe::BlasSteadiness single;  // one BLAS thread: nothing measured, nothing said
  CHECK(probe::steadiness_warning(single).empty());
  CHECK(probe::steadiness_note(single).empty());
}

TEST_CASE("the steadiness probe measures nothing on one BLAS thread and pairs of windows on two", "[native-only]") {
  CHECK_THROWS_WITH(probe::measure_blas_steadiness(1.0, 0.0), Catch::Contains("window 0"));
  CHECK_THROWS_WITH(probe::measure_blas_steadiness(1.0, 0.1, 0), Catch::Contains("width 0"));
  pin_blas_threads("1");
  const probe::BlasSteadiness one = probe::measure_blas_steadiness(0.2, 0.05);
  CHECK(one.threads == 1);
  CHECK(one.cores_kept.empty());
  if (!pin_two_blas_threads()) return;
  const probe::BlasSteadiness two = probe::measure_blas_steadiness(0.4, 0.05);
  CHECK(openblas_get_num_threads() == 2);  // each one-thread window gave the threads back
  pin_blas_threads(nullptr);
  CHECK(two.threads == 2);
  REQUIRE(two.cores_kept.size() == 4);  // 0.4 s in pairs of 0.05 s windows
  REQUIRE(two.one_thread.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(std::isfinite(two.one_thread[i]));  // a rate, however slow the core (under emulation: 0.1 GFLOP/s)
    CHECK(two.one_thread[i] > 0.0);
    CHECK(two.cores_kept[i] > 0.0);
  }
  if (usable_cores() >= 2) {
    REQUIRE(two.round_trip.size() == 4);
    for (double t : two.round_trip) CHECK((std::isfinite(t) && t > 0.0));  // loaded, it can wait for time slices
  } else {
    CHECK(two.round_trip.empty());
  }
}

TEST_CASE("a cache line's round trip between two threads is timed as its fastest batch") {
  CHECK_THROWS_WITH(probe::cache_line_round_trip(0, 10), Catch::Contains("0 batches of 10"));
  CHECK_THROWS_WITH(probe::cache_line_round_trip(3, 0), Catch::Contains("3 batches of 0"));
  if (usable_cores() < 2) {
    WARN("one core: the round trip would wait for time slices, and is not measured");
    return;
  }
  // Each batch's time is at least its round trips' own; a cache line between two cores takes tens of
  // nanoseconds at the least (two cache-to-cache transfers), so a figure under 10 ns did not wait for the other thread.
  const auto t0 = std::chrono::steady_clock::now();
  const auto one_batch = probe::cache_line_round_trip(1, 50);
  const double whole = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(one_batch);
  CHECK(*one_batch > 10e-9);
  CHECK(*one_batch * 50 <= whole);
  const auto fastest = probe::cache_line_round_trip(7, 50);
  REQUIRE(fastest);
  CHECK(*fastest > 10e-9);
  CHECK(std::isfinite(*fastest));
  // The deadline: a batch of a billion round trips (a minute or more) is given up after 50 ms, and the
  // other thread stops although it may be answering when told to.
  const auto t1 = std::chrono::steady_clock::now();
  CHECK_FALSE(probe::cache_line_round_trip(1, 1'000'000'000, 0.05));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count() < 5.0);
  CHECK_FALSE(probe::cache_line_round_trip(3, 10, 0.0));  // no batch starts
}

TEST_CASE("profile-hw warns when its phases saw the cores share data at different costs") {
  const std::vector<probe::PhaseRoundTrip> same = {{"before_kernels", 110e-9}, {"after_kernels", 76e-9},
                                                   {"before_steps", 150e-9}, {"after_steps", 112e-9}};
  CHECK(probe::phase_round_trips(same) == "before_kernels 110 ns, after_kernels 76 ns, before_steps 150 ns, after_steps 112 ns");
  CHECK(probe::phase_round_trip_warning(same, 2).empty());  // 150 / 76 = 1.97: one state's jitter
  std::vector<probe::PhaseRoundTrip> mixed = same;
  mixed[2].seconds = 420e-9;
  const std::string w = probe::phase_round_trip_warning(mixed, 2);
  CHECK_THAT(w, Catch::Contains("in 76 ns (after_kernels) but in 420 ns (before_steps)") &&
                    Catch::Contains("OPENBLAS_NUM_THREADS=2 mix them"));
  CHECK(probe::phase_round_trip_warning(mixed, 1).empty());  // one BLAS thread: nothing measured shares data
  CHECK(probe::phase_round_trip_warning({mixed[0]}, 2).empty());
  CHECK(probe::phase_round_trip_warning({}, 2).empty());
  CHECK(probe::phase_round_trips({}).empty());
  // The threshold: 2x exactly is within, just over it is not.
  CHECK(probe::phase_round_trip_warning({{"a", 100e-9}, {"b", 200e-9}}, 4).empty());
  CHECK_FALSE(probe::phase_round_trip_warning({{"a", 100e-9}, {"b", 201e-9}}, 4).empty());
}

TEST_CASE("zinf validate notes a run whose cores shared data at another cost than the profile's") {
  const std::vector<probe::PhaseRoundTrip> profile = {{"before_kernels", 95e-9}, {"before_steps", 108e-9}, {"after_steps", 126e-9}};
  const std::vector<probe::PhaseRoundTrip> same = {{"before_run", 70e-9}, {"after_run", 120e-9}};
  CHECK(probe::run_state_note(profile, same, 2).empty());  // 126 / 70 = 1.8
  const std::vector<probe::PhaseRoundTrip> moved = {{"before_run", 425e-9}, {"after_run", 454e-9}};
  CHECK_THAT(probe::run_state_note(profile, moved, 2),
             Catch::Contains("before_kernels 95 ns, before_steps 108 ns, after_steps 126 ns while the profile measured") &&
                 Catch::Contains("before_run 425 ns, after_run 454 ns around this run") &&
                 Catch::Contains("the state changed between the profile and this run") &&
                 Catch::Contains("the error includes that change"));
  const std::vector<probe::PhaseRoundTrip> during = {{"before_run", 110e-9}, {"after_run", 440e-9}};
  CHECK_THAT(probe::run_state_note(profile, during, 2), Catch::Contains("the state changed during this run"));
  // The kernels alone in one state and the steps in the other: the profile mixes them, whatever the run saw.
  const std::vector<probe::PhaseRoundTrip> mixed_profile = {{"before_kernels", 409e-9}, {"before_steps", 111e-9}, {"after_steps", 92e-9}};
  CHECK_THAT(probe::run_state_note(mixed_profile, same, 2), Catch::Contains("the profile itself saw both states"));
  CHECK(probe::run_state_note(profile, moved, 1).empty());  // one BLAS thread
  CHECK(probe::run_state_note({}, moved, 2).empty());       // a profile that did not record them
  CHECK(probe::run_state_note(profile, {}, 2).empty());
}

TEST_CASE("two steadiness measurements join, keeping the round trips only where both have one beside every pair") {
  probe::BlasSteadiness early, late;
  early.threads = late.threads = 2;
  early.cores_kept = {1.9, 1.8};
  early.one_thread = {80e9, 81e9};
  early.round_trip = {100e-9, 110e-9};
  late.cores_kept = {1.5};
  late.one_thread = {79e9};
  late.round_trip = {400e-9};
  probe::BlasSteadiness both = early;
  probe::append_steadiness(both, late);
  CHECK(both.cores_kept == std::vector<double>{1.9, 1.8, 1.5});
  CHECK(both.one_thread == std::vector<double>{80e9, 81e9, 79e9});
  CHECK(both.round_trip == std::vector<double>{100e-9, 110e-9, 400e-9});
  late.round_trip.clear();  // the later round trips could not be timed
  probe::BlasSteadiness partial = early;
  probe::append_steadiness(partial, late);
  CHECK(partial.cores_kept.size() == 3);
  CHECK(partial.round_trip.empty());
}
