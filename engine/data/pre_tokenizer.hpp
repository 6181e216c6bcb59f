// The pre-tokenizer splits of the model families zinf reads, written by hand for each known
// pattern instead of run by a general regex engine: a tokenizer.json's Split pattern is recognised
// by its exact text, and any other pattern is refused by the reader. Each matcher follows the
// pattern's alternatives in order, as a backtracking engine (Oniguruma in Hugging Face's tokenizers,
// the `regex` module in GPT-2's encoder) tries them, over the classes in unicode_text.hpp:
//   GPT-2 (and ByteLevel's use_regex):
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   Llama 3 (Qwen2 the same with \p{N} one digit at a time instead of \p{N}{1,3}):
//     (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//     \s*[\r\n]+|\s+(?!\S)|\s+
// Pure functions: safe from any thread.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zinf::engine {

enum class SplitPattern { Gpt2, Llama3, Qwen2 };

// The pattern whose exact text `regex` is (as a tokenizer.json's Split holds it), or none.
std::optional<SplitPattern> known_split_pattern(std::string_view regex);
const char* pattern_name(SplitPattern p);

// The length in bytes of the pattern's match at `at` (0: no match there).
size_t match_at(SplitPattern p, std::string_view text, size_t at);

// What regex.findall gives: the matches in order, left to right, each search starting where the
// last match ended (views into `text`). With these patterns every character is in some match, so
// the pieces' concatenation is `text`.
std::vector<std::string_view> find_all(SplitPattern p, std::string_view text);

// Hugging Face's Digits pre-tokenizer on one piece: each \p{N} character its own piece
// (individual) or each run of them one piece, the text between them pieces of their own.
std::vector<std::string_view> split_digits(std::string_view text, bool individual);

// Metaspace's split: a new piece at each occurrence of `marker` (kept at the front of its piece).
std::vector<std::string_view> split_before(std::string_view text, std::string_view marker);

}  // namespace zinf::engine
