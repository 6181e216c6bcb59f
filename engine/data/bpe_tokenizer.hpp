// BpeTokenizer encodes text as a model family's Hugging Face tokenizer does, from the user's files:
// GPT-2's `vocab.json` + `merges.txt`, or a `tokenizer.json` as `tokenizers` writes it for
//   GPT-2 and GPT-NeoX (ByteLevel pre-tokenizer with GPT-2's split; NeoX's NFC normalizer),
//   Llama 3 (Split by Llama 3's pattern, then ByteLevel; BOS from its TemplateProcessing),
//   Qwen2 (Split by Qwen2's pattern, then ByteLevel; NFC),
//   Llama 2 and Mistral (SentencePiece converted: Prepend and Replace of '▁', BPE over the text
//   with <0xNN> byte fallback, unk_token fused),
// and anything else built from the same steps (tokenizer_pipeline.hpp). Encoding runs the steps in
// Hugging Face's order: added tokens matched in the raw text (leftmost, longest), the normalizer on
// the rest, added tokens marked `normalized` matched in that, the pre-tokenizer's split, then BPE on
// each piece, merging the pair of lowest rank first (ties: leftmost) as `tokenizers` does. A file
// whose steps zinf cannot carry out exactly is refused naming the file and the step.
// Immutable after loading except for its cache of encoded pieces: encode() is not thread-safe;
// decode() is.
#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/data/tokenizer_pipeline.hpp"

namespace zinf::engine {

class BpeTokenizer {
public:
  // How far ids may run: a file's ids run from 0 to about its number of entries, so an id more than
  // kMaxIdGap past them, or at kMaxVocab (the largest vocabularies have about 256k) or beyond, is
  // refused naming the file before a table is sized by it.
  static constexpr int64_t kMaxVocab = int64_t(1) << 21, kMaxIdGap = int64_t(1) << 16;
  static int64_t id_bound(int64_t entries) { return std::min(kMaxVocab, entries + kMaxIdGap); }

  // `path` is a tokenizer.json, or a directory holding tokenizer.json or vocab.json + merges.txt.
  // Throws std::runtime_error naming the file and what is wrong with it.
  static BpeTokenizer load(const std::string& path);
  static BpeTokenizer from_files(const std::string& vocab_json, const std::string& merges_txt);
  // A tokenizer.json's text; `source` names it in messages.
  static BpeTokenizer from_tokenizer_json(const std::string& text, const std::string& source = "tokenizer.json");
  // From the texts themselves (`source` names them in messages).
  static BpeTokenizer from_strings(const std::string& vocab_json, const std::string& merges_txt,
                                   const std::string& source = "<vocabulary>");

  // The ids of `text`, special tokens in it included, nothing added around it (Hugging Face's
  // encode with add_special_tokens=False).
  std::vector<int32_t> encode(std::string_view text);
  // The ids a document starts and ends with in a token file: the post-processor's template (Llama's
  // <|begin_of_text|> or <s>) where there is one, else <|endoftext|> before it where the tokenizer
  // has that token (GPT-2's, GPT-NeoX's and Qwen2's document separator).
  const std::vector<int32_t>& document_start() const { return document_start_; }
  const std::vector<int32_t>& document_end() const { return pipeline_.suffix; }

  // The text of `ids`, as the tokenizer's decoder gives it (Hugging Face's decode with special
  // tokens kept). An id outside the vocabulary throws std::out_of_range; a tokenizer.json whose
  // decoder is null throws std::runtime_error.
  std::string decode(const std::vector<int32_t>& ids) const;
  // The bytes `id` adds after the tokens before it, for text shown as it is generated: the decoder's
  // steps less those that only trim the start of the whole text; a character spread over byte
  // tokens comes out one byte at a time.
  std::string decode_next(int32_t id) const;
  // The token's bytes (byte-level) or text as the vocabulary holds it.
  const std::string& token_bytes(int32_t id) const;

  int64_t vocab_size() const { return int64_t(id_bytes_.size()); }  // largest id + 1
  const std::string& source() const { return source_; }
  const std::string& description() const { return pipeline_.description; }

  // The pieces BPE runs on, in order, after added tokens, normalizer and pre-tokenizer: an added
  // token's piece has its id, the others -1. Byte-level pieces are the text's bytes (before
  // GPT-2's byte-to-character map).
  struct Piece {
    std::string text;
    int32_t added = -1;
  };
  std::vector<Piece> pieces(std::string_view text) const;

  // GPT-2's pre-tokenizer alone: the pieces `text` splits into, in order (their concatenation is
  // `text`).
  static std::vector<std::string_view> split(std::string_view text);

private:
  struct ModelOptions {
    bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
    std::optional<int32_t> unk;
  };
  static BpeTokenizer from_model(const nlohmann::json& model, TokenizerPipeline pipeline, const std::string& source);
  void read_vocab(const nlohmann::json& vocab);
  void read_merges(const nlohmann::json& merges);
  std::vector<int32_t> initial_symbols(const std::string& piece) const;
  std::vector<int32_t> merge(const std::string& piece) const;
  void pre_tokenize(std::string segment, bool at_text_start, std::vector<Piece>& out) const;
  std::string token_text(int32_t id) const;  // as the decoder's first step sees it

  std::string source_;
  TokenizerPipeline pipeline_;
  ModelOptions options_;
  std::unordered_map<std::string, int32_t> ids_;                      // token bytes (byte-level) or text -> id
  std::vector<std::string> id_bytes_;                                 // id -> token bytes or text
  std::vector<bool> is_added_;                                        // id -> an added token (decoded from its content)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (left id, right id) -> (rank, merged id)
  std::vector<int32_t> document_start_;
  std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace zinf::engine
