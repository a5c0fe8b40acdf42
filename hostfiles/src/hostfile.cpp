#include "accrun/hostfile.hpp"

namespace accrun::hostfiles {

Result<std::vector<HostEntry>> parse_hostfile(std::string_view, const std::string& filename) {
  return not_supported(filename + ": hostfiles are not supported yet");
}

}  // namespace accrun::hostfiles
