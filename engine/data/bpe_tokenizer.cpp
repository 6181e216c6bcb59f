#include "engine/data/bpe_tokenizer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <stdexcept>

#include "formats/bounded_input.hpp"
#include "core/errors.hpp"
#include "engine/data/byte_alphabet.hpp"
#include "engine/data/unicode_text.hpp"

namespace zinf::engine {

namespace {

namespace fs = std::filesystem;

// GPT-2's vocab.json is 1 MB, merges.txt 0.5 MB, tokenizer.json 1.4 MB (Llama 3's and Qwen2's
// about 9 MB): a tokenizer file may hold at most 64 MiB, and must be a regular file (a FIFO or
// /dev/zero is refused without blocking).
constexpr uint64_t kMaxTokenizerBytes = 64ull << 20;

std::string read_text(const std::string& path) {
  try {
    return core::read_bounded_file(path, kMaxTokenizerBytes, "tokenizer file");
  } catch (const core::ConfigError& e) {
    throw std::runtime_error(e.what());
  }
}

nlohmann::json parse_json(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // a syntax error, or a number out of range (1e999)
    throw std::runtime_error(fmt::format("{}: not valid JSON ({})", source, e.what()));
  }
}

uint64_t pair_key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }

// A string option of the model that zinf carries out only when it is absent, null or empty.
void require_unset(const nlohmann::json& model, const char* key, const std::string& source) {
  if (!model.contains(key) || model[key].is_null() || (model[key].is_string() && model[key].get<std::string>().empty()))
    return;
  throw std::runtime_error(
      fmt::format("{}: model.{} is {}; zinf's BPE has no subword prefixes or suffixes (the GPT-2, "
                  "GPT-NeoX, Llama, Mistral and Qwen2 tokenizers have none)",
                  source, key, model[key].dump()));
}

bool model_flag(const nlohmann::json& model, const char* key, const std::string& source) {
  if (!model.contains(key) || model[key].is_null()) return false;
  if (!model[key].is_boolean())
    throw std::runtime_error(fmt::format("{}: model.{} is {}, not true or false", source, key, model[key].dump()));
  return model[key].get<bool>();
}

}  // namespace

std::vector<std::string_view> BpeTokenizer::split(std::string_view text) { return find_all(SplitPattern::Gpt2, text); }

BpeTokenizer BpeTokenizer::from_strings(const std::string& vocab_json, const std::string& merges_txt,
                                        const std::string& source) {
  nlohmann::json vocab = parse_json(vocab_json, source);
  nlohmann::json merges = nlohmann::json::array();
  std::istringstream lines(merges_txt);
  std::string line;
  int64_t number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string::npos)
      throw std::runtime_error(fmt::format("{}: merges line {} is '{}', not two symbols separated by one space", source,
                                           number, line.substr(0, 64)));
    merges.push_back(nlohmann::json::array({line.substr(0, space), line.substr(space + 1)}));
  }
  return from_model(nlohmann::json{{"vocab", std::move(vocab)}, {"merges", std::move(merges)}}, gpt2_pipeline(),
                    source);
}

BpeTokenizer BpeTokenizer::from_tokenizer_json(const std::string& text, const std::string& source) {
  const nlohmann::json j = parse_json(text, source);
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
    throw std::runtime_error(fmt::format("{}: no 'model' object (a Hugging Face tokenizer.json has one)", source));
  const nlohmann::json& model = j["model"];
  if (model.contains("type") && model["type"] != "BPE")
    throw std::runtime_error(
        fmt::format("{}: model.type is {}; zinf encodes BPE models only (GPT-2, GPT-NeoX, Llama, "
                    "Mistral, Qwen2), not WordPiece, Unigram or WordLevel ones",
                    source, model["type"].dump()));
  // Added tokens' ids follow the vocabulary's (Llama 3's 256 after its 128000 entries).
  const size_t entries = (model.contains("vocab") && model["vocab"].is_object() ? model["vocab"].size() : 0) +
                         (j.contains("added_tokens") && j["added_tokens"].is_array() ? j["added_tokens"].size() : 0);
  return from_model(model, read_pipeline(j, source, id_bound(int64_t(entries))), source);
}

