// accrun/strings.hpp — ASCII case folding for names (resources, types,
// hosts, keys) that accrun matches case-insensitively.
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace accrun {

inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

inline std::string ascii_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace accrun
