// Each family's tokenizer.json as Hugging Face's tokenizers ships it (tests/data/tokenizers, small
// vocabularies made by make_tokenizers.py there): special tokens, normalizers, splits, merges by
// rank, ignore_merges, byte fallback, the template's BOS and the decoders, with the tokens expected
// worked out by hand from the merges' ranks (reasons beside them); files zinf cannot encode exactly
// are refused naming the file and the step.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/data/bpe_tokenizer.hpp"
#include "temp_dir.hpp"

using Catch::Matchers::Contains;
using zinf::engine::BpeTokenizer;
using V = std::vector<std::string>;

namespace {

std::string family_path(const std::string& name) {
  return std::string(ZINF_SOURCE_DIR) + "/tests/data/tokenizers/" + name + ".json";
}

std::string family_text(const std::string& name) {
  std::ifstream in(family_path(name));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The tokens `text` encodes to, each as the vocabulary or the added token writes it (bytes for a
// byte-level vocabulary).
V tokens(BpeTokenizer& t, std::string_view text) {
  V out;
  for (int32_t id : t.encode(text)) out.push_back(t.token_bytes(id));
  return out;
}

// The id of the token the vocabulary or an added token writes as `token`.
int32_t id_of(const BpeTokenizer& t, const std::string& token) {
  for (int32_t id = 0; id < t.vocab_size(); ++id)
    if (t.token_bytes(id) == token) return id;
  FAIL("no token " << token);
  return -1;
}

const std::string kMark = "\xE2\x96\x81";  // ▁, SentencePiece's space

}  // namespace

TEST_CASE("Llama 3: special tokens, its split, merges by rank, ignore_merges and the BOS template", "[tokenizer]") {
  auto t = BpeTokenizer::load(family_path("llama3"));
  CHECK_THAT(t.description(), Contains("byte-level") && Contains("Llama 3 split"));
  // "Hello": l+l (rank 15), H+e (22), He+ll (23), Hell+o (24). " world": Ġ+w (17), o+r (18), Ġw+or
  // (19), l+d (20), Ġwor+ld (21). "'s" by '+s (8). The split gives " " alone before the digits and
  // cuts 12345 as 123|45; 1+2 (10) and 12+3 (11) make "123", no merge joins 4 and 5.
  CHECK(tokens(t, "<|begin_of_text|>Hello world's 12345<|eot_id|>") ==
        V{"<|begin_of_text|>", "Hello", " world", "'s", " ", "123", "4", "5", "<|eot_id|>"});
  // "xyz" is a whole token that no merge makes (x+y only): ignore_merges gives it directly.
  CHECK(tokens(t, "xyz") == V{"xyz"});
  CHECK(t.document_start() == std::vector<int32_t>{id_of(t, "<|begin_of_text|>")});
  CHECK(t.document_end().empty());
  const std::string text = "<|start_header_id|>user<|end_header_id|>\n\nDon'T \xF0\x9F\x98\x80 caf\xC3\xA9\r\n  x";
  CHECK(t.decode(t.encode(text)) == text);
}

TEST_CASE("Qwen2: NFC first, digits one at a time, merges without ignore_merges", "[tokenizer]") {
  auto t = BpeTokenizer::load(family_path("qwen2"));
  CHECK_THAT(t.description(), Contains("Qwen2 split") && Contains("normalized"));
  // "cafe" + combining acute is NFC "café": Ã+© (25) before a+f (27), then c+af (26), caf+Ã© (28).
  // "user": only e+r (16). Digits are pieces of one, so 1+2 never applies.
  CHECK(tokens(t, "<|im_start|>user\ncafe\xCC\x81 123<|im_end|>") ==
        V{"<|im_start|>", "u", "s", "er", "\n", "caf\xC3\xA9", " ", "1", "2", "3", "<|im_end|>"});
  CHECK(tokens(t, "xyz") == V{"xy", "z"});  // no ignore_merges: x+y (30), and no merge takes z
  CHECK(t.document_start() == std::vector<int32_t>{id_of(t, "<|endoftext|>")});
  // Decoding gives the normalized text back.
  CHECK(t.decode(t.encode("cafe\xCC\x81!")) == "caf\xC3\xA9!");
}

TEST_CASE("GPT-NeoX: runs of spaces are its added tokens, matched before the split", "[tokenizer]") {
  auto neox = BpeTokenizer::load(family_path("gpt-neox"));
  auto gpt2 = BpeTokenizer::load(family_path("gpt2"));
  // Leftmost, longest: the four spaces are one added token, so "b" has no space before it; then
  // the two. GPT-2 splits the same text by its pattern: "   " (the run less its last space, which
  // leads " b"), Ġ+Ġ (12) making "  " + " ".
  CHECK(tokens(neox, "a    b  c") == V{"a", "    ", "b", "  ", "c"});
  CHECK(tokens(gpt2, "a    b  c") == V{"a", "  ", " ", " ", "b", " ", " ", "c"});
  CHECK(neox.decode(neox.encode("a    b  c")) == "a    b  c");
  CHECK(neox.document_start() == std::vector<int32_t>{0});
  CHECK(tokens(neox, "cafe\xCC\x81") == V{"caf\xC3\xA9"});  // its NFC normalizer
  CHECK(tokens(gpt2, "Hello<|endoftext|> world") == V{"Hello", "<|endoftext|>", " world"});
  CHECK(gpt2.document_start() == std::vector<int32_t>{id_of(gpt2, "<|endoftext|>")});
}

TEST_CASE("Llama 2 / Mistral: SentencePiece BPE with '▁', byte fallback and its decoder", "[tokenizer]") {
  auto t = BpeTokenizer::load(family_path("llama2"));
  CHECK_THAT(t.description(), Contains("text BPE") && Contains("normalized"));
  // Prepend and Replace make "▁Hello▁world", one word: ▁+H (3), e+l (4), l+o (5), el+lo (6),
  // ▁H+ello (7); ▁+w (8), o+r (9), ▁w+or (10), l+d (11), ▁wor+ld (12).
  CHECK(tokens(t, "Hello world") == V{kMark + "Hello", kMark + "world"});
  // 中 is not in the vocabulary: its three UTF-8 bytes as <0xNN> tokens.
  CHECK(tokens(t, "Hi \xC3\xA9\xE4\xB8\xAD") == V{kMark + "H", "i", kMark, "\xC3\xA9", "<0xE4>", "<0xB8>", "<0xAD>"});
  // <s> is matched in the raw text; the rest is normalized on its own (so it gains its ▁).
  CHECK(tokens(t, "<s>Hi") == V{"<s>", kMark + "H", "i"});
  CHECK(tokens(t, "a  b") == V{kMark, "a", kMark + kMark, "b"});  // ▁+▁ (13)
  CHECK(t.document_start() == std::vector<int32_t>{1});
  // The decoder: ▁ to a space, byte tokens to their bytes, fused, one leading space stripped.
  CHECK(t.decode(t.encode("Hello world")) == "Hello world");
  CHECK(t.decode(t.encode("Hi \xC3\xA9\xE4\xB8\xAD")) == "Hi \xC3\xA9\xE4\xB8\xAD");
  CHECK(t.decode({id_of(t, "<0xE4>")}) == "\xEF\xBF\xBD");  // a lone byte of a character: U+FFFD
  CHECK(t.decode_next(t.encode("world")[0]) == " world");   // mid-text, the space stays
  CHECK(t.decode_next(id_of(t, "<0xE4>")) == "\xE4");
}

TEST_CASE("SentencePiece variants: Metaspace with prepend_scheme first, and fused unknowns", "[tokenizer]") {
  auto j = nlohmann::json::parse(family_text("llama2"));
  // The shape transformers writes for Llama with legacy=False: no normalizer, a Metaspace that marks
  // only the start of the text.
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kMark}, {"prepend_scheme", "first"}, {"split", false}};
  auto t = BpeTokenizer::from_tokenizer_json(j.dump(), "metaspace.json");
  CHECK(tokens(t, "Hello world") == V{kMark + "Hello", kMark + "world"});
  // After <s> the text is not at the start: no ▁ before Hello (e+l, l+o, el+lo; H+ello is no merge).
  CHECK(tokens(t, "<s>Hello world") == V{"<s>", "H", "ello", kMark + "world"});
  // Without byte fallback, characters outside the vocabulary are <unk>, fused into one.
  j["model"]["byte_fallback"] = false;
  auto u = BpeTokenizer::from_tokenizer_json(j.dump(), "unk.json");
  CHECK(tokens(u,
               "a\xE4\xB8\xAD\xE6\x96\x87"
               "b") == V{kMark, "a", "<unk>", "b"});
}