BpeTokenizer BpeTokenizer::from_model(const nlohmann::json& model, TokenizerPipeline pipeline,
                                      const std::string& source) {
  BpeTokenizer t;
  t.source_ = source;
  t.pipeline_ = std::move(pipeline);
  const auto fail = [&](const std::string& what) { throw std::runtime_error(fmt::format("{}: {}", source, what)); };
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail("model.vocab must map tokens to ids");
  if (!model.contains("merges") || !model["merges"].is_array()) fail("model.merges must be a list");
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0))
    fail(fmt::format("model.dropout is {}: BPE dropout picks merges at random, and zinf encodes deterministically",
                     model["dropout"].dump()));
  require_unset(model, "continuing_subword_prefix", source);
  require_unset(model, "end_of_word_suffix", source);
  t.options_.byte_fallback = model_flag(model, "byte_fallback", source);
  t.options_.fuse_unk = model_flag(model, "fuse_unk", source);
  t.options_.ignore_merges = model_flag(model, "ignore_merges", source);
  if (t.options_.byte_fallback && t.pipeline_.byte_level)
    fail("model.byte_fallback is true, but a byte-level tokenizer has every byte in its vocabulary");
  t.read_vocab(model["vocab"]);
  if (model.contains("unk_token") && !model["unk_token"].is_null()) {
    const auto it = model["unk_token"].is_string() ? t.ids_.find(model["unk_token"].get<std::string>()) : t.ids_.end();
    if (it == t.ids_.end()) fail(fmt::format("model.unk_token {} is not in the vocabulary", model["unk_token"].dump()));
    t.options_.unk = it->second;
  }
  t.read_merges(model["merges"]);
  // Added tokens decode from their content; an id the vocabulary also has is the added token's.
  int64_t size = int64_t(t.id_bytes_.size());
  for (const auto& a : t.pipeline_.added) size = std::max<int64_t>(size, a.id + 1);
  for (int32_t id : t.pipeline_.prefix) size = std::max<int64_t>(size, id + 1);
  for (int32_t id : t.pipeline_.suffix) size = std::max<int64_t>(size, id + 1);
  t.id_bytes_.resize(size_t(size));
  t.is_added_.assign(size_t(size), false);
  for (const auto& a : t.pipeline_.added) {
    t.id_bytes_[size_t(a.id)] = a.content;
    t.is_added_[size_t(a.id)] = true;
  }
  for (int32_t id : t.pipeline_.prefix)
    if (t.id_bytes_[size_t(id)].empty())
      fail(fmt::format("post_processor: its template's token id {} is no token", id));
  if (t.pipeline_.has_template) {
    t.document_start_ = t.pipeline_.prefix;
  } else {
    for (const auto& a : t.pipeline_.added)
      if (a.content == "<|endoftext|>") t.document_start_ = {a.id};
    const auto it = t.ids_.find("<|endoftext|>");
    if (t.document_start_.empty() && it != t.ids_.end()) t.document_start_ = {it->second};
  }
  return t;
}

void BpeTokenizer::read_vocab(const nlohmann::json& vocab) {
  const auto fail = [&](const std::string& what) { throw std::runtime_error(fmt::format("{}: {}", source_, what)); };
  int64_t largest = -1;
  std::vector<std::pair<int32_t, std::string>> written_as;  // entries outside the byte alphabet
  const int64_t entries = int64_t(vocab.size()), bound = id_bound(entries);
  for (const auto& [written, id] : vocab.items()) {
    // Bounded before anything is sized by it: a stray id near 2^31 would otherwise ask for that
    // many strings.
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= uint64_t(bound))
      fail(
          fmt::format("vocab entry '{}' has id {}; the ids of its {} entries may run from 0 to {} (their number plus "
                      "{} unused, below {} in all), and zinf refuses one past that before sizing a table by it",
                      written.substr(0, 64), id.dump(), entries, bound - 1, kMaxIdGap, kMaxVocab));
    const int32_t i = id.get<int32_t>();
    largest = std::max<int64_t>(largest, i);
    std::string bytes = written;
    if (pipeline_.byte_level) {
      const auto mapped = byte_alphabet::to_bytes(written);
      // Such an entry (GPT-NeoX's runs of spaces) can come from no merge of bytes; it decodes as written.
      if (!mapped) {
        written_as.emplace_back(i, written);
        continue;
      }
      bytes = *mapped;
    }
    if (!ids_.emplace(bytes, i).second) fail(fmt::format("vocab entry '{}' names the bytes of another entry", written));
  }
  id_bytes_.assign(size_t(largest + 1), std::string());
  for (const auto& [bytes, id] : ids_) id_bytes_[size_t(id)] = bytes;
  for (const auto& [id, written] : written_as) id_bytes_[size_t(id)] = written;
}

