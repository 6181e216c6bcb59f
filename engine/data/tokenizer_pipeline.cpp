#include "engine/data/tokenizer_pipeline.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace zinf::engine {

namespace {

using nlohmann::json;

struct Reader {
  const std::string& source;
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw std::runtime_error(fmt::format("{}: {}: {}", source, where, what));
  }
  std::string type(const json& j, const std::string& where) const {
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
      fail(where, "not an object with a string 'type'");
    return j["type"].get<std::string>();
  }
  bool flag(const json& j, const char* key, bool fallback, const std::string& where) const {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_boolean()) fail(where, fmt::format("'{}' is {}, not true or false", key, j[key].dump()));
    return j[key].get<bool>();
  }
  std::string text(const json& j, const char* key, const std::string& where) const {
    if (!j.contains(key) || !j[key].is_string()) fail(where, fmt::format("'{}' must be a string", key));
    return j[key].get<std::string>();
  }
  int64_t count(const json& j, const char* key, const std::string& where) const {
    if (!j.contains(key) || !j[key].is_number_unsigned() || j[key].get<uint64_t>() > 1000000)
      fail(where, fmt::format("'{}' must be a count", key));
    return j[key].get<int64_t>();
  }
  // A Replace's or Split's {"String": s} pattern; a {"Regex": ...} one is refused unless `regex` takes it.
  std::string string_pattern(const json& j, const std::string& where) const {
    if (!j.contains("pattern") || !j["pattern"].is_object()) fail(where, "no 'pattern' object");
    const json& p = j["pattern"];
    if (p.contains("String") && p["String"].is_string()) return p["String"].get<std::string>();
    fail(where, fmt::format("pattern {} is not a {{\"String\": ...}}; zinf replaces plain strings only", p.dump()));
  }
};

void read_normalizer(const Reader& r, const json& j, const std::string& where, TokenizerPipeline& p) {
  if (j.is_null()) return;
  const std::string type = r.type(j, where);
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array())
      r.fail(where, "a Sequence needs a 'normalizers' list");
    for (size_t i = 0; i < j["normalizers"].size(); ++i)
      read_normalizer(r, j["normalizers"][i], fmt::format("{}.normalizers[{}]", where, i), p);
  } else if (type == "NFC") {
    p.normalizer.push_back({NormalizerStep::Kind::Nfc, "", ""});
  } else if (type == "Prepend") {
    p.normalizer.push_back({NormalizerStep::Kind::Prepend, r.text(j, "prepend", where), ""});
  } else if (type == "Replace") {
    const std::string from = r.string_pattern(j, where);
    if (from.empty()) r.fail(where, "replaces an empty string");
    p.normalizer.push_back({NormalizerStep::Kind::Replace, from, r.text(j, "content", where)});
  } else {
    r.fail(where, fmt::format("normalizer type '{}' is not one zinf carries out (it does NFC, Prepend and Replace "
                              "of a string, alone or in a Sequence)",
                              type));
  }
}

void read_pre_tokenizer(const Reader& r, const json& j, const std::string& where, TokenizerPipeline& p) {
  if (j.is_null()) return;
  const std::string type = r.type(j, where);
  PreTokenizerStep s{};
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      r.fail(where, "a Sequence needs a 'pretokenizers' list");
    for (size_t i = 0; i < j["pretokenizers"].size(); ++i)
      read_pre_tokenizer(r, j["pretokenizers"][i], fmt::format("{}.pretokenizers[{}]", where, i), p);
    return;
  }
  if (type == "Split") {
    s.kind = PreTokenizerStep::Kind::Split;
    if (!j.contains("pattern") || !j["pattern"].is_object() || !j["pattern"].contains("Regex") ||
        !j["pattern"]["Regex"].is_string())
      r.fail(where, "a Split needs a {\"Regex\": ...} pattern (zinf splits by the known model families' patterns)");
    const std::string regex = j["pattern"]["Regex"].get<std::string>();
    const auto known = known_split_pattern(regex);
    if (!known)
      r.fail(where,
             fmt::format("the Split pattern '{}' is not one zinf has a splitter for (it knows GPT-2's, Llama 3's and "
                         "Qwen2's exactly, and runs no general regex engine)",
                         regex));
    s.pattern = *known;
    const std::string behavior =
        j.contains("behavior") && j["behavior"].is_string() ? j["behavior"].get<std::string>() : "";
    if (behavior != "Isolated" && behavior != "Removed")
      r.fail(where, fmt::format("Split behavior {} is not Isolated or Removed", j.value("behavior", json()).dump()));
    s.remove_matches = behavior == "Removed";
    if (r.flag(j, "invert", false, where)) r.fail(where, "an inverted Split is not one zinf carries out");
  } else if (type == "ByteLevel") {
    s.kind = PreTokenizerStep::Kind::ByteLevel;
    s.add_prefix_space = r.flag(j, "add_prefix_space", true, where);
    s.use_regex = r.flag(j, "use_regex", true, where);
  } else if (type == "Digits") {
    s.kind = PreTokenizerStep::Kind::Digits;
    s.individual_digits = r.flag(j, "individual_digits", false, where);
  } else if (type == "Metaspace") {
    s.kind = PreTokenizerStep::Kind::Metaspace;
    s.marker = r.text(j, "replacement", where);
    s.split = r.flag(j, "split", true, where);
    const std::string scheme = j.contains("prepend_scheme") && j["prepend_scheme"].is_string()
                                   ? j["prepend_scheme"].get<std::string>()
                                   : (r.flag(j, "add_prefix_space", true, where) ? "always" : "never");
    if (scheme == "always")
      s.prepend = PreTokenizerStep::Prepend::Always;
    else if (scheme == "first")
      s.prepend = PreTokenizerStep::Prepend::First;
    else if (scheme == "never")
      s.prepend = PreTokenizerStep::Prepend::Never;
    else
      r.fail(where, fmt::format("prepend_scheme '{}' is not always, first or never", scheme));
  } else {
    r.fail(where,
           fmt::format("pre-tokenizer type '{}' is not one zinf carries out (it does ByteLevel, Split by a known "
                       "pattern, Digits and Metaspace, alone or in a Sequence)",
                       type));
  }
  p.pre_tokenizer.push_back(std::move(s));
}

