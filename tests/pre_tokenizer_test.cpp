// The hand-written splitters against the families' patterns, on tricky text. Each expectation is
// derived from the pattern's semantics (alternatives tried in order at each position, greedy
// quantifiers that give back characters only when what follows cannot match), and the reason is
// written beside it; tests/tokenizer_families_test.py holds the splitters to the regex module on
// generated text. Also NFC against known compositions, and Digits and Metaspace's splits.
#include <catch2/catch.hpp>

#include "engine/data/pre_tokenizer.hpp"
#include "engine/data/unicode_text.hpp"

using zinf::engine::SplitPattern;
using V = std::vector<std::string>;

namespace {

V split(SplitPattern p, std::string_view text) {
  V out;
  for (auto piece : zinf::engine::find_all(p, text)) out.emplace_back(piece);
  return out;
}

constexpr auto kLlama3 = SplitPattern::Llama3;
constexpr auto kQwen2 = SplitPattern::Qwen2;
constexpr auto kGpt2 = SplitPattern::Gpt2;

}  // namespace

TEST_CASE("the known patterns are recognised by their exact text, others are not", "[pretokenizer]") {
  using zinf::engine::known_split_pattern;
  CHECK(known_split_pattern(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)") == kGpt2);
  CHECK(known_split_pattern(
            R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|)"
            R"(\s*[\r\n]+|\s+(?!\S)|\s+)") == kLlama3);
  CHECK(known_split_pattern(R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|)"
                            R"(\s*[\r\n]+|\s+(?!\S)|\s+)") == kQwen2);
  // One character off (no (?!\S)) is another pattern, and is not guessed at.
  CHECK_FALSE(known_split_pattern(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+|\s+)"));
  CHECK_FALSE(known_split_pattern(""));
}

TEST_CASE("contractions: Llama 3 and Qwen2 match them in any case, GPT-2 in lower case only", "[pretokenizer]") {
  // "'RE": the (?i:...) group takes it whole; GPT-2's 're fails on 'R, so "'" falls to the
  // punctuation run and "RE" to the letters. " 'S": no contraction starts at the space; the letter
  // alternative needs a letter after its optional prefix (here "'"), so ` ?[^\s\p{L}\p{N}]+` takes
  // " '" and leaves "S".
  CHECK(split(kLlama3, "I'm here, they'RE 'S") == V{"I", "'m", " here", ",", " they", "'RE", " '", "S"});
  CHECK(split(kGpt2, "I'm here, they'RE 'S") == V{"I", "'m", " here", ",", " they", "'", "RE", " '", "S"});
  // The long s (U+017F) case-folds to s, so (?i:'s) takes it.
  CHECK(split(kLlama3, "don'\xC5\xBF") == V{"don", "'\xC5\xBF"});
  CHECK(split(kGpt2, "don'\xC5\xBF") == V{"don", "'", "\xC5\xBF"});
  // "''s": at the first quote no contraction matches ("''"), and the punctuation run is greedy:
  // it takes both quotes, leaving "s" to the letters.
  CHECK(split(kLlama3, "''s") == V{"''", "s"});
}

TEST_CASE("digits: Llama 3 in runs of at most three, Qwen2 one by one, GPT-2 whole with a space", "[pretokenizer]") {
  // A space before a digit joins nothing in Llama 3 (the letter alternative needs a letter after
  // its prefix; ` ?[^\s\p{L}\p{N}]+` needs punctuation), so it stands alone by `\s+`; \p{N}{1,3}
  // cuts 1234 as 123|4 and 12345 as 123|45.
  CHECK(split(kLlama3, "a 1 12 123 1234 12345") ==
        V{"a", " ", "1", " ", "12", " ", "123", " ", "123", "4", " ", "123", "45"});
  CHECK(split(kQwen2, "a 1 12 123 1234 12345") ==
        V{"a", " ", "1", " ", "1", "2", " ", "1", "2", "3", " ", "1", "2", "3", "4", " ", "1", "2", "3", "4", "5"});
  CHECK(split(kGpt2, "a 1 12 123 1234 12345") == V{"a", " 1", " 12", " 123", " 1234", " 12345"});
  // Superscripts and Arabic-Indic digits are \p{N} too.
  CHECK(split(kLlama3, "x\xC2\xB2\xC2\xB3 \xD9\xA3") == V{"x", "\xC2\xB2\xC2\xB3", " ", "\xD9\xA3"});
  CHECK(split(kQwen2, "x\xC2\xB2\xC2\xB3 \xD9\xA3") == V{"x", "\xC2\xB2", "\xC2\xB3", " ", "\xD9\xA3"});
}

