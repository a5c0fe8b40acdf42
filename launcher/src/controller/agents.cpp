// agents.cpp — the controller's node agents (agents.hpp).
#include "controller/agents.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "accrun/log.hpp"
#include "controller/protocol.hpp"
#include "controller/slurm.hpp"
#include "iof.hpp"
#include "peer_guard.hpp"
#include "wire/auth.hpp"
#include "wire/codec.hpp"
#include "wire/connection.hpp"
#include "wire/frame.hpp"

namespace accrun::launcher {

using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
constexpr std::size_t kMaxStrangers = 256;  // connections proving the secret at once

std::string describe_status(int st) {
  if (WIFEXITED(st)) return "exited with status " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return std::string("was killed by SIG") + (sigabbrev_np(WTERMSIG(st)) ? sigabbrev_np(WTERMSIG(st)) : "?");
  return "ended";
}

// What a launch agent's exit status usually means, and the fix.
std::string launch_hint(const std::set<int>& exits, const AgentsConfig& config) {
  std::string hint;
  auto add = [&hint](const std::string& h) { hint += (hint.empty() ? " (" : "; ") + h; };
  if (exits.count(127))
    add("127: the shell there found no " + config.daemon_path +
        "; install accrun at the same path on every host, or give its path there with --daemon-path");
  if (exits.count(126)) add("126: " + config.daemon_path + " is there but cannot be run");
  std::string agent = config.launch_agent.substr(0, config.launch_agent.find(' '));
  agent = agent.substr(agent.rfind('/') + 1);  // npos + 1 == 0
  if (exits.count(255) && agent == "ssh")
    add("255: ssh itself failed; 'ssh HOST true' must work without a password or a question, "
        "and --launch-agent may give ssh its options");
  return hint.empty() ? hint : hint + ")";
}

}  // namespace

// A connection that has not proved the secret yet.
struct AgentSet::Pending {
  int fd = -1;
  std::string peer;
  wire::Handshake handshake;
  Clock::time_point deadline;
  bool heard = false;  // it has sent something
  Pending(int f, std::string p, const wire::Secret& s)
      : fd(f), peer(std::move(p)), handshake(wire::Role::kParent, s), deadline(Clock::now() + kHandshakeTimeout) {}
};

// An authenticated agent.
struct AgentSet::Agent {
  int fd = -1;
  int index = -1;
  wire::FrameDecoder decoder;
  wire::UnackedWatch unacked;
};

AgentSet::AgentSet(AgentsConfig config) : config_(std::move(config)) {}

std::string self_executable() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "accrun";
  return std::string(buf, static_cast<size_t>(n));
}

void AgentSet::say(const std::string& line) const {
  std::string s = "accrun: " + line + "\n";
  [[maybe_unused]] ssize_t w = write(config_.err_fd, s.data(), s.size());
}

void AgentSet::refuse(const std::string& peer, const std::string& why) {
  if (std::string line = refusals_.next("refused a connection from " + peer + ": " + why + "; the job goes on");
      !line.empty())
    say(line);
}

Result<std::unique_ptr<AgentSet>> AgentSet::start(const AgentsConfig& config) {
  std::unique_ptr<AgentSet> set(new AgentSet(config));
  if (set->config_.daemon_path.empty()) set->config_.daemon_path = self_executable();
  if (set->config_.fanout < 1) set->config_.fanout = 1;
  set->agents_.resize(config.hosts.size());
  set->hellos_.resize(config.hosts.size());
  bool remote = false;
  for (size_t i = 0; i < config.hosts.size(); ++i) remote |= !set->is_local(static_cast<int>(i));
  if (remote && config.launch_agent != kSrunLaunchAgent)
    if (Status s = check_launch_agent(config.launch_agent, getenv("PATH")); !s) return s;
  if (remote && config.launch_agent == kSrunLaunchAgent &&
      !check_launch_agent("srun", getenv("PATH")))
    return invalid_usage(
        "inside a Slurm allocation the other nodes' agents are started by srun, which is not on "
        "this host's PATH; give the job Slurm's environment (sbatch --export=ALL, or load Slurm's "
        "module), or name another launch agent with --launch-agent; nothing was started");
  // This host's agent first, before any listening socket exists for it
  // to inherit.
  if (Status s = set->fork_local_agents(); !s) return s;
  if (!remote) return set;  // one host: no port opens at all
  auto secret = wire::Secret::generate();
  if (!secret) return secret.status();
  set->secret_ = std::make_unique<wire::Secret>(*secret);
  set->secret_hex_ = secret->to_hex();
  if (Status s = set->listen_all(); !s) return s;
  if (Status s = set->launch_children(); !s) return s;
  return set;
}

