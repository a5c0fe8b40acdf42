// `accrun --version`: the version, the optional parts built, and which
// vendor libraries load on this machine.
#pragma once

#include <string>

namespace accrun::launcher {
std::string version_text();
}
