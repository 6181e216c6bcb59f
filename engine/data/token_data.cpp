#include "engine/data/token_data.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "formats/bounded_input.hpp"
#include "core/errors.hpp"
#include "engine/data/bpe_tokenizer.hpp"
#include "engine/io/output_file.hpp"
#include "engine/splitmix.hpp"

namespace zinf::engine {

namespace fs = std::filesystem;

namespace {

// llm.c's token file headers: GPT-2's (uint16 tokens) and Llama 3's (uint32 tokens).
constexpr int32_t kLlmcMagic = 20240520, kLlmcVersion = 1;
constexpr int32_t kLlmcWideMagic = 20240801, kLlmcWideVersion = 7;
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw std::runtime_error("data: " + path + ": " + why);
}

// The corpus is held in memory: its files together may hold at most this much.
constexpr uint64_t kMaxDataBytes = 8ull << 30;

// Through the bounded reader: a FIFO or device is refused without blocking, and no more than the
// budget left is read.
std::string read_file(const fs::path& p, uint64_t& budget) {
  std::string s;
  try {
    s = core::read_bounded_file(p.string(), budget, "data file");
  } catch (const core::ConfigError& e) {
    fail(p.string(), std::string(e.what()).substr(p.string().size() + 2) +
                         (budget < kMaxDataBytes ? " (what is left of 8 GiB for the data files together)" : ""));
  }
  budget -= s.size();
  return s;
}

uint64_t mix(uint64_t z) { return splitmix64_next(z); }

}  // namespace

uint32_t TokenIds::max() const {
  if (empty()) return 0;
  return is_wide_ ? *std::max_element(wide_.begin(), wide_.end()) : *std::max_element(narrow_.begin(), narrow_.end());
}

const std::vector<uint16_t>& TokenIds::narrow() const {
  if (is_wide_) throw std::logic_error("token ids: the 16-bit storage of ids held in 32 bits");
  return narrow_;
}

const std::vector<uint32_t>& TokenIds::wide_ids() const {
  if (!is_wide_) throw std::logic_error("token ids: the 32-bit storage of ids held in 16 bits");
  return wide_;
}

std::vector<uint32_t> TokenIds::values() const {
  return is_wide_ ? wide_ : std::vector<uint32_t>(narrow_.begin(), narrow_.end());
}

void TokenIds::widen() {
  if (is_wide_) return;
  wide_.assign(narrow_.begin(), narrow_.end());
  narrow_ = {};  // its memory goes back now, not when the corpus does
  is_wide_ = true;
}

void TokenIds::push_back(uint32_t id) {
  if (!is_wide_ && id > UINT16_MAX) widen();
  if (is_wide_)
    wide_.push_back(id);
  else
    narrow_.push_back(uint16_t(id));
}

void TokenIds::append(const TokenIds& more) {
  if (more.is_wide_) widen();
  if (!is_wide_)
    narrow_.insert(narrow_.end(), more.narrow_.begin(), more.narrow_.end());
  else if (more.is_wide_)
    wide_.insert(wide_.end(), more.wide_.begin(), more.wide_.end());
  else
    wide_.insert(wide_.end(), more.narrow_.begin(), more.narrow_.end());
}

TokenIds TokenIds::take_tail(size_t n) {
  TokenIds tail;
  tail.is_wide_ = is_wide_;
  if (is_wide_) {
    tail.wide_.assign(wide_.end() - std::ptrdiff_t(n), wide_.end());
    wide_.resize(wide_.size() - n);
  } else {
    tail.narrow_.assign(narrow_.end() - std::ptrdiff_t(n), narrow_.end());
    narrow_.resize(narrow_.size() - n);
  }
  return tail;
}

void TokenIds::copy_to(size_t first, size_t n, int32_t* out) const {
  // Ids are below 2^31 (load_bin refuses larger), so each fits an int32.
  if (is_wide_)
    std::transform(wide_.begin() + std::ptrdiff_t(first), wide_.begin() + std::ptrdiff_t(first + n), out,
                   [](uint32_t id) { return int32_t(id); });
  else
    std::copy(narrow_.begin() + std::ptrdiff_t(first), narrow_.begin() + std::ptrdiff_t(first + n), out);
}

TokenCorpus TokenCorpus::from_text(const std::string& text, std::string source) {
  TokenCorpus c;
  c.source = std::move(source);
  c.vocab = 256;
  std::vector<uint16_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  c.tokens = TokenIds(std::move(ids));
  return c;
}