void BpeTokenizer::read_merges(const nlohmann::json& merges) {
  const auto fail = [&](const std::string& what) { throw std::runtime_error(fmt::format("{}: {}", source_, what)); };
  const auto known = [&](const std::string& written, size_t rank) -> std::pair<int32_t, std::string> {
    std::string bytes = written;
    if (pipeline_.byte_level) {
      const auto mapped = byte_alphabet::to_bytes(written);
      if (!mapped)
        fail(fmt::format("merge {}: token '{}' holds a character outside GPT-2's byte alphabet", rank, written));
      bytes = *mapped;
    }
    const auto it = ids_.find(bytes);
    if (it == ids_.end()) fail(fmt::format("merge {}: '{}' is not in the vocabulary", rank, written));
    return {it->second, bytes};
  };
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos)
        fail(fmt::format("merge {} '{}' is not two symbols separated by a space", rank, s));
      left = s.substr(0, space), right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>(), right = m[1].get<std::string>();
    } else {
      fail(fmt::format("merge {} is {}, not \"a b\" or [\"a\", \"b\"]", rank, m.dump()));
    }
    const auto [l, l_bytes] = known(left, rank);
    const auto [r, r_bytes] = known(right, rank);
    const auto merged = ids_.find(l_bytes + r_bytes);
    if (merged == ids_.end()) fail(fmt::format("merge {}: '{}{}' is not in the vocabulary", rank, left, right));
    // A repeated merge ranks where it last stands, as in both GPT-2's encoder and `tokenizers`.
    merges_[pair_key(l, r)] = {int32_t(rank), merged->second};
  }
}

BpeTokenizer BpeTokenizer::from_files(const std::string& vocab_json, const std::string& merges_txt) {
  return from_strings(read_text(vocab_json), read_text(merges_txt), vocab_json + " + " + merges_txt);
}

BpeTokenizer BpeTokenizer::load(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (fs::exists(dir / "tokenizer.json")) return load((dir / "tokenizer.json").string());
    if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt"))
      return from_files((dir / "vocab.json").string(), (dir / "merges.txt").string());
    if (fs::exists(dir / "tokenizer.model"))
      throw std::runtime_error(
          fmt::format("--tokenizer {}: the directory holds a SentencePiece tokenizer.model but no "
                      "tokenizer.json; zinf reads the tokenizer.json that transformers writes "
                      "from it (AutoTokenizer.from_pretrained(dir).save_pretrained(dir))",
                      path));
    throw std::runtime_error(
        fmt::format("--tokenizer {}: the directory holds neither tokenizer.json nor vocab.json + "
                    "merges.txt",
                    path));
  }
  return from_tokenizer_json(read_text(path), path);
}

