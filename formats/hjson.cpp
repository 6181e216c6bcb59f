#include "formats/hjson.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <set>
#include <vector>

#include "core/errors.hpp"

namespace zinf::core {

namespace {

using nlohmann::ordered_json;

// Deeper nesting than any config has; bounds the recursion on hostile input.
constexpr int kMaxDepth = 64;

class HjsonParser {
public:
  HjsonParser(const std::string& text, const std::string& name) : s_(text), name_(name) {}

  ordered_json document() {
    skip();
    ordered_json root;
    if (at_end()) fail("empty file; DeepSpeed expects an object of keys");
    if (peek() == '{' || peek() == '[') {
      root = value(0);
    } else {
      // A root object without braces, as Hjson allows; else a single value.
      const size_t start = i_;
      try {
        root = members(0, /*braced=*/false);
      } catch (const ConfigError&) {
        i_ = start;
        path_.clear();
        root = value(0);
      }
    }
    skip();
    if (!at_end()) fail(fmt::format("unexpected '{}' after the end of the document", shown_char(peek())));
    return root;
  }

private:
  bool at_end() const { return i_ >= s_.size(); }
  char peek(size_t ahead = 0) const { return i_ + ahead < s_.size() ? s_[i_ + ahead] : '\0'; }

  [[noreturn]] void fail(const std::string& what) const { fail_at(i_, what); }
  // The dotted path of the value being read ("" at the top), for the error's key.
  std::string path() const {
    std::string out;
    for (const auto& p : path_) out += (out.empty() ? "" : ".") + p;
    return out;
  }
  [[noreturn]] void fail_at(size_t pos, const std::string& what) const {
    const auto [line, col] = line_col(pos);
    throw ConfigError(name_, path(), fmt::format("not valid Hjson/JSON (line {}, column {}): {}", line, col, what));
  }
  std::pair<size_t, size_t> line_col(size_t pos) const {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < pos && k < s_.size(); ++k) {
      if (s_[k] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return {line, col};
  }
  static std::string shown_char(char c) {
    if (static_cast<unsigned char>(c) < 0x20) return fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    return std::string(1, c);
  }

  // Skips whitespace and the three kinds of comment.
  void skip() {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++i_;
      } else if (c == '#' || (c == '/' && peek(1) == '/')) {
        while (!at_end() && peek() != '\n') ++i_;
      } else if (c == '/' && peek(1) == '*') {
        const size_t start = i_;
        i_ += 2;
        while (!at_end() && !(peek() == '*' && peek(1) == '/')) ++i_;
        if (at_end()) fail_at(start, "a /* comment is never closed");
        i_ += 2;
      } else {
        return;
      }
    }
  }

  ordered_json value(int depth) {
    if (depth > kMaxDepth) fail(fmt::format("nested deeper than {} levels", kMaxDepth));
    skip();
    if (at_end()) fail("end of input where a value was expected");
    const char c = peek();
    if (c == '{') {
      ++i_;
      return members(depth + 1, /*braced=*/true);
    }
    if (c == '[') {
      ++i_;
      return elements(depth + 1);
    }
    if (c == '"') return quoted('"');
    if (c == '\'') {
      if (peek(1) == '\'' && peek(2) == '\'') return multiline();
      return quoted('\'');
    }
    return quoteless();
  }

  ordered_json members(int depth, bool braced) {
    ordered_json obj = ordered_json::object();
    std::set<std::string> seen;
    skip();
    if (braced && peek() == '}') {
      ++i_;
      return obj;
    }
    while (true) {
      skip();
      if (at_end()) {
        if (braced) fail("end of input inside an object; a '}' is missing");
        break;
      }
      const size_t key_at = i_;
      std::string key = key_name();
      skip();
      if (peek() != ':') fail("expecting ':' after the key");
      ++i_;
      path_.push_back(key);
      ordered_json v = value(depth);
      if (!seen.insert(key).second) {
        const auto [line, col] = line_col(key_at);
        throw ConfigError(name_, path(),
                          fmt::format("appears twice in one object (line {}, column {}; DeepSpeed: \"Duplicate keys in "
                                      "DeepSpeed config\"); give each key once",
                                      line, col));
      }
      path_.pop_back();
      obj[key] = std::move(v);
      skip();
      if (peek() == ',') {
        ++i_;
        skip();
      }
      if (braced && peek() == '}') {
        ++i_;
        break;
      }
      if (!braced && at_end()) break;
    }
    return obj;
  }

