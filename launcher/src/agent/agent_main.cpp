// agent_main.cpp — `accrun --daemon`: the node agent on another host
// (docs/design.md §4, accrun(1) "LAUNCHING ON SEVERAL HOSTS").  It reads the job's
// secret and its launch description on standard input, starts its part of
// the launch tree, connects back to the controller proving the secret,
// detects its host and says hello with its inventory; then it serves the
// controller until told to end or until the controller's connection closes.
#include <fcntl.h>
#include <pmix_common.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cerrno>
#include <chrono>
#include <deque>
#include <optional>
#include <map>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "accrun/commands.hpp"
#include "accrun/detect.hpp"
#include "accrun/hostfile.hpp"
#include "agent/node_daemon.hpp"
#include "agent/tree_links.hpp"
#include "agent/upstream.hpp"
#include "controller/launch_agent.hpp"
#include "controller/slurm.hpp"
#include "iof.hpp"
#include "controller/protocol.hpp"
#include "wire/auth.hpp"
#include "wire/codec.hpp"
#include "wire/connection.hpp"
#include "wire/frame.hpp"

namespace accrun::launcher {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxDescription = 64 << 20;  // 100,000 hosts' names fit
constexpr auto kReadTimeout = std::chrono::seconds(30);

void say(const std::string& host, const std::string& line) {
  std::string s = "accrun: agent on " + host + ": " + line + "\n";
  [[maybe_unused]] ssize_t w = write(2, s.data(), s.size());
}

// Standard input up to the "end" line, bounded in size and time.
Result<std::string> read_description() {
  std::string text;
  auto deadline = Clock::now() + kReadTimeout;
  for (;;) {
    if (text.size() >= 4 && (text.compare(text.size() - 4, 4, "end\n") == 0)) return text;
    if (text.size() > kMaxDescription) return invalid_argument("launch description over 64 MiB");
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return timeout_error("no launch description on standard input within 30 s (accrun --daemon is started by accrun, not by users)");
    pollfd p{0, POLLIN, 0};
    int rc = poll(&p, 1, static_cast<int>(left));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    char buf[65536];
    ssize_t n = read(0, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return text;  // decode says what is missing
    text.append(buf, static_cast<size_t>(n));
  }
}

// Connects to the first controller address that answers and proves the
// secret; the addresses are tried at once, the first to connect wins.
Result<int> connect_controller(const AgentLaunch& launch, const wire::Secret& secret) {
  std::string errors;
  for (const std::string& addr : launch.controller) {
    size_t colon = addr.rfind(':');
    if (colon == std::string::npos) continue;
    std::string host = addr.substr(0, colon);
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    int port = std::atoi(addr.c_str() + colon + 1);
    auto fd = wire::connect_tcp(host, static_cast<uint16_t>(port), std::chrono::milliseconds(3000));
    if (!fd) {
      errors += (errors.empty() ? "" : "; ") + addr + ": " + fd.status().message();
      continue;
    }
    if (Status s = wire::handshake_blocking(*fd, wire::Role::kChild, secret, std::chrono::seconds(10)); !s) {
      close(*fd);
      errors += (errors.empty() ? "" : "; ") + addr + ": " + s.message();
      continue;
    }
    return *fd;
  }
  return remote_error("cannot reach the controller: " + errors);
}


// This host's inventory under the job's overrides: as one-host JSON (or the
// detection error) and its cores, which the JSON leaves out.
struct Detected {
  bool ok = false;
  std::string json;  // or the error
  std::string cores;
  bool cores_from_xml = false;
};
Detected detect_here(const AgentLaunch& launch, char** envp) {
  detect::DetectConfig config = detect::DetectConfig::from_environment(envp);
  apply_slurm_gpu_mask(config.environment);
  if (auto it = launch.options.find("num-gpus"); it != launch.options.end()) config.num_gpus = std::atoi(it->second.c_str());
  if (auto it = launch.options.find("host-accelerator-type"); it != launch.options.end())
    config.host_accelerator_type = it->second;
  if (auto it = launch.options.find("resources"); it != launch.options.end()) {
    auto r = hostfiles::parse_resource_list(it->second);
    if (!r) return {false, "--resources: " + r.status().message(), "", false};
    config.resources = *r;
  }
  auto inv = detect::detect_host(config);
  if (!inv) return {false, inv.status().message(), "", false};
  return {true, detect::to_json({*inv}), detect::cores_to_text(inv->cores), inv->topology_from_xml};
}

// Where a job's rendezvous directory goes: $TMPDIR, else /tmp.
std::string tmpdir_of(char** envp) {
  for (char** e = envp; e != nullptr && *e != nullptr; ++e)
    if (std::strncmp(*e, "TMPDIR=", 7) == 0 && (*e)[7] != '\0') return *e + 7;
  return "/tmp";
}

// Serves the controller on `fd` until it says to end or goes away; it may
// first hand us this host's part of a job.  `local`: this agent was forked
// by the controller on its own host, and keeps accrun's standard input for
// the ranks; an agent elsewhere gives its ranks none.  `early`: the
// controller plans a job of this host alone; the part of its start that
// needs no plan begins now (prepare_job).
int serve(int fd, int self, const std::string& me, char** envp, std::vector<LaunchProcess>& children, bool local,
          TreeLinks* tree, const EarlyJob& early = {}) {
  AgentUpstream upstream(fd, self, tree);
  std::unique_ptr<PreparedJob> prepared;
  if (!early.host.empty()) {
    EarlyStart start;
    start.host = early.host;
    start.jobid = early.jobid;
    start.tmpdir = tmpdir_of(envp);
    start.upstream = &upstream;
    prepared = prepare_job(start);
  }
  int status = 0;
  std::optional<Clock::time_point> leave_by;  // after our ranks ended: the shutdown is due
  // Objects this host's ranks put, served to the other hosts' ranks until
  // the controller says the job has ended (or is lost: silent for 4 s).
  std::unique_ptr<JobRemains> remains;
  for (bool running = true; running;) {
    if (leave_by && !remains && Clock::now() > *leave_by) break;
    if (remains && !upstream.tick()) {
      say(me, "lost the job controller while serving this host's objects; removing them");
      break;
    }
    for (auto& c : children) {
      int st = 0;
      if (c.exited || waitpid(c.pid, &st, WNOHANG) != c.pid) continue;
      c.exited = true;
      c.status = st;
      wire::Writer w;
      w.u32(static_cast<uint32_t>(c.index));
      w.i32(st);
      send_frame(fd, msg::kLaunchExited, w.data());
    }
    // Before its launch the controller may still be waiting for other
    // hosts' agents: beat, but do not judge its silence yet; only a host
    // that acknowledges nothing (kControllerUnacked).
    upstream.tick();
    if (upstream.controller_unreachable()) {
      say(me, "the controller's host acknowledged nothing this agent sent for " +
                  std::to_string(kControllerUnacked.count()) +
                  " s (it or the network between is down); leaving");
      status = 1;
      break;
    }
    pollfd p[2] = {{fd, POLLIN, 0}, {tree ? tree->fd() : -1, POLLIN, 0}};
    int rc = poll(p, 2, 100);
    if (rc <= 0) continue;
    if (p[1].revents) tree->on_readable();
    if (!p[0].revents) continue;
    char buf[65536];
    ssize_t got = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) break;  // the controller is gone: nothing of ours may outlive it
    std::vector<wire::Frame> frames;
    upstream.heard();
    if (Status s = upstream.decoder().feed(buf, static_cast<size_t>(got), frames); !s) {
      say(me, "the controller's connection broke the protocol: " + s.message());
      status = 1;
      break;
    }
    for (size_t i = 0; i < frames.size(); ++i) {
      const wire::Frame& f = frames[i];
      if (f.type == msg::kShutdown) {
        running = false;
      } else if (f.type == msg::kFenceTree) {
        if (!upstream.carry_fences(f.payload)) {
          say(me, "the controller's connection broke the protocol: a malformed fence tree");
          status = 1;
          running = false;
          break;
        }
      } else if (f.type == msg::kSpawnLaunch) {
        // This host's ranks have ended (its PMIx server with them): a
        // spawn placed here now cannot start.
        auto launch = msg::decode_spawn_launch(f.payload);
        wire::Writer w;
        w.u32(launch ? static_cast<uint32_t>(launch->k) : 0);
        w.i32(PMIX_ERR_UNREACH);
        w.str("the agent on " + me + " has ended its part of the job");
        send_frame(fd, msg::kSpawnStarted, w.data());
      } else if (f.type == msg::kLaunch && running) {
        // Word at once that the launch arrived: from now on the controller
        // expects a beat every second.
        upstream.beat_now();
        auto job = msg::decode_launch(f.payload);
        if (!job) {
          say(me, "a launch the agent cannot read: " + job.status().message());
          status = 2;
          running = false;
          break;
        }
        RunConfig& cfg = job->config;
        cfg.inherited = environment_of(envp);
        cfg.tmpdir = tmpdir_of(envp);
        // A topology read from XML describes some other machine: it plans,
        // it never binds real processes (docs/design.md §4).
        if (cfg.inherited.count("HWLOC_XMLFILE") != 0) cfg.bind = false;
        struct stat st;
        if (cfg.wdir && cfg.wdir_soft && (stat(cfg.wdir->c_str(), &st) != 0 || !S_ISDIR(st.st_mode))) cfg.wdir.reset();
        // Standard input comes from accrun on the launching host: read
        // there and pushed (a job across hosts), or read by this host's
        // agent itself (one host).
        if (!local && !cfg.stdin_pushed) cfg.stdin_mode = StdinMode::kNone;
        // This host's agent hears the terminal's signals through the
        // controller only (it shares accrun's process group).
        cfg.own_signals = !local;
        cfg.upstream = &upstream;
        // What came in the same read as the launch (a signal, stdin) is the
        // job's: its daemon takes it once the ranks have started, and what
        // it did not take (it ended before them) comes back here.
        upstream.defer(std::vector<wire::Frame>(frames.begin() + static_cast<long>(i) + 1, frames.end()));
        frames.resize(i + 1);
        int job_status = run_job(job->plan, cfg, &remains, std::move(prepared));
        for (wire::Frame& rest : upstream.take_deferred()) frames.push_back(std::move(rest));
        wire::Writer w;
        w.i32(job_status);
        send_frame(fd, msg::kDone, w.data());
        leave_by = Clock::now() + std::chrono::seconds(5);
      }
    }
  }
  prepared.reset();  // never launched: undone while the controller's connection is still ours
  close(fd);
  return status;
}

// An agent of a srun step finds its host among the description's by the
// name Slurm knows the node by (SLURMD_NODENAME, else the host name, with
// or without its domain), else by its node index in the step.
Result<int> step_index(const AgentLaunch& launch, const std::string& self, char** envp) {
  Env env = environment_of(envp);
  std::string name = env.count("SLURMD_NODENAME") ? env.at("SLURMD_NODENAME") : self;
  auto short_name = [](const std::string& s) { return s.substr(0, s.find('.')); };
  for (size_t i = 0; i < launch.hosts.size(); ++i)
    if (launch.hosts[i] == name || short_name(launch.hosts[i]) == short_name(name)) return static_cast<int>(i);
  if (auto it = env.find("SLURM_NODEID"); it != env.end()) {
    int id = std::atoi(it->second.c_str());
    if (id >= 0 && static_cast<size_t>(id) < launch.hosts.size()) return id;
  }
  return invalid_argument("this node (" + name + ") is not one of the " + std::to_string(launch.hosts.size()) +
                          " hosts the srun step was started for");
}

}  // namespace

