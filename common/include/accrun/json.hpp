// accrun/json.hpp — the JSON accrun reads and writes (--detect --json, the
// agents' inventories, --dry-run --json), through nlohmann-json.  accrun
// writes its JSON on one line with ", " between members and ": " after keys
// (docs/design.md §9 shows it so, and tests match it).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace accrun {

// Members keep the order they were added in, as §9 lists them.
using Json = nlohmann::ordered_json;

// Appends `s` to `out` as a JSON string literal, quotes included.  Bytes
// that are not UTF-8 are written as U+FFFD.  Never throws.
inline void append_json_string(std::string& out, std::string_view s) {
  auto needs_escape = [](char c) {
    return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x80;
  };
  // Almost every string (host names, ids, variables) needs no escaping:
  // copy it whole, which keeps a 80,000-rank --dry-run --json fast.
  bool plain = true;
  for (char c : s) plain &= !needs_escape(c);
  if (plain) {
    out += '"';
    out += s;
    out += '"';
    return;
  }
  out += Json(std::string(s)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Appends `j` to `out` on one line in accrun's layout.  Never throws.
inline void append_json(std::string& out, const Json& j) {
  switch (j.type()) {
    case Json::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [key, value] : j.items()) {
        if (!first) out += ", ";
        first = false;
        append_json_string(out, key);
        out += ": ";
        append_json(out, value);
      }
      out += '}';
      return;
    }
    case Json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& value : j) {
        if (!first) out += ", ";
        first = false;
        append_json(out, value);
      }
      out += ']';
      return;
    }
    case Json::value_t::string:
      append_json_string(out, j.get_ref<const std::string&>());
      return;
    default:
      out += j.dump(-1, ' ', false, Json::error_handler_t::replace);
      return;
  }
}

}  // namespace accrun
