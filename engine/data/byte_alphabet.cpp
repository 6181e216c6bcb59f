#include "engine/data/byte_alphabet.hpp"

#include <array>

#include "engine/data/unicode_text.hpp"

namespace zinf::engine::byte_alphabet {

namespace {

// The byte each of the alphabet's characters stands for, indexed by code point (all below U+0144).
constexpr size_t kAlphabetEnd = 0x144;
std::array<int, kAlphabetEnd> build_back() {
  std::array<int, kAlphabetEnd> back{};
  back.fill(-1);
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    back[printable ? size_t(b) : size_t(next++)] = b;
  }
  return back;
}

}  // namespace

std::optional<std::string> to_bytes(std::string_view written) {
  static const std::array<int, kAlphabetEnd> back = build_back();
  std::string out;
  for (size_t at = 0; at < written.size();) {
    const unicode::CodePoint cp = unicode::at(written, at);
    if (cp.value >= kAlphabetEnd || back[cp.value] < 0) return std::nullopt;
    out.push_back(static_cast<char>(back[cp.value]));
    at += cp.len;
  }
  return out;
}

std::string decode_token(std::string_view written) {
  auto bytes = to_bytes(written);
  return bytes ? std::move(*bytes) : std::string(written);
}

}  // namespace zinf::engine::byte_alphabet