  ordered_json elements(int depth) {
    ordered_json arr = ordered_json::array();
    skip();
    if (peek() == ']') {
      ++i_;
      return arr;
    }
    while (true) {
      skip();
      if (at_end()) fail("end of input inside a list; a ']' is missing");
      path_.push_back(std::to_string(arr.size()));
      arr.push_back(value(depth));
      path_.pop_back();
      skip();
      if (peek() == ',') {
        ++i_;
        skip();
      }
      if (peek() == ']') {
        ++i_;
        break;
      }
    }
    return arr;
  }

  std::string key_name() {
    const char c = peek();
    if (c == '"' || c == '\'') return quoted(c).get<std::string>();
    const size_t begin = i_;
    size_t space = std::string::npos;
    while (true) {
      if (at_end()) fail_at(begin, "end of input inside a key name");
      const char k = peek();
      if (k == ':') {
        if (i_ == begin) fail("':' without a key name before it (quote an empty key)");
        return s_.substr(begin, (space == std::string::npos ? i_ : space) - begin);
      }
      if (k == ' ' || k == '\t' || k == '\r' || k == '\n') {
        if (space == std::string::npos) space = i_;
      } else {
        if (space != std::string::npos) fail_at(space, "whitespace inside a key name (quote the key)");
        if (k == '{' || k == '}' || k == '[' || k == ']' || k == ',')
          fail(fmt::format("'{}' where a key name was expected (check the syntax, or quote the key)", k));
      }
      ++i_;
    }
  }

  ordered_json quoted(char quote) {
    const size_t start = i_;
    ++i_;
    std::string out;
    while (true) {
      if (at_end()) fail_at(start, "a string is never closed");
      const char c = s_[i_++];
      if (c == quote) break;
      if (c == '\n' || c == '\r') fail_at(start, "a string runs past the end of its line");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_end()) fail_at(start, "a string is never closed");
      const char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\'': out += '\''; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': append_utf8(out, hex4()); break;
        default: fail_at(i_ - 1, fmt::format("invalid escape '\\{}' in a string", shown_char(e)));
      }
    }
    return out;
  }

  unsigned hex4() {
    if (i_ + 4 > s_.size()) fail("a \\u escape needs four hex digits");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[i_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= unsigned(h - '0');
      else if (h >= 'a' && h <= 'f') v |= unsigned(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= unsigned(h - 'A' + 10);
      else fail_at(i_ - 1, "a \\u escape needs four hex digits");
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  // '''...''': the lines after the opening quotes, each losing the indentation of the opening
  // quotes' column, the last newline dropped.
  ordered_json multiline() {
    size_t line_start = s_.rfind('\n', i_ == 0 ? 0 : i_ - 1);
    const size_t indent = line_start == std::string::npos ? i_ : i_ - line_start - 1;
    const size_t start = i_;
    i_ += 3;
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\r')) ++i_;
    if (peek() == '\n') ++i_;
    std::string out;
    size_t col = 0;
    while (true) {
      if (at_end()) fail_at(start, "a ''' string is never closed");
      if (peek() == '\'' && peek(1) == '\'' && peek(2) == '\'') {
        i_ += 3;
        if (!out.empty() && out.back() == '\n') out.pop_back();
        if (!out.empty() && out.back() == '\r') out.pop_back();
        return out;
      }
      const char c = s_[i_++];
      if (c == '\n') {
        out += c;
        col = 0;
      } else if ((c == ' ' || c == '\t') && col < indent) {
        ++col;
      } else {
        out += c;
        col = indent;
      }
    }
  }

  // A value without quotes: true, false, null or a number when that is all there is before the
  // next ',', '}', ']' or comment; otherwise a string running to the end of its line.
  ordered_json quoteless() {
    const size_t begin = i_;
    const char first = peek();
    if (first == '{' || first == '}' || first == '[' || first == ']' || first == ',' || first == ':')
      fail(fmt::format("'{}' where a value was expected (check the syntax)", first));
    while (true) {
      const char c = peek();
      const bool eol = at_end() || c == '\n' || c == '\r';
      if (eol || c == ',' || c == '}' || c == ']' || c == '#' || (c == '/' && (peek(1) == '/' || peek(1) == '*'))) {
        const std::string text = trimmed(s_.substr(begin, i_ - begin));
        if (text == "null") return nullptr;
        if (text == "true") return true;
        if (text == "false") return false;
        if (auto n = number(text)) return *n;
        if (eol) return text;
      }
      ++i_;
    }
  }

  static std::string trimmed(const std::string& t) {
    const size_t a = t.find_first_not_of(" \t");
    if (a == std::string::npos) return "";
    return t.substr(a, t.find_last_not_of(" \t") - a + 1);
  }

  // A JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  static std::optional<ordered_json> number(const std::string& t) {
    size_t k = 0;
    auto digits = [&] {
      const size_t from = k;
      while (k < t.size() && t[k] >= '0' && t[k] <= '9') ++k;
      return k > from;
    };
    if (k < t.size() && t[k] == '-') ++k;
    if (k < t.size() && t[k] == '0') ++k;
    else if (!digits()) return std::nullopt;
    bool integral = true;
    if (k < t.size() && t[k] == '.') {
      ++k;
      if (!digits()) return std::nullopt;
      integral = false;
    }
    if (k < t.size() && (t[k] == 'e' || t[k] == 'E')) {
      ++k;
      if (k < t.size() && (t[k] == '+' || t[k] == '-')) ++k;
      if (!digits()) return std::nullopt;
      integral = false;
    }
    if (k != t.size()) return std::nullopt;
    if (integral) {
      errno = 0;
      char* end = nullptr;
      const long long v = std::strtoll(t.c_str(), &end, 10);
      if (errno == 0) return ordered_json(static_cast<int64_t>(v));
    }
    return ordered_json(std::strtod(t.c_str(), nullptr));
  }

  const std::string& s_;
  const std::string& name_;
  size_t i_ = 0;
  std::vector<std::string> path_;  // keys (and list indices) down to the value being read
};

}  // namespace

