// DivergenceRule: non-finite figures, a loss that explodes while finite (against the median of the
// recent steps and the loss of a uniform guess), a gradient-norm explosion, what passes (noise,
// spikes of 100x in the gradient norm, small losses that wobble), and the window's round trip
// through a checkpoint's JSON.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "engine/train/divergence.hpp"
#include "engine/train/run_identity.hpp"

using namespace zinf;
using Catch::Matchers::Contains;

TEST_CASE("non-finite figures diverge", "[divergence]") {
  engine::DivergenceRule rule(256);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  CHECK_THAT(rule.check(nan, 1, 0), Contains("not finite"));
  CHECK_THAT(rule.check(5, inf, 0), Contains("not finite"));
  CHECK_THAT(rule.check(5, 1, 3), Contains("3 master weights"));
  CHECK(rule.check(5, 1, 0).empty());
}

TEST_CASE("a loss that explodes while finite diverges at the first step that sees it", "[divergence]") {
  engine::DivergenceRule rule(256);
  CHECK(rule.check(5.47, 1.2, 0).empty());
  // lr 1e6 measured on gpt-tiny: 5.47, then 1.4e13.
  CHECK_THAT(rule.check(1.4e13, 3e12, 0), Contains("loss 1.4e+13") && Contains("median loss"));
  // Before any step is accepted, 10x the uniform guess (ln 256 = 5.55) is the bound.
  engine::DivergenceRule fresh(256);
  CHECK_THAT(fresh.check(56, 1, 0), Contains("uniform guess"));
  CHECK(engine::DivergenceRule(256).check(54, 1, 0).empty());
}

TEST_CASE("noise, a run that memorizes, and gradient spikes of 100x pass", "[divergence]") {
  engine::DivergenceRule rule(256);
  for (int i = 0; i < 40; ++i) REQUIRE(rule.check(5.0 - 0.1 * (i % 7), 1.0 + 0.3 * (i % 5), 0).empty());
  CHECK(rule.check(19.4, 1.0, 0).empty());   // lr 0.3's spike: 3.5x, below 10x
  CHECK(rule.check(5.0, 100.0, 0).empty());  // a 100x gradient-norm spike
  // Losses near zero: a wobble to 0.5 is 50x their median but below a uniform guess's loss.
  engine::DivergenceRule small(256);
  for (int i = 0; i < 16; ++i) REQUIRE(small.check(0.01, 0.1, 0).empty());
  CHECK(small.check(0.5, 0.1, 0).empty());
  CHECK_THAT(small.check(6.0, 0.1, 0), Contains("uniform guess"));
}

TEST_CASE("a gradient norm 1000x its recent median diverges", "[divergence]") {
  engine::DivergenceRule rule(256);
  for (int i = 0; i < 5; ++i) REQUIRE(rule.check(5, 2, 0).empty());
  CHECK_THAT(rule.check(5, 2001, 0), Contains("gradient norm 2001") && Contains("median gradient norm"));
}

TEST_CASE("the window travels in JSON and judges the next step as before", "[divergence]") {
  engine::DivergenceRule a(256), b(256);
  for (int i = 0; i < 20; ++i) REQUIRE(a.check(3.0 + 0.01 * i, 1.5, 0).empty());
  b.from_json(a.to_json(), "meta.json");
  CHECK(b.to_json() == a.to_json());
  CHECK(a.to_json()["losses"].size() == engine::DivergenceRule::kWindow);
  CHECK(a.check(40, 1.5, 0) == b.check(40, 1.5, 0));
  CHECK_THROWS_WITH(b.from_json({{"losses", {1, -2}}, {"grad_norms", {1, 1}}}, "m.json"), Contains("m.json"));
  CHECK_THROWS_WITH(b.from_json({{"losses", {1}}}, "m.json"), Contains("divergence"));
}

TEST_CASE("run fields: every config key is a field, and differences are named key by key", "[identity]") {
  core::RunConfig c;
  auto before = engine::config_fields(c);
  CHECK(before.count("config.optimizer.lr"));
  CHECK(before.count("config.aio.checksums"));
  c.lr = 2e-3;
  c.gradient_accumulation = 4;
  const auto d = engine::field_differences(before, engine::config_fields(c));
  REQUIRE(d.size() == 2);
  CHECK_THAT(d[0], Contains("config.gradient_accumulation: 1 -> 4"));
  CHECK_THAT(d[1], Contains("config.optimizer.lr: 0.0003 -> 0.002"));
  CHECK(engine::field_differences({{"a", "1"}}, {{"b", "1"}}) ==
        std::vector<std::string>{"a: 1 -> (none)", "b: (none) -> 1"});
  CHECK(engine::fields_from_json(engine::fields_to_json(before), "m.json", "config") == before);
}

TEST_CASE("data identity: size and the head's checksum; a file of the same size but other text differs", "[identity]") {
  const auto a = engine::data_identity(engine::TokenCorpus::from_text("the same length", "a.txt"));
  const auto b = engine::data_identity(engine::TokenCorpus::from_text("the same length", "b.txt"));
  const auto c = engine::data_identity(engine::TokenCorpus::from_text("another content", "c.txt"));
  CHECK(a.same_as(b));  // the name does not matter
  CHECK_FALSE(a.same_as(c));
  CHECK(engine::DataIdentity::from_json(a.to_json(), "m.json").same_as(a));
  CHECK_THROWS_WITH(engine::DataIdentity::from_json({{"tokens", 3}}, "m.json"), Contains("head_crc32c"));
}

TEST_CASE("data identity of 16-bit ids is what checkpoints recorded before 32-bit ids, whatever width holds them",
          "[identity]") {
  // CRC32C (Castagnoli) of the 15 ids as little-endian uint16, worked out apart from zinf's crc32c:
  // a checkpoint written before ids could be 32 bits names the same data on resume.
  const auto narrow = engine::data_identity(engine::TokenCorpus::from_text("the same length", "a.txt"));
  CHECK(narrow.head_crc32c == 0xe169b9e8u);
  // The same ids held in 32 bits (a file of a vocabulary past 65536) are the same data.
  auto wide = engine::TokenCorpus::from_text("the same length", "a32.bin");
  wide.tokens.widen();
  CHECK(engine::data_identity(wide).same_as(narrow));
  // Ids past 65535 are summed as uint32.
  engine::TokenCorpus big;
  big.tokens = engine::TokenIds(std::vector<uint32_t>{1, 70000, 3});
  CHECK(engine::data_identity(big).head_crc32c == 0xf02df23cu);
}
