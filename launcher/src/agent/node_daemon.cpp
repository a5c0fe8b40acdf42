// The node daemon: one event-loop thread that owns the job (accrun(1),
// accrun(7), docs/design.md §4 and §6).  It waits in epoll on a signalfd
// (SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2), the PMIx upcall
// queue's eventfd, the ranks' output pipes and stdin; deadlines (--timeout,
// --kill-grace, lookups with PMIX_TIMEOUT) are epoll timeouts.
#include "agent/node_daemon.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pmix_common.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "accrun/log.hpp"
#include "accrun/object_wire.hpp"
#include "accrun/tcp_congestion.hpp"
#include "iof.hpp"
#include "agent/descendants.hpp"
#include "agent/janitor.hpp"
#include "agent/object_server.hpp"
#include "agent/pmix_server.hpp"
#include "agent/spawn.hpp"
#include "agent/stdin_forwarder.hpp"
#include "controller/protocol.hpp"
#include "pmi/pmi_host.hpp"
#include "wire/connection.hpp"

namespace accrun::launcher {

using Clock = std::chrono::steady_clock;


namespace {

constexpr int kSignals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT};

// Signals passed on to the ranks as they came, without ending the job.
bool passed_through(int sig) { return sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGTSTP || sig == SIGCONT; }

// Debug trace of the launch phases (ACCRUN_LOG=debug), in ms since start.
void trace(Clock::time_point t0, const char* what) {
  if (log_level() < LogLevel::kDebug) return;
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
  log(LogLevel::kDebug, "%8.3f ms  %s", static_cast<double>(us) / 1000.0, what);
}

// Messages from accrun itself: one write per line.
void say(int fd, const std::string& line) {
  std::string s = "accrun: " + line + "\n";
  write_all(fd, s.data(), s.size());
}

}  // namespace

std::string new_job_id() {
  unsigned char b[6] = {};
  if (getrandom(b, sizeof b, 0) != static_cast<ssize_t>(sizeof b)) {
    uint64_t t = static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^ static_cast<uint64_t>(getpid());
    std::memcpy(b, &t, sizeof b);
  }
  char out[13];
  for (int i = 0; i < 6; ++i) std::snprintf(out + 2 * i, 3, "%02x", b[i]);
  return out;
}

namespace {

std::string rank_ranges(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}


// " with GPU 0,1 and NEURON_CORE 4 (0.5 of it)": the devices the plan gave a rank, from
// its ACCRUN_<R>_IDS and ACCRUN_<R>_FRACTION variables (--report-bindings).
std::string devices_of(const Env& env) {
  std::string out;
  for (const auto& [k, v] : env) {
    if (k.rfind("ACCRUN_", 0) != 0 || k.size() <= 11 || k.compare(k.size() - 4, 4, "_IDS") != 0 || v.empty())
      continue;
    std::string resource = k.substr(7, k.size() - 11);
    out += (out.empty() ? " with " : " and ") + resource + " " + v;
    if (auto f = env.find("ACCRUN_" + resource + "_FRACTION"); f != env.end()) out += " (" + f->second + " of it)";
  }
  return out.empty() ? " with no devices" : out;
}

std::string signal_name(int sig) {
  const char* d = strsignal(sig);
  return std::string(sigabbrev_np(sig) ? std::string("SIG") + sigabbrev_np(sig) : "signal") + " (" +
         (d ? d : "?") + ")";
}

struct RankState {
  int rank = 0;          // the PMIx server's id (pmix_server.hpp): a rank, or a spawned process
  std::string label;     // a spawned process: how messages name it
  pid_t pid = -1;
  bool running = false;
  bool connected = false;
  bool finalized = false;
  bool aborted = false;
  int abort_status = 0;
  std::string abort_message;
  bool failed = false;
  bool stop_requested = false;  // PMIx_Job_control killed or terminated it: its death is no failure
};

// Which of accrun's outputs a stream is forwarded to.
enum class OutKind { kStdout = 0, kStderr = 1 };

struct OutStream {
  int fd = -1;
  int rank = 0;
  OutKind kind = OutKind::kStdout;
  std::unique_ptr<LineAssembler> lines;
};

// Tags in epoll's data: what became ready.
constexpr uint64_t kTagSignal = 1, kTagQueue = 2, kTagStdin = 3, kTagUpstream = 4, kTagLinks = 5, kTagStream = 1ULL << 32, kTagTarget = 1ULL << 33,
                   kTagPmi = 1ULL << 34;

// Grows this process's file descriptor table to hold `fds` descriptors (at
// most the soft limit) while no other thread shares it.  Every rank costs
// about six descriptors (two output pipes, a PMI socket, their ends until
// the fork); growing the table past a power of two once the PMIx server's
// threads run waits for an RCU grace period (about 10 ms here, seen at the
// 40th of 64 ranks).
void reserve_fd_table(size_t fds) {
  struct rlimit rl {};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return;
  size_t want = std::min<size_t>(fds, static_cast<size_t>(rl.rlim_cur) - 1);
  if (want < 64) return;
  int spare = fcntl(0, F_GETFD) < 0 ? open("/dev/null", O_RDONLY | O_CLOEXEC) : -1;
  int fd = fcntl(spare >= 0 ? spare : 0, F_DUPFD_CLOEXEC, static_cast<int>(want));
  if (fd >= 0) close(fd);
  if (spare >= 0) close(spare);
}

// Signals the process group a rank (or spawned process) leads.  For
// SIGTSTP (Ctrl-Z) the ranks get SIGSTOP, as mpiexec.hydra's do: a program
// may catch or ignore SIGTSTP, and a job stopped in part holds its peers.
void signal_group(pid_t leader, int sig) { kill(-leader, sig == SIGTSTP ? SIGSTOP : sig); }

// -x: NAME=VALUE, or NAME as accrun's environment has it.
void apply_exports(Env& env, const RunConfig& cfg) {
  for (const auto& [k, v] : cfg.exports) {
    if (v) {
      env[k] = *v;
    } else if (auto it = cfg.inherited.find(k); it != cfg.inherited.end()) {
      env[k] = it->second;
    }
  }
}

// Whether the job's directory holds an object file (accrun_put(3)).
bool holds_objects(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return false;
  bool found = false;
  while (dirent* e = readdir(d))
    if (objects::is_object_file(e->d_name)) {
      found = true;
      break;
    }
  closedir(d);
  return found;
}

// A job's objects on this host after its ranks ended (run_job's remains).
class ObjectsLeft final : public JobRemains {
 public:
  ObjectsLeft(std::unique_ptr<ObjectServer> server, std::string dir, Janitor janitor, bool janitor_reaped,
              std::vector<int> owner_fds)
      : server_(std::move(server)), dir_(std::move(dir)), janitor_(std::move(janitor)),
        janitor_reaped_(janitor_reaped), owner_fds_(std::move(owner_fds)) {}
  ~ObjectsLeft() override {
    server_.reset();
    remove_tree(dir_);
    janitor_.dismiss(janitor_reaped_);
    for (int fd : owner_fds_) close(fd);
  }

 private:
  std::unique_ptr<ObjectServer> server_;
  std::string dir_;
  Janitor janitor_;
  bool janitor_reaped_;
  std::vector<int> owner_fds_;
};

class Daemon final : public ClientEvents, public DaemonControl {
 public:
  Daemon(const Plan& plan, const RunConfig& config, std::unique_ptr<JobRemains>* remains)
      : plan_(plan), cfg_(config), up_(config.upstream), remains_out_(remains) {}
  ~Daemon() override;
  int run();
  // The start that needs neither the job's plan nor its options (see
  // prepare_job()): the signal handling, the janitor, the job's directories
  // and the PMIx server.  Done once; run() does it when nobody did before.
  Status prepare();
  // Whether a daemon prepared for this host alone can run `plan` as
  // `config` says; adopt() makes them its own.
  bool can_adopt(const Plan& plan, const RunConfig& config) const;
  void adopt(const Plan& plan, const RunConfig& config, std::unique_ptr<JobRemains>* remains);
  // Undoes what prepare() did, for a daemon that never runs.
  void abandon() { finish(); }

  void on_connected(int rank) override;
  void on_finalized(int rank) override;
  void on_abort(int rank, int status, const std::string& message) override;
  void on_spawn(SpawnRequest request, std::function<void(int, std::string)> done) override;
  void on_job_control(int requester, std::vector<int> ids, int sig, bool stop, std::function<void(int)> done) override;
  void signal_procs(int sig, bool stop, const std::vector<int>& ids) override;
  void terminate(int sig) override;

 private:
  void upstream_lost();
  int setup_and_spawn();
  void start_pmi();
  int loop();
  void finish();

