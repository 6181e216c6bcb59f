#include "engine/data/token_data.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "core/bounded_input.hpp"
#include "core/errors.hpp"
#include "engine/data/bpe_tokenizer.hpp"
#include "engine/io/output_file.hpp"
#include "engine/splitmix.hpp"

namespace zinf::engine {

namespace fs = std::filesystem;

namespace {

constexpr int32_t kLlmcMagic = 20240520;
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw std::runtime_error("data: " + path + ": " + why);
}

// The corpus is held in memory (as 16-bit tokens): its files together may hold at most this much.
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

TokenCorpus TokenCorpus::from_text(const std::string& text, std::string source) {
  TokenCorpus c;
  c.source = std::move(source);
  c.vocab = 256;
  c.tokens.resize(text.size());
  for (size_t i = 0; i < text.size(); ++i) c.tokens[i] = static_cast<unsigned char>(text[i]);
  return c;
}

TokenCorpus TokenCorpus::load_bin(const std::string& path) {
  uint64_t budget = kMaxDataBytes;
  const std::string bytes = read_file(path, budget);
  TokenCorpus c;
  c.source = path;
  size_t offset = 0, count = 0;
  int32_t head[3] = {0, 0, 0};
  if (bytes.size() >= sizeof head) std::memcpy(head, bytes.data(), sizeof head);
  if (head[0] == kLlmcMagic) {
    if (bytes.size() < kLlmcHeaderBytes) fail(path, "llm.c token file shorter than its 1024-byte header");
    if (head[1] != 1) fail(path, "llm.c token file version " + std::to_string(head[1]) + ", expected 1");
    if (head[2] < 0) fail(path, "llm.c token file with a negative token count");
    offset = kLlmcHeaderBytes;
    count = size_t(head[2]);
    if (bytes.size() != offset + 2 * count)
      fail(path, "llm.c header says " + std::to_string(count) + " tokens but the file holds " +
                     std::to_string((bytes.size() - offset) / 2));
  } else {
    if (bytes.size() % 2) fail(path, "a raw uint16 token file (nanoGPT) must have an even size");
    count = bytes.size() / 2;
  }
  c.tokens.resize(count);
  std::memcpy(c.tokens.data(), bytes.data() + offset, 2 * count);  // little-endian, as both writers use
  c.vocab = c.tokens.empty() ? 0 : int64_t(*std::max_element(c.tokens.begin(), c.tokens.end())) + 1;
  return c;
}

void write_llmc_bin(const std::string& path, const std::vector<uint16_t>& tokens) {
  if (tokens.size() > size_t(INT32_MAX)) fail(path, "more tokens than an llm.c header can count (2^31 - 1)");
  int32_t header[256] = {kLlmcMagic, 1, int32_t(tokens.size())};
  OutputFile out(default_io_env(), path, "data");
  out.write(header, sizeof header);
  out.write(tokens.data(), tokens.size() * sizeof(uint16_t));
  out.commit();
}

TokenCorpus TokenCorpus::load(const std::string& path_in) { return load(path_in, nullptr); }

namespace {

TokenCorpus encode_documents(const std::vector<std::string>& documents, const std::string& source, BpeTokenizer& tokenizer) {
  if (tokenizer.vocab_size() > 65536)
    fail(source, "the tokenizer's vocabulary (" + std::to_string(tokenizer.vocab_size()) + " ids) does not fit the "
                 "uint16 token ids zinf trains on");
  TokenCorpus c;
  c.source = source + " (BPE: " + tokenizer.source() + ")";
  c.vocab = tokenizer.vocab_size();
  for (const auto& d : documents) {
    for (int32_t id : tokenizer.document_start()) c.tokens.push_back(uint16_t(id));
    for (int32_t id : tokenizer.encode(d)) c.tokens.push_back(uint16_t(id));
    for (int32_t id : tokenizer.document_end()) c.tokens.push_back(uint16_t(id));
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
  tail.tokens.assign(tokens.end() - std::ptrdiff_t(held), tokens.end());
  tokens.resize(tokens.size() - held);
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
    const uint16_t* w = corpus_->tokens.data() + window_at(slot) * seq_;
    for (int64_t s = 0; s < seq_; ++s) {
      b.inputs[size_t(i * seq_ + s)] = w[s];
      b.targets[size_t(i * seq_ + s)] = w[s + 1];
    }
  }
  ++step_;
  return b;
}

}  // namespace zinf::engine
