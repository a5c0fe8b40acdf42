// libFuzzer target: the hostfile parser (accrun-hostfile(5)) on any text.
// It must return entries or an error, never crash, hang or leak.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "accrun/hostfile.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = accrun::hostfiles::parse_hostfile(text, "fuzz.hosts");
  if (!r) (void)r.status().message();
  return 0;
}