  RankState* state_of(int rank);
  int host_index(int id) const {
    if (id < 0) return -1;
    if (!is_spawned_id(id))
      return static_cast<size_t>(id) < plan_.ranks.size() ? plan_.ranks[static_cast<size_t>(id)].host : -1;
    auto it = spawned_host_.find(id);
    return it != spawned_host_.end() ? it->second : -1;
  }
  const std::string& host_of(int id) const {
    int h = host_index(id);
    return plan_.hosts[static_cast<size_t>(h >= 0 ? h : cfg_.host)].inventory.host;
  }
  // Bad input found on this host before any of its ranks started: "WHAT;
  // nothing was started".  In a job across hosts the line names this host,
  // and the others' ranks (which may have started) are ended by the
  // controller's failure policy.
  void refuse(const std::string& what) const {
    if (plan_.hosts.size() > 1)
      say(cfg_.err_fd, "on host " + host_of(-1) + ": " + what + "; nothing was started there");
    else
      say(cfg_.err_fd, what + "; nothing was started");
  }
  // "rank 3", or for a spawned process what its label says.
  std::string name_of(const RankState& r) const {
    return r.label.empty() ? "rank " + std::to_string(r.rank) : r.label;
  }
  Env spawn_env(const SpawnApp& a) const;
  // The --tag-output prefix of a process named `name` ("3", "spawn1:0").
  std::string tag_prefix(const std::string& name) const {
    if (!cfg_.tag_output) return "";
    const std::string& here = plan_.hosts[static_cast<size_t>(cfg_.host)].inventory.host;
    return plan_.hosts.size() > 1 ? "[" + here + ":" + name + "] " : "[" + name + "] ";
  }
  std::optional<std::string> spawn_wdir(const SpawnApp& a) const;
  Resolved spawn_program(const SpawnApp& a, const Env& env) const;
  void spawn_launch(const SpawnLaunch& launch, std::function<void(int, std::string)> done) override;
  // A pipe for a local process's stdout or stderr, its read end kept as a
  // stream forwarded with `prefix`; returns the write end (-1: pipe failed).
  int add_output_pipe(int id, OutKind kind, const std::string& prefix);
  void watch_stream(size_t index);
  void record_failure(RankState& r, int status, const std::string& kind, const std::string& how, bool quiet = false);
  // A rank of the job that ended (status 0) without initialising PMIx or
  // PMI while another rank here did: a failure, as it holds up the fences.
  void never_initialised(RankState& r);
  void apply_policy();
  void terminate_all(int sig);
  void pass_on(int sig);
  void arm_kill_deadline();
  void reap();
  void handle_signal(const signalfd_siginfo& si);
  void read_output(OutStream& s);
  void close_stream(OutStream& s);
  void output_failed(OutKind kind, int err, bool said = false);
  void modex_request(int rank, std::function<void(int, std::string)> reply) override {
    if (pmix_ && state_of(rank) != nullptr) {
      pmix_->local_modex(rank, std::move(reply));
    } else {
      reply(PMIX_ERR_NOT_FOUND, std::string());
    }
  }
  void peer_failed(int rank, int status, const std::string& kind, const std::string& host,
                   const std::string& text) override {
    log(LogLevel::kDebug, "peer failed: %s", text.c_str());
    if (pmix_) pmix_->notify_failure(rank, status, kind, host, text, [] {});
  }
  void pause_output(bool pause) override {
    if (pause == output_paused_) return;
    output_paused_ = pause;
    // Out of the epoll set while paused: a pipe whose writer exited would
    // report EPOLLHUP on every turn otherwise.
    for (size_t i = 0; i < streams_.size(); ++i) {
      if (streams_[i]->fd < 0) continue;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kTagStream | i;
      epoll_ctl(epfd_, pause ? EPOLL_CTL_DEL : EPOLL_CTL_ADD, streams_[i]->fd, &ev);
    }
  }
  void stdin_data(std::string data) override {
    if (stdin_) stdin_->push(std::move(data));
  }
  void stdin_end() override {
    if (stdin_) stdin_->push_end();
  }
  void output_closed(int stream, int err) override {
    output_failed(stream == 1 ? OutKind::kStdout : OutKind::kStderr, err, true);
  }
  int prepare_output_dir();
  int running_count() const;
  // Whether the plan called this host oversubscribed (its ranks'
  // ACCRUN_OVERSUBSCRIBED), not another host of the job.
  bool planned_oversubscribed() const;
  std::vector<int> running_ranks() const;
  // Whether every rank a fence signature names ("*": the job) is on this host.
  bool all_here(const std::string& signature) const;
  // Children that are not the job's: the janitor and what the process had
  // before the job (an agent's launch agents for its part of the tree).
  std::vector<pid_t> not_ours() const {
    std::vector<pid_t> v = children_before_;
    v.push_back(janitor_.pid());
    return v;
  }

  // Copies: a prepared daemon exists before its job's plan does.
  Plan plan_;
  RunConfig cfg_;
  Upstream* up_;  // the job controller: never null
  std::unique_ptr<JobRemains>* remains_out_;  // run_job's: may be null
  Clock::time_point t0_ = Clock::now();
  std::string jobid_;
  std::string rendezvous_;
  std::string shm_dir_;
  Janitor janitor_;
  std::vector<pid_t> children_before_;  // not_ours()
  std::vector<int> owner_fds_;          // owner locks of the job's directories
  bool janitor_reaped_ = false;
  int epfd_ = -1;
  int sigfd_ = -1;
  sigset_t old_mask_;
  bool mask_set_ = false;
  struct sigaction old_pipe_ {};
  int old_subreaper_ = 0;
  bool prepared_ = false;
  std::map<int, int> spawned_host_;     // id of every spawned process of the job -> its plan host
  std::unique_ptr<UpcallQueue> queue_;
  std::unique_ptr<PmixServer> pmix_;
  std::unique_ptr<pmi::PmiService> pmi_;  // --mpi pmi|auto: the PMI-1/PMI-2 sockets
  std::unique_ptr<ObjectServer> objects_;  // across hosts: the job's objects for other hosts

  std::vector<int> local_ranks_;        // global ranks on this host
  std::map<int, RankState> ranks_;      // by global rank
  std::optional<int> first_connected_;  // the first rank here that initialised PMIx or PMI
  std::vector<int> ended_before_init_;  // ranks that ended (status 0) before any rank here initialised
  std::map<pid_t, int> pid_rank_;
  std::vector<std::unique_ptr<OutStream>> streams_;
  std::unique_ptr<StdinForwarder> stdin_;  // when local ranks take accrun's stdin
  std::vector<int> output_files_;      // --output-dir: each local rank's stdout, stderr
  bool output_broken_[2] = {false, false};  // by OutKind: writing accrun's output failed
  int output_errno_ = 0;               // the first such failure's errno

  std::optional<int> exit_code_;        // the first decisive event's status
  bool terminating_ = false;            // we have signalled the ranks
  int passed_signal_ = 0;               // a signal this agent heard on its own and passed to its ranks
  int interrupts_ = 0;
  std::optional<Clock::time_point> job_deadline_;
  std::optional<Clock::time_point> kill_deadline_;
  std::optional<Clock::time_point> policy_deadline_;  // waiting for a failure event to go out
  bool policy_pending_ = false;
  bool upstream_gone_ = false;
  bool output_paused_ = false;  // pause_output()
};


Daemon::~Daemon() {
  for (auto& s : streams_)
    if (s->fd >= 0) close(s->fd);
  for (int fd : output_files_)
    if (fd >= 0) close(fd);
  if (sigfd_ >= 0) close(sigfd_);
  if (epfd_ >= 0) close(epfd_);
  if (mask_set_) sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
  if (mask_set_) sigaction(SIGPIPE, &old_pipe_, nullptr);
  if (mask_set_) prctl(PR_SET_CHILD_SUBREAPER, old_subreaper_);
}

RankState* Daemon::state_of(int rank) {
  auto it = ranks_.find(rank);
  return it == ranks_.end() ? nullptr : &it->second;
}

bool Daemon::all_here(const std::string& signature) const {
  auto members = msg::parse_signature(signature);
  if (!members) return false;
  if (members->all) return plan_.hosts.size() == 1;
  for (int id : members->ids)
    if (host_index(id) != cfg_.host) return false;
  return true;
}

bool Daemon::planned_oversubscribed() const {
  for (int r : local_ranks_) {
    const Env& env = plan_.ranks[static_cast<std::size_t>(r)].env;
    const auto it = env.find("ACCRUN_OVERSUBSCRIBED");
    if (it != env.end() && it->second == "1") return true;
  }
  return false;
}

int Daemon::running_count() const {
  int n = 0;
  for (const auto& [r, s] : ranks_) n += s.running ? 1 : 0;
  return n;
}

std::vector<int> Daemon::running_ranks() const {
  std::vector<int> out;
  for (const auto& [r, s] : ranks_)
    if (s.running) out.push_back(r);
  return out;
}

void Daemon::on_connected(int rank) {
  RankState* r = state_of(rank);
  if (r == nullptr) return;
  r->connected = true;
  if (is_spawned_id(rank)) return;
  if (first_connected_) return;
  first_connected_ = rank;
  // Across hosts the controller judges it: the ranks may be on different hosts.
  if (plan_.hosts.size() > 1) return up_->initialised(rank);
  // Ranks that ended before any rank here initialised: now they leave
  // this one waiting in the job's fences.
  std::vector<int> early;
  early.swap(ended_before_init_);
  for (int e : early)
    if (RankState* gone = state_of(e)) never_initialised(*gone);
}

void Daemon::never_initialised(RankState& r) {
  record_failure(r, 1, "no-init",
                 "exited without initialising PMIx or PMI (MPI_Init), while rank " + std::to_string(*first_connected_) +
                     " did: once one rank initialises, every rank must, or the others wait for it in the job's "
                     "fences for ever");
}

void Daemon::on_finalized(int rank) {
  if (RankState* r = state_of(rank)) r->finalized = true;
}

void Daemon::on_abort(int rank, int status, const std::string& message) {
  RankState* r = state_of(rank);
  if (r == nullptr) return;
  r->aborted = true;
  r->abort_status = status;
  r->abort_message = message;
  std::string how = "called abort with status " + std::to_string(status);
  // Open MPI passes "N/A" when MPI_Abort has no message.
  if (!message.empty() && message != "N/A") how += " (" + message + ")";
  // An exit status keeps 8 bits: a code that would read as success (256)
  // is a failure all the same.
  record_failure(*r, status != 0 && (status & 0xff) == 0 ? 1 : status, "abort", how);
}

int Daemon::add_output_pipe(int id, OutKind kind, const std::string& prefix) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  auto s = std::make_unique<OutStream>();
  s->fd = p[0];
  s->rank = id;
  s->kind = kind;
  Upstream* up = up_;
  int stream = kind == OutKind::kStdout ? 1 : 2;
  s->lines = std::make_unique<LineAssembler>(prefix, [up, stream](const char* d, size_t n) {
    up->output(stream, d, n);
    return true;
  });
  streams_.push_back(std::move(s));
  return p[1];
}

