// The DeepSpeed reader's passes, in the order DeepSpeed and the HF Trainer apply them: Hugging
// Face's "auto" (HfTrainerDeepSpeedConfig) first, then DeepSpeed's validation of its pydantic
// sections (DeepSpeedConfigModel: unknown keys refused, an "auto" at a section's top level dropped
// for the default), then the meaning of each section (deepspeed_sections.cpp), then the ledger
// that accounts for every key of the file.
#include "formats/deepspeed_config.hpp"

#include <fmt/format.h>

#include <cmath>
#include <set>

#include "formats/deepspeed_reader.hpp"
#include "core/errors.hpp"
#include "formats/hjson.hpp"
#include "core/json_text.hpp"

namespace zinf::core {

const char* to_string(KeyFate f) {
  switch (f) {
    case KeyFate::Mapped: return "mapped";
    case KeyFate::Derived: return "derived";
    case KeyFate::Defaulted: return "defaulted";
    case KeyFate::Auto: return "auto";
    case KeyFate::Ignored: return "ignored";
    case KeyFate::NoEffect: return "no_effect";
    case KeyFate::NotRead: return "not_read";
  }
  return "?";
}

namespace deepspeed {

bool truthy(const json& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get<std::string>().empty();
  return !v.empty();
}

std::string shown(const json& v) {
  std::string s = v.is_string() ? v.get<std::string>() : v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 64) s = s.substr(0, 64) + "...";
  return s;
}

Reader::Reader(json root, std::string file, const DeepSpeedContext& ctx)
    : root_(std::move(root)), file_(std::move(file)), ctx_(ctx) {}

void Reader::note(const std::string& path, KeyFate fate, const std::string& value, const std::string& reason) {
  if (!at(path) && !notes_.count(path)) defaulted_order_.push_back(path);
  notes_[path] = KeyNote{path, fate, value, reason};
}

void Reader::refuse(const std::string& path, const std::string& why) const {
  throw ConfigError(file_, path, fmt::format("DeepSpeed {} refuses this file: {}", kDeepSpeedVersion, why));
}

void Reader::unsupported(const std::string& path, const std::string& why) const {
  throw ConfigError(file_, path, fmt::format("DeepSpeed runs this, zinf cannot plan it: {}", why));
}

const json* Reader::member(const json* obj, const std::string& key) {
  if (!obj || !obj->is_object()) return nullptr;
  auto it = obj->find(key);
  return it == obj->end() ? nullptr : &*it;
}

const json* Reader::at(const std::string& path) const {
  const json* cur = &root_;
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    cur = member(cur, path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos));
    if (!cur || dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

const json* Reader::section(const std::string& key) const {
  const json* s = member(&root_, key);
  return s && s->is_object() ? s : nullptr;
}

const json* Reader::field(const json* obj, const std::string& path, const std::string& name, const std::string& alias) {
  for (const std::string& k : {name, alias}) {
    if (k.empty()) continue;
    const json* v = member(obj, k);
    if (!v) continue;
    if (v->is_null()) return nullptr;
    for (const auto& d : dropped_autos_)
      if (d == path + "." + k) return nullptr;
    return v;
  }
  return nullptr;
}

bool Reader::model_bool(const json& v) const {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0.0;
  std::string s = v.get<std::string>();
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s == "1" || s == "on" || s == "t" || s == "true" || s == "y" || s == "yes";
}

double Reader::number(const json& v) const {
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
  if (v.is_string()) return std::stod(v.get<std::string>());
  return v.get<double>();
}

namespace {

bool pydantic_bool_text(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  static const std::set<std::string> words = {"0", "off", "f", "false", "n", "no", "1", "on", "t", "true", "y", "yes"};
  return words.count(s) > 0;
}

std::optional<double> pydantic_number(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return d;
  }
  return std::nullopt;
}

}  // namespace

void Reader::check_value(json& v, const std::string& path, const FieldSpec& f) {
  auto bad = [&](const std::string& expected) {
    refuse(path, fmt::format("'{}' is not valid for this field: pydantic expects {}", shown(v), expected));
  };
  switch (f.check) {
    case Check::Any:
    case Check::Dict: return;
    case Check::Bool:
      if (v.is_boolean()) return;
      if (v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1)) {
        v = v.get<int64_t>() == 1;
        return;
      }
      if (v.is_string() && pydantic_bool_text(v.get<std::string>())) {
        v = model_bool(v);
        return;
      }
      bad("a boolean");
      return;
    case Check::Int:
    case Check::NonNegInt: {
      const auto d = v.is_boolean() ? std::nullopt : pydantic_number(v);
      if (!d || std::floor(*d) != *d || std::fabs(*d) > 9.2e18) bad("an integer");
      if (f.check == Check::NonNegInt && *d < 0) bad("an integer of at least 0");
      v = static_cast<int64_t>(*d);
      return;
    }
    case Check::Number:
    case Check::Fraction: {
      const auto d = v.is_boolean() ? std::nullopt : pydantic_number(v);
      if (!d || std::isnan(*d)) bad("a number");
      if (f.check == Check::Fraction && (*d < 0 || *d > 1)) bad("a number from 0 to 1");
      if (!v.is_number()) v = *d;
      return;
    }
    case Check::Str:
      if (!v.is_string()) bad("a string");
      return;
    case Check::OptStr:
      if (!v.is_string() && !v.is_null()) bad("a string");
      return;
    case Check::OffloadDevice:
      if (v.is_string() && (v == "none" || v == "cpu" || v == "nvme")) return;
      bad("'none', 'cpu' or 'nvme'");
      return;
    case Check::ZeroStage:
      if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= 3) return;
      if (v.is_number_float() && (v == 0.0 || v == 1.0 || v == 2.0 || v == 3.0)) return;
      bad("0, 1, 2 or 3");
      return;
    case Check::Model:
      if (v.is_null()) return;
      if (!v.is_object()) bad("a mapping of keys");
      validate_model(v, path, *f.fields, false);
      return;
  }
}