Status AgentSet::fork_local_agents() {
  for (int i = 0; i < static_cast<int>(config_.hosts.size()); ++i) {
    if (!is_local(i)) continue;
    if (!config_.local_agent) return invalid_usage("no agent for this host");
    // A socketpair only the two processes hold: nothing to prove.
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return system_error("socketpair");
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid < 0) {
      close(sv[0]);
      close(sv[1]);
      return system_error("fork (this host's agent)");
    }
    if (pid == 0) {
      close(sv[0]);
      int status = config_.local_agent(sv[1], i);
      std::fflush(nullptr);
      _exit(status);
    }
    close(sv[1]);
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    auto agent = std::make_unique<Agent>();
    agent->fd = sv[0];
    unnamed_.push_back(std::move(agent));
    LaunchProcess p;
    p.pid = pid;
    p.index = i;
    p.host = config_.hosts[static_cast<size_t>(i)];
    p.command = "this host's agent";
    // It stays in accrun's process group, so it may read the terminal
    // for the ranks' standard input; it ignores the terminal's signals
    // and takes them from the controller.
    p.own_group = false;
    launches_.push_back(std::move(p));
  }
  return Status();
}

Status AgentSet::listen_all() {
  // The agents are told every address of ours, reachable ones first; each
  // listener binds its own address, never the wildcard.
  for (const std::string& addr : wire::local_addresses()) {
    auto fd = wire::listen_tcp(addr, 0);
    if (!fd) continue;
    auto port = wire::local_port(*fd);
    if (!port) {
      close(*fd);
      continue;
    }
    listeners_.push_back(*fd);
    addresses_.push_back((addr.find(':') != std::string::npos ? "[" + addr + "]" : addr) + ":" +
                         std::to_string(*port));
  }
  if (listeners_.empty()) return system_error("cannot listen on any local address for the agents' connections");
  return Status();
}

Status AgentSet::launch_children() {
  int n = static_cast<int>(config_.hosts.size());
  // Hosts that name this one get their agent from us directly; the others
  // form the launch tree.
  AgentLaunch base;
  base.secret_hex = secret_hex_;
  base.controller = addresses_;
  base.launch_agent = config_.launch_agent;
  base.daemon_path = config_.daemon_path;
  base.fanout = config_.fanout;
  base.options = config_.options;
  for (int i = 0; i < n; ++i) {
    if (is_local(i)) continue;
    base.hosts.push_back(config_.hosts[i]);
    base.ids.push_back(i);
  }
  int tree = static_cast<int>(base.hosts.size());
  if (config_.launch_agent == kSrunLaunchAgent) {
    // Inside a Slurm allocation: one srun step starts every agent at once.
    base.step = true;
    std::string cmd = srun_step_command(base.hosts, shell_quote(config_.daemon_path) + " --daemon");
    auto p = start_launch_agent(cmd, base.encode());
    if (!p) return p.status().with_context("the srun step");
    p->index = -1;  // stands for every agent it starts
    p->host = std::to_string(tree) + " nodes";
    launches_.push_back(std::move(*p));
    return Status();
  }
  tree_ = base.ids;
  log(LogLevel::kDebug, "launch tree: %d agents, fanout %d, depth %d; %zu started here", tree, config_.fanout,
      tree_depth(tree, config_.fanout), tree_children(0, tree, config_.fanout).size());
  for (int child : tree_children(0, tree, config_.fanout)) {
    AgentLaunch a = base;
    a.index = child;
    std::string cmd = launch_command(config_.launch_agent, base.hosts[child],
                                     shell_quote(config_.daemon_path) + " --daemon");
    auto p = start_launch_agent(cmd, a.encode());
    if (!p) return p.status().with_context("host " + base.hosts[child]);
    p->index = base.ids[child];
    p->host = base.hosts[child];
    launches_.push_back(std::move(*p));
  }
  return Status();
}

