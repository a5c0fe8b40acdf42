// accrun/commands.hpp — the accrun program's modes, each a function of the
// parsed options and the environment accrun started with.  Each returns the
// process exit status (docs/design.md §9: 0, 2 for bad input, ...).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "accrun/detect.hpp"
#include "accrun/options.hpp"
#include "accrun/plan.hpp"

namespace accrun::launcher {

// accrun --detect [--json]                          (launcher/src/detect_command.cpp)
int detect_main(const Options& options, char** envp);
// accrun --dry-run [--json] ...                     (launcher/src/dry_run.cpp)
int dry_run_main(const Options& options, char** envp);
// accrun -n N program ...: plan, spawn, wait        (launcher/src/launch.cpp)
int launch_main(const Options& options, char** envp);
// Writes `text` (what a mode prints: the usage, the version, an inventory,
// a plan) to standard output; on a failed write says so on standard error,
// naming `what`, and returns 1, else 0.
int print_to_stdout(const std::string& text, const char* what);
// The environment in `envp` as a map.  Pure.
Env environment_of(char** envp);
// A TCP port free on this host now (for MASTER_PORT); 0 if none.
int free_tcp_port();

// accrun --daemon: the node agent, started by accrun (launcher/src/agent/agent_main.cpp)
int daemon_main(const Options& options, char** envp);
// This host's node agent, forked by the job controller: serves the
// controller on `fd` (its end of a socketpair) as agent `index` and returns
// the process's exit status.  With `early.host` (a job of this host alone,
// whose plan will name it so, with the job id `early.jobid`), it starts the
// job's janitor, directories and PMIx server at once, while the controller
// plans.                                                 (agent_main.cpp)
struct EarlyJob {
  std::string host;   // "": none
  std::string jobid;
};
int run_local_agent(int fd, int index, char** envp, const EarlyJob& early = {});

// Whether a hostfile's `name` means the host called `self` (localhost, the
// same name, or the same name without its domain), or is an address of
// this host (is_this_hosts_address).
bool names_this_host(const std::string& name, const std::string& self);
// Whether `name` is an IPv4 or IPv6 address of this host: a loopback
// address (127.0.0.0/8, ::1) or one of its interfaces' addresses.
bool is_this_hosts_address(const std::string& name);
// This host's name as detection reports it (DetectConfig::hostname, else
// gethostname()).
std::string this_hostname(const detect::DetectConfig& config);

// The detection configuration for this host: ACCRUN_SYSFS_ROOT,
// HWLOC_XMLFILE/--topology, --num-gpus, --resources, --host-accelerator-type.
detect::DetectConfig detect_config(const Options& options, char** envp);

// Everything between the command line and a Plan: detection of this host,
// the hostfile or -H list, the JobSpec, and plan().  `master_port` is the
// port the launcher chose for MASTER_PORT.  Errors are bad input (exit 2)
// unless their code says otherwise.                  (launcher/src/job.cpp)
// `detected`, when given, holds what the agents of other hosts detected,
// by the name the hostfile gives them; those hosts are planned from it.
Result<Plan> build_plan(const Options& options, char** envp, int master_port,
                        const std::map<std::string, detect::Inventory>* detected = nullptr);

// What planning takes per rank, about (its environment and places: 4 KiB
// measured, 5.5 KiB with --json).
inline constexpr unsigned long long kPlanBytesPerRank = 6 << 10;
// This host's MemAvailable (/proc/meminfo), if it can be read.
std::optional<unsigned long long> available_memory();
// Bad input when planning spec.np ranks would take more memory than is
// `available` (unknown: no check): a clear refusal instead of the OOM
// killer.  build_plan() checks it before planning.
Status plan_fits_in_memory(const JobSpec& spec, std::optional<unsigned long long> available);

}  // namespace accrun::launcher
