// Training data as a flat array of token ids, and the deterministic loader that cuts it into
// micro-batches. A TokenCorpus is loaded once (text as bytes, vocab 256; text encoded by a BPE
// tokenizer; or a token file in llm.c's 16- or 32-bit .bin format or nanoGPT's raw uint16) and is
// immutable afterwards, safe to share between threads. A BatchLoader holds a position and belongs
// to one thread (one per rank).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zinf::engine {

class BpeTokenizer;

// The fortunes corpus installed by scripts/setup.sh (Debian package `fortunes`).
inline constexpr const char* kDefaultCorpus = "/usr/share/games/fortunes";

// Token ids, 16 bits each while every id fits and the source's vocabulary does (GPT-2's 50257),
// 32 bits otherwise (Llama 3's 128256, Qwen2's 151646): a 16-bit corpus keeps half the memory.
class TokenIds {
 public:
  TokenIds() = default;
  explicit TokenIds(std::vector<uint16_t> ids) : narrow_(std::move(ids)) {}
  explicit TokenIds(std::vector<uint32_t> ids) : wide_(std::move(ids)), is_wide_(true) {}

  size_t size() const { return is_wide_ ? wide_.size() : narrow_.size(); }
  bool empty() const { return size() == 0; }
  bool wide() const { return is_wide_; }
  uint32_t operator[](size_t i) const { return is_wide_ ? wide_[i] : narrow_[i]; }
  uint32_t max() const;  // 0 when empty
  // The storage of one width; each throws std::logic_error when the ids are held in the other.
  const std::vector<uint16_t>& narrow() const;
  const std::vector<uint32_t>& wide_ids() const;
  std::vector<uint32_t> values() const;  // a copy, 32-bit whatever the width

  // Holds the ids as 32 bits from now on (a vocabulary past 65536 writes 32-bit files even while
  // the ids seen so far fit 16 bits).
  void widen();
  void push_back(uint32_t id);        // widens first when `id` passes 65535
  void append(const TokenIds& more);  // widens when `more` is wide
  TokenIds take_tail(size_t n);       // removes the last n ids and returns them, in this width
  // Ids [first, first + n) into `out`: the caller has checked first + n <= size().
  void copy_to(size_t first, size_t n, int32_t* out) const;

  bool operator==(const TokenIds& o) const {
    return is_wide_ == o.is_wide_ && narrow_ == o.narrow_ && wide_ == o.wide_;
  }

 private:
  std::vector<uint16_t> narrow_;
  std::vector<uint32_t> wide_;
  bool is_wide_ = false;
};

struct TokenCorpus {
  std::string source;            // what was loaded, for messages
  TokenIds tokens;
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
  // A *.bin token file: llm.c's 256 x int32 header (magic, version, token count) and then the
  // tokens, little-endian: GPT-2's magic 20240520 version 1 with uint16 tokens, or Llama 3's
  // 20240801 version 7 with uint32 ones (ids past 2^31 - 1 are refused); a file without either magic
  // is nanoGPT's raw uint16 array. Throws naming the path on a bad header or size.
  static TokenCorpus load_bin(const std::string& path);
  // Throws std::runtime_error naming the source, the largest id and where it first occurs unless
  // every id is below `model_vocab` (the vocabulary of the model named `model`).
  void require_vocab(int64_t model_vocab, const std::string& model, const std::string& what = "data") const;
};

// Writes `tokens` as an llm.c token file load_bin reads: uint16 (version 1) when they are held in
// 16 bits, else uint32 (version 7), through a temporary name renamed into place; throws naming the
// path on failure.
void write_llmc_bin(const std::string& path, const TokenIds& tokens);

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
