// launch_agent.cpp — launch-agent command lines, the launch tree and the
// agents' launch description (launch_agent.hpp).
#include "controller/launch_agent.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

extern char** environ;

namespace accrun::launcher {

std::string shell_quote(std::string_view word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") ==
                           std::string_view::npos)
    return std::string(word);
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string launch_command(const std::string& launch_agent, const std::string& host,
                           const std::string& agent_command) {
  if (launch_agent.find("{host}") != std::string::npos || launch_agent.find("{cmd}") != std::string::npos) {
    std::string out;
    for (size_t i = 0; i < launch_agent.size();) {
      if (launch_agent.compare(i, 6, "{host}") == 0) {
        out += shell_quote(host);
        i += 6;
      } else if (launch_agent.compare(i, 5, "{cmd}") == 0) {
        out += agent_command;
        i += 5;
      } else {
        out += launch_agent[i++];
      }
    }
    return out;
  }
  // ssh joins its arguments into one command line for the remote shell, so
  // the agent's command line travels as one quoted word.
  return launch_agent + " " + shell_quote(host) + " " + shell_quote(agent_command);
}

Status check_launch_agent(const std::string& launch_agent, const char* path) {
  std::istringstream in(launch_agent);
  std::string word;
  while (in >> word) {
    const size_t eq = word.find('=');
    const bool assignment = eq != std::string::npos && eq > 0 &&
                            word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") >= eq &&
                            (word[0] < '0' || word[0] > '9');
    if (!assignment) break;
  }
  if (word.empty() || word.find_first_of("'\"\\$`;&|<>(){}*?[]~#!") != std::string::npos) return Status();
  for (const char* b : {"exec", "command", "eval", "builtin", ".", ":"})
    if (word == b) return Status();
  auto runnable = [](const std::string& file) {
    struct stat st{};
    return stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(file.c_str(), X_OK) == 0;
  };
  const std::string shown = "--launch-agent '" + launch_agent + "'";
  if (word.find('/') != std::string::npos) {
    if (runnable(word)) return Status();
    return invalid_usage(shown + ": " + word + " " + (access(word.c_str(), F_OK) != 0 ? "does not exist" : "cannot be run") +
                         " on this host; nothing was started");
  }
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  for (size_t b = 0; b <= dirs.size();) {
    size_t e = dirs.find(':', b);
    if (e == std::string::npos) e = dirs.size();
    std::string dir = e > b ? dirs.substr(b, e - b) : ".";
    std::string full = dir + "/" + word;
    if (runnable(full)) return Status();
    b = e + 1;
  }
  std::string fix = word == "ssh" ? "install an ssh client (Debian: apt-get install openssh-client)"
                                  : "give its full path";
  return invalid_usage(shown + ": '" + word + "' is not on this host's PATH; " + fix +
                       ", or name another launch agent; nothing was started");
}

std::vector<int> tree_children(int position, int n_agents, int fanout) {
  std::vector<int> out;
  if (fanout < 1) fanout = 1;
  long long first = static_cast<long long>(position) * fanout + 1;
  for (long long p = first; p < first + fanout && p <= n_agents; ++p) out.push_back(static_cast<int>(p - 1));
  return out;
}

int tree_depth(int n_agents, int fanout) {
  if (fanout < 1) fanout = 1;
  int depth = 0;
  long long covered = 0, level = 1;
  while (covered < n_agents) {
    level *= fanout;
    covered += level;
    ++depth;
  }
  return depth;
}

int tree_parent(int index, int fanout) {
  if (fanout < 1) fanout = 1;
  // Agent i is position i+1, whose parent is position i/fanout: agent i/fanout-1.
  return index / fanout - 1;
}

std::optional<std::vector<std::vector<int>>> fence_children(const std::vector<bool>& has_ranks, int fanout) {
  int n = static_cast<int>(has_ranks.size());
  std::vector<std::vector<int>> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    if (!has_ranks[static_cast<size_t>(i)]) continue;
    int p = tree_parent(i, fanout);
    if (p < 0) continue;
    if (!has_ranks[static_cast<size_t>(p)]) return std::nullopt;
    out[static_cast<size_t>(p)].push_back(i);
  }
  return out;
}

std::string AgentLaunch::encode() const {
  std::ostringstream out;
  out << "accrun-agent 1\n";
  out << "secret " << secret_hex << "\n";
  out << "index " << index << "\n";
  for (const auto& c : controller) out << "controller " << c << "\n";
  if (!parent.empty()) out << "parent " << parent << "\n";
  out << "launch-agent " << launch_agent << "\n";
  out << "daemon-path " << daemon_path << "\n";
  out << "fanout " << fanout << "\n";
  for (size_t i = 0; i < hosts.size(); ++i) out << "host " << hosts[i] << " " << (i < ids.size() ? ids[i] : static_cast<int>(i)) << "\n";
  for (const auto& [k, v] : options) out << "option " << k << "=" << v << "\n";
  if (step) out << "step 1\n";
  out << "end\n";
  return out.str();
}

