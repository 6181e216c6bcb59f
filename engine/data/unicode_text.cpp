#include "engine/data/unicode_text.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

namespace zinf::engine::unicode {

namespace {

struct CodeRange {
  char32_t first, last;
};
#include "engine/data/unicode_classes.inc"

struct CombiningRange {
  char32_t first, last, cls;
};
struct Decomposition {
  char32_t cp, first, second;  // second is 0 for a one-part decomposition
};
struct Composition {
  char32_t first, second, composite;
};
#include "engine/data/unicode_nfc.inc"

template <size_t N>
bool in(const CodeRange (&table)[N], char32_t c) {
  const auto it = std::upper_bound(std::begin(table), std::end(table), c,
                                   [](char32_t v, const CodeRange& r) { return v < r.first; });
  return it != std::begin(table) && c <= std::prev(it)->last;
}

// An invalid byte inside NFC's working text: above every code point, so no table holds it.
constexpr char32_t kRawByte = 0x110000;

unsigned combining_class(char32_t c) {
  const auto it = std::upper_bound(std::begin(kCombiningClasses), std::end(kCombiningClasses), c,
                                   [](char32_t v, const CombiningRange& r) { return v < r.first; });
  return it != std::begin(kCombiningClasses) && c <= std::prev(it)->last ? unsigned(std::prev(it)->cls) : 0;
}

// Hangul syllables decompose and compose by arithmetic (Unicode 3.12), not by table.
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

void decompose(char32_t c, std::vector<char32_t>& out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const char32_t s = c - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), c,
                                   [](const Decomposition& d, char32_t v) { return d.cp < v; });
  if (it == std::end(kDecompositions) || it->cp != c) {
    out.push_back(c);
    return;
  }
  decompose(it->first, out);
  if (it->second != 0) decompose(it->second, out);
}

// The primary composite of a starter and the next character, or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto it = std::lower_bound(std::begin(kCompositions), std::end(kCompositions), std::pair{a, b},
                                   [](const Composition& c, std::pair<char32_t, char32_t> v) {
                                     return std::pair{c.first, c.second} < v;
                                   });
  return it != std::end(kCompositions) && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace

CodePoint at(std::string_view text, size_t offset) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(text[offset + i]); };
  const unsigned char c = b(0);
  size_t len = 0;
  char32_t v = 0;
  if (c < 0x80)
    len = 1, v = c;
  else if ((c & 0xE0) == 0xC0 && c >= 0xC2)
    len = 2, v = c & 0x1F;
  else if ((c & 0xF0) == 0xE0)
    len = 3, v = c & 0x0F;
  else if ((c & 0xF8) == 0xF0 && c <= 0xF4)
    len = 4, v = c & 0x07;
  bool ok = len > 0 && offset + len <= text.size();
  for (size_t i = 1; ok && i < len; ++i) {
    ok = (b(i) & 0xC0) == 0x80;
    v = (v << 6) | (b(i) & 0x3F);
  }
  // Overlong three- and four-byte forms, surrogates and values past U+10FFFF are not UTF-8.
  if (ok && ((len == 3 && (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))) || (len == 4 && (v < 0x10000 || v > 0x10FFFF))))
    ok = false;
  if (!ok) return {Class::Other, 1, kInvalid};
  return {class_of(v), len, v};
}

Class class_of(char32_t c) {
  return in(kLetters, c)   ? Class::Letter
         : in(kNumbers, c) ? Class::Number
         : in(kSpaces, c)  ? Class::Space
                           : Class::Other;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(char(c));
  } else if (c < 0x800) {
    out.push_back(char(0xC0 | (c >> 6)));
    out.push_back(char(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(char(0xE0 | (c >> 12)));
    out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(char(0x80 | (c & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (c >> 18)));
    out.push_back(char(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(char(0x80 | (c & 0x3F)));
  }
}

std::string nfc(std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return std::string(text);  // ASCII is its own NFC
  // Full canonical decomposition, then canonical order (a stable sort of each run of non-starters).
  std::vector<char32_t> s;
  for (size_t i = 0; i < text.size();) {
    const CodePoint cp = at(text, i);
    if (cp.value == kInvalid)
      s.push_back(kRawByte + static_cast<unsigned char>(text[i]));
    else
      decompose(cp.value, s);
    i += cp.len;
  }
  const auto cls = [](char32_t c) { return c >= kRawByte ? 0u : combining_class(c); };
  for (size_t i = 0; i < s.size();) {
    size_t j = i;
    while (j < s.size() && cls(s[j]) != 0) ++j;
    if (j > i + 1) {
      // Canonical ordering is a stable sort by combining class (0-255): a counting sort, linear
      // however long a hostile run of marks is.
      std::array<size_t, 257> start{};
      for (size_t k = i; k < j; ++k) ++start[cls(s[k]) + 1];
      for (size_t c = 1; c < start.size(); ++c) start[c] += start[c - 1];
      std::vector<char32_t> sorted(j - i);
      for (size_t k = i; k < j; ++k) sorted[start[cls(s[k])]++] = s[k];
      std::copy(sorted.begin(), sorted.end(), s.begin() + std::ptrdiff_t(i));
    }
    i = j + 1;
  }
  // Canonical composition: each character joins the last starter unless one of its class or a
  // starter stands between them (Unicode's sample algorithm).
  if (!s.empty()) {
    size_t starter = 0, out = 1;
    unsigned last = cls(s[0]) == 0 ? 0 : 256;
    for (size_t i = 1; i < s.size(); ++i) {
      const char32_t c = s[i];
      const unsigned cc = cls(c);
      const char32_t composite = s[starter] < kRawByte && c < kRawByte ? compose(s[starter], c) : 0;
      if (composite != 0 && (last < cc || last == 0)) {
        s[starter] = composite;
        continue;
      }
      if (cc == 0) starter = out;
      last = cc;
      s[out++] = c;
    }
    s.resize(out);
  }
  std::string result;
  for (char32_t c : s) {
    if (c >= kRawByte)
      result.push_back(char(c - kRawByte));
    else
      append_utf8(result, c);
  }
  return result;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  for (size_t i = 0; i < bytes.size();) {
    const unsigned char b0 = byte(i);
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range; later ones are 0x80-0xBF
    if (b0 < 0x80)
      need = 0;
    else if (b0 >= 0xC2 && b0 <= 0xDF)
      need = 1;
    else if (b0 == 0xE0)
      need = 2, lo = 0xA0;
    else if (b0 == 0xED)
      need = 2, hi = 0x9F;
    else if (b0 >= 0xE1 && b0 <= 0xEF)
      need = 2;
    else if (b0 == 0xF0)
      need = 3, lo = 0x90;
    else if (b0 == 0xF4)
      need = 3, hi = 0x8F;
    else if (b0 >= 0xF1 && b0 <= 0xF3)
      need = 3;
    else {
      append_utf8(out, 0xFFFD);
      ++i;
      continue;
    }
    size_t j = i + 1;
    bool ok = true;
    for (size_t k = 0; k < need; ++k, ++j) {
      if (j >= bytes.size() || byte(j) < (k == 0 ? lo : 0x80) || byte(j) > (k == 0 ? hi : 0xBF)) {
        ok = false;
        break;
      }
    }
    if (ok)
      out.append(bytes.substr(i, j - i));
    else
      append_utf8(out, 0xFFFD);
    i = j;
  }
  return out;
}

}  // namespace zinf::engine::unicode