namespace {

// The layout of a token file: where its tokens start, how many, and how wide.
struct BinLayout {
  size_t offset = 0, count = 0;
  bool wide = false;
};

BinLayout bin_layout(const std::string& path, std::ifstream& f, uint64_t size) {
  int32_t head[3] = {0, 0, 0};
  if (size >= sizeof head) f.read(reinterpret_cast<char*>(head), sizeof head);
  if (!f) fail(path, "cannot read its first 12 bytes");
  BinLayout l;
  if (head[0] != kLlmcMagic && head[0] != kLlmcWideMagic) {
    if (size % 2) fail(path, "a raw uint16 token file (nanoGPT) must have an even size");
    l.count = size_t(size / 2);
    return l;
  }
  l.wide = head[0] == kLlmcWideMagic;
  const int32_t version = l.wide ? kLlmcWideVersion : kLlmcVersion;
  const char* kind = l.wide ? "llm.c 32-bit token file (magic 20240801)" : "llm.c token file (magic 20240520)";
  if (size < kLlmcHeaderBytes)
    fail(path, std::string(kind) + " shorter than its 1024-byte header (" + std::to_string(size) + " bytes)");
  if (head[1] != version)
    fail(path, std::string(kind) + " of version " + std::to_string(head[1]) + ", expected " + std::to_string(version));
  if (head[2] < 0) fail(path, std::string(kind) + " with a negative token count");
  l.offset = kLlmcHeaderBytes;
  l.count = size_t(head[2]);
  const size_t width = l.wide ? 4 : 2;
  if (size != l.offset + width * l.count)
    fail(path, "llm.c header says " + std::to_string(l.count) + " tokens of " + std::to_string(width) +
                   " bytes but the file holds " + std::to_string(size - l.offset) + " bytes of tokens");
  return l;
}

// Reads `count` tokens straight into their vector (no second copy of the file in memory).
template <typename T>
std::vector<T> read_tokens(const std::string& path, std::ifstream& f, size_t count) {
  std::vector<T> out(count);
  f.read(reinterpret_cast<char*>(out.data()), std::streamsize(count * sizeof(T)));  // little-endian, as llm.c writes
  if (uint64_t(f.gcount()) != count * sizeof(T)) fail(path, "the file shrank while it was read");
  return out;
}

}  // namespace

TokenCorpus TokenCorpus::load_bin(const std::string& path) {
  // A FIFO or device is refused by the bounded reader's check, without blocking, before it is opened.
  try {
    core::check_bounded_file(path, kMaxDataBytes, "data file");
  } catch (const core::ConfigError& e) {
    fail(path, std::string(e.what()).substr(path.size() + 2));
  }
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) fail(path, "cannot read its size: " + ec.message());
  if (size > kMaxDataBytes)
    fail(path, "the data files together hold more than 8 GiB, the most zinf loads (the corpus is held in memory)");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, std::string("cannot open: ") + std::strerror(errno));
  const BinLayout layout = bin_layout(path, f, size);
  f.seekg(std::streamoff(layout.offset));
  TokenCorpus c;
  c.source = path;
  if (layout.wide) {
    c.tokens = TokenIds(read_tokens<uint32_t>(path, f, layout.count));
    const uint32_t top = c.tokens.max();
    if (top > uint32_t(INT32_MAX))
      fail(path, "token id " + std::to_string(top) + " is past 2^31 - 1, the largest id zinf trains on");
  } else {
    c.tokens = TokenIds(read_tokens<uint16_t>(path, f, layout.count));
  }
  c.vocab = c.tokens.empty() ? 0 : int64_t(c.tokens.max()) + 1;
  return c;
}

void TokenCorpus::require_vocab(int64_t model_vocab, const std::string& model, const std::string& what) const {
  if (vocab <= model_vocab) return;
  size_t first = 0;
  while (first < tokens.size() && int64_t(tokens[first]) < model_vocab) ++first;
  throw std::runtime_error(what + " " + source + ": token ids go up to " + std::to_string(vocab - 1) +
                           (first < tokens.size() ? " (the first past the model's, " + std::to_string(tokens[first]) +
                                                        ", at token " + std::to_string(first) + ")"
                                                  : std::string()) +
                           ", but model " + model + " has a vocabulary of " + std::to_string(model_vocab));
}

void write_llmc_bin(const std::string& path, const TokenIds& tokens) {
  if (tokens.size() > size_t(INT32_MAX)) fail(path, "more tokens than an llm.c header can count (2^31 - 1)");
  int32_t header[256] = {tokens.wide() ? kLlmcWideMagic : kLlmcMagic, tokens.wide() ? kLlmcWideVersion : kLlmcVersion,
                         int32_t(tokens.size())};
  OutputFile out(default_io_env(), path, "data");
  out.write(header, sizeof header);
  if (tokens.wide())
    out.write(tokens.wide_ids().data(), tokens.size() * sizeof(uint32_t));
  else
    out.write(tokens.narrow().data(), tokens.size() * sizeof(uint16_t));
  out.commit();
}

TokenCorpus TokenCorpus::load(const std::string& path_in) { return load(path_in, nullptr); }

namespace {

TokenCorpus encode_documents(const std::vector<std::string>& documents, const std::string& source, BpeTokenizer& tokenizer) {
  TokenCorpus c;
  c.source = source + " (BPE: " + tokenizer.source() + ")";
  c.vocab = tokenizer.vocab_size();
  // A vocabulary past 65536 is held (and written) in 32 bits from the start: its files have one
  // width whichever ids the text happens to use.
  if (c.vocab > 65536) c.tokens.widen();
  for (const auto& d : documents) {
    for (int32_t id : tokenizer.document_start()) c.tokens.push_back(uint32_t(id));
    for (int32_t id : tokenizer.encode(d)) c.tokens.push_back(uint32_t(id));
    for (int32_t id : tokenizer.document_end()) c.tokens.push_back(uint32_t(id));
  }
  return c;
}

}  // namespace

