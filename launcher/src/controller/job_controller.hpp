// job_controller.hpp — the job controller for a job that spans hosts
// (docs/design.md §4): it starts an agent on every host (agents.hpp), plans from
// what they detected, hands each agent its part, routes fences between
// them, prints the ranks' output, applies the failure policy, --timeout and
// signals, and decides the exit status.  Ranks never run in the
// controller's own process: a host that is this one gets an agent process
// too, so every host runs the same code.
#pragma once

#include <functional>

#include "accrun/options.hpp"
#include "accrun/plan.hpp"

namespace accrun::launcher {

// Runs the job of `options` and returns accrun's exit status (docs/design.md
// §9).  Without `plan_here`, on the hosts of its hostfile or -H list,
// planned from what their agents detect; with it (a job of this host
// alone), as it plans, called once this host's agent is forked (its failure
// is bad input: status 2, or 1 for a system error).  Blocks; call from the
// main thread before any other thread exists.
int run_cluster_job(const Options& options, char** envp, std::function<Result<Plan>()> plan_here = nullptr);

// Whether the hostfile or -H list of `options` names a host other than this
// one (bad input is left for the planner to report).
bool names_other_hosts(const Options& options, char** envp);

}  // namespace accrun::launcher
