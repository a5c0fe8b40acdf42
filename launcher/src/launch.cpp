// accrun -n N program ...: plan the job, then run this host's share of it
// with the in-process node daemon (accrun(1) EXECUTION OPTIONS).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "accrun/commands.hpp"
#include "accrun/detect.hpp"
#include "accrun/node_daemon.hpp"
#include "controller/job_controller.hpp"

namespace accrun::launcher {

Env environment_of(char** envp) {
  Env env;
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) env.emplace(std::string(*e, static_cast<size_t>(eq - *e)), eq + 1);
  }
  return env;
}

int free_tcp_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

int launch_main(const Options& options, char** envp) {
  if (options.command.empty()) {
    std::fputs("accrun: no program given (usage: accrun -n N program [args...]; see accrun --help)\n", stderr);
    return 2;
  }
  // Hosts other than this one: a job controller and an agent per host.
  if ((options.hostfile || options.host_list) && names_other_hosts(options, envp)) {
    if (options.np && *options.np < 1) {
      std::fputs("accrun: -n must be at least 1\n", stderr);
      return 2;
    }
    return run_cluster_job(options, envp);
  }
  const detect::HwlocPluginHold hwloc_plugins;  // detection and the PMIx server share one load
  auto plan = build_plan(options, envp, free_tcp_port());
  if (!plan) {
    std::fprintf(stderr, "accrun: %s\n", plan.status().message().c_str());
    Code c = plan.status().code();
    return c == Code::kInvalidArgument || c == Code::kInvalidUsage || c == Code::kNotFound ||
                   c == Code::kNotSupported
               ? 2
               : 1;
  }
  // Ranks run only where accrun runs, until agents launch them elsewhere:
  // a plan naming another host is refused, never run here in its name.
  const std::string self = this_hostname(detect_config(options, envp));
  for (const auto& h : plan->hosts) {
    if (names_this_host(h.inventory.host, self)) continue;
    std::fprintf(stderr,
                 "accrun: %s: host '%s' is not this host (%s); starting ranks on other hosts is not built yet "
                 "(accrun --detect with the same hostfile reaches them; --dry-run shows the plan); nothing was "
                 "started\n",
                 h.origin.c_str(), h.inventory.host.c_str(), self.c_str());
    return 2;
  }

  RunConfig cfg;
  cfg.inherited = environment_of(envp);
  cfg.command = options.command;
  cfg.wdir = options.wdir;
  cfg.tag_output = options.tag_output;
  cfg.output_dir = options.output_dir;
  cfg.stdin_mode = options.stdin_mode;
  cfg.stdin_rank = options.stdin_rank;
  cfg.timeout_s = options.timeout_s;
  cfg.kill_grace_s = options.kill_grace_s;
  cfg.on_failure = options.on_failure;
  cfg.mpi = options.mpi;
  cfg.report_bindings = options.report_bindings;
  cfg.exports = options.exports;
  // A topology read from XML describes some other machine: it plans, it
  // never binds real processes (DESIGN.md §4).
  cfg.bind = !options.topology && cfg.inherited.count("HWLOC_XMLFILE") == 0;
  if (auto it = cfg.inherited.find("TMPDIR"); it != cfg.inherited.end() && !it->second.empty())
    cfg.tmpdir = it->second;
  return run_job(*plan, cfg);
}

}  // namespace accrun::launcher
