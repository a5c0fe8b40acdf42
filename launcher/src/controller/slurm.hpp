// slurm.hpp — accrun inside a Slurm allocation (accrun(1) "SLURM"): the
// allocation is the host list, and one srun step (overlapping the
// allocation's other steps) starts an agent on every other node at once, as
// mpirun and prterun do inside one.
#pragma once

#include <string>
#include <vector>

#include "accrun/options.hpp"
#include "accrun/plan.hpp"
#include "accrun/status.hpp"

namespace accrun::launcher {

// The launch agent inside an allocation: not a command per host but one
// srun step for all of them (srun_step_command).  It names itself so in
// messages and in accrun --dry-run.
inline constexpr const char* kSrunLaunchAgent = "srun (one step, an agent per node)";

// The shell command line that starts `agent_command` once on each of
// `hosts` as one srun step: one task per node, no CPU binding of the agents,
// overlapping the job's other steps, killed whole if one agent fails, with
// srun's standard input (the launch description) given to every task.
std::string srun_step_command(const std::vector<std::string>& hosts, const std::string& agent_command);

// When SLURM_JOB_ID and SLURM_JOB_NODELIST are set: with neither --hostfile
// nor -H, the hosts are the allocation's nodes with SLURM_TASKS_PER_NODE
// slots each where the allocation asked for tasks (SLURM_NTASKS set), else
// SLURM_JOB_CPUS_PER_NODE, -n defaults to SLURM_NTASKS, and
// the default launch agent is srun (an explicit --launch-agent wins).  A
// hostfile or -H must name only allocated nodes.  Bad input is an
// invalid-argument Status naming the variable or the hosts.
Status apply_slurm_allocation(Options& options, char** envp);

// Inside a Slurm job, the GPUs Slurm gave this node's step (gres) are the
// inherited mask (accrun(7), Visible-device variables): where Slurm left no
// CUDA_VISIBLE_DEVICES (ROCR_VISIBLE_DEVICES for AMD), SLURM_STEP_GPUS, else
// GPU_DEVICE_ORDINAL, else SLURM_JOB_GPUS stands for it in `env`.  A mask
// Slurm set itself is kept as it is.  Outside a job, nothing changes.
void apply_slurm_gpu_mask(Env& env);

}  // namespace accrun::launcher
