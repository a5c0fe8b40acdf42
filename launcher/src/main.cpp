// The accrun program: parses the command line and hands it to the launcher.
#include <cstdio>

#include "accrun/options.hpp"
#include "version.hpp"

int main(int argc, char** argv) {
  using namespace accrun::launcher;
  auto opts = parse_options(argc, argv);
  if (!opts) {
    std::fprintf(stderr, "accrun: %s\n", opts.status().message().c_str());
    return 2;
  }
  if (opts->help) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  if (opts->version) {
    std::fputs(version_text().c_str(), stdout);
    return 0;
  }
  std::fputs(usage().c_str(), stderr);
  return 2;
}
