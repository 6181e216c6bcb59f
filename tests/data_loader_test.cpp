// The data loader: text as bytes, the .bin token conventions (llm.c's 16- and 32-bit, nanoGPT's) and
// their errors, the fortunes directory, and batches that are deterministic, resumable and disjoint
// across ranks.
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
using zinf::engine::TokenIds;
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

// An llm.c header (magic, version, count) and then `body`, written by hand as llm.c's writer lays it out.
template <typename T>
void write_llmc(const fs::path& p, int32_t magic, int32_t version, int32_t count, const std::vector<T>& body) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic, header[1] = version, header[2] = count;
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header.data()), 1024);
  f.write(reinterpret_cast<const char*>(body.data()), std::streamsize(sizeof(T) * body.size()));
}

std::string file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
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
    CHECK(c.tokens == TokenIds(toks));
    CHECK_FALSE(c.tokens.wide());
    CHECK(c.vocab == 50257);
  }
  // The 16-bit file zinf writes is byte for byte the one written by hand above.
  zinf::engine::write_llmc_bin((dir / "again.bin").string(), TokenIds(toks));
  CHECK(file_bytes(dir / "again.bin") == file_bytes(dir / "llmc.bin"));
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

TEST_CASE("llm.c 32-bit token files round-trip and batch, and ids past the model's vocabulary are refused by name",
          "[data]") {
  const fs::path dir = temp_dir() / "wide";
  fs::create_directories(dir);
  const std::vector<uint32_t> ids = {128000, 5, 70000, 65535, 65536, 9, 128255, 1, 2};
  write_llmc(dir / "hand.bin", 20240801, 7, int32_t(ids.size()), ids);
  auto c = TokenCorpus::load((dir / "hand.bin").string());
  CHECK(c.tokens.wide());
  CHECK(c.tokens.values() == ids);
  CHECK(c.vocab == 128256);
  zinf::engine::write_llmc_bin((dir / "written.bin").string(), c.tokens);
  CHECK(file_bytes(dir / "written.bin") == file_bytes(dir / "hand.bin"));
  CHECK(TokenCorpus::load((dir / "written.bin").string()).tokens == c.tokens);

  // Windows of 32-bit ids reach the batch whole (none cut to 16 bits).
  BatchLoader loader(c, 1, 8, 0, 1, 3);
  const auto b = loader.next();
  CHECK(b.inputs == std::vector<int32_t>(ids.begin(), ids.end() - 1));
  CHECK(b.targets == std::vector<int32_t>(ids.begin() + 1, ids.end()));

  c.require_vocab(128256, "llama-3-8b");
  CHECK_THROWS_WITH(c.require_vocab(100000, "small"), Catch::Contains("hand.bin") && Catch::Contains("up to 128255") &&
                                                          Catch::Contains("128000, at token 0") &&
                                                          Catch::Contains("model small has a vocabulary of 100000"));
  // An id no int32 holds is refused as the file is read.
  write_llmc(dir / "huge.bin", 20240801, 7, 2, std::vector<uint32_t>{1, 0x80000000u});
  CHECK_THROWS_WITH(TokenCorpus::load((dir / "huge.bin").string()),
                    Catch::Contains("huge.bin") && Catch::Contains("2147483648"));
  fs::remove_all(dir);
}

TEST_CASE("truncated or mislabelled 32-bit token files are refused naming the file", "[data]") {
  const fs::path dir = temp_dir() / "bad-wide";
  fs::create_directories(dir);
  const std::vector<uint32_t> ids = {70000, 1, 2, 3};
  write_llmc(dir / "ok.bin", 20240801, 7, 4, ids);
  const std::string whole = file_bytes(dir / "ok.bin");
  write_bytes(dir / "header.bin", whole.data(), 600);  // cut inside the header
  CHECK_THROWS_WITH(TokenCorpus::load((dir / "header.bin").string()),
                    Catch::Contains("header.bin") && Catch::Contains("1024-byte header"));
  write_bytes(dir / "body.bin", whole.data(), whole.size() - 4);  // the last token gone
  CHECK_THROWS_WITH(TokenCorpus::load((dir / "body.bin").string()), Catch::Contains("body.bin") &&
                                                                        Catch::Contains("4 tokens of 4 bytes") &&
                                                                        Catch::Contains("12 bytes"));
  write_bytes(dir / "ragged.bin", whole.data(), whole.size() - 1);  // a partial token
  CHECK_THROWS_WITH(TokenCorpus::load((dir / "ragged.bin").string()), Catch::Contains("ragged.bin"));
  write_llmc(dir / "version.bin", 20240801, 1, 4, ids);  // the 32-bit magic with the 16-bit version
  CHECK_THROWS_WITH(TokenCorpus::load((dir / "version.bin").string()),
                    Catch::Contains("version.bin") && Catch::Contains("version 1, expected 7"));
  write_llmc(dir / "narrow-version.bin", 20240520, 7, 4, std::vector<uint16_t>{1, 2, 3, 4});
  CHECK_THROWS_WITH(TokenCorpus::load((dir / "narrow-version.bin").string()),
                    Catch::Contains("narrow-version.bin") && Catch::Contains("version 7, expected 1"));
  write_llmc(dir / "negative.bin", 20240801, 7, -4, ids);
  CHECK_THROWS_WITH(TokenCorpus::load((dir / "negative.bin").string()),
                    Catch::Contains("negative.bin") && Catch::Contains("negative token count"));
  // 16 bytes of tokens under a 16-bit header that counts 4: the 32-bit body read at the wrong width.
  write_llmc(dir / "width.bin", 20240520, 1, 4, ids);
  CHECK_THROWS_WITH(TokenCorpus::load((dir / "width.bin").string()),
                    Catch::Contains("width.bin") && Catch::Contains("4 tokens of 2 bytes"));
  fs::remove_all(dir);
}

TEST_CASE("token ids stay 16-bit until an id or the vocabulary needs 32", "[data]") {
  TokenIds ids;
  for (uint32_t id : {1u, 65535u}) ids.push_back(id);
  CHECK_FALSE(ids.wide());
  ids.push_back(65536);
  CHECK(ids.wide());
  CHECK(ids.values() == std::vector<uint32_t>{1, 65535, 65536});
  TokenIds narrow(std::vector<uint16_t>{7, 8});
  narrow.append(ids);  // a wide tail widens what it joins
  CHECK(narrow.wide());
  CHECK(narrow.values() == std::vector<uint32_t>{7, 8, 1, 65535, 65536});
  const TokenIds tail = narrow.take_tail(2);
  CHECK(tail.wide());
  CHECK(tail.values() == std::vector<uint32_t>{65535, 65536});
  CHECK(narrow.values() == std::vector<uint32_t>{7, 8, 1});
  TokenIds empty;
  empty.widen();  // a vocabulary past 65536 writes 32 bits even for small ids
  empty.push_back(3);
  CHECK(empty.wide());
  CHECK_THROWS_AS(empty.narrow(), std::logic_error);
}

TEST_CASE("a directory is its text files concatenated in sorted order", "[data]") {
  const fs::path dir = temp_dir() / "corpus";
  fs::create_directories(dir);
  write_bytes(dir / "b", "BB", 2);
  write_bytes(dir / "a", "AA", 2);
  write_bytes(dir / "a.dat", "xx", 2);  // strfile index: skipped
  fs::create_symlink(dir / "a", dir / "a.u8");  // alias: skipped
  auto c = TokenCorpus::load(dir.string());
  CHECK(c.tokens.values() == std::vector<uint32_t>{'A', 'A', 'B', 'B'});
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
