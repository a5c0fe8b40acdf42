// The accrun program: parses the command line and runs one mode.
#include <cstdio>

#include "accrun/commands.hpp"
#include "accrun/options.hpp"
#include "version.hpp"

extern char** environ;

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
  if (opts->detect) return detect_main(*opts, environ);
  if (opts->dry_run) return dry_run_main(*opts, environ);
  return launch_main(*opts, environ);
}
