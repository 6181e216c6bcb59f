#include "engine/data/bpe_tokenizer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "core/bounded_input.hpp"
#include "core/errors.hpp"

namespace zinf::engine {

namespace {

namespace fs = std::filesystem;

struct CodeRange {
  char32_t first, last;
};
#include "engine/data/unicode_classes.inc"

template <size_t N>
bool in(const CodeRange (&table)[N], char32_t c) {
  const auto it = std::upper_bound(std::begin(table), std::end(table), c,
                                   [](char32_t v, const CodeRange& r) { return v < r.first; });
  return it != std::begin(table) && c <= std::prev(it)->last;
}

enum class Class { Letter, Number, Space, Other };

// One code point of `text` at `at`: its class and its length in bytes. A byte that does not start
// a valid UTF-8 sequence is one code unit of class Other.
struct CodePoint {
  Class cls;
  size_t len;
  char32_t value;
};

CodePoint decode_at(std::string_view text, size_t at) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(text[at + i]); };
  const unsigned char c = b(0);
  size_t len = 0;
  char32_t v = 0;
  if (c < 0x80) len = 1, v = c;
  else if ((c & 0xE0) == 0xC0 && c >= 0xC2) len = 2, v = c & 0x1F;
  else if ((c & 0xF0) == 0xE0) len = 3, v = c & 0x0F;
  else if ((c & 0xF8) == 0xF0 && c <= 0xF4) len = 4, v = c & 0x07;
  bool ok = len > 0 && at + len <= text.size();
  for (size_t i = 1; ok && i < len; ++i) {
    ok = (b(i) & 0xC0) == 0x80;
    v = (v << 6) | (b(i) & 0x3F);
  }
  // Overlong three- and four-byte forms, surrogates and values past U+10FFFF are not UTF-8.
  if (ok && ((len == 3 && (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))) || (len == 4 && (v < 0x10000 || v > 0x10FFFF))))
    ok = false;
  if (!ok) return {Class::Other, 1, 0xFFFD};
  const Class cls = in(kLetters, v) ? Class::Letter : in(kNumbers, v) ? Class::Number : in(kSpaces, v) ? Class::Space : Class::Other;
  return {cls, len, v};
}

// GPT-2's byte-to-unicode map: printable Latin-1 bytes stand for themselves, the other 68 bytes
// for U+0100 onwards in byte order. Returns the code point byte `b` is written as.
std::array<char32_t, 256> byte_to_unicode() {
  std::array<char32_t, 256> map{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    map[size_t(b)] = printable ? char32_t(b) : next++;
  }
  return map;
}

// A token as the vocabulary files write it (UTF-8 of byte-to-unicode characters) back to its bytes.
std::string token_to_bytes(const std::string& written, const std::string& file) {
  static const auto forward = byte_to_unicode();
  static const std::unordered_map<char32_t, unsigned char> back = [] {
    std::unordered_map<char32_t, unsigned char> m;
    for (int b = 0; b < 256; ++b) m[forward[size_t(b)]] = static_cast<unsigned char>(b);
    return m;
  }();
  std::string out;
  for (size_t at = 0; at < written.size();) {
    const CodePoint cp = decode_at(written, at);
    const auto it = back.find(cp.value);
    if (cp.value == 0xFFFD || it == back.end())
      throw std::runtime_error(fmt::format("{}: token '{}' holds a character outside GPT-2's byte alphabet", file, written));
    out.push_back(static_cast<char>(it->second));
    at += cp.len;
  }
  return out;
}

// GPT-2's vocab.json is 1 MB, merges.txt 0.5 MB, tokenizer.json 1.4 MB: a tokenizer file may hold
// at most 64 MiB, and must be a regular file (a FIFO or /dev/zero is refused without blocking).
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

}  // namespace