TEST_CASE("line ends: Llama 3 keeps CRLF and blank lines whole, GPT-2 cuts before the last space", "[pretokenizer]") {
  // "\r\n" before a letter: `\s*[\r\n]+` takes the whitespace up to its last CR or LF. "\n\n  end":
  // the same takes "\n\n" and leaves the spaces; of "  end", `\s+(?!\S)` gives back the space before
  // the letter, which joins " end". "  \n" at the end: whitespace up to the last newline.
  CHECK(split(kLlama3, "line1\r\nline2\n\n  end  \n") ==
        V{"line", "1", "\r\n", "line", "2", "\n\n", " ", " end", "  \n"});
  // GPT-2 has no newline alternative: `\s+(?!\S)` stops one short of a non-space ("\r" | "\n",
  // "\n\n " | " end"), and a lone whitespace character before a non-space is `\s+`'s.
  CHECK(split(kGpt2, "line1\r\nline2\n\n  end  \n") ==
        V{"line", "1", "\r", "\n", "line", "2", "\n\n ", " end", "  \n"});
  // Punctuation takes the line ends after it (` ?[^\s\p{L}\p{N}]+[\r\n]*`).
  CHECK(split(kLlama3, "Hi!\n\nok ...\r\n") == V{"Hi", "!\n\n", "ok", " ...\r\n"});
  CHECK(split(kGpt2, "Hi!\n\nok ...\r\n") == V{"Hi", "!", "\n", "\n", "ok", " ...", "\r\n"});
  // A newline cannot be the letter alternative's prefix; a tab can.
  CHECK(split(kLlama3, "\nfoo") == V{"\n", "foo"});
  CHECK(split(kLlama3, "\tfoo") == V{"\tfoo"});
  CHECK(split(kGpt2, "\tfoo") == V{"\t", "foo"});
}

TEST_CASE("spaces, punctuation, unicode letters and emoji", "[pretokenizer]") {
  // Leading "  ": `\s+(?!\S)` gives back the space that joins " hello"; the trailing run is whole.
  CHECK(split(kLlama3, "  hello world  ") == V{" ", " hello", " world", "  "});
  CHECK(split(kGpt2, "  hello world  ") == V{" ", " hello", " world", "  "});
  // Any one non-letter, non-digit, non-newline character may lead a word in Llama 3.
  CHECK(split(kLlama3, "(hello)") == V{"(hello", ")"});
  CHECK(split(kGpt2, "(hello)") == V{"(", "hello", ")"});
  CHECK(split(kLlama3,
              "a\xC2\xA0"
              "b") == V{"a",
                        "\xC2\xA0"
                        "b"});  // no-break space leads "b"
  // é and CJK are letters; an emoji is neither letter nor digit nor space: a punctuation run.
  const std::string text = "caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80\xF0\x9F\x98\x80 ok";
  const V want{"caf\xC3\xA9", " \xE4\xB8\xAD\xE6\x96\x87", " \xF0\x9F\x98\x80\xF0\x9F\x98\x80", " ok"};
  CHECK(split(kLlama3, text) == want);
  CHECK(split(kGpt2, text) == want);
  CHECK(split(kLlama3, "end.  ") == V{"end", ".", "  "});
  CHECK(split(kLlama3, "") == V{});
}

TEST_CASE("Digits and Metaspace's splits", "[pretokenizer]") {
  using zinf::engine::split_before;
  using zinf::engine::split_digits;
  const auto views = [](std::vector<std::string_view> v) { return V(v.begin(), v.end()); };
  CHECK(views(split_digits("ab123c4", true)) == V{"ab", "1", "2", "3", "c", "4"});
  CHECK(views(split_digits("ab123c4", false)) == V{"ab", "123", "c", "4"});
  // Each marker starts a piece; two in a row leave the first alone.
  const std::string m = "\xE2\x96\x81";  // ▁
  CHECK(views(split_before(m + "Hello" + m + m + "world", m)) == V{m + "Hello", m, m + "world"});
  CHECK(views(split_before("a" + m, m)) == V{"a", m});
}

TEST_CASE("NFC composes, reorders and leaves composed text alone", "[pretokenizer]") {
  using zinf::engine::unicode::nfc;
  CHECK(nfc("e\xCC\x81") == "\xC3\xA9");                                 // e + combining acute -> é
  CHECK(nfc("\xC3\xA9") == "\xC3\xA9");                                  // already composed
  CHECK(nfc("\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB") == "\xED\x95\x9C");  // Hangul jamo ᄒ ᅡ ᆫ -> 한
  // a + dot below (class 220) + acute (230) in the "wrong" order: reordered to below, acute, then
  // a + dot below composes to ạ, and ạ + acute is not a composite in Unicode, so acute stays.
  CHECK(nfc("a\xCC\x81\xCC\xA3") == "\xE1\xBA\xA1\xCC\x81");
  CHECK(nfc("\xE2\x84\xAB") == "\xC3\x85");  // the Angstrom sign's singleton decomposition: Å
  CHECK(nfc("plain ascii") == "plain ascii");
  CHECK(nfc("\xFF"
            "e\xCC\x81") == "\xFF\xC3\xA9");  // an invalid byte passes through
}