void Daemon::watch_stream(size_t index) {
  if (output_paused_ || streams_[index]->fd < 0) return;  // pause_output() adds it back
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kTagStream | index;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, streams_[index]->fd, &ev);
}

// The environment a spawned process of `a` starts from: accrun's, less an
// enclosing launcher's, then -x, then the application's own ("NAME=value").
Env Daemon::spawn_env(const SpawnApp& a) const {
  Env env = filter_inherited(cfg_.inherited);
  apply_exports(env, cfg_);
  for (const std::string& kv : a.env)
    if (size_t eq = kv.find('='); eq != std::string::npos && eq > 0) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  return env;
}

// Where an application of a spawn runs: its cwd, else its PMIX_WDIR, else
// --wdir (on_spawn puts the request's PMIX_WDIR in the cwd).
std::optional<std::string> Daemon::spawn_wdir(const SpawnApp& a) const {
  if (!a.cwd.empty()) return a.cwd;
  if (auto w = a.info.find(PMIX_WDIR); w != a.info.end()) return w->second;
  return cfg_.wdir;
}

// Finds an application's program as a rank's would be found; its status
// and message are resolve_program's.
Resolved Daemon::spawn_program(const SpawnApp& a, const Env& env) const {
  auto path = env.find("PATH");
  std::optional<std::string> wdir = spawn_wdir(a);
  Resolved res = resolve_program(a.cmd, path != env.end() ? path->second : "/usr/local/bin:/usr/bin:/bin", wdir);
  if (res.status == 0) {
    Resolved bad = check_interpreter(a.cmd, res.path, wdir);
    if (bad.status != 0) res = bad;
  }
  return res;
}

// PMIx_Spawn (MPI_Comm_spawn) from a local process.  What this host can
// judge is checked here (the programs exist, the job is not ending); the
// job controller places the processes and has every agent start its own
// (spawn_launch).  See accrun(7), "Spawned processes".
void Daemon::on_spawn(SpawnRequest req, std::function<void(int, std::string)> done) {
  RankState* parent = state_of(req.requester);
  req.who = parent != nullptr ? name_of(*parent) : "a process";
  int total = 0;
  for (const SpawnApp& a : req.apps) total += std::max(a.maxprocs, 0);
  auto refuse = [&](int status, const std::string& why) {
    say(cfg_.err_fd, req.who + "'s MPI_Comm_spawn (PMIx_Spawn) of " + std::to_string(total) +
                         " process(es) was refused: " + why);
    done(status, std::string());
  };
  if (parent == nullptr) return refuse(PMIX_ERR_BAD_PARAM, "the caller is not a process of this job on this host");
  if (total <= 0) return refuse(PMIX_ERR_BAD_PARAM, "it asks for no processes");
  if (terminating_) return refuse(PMIX_ERR_OUT_OF_RESOURCE, "the job is ending");
  for (SpawnApp& a : req.apps) {
    // The directory is the requester's, on whichever host: the app's, else
    // the request's PMIX_WDIR, else --wdir.
    if (a.cwd.empty() && a.info.count(PMIX_WDIR) == 0)
      if (auto w = req.info.find(PMIX_WDIR); w != req.info.end()) a.cwd = w->second;
    Resolved res = spawn_program(a, spawn_env(a));
    if (res.status != 0) return refuse(PMIX_ERR_NOT_FOUND, res.message);
    if (auto w = spawn_wdir(a); w && a.cwd.empty()) a.cwd = *w;
  }
  up_->spawn(req, std::move(done));
}

// A spawn the controller placed: the namespace on this host's PMIx server
// (every host's, so that all of them know its processes), and this host's
// processes of it started as the ranks are (own process group, output
// forwarded, the failure policy and --timeout apply; the job ends when
// they have too).
void Daemon::spawn_launch(const SpawnLaunch& l, std::function<void(int, std::string)> done) {
  if (!pmix_) return done(PMIX_ERR_UNREACH, "this host's PMIx server has stopped");
  int total = static_cast<int>(l.host_of.size());
  PmixJob job;
  job.nspace = l.nspace;
  job.jobid = job.nspace;
  job.size = total;
  // Its nodes are the hosts that run some of its processes, in plan order.
  std::vector<int> node_of_host(plan_.hosts.size(), -1);
  for (int h : l.host_of)
    if (h < 0 || static_cast<size_t>(h) >= plan_.hosts.size()) return done(PMIX_ERR_BAD_PARAM, "a host out of range");
  for (int h : l.host_of) node_of_host[static_cast<size_t>(h)] = 0;
  for (size_t h = 0; h < plan_.hosts.size(); ++h) {
    if (node_of_host[h] < 0) continue;
    node_of_host[h] = static_cast<int>(job.hostnames.size());
    job.hostnames.push_back(plan_.hosts[h].inventory.host);
  }
  job.ranks_by_node.assign(job.hostnames.size(), {});
  for (int i = 0; i < total; ++i) {
    int h = l.host_of[static_cast<size_t>(i)];
    job.ranks_by_node[static_cast<size_t>(node_of_host[static_cast<size_t>(h)])].push_back(i);
    spawned_host_[l.base + i] = h;
  }
  job.node = node_of_host[static_cast<size_t>(cfg_.host)];
  job.tmpdir = rendezvous_ + "/job";
  job.nsdir = rendezvous_ + "/job";
  job.app_of = l.app_of;
  pmix_proc_t parent_proc;
  if (pmix_->proc_of(l.requester, &parent_proc)) job.parent = parent_proc;
  if (Status s = pmix_->register_spawned(job, l.base); !s) return done(PMIX_ERROR, s.message());
  if (job.node < 0) return done(PMIX_SUCCESS, std::string());
  const std::vector<int>& mine = job.ranks_by_node[static_cast<size_t>(job.node)];

  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  bool oversubscribed = planned_oversubscribed();
  if (!oversubscribed) {
    long pus = sysconf(_SC_NPROCESSORS_ONLN);
    oversubscribed = pus > 0 && static_cast<long>(running_count() + static_cast<int>(mine.size())) > pus;
  }
  const std::string& here = plan_.hosts[static_cast<size_t>(cfg_.host)].inventory.host;
  pid_t self = getpid();
  auto fail = [&](const std::string& why) {
    if (devnull >= 0) close(devnull);
    done(PMIX_ERROR, why);
  };
  for (size_t li = 0; li < mine.size(); ++li) {
    int rank = mine[li];
    int id = l.base + rank;
    const SpawnApp& a = l.apps[static_cast<size_t>(l.app_of[static_cast<size_t>(rank)])];
    Env e = spawn_env(a);
    Resolved res = spawn_program(a, e);
    // A program missing on this host fails like a rank's exec.
    std::string path = res.status == 0 ? res.path : a.cmd;
    std::optional<std::string> wdir = spawn_wdir(a);
    struct stat st_dir;
    if (wdir && (stat(wdir->c_str(), &st_dir) != 0 || !S_ISDIR(st_dir.st_mode))) wdir = cfg_.wdir;

    ChildSpec c;
    c.in_fd = devnull;
    c.hup_ignored = cfg_.hup_ignored;
    std::vector<int> close_after;
    std::string prefix = tag_prefix("spawn" + std::to_string(l.k) + ":" + std::to_string(rank));
    for (int which = 0; which < 2; ++which) {
      int fd = add_output_pipe(id, which == 0 ? OutKind::kStdout : OutKind::kStderr, prefix);
      if (fd < 0) {
        for (int f : close_after) close(f);
        return fail("pipe: " + std::string(std::strerror(errno)));
      }
      (which == 0 ? c.out_fd : c.err_fd) = fd;
      close_after.push_back(fd);
      if (output_broken_[which]) close_stream(*streams_.back());
      watch_stream(streams_.size() - 1);
    }
    auto client = pmix_->client_env(id);
    if (!client) {
      for (int f : close_after) close(f);
      return fail(client.status().message());
    }
    for (const auto& [key, v] : *client) e[key] = v;
    add_launch_env(e, rank, jobid_, shm_dir_, oversubscribed, false);
    e["ACCRUN_HOST"] = here;
    int local = static_cast<int>(li), nlocal = static_cast<int>(mine.size());
    for (const auto& [key, v] : std::initializer_list<std::pair<const char*, int>>{
             {"ACCRUN_RANK", rank}, {"OMPI_COMM_WORLD_RANK", rank}, {"ACCRUN_SIZE", total},
             {"OMPI_COMM_WORLD_SIZE", total}, {"ACCRUN_LOCAL_RANK", local}, {"OMPI_COMM_WORLD_LOCAL_RANK", local},
             {"ACCRUN_LOCAL_SIZE", nlocal}, {"OMPI_COMM_WORLD_LOCAL_SIZE", nlocal},
             {"ACCRUN_NODE_RANK", job.node}, {"ACCRUN_SPAWNED_BY", l.spawner}})
      e[key] = std::to_string(v);
    e["ACCRUN_NAMESPACE"] = l.nspace;
    // The job's torch and PMI variables describe the job's ranks, not these.
    for (const char* key : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "PMI_FD", "PMI_RANK", "PMI_SIZE",
                            "PMI_JOBID"})
      e.erase(key);
    if (objects_) e[objects::kServerEnv] = objects_->addresses();
    for (const auto& [key, v] : e) c.env_storage.push_back(key + "=" + v);
    for (auto& str : c.env_storage) c.envp.push_back(str.data());
    c.envp.push_back(nullptr);
    std::vector<std::string> args = a.argv.empty() ? std::vector<std::string>{a.cmd} : a.argv;
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    ExecReport report;
    pid_t pid = spawn_child(path.c_str(), argv.data(), c, wdir ? wdir->c_str() : nullptr, self, &report);
    for (int f : close_after) close(f);
    if (pid < 0) return fail("cannot start spawned process " + std::to_string(rank) + ": " + std::strerror(errno));
    janitor_.watch_group(pid);
    RankState& st = ranks_[id];
    st.rank = id;
    st.pid = pid;
    st.running = true;
    st.label = "spawned process " + std::to_string(rank) + " of " + l.nspace + " (started by " + l.who + ")";
    pid_rank_[pid] = id;
    if (report.stage != 0)
      say(cfg_.err_fd, st.label + ": cannot execute " + (res.status != 0 ? res.message : path + ": " + std::strerror(report.err)));
    if (cfg_.report_bindings) say(cfg_.err_fd, st.label + " on host " + here + " not bound with no devices");
  }
  if (devnull >= 0) close(devnull);
  log(LogLevel::kDebug, "started %zu process(es) of %s", mine.size(), l.nspace.c_str());
  done(PMIX_SUCCESS, std::string());
}