TEST_CASE("tokenizer.json files zinf cannot encode exactly are refused, naming the file and the step", "[tokenizer]") {
  auto j = nlohmann::json::parse(family_text("llama3"));
  const auto refused = [](const nlohmann::json& file) {
    return BpeTokenizer::from_tokenizer_json(file.dump(), "my/tokenizer.json");
  };
  auto unknown = j;
  unknown["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = R"(\w+|[^\w\s]+)";
  CHECK_THROWS_WITH(refused(unknown), Contains("my/tokenizer.json") && Contains(R"('\w+|[^\w\s]+')") &&
                                          Contains("pre_tokenizer.pretokenizers[0]"));
  auto unigram = j;
  unigram["model"]["type"] = "Unigram";
  CHECK_THROWS_WITH(refused(unigram), Contains("my/tokenizer.json") && Contains("Unigram"));
  auto lowercase = j;
  lowercase["normalizer"] = {{"type", "Lowercase"}};
  CHECK_THROWS_WITH(refused(lowercase),
                    Contains("my/tokenizer.json") && Contains("normalizer") && Contains("Lowercase"));
  auto lstrip = j;
  lstrip["added_tokens"][0]["lstrip"] = true;
  CHECK_THROWS_WITH(refused(lstrip), Contains("added_tokens[0]") && Contains("lstrip"));
  auto dropout = j;
  dropout["model"]["dropout"] = 0.1;
  CHECK_THROWS_WITH(refused(dropout), Contains("dropout"));
  auto fallback = j;
  fallback["model"]["byte_fallback"] = true;
  CHECK_THROWS_WITH(refused(fallback), Contains("byte_fallback"));
  auto decoder = j;
  decoder["decoder"] = {{"type", "WordPiece"}};
  CHECK_THROWS_WITH(refused(decoder), Contains("decoder") && Contains("WordPiece"));
  auto missing = j;
  missing["model"]["merges"].push_back({"x", "q"});  // "xq" is no token
  CHECK_THROWS_WITH(refused(missing), Contains("'xq' is not in the vocabulary"));
}

TEST_CASE("ids are bounded before anything is sized by them, naming the tokenizer file", "[tokenizer]") {
  auto j = nlohmann::json::parse(family_text("qwen2"));
  auto vocab = j;
  vocab["model"]["vocab"]["huge"] = 2147483000;
  CHECK_THROWS_WITH(BpeTokenizer::from_tokenizer_json(vocab.dump(), "q/tokenizer.json"),
                    Contains("q/tokenizer.json") && Contains("'huge'") && Contains("2147483000"));
  auto added = j;
  added["added_tokens"][0]["id"] = 2147483647;
  CHECK_THROWS_WITH(BpeTokenizer::from_tokenizer_json(added.dump(), "q/tokenizer.json"),
                    Contains("q/tokenizer.json") && Contains("added_tokens[0]") && Contains("2147483647"));
  CHECK_THROWS_WITH(BpeTokenizer::from_strings(R"({"a": 2000000000})", "", "gpt/vocab.json"),
                    Contains("gpt/vocab.json") && Contains("2000000000") && Contains("1 entries"));
  // Unused ids below the bound are kept as they are; one past it is refused.
  CHECK(BpeTokenizer::from_strings(R"({"a": 0, "b": 65537})", "", "v.json").vocab_size() == 65538);
  CHECK_THROWS_WITH(BpeTokenizer::from_strings(R"({"a": 0, "b": 65538})", "", "v.json"), Contains("65537"));
  zinf::test::TempDir dir("tokenizer-model-only");
  std::ofstream(dir.path / "tokenizer.model") << "x";
  CHECK_THROWS_WITH(BpeTokenizer::load(dir.path.string()), Contains("tokenizer.model") && Contains("tokenizer.json"));
}
