#include "accrun/quantity.hpp"

#include <cctype>

namespace accrun::detect {

Result<Quantity> Quantity::parse(std::string_view text) {
  const std::string shown(text);
  if (text.empty()) return invalid_argument("empty quantity (expected a number such as 1 or 0.5)");
  if (text.front() == '-') return invalid_argument("quantity '" + shown + "' is negative");
  std::int64_t whole = 0;
  std::int64_t frac = 0;
  int frac_digits = 0;
  bool seen_dot = false;
  bool seen_digit = false;
  for (char c : text) {
    if (c == '.') {
      if (seen_dot) return invalid_argument("quantity '" + shown + "' is not a number");
      seen_dot = true;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      seen_digit = true;
      if (seen_dot) {
        if (++frac_digits > 4) {
          return invalid_argument("quantity '" + shown +
                                  "' has more than 4 decimal places (the resolution is 0.0001)");
        }
        frac = frac * 10 + (c - '0');
      } else {
        whole = whole * 10 + (c - '0');
        if (whole > 1'000'000'000) return invalid_argument("quantity '" + shown + "' is too large");
      }
    } else {
      return invalid_argument("quantity '" + shown + "' is not a number");
    }
  }
  if (!seen_digit) return invalid_argument("quantity '" + shown + "' is not a number");
  for (int i = frac_digits; i < 4; ++i) frac *= 10;
  return from_units(whole * kScale + frac);
}

std::string Quantity::str() const {
  std::string s = std::to_string(units_ / kScale);
  std::int64_t frac = units_ % kScale;
  if (frac == 0) return s;
  std::string digits = std::to_string(frac);
  digits.insert(0, 4 - digits.size(), '0');
  while (!digits.empty() && digits.back() == '0') digits.pop_back();
  return s + "." + digits;
}

}  // namespace accrun::detect
