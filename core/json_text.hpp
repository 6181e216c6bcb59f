// A string as a JSON string literal (quotes, backslashes and control characters escaped), for the
// hand-written JSON of Program dumps and Chrome traces, which must stay byte-deterministic.
#pragma once
#include <cstdio>
#include <string>

namespace zinf::core {

inline std::string json_quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace zinf::core