bool AgentSet::is_local(int index) const {
  return static_cast<size_t>(index) < config_.local.size() && config_.local[static_cast<size_t>(index)];
}

int AgentSet::agent_fd(int index) const {
  const auto& a = agents_[static_cast<size_t>(index)];
  return a ? a->fd : -1;
}

bool AgentSet::send(int index, uint16_t type, const std::string& payload) {
  int fd = agent_fd(index);
  std::string f = wire::encode_frame(type, payload);
  return fd >= 0 && write_all(fd, f.data(), f.size());
}

bool AgentSet::unacknowledged_for(int index, std::chrono::milliseconds limit) {
  const auto& a = agents_[static_cast<size_t>(index)];
  return a && a->unacked.lost(a->fd, limit);
}

Result<std::vector<wire::Frame>> AgentSet::receive(int index) {
  Agent& a = *agents_[static_cast<size_t>(index)];
  std::vector<wire::Frame> frames;
  char buf[65536];
  for (int reads = 0; reads < 16; ++reads) {
    ssize_t got = recv(a.fd, buf, sizeof buf, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && errno == EAGAIN) break;
    if (got <= 0) {
      if (!frames.empty()) return frames;  // the end comes with the next call
      return remote_error(got == 0 ? "its agent closed the connection" : std::string("its connection failed: ") + std::strerror(errno));
    }
    if (Status s = a.decoder.feed(buf, static_cast<size_t>(got), frames); !s) return s;
    if (static_cast<size_t>(got) < sizeof buf) break;
  }
  return frames;
}

void AgentSet::abandon(int index) {
  close_agent(index);
  for (auto& l : launches_) {
    if (l.index != index || l.exited) continue;
    kill(l.own_group ? -l.pid : l.pid, SIGKILL);
    waitpid(l.pid, nullptr, 0);
    l.exited = true;
  }
}

void AgentSet::close_agent(int index) {
  auto& a = agents_[static_cast<size_t>(index)];
  if (a && a->fd >= 0) {
    close(a->fd);
    a->fd = -1;
  }
}

