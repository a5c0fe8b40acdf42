// libFuzzer target: the command-line parser.  The input is split into argv
// at newlines and NULs (so an argument may hold spaces), after "accrun".
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "accrun/options.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args{"accrun"};
  std::string cur;
  for (std::size_t i = 0; i < size; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\n' || c == '\0') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) args.push_back(cur);
  if (args.size() > 256) return -1;  // not interesting, and slow
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  argv.push_back(nullptr);
  auto r = accrun::launcher::parse_options(static_cast<int>(args.size()), argv.data());
  if (!r) (void)r.status().message();
  return 0;
}
