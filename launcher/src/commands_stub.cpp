// Placeholders for the modes until they land; each file that implements a
// mode removes its stub from here.
#include <cstdio>

#include "accrun/commands.hpp"

namespace accrun::launcher {

int detect_main(const Options&, char**) {
  std::fputs("accrun: --detect is not built yet\n", stderr);
  return 2;
}
int dry_run_main(const Options&, char**) {
  std::fputs("accrun: --dry-run is not built yet\n", stderr);
  return 2;
}
int launch_main(const Options&, char**) {
  std::fputs("accrun: launching is not built yet\n", stderr);
  return 2;
}

}  // namespace accrun::launcher