TokenCorpus TokenCorpus::split_tail(double fraction, int64_t min_tokens) {
  if (!(fraction > 0 && fraction < 1)) fail(source, "a held-out fraction must lie between 0 and 1");
  const size_t held = size_t(double(tokens.size()) * fraction);
  if (int64_t(held) < min_tokens || int64_t(tokens.size() - held) < min_tokens)
    fail(source, "its " + std::to_string(tokens.size()) + " tokens cannot give both the training part and a held-out " +
                     std::to_string(fraction) + " of it at least " + std::to_string(min_tokens) +
                     " tokens (one window of seq + 1)");
  TokenCorpus tail;
  tail.source = source + " (held-out last " + std::to_string(held) + " tokens)";
  tail.vocab = vocab;
  tail.tokens = tokens.take_tail(held);
  return tail;
}

TokenCorpus TokenCorpus::load(const std::string& path_in, BpeTokenizer* tokenizer) {
  const std::string path = path_in.empty() ? kDefaultCorpus : path_in;
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status))
    fail(path, path_in.empty() ? "the default corpus is missing (install the Debian package `fortunes`: "
                                 "bash scripts/setup.sh)"
                               : "no such file or directory");
  if (fs::is_directory(status)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path)) {
      if (e.is_symlink() || !e.is_regular_file() || e.path().extension() == ".dat") continue;
      files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) fail(path, "directory holds no text files");
    std::vector<std::string> documents;
    uint64_t budget = kMaxDataBytes;
    for (const auto& f : files) documents.push_back(read_file(f, budget));
    if (tokenizer) return encode_documents(documents, path, *tokenizer);
    std::string text;
    for (const auto& d : documents) text += d;
    return from_text(text, path);
  }
  // A FIFO, socket or device would block or never end: only regular files are read.
  if (!fs::is_regular_file(status)) fail(path, "not a regular file or a directory (a FIFO or device cannot be read as data)");
  if (fs::path(path).extension() == ".bin") return load_bin(path);
  uint64_t budget = kMaxDataBytes;
  if (tokenizer) return encode_documents({read_file(path, budget)}, path, *tokenizer);
  return from_text(read_file(path, budget), path);
}

BatchLoader::BatchLoader(const TokenCorpus& corpus, int64_t micro_batch, int64_t seq, int rank, int ranks,
                         uint64_t seed)
    : corpus_(&corpus), micro_batch_(micro_batch), seq_(seq), rank_(rank), ranks_(ranks), seed_(seed) {
  if (micro_batch <= 0 || seq <= 0) throw std::invalid_argument("data: micro_batch and seq must be positive");
  if (ranks <= 0 || rank < 0 || rank >= ranks)
    throw std::invalid_argument("data: rank " + std::to_string(rank) + " is not in [0, " + std::to_string(ranks) +
                                ")");
  const int64_t n = int64_t(corpus.tokens.size());
  windows_ = n > seq ? (n - 1) / seq : 0;
  if (windows_ < micro_batch * ranks)
    fail(corpus.source, std::to_string(n) + " tokens make " + std::to_string(windows_) + " windows of " +
                            std::to_string(seq + 1) + " tokens; one step of " + std::to_string(ranks) +
                            " ranks needs " + std::to_string(micro_batch * ranks));
}

// The epoch's order is a Fisher-Yates shuffle driven by a counter-based hash of (seed, epoch), so
// any position can be reached directly, without replaying the steps before it.
int64_t BatchLoader::window_at(uint64_t slot) {
  const uint64_t epoch = slot / uint64_t(windows_);
  if (epoch != perm_epoch_) {
    perm_.resize(size_t(windows_));
    for (int64_t i = 0; i < windows_; ++i) perm_[size_t(i)] = i;
    for (int64_t i = windows_ - 1; i > 0; --i) {
      const uint64_t h = mix(seed_ ^ mix(epoch * 0x100000001b3ull + uint64_t(i)));
      std::swap(perm_[size_t(i)], perm_[size_t(h % uint64_t(i + 1))]);
    }
    perm_epoch_ = epoch;
  }
  return perm_[size_t(slot % uint64_t(windows_))];
}

Batch BatchLoader::next() {
  Batch b;
  b.micro_batch = micro_batch_;
  b.seq = seq_;
  b.inputs.resize(size_t(micro_batch_ * seq_));
  b.targets.resize(b.inputs.size());
  for (int64_t i = 0; i < micro_batch_; ++i) {
    const uint64_t slot = (step_ * uint64_t(ranks_) + uint64_t(rank_)) * uint64_t(micro_batch_) + uint64_t(i);
    const size_t w = size_t(window_at(slot) * seq_);
    corpus_->tokens.copy_to(w, size_t(seq_), b.inputs.data() + i * seq_);
    corpus_->tokens.copy_to(w + 1, size_t(seq_), b.targets.data() + i * seq_);
  }
  ++step_;
  return b;
}

}  // namespace zinf::engine
