// Placeholders for the modes until they land; each file that implements a
// mode removes its stub from here.
#include <cstdio>

#include "accrun/commands.hpp"

namespace accrun::launcher {


}  // namespace accrun::launcher
