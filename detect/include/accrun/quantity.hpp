// accrun/quantity.hpp — fixed-point resource quantities (resolution 0.0001).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "accrun/status.hpp"

namespace accrun::detect {

// A resource quantity as Ray counts them: fixed point with four decimal
// places, so 0.3 + 0.3 + 0.3 is exact and never drifts past a device.
class Quantity {
 public:
  static constexpr std::int64_t kScale = 10000;

  constexpr Quantity() = default;
  static constexpr Quantity from_units(std::int64_t units) { Quantity q; q.units_ = units; return q; }
  static constexpr Quantity whole(std::int64_t n) { return from_units(n * kScale); }

  // Parses "2", "0.5", "0.25", ".5".  Rejects negatives, more than four
  // decimal places, exponents and junk; the message says which.
  static Result<Quantity> parse(std::string_view text);

  constexpr std::int64_t units() const { return units_; }
  constexpr bool is_zero() const { return units_ == 0; }
  constexpr bool is_whole() const { return units_ % kScale == 0; }
  constexpr std::int64_t whole_part() const { return units_ / kScale; }
  double as_double() const { return static_cast<double>(units_) / kScale; }
  // Shortest decimal form: "1", "0.5", "0.3333".
  std::string str() const;

  friend constexpr Quantity operator+(Quantity a, Quantity b) { return from_units(a.units_ + b.units_); }
  friend constexpr Quantity operator-(Quantity a, Quantity b) { return from_units(a.units_ - b.units_); }
  friend constexpr auto operator<=>(Quantity a, Quantity b) = default;

 private:
  std::int64_t units_ = 0;
};

}  // namespace accrun::detect
