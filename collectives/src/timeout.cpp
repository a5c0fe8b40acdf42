// The default data-call timeout of groups (accrun/backend.hpp).
#include <algorithm>
#include <cstdlib>
#include <string>

#include "accrun/backend.hpp"

namespace accrun::collectives {

Result<int> parse_group_timeout(const std::string& value) {
  char* end = nullptr;
  const double secs = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !(secs >= 0) || secs > 86400)
    return invalid_argument("ACCRUN_GROUP_TIMEOUT='" + value +
                            "': expected seconds from 0 (no timeout) to 86400 (a day), e.g. 600");
  if (secs == 0) return -1;
  return std::max(1, static_cast<int>(secs * 1000));
}

}  // namespace accrun::collectives
