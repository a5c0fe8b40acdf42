// libFuzzer target: the inventory JSON reader (accrun::detect::from_json,
// detect/src/json.cpp), which reads what remote daemons send.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "accrun/detect.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = accrun::detect::from_json(text);
  // What was read must be writable again.
  if (r) (void)accrun::detect::to_json(*r);
  return 0;
}