Result<AgentLaunch> AgentLaunch::decode(std::string_view text) {
  AgentLaunch a;
  a.launch_agent.clear();
  bool header = false, end = false;
  int line_no = 0;
  size_t pos = 0;
  auto bad = [&](const std::string& what) {
    return invalid_argument("agent launch description, line " + std::to_string(line_no) + ": " + what);
  };
  auto whole = [](const std::string& v, int* out) {
    if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos) return false;
    *out = std::stoi(v);
    return true;
  };
  while (pos < text.size() && !end) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string line(text.substr(pos, nl - pos));
    pos = nl + 1;
    ++line_no;
    size_t sp = line.find(' ');
    std::string key = line.substr(0, sp);
    std::string value = sp == std::string::npos ? "" : line.substr(sp + 1);
    if (!header) {
      if (line != "accrun-agent 1") return bad("expected 'accrun-agent 1' (is --daemon-path the same accrun version?)");
      header = true;
    } else if (key == "secret") {
      if (value.size() != 64 || value.find_first_not_of("0123456789abcdef") != std::string::npos)
        return bad("the secret is not 64 hex digits");
      a.secret_hex = value;
    } else if (key == "index") {
      if (!whole(value, &a.index)) return bad("bad index '" + value + "'");
    } else if (key == "controller") {
      a.controller.push_back(value);
    } else if (key == "parent") {
      if (value.rfind(':') == std::string::npos) return bad("bad parent address '" + value + "'");
      a.parent = value;
    } else if (key == "launch-agent") {
      a.launch_agent = value;
    } else if (key == "daemon-path") {
      a.daemon_path = value;
    } else if (key == "fanout") {
      if (!whole(value, &a.fanout) || a.fanout < 1) return bad("bad fanout '" + value + "'");
    } else if (key == "host") {
      size_t sp2 = value.find(' ');
      int id = static_cast<int>(a.hosts.size());
      if (sp2 != std::string::npos && !whole(value.substr(sp2 + 1), &id)) return bad("bad agent id in '" + value + "'");
      a.hosts.push_back(value.substr(0, sp2));
      a.ids.push_back(id);
    } else if (key == "option") {
      size_t eq = value.find('=');
      if (eq == std::string::npos) return bad("option without '='");
      a.options[value.substr(0, eq)] = value.substr(eq + 1);
    } else if (key == "step") {
      if (value != "1") return bad("bad step '" + value + "'");
      a.step = true;
    } else if (line == "end") {
      end = true;
    } else {
      return bad("unknown key '" + key + "'");
    }
  }
  if (!end) return invalid_argument("agent launch description: ended before its 'end' line");
  if (a.secret_hex.empty()) return invalid_argument("agent launch description: no secret");
  if (a.controller.empty()) return invalid_argument("agent launch description: no controller address");
  if (a.index < 0 || a.index >= static_cast<int>(a.hosts.size()))
    return invalid_argument("agent launch description: index " + std::to_string(a.index) + " is not one of its " +
                            std::to_string(a.hosts.size()) + " hosts");
  return a;
}

Result<LaunchProcess> start_launch_agent(const std::string& shell_command, const std::string& input) {
  int in[2];
  if (pipe2(in, O_CLOEXEC) != 0) return system_error("pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, 2, 1);  // ssh's and the agent's output: accrun's stderr
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, dfl;
  sigemptyset(&none);
  sigemptyset(&dfl);
  for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGUSR1, SIGUSR2}) sigaddset(&dfl, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &dfl);
  // Its own process group: Ctrl-C at the terminal reaches accrun, which
  // decides what the agents hear.
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  const char* argv[] = {"/bin/sh", "-c", shell_command.c_str(), nullptr};
  LaunchProcess p;
  int rc = posix_spawn(&p.pid, "/bin/sh", &fa, &attr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(in[0]);
  if (rc != 0) {
    close(in[1]);
    errno = rc;
    return system_error("starting the launch agent '" + shell_command + "'");
  }
  p.command = shell_command;
  // The description is small (a pipe holds it); a launch agent that exits
  // without reading it must not kill us with SIGPIPE.
  size_t off = 0;
  while (off < input.size()) {
    ssize_t w = write(in[1], input.data() + off, input.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
  close(in[1]);
  return p;
}

}  // namespace accrun::launcher