// PMIx_Job_control: kill, terminate or signal processes of the job; those
// on other hosts through the controller.
void Daemon::on_job_control(int requester, std::vector<int> ids, int sig, bool stop, std::function<void(int)> done) {
  std::vector<int> remote;
  for (int id : ids) {
    int h = host_index(id);
    if (h < 0) continue;
    if (h != cfg_.host) remote.push_back(id);
  }
  log(LogLevel::kDebug, "job control from %d: signal %d to %zu process(es)%s", requester, sig, ids.size(),
      stop ? " (stop)" : "");
  signal_procs(sig, stop, ids);
  if (!remote.empty() && !upstream_gone_) up_->signal_procs(sig, stop, remote);
  done(ids.empty() ? PMIX_ERR_NOT_FOUND : PMIX_SUCCESS);
}

void Daemon::signal_procs(int sig, bool stop, const std::vector<int>& ids) {
  for (int id : ids) {
    RankState* r = state_of(id);
    if (r == nullptr) continue;  // not this host's
    if (stop) r->stop_requested = true;
    if (r->running) signal_group(r->pid, sig);
  }
}

// quiet: the failure is a consequence of one already reported (a rank killed
// by SIGPIPE after accrun's output went away): counted, not printed.
void Daemon::record_failure(RankState& r, int status, const std::string& kind, const std::string& how, bool quiet) {
  if (r.failed) return;
  r.failed = true;
  // Deaths we caused by signalling the ranks are not failures of their own.
  if (terminating_) return;
  bool first = !exit_code_.has_value();
  if (!first && cfg_.on_failure == OnFailure::kKill) return;
  std::string text = name_of(r) + " on host " + host_of(r.rank) + " " + how;
  if (!quiet) say(cfg_.err_fd, text);
  if (first) exit_code_ = status;
  // Across hosts the controller decides for the whole job, and tells the
  // other hosts' processes of every failure (a spawned process by its id).
  up_->rank_failed(r.rank, status, kind, text);
  bool kill = cfg_.on_failure == OnFailure::kKill;
  if (kill) {
    policy_pending_ = true;
    // The event goes to the survivors first; the policy follows once the
    // library has taken it (bounded, in case it never reports back).
    policy_deadline_ = Clock::now() + std::chrono::seconds(2);
  }
  if (pmix_) {
    pmix_->notify_failure(r.rank, status, kind, host_of(r.rank), text, [this] {
      if (policy_pending_) apply_policy();
    });
  } else if (kill) {
    apply_policy();
  }
}

void Daemon::upstream_lost() {
  upstream_gone_ = true;
  epoll_ctl(epfd_, EPOLL_CTL_DEL, up_->fd(), nullptr);
  if (up_->links_fd() >= 0) epoll_ctl(epfd_, EPOLL_CTL_DEL, up_->links_fd(), nullptr);
  if (running_count() > 0) say(cfg_.err_fd, "lost the job controller; killing this host's ranks");
  if (!exit_code_) exit_code_ = 1;
  terminating_ = true;
  policy_pending_ = false;
  terminate_all(SIGKILL);
}

void Daemon::terminate(int sig) {
  if (!passed_through(sig)) policy_pending_ = false;
  terminate_all(sig);
}

void Daemon::apply_policy() {
  if (!policy_pending_) return;
  policy_pending_ = false;
  policy_deadline_.reset();
  int n = 0;
  for (const auto& [rank, s] : ranks_) n += s.running && !s.failed ? 1 : 0;
  bool output_gone = output_broken_[0] || output_broken_[1];  // already said why
  // Across hosts the controller ends the other hosts' ranks; this agent
  // knows only its own.
  if (!terminating_ && !output_gone) {
    if (plan_.hosts.size() > 1)
      say(cfg_.err_fd, "terminating the ranks still running on every host (--on-failure kill)");
    else if (n > 0)
      say(cfg_.err_fd, "terminating the other " + std::to_string(n) + " rank(s) (--on-failure kill)");
  }
  terminate_all(SIGTERM);
}

void Daemon::terminate_all(int sig) {
  if (!passed_through(sig)) {
    terminating_ = true;
    if (sig != SIGKILL) arm_kill_deadline();
  }
  pass_on(sig);
}

// SIGKILL for the ranks still running --kill-grace seconds from now.
void Daemon::arm_kill_deadline() {
  if (!kill_deadline_)
    kill_deadline_ = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(cfg_.kill_grace_s * 1000));
}

void Daemon::reap() {
  // A client's "finalized" upcall is queued before it can exit: run the
  // queue first so a clean exit is not taken for an exit without finalize.
  if (queue_) queue_->drain();
  for (;;) {
    int st = 0;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid <= 0) break;
    if (pid == janitor_.pid()) {
      janitor_reaped_ = true;
      say(cfg_.err_fd, "warning: the janitor process exited early");
      continue;
    }
    auto it = pid_rank_.find(pid);
    if (it == pid_rank_.end()) continue;  // an orphan we adopted as subreaper
    RankState& r = ranks_[it->second];
    r.running = false;
    if (is_spawned_id(r.rank) && !upstream_gone_) up_->spawned_ended(r.rank);
    if (r.stop_requested) {
      // Ended at the job's own request (PMIx_Job_control): not a failure.
      log(LogLevel::kDebug, "%s ended as PMIx_Job_control asked", name_of(r).c_str());
      continue;
    }
    if (WIFSIGNALED(st)) {
      int sig = WTERMSIG(st);
      bool output_gone = output_broken_[0] || output_broken_[1];
      std::string how = "was killed by " + signal_name(sig);
      if (passed_signal_ != 0) {
        how += std::string(" (this host's agent received ") + sigabbrev_np(passed_signal_) + " and passed it on" +
               (sig == passed_signal_ ? ")" : ", then killed it)");
      }
      record_failure(r, 128 + sig, "signal", how, sig == SIGPIPE && output_gone);
    } else if (WIFEXITED(st)) {
      int code = WEXITSTATUS(st);
      if (r.aborted) {
        // Already reported when it called abort.
      } else if (code != 0) {
        record_failure(r, code, "exit", "exited with status " + std::to_string(code));
      } else if (r.connected && !r.finalized) {
        record_failure(r, 1, "no-finalize", "exited without finalizing after it initialised PMIx or PMI");
      } else if (!r.connected && !is_spawned_id(r.rank) && !r.failed && !terminating_ && !upstream_gone_) {
        // A rank that never initialised holds up every fence of the job's
        // once the others do (the PMIx server waits for each local rank).
        if (plan_.hosts.size() > 1) {
          up_->ended_uninitialised(r.rank);
        } else if (first_connected_) {
          never_initialised(r);
        } else {
          ended_before_init_.push_back(r.rank);
        }
      }
    }
  }
}