void AgentSet::accept_from(int listener) {
  for (int taken = 0; taken < wire::kAcceptsPerRound; ++taken) {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    int fd = accept_unguarded(listener, reinterpret_cast<sockaddr*>(&a), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    // Past kMaxStrangers, the oldest that has sent nothing goes (an agent
    // answers the challenge at once; wire/strangers.hpp).
    std::vector<Pending*> strangers;  // oldest first
    for (auto& q : pending_)
      if (q->fd >= 0) strangers.push_back(q.get());
    if (strangers.size() >= kMaxStrangers) {
      Pending* gone = *wire::stranger_to_drop(strangers.begin(), strangers.end(),
                                              [](const Pending* q) { return !q->heard && wire::silent(q->fd); });
      refuse(gone->peer, "too many connections waiting to prove the job's secret");
      close(gone->fd);
      gone->fd = -1;
    }
    auto p = std::make_unique<Pending>(fd, peer_owner(fd).peer, *secret_);
    std::string hello = p->handshake.start();
    if (!write_all(fd, hello.data(), hello.size())) {
      close(fd);
      continue;
    }
    pending_.push_back(std::move(p));
  }
}

Status AgentSet::on_readable_pending(Pending& p) {
  char buf[4096];
  ssize_t n = recv(p.fd, buf, sizeof buf, 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return Status();
  if (n <= 0) return remote_error("closed during the handshake");
  p.heard = true;
  auto step = p.handshake.feed(buf, static_cast<size_t>(n));
  if (!step) return step.status();
  if (!step->send.empty() && !write_all(p.fd, step->send.data(), step->send.size())) return remote_error("closed during the handshake");
  if (!step->done) return Status();
  auto agent = std::make_unique<Agent>();
  agent->fd = p.fd;
  p.fd = -1;
  std::vector<wire::Frame> frames;
  if (Status s = agent->decoder.feed(step->leftover.data(), step->leftover.size(), frames); !s) {
    close(agent->fd);
    return s;
  }
  Agent& ref = *agent;
  // Until its hello names its index, the agent waits among the unnamed.
  unnamed_.push_back(std::move(agent));
  for (auto& f : frames)
    if (Status s = on_frame(ref, f.type, f.payload); !s) return s;
  return Status();
}

Status AgentSet::on_frame(Agent& a, uint16_t type, const std::string& payload) {
  wire::Reader r(payload);
  if (type == msg::kHello) {
    auto index = r.u32("hello: index");
    auto host = r.str("hello: host");
    auto detected = r.boolean("hello: detected");
    auto inv = r.str("hello: inventory");
    auto port = r.u16("hello: free port");
    auto cores = r.str("hello: cores");
    auto from_xml = r.boolean("hello: cores from XML");
    if (!index || !host || !detected || !inv || !port || !cores || !from_xml) return invalid_argument("malformed hello");
    if (*index >= config_.hosts.size()) return invalid_argument("hello from an unknown agent index");
    if (agents_[*index]) return invalid_argument("a second hello for agent " + std::to_string(*index));
    a.index = static_cast<int>(*index);
    AgentHello& h = hellos_[*index];
    h.index = a.index;
    h.host = config_.hosts[*index];
    h.reported_host = *host;
    h.detected = *detected;
    h.inventory_json = *inv;
    h.free_port = *port;
    h.cores = *cores;
    h.cores_from_xml = *from_xml;
    ++said_hello_;
    log(LogLevel::kDebug, "host %s: its agent said hello (%d of %zu)", h.host.c_str(), said_hello_,
        config_.hosts.size());
    for (auto it = unnamed_.begin(); it != unnamed_.end(); ++it) {
      if (it->get() == &a) {
        agents_[*index] = std::move(*it);
        unnamed_.erase(it);
        break;
      }
    }
    return Status();
  }
  if (type == msg::kLaunchExited) {
    auto index = r.u32("launch-exited: index");
    auto st = r.i32("launch-exited: status");
    if (!index || !st || *index >= config_.hosts.size()) return invalid_argument("malformed launch-exited");
    if (!agents_[*index] && !failed_.count(static_cast<int>(*index))) {
      failed_[static_cast<int>(*index)] = "its launch agent " + describe_status(*st) + " before accrun --daemon connected";
      if (WIFEXITED(*st)) launch_exits_.insert(WEXITSTATUS(*st));
    }
    return Status();
  }
  if (type == msg::kHeartbeat) return Status();
  return invalid_argument("unexpected message type " + std::to_string(type));
}

void AgentSet::reap() {
  for (auto& l : launches_) {
    if (l.exited) continue;
    int st = 0;
    if (waitpid(l.pid, &st, WNOHANG) == l.pid) {
      l.exited = true;
      l.status = st;
      for (int i = 0; i < static_cast<int>(agents_.size()); ++i) {
        if ((l.index >= 0 ? i != l.index : is_local(i)) || agents_[i] || failed_.count(i)) continue;
        failed_[i] = "its launch agent (" + l.command + ") " + describe_status(st) +
                     " before accrun --daemon connected";
        if (WIFEXITED(st)) launch_exits_.insert(WEXITSTATUS(st));
      }
    }
  }
}

Status AgentSet::wait_for_hellos() {
  auto deadline = Clock::now() + config_.timeout;
  int n = static_cast<int>(config_.hosts.size());
  while (said_hello_ < n) {
    reap();
    if (!failed_.empty()) break;
    if (config_.interrupted && config_.interrupted()) return Status(Code::kSystem, "interrupted");
    auto now = Clock::now();
    if (now >= deadline) break;
    // What is polled now, by pointer: handling it moves connections from
    // pending to unnamed to named, and accepting adds new ones (served on
    // the next turn).
    std::vector<pollfd> fds;
    std::vector<Pending*> polled_pending;
    std::vector<Agent*> polled_agents;
    for (int l : listeners_) fds.push_back({l, POLLIN, 0});
    for (auto& p : pending_) {
      fds.push_back({p->fd, POLLIN, 0});
      polled_pending.push_back(p.get());
    }
    for (auto& a : unnamed_) polled_agents.push_back(a.get());
    for (auto& a : agents_)
      if (a) polled_agents.push_back(a.get());
    for (Agent* a : polled_agents) fds.push_back({a->fd, POLLIN, 0});
    int wait_ms = static_cast<int>(std::min<int64_t>(
        100, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1));
    int rc = poll(fds.data(), fds.size(), wait_ms);
    if (rc < 0 && errno != EINTR) return system_error("poll");
    size_t k = listeners_.size();
    for (Pending* p : polled_pending) {
      pollfd& f = fds[k++];
      if (p->fd < 0) continue;
      Status s;
      if (f.revents) s = on_readable_pending(*p);
      if (s && p->fd >= 0 && Clock::now() > p->deadline) s = timeout_error("did not finish the handshake in time");
      if (!s) {
        refuse(p->peer, s.message());
        close(p->fd);
        p->fd = -1;
      }
    }
    // Frames from agents (only hello is expected while they come up).
    auto serve = [&](Agent& a, short revents) -> bool {
      if (!revents) return true;
      char buf[65536];
      ssize_t got = recv(a.fd, buf, sizeof buf, 0);
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) return true;
      if (got <= 0) {
        if (a.index >= 0 && !failed_.count(a.index))
          failed_[a.index] = "its agent closed the connection";
        return false;
      }
      std::vector<wire::Frame> frames;
      Status s = a.decoder.feed(buf, static_cast<size_t>(got), frames);
      for (size_t i = 0; s && i < frames.size(); ++i) s = on_frame(a, frames[i].type, frames[i].payload);
      if (!s) {
        say("dropped an agent connection: " + s.message());
        if (a.index >= 0) failed_[a.index] = "its agent broke the protocol: " + s.message();
        return false;
      }
      return true;
    };
    for (Agent* a : polled_agents) {
      pollfd& f = fds[k++];
      if (a->fd >= 0 && !serve(*a, f.revents)) {
        close(a->fd);
        a->fd = -1;
      }
    }
    for (size_t l = 0; l < listeners_.size(); ++l)
      if (fds[l].revents) accept_from(listeners_[l]);
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [](auto& p) { return p->fd < 0; }), pending_.end());
    unnamed_.erase(std::remove_if(unnamed_.begin(), unnamed_.end(), [](auto& a) { return a->fd < 0; }), unnamed_.end());
  }
  if (said_hello_ == n) {
    // Every agent has joined: nobody else is due.  Later connections are
    // refused by the kernel, and strangers still proving themselves go.
    for (int l : listeners_) close(l);
    listeners_.clear();
    for (auto& p : pending_) {
      if (p->fd < 0) continue;
      refuse(p->peer, "every agent of the job had joined");
      close(p->fd);
    }
    pending_.clear();
    for (auto& a : unnamed_)
      if (a->fd >= 0) close(a->fd);
    unnamed_.clear();
    return Status();
  }
  // Hosts that failed for the same reason (one srun step for all of them,
  // one unreachable network) are named together; at most four reasons.
  std::vector<std::pair<std::string, std::vector<std::string>>> reasons;
  for (const auto& failed : failed_) {
    const std::string& reason = failed.second;
    auto same = std::find_if(reasons.begin(), reasons.end(), [&](const auto& r) { return r.first == reason; });
    if (same == reasons.end()) same = reasons.insert(reasons.end(), {reason, {}});
    same->second.push_back(config_.hosts[failed.first]);
  }
  std::string why;
  for (std::size_t r = 0; r < reasons.size() && r < 4; ++r) {
    const auto& [reason, hosts] = reasons[r];
    std::string named = "host " + hosts[0];
    if (hosts.size() > 1) {
      named = "hosts " + hosts[0];
      for (std::size_t i = 1; i < hosts.size() && i < 4; ++i) named += ", " + hosts[i];
      if (hosts.size() > 4) named += " and " + std::to_string(hosts.size() - 4) + " more";
    }
    why += (why.empty() ? "" : "; ") + named + ": " + reason;
  }
  if (reasons.size() > 4) why += "; and " + std::to_string(reasons.size() - 4) + " other reasons";
  if (!why.empty()) why += launch_hint(launch_exits_, config_);
  if (why.empty()) {
    std::vector<std::string> silent;
    for (int i = 0; i < n; ++i)
      if (!agents_[i]) silent.push_back(config_.hosts[i]);
    why = std::to_string(silent.size()) + " agent(s) did not connect within " +
          std::to_string(config_.timeout.count() / 1000) + " s: " + silent.front() +
          (silent.size() > 1 ? " and " + std::to_string(silent.size() - 1) + " more" : std::string()) +
          (addresses_.empty() ? std::string()
                              : " (is accrun at " + config_.daemon_path +
                                    " there, or give --daemon-path; can the hosts reach " + addresses_.front() + "?)");
  }
  return remote_error("cannot start the agents: " + why);
}

