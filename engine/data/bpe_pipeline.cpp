// BpeTokenizer's steps around its BPE model: the pieces a text becomes before merging (added tokens,
// normalizer, pre-tokenizer) and the text ids become after it (the decoder), each as `tokenizers`
// carries it out.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <vector>

#include "engine/data/bpe_tokenizer.hpp"
#include "engine/data/byte_alphabet.hpp"
#include "engine/data/unicode_text.hpp"

namespace zinf::engine {

namespace {

using Segment = std::pair<std::string_view, int32_t>;  // text, and the added token's id or -1

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  size_t at = 0;
  for (size_t hit = s.find(from); hit != std::string::npos; hit = s.find(from, at)) {
    out.append(s, at, hit - at).append(to);
    at = hit + from.size();
  }
  s = out.append(s, at);
}

// The added tokens of one kind in `text`, as an Aho-Corasick search for the leftmost, then longest,
// match finds them; the text between them as segments of its own.
std::vector<Segment> split_added(std::string_view text, const std::vector<AddedToken>& added, bool normalized) {
  // The candidates by first byte, longest first: Llama 3 has 256 added tokens, all starting "<|".
  std::array<std::vector<const AddedToken*>, 256> by_first;
  bool any = false;
  for (const auto& a : added)
    if (a.normalized == normalized) by_first[static_cast<unsigned char>(a.content[0])].push_back(&a), any = true;
  // Equal lengths keep the file's order: the pointers into `added` rise with it. (std::sort, not
  // stable_sort, whose temporary buffer ASan's build reports as a new/free mismatch in libstdc++.)
  for (auto& list : by_first)
    std::sort(list.begin(), list.end(), [](const AddedToken* a, const AddedToken* b) {
      if (a->content.size() != b->content.size()) return a->content.size() > b->content.size();
      return std::less<const AddedToken*>()(a, b);
    });
  std::vector<Segment> out;
  size_t start = 0;
  for (size_t at = 0; at < text.size() && any;) {
    const AddedToken* hit = nullptr;
    for (const AddedToken* a : by_first[static_cast<unsigned char>(text[at])])
      if (text.substr(at, a->content.size()) == a->content) {
        hit = a;
        break;
      }
    if (!hit) {
      ++at;
      continue;
    }
    if (at > start) out.emplace_back(text.substr(start, at - start), -1);
    out.emplace_back(text.substr(at, hit->content.size()), hit->id);
    at += hit->content.size();
    start = at;
  }
  if (text.size() > start) out.emplace_back(text.substr(start), -1);
  return out;
}

std::string normalize(std::string_view text, const std::vector<NormalizerStep>& steps) {
  std::string s(text);
  for (const auto& step : steps) {
    switch (step.kind) {
      case NormalizerStep::Kind::Nfc:
        s = unicode::nfc(s);
        break;
      case NormalizerStep::Kind::Prepend:
        if (!s.empty()) s = step.text + s;
        break;
      case NormalizerStep::Kind::Replace:
        replace_all(s, step.text, step.with);
        break;
    }
  }
  return s;
}

// A Split's pieces of `text`: the matches, and (Isolated) the text between them, in order.
void split_by(const PreTokenizerStep& step, std::string_view text, std::vector<std::string>& out) {
  size_t gap = 0;
  for (std::string_view m : find_all(step.pattern, text)) {
    const size_t at = size_t(m.data() - text.data());
    if (at > gap) out.emplace_back(text.substr(gap, at - gap));
    if (!step.remove_matches) out.emplace_back(m);
    gap = at + m.size();
  }
  if (text.size() > gap) out.emplace_back(text.substr(gap));
}

}  // namespace

std::vector<BpeTokenizer::Piece> BpeTokenizer::pieces(std::string_view text) const {
  std::vector<Piece> out;
  for (const auto& [raw, id] : split_added(text, pipeline_.added, false)) {
    if (id >= 0) {
      out.push_back({std::string(raw), id});
      continue;
    }
    const std::string normal = normalize(raw, pipeline_.normalizer);
    for (const auto& [part, part_id] : split_added(normal, pipeline_.added, true)) {
      if (part_id >= 0)
        out.push_back({std::string(part), part_id});
      else
        pre_tokenize(std::string(part), raw.data() == text.data() && part.data() == normal.data(), out);
    }
  }
  return out;
}

