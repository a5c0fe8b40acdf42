// slurm.hpp — accrun inside a Slurm allocation (accrun(1) "SLURM"): the
// allocation is the host list, srun is the launch agent (one step per host,
// overlapping the allocation's other steps), as mpirun does inside one.
#pragma once

#include "accrun/options.hpp"
#include "accrun/status.hpp"

namespace accrun::launcher {

// The srun template that starts one agent on {host} as a step of its own.
inline constexpr const char* kSrunLaunchAgent =
    "srun --quiet --overlap --nodes=1 --ntasks=1 --cpu-bind=none --kill-on-bad-exit=1 --nodelist={host} {cmd}";

// When SLURM_JOB_ID and SLURM_JOB_NODELIST are set: with neither --hostfile
// nor -H, the hosts are the allocation's nodes with SLURM_TASKS_PER_NODE
// slots each where the allocation asked for tasks (SLURM_NTASKS set), else
// SLURM_JOB_CPUS_PER_NODE, -n defaults to SLURM_NTASKS, and
// the default launch agent is srun (an explicit --launch-agent wins).  A
// hostfile or -H must name only allocated nodes.  Bad input is an
// invalid-argument Status naming the variable or the hosts.
Status apply_slurm_allocation(Options& options, char** envp);

}  // namespace accrun::launcher