// The offset of the first byte that is not part of well-formed UTF-8 (RFC 3629's table: no
// overlong forms, no surrogates, nothing past U+10FFFF), or npos.
size_t invalid_utf8_at(const std::string& s) {
  auto byte = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
  size_t i = 0;
  while (i < s.size()) {
    const unsigned c = byte(i);
    unsigned lo = 0x80, hi = 0xBF;  // the second byte's range
    size_t n = 0;                   // continuation bytes
    if (c < 0x80) n = 0;
    else if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c == 0xE0) n = 2, lo = 0xA0;
    else if (c == 0xED) n = 2, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) n = 2;
    else if (c == 0xF0) n = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) n = 3;
    else if (c == 0xF4) n = 3, hi = 0x8F;
    else return i;
    for (size_t k = 1; k <= n; ++k) {
      const unsigned b = byte(i + k);
      if (i + k >= s.size() || b < (k == 1 ? lo : 0x80u) || b > (k == 1 ? hi : 0xBFu)) return i;
    }
    i += n + 1;
  }
  return std::string::npos;
}

namespace {

// A number past a double's range (1e400) reads as infinity: every reader of the tree would take it
// for a value (an lr of inf) or, once the tree is written out as JSON, for null and so for its
// default. It is refused here, naming its key, before any reader sees it.
void refuse_non_finite(const ordered_json& v, const std::string& path, const std::string& name) {
  if (v.is_number_float() && !std::isfinite(v.get<double>()))
    throw ConfigError(name, path, "a number beyond a double's range (it reads as infinity); give a finite value");
  if (v.is_object())
    for (auto it = v.begin(); it != v.end(); ++it)
      refuse_non_finite(it.value(), path.empty() ? it.key() : path + "." + it.key(), name);
  if (v.is_array())
    for (size_t i = 0; i < v.size(); ++i) refuse_non_finite(v[i], fmt::format("{}[{}]", path, i), name);
}

}  // namespace

nlohmann::ordered_json parse_hjson(const std::string& text, const std::string& name) {
  // Python reads the file as UTF-8 before Hjson sees it, and refuses it otherwise.
  if (const size_t bad = invalid_utf8_at(text); bad != std::string::npos)
    throw ConfigError(name, "", fmt::format("not UTF-8 text (byte {} of the file); DeepSpeed reads its config as UTF-8",
                                            bad));
  ordered_json root = HjsonParser(text, name).document();
  refuse_non_finite(root, "", name);
  return root;
}

}  // namespace zinf::core
