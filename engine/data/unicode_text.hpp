// The Unicode the tokenizers need, on UTF-8 text: a code point's class as the pre-tokenizer
// patterns see it (\p{L}, \p{N}, \s or none of them; tables made by unicode_classes.py), NFC
// normalization (tables made by unicode_nfc.py), and the lossy UTF-8 reading a decoder applies.
// Bytes that do not form valid UTF-8 are kept as they are, one code unit each, of class Other:
// Hugging Face's tokenizers never see them (they work on valid strings), so nothing here invents a
// meaning for them. Free functions over immutable tables: safe from any thread.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace zinf::engine::unicode {

enum class Class { Letter, Number, Space, Other };

// One code point of `text` at `at`: its class, its length in bytes and its value. A byte that does
// not start a valid UTF-8 sequence is one code unit of class Other and value kInvalid.
struct CodePoint {
  Class cls;
  size_t len;
  char32_t value;
};
constexpr char32_t kInvalid = 0xFFFFFFFF;

CodePoint at(std::string_view text, size_t offset);
Class class_of(char32_t c);
void append_utf8(std::string& out, char32_t c);

// Unicode Normalization Form C; invalid bytes pass through unchanged and block composition.
std::string nfc(std::string_view text);

// `bytes` as Rust's String::from_utf8_lossy reads them: each maximal invalid subpart becomes
// U+FFFD, as Hugging Face's byte-level decoder writes text.
std::string utf8_lossy(std::string_view bytes);

}  // namespace zinf::engine::unicode
