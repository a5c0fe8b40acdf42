// accrun --dry-run [--json]: the plan, and nothing started.
#include <cstdio>
#include <utility>

#include "accrun/commands.hpp"
#include "controller/job_controller.hpp"

namespace accrun::launcher {

namespace {
// What MASTER_PORT shows in a dry run; a real launch picks a free port.
constexpr int kDryRunMasterPort = 29500;
}  // namespace

int dry_run_main(const Options& options, char** envp) {
  auto p = build_plan(options, envp, kDryRunMasterPort);
  if (!p) {
    std::fprintf(stderr, "accrun: %s\n", p.status().message().c_str());
    // Bad input exits 2 (DESIGN.md §9); a failure to look at this host is 1.
    return p.status().code() == Code::kSystem ? 1 : 2;
  }
  const std::string text = options.json ? plan_to_json(*p) : format_plan_table(*p);
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    std::perror("accrun: writing the plan");
    return 1;
  }
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
