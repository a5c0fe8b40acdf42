// Placeholder option parsing: --version and --help only.
#include "accrun/options.hpp"

#include <string_view>

namespace accrun::launcher {

std::string usage() {
  return "usage: accrun [options] [-n N] program [args...]\n"
         "  --version      print the version and the optional parts built\n"
         "  --help         this text\n";
}

Result<Options> parse_options(int argc, const char* const* argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--version") o.version = true;
    else if (a == "--help" || a == "-h") o.help = true;
    else return invalid_argument(std::string("unknown option '") + argv[i] + "'");
  }
  return o;
}

}  // namespace accrun::launcher