int daemon_main(const Options&, char** envp) {
  signal(SIGPIPE, SIG_IGN);
  const detect::HwlocPluginHold hwloc_plugins;  // this host's detection and its PMIx server share one load
  char self[256] = {};
  gethostname(self, sizeof self - 1);
  auto text = read_description();
  if (!text) {
    say(self, text.status().message());
    return 2;
  }
  auto launch = AgentLaunch::decode(*text);
  if (!launch) {
    say(self, launch.status().message());
    return 2;
  }
  if (launch->step) {
    // Started with every other agent by one srun step: which host is this?
    auto index = step_index(*launch, self, envp);
    if (!index) {
      say(self, index.status().message());
      return 2;
    }
    launch->index = *index;
  }
  const std::string& me = launch->hosts[launch->index];
  auto secret = wire::Secret::from_hex(launch->secret_hex);
  if (!secret) {
    say(me, secret.status().message());
    return 2;
  }

  auto fd = connect_controller(*launch, *secret);
  if (!fd) {
    say(me, fd.status().message());
    return 1;
  }
  const int self_id = launch->ids[launch->index];
  TreeLinks tree(*secret, self_id, me);

  // Our part of the launch tree: the children come up while we detect.
  // They join us at the address we reached the controller from, and
  // whole-job fences travel those links (tree_links.hpp).
  std::vector<LaunchProcess> children;
  int n = static_cast<int>(launch->hosts.size());
  std::vector<int> kids = launch->step ? std::vector<int>{} : tree_children(launch->index + 1, n, launch->fanout);
  std::string here;
  if (!kids.empty()) {
    std::vector<int> kid_ids;
    for (int child : kids) kid_ids.push_back(launch->ids[child]);
    auto addresses = wire::addresses_reached_by(*fd);
    auto listening = addresses.empty() ? Result<std::string>(remote_error("no address to listen on"))
                                       : tree.listen(addresses.front(), kid_ids);
    if (!listening) {
      say(me, "cannot listen for the agents it starts: " + listening.status().message());
      return 1;
    }
    here = *listening;
  }
  for (int child : kids) {
    AgentLaunch c = *launch;
    c.index = child;
    c.parent = here;
    std::string cmd = launch_command(launch->launch_agent, launch->hosts[child],
                                     shell_quote(launch->daemon_path) + " --daemon");
    auto p = start_launch_agent(cmd, c.encode());
    if (!p) {
      say(me, p.status().message());
      LaunchProcess failed;
      failed.index = launch->ids[child];
      failed.exited = true;
      failed.status = 127 << 8;
      children.push_back(failed);
      continue;
    }
    p->index = launch->ids[child];
    p->host = launch->hosts[child];
    children.push_back(std::move(*p));
  }

  const Detected here_found = detect_here(*launch, envp);
  if (!launch->parent.empty()) {
    if (Status s = tree.join(launch->parent, std::chrono::seconds(10)); !s) {
      say(me, s.message());
      return 1;
    }
  }
  wire::Writer hello;
  hello.u32(static_cast<uint32_t>(self_id));
  hello.str(self);
  hello.boolean(here_found.ok);
  hello.str(here_found.json);
  hello.u16(static_cast<uint16_t>(free_tcp_port()));
  hello.str(here_found.cores);
  hello.boolean(here_found.cores_from_xml);
  if (!send_frame(*fd, msg::kHello, hello.data())) {
    say(me, "lost the controller's connection");
    return 1;
  }
  for (auto& c : children) {
    if (!c.exited) continue;
    wire::Writer w;
    w.u32(static_cast<uint32_t>(c.index));
    w.i32(c.status);
    send_frame(*fd, msg::kLaunchExited, w.data());
  }

  int status = serve(*fd, self_id, me, envp, children, false, &tree);
  // The children's agents hear the controller themselves; give their launch
  // agents a moment to end, then leave them to init.
  auto deadline = Clock::now() + std::chrono::seconds(2);
  for (auto& c : children)
    while (!c.exited && Clock::now() < deadline) {
      // ECHILD: reaped already, by the job's daemon (it reaps every child
      // of this process while the ranks run).
      if (pid_t w = waitpid(c.pid, nullptr, WNOHANG); w == c.pid || (w < 0 && errno == ECHILD)) c.exited = true;
      else usleep(5000);
    }
  return status;
}

int run_local_agent(int fd, int index, char** envp, const EarlyJob& early) {
  // Ctrl-C and Ctrl-Z at the terminal reach this process too: the
  // controller decides what the ranks hear.
  for (int s : {SIGINT, SIGQUIT, SIGTSTP, SIGHUP, SIGUSR1, SIGUSR2}) signal(s, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  char self[256] = {};
  gethostname(self, sizeof self - 1);
  // The controller detected this host itself before it forked us.
  wire::Writer hello;
  hello.u32(static_cast<uint32_t>(index));
  hello.str(self);
  hello.boolean(true);
  hello.str("");
  hello.u16(static_cast<uint16_t>(free_tcp_port()));
  hello.str("");
  hello.boolean(false);
  if (!send_frame(fd, msg::kHello, hello.data())) return 1;
  std::vector<LaunchProcess> none;
  return serve(fd, index, self, envp, none, true, nullptr, early);
}

}  // namespace accrun::launcher
