// accrun/node_daemon.hpp — the node daemon: carries out one host's share of
// a Plan (DESIGN.md §4, §6).  It is a PMIx server, spawns the ranks, forwards
// their I/O and accrun's signals, applies the failure policy and cleans up on
// every exit path (a janitor process covers accrun's own death).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "accrun/options.hpp"
#include "accrun/plan.hpp"
#include "accrun/status.hpp"

namespace accrun::launcher {

// How to run a job, besides the Plan.  Built once from the options and the
// environment accrun started with; nothing below reads getenv().
struct RunConfig {
  std::vector<std::string> command;     // program and arguments (non-empty)
  std::optional<std::string> wdir;      // --wdir
  bool tag_output = false;              // --tag-output
  std::optional<std::string> output_dir;  // --output-dir
  StdinMode stdin_mode = StdinMode::kRank;  // --stdin
  int stdin_rank = 0;
  double timeout_s = 0;                 // --timeout (0: none)
  double kill_grace_s = 5;              // --kill-grace
  OnFailure on_failure = OnFailure::kKill;  // --on-failure
  bool report_bindings = false;         // --report-bindings
  bool bind = true;                     // false when the topology is not this host's (XML)
  std::vector<std::pair<std::string, std::optional<std::string>>> exports;  // -x
  Env inherited;                        // the environment accrun started with
  std::string tmpdir = "/tmp";          // where the rendezvous directory goes (TMPDIR)
  std::string shm_root = "/dev/shm";    // where ACCRUN_SHM_DIR goes
  int host = 0;                         // which of Plan::hosts this daemon runs
  int out_fd = 1;                       // where ranks' stdout is forwarded
  int err_fd = 2;                       // where ranks' stderr and accrun's messages go
  int in_fd = 0;                        // what is forwarded to ranks' stdin
};

// The environment a rank inherits from accrun: `inherited` without the
// variables of an enclosing launcher (PMIX_*, OMPI_*, SLURM_STEP_*).
Env filter_inherited(const Env& inherited);

// Runs this host's ranks of `plan` to completion and returns accrun's exit
// status (DESIGN.md §9: 0; the first failing rank's status; 124 on
// --timeout; 126/127 when the program cannot be executed; 130 after Ctrl-C).
// Blocks.  Must be called from the process's main thread before any other
// thread exists (it blocks signals, forks a janitor and starts PMIx); at most
// one job per process at a time.  Messages go to `config.err_fd`.
int run_job(const Plan& plan, const RunConfig& config);

}  // namespace accrun::launcher