void Reader::validate_model(json& obj, const std::string& path, const std::vector<FieldSpec>& fields, bool top) {
  std::set<std::string> given;
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string key = it.key(), kpath = path + "." + key;
    const FieldSpec* f = find_field(fields, key);
    if (!f)
      refuse(kpath, fmt::format("'{}' is not a field of {} (pydantic: extra inputs are not permitted); check its "
                                "spelling",
                                key, path));
    if (!given.insert(f->name).second)
      refuse(kpath, fmt::format("'{}' and '{}' name the same field; give one", f->name, f->alias));
    // DeepSpeedConfigModel drops "auto" values of the fields of the model it is built from.
    if (top && it.value().is_string() && it.value() == "auto") {
      dropped_autos_.push_back(kpath);
      continue;
    }
    check_value(it.value(), kpath, *f);
  }
}

void Reader::validate() {
  for (const auto& f : top_level_fields()) {
    const json* v = member(&root_, f.name);
    if (!v || f.check != Check::Model) continue;
    if (f.name == "zero_optimization" && zero_legacy_bool_) continue;
    if (v->is_null()) continue;
    if (!v->is_object()) refuse(f.name, "must be a mapping of keys");
    json& section = root_[f.name];
    const bool monitor = f.name == "tensorboard" || f.name == "wandb" || f.name == "csv_monitor" || f.name == "comet";
    validate_model(section, f.name, *f.fields, !monitor);
  }
}

namespace {

// Every key of the file, in file order, with what became of it: the note the reader made, else
// what the schema says DeepSpeed does with the key, else "not read".
void walk(const Reader& r, const json& obj, const std::string& prefix, const std::vector<FieldSpec>* fields,
          bool model, std::vector<KeyNote>& out) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
    const FieldSpec* f = fields ? find_field(*fields, it.key()) : nullptr;
    auto explicit_note = r.notes_.find(path);
    if (explicit_note != r.notes_.end()) {
      out.push_back(explicit_note->second);
    } else if (f && f->fate == KeyFate::Ignored && !f->same_when.empty() && !it.value().is_object() &&
               truthy(it.value()) == (f->same_when == "true")) {
      out.push_back({path, KeyFate::NoEffect, shown(it.value()), "what zinf does too"});
    } else if (f) {
      out.push_back({path, f->fate, shown(it.value()), f->reason});
    } else if (fields) {
      out.push_back({path, model ? KeyFate::Mapped : KeyFate::NotRead, shown(it.value()),
                     model ? "" : fmt::format("DeepSpeed {} does not read this key: it has no effect", kDeepSpeedVersion)});
    } else {
      continue;  // inside a value DeepSpeed takes whole (optimizer params, scheduler, ...): noted by its parent
    }
    if (f && f->fields && it.value().is_object())
      walk(r, it.value(), path, f->fields, f->check == Check::Model, out);
  }
}

}  // namespace

