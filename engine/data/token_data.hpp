// Training data as a flat array of token ids, and the deterministic loader that cuts it into
// micro-batches. A TokenCorpus is loaded once (text as bytes, vocab 256; or a uint16 token file in
// llm.c's or nanoGPT's .bin convention) and is immutable afterwards, safe to share between threads.
// A BatchLoader holds a position and belongs to one thread (one per rank).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zinf::engine {

class BpeTokenizer;

// The fortunes corpus installed by scripts/setup.sh (Debian package `fortunes`).
inline constexpr const char* kDefaultCorpus = "/usr/share/games/fortunes";

struct TokenCorpus {
  std::string source;            // what was loaded, for messages
  std::vector<uint16_t> tokens;
  int64_t vocab = 0;             // 256 for text; max token + 1 for a token file

  // Loads `path`: a directory (its regular text files — everything but *.dat indexes and symlinks —
  // concatenated in sorted name order), a *.bin token file, or any other file as bytes. An empty
  // path means kDefaultCorpus. Throws std::runtime_error naming the path on any failure.
  static TokenCorpus load(const std::string& path);
  // The same, with text (not a .bin) encoded by `tokenizer`: each file is a document, between the
  // tokenizer's document_start() and document_end() (Llama's BOS from its template, else
  // <|endoftext|> before it as in llm.c's token files). Null: bytes.
  static TokenCorpus load(const std::string& path, BpeTokenizer* tokenizer);
  // The last `fraction` of the tokens as a corpus of their own (a held-out split, as nanoGPT cuts
  // its validation set off the end), this one keeping the rest. Throws naming the source when
  // either part would hold fewer than `min_tokens`.
  TokenCorpus split_tail(double fraction, int64_t min_tokens);
  static TokenCorpus from_text(const std::string& text, std::string source = "<text>");
  // A *.bin token file: llm.c's (256 x int32 header: magic 20240520, version 1, token count; then
  // uint16 tokens) when it starts with the magic, else nanoGPT's raw little-endian uint16 array.
  static TokenCorpus load_bin(const std::string& path);
};

// Writes `tokens` as an llm.c token file (the header load_bin reads, then uint16 little-endian),
// through a temporary name renamed into place; throws naming the path on failure.
void write_llmc_bin(const std::string& path, const std::vector<uint16_t>& tokens);

struct Batch {
  int64_t micro_batch = 0, seq = 0;
  std::vector<int32_t> inputs, targets;  // micro_batch x seq; targets are inputs shifted by one
};

// Cuts the corpus into windows of seq + 1 tokens (window w starts at token w * seq) and serves
// them micro_batch at a time, in an order shuffled per epoch from `seed`. Step s of rank r of
// `ranks` takes window slots [(s * ranks + r) * micro_batch, +micro_batch) of the concatenated
// epoch orders, so the ranks draw disjoint windows and together cover each epoch exactly once.
// The position is the step count: save it with position(), restore it with seek() to resume.
class BatchLoader {
 public:
  BatchLoader(const TokenCorpus& corpus, int64_t micro_batch, int64_t seq, int rank = 0, int ranks = 1,
              uint64_t seed = 1234);

  Batch next();
  uint64_t position() const { return step_; }
  void seek(uint64_t step) { step_ = step; }
  int64_t windows() const { return windows_; }

 private:
  int64_t window_at(uint64_t slot);

  const TokenCorpus* corpus_;
  int64_t micro_batch_, seq_;
  int rank_, ranks_;
  uint64_t seed_;
  int64_t windows_;
  uint64_t step_ = 0;
  uint64_t perm_epoch_ = UINT64_MAX;
  std::vector<int64_t> perm_;
};

}  // namespace zinf::engine
