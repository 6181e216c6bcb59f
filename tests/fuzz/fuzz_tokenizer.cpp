// Fuzz target: GPT-2 BPE tokenizer files (engine::BpeTokenizer): the input read as a Hugging Face
// tokenizer.json, and cut at its first NUL byte into a vocab.json and a merges.txt; each tokenizer
// that loads then encodes and decodes a short text.
#include "engine/data/bpe_tokenizer.hpp"
#include "fuzz_target.hpp"

namespace zinf::fuzz {
namespace {

void use(engine::BpeTokenizer t) {
  const auto ids = t.encode("Hello, world! 12 ab  abc\n");
  (void)t.decode(ids);
}

}  // namespace

void fuzz_one(std::string_view input) {
  const std::string text(input);
  try {
    use(engine::BpeTokenizer::from_tokenizer_json(text, "tokenizer.json"));
  } catch (const std::runtime_error&) {
    // A refusal naming the file, as intended; go on to read the same bytes as vocab + merges.
  }
  const size_t cut = text.find('\0');
  use(engine::BpeTokenizer::from_strings(text.substr(0, cut), cut == std::string::npos ? "" : text.substr(cut + 1),
                                         "vocab.json + merges.txt"));
}
std::vector<std::string> builtin_seeds() {
  using namespace std::string_literals;
  return {R"({"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "Ġab": 5, "abc": 6, "!": 7, "<|endoftext|>": 8})"s + '\0' +
              "#version: 0.2\na b\nĠ ab\nab c\n",
          R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3}, "merges": ["a b", "Ġ ab"]},
 "added_tokens": [{"id": 4, "content": "<|endoftext|>"}]})"};
}
}  // namespace zinf::fuzz
