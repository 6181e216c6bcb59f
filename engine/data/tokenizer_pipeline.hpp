// What a Hugging Face tokenizer.json asks of the text around its BPE model, read and checked:
// the normalizer, the pre-tokenizer, the added (special) tokens, the post-processor's template and
// the decoder, each reduced to the steps zinf carries out exactly. Anything else (a regex pattern
// zinf has no splitter for, a normalizer it does not implement, an added token that strips spaces)
// is refused by read_pipeline naming the file and the section, never approximated. Plain data:
// immutable once read, safe to share between threads.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/data/pre_tokenizer.hpp"

namespace zinf::engine {

struct NormalizerStep {
  enum class Kind { Nfc, Prepend, Replace } kind;
  std::string text, with;  // Prepend: text; Replace: every `text` by `with`
};

struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel, Digits, Metaspace } kind;
  SplitPattern pattern = SplitPattern::Gpt2;                              // Split
  bool remove_matches = false;                                            // Split: behavior Removed (else Isolated)
  bool add_prefix_space = false;                                          // ByteLevel
  bool use_regex = true;                                                  // ByteLevel: GPT-2's split
  bool individual_digits = false;                                         // Digits
  std::string marker;                                                     // Metaspace: the replacement for ' ' ("▁")
  enum class Prepend { Always, First, Never } prepend = Prepend::Always;  // Metaspace
  bool split = false;                                                     // Metaspace
};

struct AddedToken {
  std::string content;
  int32_t id;
  bool normalized;  // matched in the normalized text (else in the text as given)
};

struct DecoderStep {
  enum class Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace } kind;
  std::string text, with;         // Replace: every `text` by `with`; Strip: the character; Metaspace: its marker
  int64_t start = 0, stop = 0;    // Strip: how many of the character at most, at each token's start and end
  bool first_token_marks = true;  // Metaspace: the first token loses its markers (prepend_scheme not "never")
};

struct TokenizerPipeline {
  bool byte_level = true;  // the vocabulary is written in GPT-2's byte alphabet
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
  std::vector<AddedToken> added;
  std::vector<int32_t> prefix, suffix;  // post_processor's template around one sequence (Llama's BOS)
  bool has_template = false;
  std::vector<DecoderStep> decoder;
  bool has_decoder = true;
  std::string description;  // e.g. "byte-level BPE, Llama 3 split"
};

// GPT-2's: the GPT-2 split, byte-level, no normalizer, no template (vocab.json + merges.txt, or a
// tokenizer.json holding only its model).
TokenizerPipeline gpt2_pipeline();

// The sections of a parsed tokenizer.json other than `model`. Ids of added tokens and of template
// tokens must lie below `max_id`. Throws std::runtime_error naming `source` and the section.
TokenizerPipeline read_pipeline(const nlohmann::json& tokenizer, const std::string& source, int64_t max_id);

}  // namespace zinf::engine