void Daemon::handle_signal(const signalfd_siginfo& si) {
  int sig = static_cast<int>(si.ssi_signo);
  if (sig == SIGCHLD) {
    reap();
    return;
  }
  if (!cfg_.own_signals) return;  // the controller forwards what the ranks hear
  // accrun runs under nohup: a hangup of this host's session (its ssh, its
  // step) is not passed to the ranks either; losing the controller still
  // ends them.
  if (sig == SIGHUP && cfg_.hup_ignored) return;
  if (sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGCONT) {
    terminate_all(sig);
    return;
  }
  if (sig == SIGTSTP) {
    // Ctrl-Z: the ranks stop, then accrun itself, so the shell gets the
    // terminal back; fg (SIGCONT to accrun) resumes them all.
    terminate_all(SIGTSTP);
    return;
  }
  ++interrupts_;
  if (interrupts_ == 1) {
    say(cfg_.err_fd, std::string("received ") + sigabbrev_np(sig) + ", forwarding it to the ranks (again to kill them)");
    // Forwarded as it came: SIGINT stays SIGINT, so programs that handle
    // Ctrl-C see Ctrl-C.  This agent heard it on its own (scancel of its
    // step, a kill on its host), not through the controller: the ranks it
    // ends are failures as any other, which the controller reports naming
    // them and answers with the job's failure policy.
    passed_signal_ = sig;
    pass_on(sig);
    arm_kill_deadline();
  } else {
    pass_on(SIGKILL);
  }
}

// Signals the running ranks without taking their deaths for ours: they are
// reported as failures.
void Daemon::pass_on(int sig) {
  for (auto& [rank, s] : ranks_)
    if (s.running) signal_group(s.pid, sig);
}

void Daemon::close_stream(OutStream& s) {
  if (s.fd < 0) return;
  epoll_ctl(epfd_, EPOLL_CTL_DEL, s.fd, nullptr);
  close(s.fd);
  s.fd = -1;
  s.lines->finish();
}

// Writing accrun's stdout (or stderr) failed: the reader went away (EPIPE)
// or the file cannot take more (ENOSPC, EIO).  As in a shell pipeline, the
// writers learn it: the read ends of every rank's pipes of that kind are
// closed, so each rank gets SIGPIPE (or EPIPE) on its next write, and no
// more of that output is read.  One line says so; the ranks' SIGPIPE deaths
// are not reported one by one (accrun(1), OUTPUT and EXIT STATUS).
// `said`: the controller, which could not write it, has said so already.
void Daemon::output_failed(OutKind kind, int err, bool said) {
  auto k = static_cast<size_t>(kind);
  if (output_broken_[k]) return;
  output_broken_[k] = true;
  if (output_errno_ == 0) output_errno_ = err;
  for (auto& s : streams_) {
    if (s->kind != kind || s->fd < 0) continue;
    epoll_ctl(epfd_, EPOLL_CTL_DEL, s->fd, nullptr);
    close(s->fd);
    s->fd = -1;
  }
  if (said) return;
  say(cfg_.err_fd, std::string("cannot write the ranks' standard ") + (kind == OutKind::kStdout ? "output" : "error") +
                       ": " + std::strerror(err) + "; closing it for every rank (a rank writing to it gets SIGPIPE)");
}

void Daemon::read_output(OutStream& s) {
  // One read per wake-up and stream keeps a flooding rank from starving
  // the others (epoll is level-triggered).
  char buf[65536];
  ssize_t n = read(s.fd, buf, sizeof buf);
  if (n > 0) {
    s.lines->feed(buf, static_cast<size_t>(n));
    if (s.lines->broken()) output_failed(s.kind, s.lines->error());
    return;
  }
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  close_stream(s);
}

int Daemon::run() {
  int status = setup_and_spawn();
  if (status < 0) {
    up_->phase(1);
    if (!up_->catch_up(*this)) upstream_lost();
    status = loop();
  }
  if (!upstream_gone_) up_->phase(2);
  finish();
  // Output was lost although no rank failed (they wrote it before the pipes
  // were closed): accrun reports it as a pipeline's writer would, 141 for a
  // reader that went away (128 + SIGPIPE), 1 for another write error.
  if (status == 0 && output_errno_ != 0) status = output_errno_ == EPIPE ? 128 + SIGPIPE : 1;
  return status;
}

