// The data loader: text as bytes, both .bin token conventions (and their errors), the fortunes
// directory, and batches that are deterministic, resumable and disjoint across ranks.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "engine/data/token_data.hpp"
#include "skip.hpp"

using zinf::engine::BatchLoader;
using zinf::engine::TokenCorpus;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir() {
  fs::path d = fs::temp_directory_path() / ("zinf_data_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

void write_bytes(const fs::path& p, const void* data, size_t n) {
  std::ofstream f(p, std::ios::binary);
  f.write(static_cast<const char*>(data), std::streamsize(n));
}

}  // namespace

TEST_CASE("text becomes byte tokens with targets shifted by one", "[data]") {
  auto c = TokenCorpus::from_text("abcdefghijklmnopqrstuvwxyz");
  CHECK(c.vocab == 256);
  REQUIRE(c.tokens.size() == 26);
  BatchLoader loader(c, 1, 4, 0, 1, 7);
  CHECK(loader.windows() == 6);  // (26 - 1) / 4
  auto b = loader.next();
  REQUIRE(b.inputs.size() == 4);
  for (size_t i = 0; i < 4; ++i) CHECK(b.targets[i] == b.inputs[i] + 1);
  CHECK((b.inputs[0] - 'a') % 4 == 0);  // windows start at multiples of seq
}

TEST_CASE("llm.c and nanoGPT token files load, bad ones are named", "[data]") {
  const fs::path dir = temp_dir();
  std::vector<uint16_t> toks = {5, 50256, 17, 3, 9, 1000};
  {
    std::vector<int32_t> header(256, 0);
    header[0] = 20240520, header[1] = 1, header[2] = int32_t(toks.size());
    std::ofstream f(dir / "llmc.bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(header.data()), 1024);
    f.write(reinterpret_cast<const char*>(toks.data()), std::streamsize(2 * toks.size()));
  }
  write_bytes(dir / "nano.bin", toks.data(), 2 * toks.size());
  for (const char* name : {"llmc.bin", "nano.bin"}) {
    auto c = TokenCorpus::load((dir / name).string());
    CHECK(c.tokens == toks);
    CHECK(c.vocab == 50257);
  }
  {
    std::vector<int32_t> header(256, 0);
    header[0] = 20240520, header[1] = 1, header[2] = 100;  // claims more than it holds
    std::ofstream f(dir / "short.bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(header.data()), 1024);
    f.write(reinterpret_cast<const char*>(toks.data()), std::streamsize(2 * toks.size()));
  }
  CHECK_THROWS_WITH(TokenCorpus::load((dir / "short.bin").string()),
                    Catch::Contains("short.bin") && Catch::Contains("100 tokens"));
  write_bytes(dir / "odd.bin", toks.data(), 3);
  CHECK_THROWS_WITH(TokenCorpus::load((dir / "odd.bin").string()), Catch::Contains("odd.bin"));
  CHECK_THROWS_WITH(TokenCorpus::load((dir / "missing.txt").string()), Catch::Contains("missing.txt"));
  fs::remove_all(dir);
}

TEST_CASE("a directory is its text files concatenated in sorted order", "[data]") {
  const fs::path dir = temp_dir() / "corpus";
  fs::create_directories(dir);
  write_bytes(dir / "b", "BB", 2);
  write_bytes(dir / "a", "AA", 2);
  write_bytes(dir / "a.dat", "xx", 2);  // strfile index: skipped
  fs::create_symlink(dir / "a", dir / "a.u8");  // alias: skipped
  auto c = TokenCorpus::load(dir.string());
  CHECK(std::string(c.tokens.begin(), c.tokens.end()) == "AABB");
  fs::remove_all(dir.parent_path());
}

TEST_CASE("the default corpus is the fortunes package", "[data]") {
  if (!fs::exists(zinf::engine::kDefaultCorpus))
    ZINF_SKIP("fortunes is not installed (bash scripts/setup.sh installs it)");
  auto c = TokenCorpus::load("");
  CHECK(c.tokens.size() > 1000000);
  CHECK(c.vocab == 256);
}

TEST_CASE("batches are deterministic, resumable and disjoint across ranks", "[data]") {
  std::mt19937 rng(1);  // random letters: every window's content is distinct
  std::string text;
  for (int i = 0; i < 4000; ++i) text += char('a' + rng() % 26);
  auto c = TokenCorpus::from_text(text);
  const int64_t B = 3, S = 16;

  BatchLoader a(c, B, S, 0, 1, 42), b(c, B, S, 0, 1, 42), other_seed(c, B, S, 0, 1, 43);
  std::vector<zinf::engine::Batch> first;
  for (int i = 0; i < 10; ++i) first.push_back(a.next());
  for (int i = 0; i < 10; ++i) CHECK(b.next().inputs == first[size_t(i)].inputs);
  CHECK(other_seed.next().inputs != first[0].inputs);

  // resume: a fresh loader seeked to a saved position continues exactly
  BatchLoader resumed(c, B, S, 0, 1, 42);
  resumed.seek(7);
  CHECK(resumed.next().inputs == first[7].inputs);
  CHECK(a.position() == 10);

  // two ranks: disjoint windows within an epoch, and together every window once per epoch
  BatchLoader r0(c, B, S, 0, 2, 42), r1(c, B, S, 1, 2, 42);
  const int64_t steps = r0.windows() / (2 * B);
  std::set<std::vector<int32_t>> seen;
  for (int64_t s = 0; s < steps; ++s)
    for (auto* l : {&r0, &r1}) {
      auto batch = l->next();
      for (int64_t i = 0; i < B; ++i) {
        std::vector<int32_t> w(batch.inputs.begin() + i * S, batch.inputs.begin() + (i + 1) * S);
        w.push_back(batch.targets[size_t((i + 1) * S - 1)]);
        CHECK(seen.insert(w).second);
      }
    }
  CHECK(int64_t(seen.size()) == steps * 2 * B);
  CHECK_THROWS(BatchLoader(c, B, S, 2, 2));
}

TEST_CASE("a FIFO given as data is refused, not read forever", "[data]") {
  const fs::path dir = temp_dir() / "fifo";
  fs::create_directories(dir);
  const fs::path fifo = dir / "pipe.txt";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(TokenCorpus::load(fifo.string()), Catch::Contains("pipe.txt") && Catch::Contains("not a regular file"));
  fs::remove_all(dir.parent_path());
}
