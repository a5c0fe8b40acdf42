// Hosts and requests the planner tests build (test_planner.cpp for plan()
// as a whole, test_planner_steps.cpp for each step of launcher/src/planner/).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "accrun/plan.hpp"

namespace accrun::launcher::planner_test {

inline detect::Quantity q(const char* s) { return *detect::Quantity::parse(s); }

// `gpus` devices of `resource` with ids 0…gpus-1, no topology.
inline detect::Inventory host(const std::string& name, int gpus, const std::string& type = "H100",
                              const std::string& vendor = "nvidia", const std::string& resource = "GPU") {
  detect::Inventory inv;
  inv.host = name;
  for (int i = 0; i < gpus; ++i) {
    detect::Accelerator a;
    a.resource = resource;
    a.vendor = vendor;
    a.id = i;
    a.type = type;
    inv.accelerators.push_back(a);
  }
  return inv;
}

// numa × cores_per_numa cores of 2 PUs (PU p and p+total, as Linux numbers
// hyperthreads); devices spread evenly over the NUMA nodes.
inline detect::Inventory with_cores(detect::Inventory inv, int numa, int cores_per_numa) {
  const int total = numa * cores_per_numa;
  for (int n = 0; n < numa; ++n) {
    for (int c = 0; c < cores_per_numa; ++c) {
      const int core = n * cores_per_numa + c;
      inv.cores.push_back(detect::Core{n, {core, core + total}});
    }
  }
  inv.cpus = 2 * total;
  inv.numa_nodes = numa;
  const int devs = static_cast<int>(inv.accelerators.size());
  for (auto& a : inv.accelerators) a.numa = devs ? a.id * numa / devs : 0;
  return inv;
}

inline HostSlots slots(detect::Inventory inv, std::optional<int> n, std::string origin = "test") {
  return HostSlots{std::move(inv), n, std::move(origin)};
}

inline JobSpec spec_of(int np, std::vector<std::pair<std::string, detect::Quantity>> per_rank = {}) {
  JobSpec s;
  s.np = np;
  s.per_rank = std::move(per_rank);
  s.master_port = 29500;
  return s;
}

// A variable of `env`, or "<unset>".
inline const std::string& var(const Env& env, const std::string& k) {
  static const std::string kMissing = "<unset>";
  auto it = env.find(k);
  return it == env.end() ? kMissing : it->second;
}

}  // namespace accrun::launcher::planner_test
