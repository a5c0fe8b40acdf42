// accrun --dry-run [--json]: the plan, and nothing started.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "accrun/commands.hpp"
#include "accrun/object_wire.hpp"
#include "agent/spawn.hpp"
#include "controller/job_controller.hpp"
#include "controller/output_queue.hpp"

namespace accrun::launcher {

namespace {

// What only a launch knows, in a dry run's environments.
constexpr const char* kAtLaunch = "(at launch)";

// The rest of what each rank's environment will hold: what its node agent
// adds at spawn, with the values only a launch knows marked as such; and
// MASTER_PORT, which rank 0's agent chooses unless the user set it.
void add_launch_time_env(Plan& plan, MpiMode mpi) {
  std::vector<int> on_host(plan.hosts.size(), 0);
  for (const auto& r : plan.ranks) ++on_host[static_cast<size_t>(r.host)];
  for (auto& r : plan.ranks) {
    const detect::Inventory& inv = plan.hosts[static_cast<size_t>(r.host)].inventory;
    const auto planned = r.env.find("ACCRUN_OVERSUBSCRIBED");
    bool over = (planned != r.env.end() && planned->second == "1") ||
                (inv.cpus > 0 && on_host[static_cast<size_t>(r.host)] > inv.cpus);
    add_launch_env(r.env, r.rank, kAtLaunch, kAtLaunch, over, mpi != MpiMode::kPmi);
    if (mpi != MpiMode::kPmix) {
      // The PMI server's (accrun(7), MPI libraries).
      r.env["PMI_FD"] = kAtLaunch;
      r.env["PMI_RANK"] = std::to_string(r.rank);
      r.env["PMI_SIZE"] = std::to_string(plan.ranks.size());
      r.env["PMI_JOBID"] = std::string("accrun.") + kAtLaunch;
    }
    if (r.env.count("MASTER_ADDR") != 0) r.env.emplace("MASTER_PORT", kAtLaunch);
    if (plan.hosts.size() > 1) r.env[objects::kServerEnv] = kAtLaunch;
  }
}

}  // namespace

int print_to_stdout(const std::string& text, const char* what) {
  // (A standard output closed at start has /dev/null in its place.)
  if (OutputQueue::was_closed_at_start(STDOUT_FILENO)) {
    std::fprintf(stderr, "accrun: writing %s: standard output is closed\n", what);
    return 1;
  }
  if (std::fwrite(text.data(), 1, text.size(), stdout) == text.size() && std::fflush(stdout) == 0) return 0;
  std::fprintf(stderr, "accrun: writing %s: %s\n", what, std::strerror(errno));
  return 1;
}

int dry_run_main(const Options& options, char** envp) {
  const detect::HwlocPluginHold hwloc_plugins;  // before any thread: it sets and unsets a variable
  auto p = build_plan(options, envp, 0);
  if (p) add_launch_time_env(*p, options.mpi);
  if (!p) {
    std::fprintf(stderr, "accrun: %s\n", p.status().message().c_str());
    // Bad input exits 2 (docs/design.md §9); a failure to look at this host is 1.
    return p.status().code() == Code::kSystem ? 1 : 2;
  }
  const std::string text = options.json ? plan_to_json(*p) : format_plan_table(*p);
  if (int rc = print_to_stdout(text, "the plan"); rc != 0) return rc;
  // A launch plans other hosts from what their agents detect; a dry run
  // starts no agent and plans them from the hostfile's declarations.
  if ((options.hostfile || options.host_list) && names_other_hosts(options, envp))
    std::fputs("accrun: --dry-run: hosts other than this one are planned from their declarations (no agent was "
               "started; a launch plans them from what each host's agent detects)\n",
               stderr);
#if !defined(__SANITIZE_ADDRESS__)
  // A plan of 80,000 ranks holds millions of small allocations, and freeing
  // them costs as much as planning did.  The process ends right after this,
  // so the dry run leaves them to the kernel, as compilers leave their syntax
  // trees.  (Under AddressSanitizer the leak check would object: free them.)
  static_cast<void>(new Plan(std::move(*p)));
#endif
  return 0;
}

}  // namespace accrun::launcher