// One segment through the pre-tokenizer's steps, each applied to every piece the last one left.
// `at_text_start`: the segment starts the text (Metaspace's "first" scheme marks only that one).
void BpeTokenizer::pre_tokenize(std::string segment, bool at_text_start, std::vector<Piece>& out) const {
  std::vector<std::string> current{std::move(segment)};
  for (const auto& step : pipeline_.pre_tokenizer) {
    std::vector<std::string> next;
    for (size_t i = 0; i < current.size(); ++i) {
      std::string& p = current[i];
      switch (step.kind) {
        case PreTokenizerStep::Kind::Split:
          split_by(step, p, next);
          break;
        case PreTokenizerStep::Kind::ByteLevel:
          if (step.add_prefix_space && !p.starts_with(' ')) p = ' ' + p;
          if (!step.use_regex)
            next.push_back(std::move(p));
          else
            for (std::string_view q : find_all(SplitPattern::Gpt2, p)) next.emplace_back(q);
          break;
        case PreTokenizerStep::Kind::Digits:
          for (std::string_view q : split_digits(p, step.individual_digits)) next.emplace_back(q);
          break;
        case PreTokenizerStep::Kind::Metaspace: {
          replace_all(p, " ", step.marker);
          const bool prepend = step.prepend == PreTokenizerStep::Prepend::Always ||
                               (step.prepend == PreTokenizerStep::Prepend::First && at_text_start && i == 0);
          if (prepend && !p.starts_with(step.marker)) p = step.marker + p;
          if (!step.split)
            next.push_back(std::move(p));
          else
            for (std::string_view q : split_before(p, step.marker)) next.emplace_back(q);
          break;
        }
      }
    }
    std::erase_if(next, [](const std::string& s) { return s.empty(); });
    current = std::move(next);
  }
  for (auto& p : current)
    if (!p.empty()) out.push_back({std::move(p), -1});
}

// What the decoder's first step receives for `id`: an added token's content, a byte-level token's
// bytes, or a text token as the vocabulary writes it.
std::string BpeTokenizer::token_text(int32_t id) const {
  const std::string& t = token_bytes(id);
  if (pipeline_.byte_level && (is_added_[size_t(id)] || !ids_.contains(t))) return byte_alphabet::decode_token(t);
  return t;
}

namespace {

// The decoder's steps over the tokens' texts. `streaming` leaves out what only trims the start of a
// whole text (Strip, Metaspace's first token) and keeps bytes that are not yet a character.
std::string run_decoder(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens, bool streaming) {
  for (const auto& step : steps) {
    switch (step.kind) {
      case DecoderStep::Kind::ByteLevel: {  // each token already its bytes (token_text)
        std::string all;
        for (const auto& t : tokens) all += t;
        return streaming ? all : unicode::utf8_lossy(all);
      }
      case DecoderStep::Kind::Replace:
        for (auto& t : tokens) replace_all(t, step.text, step.with);
        break;
      case DecoderStep::Kind::ByteFallback: {
        // Runs of <0xNN> tokens become their bytes when those are UTF-8, else one U+FFFD each.
        std::vector<std::string> out;
        std::string bytes;
        size_t count = 0;
        const auto flush = [&] {
          if (count == 0) return;
          if (streaming || unicode::utf8_lossy(bytes) == bytes)
            out.push_back(bytes);
          else
            for (size_t i = 0; i < count; ++i) out.emplace_back("\xEF\xBF\xBD");
          bytes.clear(), count = 0;
        };
        for (auto& t : tokens) {
          const bool hex = t.size() == 6 && t.starts_with("<0x") && t.back() == '>' && std::isxdigit(uint8_t(t[3])) &&
                           std::isxdigit(uint8_t(t[4]));
          if (hex) {
            bytes.push_back(char(std::stoi(t.substr(3, 2), nullptr, 16)));
            ++count;
            continue;
          }
          flush();
          out.push_back(std::move(t));
        }
        flush();
        tokens = std::move(out);
        break;
      }
      case DecoderStep::Kind::Fuse: {
        std::string all;
        for (const auto& t : tokens) all += t;
        tokens = {all};
        break;
      }
      case DecoderStep::Kind::Strip:
        if (streaming) break;
        for (auto& t : tokens) {
          // At most `start` of the character at the front and `stop` at the back, counted in characters.
          size_t front = 0, back = t.size();
          for (int64_t n = 0; n < step.start && t.compare(front, step.text.size(), step.text) == 0; ++n)
            front += step.text.size();
          for (int64_t n = 0; n < step.stop && back >= front + step.text.size() &&
                              t.compare(back - step.text.size(), step.text.size(), step.text) == 0;
               ++n)
            back -= step.text.size();
          t = t.substr(front, back - front);
        }
        break;
      case DecoderStep::Kind::Metaspace:
        for (size_t i = 0; i < tokens.size(); ++i)
          replace_all(tokens[i], step.text, i == 0 && !streaming && step.first_token_marks ? "" : " ");
        break;
    }
  }
  std::string all;
  for (const auto& t : tokens) all += t;
  return all;
}

}  // namespace

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> tokens;
  for (int32_t id : ids) tokens.push_back(token_text(id));
  if (!pipeline_.has_decoder)
    throw std::runtime_error(
        fmt::format("{}: its decoder is null, which Hugging Face decodes by joining tokens with "
                    "spaces; zinf does not write text that way",
                    source_));
  return run_decoder(pipeline_.decoder, std::move(tokens), false);
}

std::string BpeTokenizer::decode_next(int32_t id) const {
  if (!pipeline_.has_decoder) return decode({id});  // the refusal
  return run_decoder(pipeline_.decoder, {token_text(id)}, true);
}

}  // namespace zinf::engine
