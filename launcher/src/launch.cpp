// accrun -n N program ...: plan the job and hand it to the job controller
// (accrun(1) EXECUTION OPTIONS).  A job on this host only is planned here,
// before anything starts; a job on other hosts too is planned by the
// controller from what their agents detect.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "accrun/commands.hpp"
#include "accrun/detect.hpp"
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
  // Loaded before the agent is forked: detection here and the agent's PMIx
  // server share one load of hwloc's plugins.
  const detect::HwlocPluginHold hwloc_plugins;
  // This host's share runs in its node agent, which the controller forks
  // and speaks to over the same protocol as agents on other hosts; the job
  // is planned here meanwhile.
  return run_cluster_job(options, envp, [&options, envp] { return build_plan(options, envp, free_tcp_port()); });
}

}  // namespace accrun::launcher
