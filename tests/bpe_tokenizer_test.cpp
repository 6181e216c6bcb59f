// GPT-2's BPE in zinf: the pre-tokenizer splits where GPT-2's pattern splits (expected pieces from
// the regex module running GPT-2's pattern), merges apply by rank, text round-trips, and bad
// vocabulary files are refused naming the file. tests/bpe_gpt2_test.py holds whole corpora to
// GPT-2's encoder.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "engine/data/bpe_tokenizer.hpp"
#include "engine/data/token_data.hpp"
#include "temp_dir.hpp"

using zinf::engine::BpeTokenizer;
using Catch::Matchers::Contains;

namespace {

std::vector<std::string> split(std::string_view text) {
  std::vector<std::string> out;
  for (auto p : BpeTokenizer::split(text)) out.emplace_back(p);
  return out;
}

// A few bytes in GPT-2's alphabet ("Ġ" is the space), "ab", "Ġab", "abc" and <|endoftext|>.
BpeTokenizer tiny() {
  const std::string vocab = R"({"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "Ġab": 5, "abc": 6, "!": 7, "<|endoftext|>": 8})";
  return BpeTokenizer::from_strings(vocab, "#version: 0.2\na b\nĠ ab\nab c\n", "tiny");
}

}  // namespace

TEST_CASE("the pre-tokenizer splits as GPT-2's pattern does", "[bpe]") {
  using V = std::vector<std::string>;
  CHECK(split("Hello world") == V{"Hello", " world"});
  CHECK(split("  two") == V{" ", " two"});
  CHECK(split("a\n\nb") == V{"a", "\n", "\n", "b"});
  CHECK(split("it's 42!! ok") == V{"it", "'s", " 42", "!!", " ok"});
  CHECK(split("x  \n") == V{"x", "  \n"});
  CHECK(split("''s 'S") == V{"''", "s", " '", "S"});
  CHECK(split("caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 12\xc2\xbd") == V{"caf\xc3\xa9", " \xe4\xb8\xad\xe6\x96\x87", " 12\xc2\xbd"});
  CHECK(split(" ") == V{" "});
  CHECK(split("") == V{});
  // Bytes that are not UTF-8 are pieces of their own class; nothing is lost.
  CHECK(split(" a\xff\xfe" "b") == V{" a", "\xff\xfe", "b"});
}

TEST_CASE("merges apply lowest rank first, and text round-trips", "[bpe]") {
  BpeTokenizer t = tiny();
  CHECK(t.vocab_size() == 9);
  CHECK(t.document_start() == std::vector<int32_t>{8});  // <|endoftext|> before each document
  CHECK(t.encode("ab") == std::vector<int32_t>{4});
  CHECK(t.encode("abc") == std::vector<int32_t>{6});
  CHECK(t.encode(" ab") == std::vector<int32_t>{5});  // "a b" (rank 0) before "Ġ ab" (rank 1)
  CHECK(t.encode(" abc") == std::vector<int32_t>{5, 2});  // "Ġab" took "ab" before "ab c" could
  CHECK(t.encode("abab!") == std::vector<int32_t>{4, 4, 7});
  CHECK(t.decode(t.encode("abc ab!")) == "abc ab!");
  CHECK_THROWS_WITH(t.encode("d"), Contains("tiny") && Contains("no token"));
  CHECK_THROWS_AS(t.decode({99}), std::out_of_range);
}

