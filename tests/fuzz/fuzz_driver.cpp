// The bounded fuzz run CTest makes of a target: every seed (files and directories named on the
// command line, plus the target's built-in ones), then --runs inputs made by deterministic
// mutations of them (byte flips, insertions, deletions, duplications, splices, and tokens that
// broke readers before: huge, negative and non-finite numbers, brackets, repeated keys, YAML
// anchors and aliases), for at most --seconds in all. An input fails the run when the reader
// crashes, throws anything but the errors a user is meant to see, takes longer than
// kSecondsPerInput (a hang: the process ends naming the input), or asks for a single allocation
// larger than kLargestAllocation (an unbounded allocation: operator new refuses it here, and the
// bad_alloc is reported).
//   fuzz_<reader> [--runs N] [--seconds S] [--seed S] SEED_FILE_OR_DIR...
#include <yaml-cpp/exceptions.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <new>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <set>
#include <fstream>
#include <new>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz_target.hpp"

namespace fs = std::filesystem;

namespace {

constexpr unsigned kSecondsPerInput = 20;  // generous for sanitizer builds; inputs are at most 1 MiB
constexpr std::size_t kLargestAllocation = std::size_t(512) << 20;

std::size_t g_current_input = 0;

extern "C" void on_hang(int) {
  char msg[96];
  const int n = std::snprintf(msg, sizeof msg, "input %zu: no result within %u s: the reader hangs\n", g_current_input,
                              kSecondsPerInput);
  [[maybe_unused]] auto w = ::write(STDERR_FILENO, msg, size_t(n > 0 ? n : 0));
  ::_exit(1);
}

}  // namespace

// Every allocation of the fuzz run passes here: one beyond the bound is refused, so a reader that
// sizes a buffer from its input shows as a bad_alloc failure instead of exhausting the machine.
void* operator new(std::size_t n) {
  if (n > kLargestAllocation) throw std::bad_alloc();
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

const std::vector<std::string> kTokens = {
    "0", "-1", "1e999", "nan", "NaN", "inf", "-inf", ".inf", "1e300 T", "9e18", "9223372036854775808", "-0", "1.5",
    "0x10", "{", "}", "[", "]", ":", ",", "- ", "\"", "'", "\n", "\n  x: 1\n", "null", "~", "true", "&a", "*a",
    "!!binary", "4096", "1 GiB", "1e-300 FLOP/s", "[2, -1]", "[NaN, 0.95]", "99999999999", "\xff\xfe", "%",
    "&b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]", "[*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]", "<<: *a",
    std::string(40, '['), std::string(1, '\0')};

// One mutation of `s`, chosen by `rng`.
std::string mutate(std::string s, const std::vector<std::string>& pool, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t(0) : size_t(rng() % n); };
  const int rounds = 1 + int(rng() % 4);
  for (int r = 0; r < rounds; ++r) {
    switch (rng() % 7) {
      case 0:
        if (!s.empty()) s[pick(s.size())] ^= char(1u << (rng() % 8));
        break;
      case 1: s.insert(pick(s.size() + 1), 1, char(rng() % 256)); break;
      case 2:
        if (!s.empty()) {
          size_t at = pick(s.size());
          s.erase(at, 1 + pick(std::min<size_t>(64, s.size() - at)));
        }
        break;
      case 3:
        if (!s.empty()) {
          size_t at = pick(s.size()), n = 1 + pick(std::min<size_t>(256, s.size() - at));
          s.insert(pick(s.size() + 1), s.substr(at, n));
        }
        break;
      case 4: {
        const std::string& other = pool[pick(pool.size())];
        if (!other.empty()) s = s.substr(0, pick(s.size() + 1)) + other.substr(pick(other.size()));
        break;
      }
      case 5: {
        // Replace a run of digits (a number in the text) by a token.
        size_t at = s.find_first_of("0123456789", pick(s.size() + 1));
        if (at == std::string::npos) at = pick(s.size() + 1);
        size_t end = s.find_first_not_of("0123456789.e-", at);
        s.replace(at, (end == std::string::npos ? s.size() : end) - at, kTokens[pick(kTokens.size())]);
        break;
      }
      default: s.insert(pick(s.size() + 1), kTokens[pick(kTokens.size())]); break;
    }
  }
  if (s.size() > (1u << 20)) s.resize(1u << 20);
  return s;
}

// Runs one input; false (with the reason printed) when the reader failed in a way a user should
// never see.
bool run(const std::string& input, size_t index) {
  const char* what = nullptr;
  std::string detail;
  try {
    zinf::fuzz::fuzz_one(input);
    return true;
  } catch (const YAML::Exception& e) {
    what = "a raw yaml-cpp exception";
    detail = e.what();
  } catch (const nlohmann::json::exception& e) {
    what = "a raw nlohmann::json exception";
    detail = e.what();
  } catch (const std::logic_error& e) {
    what = "a logic_error";
    detail = e.what();
  } catch (const std::runtime_error&) {
    return true;  // ConfigError, SafetensorsError, and the reader's other errors naming the file
  } catch (const std::bad_alloc&) {
    what = "bad_alloc";
  } catch (const std::exception& e) {
    what = "an unexpected exception";
    detail = e.what();
  }
  std::fprintf(stderr, "input %zu: %s: %s\n--- input (%zu bytes, first 400) ---\n%s\n---\n", index, what,
               detail.substr(0, 400).c_str(), input.size(), input.substr(0, 400).c_str());
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  long runs = 1000;
  double seconds = 60;
  unsigned long long seed = 19;
  std::vector<std::string> pool = zinf::fuzz::builtin_seeds();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc) runs = std::stol(argv[++i]);
    else if (a == "--seconds" && i + 1 < argc) seconds = std::stod(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = std::stoull(argv[++i]);
    else if (fs::is_directory(a)) {
      // The inputs' own kinds (configs, DeepSpeed Hjson, tensors, tokenizer and corpus files), not a
      // folder's README.
      static const std::set<std::string> kinds = {".yaml", ".json", ".hjson", ".safetensors", ".txt"};
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(a))
        if (e.is_regular_file() && kinds.count(e.path().extension().string())) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      for (const auto& f : files) pool.push_back(slurp(f));
    } else {
      pool.push_back(slurp(a));
    }
  }
  if (pool.empty()) {
    std::fprintf(stderr, "no seeds\n");
    return 2;
  }
  std::signal(SIGALRM, on_hang);
  const auto guarded = [](const std::string& input, size_t i) {
    g_current_input = i;
    ::alarm(kSecondsPerInput);
    const bool ok = run(input, i);
    ::alarm(0);
    return ok;
  };
  const auto start = std::chrono::steady_clock::now();
  size_t failures = 0, index = 0;
  for (const auto& s : pool) failures += !guarded(s, index++);
  std::mt19937_64 rng(seed);
  long mutated = 0;
  for (; mutated < runs; ++mutated) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds) break;
    failures += !guarded(mutate(pool[rng() % pool.size()], pool, rng), index++);
  }
  std::printf("%zu inputs (%zu seeds, %ld mutated), %zu failures, %.1f s\n", index, pool.size(), mutated, failures,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return failures == 0 ? 0 : 1;
}
