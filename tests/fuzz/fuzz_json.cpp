// libFuzzer target: the inventory JSON reader (accrun::detect::from_json,
// detect/src/json.cpp, over nlohmann-json), which reads what remote agents
// send.  It must never throw, crash or recurse without bound, and what it
// accepts must survive a round trip.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "accrun/detect.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = accrun::detect::from_json(text);
  if (!r) return 0;
  // What was read is written, and what is written reads back the same.
  const std::string once = accrun::detect::to_json(*r);
  auto again = accrun::detect::from_json(once);
  if (!again || accrun::detect::to_json(*again) != once) __builtin_trap();
  return 0;
}