void read_added_tokens(const Reader& r, const json& j, TokenizerPipeline& p, int64_t max_id) {
  if (j.is_null()) return;
  if (!j.is_array()) r.fail("added_tokens", "not a list");
  for (size_t i = 0; i < j.size(); ++i) {
    const json& t = j[i];
    const std::string where = fmt::format("added_tokens[{}]", i);
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_unsigned() ||
        t["id"].get<uint64_t>() >= uint64_t(max_id))
      r.fail(where, fmt::format("needs an 'id' from 0 to {}, the most its vocabulary's entries may use (it has {})",
                                max_id - 1, t.is_object() ? t.value("id", json()).dump() : t.dump()));
    AddedToken a{r.text(t, "content", where), t["id"].get<int32_t>(), r.flag(t, "normalized", false, where)};
    if (a.content.empty()) r.fail(where, "its content is empty");
    for (const char* key : {"single_word", "lstrip", "rstrip"})
      if (r.flag(t, key, false, where))
        r.fail(where,
               fmt::format("'{}' ({}) is true; zinf matches added tokens as written only, which the Llama, Qwen2, "
                           "GPT-NeoX and GPT-2 families use",
                           a.content, key));
    p.added.push_back(std::move(a));
  }
}

// The template's special tokens before and after the sequence; a pair template is not used.
void read_post_processor(const Reader& r, const json& j, const std::string& where, TokenizerPipeline& p,
                         int64_t max_id) {
  if (j.is_null()) return;
  const std::string type = r.type(j, where);
  if (type == "ByteLevel") return;  // it moves offsets only
  if (type == "Sequence") {
    if (!j.contains("processors") || !j["processors"].is_array()) r.fail(where, "a Sequence needs a 'processors' list");
    for (size_t i = 0; i < j["processors"].size(); ++i)
      read_post_processor(r, j["processors"][i], fmt::format("{}.processors[{}]", where, i), p, max_id);
    return;
  }
  if (type != "TemplateProcessing")
    r.fail(where, fmt::format("post-processor type '{}' is not one zinf carries out (it does TemplateProcessing and "
                              "ByteLevel)",
                              type));
  if (p.has_template) r.fail(where, "a second TemplateProcessing");
  p.has_template = true;
  if (!j.contains("single") || !j["single"].is_array()) r.fail(where, "no 'single' template");
  bool seen_sequence = false;
  for (const json& piece : j["single"]) {
    if (piece.contains("Sequence")) {
      if (seen_sequence) r.fail(where, "the single template holds the sequence twice");
      seen_sequence = true;
      continue;
    }
    if (!piece.contains("SpecialToken") || !piece["SpecialToken"].contains("id") ||
        !piece["SpecialToken"]["id"].is_string())
      r.fail(where, fmt::format("template piece {} is neither a Sequence nor a SpecialToken", piece.dump()));
    const std::string name = piece["SpecialToken"]["id"].get<std::string>();
    const json* st =
        j.contains("special_tokens") && j["special_tokens"].contains(name) ? &j["special_tokens"][name] : nullptr;
    if (!st || !st->contains("ids") || !(*st)["ids"].is_array())
      r.fail(where, fmt::format("the template names special token '{}' without its ids in special_tokens", name));
    for (const json& id : (*st)["ids"]) {
      if (!id.is_number_unsigned() || id.get<uint64_t>() >= uint64_t(max_id))
        r.fail(where, fmt::format("special token '{}' has id {}, not one from 0 to {}", name, id.dump(), max_id - 1));
      (seen_sequence ? p.suffix : p.prefix).push_back(id.get<int32_t>());
    }
  }
  if (!seen_sequence) r.fail(where, "the single template has no Sequence");
}