// The symbols BPE starts from: the piece's bytes (byte-level) or characters, each its vocabulary id;
// a character the vocabulary lacks becomes its <0xNN> byte tokens (byte_fallback) or the unknown
// token (consecutive ones fused into one with fuse_unk), as `tokenizers` builds a word.
std::vector<int32_t> BpeTokenizer::initial_symbols(const std::string& piece) const {
  std::vector<int32_t> symbols;
  int32_t pending_unk = -1;  // an unknown token not yet placed (fuse_unk grows it), or -1
  for (size_t at = 0; at < piece.size();) {
    const size_t len = pipeline_.byte_level ? 1 : unicode::at(piece, at).len;
    const std::string unit = piece.substr(at, len);
    at += len;
    if (const auto it = ids_.find(unit); it != ids_.end()) {
      if (pending_unk >= 0) symbols.push_back(pending_unk), pending_unk = -1;
      symbols.push_back(it->second);
      continue;
    }
    if (options_.byte_fallback) {
      std::vector<int32_t> bytes;
      for (unsigned char b : unit) {
        const auto it = ids_.find(fmt::format("<0x{:02X}>", b));
        if (it == ids_.end()) break;
        bytes.push_back(it->second);
      }
      if (bytes.size() == unit.size()) {
        symbols.insert(symbols.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    if (!options_.unk)
      throw std::runtime_error(
          fmt::format("{}: the vocabulary has no token for '{}' (in '{}') and no unk_token or byte "
                      "fallback to stand for it",
                      source_, unit, piece.substr(0, 64)));
    if (pending_unk >= 0 && !options_.fuse_unk) symbols.push_back(pending_unk);
    pending_unk = *options_.unk;
  }
  if (pending_unk >= 0) symbols.push_back(pending_unk);
  return symbols;
}

// `tokenizers`' merge loop: a queue of adjacent pairs by (rank, position); the lowest is merged
// unless an earlier merge changed that pair, and the pairs the new symbol forms join the queue.
std::vector<int32_t> BpeTokenizer::merge(const std::string& piece) const {
  if (options_.ignore_merges)
    if (const auto it = ids_.find(piece); it != ids_.end()) return {it->second};
  struct Symbol {
    int32_t id;
    int64_t prev, next;  // -1: none
    bool gone;
  };
  struct Candidate {
    int32_t rank;
    int64_t pos;
    int32_t merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const std::vector<int32_t> start = initial_symbols(piece);
  std::vector<Symbol> word;
  for (size_t i = 0; i < start.size(); ++i)
    word.push_back({start[i], int64_t(i) - 1, i + 1 < start.size() ? int64_t(i) + 1 : -1, false});
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto offer = [&](int64_t pos) {
    const Symbol& s = word[size_t(pos)];
    if (s.next < 0) return;
    const auto it = merges_.find(pair_key(s.id, word[size_t(s.next)].id));
    if (it != merges_.end()) queue.push({it->second.first, pos, it->second.second});
  };
  for (size_t i = 0; i + 1 < word.size(); ++i) offer(int64_t(i));
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& s = word[size_t(top.pos)];
    if (s.gone || s.next < 0) continue;
    Symbol& right = word[size_t(s.next)];
    // Stale unless the pair here still merges into the same token (`tokenizers`' own test).
    const auto it = merges_.find(pair_key(s.id, right.id));
    if (it == merges_.end() || it->second.second != top.merged) continue;
    s.id = top.merged;
    right.gone = true;
    s.next = right.next;
    if (right.next >= 0) word[size_t(right.next)].prev = top.pos;
    if (s.prev >= 0) offer(s.prev);
    offer(top.pos);
  }
  std::vector<int32_t> ids;
  for (const Symbol& s : word)
    if (!s.gone) ids.push_back(s.id);
  return ids;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) {
  constexpr size_t kCacheLimit = 1 << 16, kCachedPieceBytes = 256;
  std::vector<int32_t> ids;
  for (const Piece& piece : pieces(text)) {
    if (piece.added >= 0) {
      ids.push_back(piece.added);
      continue;
    }
    // A SentencePiece-style tokenizer has no pre-tokenizer: its piece is a whole document, worth
    // no cache entry (and too large to keep 2^16 of).
    if (piece.text.size() > kCachedPieceBytes) {
      const auto merged = merge(piece.text);
      ids.insert(ids.end(), merged.begin(), merged.end());
      continue;
    }
    auto it = cache_.find(piece.text);
    if (it == cache_.end()) {
      if (cache_.size() >= kCacheLimit) cache_.clear();
      it = cache_.emplace(piece.text, merge(piece.text)).first;
    }
    ids.insert(ids.end(), it->second.begin(), it->second.end());
  }
  return ids;
}

const std::string& BpeTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || size_t(id) >= id_bytes_.size() || (id_bytes_[size_t(id)].empty()))
    throw std::out_of_range(fmt::format("{}: token id {} is not in the vocabulary", source_, id));
  return id_bytes_[size_t(id)];
}

}  // namespace zinf::engine