DeepSpeedReading Reader::run() {
  check_autotuner();
  resolve_hf_autos();
  // "zero_optimization": true|false, DeepSpeed's oldest form: stage 1 or 0.
  if (const json* z = member(&root_, "zero_optimization"); z && z->is_boolean()) zero_legacy_bool_ = true;
  // DeepSpeedConfig validates its sections, then checks the batch; the engine then builds the optimizer.
  validate();
  read_zero();  // and the precision, which needs the stage
  read_aio();
  read_activation_checkpointing();
  read_tensor_parallel();
  read_expert_parallel();
  read_other_sections();
  read_batch();
  read_optimizer();

  c_.deepspeed_keys = true;
  c_.vocabulary_tiles = 1;  // DeepSpeed tiles neither the embedding nor the LM head
  out_.config = c_;
  walk(*this, root_, "", &top_level_fields(), false, out_.notes);
  for (const auto& path : defaulted_order_) out_.notes.push_back(notes_.at(path));
  for (const auto& d : dropped_autos_)
    out_.notes.push_back({d, KeyFate::Defaulted, "auto",
                          "DeepSpeed drops an \"auto\" the HF Trainer does not fill, and uses its default"});

  // The user's lines: what "auto" became, then what DeepSpeed does that they may not expect.
  if (!autos_.empty()) {
    std::string line = "HF \"auto\" values resolved as the Hugging Face Trainer resolves them, from zinf's inputs:";
    for (size_t i = 0; i < autos_.size(); ++i)
      line += fmt::format("{} {} = {}", i ? ";" : "", autos_[i].first, autos_[i].second);
    out_.messages.push_back(line);
  }
  if (!dropped_autos_.empty())
    out_.messages.push_back(fmt::format("\"auto\" that only DeepSpeed reads takes DeepSpeed's default: {}",
                                        fmt::join(dropped_autos_, ", ")));
  for (const auto& m : messages_) out_.messages.push_back(m);
  std::vector<std::string> ignored, not_read;
  for (const auto& n : out_.notes) {
    if (n.fate == KeyFate::Ignored) ignored.push_back(fmt::format("'{}' ({})", n.key, n.reason));
    if (n.fate == KeyFate::NotRead) not_read.push_back(fmt::format("'{}'", n.key));
  }
  if (!ignored.empty())
    out_.messages.push_back(fmt::format("read but not honoured by zinf (the plan may differ from DeepSpeed's run): {}",
                                        fmt::join(ignored, "; ")));
  if (!not_read.empty())
    out_.messages.push_back(fmt::format("DeepSpeed {} does not read these keys, so they have no effect (check the "
                                        "spelling): {}",
                                        kDeepSpeedVersion, fmt::join(not_read, ", ")));
  return std::move(out_);
}

}  // namespace deepspeed

DeepSpeedReading read_deepspeed_config(const std::string& text, const std::string& name, const DeepSpeedContext& ctx) {
  nlohmann::ordered_json root = parse_hjson(text, name);
  if (!root.is_object())
    throw ConfigError(name, "", fmt::format("DeepSpeed {} refuses this file: expected an object of keys at the top level",
                                            kDeepSpeedVersion));
  deepspeed::Reader r(std::move(root), name, ctx);
  return r.run();
}

std::string notes_json(const std::vector<KeyNote>& notes) {
  std::string out = "[";
  for (size_t i = 0; i < notes.size(); ++i) {
    const auto& n = notes[i];
    out += fmt::format("{}\n    {{\"key\": {}, \"fate\": \"{}\", \"value\": {}, \"reason\": {}}}", i ? "," : "",
                       json_quoted(n.key), to_string(n.fate), json_quoted(n.value), json_quoted(n.reason));
  }
  return out + (notes.empty() ? "]" : "\n  ]");
}

}  // namespace zinf::core
