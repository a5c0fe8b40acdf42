// accrun/options.hpp — the accrun command line (docs/design.md §9, accrun(1)).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "accrun/quantity.hpp"
#include "accrun/status.hpp"

namespace accrun::launcher {

enum class BindTo { kDefault, kNone, kCore, kNuma, kAccelerator };
enum class Visibility { kOwn, kNode };
enum class PodLevel { kPod, kZone, kRegion };
enum class OnFailure { kKill, kContinue };
enum class StdinMode { kNone, kAll, kRank };
// What the ranks' MPI starts through: PMIx, the PMI-1/PMI-2 wire protocols
// (PMI_FD), or both (accrun(7), "MPI LIBRARIES").
enum class MpiMode { kAuto, kPmix, kPmi };

struct Options {
  // Modes.
  bool help = false;
  bool version = false;
  bool detect = false;
  bool dry_run = false;
  bool json = false;
  bool daemon = false;                 // accrun --daemon (node daemon on other hosts)

  // Placement.
  std::optional<int> np;               // -n/--np
  std::optional<std::string> hostfile;  // --hostfile
  std::optional<std::string> host_list;  // -H
  std::vector<std::pair<std::string, detect::Quantity>> per_rank;  // --gpus-per-rank, --resources-per-rank
  int cpus_per_rank = 0;               // -c/--cpus-per-rank (0: not given)
  int npernode = 0;                    // --npernode (0: not given)
  std::optional<std::string> accelerator_type;  // --accelerator-type
  int pod_blocks = 0;                  // --pod-blocks
  PodLevel pod_level = PodLevel::kPod;  // --pod-level
  BindTo bind_to = BindTo::kDefault;   // --bind-to
  bool report_bindings = false;        // --report-bindings
  Visibility visible_devices = Visibility::kOwn;  // --visible-devices
  bool oversubscribe = false;          // --oversubscribe

  // This host's logical overrides (detection).
  std::optional<int> num_gpus;         // --num-gpus
  std::vector<std::pair<std::string, detect::Quantity>> resources;  // --resources
  std::optional<std::string> host_accelerator_type;  // --host-accelerator-type
  std::optional<std::string> topology;  // --topology FILE.xml

  // Ranks' environment and I/O.
  std::vector<std::pair<std::string, std::optional<std::string>>> exports;  // -x VAR[=value]
  std::optional<std::string> wdir;     // --wdir
  bool tag_output = false;             // --tag-output
  std::optional<std::string> output_dir;  // --output-dir
  StdinMode stdin_mode = StdinMode::kRank;  // --stdin (default: rank 0)
  int stdin_rank = 0;

  // Failure handling.
  double timeout_s = 0;                // --timeout (0: none)
  double kill_grace_s = 5;             // --kill-grace
  OnFailure on_failure = OnFailure::kKill;  // --on-failure

  // Several hosts.
  std::string launch_agent = "ssh -o BatchMode=yes";  // --launch-agent
  int fanout = 32;                     // --fanout
  std::optional<std::string> daemon_path;  // --daemon-path

  // MPI.
  MpiMode mpi = MpiMode::kAuto;        // --mpi

  // The program and its arguments.
  std::vector<std::string> command;
};

// Parses argv.  Bad input is an invalid-argument Status whose message names
// the option, says what is wrong and suggests the fix where one is obvious.
Result<Options> parse_options(int argc, const char* const* argv);

// The variables accrun itself reads (accrun(1) ENVIRONMENT): ACCRUN_LOG
// and ACCRUN_AGENT_TIMEOUT, when set, must hold what they take; a bad one
// is bad input, named with what it takes.
Status check_environment(char** envp);
// A TMPDIR that is set must be a directory: each job's directory goes there
// (a launch checks it before starting anything; --dry-run and --detect
// make none).
Status check_tmpdir(char** envp);

// Open MPI's and its PMIx library's settings in accrun's environment
// (OMPI_MCA_*, PMIX_MCA_*) reach every rank on every host, as under mpirun:
// each one not named with -x is added to o.exports with accrun's value.  Not
// when accrun itself runs inside a job of an enclosing launcher (the
// variable that shows it names it in the return value, else it is empty):
// then every such variable may be that launcher's, and none is passed on
// unless named with -x.
std::string forward_open_mpi_settings(Options& o, char** envp);
// The --help text.
std::string usage();

}  // namespace accrun::launcher
