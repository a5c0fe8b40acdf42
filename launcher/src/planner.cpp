#include "accrun/plan.hpp"

namespace accrun::launcher {

Result<Plan> plan(const JobSpec&, const std::vector<HostSlots>&) {
  return not_supported("the planner is not built yet");
}

}  // namespace accrun::launcher