void read_decoder(const Reader& r, const json& j, const std::string& where, TokenizerPipeline& p) {
  const std::string type = r.type(j, where);
  DecoderStep s{};
  if (type == "Sequence") {
    if (!j.contains("decoders") || !j["decoders"].is_array()) r.fail(where, "a Sequence needs a 'decoders' list");
    for (size_t i = 0; i < j["decoders"].size(); ++i)
      read_decoder(r, j["decoders"][i], fmt::format("{}.decoders[{}]", where, i), p);
    return;
  }
  if (type == "ByteLevel") {
    s.kind = DecoderStep::Kind::ByteLevel;
  } else if (type == "Replace") {
    s.kind = DecoderStep::Kind::Replace;
    s.text = r.string_pattern(j, where);
    s.with = r.text(j, "content", where);
    if (s.text.empty()) r.fail(where, "replaces an empty string");
  } else if (type == "ByteFallback") {
    s.kind = DecoderStep::Kind::ByteFallback;
  } else if (type == "Fuse") {
    s.kind = DecoderStep::Kind::Fuse;
  } else if (type == "Strip") {
    s.kind = DecoderStep::Kind::Strip;
    s.text = r.text(j, "content", where);
    s.start = r.count(j, "start", where);
    s.stop = r.count(j, "stop", where);
  } else if (type == "Metaspace") {
    s.kind = DecoderStep::Kind::Metaspace;
    s.text = r.text(j, "replacement", where);
    const std::string scheme = j.contains("prepend_scheme") && j["prepend_scheme"].is_string()
                                   ? j["prepend_scheme"].get<std::string>()
                                   : (r.flag(j, "add_prefix_space", true, where) ? "always" : "never");
    s.first_token_marks = scheme != "never";
  } else {
    r.fail(where,
           fmt::format("decoder type '{}' is not one zinf carries out (it does ByteLevel, Replace, ByteFallback, "
                       "Fuse, Strip and Metaspace)",
                       type));
  }
  if (s.kind == DecoderStep::Kind::ByteLevel && !p.decoder.empty()) r.fail(where, "ByteLevel decodes only alone");
  p.decoder.push_back(std::move(s));
}

}  // namespace

TokenizerPipeline gpt2_pipeline() {
  TokenizerPipeline p;
  PreTokenizerStep s{};
  s.kind = PreTokenizerStep::Kind::ByteLevel;
  p.pre_tokenizer.push_back(s);
  p.decoder.push_back({DecoderStep::Kind::ByteLevel, "", "", 0, 0, true});
  p.description = "byte-level BPE, GPT-2 split";
  return p;
}

TokenizerPipeline read_pipeline(const nlohmann::json& j, const std::string& source, int64_t max_id) {
  const Reader r{source};
  // A tokenizer.json that holds its model alone is read as GPT-2's, which zinf always did.
  TokenizerPipeline p = j.contains("pre_tokenizer") ? TokenizerPipeline{} : gpt2_pipeline();
  if (j.contains("pre_tokenizer")) {
    p.decoder.clear();
    read_pre_tokenizer(r, j["pre_tokenizer"], "pre_tokenizer", p);
  }
  if (j.contains("normalizer")) read_normalizer(r, j["normalizer"], "normalizer", p);
  if (j.contains("added_tokens")) read_added_tokens(r, j["added_tokens"], p, max_id);
  if (j.contains("post_processor")) read_post_processor(r, j["post_processor"], "post_processor", p, max_id);
  if (j.contains("pre_tokenizer")) {
    p.has_decoder = j.contains("decoder") && !j["decoder"].is_null();
    if (p.has_decoder) read_decoder(r, j["decoder"], "decoder", p);
  }
  // The vocabulary's alphabet follows the pre-tokenizer: bytes as GPT-2's characters after a
  // ByteLevel step, the text itself otherwise; the decoder must read the same alphabet back.
  p.byte_level = false;
  std::string split;
  for (const auto& s : p.pre_tokenizer) {
    if (s.kind == PreTokenizerStep::Kind::ByteLevel) {
      p.byte_level = true;
      if (s.use_regex) split = "GPT-2";
    }
    if (s.kind == PreTokenizerStep::Kind::Split) split = pattern_name(s.pattern);
    if (s.kind == PreTokenizerStep::Kind::Metaspace) split = "Metaspace";
  }
  const bool byte_decoder = !p.decoder.empty() && p.decoder.front().kind == DecoderStep::Kind::ByteLevel;
  if (p.has_decoder && byte_decoder != p.byte_level)
    r.fail("decoder", p.byte_level ? "the pre-tokenizer is byte-level but the decoder is not ByteLevel"
                                   : "the decoder is ByteLevel but the pre-tokenizer has no ByteLevel step");
  p.description = fmt::format("{} BPE{}{}", p.byte_level ? "byte-level" : "text",
                              split.empty() ? "" : ", " + split + " split", p.normalizer.empty() ? "" : ", normalized");
  return p;
}

}  // namespace zinf::engine
