// launch_agent.hpp — how the job controller (and agents, for their part of
// the tree) start `accrun --daemon` on other hosts (accrun(1) "LAUNCHING ON
// SEVERAL HOSTS", docs/design.md §4 "Starting agents").
//
// A launch agent is a command: `ssh -o BatchMode=yes` by default, run as
// `CMD HOST 'AGENT COMMAND LINE'` (like mpirun's plm_rsh_agent), or a
// template holding {host} and {cmd}, in which both are substituted (the
// agent's command line shell-quoted), for tests, containers and clusters.
// The agent's secret and its launch description go on the launch agent's
// standard input, never on a command line.
//
// Agents start agents as a tree: the controller starts at most `fanout`
// agents, and each agent starts at most `fanout` more, so no process holds
// more than `fanout` launch connections and a job of N hosts is up after
// about log_fanout(N) rounds.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "accrun/status.hpp"

namespace accrun::launcher {

constexpr int kDefaultFanout = 32;
constexpr const char* kDefaultLaunchAgent = "ssh -o BatchMode=yes";

// Quotes `word` for a POSIX shell ('...' with embedded quotes escaped).
std::string shell_quote(std::string_view word);

// The shell command line (for /bin/sh -c) that runs `agent_command` (already
// a shell command line) on `host` through `launch_agent`.
std::string launch_command(const std::string& launch_agent, const std::string& host,
                           const std::string& agent_command);

// Bad input before anything starts: the command a launch agent runs first
// (its first word, past any NAME=value assignments) is looked up on `path`
// (a PATH value) the way /bin/sh will.  An invalid-usage Status naming
// --launch-agent when it is a plain word found nowhere, or a path that is
// not an executable file.  A first word the shell would expand (quotes,
// $, a {cmd} placeholder, a builtin such as exec) is left to the shell.
Status check_launch_agent(const std::string& launch_agent, const char* path);

// The agents a node of the launch tree starts.  Tree positions: 0 is the
// controller, agent i is position i+1; position p starts positions
// p*fanout+1 ... p*fanout+fanout.  Returns agent indices (< n_agents).
std::vector<int> tree_children(int position, int n_agents, int fanout);
// How many launch rounds a tree of `n_agents` takes (its depth).
int tree_depth(int n_agents, int fanout);
// The agent that starts agent `index` (-1: the controller does).
int tree_parent(int index, int fanout);

// Whole-job fences along the launch tree (docs/design.md §4 "One job-wide
// PMIx"): each agent waits for its own contribution and those of its
// children, then sends the lot to its parent (an agent, or the controller
// for the first round of the tree).  `has_ranks[i]`: agent i of the tree
// runs ranks (an agent without ranks ends before the job starts).  Returns,
// for each agent, the children whose contributions it waits for: those
// with ranks.  nullopt when an agent without ranks has a descendant with
// ranks (it would have to stay up only to relay): then every agent sends
// its contributions to the controller directly, as for fences among some
// ranks only.
std::optional<std::vector<std::vector<int>>> fence_children(const std::vector<bool>& has_ranks, int fanout);

// What an agent reads on its standard input: the job's secret and where it
// stands in the launch.  Text, one "key value" per line, ending "end".
struct AgentLaunch {
  std::string secret_hex;                    // 64 hex digits
  int index = 0;                             // this agent: hosts[index] of the tree
  std::vector<std::string> controller;       // "addr:port" to try, in order
  std::string parent;                        // "addr:port" of the agent that started this one ("": the controller did)
  std::string launch_agent = kDefaultLaunchAgent;  // to start its children
  std::string daemon_path;                   // accrun on the other hosts
  int fanout = kDefaultFanout;
  std::vector<std::string> hosts;            // the launch tree's hosts, by tree index
  std::vector<int> ids;                      // each tree host's agent id (what it says in hello)
  std::map<std::string, std::string> options;  // detection overrides: num-gpus, resources, ...
  // Every host's agent was started at once (one srun step): each finds its
  // own index by its host name, and none starts others.
  bool step = false;

  std::string encode() const;
  // Parses what encode() wrote; bad input is an invalid-argument Status
  // naming the line.
  static Result<AgentLaunch> decode(std::string_view text);
};

// A launch agent process started by start_launch_agent.
struct LaunchProcess {
  pid_t pid = -1;
  int index = -1;        // the agent it starts
  std::string host;
  std::string command;   // the shell command line, for messages
  bool exited = false;
  int status = 0;        // waitpid status once exited
  bool own_group = true;  // leads its own process group (false: this host's agent, forked)
};

// Starts `/bin/sh -c shell_command` in its own process group, writes
// `input` to its standard input and closes it; its stdout and stderr are
// accrun's stderr (ssh's own messages reach the user).  Does not wait.
Result<LaunchProcess> start_launch_agent(const std::string& shell_command, const std::string& input);

}  // namespace accrun::launcher
