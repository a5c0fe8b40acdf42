// accrun/json.hpp — writing JSON strings, shared by the JSON that accrun
// prints (--detect --json, --dry-run --json).
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace accrun {

// Appends `s` to `out` as a JSON string literal, quotes included.
inline void append_json_string(std::string& out, std::string_view s) {
  auto needs_escape = [](char c) { return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20; };
  out += '"';
  // Almost every string needs no escaping: copy it whole.
  bool plain = true;
  for (char c : s) plain &= !needs_escape(c);
  if (plain) {
    out += s;
    out += '"';
    return;
  }
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

}  // namespace accrun
