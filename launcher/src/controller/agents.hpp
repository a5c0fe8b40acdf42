// agents.hpp — the job controller's side of its node agents: it listens on
// addresses of its own, starts `accrun --daemon` on every host through the
// launch agent (as a tree, launch_agent.hpp), proves each connection with
// the job's secret, and collects each agent's hello: its host and what it
// detected there (docs/design.md §4).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "accrun/status.hpp"
#include "controller/launch_agent.hpp"

#include "wire/frame.hpp"
#include "wire/strangers.hpp"

namespace accrun::wire {
struct Secret;
}

namespace accrun::launcher {

struct AgentsConfig {
  std::vector<std::string> hosts;         // agent i runs on hosts[i]
  std::vector<bool> local;                // hosts[i] is this host: its agent is forked here, over a socketpair
  // Runs in the forked child as this host's agent (agent_main.cpp's
  // run_local_agent): `fd` is its end of the socketpair, `index` its agent
  // index.  Returns the child's exit status.
  std::function<int(int fd, int index)> local_agent;
  std::string launch_agent = kDefaultLaunchAgent;  // --launch-agent
  std::string daemon_path;                // --daemon-path (default: this accrun)
  int fanout = kDefaultFanout;            // --fanout
  std::map<std::string, std::string> options;  // detection overrides for the agents
  std::chrono::milliseconds timeout{60000};     // every agent has said hello by then
  int err_fd = 2;                         // where messages go
  // Asked on every turn of the wait for the agents (at least every 100 ms):
  // true ends the wait (accrun received INT, TERM or HUP).
  std::function<bool()> interrupted;
};

// What an agent said when it connected.
struct AgentHello {
  int index = -1;
  std::string host;            // the name the hostfile gave it
  std::string reported_host;   // its own host name
  bool detected = false;
  std::string inventory_json;  // one host, accrun --detect --json; or the error
  int free_port = 0;           // a TCP port that was free on its host
  std::string cores;           // its cores (detect::cores_to_text): what binding needs
  bool cores_from_xml = false; // they describe an hwloc XML file, not the host
};

// The agents of one job.  Not thread-safe; one per controller.
class AgentSet {
 public:
  // Generates the job's secret, listens and starts the first round of agents.
  static Result<std::unique_ptr<AgentSet>> start(const AgentsConfig& config);
  ~AgentSet();
  AgentSet(const AgentSet&) = delete;
  AgentSet& operator=(const AgentSet&) = delete;

  // Blocks until every agent has said hello; an agent that cannot be
  // started, fails the handshake repeatedly, or is silent past the timeout
  // is an error naming its host.  Connections that fail the secret are
  // closed and reported; they do not fail the job.
  Status wait_for_hellos();
  const std::vector<AgentHello>& hellos() const { return hellos_; }
  // The agents of the launch tree, by tree index (launch_agent.hpp): their
  // agent indices; empty when one srun step started every agent at once.
  const std::vector<int>& tree() const { return tree_; }
  int fanout() const { return config_.fanout; }
  // The controller's launch connections open now (at most `fanout`).
  int launch_processes_started() const { return static_cast<int>(launches_.size()); }
  // Tells every agent to end and waits (bounded) for the launch agents.
  void shutdown();

  // After wait_for_hellos, for the controller's own event loop: agent
  // `index`'s connection (-1 once closed), a frame to it (false when the
  // connection is gone), and what it sent: complete frames, or an error
  // (kRemote) once it closed or broke the protocol.
  int agent_fd(int index) const;
  bool send(int index, uint16_t type, const std::string& payload);
  Result<std::vector<wire::Frame>> receive(int index);
  // Agent `index`'s host judged lost by wire::UnackedWatch (never the agent
  // on this host, over a socketpair); called once a second, before a beat.
  bool unacknowledged_for(int index, std::chrono::milliseconds limit);
  void close_agent(int index);
  // Agent `index` is lost: its connection closes and, if this process
  // started it, its launch agent (ssh waiting on a dead link) is killed now.
  void abandon(int index);

 private:
  struct Pending;
  struct Agent;
  explicit AgentSet(AgentsConfig config);
  Status listen_all();
  Status fork_local_agents();
  Status launch_children();
  void accept_from(int listener);
  Status on_readable_pending(Pending& p);
  Status on_frame(Agent& a, uint16_t type, const std::string& payload);
  void reap();
  bool is_local(int index) const;
  void say(const std::string& line) const;
  void refuse(const std::string& peer, const std::string& why);  // reports a stranger, up to a limit

  AgentsConfig config_;
  std::string secret_hex_;
  std::unique_ptr<wire::Secret> secret_;
  std::vector<int> listeners_;
  std::vector<std::string> addresses_;  // "addr:port" the agents try
  std::vector<LaunchProcess> launches_;
  std::vector<int> tree_;
  std::vector<std::unique_ptr<Pending>> pending_;
  wire::RefusalLog refusals_;
  std::vector<std::unique_ptr<Agent>> unnamed_;  // proved the secret, no hello yet
  std::vector<std::unique_ptr<Agent>> agents_;  // by index, null until hello
  std::vector<AgentHello> hellos_;
  std::map<int, std::string> failed_;           // index → why
  std::set<int> launch_exits_;                  // exit statuses of launch agents that failed
  int said_hello_ = 0;
};

// The path of this accrun executable (for the default --daemon-path).
std::string self_executable();

}  // namespace accrun::launcher
