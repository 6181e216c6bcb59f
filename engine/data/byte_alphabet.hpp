// GPT-2's byte-to-unicode alphabet, in which byte-level vocabularies write their tokens: printable
// Latin-1 bytes stand for themselves, the other 68 bytes for U+0100 onwards in byte order. Pure
// functions over a table built once: safe from any thread.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace zinf::engine::byte_alphabet {

// The bytes a token written in the alphabet stands for; none when a character is outside it.
std::optional<std::string> to_bytes(std::string_view written);

// `tokenizers`' ByteLevel decoder on one token's text: its bytes when every character is in the
// alphabet, else the text's own UTF-8 (an added token such as a run of plain spaces).
std::string decode_token(std::string_view written);

}  // namespace zinf::engine::byte_alphabet