void AgentSet::shutdown() {
  std::string bye = wire::encode_frame(msg::kShutdown, "");
  for (auto& a : agents_)
    if (a && a->fd >= 0) write_all(a->fd, bye.data(), bye.size());
  for (auto& a : agents_)
    if (a && a->fd >= 0) {
      close(a->fd);
      a->fd = -1;
    }
  // A launch agent ends with its agent; one whose host went away (ssh
  // waiting on a dead link) is killed after a moment.
  auto deadline = Clock::now() + std::chrono::seconds(1);
  for (auto& l : launches_) {
    while (!l.exited && Clock::now() < deadline) {
      int st = 0;
      if (waitpid(l.pid, &st, WNOHANG) == l.pid) {
        l.exited = true;
      } else {
        usleep(200);  // an agent leaves within a millisecond of its shutdown
      }
    }
    if (!l.exited) {
      kill(l.own_group ? -l.pid : l.pid, SIGKILL);
      waitpid(l.pid, nullptr, 0);
      l.exited = true;
    }
  }
}

AgentSet::~AgentSet() {
  for (auto& p : pending_)
    if (p->fd >= 0) close(p->fd);
  for (auto& a : unnamed_)
    if (a->fd >= 0) close(a->fd);
  for (auto& a : agents_)
    if (a && a->fd >= 0) close(a->fd);
  for (int l : listeners_) close(l);
  for (auto& l : launches_) {
    if (l.exited) continue;
    kill(l.own_group ? -l.pid : l.pid, SIGKILL);
    waitpid(l.pid, nullptr, 0);
  }
}

}  // namespace accrun::launcher
