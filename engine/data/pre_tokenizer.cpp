#include "engine/data/pre_tokenizer.hpp"

#include "engine/data/unicode_text.hpp"

namespace zinf::engine {

namespace {

using unicode::Class;

// The patterns as tokenizer.json holds them (the JSON string decoded).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A reader over one text: the class of the code point at a byte offset, and runs of one class.
struct Text {
  std::string_view s;
  Class cls(size_t i) const { return unicode::at(s, i).cls; }
  size_t next(size_t i) const { return i + unicode::at(s, i).len; }
  size_t run(size_t i, Class c) const {
    while (i < s.size() && cls(i) == c) i = next(i);
    return i;
  }
  bool newline(size_t i) const { return i < s.size() && (s[i] == '\r' || s[i] == '\n'); }
};

// 's 't 're 've 'm 'll 'd at `at`; with `fold`, in any case, as (?i:...) matches them: the long s
// (U+017F) folds to 's' too.
size_t contraction(std::string_view s, size_t at, bool fold) {
  if (s[at] != '\'') return 0;
  const auto letter = [&](size_t i, char want) -> size_t {  // the bytes a matching letter takes
    if (i >= s.size()) return 0;
    if (s[i] == want) return 1;
    if (!fold) return 0;
    if (s[i] == want - 'a' + 'A') return 1;
    if (want == 's' && s.substr(i, 2) == "\xC5\xBF") return 2;
    return 0;
  };
  for (std::string_view word : {"s", "t", "re", "ve", "m", "ll", "d"}) {
    size_t i = at + 1;
    for (char c : word) {
      const size_t n = letter(i, c);
      if (n == 0) {
        i = 0;
        break;
      }
      i += n;
    }
    if (i != 0) return i - at;
  }
  return 0;
}

// `\s+(?!\S)|\s+` at a whitespace character: the run, less its last character when a non-space
// follows it and the run is longer than one.
size_t spaces(const Text& t, size_t at) {
  size_t end = at, last = at;
  while (end < t.s.size() && t.cls(end) == Class::Space) last = end, end = t.next(end);
  return (end < t.s.size() && last > at ? last : end) - at;
}

size_t gpt2(const Text& t, size_t at) {
  if (const size_t n = contraction(t.s, at, false)) return n;
  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space, then a run of one class.
  for (Class c : {Class::Letter, Class::Number, Class::Other}) {
    const size_t start = t.s[at] == ' ' && at + 1 < t.s.size() && t.cls(at + 1) == c ? at + 1 : at;
    if (t.cls(start) == c) return t.run(start, c) - at;
  }
  return spaces(t, at);
}

size_t llama3(const Text& t, size_t at, size_t max_digits) {
  if (const size_t n = contraction(t.s, at, true)) return n;
  const Class first = t.cls(at);
  // `[^\r\n\p{L}\p{N}]?\p{L}+`
  if (first == Class::Letter) return t.run(at, Class::Letter) - at;
  if (first != Class::Number && !t.newline(at)) {
    const size_t second = t.next(at);
    if (second < t.s.size() && t.cls(second) == Class::Letter) return t.run(second, Class::Letter) - at;
  }
  // `\p{N}{1,3}` (Qwen2: `\p{N}`)
  if (first == Class::Number) {
    size_t end = at;
    for (size_t n = 0; n < max_digits && end < t.s.size() && t.cls(end) == Class::Number; ++n) end = t.next(end);
    return end - at;
  }
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  const size_t start = t.s[at] == ' ' && at + 1 < t.s.size() && t.cls(at + 1) == Class::Other ? at + 1 : at;
  if (t.cls(start) == Class::Other) {
    size_t end = t.run(start, Class::Other);
    while (t.newline(end)) ++end;
    return end - at;
  }
  // `\s*[\r\n]+`: the whitespace run up to and with its last CR or LF (no other whitespace
  // character's UTF-8 holds those bytes).
  const size_t run = t.run(at, Class::Space);
  for (size_t i = run; i > at; --i)
    if (t.newline(i - 1)) return i - at;
  return spaces(t, at);
}

}  // namespace

std::optional<SplitPattern> known_split_pattern(std::string_view regex) {
  if (regex == kGpt2Pattern) return SplitPattern::Gpt2;
  if (regex == kLlama3Pattern) return SplitPattern::Llama3;
  if (regex == kQwen2Pattern) return SplitPattern::Qwen2;
  return std::nullopt;
}

const char* pattern_name(SplitPattern p) {
  switch (p) {
    case SplitPattern::Gpt2:
      return "GPT-2";
    case SplitPattern::Llama3:
      return "Llama 3";
    case SplitPattern::Qwen2:
      return "Qwen2";
  }
  return "?";
}

size_t match_at(SplitPattern p, std::string_view text, size_t at) {
  if (at >= text.size()) return 0;
  const Text t{text};
  switch (p) {
    case SplitPattern::Gpt2:
      return gpt2(t, at);
    case SplitPattern::Llama3:
      return llama3(t, at, 3);
    case SplitPattern::Qwen2:
      return llama3(t, at, 1);
  }
  return 0;
}

std::vector<std::string_view> find_all(SplitPattern p, std::string_view text) {
  std::vector<std::string_view> pieces;
  size_t at = 0;
  while (at < text.size()) {
    const size_t n = match_at(p, text, at);
    if (n == 0) {  // no match here: the search moves on one character
      at += unicode::at(text, at).len;
      continue;
    }
    pieces.push_back(text.substr(at, n));
    at += n;
  }
  return pieces;
}

std::vector<std::string_view> split_digits(std::string_view text, bool individual) {
  std::vector<std::string_view> pieces;
  size_t start = 0;
  bool in_digits = false;
  for (size_t at = 0; at < text.size();) {
    const auto cp = unicode::at(text, at);
    const bool digit = cp.cls == Class::Number;
    if (at > start && (digit != in_digits || (digit && individual))) {
      pieces.push_back(text.substr(start, at - start));
      start = at;
    }
    in_digits = digit;
    at += cp.len;
  }
  if (text.size() > start) pieces.push_back(text.substr(start));
  return pieces;
}

std::vector<std::string_view> split_before(std::string_view text, std::string_view marker) {
  std::vector<std::string_view> pieces;
  size_t start = 0;
  for (size_t at = text.find(marker, 1); at != std::string_view::npos && !marker.empty();
       at = text.find(marker, at + 1)) {
    pieces.push_back(text.substr(start, at - start));
    start = at;
  }
  if (text.size() > start) pieces.push_back(text.substr(start));
  return pieces;
}

}  // namespace zinf::engine
