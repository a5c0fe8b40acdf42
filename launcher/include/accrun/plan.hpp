// accrun/plan.hpp — the placement planner (docs/design.md §3–4): a pure function
// from a JobSpec and the hosts' Inventories to a Plan, or a clear error.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "accrun/inventory.hpp"
#include "accrun/options.hpp"
#include "accrun/quantity.hpp"
#include "accrun/status.hpp"

namespace accrun::launcher {

using Env = std::map<std::string, std::string>;

// A host the planner may use: what it has, and its slot limit.
struct HostSlots {
  detect::Inventory inventory;
  std::optional<int> slots;            // none: the local host without a hostfile (any -n)
  std::string origin;                  // "FILE:LINE", "-H" or "local", for messages
};

// Everything the planner needs; no I/O behind it.
struct JobSpec {
  int np = 1;
  // Where np came from when -n was not given ("the hosts' slots"), for
  // messages that would otherwise quote an -n the user never typed.
  std::string np_from;
  std::vector<std::pair<std::string, detect::Quantity>> per_rank;  // canonical resource names
  int cpus_per_rank = 0;
  int npernode = 0;
  std::optional<std::string> accelerator_type;
  int pod_blocks = 0;
  PodLevel pod_level = PodLevel::kPod;
  BindTo bind_to = BindTo::kDefault;
  Visibility visible_devices = Visibility::kOwn;
  bool oversubscribe = false;
  std::vector<std::pair<std::string, std::optional<std::string>>> exports;  // -x
  Env inherited;                       // the environment accrun started with
  int master_port = 0;                 // chosen by the launcher
};

struct AssignedDevice {
  std::string resource;
  int id = 0;
  detect::Quantity fraction;           // 1 for a whole device
};

struct RankPlan {
  int rank = 0;
  int host = 0;                        // index into Plan::hosts
  int local_rank = 0;
  std::vector<AssignedDevice> devices;
  std::string cpus;                    // hwloc list string; "" where the topology is unknown
  Env env;                             // exactly what accrun sets for the rank (docs/design.md §9)
};

struct Plan {
  std::vector<HostSlots> hosts;        // hosts that received ranks, in node-rank order
  std::vector<RankPlan> ranks;         // by rank
  bool oversubscribed = false;
};

Result<Plan> plan(const JobSpec& spec, const std::vector<HostSlots>& hosts);

// The hosts --accelerator-type leaves, by index (every host without it, and
// where it leaves none: plan() then says why): what -n counts by default.
std::vector<int> usable_hosts(const JobSpec& spec, const std::vector<HostSlots>& hosts);

// `accrun --dry-run` output: a readable table, and docs/design.md §9's JSON.
std::string format_plan_table(const Plan& plan);
std::string plan_to_json(const Plan& plan);

}  // namespace accrun::launcher