TEST_CASE("bad vocabulary files are refused naming the file and the fault", "[bpe]") {
  CHECK_THROWS_WITH(BpeTokenizer::from_strings("{\"a\": 0", "", "v.json"), Contains("v.json") && Contains("JSON"));
  CHECK_THROWS_WITH(BpeTokenizer::from_strings(R"({"a": -1})", "", "v.json"), Contains("v.json") && Contains("'a'"));
  CHECK_THROWS_WITH(BpeTokenizer::from_strings(R"({"a": 0})", "a b c\n", "m.txt"), Contains("m.txt") && Contains("line 1"));
  // An entry outside GPT-2's alphabet can come from no merge of bytes (it decodes as written); a
  // merge of one is refused.
  CHECK_THROWS_WITH(BpeTokenizer::from_strings("{\"\\u0100\\u0500\": 0, \"a\": 1}", "\u0100\u0500 a\n", "v.json"),
                    Contains("v.json") && Contains("outside GPT-2's byte alphabet"));
  CHECK_THROWS_WITH(BpeTokenizer::from_tokenizer_json(R"({"model": {"type": "WordPiece"}})", "t.json"),
                    Contains("t.json") && Contains("BPE"));
  zinf::test::TempDir dir("bpe-load");
  CHECK_THROWS_WITH(BpeTokenizer::load(dir.path.string()), Contains("vocab.json"));
}

TEST_CASE("text data is encoded with the tokenizer, each document after <|endoftext|>", "[bpe]") {
  zinf::test::TempDir dir("bpe-data");
  std::ofstream(dir.path / "one.txt") << "ab abc";
  std::ofstream(dir.path / "two.txt") << "abab";
  BpeTokenizer t = tiny();
  const auto c = zinf::engine::TokenCorpus::load(dir.path.string(), &t);
  CHECK(c.tokens.values() == std::vector<uint32_t>{8, 4, 5, 2, 8, 4, 4});
  CHECK_FALSE(c.tokens.wide());
  CHECK(c.vocab == 9);
  const auto bytes = zinf::engine::TokenCorpus::load((dir.path / "two.txt").string());
  CHECK(bytes.vocab == 256);
  // An llm.c file written and read back.
  std::filesystem::create_directories(dir.path / "out");  // not a document of the directory
  const std::string bin = (dir.path / "out" / "t.bin").string();
  zinf::engine::write_llmc_bin(bin, c.tokens);
  CHECK(zinf::engine::TokenCorpus::load(bin).tokens == c.tokens);
  // A held-out tail.
  auto all = zinf::engine::TokenCorpus::load(dir.path.string(), &t);
  const auto tail = all.split_tail(0.3, 2);
  CHECK(tail.tokens.values() == std::vector<uint32_t>{4, 4});
  CHECK(all.tokens.size() == 5);
  CHECK_THROWS_WITH(all.split_tail(0.1, 2), Contains("held-out"));
}

TEST_CASE("a vocabulary past 65536 encodes to 32-bit ids and writes llm.c's 32-bit file", "[bpe]") {
  zinf::test::TempDir dir("bpe-wide");
  std::ofstream(dir.path / "one.txt") << "ab abc";
  // tiny()'s tokens, with <|endoftext|> at 65540: no id fits a uint16 past it.
  const std::string vocab =
      R"({"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "Ġab": 5, "abc": 6, "!": 7, "<|endoftext|>": 65540})";
  auto t = BpeTokenizer::from_strings(vocab, "#version: 0.2\na b\nĠ ab\nab c\n", "wide");
  const auto c = zinf::engine::TokenCorpus::load((dir.path / "one.txt").string(), &t);
  CHECK(c.tokens.wide());
  CHECK(c.tokens.values() == std::vector<uint32_t>{65540, 4, 5, 2});
  CHECK(c.vocab == 65541);
  const std::string bin = (dir.path / "t.bin").string();
  zinf::engine::write_llmc_bin(bin, c.tokens);
  std::ifstream in(bin, std::ios::binary);
  int32_t head[3] = {};
  in.read(reinterpret_cast<char*>(head), sizeof head);
  CHECK(head[0] == 20240801);
  CHECK(head[1] == 7);
  CHECK(head[2] == 4);
  CHECK(std::filesystem::file_size(bin) == 1024 + 4 * 4);
  CHECK(zinf::engine::TokenCorpus::load(bin).tokens == c.tokens);
}
