// Placeholder until the detection stage lands: every entry point reports
// that it is not built yet.
#include "accrun/detect.hpp"

namespace accrun::detect {

Result<Inventory> detect_host(const DetectConfig&) {
  return not_supported("detection is not built yet");
}

}  // namespace accrun::detect