// --output-dir: creates DIR (and its parents), DIR/rank.R and opens each
// local rank's stdout and stderr there, before anything starts, so that an
// unusable directory is bad input (status 2) with nothing started.
int Daemon::prepare_output_dir() {
  const std::string& dir = *cfg_.output_dir;
  // What this call made, removed again if it refuses: a refused run changes
  // nothing in DIR (no file is truncated before every one has passed).
  std::vector<std::string> made_files, made_dirs;
  auto give_up = [&](const std::string& why) {
    refuse("--output-dir " + dir + ": " + why);
    for (int& fd : output_files_) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
    output_files_.clear();
    for (const std::string& f : made_files) unlink(f.c_str());
    for (auto d = made_dirs.rbegin(); d != made_dirs.rend(); ++d) rmdir(d->c_str());
    return 2;
  };
  auto fail = [&](const std::string& path, int err) { return give_up("cannot create " + path + ": " + std::strerror(err)); };
  auto make_dir = [](const std::string& path) {
    if (mkdir(path.c_str(), 0755) == 0) return 0;
    int err = errno;
    struct stat st;
    if (err == EEXIST) return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
    return err;
  };
  // A symbolic link on the way to DIR, or DIR itself, planted by another
  // user would choose where accrun writes: only links of this user or of
  // root are followed.
  for (size_t end = dir.find('/', 1);; end = dir.find('/', end + 1)) {
    const std::string part = dir.substr(0, end);
    struct stat ls;
    if (lstat(part.c_str(), &ls) == 0 && S_ISLNK(ls.st_mode) && ls.st_uid != geteuid() && ls.st_uid != 0)
      return give_up(part + " is a symbolic link of uid " + std::to_string(ls.st_uid) +
                     " (accrun follows only links of its own user or of root on the way to its output: "
                     "name the directory itself, or choose another --output-dir)");
    if (end == std::string::npos) break;
  }
  for (size_t slash = dir.find('/', 1); slash != std::string::npos; slash = dir.find('/', slash + 1)) {
    std::string parent = dir.substr(0, slash);
    if (int err = make_dir(parent); err != 0 && err != EEXIST) {
      struct stat st;
      if (stat(parent.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;  // e.g. "/" or not ours to create
      return fail(parent, err);
    }
  }
  if (int err = make_dir(dir); err != 0) return fail(dir, err);
  // DIR may be shared (a world-writable scratch directory): what accrun makes
  // inside it, rank.R and its files, is reached without following a symbolic
  // link and must be this user's alone, or another user could have planted
  // a link that makes accrun truncate a file of its choosing.
  auto not_ours = [&](const std::string& path, const std::string& why) {
    return give_up(path + " " + why +
                   " (accrun writes only into directories and files of its own user: remove it, or choose another "
                   "--output-dir)");
  };
  struct Closer {  // the directories opened on the way
    int fd;
    ~Closer() {
      if (fd >= 0) close(fd);
    }
  };
  const uid_t me = geteuid();
  const Closer dfd{open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (dfd.fd < 0) return fail(dir, errno);
  struct stat st;
  for (int r : local_ranks_) {
    const std::string name = "rank." + std::to_string(r);
    const std::string rdir = dir + "/" + name;
    if (mkdirat(dfd.fd, name.c_str(), 0755) == 0) {
      made_dirs.push_back(rdir);
    } else if (errno != EEXIST) {
      return fail(rdir, errno);
    }
    const Closer rfd{openat(dfd.fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
    if (rfd.fd < 0 && (errno == ELOOP || errno == ENOTDIR)) {
      bool link = fstatat(dfd.fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
      return not_ours(rdir, link ? "is a symbolic link" : "is not a directory");
    }
    if (rfd.fd < 0) return fail(rdir, errno);
    if (fstat(rfd.fd, &st) != 0 || st.st_uid != me) return not_ours(rdir, "belongs to uid " + std::to_string(st.st_uid));
    for (const char* file : {"stdout", "stderr"}) {
      const std::string path = rdir + "/" + file;
      int fd = openat(rfd.fd, file, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (fd >= 0) {
        made_files.push_back(path);
      } else if (errno == EEXIST) {
        fd = openat(rfd.fd, file, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
      }
      if (fd < 0) return errno == ELOOP ? not_ours(path, "is a symbolic link") : fail(path, errno);
      output_files_.push_back(fd);
      if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return not_ours(path, "is not a regular file");
      if (st.st_uid != me) return not_ours(path, "belongs to uid " + std::to_string(st.st_uid));
      if (st.st_nlink != 1) return not_ours(path, "has other names (hard links)");
    }
  }
  // Truncated only once every one is known to be a file of ours with no
  // other name.
  for (int fd : output_files_)
    if (ftruncate(fd, 0) != 0) return give_up(std::string("cannot empty a rank's file: ") + std::strerror(errno));
  return 0;
}

Status Daemon::prepare() {
  if (prepared_) return Status();
  prepared_ = true;  // what it leaves half done, finish() undoes
  // Before the PMIx server's threads exist: room for the ranks' descriptors
  // (for as many as 500 when they are not known yet, as in prepare_job).
  reserve_fd_table(64 + 8 * std::max<size_t>(local_ranks_.size(), 500));
  // Signals: blocked before any thread exists (PMIx starts its own), read
  // through a signalfd, unblocked again in each child.
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : kSignals) sigaddset(&mask, s);
  sigprocmask(SIG_BLOCK, &mask, &old_mask_);
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ign, &old_pipe_);
  prctl(PR_GET_CHILD_SUBREAPER, &old_subreaper_);
  children_before_ = children_of_self();
  mask_set_ = true;
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  sigfd_ = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  if (sigfd_ < 0 || epfd_ < 0) return system_error("cannot create the event loop");

  // The janitor first, then the directories it knows about.
  jobid_ = cfg_.jobid.empty() ? new_job_id() : cfg_.jobid;
  std::string uid = std::to_string(getuid());
  // Across hosts every agent shares the job id (one PMIx namespace); its
  // directories add the host's index, so agents that share /tmp or /dev/shm
  // (several simulated hosts on one machine) never collide.
  std::string dir_id = jobid_;
  if (plan_.hosts.size() > 1) {
    char node[16];
    std::snprintf(node, sizeof node, "%06x", static_cast<unsigned>(cfg_.host));
    dir_id += node;
  }
  rendezvous_ = cfg_.tmpdir + "/accrun." + uid + "." + dir_id;
  shm_dir_ = cfg_.shm_root + "/accrun." + uid + "." + dir_id;
  log(LogLevel::kDebug, "job %s: %s, %s", jobid_.c_str(), rendezvous_.c_str(), shm_dir_.c_str());
  // Directories of this user's jobs whose accrun and janitor both died (a
  // cgroup kill, the OOM killer) go now: nobody holds their owner lock.
  sweep_stale_job_dirs(cfg_.tmpdir, cfg_.shm_root);
  auto jan = Janitor::start({rendezvous_, shm_dir_},
                            {"ACCRUN_JOB_ID=" + jobid_, "ACCRUN_HOST=" + plan_.hosts[static_cast<size_t>(cfg_.host)].inventory.host});
  if (!jan) return jan.status();
  janitor_ = std::move(*jan);
  if (Status s = janitor_.watch_upstream(up_->fd()); !s) return s;
  trace(t0_, "janitor started");
  up_->tick();  // a slow start is not a dead host
  for (const std::string& d : {rendezvous_, rendezvous_ + "/job", shm_dir_, shm_dir_ + "/ompi"}) {
    if (Status s = make_private_dir(d); !s) return s;
  }
  trace(t0_, "dirs made");
  // The owner locks say the directories are in use; the janitor holds a
  // copy, so they stay held while either process lives.
  for (const std::string& d : {rendezvous_, shm_dir_}) {
    auto lock = hold_owner_lock(d);
    if (!lock) return lock.status();
    owner_fds_.push_back(*lock);
    if (Status s = janitor_.hold(*lock); !s) return s;
  }

  trace(t0_, "locks held");
  // Across hosts, this agent serves the job's objects to the other hosts'
  // ranks, on the address the controller reached us at (or, for the
  // controller's own host, every address the controller offers).
  if (plan_.hosts.size() > 1) {
    // Objects leave with the congestion control of the ranks' store.
    Env ranks_env = cfg_.inherited;
    apply_exports(ranks_env, cfg_);
    const auto cc = ranks_env.find("ACCRUN_STORE_TCP_CONGESTION");
    auto server = ObjectServer::start(wire::addresses_reached_by(up_->fd()), shm_dir_,
                                      cc != ranks_env.end() && valid_tcp_congestion(cc->second) ? cc->second : "");
    if (!server) return server.status();
    objects_ = std::move(*server);
  }
  // The PMIx server and the job's namespace.
  queue_ = std::make_unique<UpcallQueue>();
  if (!queue_->valid()) return system_error("eventfd");
  trace(t0_, "queue made");
  // PMIx's settings that the ranks get (PMIX_MCA_*, forwarded or named
  // with -x) are this server's too: both ends of a rank's connection read
  // them, and an agent on another host did not inherit accrun's.
  {
    Env settings;
    apply_exports(settings, cfg_);
    for (const auto& [k, v] : settings)
      if (k.rfind("PMIX_MCA_", 0) == 0) {
        setenv(k.c_str(), v.c_str(), 1);
        log(LogLevel::kDebug, "PMIx server setting %s=%s (the ranks')", k.c_str(), v.c_str());
      }
  }
  auto server = PmixServer::start(rendezvous_, queue_.get(), this);
  trace(t0_, "server started");
  if (!server) return server.status();
  pmix_ = std::move(*server);
  {
    Upstream* up = up_;
    pmix_->set_fence_router([this, up](const std::string& signature, std::string blob, PmixServer::FenceDone done) {
      // A fence among ranks of this host alone needs no other host.
      if (all_here(signature)) return done(true, std::move(blob));
      up->fence(signature, std::move(blob), std::move(done));
    });
    pmix_->set_directory_router(up->directory());
    pmix_->set_modex_router([up](int rank, PmixServer::ModexDone done) { up->modex(rank, std::move(done)); });
  }
  trace(t0_, "PMIx server initialised");
  up_->tick();  // a slow start is not a dead host
  return Status();
}

bool Daemon::can_adopt(const Plan& plan, const RunConfig& config) const {
  return plan.hosts.size() == 1 && plan_.hosts.size() == 1 && config.host == 0 && config.jobid == jobid_ &&
         plan.hosts[0].inventory.host == plan_.hosts[0].inventory.host && config.tmpdir == cfg_.tmpdir &&
         config.shm_root == cfg_.shm_root && config.err_fd == cfg_.err_fd && config.upstream == up_;
}

void Daemon::adopt(const Plan& plan, const RunConfig& config, std::unique_ptr<JobRemains>* remains) {
  plan_ = plan;
  cfg_ = config;
  remains_out_ = remains;
}

// Returns -1 when the ranks run, else an exit status (nothing left running).
int Daemon::setup_and_spawn() {
  for (const auto& r : plan_.ranks)
    if (r.host == cfg_.host) local_ranks_.push_back(r.rank);
  reserve_fd_table(64 + 8 * local_ranks_.size());
  if (cfg_.command.empty()) {
    say(cfg_.err_fd, "no program given (usage: accrun -n N program [args...])");
    return 2;
  }
  if (cfg_.command.front().empty()) {
    refuse("empty program name (usage: accrun -n N program [args...])");
    return 2;
  }

  // Each rank's environment: inherited (less an enclosing launcher's),
  // the plan's, then -x, then what launching needs (added after PMIx).
  Env base = filter_inherited(cfg_.inherited);
  std::map<int, Env> envs;
  for (int r : local_ranks_) {
    Env e = base;
    for (const auto& [k, v] : plan_.ranks[r].env) e[k] = v;
    apply_exports(e, cfg_);
    envs[r] = std::move(e);
  }

  // A program that cannot run is found before anything starts.
  std::string exec_path;
  {
    std::string path = "/usr/local/bin:/usr/bin:/bin";
    if (!local_ranks_.empty()) {
      auto it = envs[local_ranks_.front()].find("PATH");
      if (it != envs[local_ranks_.front()].end()) path = it->second;
    }
    Resolved res = resolve_program(cfg_.command.front(), path, cfg_.wdir);
    if (res.status == 0) {
      Resolved bad = check_interpreter(cfg_.command.front(), res.path, cfg_.wdir);
      if (bad.status != 0) res = bad;
    }
    if (res.status != 0) {
      refuse(res.message);
      return res.status;
    }
    exec_path = res.path;
  }
  if (cfg_.wdir) {
    struct stat st;
    if (stat(cfg_.wdir->c_str(), &st) != 0) {
      refuse("--wdir " + *cfg_.wdir + ": " + (errno == ENOENT ? "no such directory (create it, or give another)"
                                                                : std::string(std::strerror(errno))));
      return 2;
    }
    if (!S_ISDIR(st.st_mode)) {
      refuse("--wdir " + *cfg_.wdir + ": not a directory");
      return 2;
    }
    // The ranks change into it as this user: one it may not enter is found
    // now, not by every rank after the start.
    if (access(cfg_.wdir->c_str(), X_OK) != 0) {
      refuse("--wdir " + *cfg_.wdir + ": cannot enter it (" + std::strerror(errno) +
             "; it needs search permission for this user)");
      return 2;
    }
  }
  if (cfg_.stdin_mode == StdinMode::kRank &&
      (cfg_.stdin_rank < 0 || cfg_.stdin_rank >= static_cast<int>(plan_.ranks.size()))) {
    say(cfg_.err_fd, "--stdin " + std::to_string(cfg_.stdin_rank) + ": no such rank (the job has " +
                         std::to_string(plan_.ranks.size()) + ")");
    return 2;
  }
  if (cfg_.output_dir) {
    if (int status = prepare_output_dir(); status != 0) return status;
  }

  if (Status s = prepare(); !s) {
    say(cfg_.err_fd, s.message());
    return 1;
  }
  PmixJob job;
  job.nspace = "accrun." + jobid_;
  job.jobid = job.nspace;
  job.size = static_cast<int>(plan_.ranks.size());
  job.universe = std::max(job.size, cfg_.universe);  // the controller's count (RunConfig::universe)
  job.node = cfg_.host;
  job.tmpdir = rendezvous_ + "/job";
  job.nsdir = rendezvous_ + "/job";
  job.ranks_by_node.resize(plan_.hosts.size());
  for (const auto& h : plan_.hosts) job.hostnames.push_back(h.inventory.host);
  for (const auto& r : plan_.ranks) {
    job.ranks_by_node[r.host].push_back(r.rank);
    job.cpus.push_back(cfg_.bind ? r.cpus : "");
  }
  job.bind_to = cfg_.bind ? "core" : "none";
  if (Status s = pmix_->register_job(job); !s) {
    say(cfg_.err_fd, s.message());
    return 1;
  }

  trace(t0_, "namespace registered");
  if (cfg_.mpi != MpiMode::kPmix) start_pmi();
  up_->tick();  // a slow start is not a dead host
  // OMPI_MCA_mpi_oversubscribe where this host is oversubscribed: so
  // planned, or more ranks here than processing units.
  bool oversubscribed = planned_oversubscribed();
  if (!oversubscribed) {
    long pus = sysconf(_SC_NPROCESSORS_ONLN);
    oversubscribed = pus > 0 && static_cast<long>(local_ranks_.size()) > pus;
  }

  // I/O: where each rank's stdin, stdout and stderr go.
  std::vector<int> stdin_ranks;
  if (cfg_.stdin_mode == StdinMode::kAll) stdin_ranks = local_ranks_;
  if (cfg_.stdin_mode == StdinMode::kRank &&
      std::find(local_ranks_.begin(), local_ranks_.end(), cfg_.stdin_rank) != local_ranks_.end())
    stdin_ranks.push_back(cfg_.stdin_rank);
  bool stdin_direct = false;  // stdin cannot be polled (a file, /dev/null): hand it over
  if (!stdin_ranks.empty()) {
    stdin_ = std::make_unique<StdinForwarder>(epfd_, cfg_.in_fd, kTagStdin, kTagTarget);
    auto mode = StdinForwarder::Mode::kPolled;
    if (cfg_.stdin_pushed) {
      Upstream* up = up_;
      stdin_->attach_pushed([up](size_t n) { up->stdin_consumed(n); });
    } else {
      mode = stdin_->attach();
    }
    if (mode == StdinForwarder::Mode::kNone) stdin_ranks.clear();
    stdin_direct = mode == StdinForwarder::Mode::kDirect;
  }
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  std::vector<ChildSpec> specs(local_ranks_.size());
  std::vector<int> close_after_fork;
  auto fail_setup = [&](const std::string& what) {
    say(cfg_.err_fd, what + ": " + std::strerror(errno));
    for (int fd : close_after_fork) close(fd);
    if (devnull >= 0) close(devnull);
    return 1;
  };
  for (size_t i = 0; i < local_ranks_.size(); ++i) {
    int r = local_ranks_[i];
    ChildSpec& c = specs[i];
    c.in_fd = devnull;
    c.hup_ignored = cfg_.hup_ignored;
    if (std::find(stdin_ranks.begin(), stdin_ranks.end(), r) != stdin_ranks.end()) {
      if (stdin_direct) {
        if (stdin_ranks.size() == 1) {
          c.in_fd = cfg_.in_fd;
        } else {
          // Each rank gets its own open file description (its own offset).
          std::string self = "/proc/self/fd/" + std::to_string(cfg_.in_fd);
          int fd = open(self.c_str(), O_RDONLY | O_CLOEXEC);
          c.in_fd = fd >= 0 ? fd : devnull;
          if (fd >= 0) close_after_fork.push_back(fd);
        }
      } else {
        c.in_fd = stdin_->add_target();
        if (c.in_fd < 0) return fail_setup("pipe");
        close_after_fork.push_back(c.in_fd);
      }
    }
    if (cfg_.output_dir) {
      // Opened by prepare_output_dir(); from here on closed after the fork.
      c.out_fd = std::exchange(output_files_[2 * i], -1);
      c.err_fd = std::exchange(output_files_[2 * i + 1], -1);
      close_after_fork.push_back(c.out_fd);
      close_after_fork.push_back(c.err_fd);
    } else {
      std::string prefix = tag_prefix(std::to_string(r));
      for (int which = 0; which < 2; ++which) {
        int fd = add_output_pipe(r, which == 0 ? OutKind::kStdout : OutKind::kStderr, prefix);
        if (fd < 0) return fail_setup("pipe");
        (which == 0 ? c.out_fd : c.err_fd) = fd;
        close_after_fork.push_back(fd);
      }
    }

    // Environment: the PMIx client's variables and what Open MPI needs.
    Env& e = envs[r];
    if (cfg_.mpi != MpiMode::kPmi) {
      auto client = pmix_->client_env(r);
      if (!client) {
        say(cfg_.err_fd, client.status().message());
        for (int fd : close_after_fork) close(fd);
        return 1;
      }
      for (const auto& [k, v] : *client) e[k] = v;
    }
    if (pmi_) {
      auto fd = pmi_->prepare(r, e);
      if (!fd) {
        say(cfg_.err_fd, fd.status().message());
        for (int f : close_after_fork) close(f);
        return 1;
      }
      c.pmi_fd = *fd;
      close_after_fork.push_back(*fd);
    }
    add_launch_env(e, r, jobid_, shm_dir_, oversubscribed, cfg_.mpi != MpiMode::kPmi);
    if (objects_) e[objects::kServerEnv] = objects_->addresses();
    for (const auto& [k, v] : e) c.env_storage.push_back(k + "=" + v);
    for (auto& s : c.env_storage) c.envp.push_back(s.data());
    c.envp.push_back(nullptr);

    const std::string& cpus = plan_.ranks[r].cpus;
    if (cfg_.bind && !cpus.empty()) {
      cpu_set_t allowed;
      CPU_ZERO(&allowed);
      sched_getaffinity(0, sizeof allowed, &allowed);
      if (parse_cpus(cpus, &c.cpus)) {
        cpu_set_t both;
        CPU_AND(&both, &c.cpus, &allowed);
        c.bind = CPU_EQUAL(&both, &c.cpus);
      }
      if (!c.bind) say(cfg_.err_fd, "warning: rank " + std::to_string(r) + "'s cpus " + cpus + " are not available to accrun; not binding it");
    }
    if (cfg_.report_bindings)
      say(cfg_.err_fd, "rank " + std::to_string(r) + " on host " + host_of(r) +
                           (c.bind ? " bound to cpus " + cpus : std::string(" not bound")) +
                           devices_of(plan_.ranks[r].env));
  }

  trace(t0_, "ranks prepared");
  up_->tick();  // a slow start is not a dead host
  std::vector<std::string> args_storage = cfg_.command;
  std::vector<char*> argv;
  for (auto& a : args_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  const char* wdir = cfg_.wdir ? cfg_.wdir->c_str() : nullptr;
  pid_t self = getpid();

  // Start every rank.  vfork: the child borrows our memory until execve, so
  // starting 64 ranks costs what 64 execs cost, not 64 copies of accrun's
  // page tables (fork of a process holding the PMIx library measured 3-5 ms
  // each here).  The child reports a failed chdir/exec in `report`.
  int exec_failed = 0;
  std::string exec_message;
  size_t started = 0;
  for (size_t i = 0; i < local_ranks_.size(); ++i) {
    int r = local_ranks_[i];
    ExecReport report;
    pid_t pid = spawn_child(exec_path.c_str(), argv.data(), specs[i], wdir, self, &report);
    if (pid < 0) {
      say(cfg_.err_fd, std::string("cannot start rank ") + std::to_string(r) + ": " + std::strerror(errno));
      break;
    }
    // The child leads its own process group before execve, and vfork
    // holds us until then: no window where a signal misses the group.
    janitor_.watch_group(pid);
    RankState& st = ranks_[r];
    st.rank = r;
    st.pid = pid;
    st.running = true;
    pid_rank_[pid] = r;
    ++started;
    if (report.stage != 0) {
      int err = report.err;
      exec_failed = report.stage == 2 && err == ENOENT ? 127 : report.stage == 2 ? 126 : 1;
      exec_message = report.stage == 1 ? "cannot change to directory " + std::string(wdir) + ": " + std::strerror(err)
                                       : "cannot execute " + exec_path + ": " + std::strerror(err);
      if (report.stage == 2) {
        // ENOENT or EACCES for a file that exists: its "#!" interpreter
        // (checked before the start, but it may have gone since).
        Resolved bad = check_interpreter(cfg_.command.front(), exec_path, cfg_.wdir);
        if (bad.status != 0) {
          exec_failed = bad.status;
          exec_message = bad.message;
        }
      }
      break;
    }
  }
  for (int fd : close_after_fork) close(fd);
  if (devnull >= 0) close(devnull);

  // Event sources.
  auto add = [&](int fd, uint32_t events, uint64_t tag) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev);
  };
  add(sigfd_, EPOLLIN, kTagSignal);
  add(queue_->fd(), EPOLLIN, kTagQueue);
  add(up_->fd(), EPOLLIN, kTagUpstream);
  if (up_->links_fd() >= 0) add(up_->links_fd(), EPOLLIN, kTagLinks);
  for (size_t i = 0; i < streams_.size(); ++i) add(streams_[i]->fd, EPOLLIN, kTagStream | i);
  if (stdin_) stdin_->start();
  if (pmi_)
    for (auto [index, fd] : pmi_->fds()) add(fd, EPOLLIN, kTagPmi | index);

  trace(t0_, "ranks started");
  if (exec_failed || started != local_ranks_.size()) {
    say(cfg_.err_fd, (exec_failed ? exec_message : std::string("could not start every rank")) + "; stopping the job");
    terminating_ = true;
    terminate_all(SIGKILL);
    exit_code_ = exec_failed ? exec_failed : 1;
    return loop();
  }

  if (cfg_.timeout_s > 0)
    job_deadline_ = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(cfg_.timeout_s * 1000));
  return -1;
}

int Daemon::loop() {
  std::optional<Clock::time_point> drain_deadline;
  bool swept = false;
  for (;;) {
    bool all_exited = running_count() == 0;
    if (all_exited && !swept) {
      // Whatever the ranks left behind in their process groups goes too,
      // and what left its group and was adopted by us (descendants.hpp).
      for (auto& [r, s] : ranks_) kill(-s.pid, SIGKILL);
      kill_adopted(not_ours(), std::chrono::milliseconds(0));
      swept = true;
      drain_deadline = Clock::now() + std::chrono::seconds(2);
    }
    bool streams_open = false;
    for (auto& s : streams_) streams_open |= s->fd >= 0;
    // (Paused output: what the pipes hold goes out in finish().)
    if (all_exited && (!streams_open || output_paused_)) break;

    auto now = Clock::now();
    std::optional<Clock::time_point> next;
    auto consider = [&](const std::optional<Clock::time_point>& t) {
      if (t && (!next || *t < *next)) next = t;
    };
    consider(job_deadline_);
    consider(kill_deadline_);
    consider(policy_deadline_);
    consider(drain_deadline);
    int timeout_ms = -1;
    if (next) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*next - now).count();
      timeout_ms = ms < 0 ? 0 : static_cast<int>(std::min<int64_t>(ms + 1, 1 << 30));
    }
    epoll_event events[64];
    if (!upstream_gone_ && (timeout_ms < 0 || timeout_ms > 500)) timeout_ms = 500;
    int n = epoll_wait(epfd_, events, 64, timeout_ms);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      uint64_t tag = events[i].data.u64;
      if (tag == kTagSignal) {
        signalfd_siginfo si;
        while (read(sigfd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) handle_signal(si);
      } else if (tag == kTagQueue) {
        queue_->drain();
      } else if (tag == kTagUpstream) {
        if (!upstream_gone_ && !up_->on_readable(*this)) upstream_lost();
      } else if (tag == kTagLinks) {
        if (!upstream_gone_ && !up_->on_links()) upstream_lost();
      } else if (tag == kTagStdin) {
        stdin_->on_source();
      } else if (tag & kTagPmi) {
        pmi_->on_readable(tag & 0xffffffffu);
      } else if (tag & kTagTarget) {
        stdin_->on_target(tag & 0xffffffffu, events[i].events);
      } else if (tag & kTagStream) {
        OutStream& s = *streams_[tag & 0xffffffffu];
        if (s.fd >= 0) read_output(s);
      }
    }
    if (!upstream_gone_ && !up_->tick()) upstream_lost();
    now = Clock::now();
    if (job_deadline_ && now >= *job_deadline_) {
      job_deadline_.reset();
      if (running_count() > 0 && !terminating_) {
        std::vector<int> still;
        int spawned = 0;
        for (int id : running_ranks()) {
          if (is_spawned_id(id)) {
            ++spawned;
          } else {
            still.push_back(id);
          }
        }
        // Every host's agent says this of its own ranks: the host is named,
        // as in a rank's failure.
        std::string which = still.empty() ? "" : "ranks still running: " + rank_ranges(still);
        if (spawned > 0)
          which += (which.empty() ? "still running: " : " and ") + std::to_string(spawned) + " spawned process(es)";
        // The value as given (fractions allowed): 0.2, 1.25, 600.
        char given[32];
        std::snprintf(given, sizeof given, "%.3f", cfg_.timeout_s);
        std::string text = given;
        text.erase(text.find_last_not_of('0') + 1);
        if (text.back() == '.') text.pop_back();
        say(cfg_.err_fd, "--timeout " + text + " s reached on host " + host_of(-1) + "; " + which + "; terminating them");
        if (!exit_code_) exit_code_ = 124;
        policy_pending_ = false;
        terminate_all(SIGTERM);
      }
    }
    if (policy_deadline_ && now >= *policy_deadline_) apply_policy();
    if (kill_deadline_ && now >= *kill_deadline_) {
      kill_deadline_.reset();
      if (passed_signal_ != 0 && !terminating_) {
        pass_on(SIGKILL);
      } else {
        terminate_all(SIGKILL);
      }
    }
    if (drain_deadline && now >= *drain_deadline) break;
  }
  return exit_code_.value_or(0);
}

// The PMI-1/PMI-2 server (launcher/src/pmi/): its fences take the PMIx
// server's route, its events the same paths as PMIx clients'.
void Daemon::start_pmi() {
  pmi::PmiJobInfo info;
  info.kvsname = "accrun." + jobid_;
  info.size = static_cast<int>(plan_.ranks.size());
  info.universe_size = info.size;
  std::vector<int> node_of_rank;
  for (const auto& r : plan_.ranks) node_of_rank.push_back(r.host);
  info.process_mapping = pmi::process_mapping(node_of_rank);
  if (plan_.hosts.size() > 1)
    info.host = plan_.hosts[static_cast<size_t>(cfg_.host)].inventory.host;
  pmi::PmiEvents ev;
  ev.fence_router = pmix_->fence_router();
  ev.connected = [this](int rank) { on_connected(rank); };
  ev.finalized = [this](int rank) { on_finalized(rank); };
  ev.aborted = [this](int rank, int status, const std::string& message) { on_abort(rank, status, message); };
  ev.misused = [this](int rank, const std::string& how) {
    if (RankState* r = state_of(rank)) record_failure(*r, 1, "pmi", how);
  };
  pmi_ = std::make_unique<pmi::PmiService>(std::move(info), static_cast<int>(local_ranks_.size()), std::move(ev));
}

void Daemon::finish() {
  trace(t0_, "ranks done");
  // A beat before the slow part (the PMIx server's finalize on a loaded host).
  if (!upstream_gone_) up_->tick();
  for (auto& s : streams_) {
    if (s->fd >= 0) {
      // Whatever is already in the pipe still goes out.
      int fl = fcntl(s->fd, F_GETFL);
      fcntl(s->fd, F_SETFL, fl | O_NONBLOCK);
      char buf[65536];
      ssize_t n;
      while ((n = read(s->fd, buf, sizeof buf)) > 0) s->lines->feed(buf, static_cast<size_t>(n));
      close_stream(*s);
    }
  }
  // Ranks still alive here (setup failed half-way) are killed and reaped.
  for (auto& [r, s] : ranks_) {
    if (!s.running) continue;
    kill(-s.pid, SIGKILL);
    waitpid(s.pid, nullptr, 0);
    s.running = false;
  }
  kill_adopted(not_ours(), std::chrono::seconds(1));
  // The agent goes on reading its links (it may serve objects, or carry
  // other hosts' fences along the tree): a late answer must not reach the
  // servers freed here.
  up_->forget_waiters();
  pmi_.reset();
  pmix_.reset();
  trace(t0_, "PMIx server finalised");
  queue_.reset();
  if (!rendezvous_.empty()) remove_tree(rendezvous_);
  if (objects_ && remains_out_ && holds_objects(shm_dir_)) {
    // Other hosts' ranks may still read what ours put: the directory, its
    // server, the janitor and the owner locks stay until the job ends.
    *remains_out_ = std::make_unique<ObjectsLeft>(std::move(objects_), shm_dir_, std::move(janitor_),
                                                  janitor_reaped_, std::move(owner_fds_));
    log(LogLevel::kDebug, "serving this host's objects until the job ends");
  } else {
    objects_.reset();
    if (!shm_dir_.empty()) remove_tree(shm_dir_);
    janitor_.dismiss(janitor_reaped_);
    for (int fd : owner_fds_) close(fd);
  }
  owner_fds_.clear();
  trace(t0_, "cleaned up");
  // Drain SIGCHLDs we caused so the caller's mask is restored clean.
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

}  // namespace

namespace {

class Prepared final : public PreparedJob {
 public:
  explicit Prepared(std::unique_ptr<Daemon> d) : daemon(std::move(d)) {}
  ~Prepared() override {
    if (daemon) daemon->abandon();
  }
  std::unique_ptr<Daemon> daemon;  // null once a job took it over
};

}  // namespace

std::unique_ptr<PreparedJob> prepare_job(const EarlyStart& early) {
  if (early.upstream == nullptr) return nullptr;
  Plan plan;
  plan.hosts.emplace_back();
  plan.hosts.back().inventory.host = early.host;
  RunConfig cfg;
  cfg.jobid = early.jobid;
  cfg.tmpdir = early.tmpdir;
  cfg.shm_root = early.shm_root;
  cfg.err_fd = early.err_fd;
  cfg.upstream = early.upstream;
  auto d = std::make_unique<Daemon>(plan, cfg, nullptr);
  if (Status s = d->prepare(); !s) {
    log(LogLevel::kDebug, "early start: %s", s.message().c_str());
    d->abandon();
    return nullptr;
  }
  return std::make_unique<Prepared>(std::move(d));
}

int run_job(const Plan& plan, const RunConfig& config, std::unique_ptr<JobRemains>* remains,
            std::unique_ptr<PreparedJob> prepared) {
  if (config.upstream == nullptr) {
    say(config.err_fd, "internal error: a node daemon without its job controller");
    return 1;
  }
  if (auto* p = static_cast<Prepared*>(prepared.get()); p != nullptr && p->daemon->can_adopt(plan, config)) {
    std::unique_ptr<Daemon> d = std::move(p->daemon);
    d->adopt(plan, config, remains);
    return d->run();
  }
  prepared.reset();  // not what this job needs: undone before it starts
  Daemon d(plan, config, remains);
  return d.run();
}

}  // namespace accrun::launcher
