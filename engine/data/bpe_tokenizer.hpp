// BpeTokenizer is GPT-2's byte-level BPE: text is split by GPT-2's pre-tokenizer pattern
// ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+), each piece's UTF-8
// bytes are merged by rank as GPT-2's encoder merges them, and the merged symbols are looked up in
// the vocabulary. The vocabulary and merges come from the user's files: `vocab.json` + `merges.txt`
// (GPT-2's and Hugging Face's layout) or a Hugging Face `tokenizer.json`; they are read in GPT-2's
// byte-to-unicode alphabet and kept as the bytes they stand for. Bytes that are not valid UTF-8 are
// pieces of their own class (neither letter, number nor space) and keep their byte values; GPT-2's
// encoder, which works on decoded text, never sees them. Immutable after loading except for its
// cache of encoded pieces: encode() is not thread-safe; decode() is.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace zinf::engine {

class BpeTokenizer {
 public:
  // `path` is a tokenizer.json, or a directory holding tokenizer.json or vocab.json + merges.txt.
  // Throws std::runtime_error naming the file and what is wrong with it.
  static BpeTokenizer load(const std::string& path);
  static BpeTokenizer from_files(const std::string& vocab_json, const std::string& merges_txt);
  // A tokenizer.json's text; `source` names it in messages.
  static BpeTokenizer from_tokenizer_json(const std::string& text, const std::string& source = "tokenizer.json");
  // From the texts themselves (`source` names them in messages).
  static BpeTokenizer from_strings(const std::string& vocab_json, const std::string& merges_txt,
                                   const std::string& source = "<vocabulary>");

  std::vector<int32_t> encode(std::string_view text);
  // The bytes of the tokens; an id outside the vocabulary throws std::out_of_range.
  std::string decode(const std::vector<int32_t>& ids) const;
  const std::string& token_bytes(int32_t id) const;

  int64_t vocab_size() const { return int64_t(id_bytes_.size()); }  // largest id + 1
  std::optional<int32_t> end_of_text() const { return eot_; }    // <|endoftext|>, when the vocabulary has it
  const std::string& source() const { return source_; }

  // GPT-2's pre-tokenizer alone: the pieces `text` splits into, in order (their concatenation is
  // `text`).
  static std::vector<std::string_view> split(std::string_view text);

 private:
  static BpeTokenizer from_model(const nlohmann::json& model, const std::string& source);
  std::vector<int32_t> merge(const std::string& piece) const;

  std::string source_;
  std::unordered_map<std::string, int32_t> ids_;      // token bytes -> id
  std::vector<std::string> id_bytes_;                 // id -> token bytes
  std::unordered_map<std::string, int32_t> symbols_;  // bytes of any merge's parts and results -> symbol
  std::vector<std::string> symbol_bytes_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left, right) -> (rank, merged)
  std::unordered_map<std::string, std::vector<int32_t>> cache_;
  std::optional<int32_t> eot_;
};

}  // namespace zinf::engine