std::vector<std::string_view> BpeTokenizer::split(std::string_view text) {
  std::vector<std::string_view> pieces;
  size_t at = 0;
  const auto cls_at = [&](size_t i) { return decode_at(text, i); };
  // Code points from `i` while they are of class `c` (or, with `other`, of no class of the three).
  const auto run = [&](size_t i, Class c) {
    while (i < text.size()) {
      const CodePoint cp = cls_at(i);
      if (cp.cls != c) break;
      i += cp.len;
    }
    return i;
  };
  while (at < text.size()) {
    // 's 't 're 've 'm 'll 'd
    if (text[at] == '\'') {
      size_t len = 0;
      for (std::string_view s : {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"})
        if (text.substr(at, s.size()) == s) {
          len = s.size();
          break;
        }
      if (len > 0) {
        pieces.push_back(text.substr(at, len));
        at += len;
        continue;
      }
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space and a run of one class.
    const size_t start = at + (text[at] == ' ' && at + 1 < text.size() && cls_at(at + 1).cls != Class::Space ? 1 : 0);
    const CodePoint first = cls_at(start);
    if (first.cls != Class::Space) {
      const size_t end = run(start, first.cls);
      pieces.push_back(text.substr(at, end - at));
      at = end;
      continue;
    }
    // `\s+(?!\S)` then `\s+`: a run of spaces, less its last one when a non-space follows it.
    size_t end = at, last = at;
    while (end < text.size()) {
      const CodePoint cp = cls_at(end);
      if (cp.cls != Class::Space) break;
      last = end;
      end += cp.len;
    }
    if (end < text.size() && last > at) end = last;
    pieces.push_back(text.substr(at, end - at));
    at = end;
  }
  return pieces;
}

BpeTokenizer BpeTokenizer::from_strings(const std::string& vocab_json, const std::string& merges_txt, const std::string& source) {
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
    if (space == std::string::npos || space == 0 || space + 1 == line.size() || line.find(' ', space + 1) != std::string::npos)
      throw std::runtime_error(fmt::format("{}: merges line {} is '{}', not two symbols separated by one space", source,
                                           number, line.substr(0, 64)));
    merges.push_back(nlohmann::json::array({line.substr(0, space), line.substr(space + 1)}));
  }
  return from_model(nlohmann::json{{"vocab", std::move(vocab)}, {"merges", std::move(merges)}}, source);
}

BpeTokenizer BpeTokenizer::from_tokenizer_json(const std::string& text, const std::string& source) {
  const nlohmann::json j = parse_json(text, source);
  if (!j.contains("model") || !j["model"].is_object())
    throw std::runtime_error(fmt::format("{}: no 'model' object (a Hugging Face tokenizer.json has one)", source));
  return from_model(j["model"], source);
}

BpeTokenizer BpeTokenizer::from_model(const nlohmann::json& model, const std::string& source) {
  BpeTokenizer t;
  t.source_ = source;
  const auto fail = [&](const std::string& what) -> void {
    throw std::runtime_error(fmt::format("{}: {}", t.source_, what));
  };
  if (model.contains("type") && model["type"] != "BPE") fail(fmt::format("model.type is {}, not BPE", model["type"].dump()));
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail("model.vocab must map tokens to ids");
  if (!model.contains("merges") || !model["merges"].is_array()) fail("model.merges must be a list");
  int64_t largest = -1;
  for (const auto& [written, id] : model["vocab"].items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() > uint64_t(std::numeric_limits<int32_t>::max()))
      fail(fmt::format("vocab entry '{}' has id {}, not a non-negative integer", written, id.dump()));
    const std::string bytes = token_to_bytes(written, t.source_);
    const int32_t i = id.get<int32_t>();
    if (!t.ids_.emplace(bytes, i).second) fail(fmt::format("vocab entry '{}' names the bytes of another entry", written));
    largest = std::max<int64_t>(largest, i);
    if (written == "<|endoftext|>") t.eot_ = i;
  }
  t.id_bytes_.assign(size_t(largest + 1), std::string());
  for (const auto& [bytes, id] : t.ids_) t.id_bytes_[size_t(id)] = bytes;
  const auto symbol = [&t](const std::string& bytes) {
    const auto [it, added] = t.symbols_.emplace(bytes, int32_t(t.symbol_bytes_.size()));
    if (added) t.symbol_bytes_.push_back(bytes);
    return it->second;
  };
  for (int b = 0; b < 256; ++b) symbol(std::string(1, static_cast<char>(b)));  // symbols 0..255: the bytes
  int32_t rank = 0;
  for (const auto& m : model["merges"]) {
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos) fail(fmt::format("merge {} '{}' is not two symbols separated by a space", rank, s));
      left = s.substr(0, space), right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>(), right = m[1].get<std::string>();
    } else {
      fail(fmt::format("merge {} is {}, not \"a b\" or [\"a\", \"b\"]", rank, m.dump()));
    }
    const std::string l = token_to_bytes(left, t.source_), r = token_to_bytes(right, t.source_);
    const uint64_t key = (uint64_t(uint32_t(symbol(l))) << 32) | uint32_t(symbol(r));
    t.merges_.emplace(key, std::pair{rank, symbol(l + r)});  // the first of a repeated merge ranks
    ++rank;
  }
  return t;
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
    throw std::runtime_error(fmt::format("--tokenizer {}: the directory holds neither tokenizer.json nor vocab.json + "
                                         "merges.txt",
                                         path));
  }
  return from_tokenizer_json(read_text(path), path);
}

// GPT-2's merge loop on one piece: the pair of adjacent symbols with the lowest rank is merged
// everywhere it occurs (left to right, not overlapping), until no adjacent pair has a rank.
std::vector<int32_t> BpeTokenizer::merge(const std::string& piece) const {
  std::vector<int32_t> word;
  for (char c : piece) word.push_back(int32_t(static_cast<unsigned char>(c)));
  while (word.size() > 1) {
    int32_t best_rank = std::numeric_limits<int32_t>::max(), left = -1, right = -1, merged = -1;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const auto it = merges_.find((uint64_t(uint32_t(word[i])) << 32) | uint32_t(word[i + 1]));
      if (it != merges_.end() && it->second.first < best_rank)
        best_rank = it->second.first, left = word[i], right = word[i + 1], merged = it->second.second;
    }
    if (merged < 0) break;
    std::vector<int32_t> next;
    for (size_t i = 0; i < word.size(); ++i) {
      if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
        next.push_back(merged);
        ++i;
      } else {
        next.push_back(word[i]);
      }
    }
    word = std::move(next);
  }
  std::vector<int32_t> ids;
  for (int32_t s : word) {
    const std::string& bytes = symbol_bytes_[size_t(s)];
    const auto it = ids_.find(bytes);
    if (it == ids_.end())
      throw std::runtime_error(fmt::format("{}: the vocabulary has no token for the bytes of '{}' (in '{}'): merges and "
                                           "vocabulary disagree",
                                           source_, bytes, piece));
    ids.push_back(it->second);
  }
  return ids;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) {
  constexpr size_t kCacheLimit = 1 << 16;
  std::vector<int32_t> ids;
  for (std::string_view piece : split(text)) {
    std::string key(piece);
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      if (cache_.size() >= kCacheLimit) cache_.clear();
      it = cache_.emplace(key, merge(key)).first;
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

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

}  // namespace zinf::engine
