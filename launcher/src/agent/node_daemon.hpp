// node_daemon.hpp — the node daemon: carries out one host's share of
// a Plan (docs/design.md §4, §6).  It is a PMIx server, spawns the ranks, forwards
// their I/O and accrun's signals, applies the failure policy and cleans up on
// every exit path (a janitor process covers accrun's own death).
#pragma once

#include <map>
#include <memory>

#include <functional>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "accrun/options.hpp"
#include "accrun/plan.hpp"
#include "accrun/status.hpp"

namespace accrun::launcher {

// A process's id in the job: the job's ranks are their rank; a process a
// rank started with PMIx_Spawn (MPI_Comm_spawn) has an id from
// kSpawnedIdBase up, handed out by the job controller, one per process of
// every spawned namespace, the same on every host.
inline constexpr int kSpawnedIdBase = 1 << 30;
inline bool is_spawned_id(int id) { return id >= kSpawnedIdBase; }

// One application of a PMIx_Spawn request (pmix_app_t, copied).
struct SpawnApp {
  std::string cmd;
  std::vector<std::string> argv;  // argv[0] included when the caller gave it
  std::vector<std::string> env;   // "NAME=value"
  std::string cwd;                // "" : PMIX_WDIR, else --wdir
  int maxprocs = 1;
  std::map<std::string, std::string> info;  // string-valued directives (PMIX_WDIR, PMIX_HOST, ...)
};
struct SpawnRequest {
  int requester = 0;  // id of the process that asked
  std::string who;    // how messages name it ("rank 0")
  std::vector<SpawnApp> apps;
  std::map<std::string, std::string> info;  // string-valued job directives
};
// A spawn the controller placed: every agent registers the namespace and
// starts its own processes of it.
struct SpawnLaunch {
  int k = 0;             // the job's k-th spawn
  std::string nspace;    // accrun.<job id>.<k>
  int base = 0;          // id of its rank 0
  int requester = 0;     // the process that asked (PMIX_PARENT_ID)
  int spawner = 0;       // the job's rank it descends from
  std::string who;       // the requester, as messages name it
  std::vector<SpawnApp> apps;
  std::vector<int> host_of;  // per spawned rank: its plan host
  std::vector<int> app_of;   // per spawned rank: its application
};

// The node agent's side of a job that spans hosts: what the daemon's event
// loop tells the job controller, and how the controller reaches back
// (launcher/src/agent/).  Every call comes from the daemon's event loop
// thread; implementations never block it for long.
class DaemonControl {
 public:
  virtual ~DaemonControl() = default;
  // Signals every local rank's process group, as accrun does on Ctrl-C
  // (SIGTERM/SIGINT/SIGHUP start --kill-grace; SIGKILL at once; SIGUSR1/2
  // are passed on).  Deaths that follow are not failures of their own.
  virtual void terminate(int sig) = 0;
  // The controller can no longer write the ranks' stdout (stream 1) or
  // stderr (2), for `err`, and has said so: as when the daemon's own write
  // fails, every local rank's pipe of that stream closes (a rank writing
  // to it gets SIGPIPE).
  virtual void output_closed(int stream, int err) = 0;
  // Accrun's standard input, read by the controller (RunConfig::stdin_pushed):
  // more of it, and its end.
  virtual void stdin_data(std::string data) = 0;
  virtual void stdin_end() = 0;
  // Stop (true) or resume (false) reading the ranks' output pipes: the
  // controller's reader is slow, and the ranks are to wait for it.
  virtual void pause_output(bool pause) = 0;
  // Another host's agent asks for local rank `rank`'s PMIx data (direct
  // modex); `reply` gets the PMIx status and the library's blob.
  virtual void modex_request(int rank, std::function<void(int status, std::string blob)> reply) = 0;
  // A rank on another host failed (msg::kPeerFailed): the local ranks hear
  // of it through a PMIx event.
  virtual void peer_failed(int rank, int status, const std::string& kind, const std::string& host,
                           const std::string& text) = 0;
  // The controller placed a spawn (msg::kSpawnLaunch): register its
  // namespace and start this host's processes of it; `done` gets a PMIx
  // status and, on failure, why.
  virtual void spawn_launch(const SpawnLaunch& launch, std::function<void(int status, std::string why)> done) = 0;
  // PMIx_Job_control from another host (msg::kSignalProcs): signal these
  // local processes; `stop`: their deaths were asked for.
  virtual void signal_procs(int sig, bool stop, const std::vector<int>& ids) = 0;
};

// The job's name directory (PMIx publish/lookup/unpublish) when it lives
// elsewhere: with the job controller, for a job across hosts.  Values are
// PMIx values packed by the PMIx library; `done` runs on the event loop.
struct DirectoryEntry {
  std::string key;
  int rank = 0;          // the publisher
  std::string packed;    // its value
};
class JobDirectory {
 public:
  virtual ~JobDirectory() = default;
  // Adds every key or none (a key already there: PMIX_ERR_DUPLICATE_KEY).
  virtual void publish(int rank, std::vector<std::pair<std::string, std::string>> packed,
                       std::function<void(int status)> done) = 0;
  // With `wait`, answers once `wait_count` (0: all) keys exist or after
  // `timeout_s` (0: none) with PMIX_ERR_TIMEOUT.
  virtual void lookup(int rank, std::vector<std::string> keys, bool wait, size_t wait_count, double timeout_s,
                      std::function<void(int status, std::vector<DirectoryEntry> found)> done) = 0;
  // Removes `rank`'s keys (all of them when `keys` is empty); a key another
  // rank published is refused, except the object store's (any rank may
  // delete an object).
  virtual void unpublish(int rank, std::vector<std::string> keys, std::function<void(int status)> done) = 0;
};

class Upstream {
 public:
  // The job-wide name directory (it lives with the job controller).
  virtual JobDirectory* directory() = 0;
  virtual ~Upstream() = default;
  // Readable when the controller sent something.
  virtual int fd() const = 0;
  // Readable when an agent of the launch tree did (-1: no such links);
  // on_links() serves them, false once the controller is to be taken for
  // gone.
  virtual int links_fd() const { return -1; }
  virtual bool on_links() { return true; }
  // Reads and handles what arrived; false once the controller is gone (the
  // daemon then kills its ranks).
  virtual bool on_readable(DaemonControl& daemon) = 0;
  // Handles what arrived together with the launch (a signal, stdin), once
  // the ranks have started; false as on_readable.
  virtual bool catch_up(DaemonControl&) { return true; }
  // Whole lines of the ranks' stdout (stream 1) or stderr (stream 2).
  virtual void output(int stream, const char* data, size_t n) = 0;
  // The first failure of a local rank (status as accrun would exit with).
  virtual void rank_failed(int rank, int status, const std::string& kind, const std::string& text) = 0;
  // Across hosts: the first local rank that initialised PMIx or PMI, and
  // each local rank that ended (status 0) without initialising; the
  // controller judges the pair (protocol.hpp, kInitialised).
  virtual void initialised(int /*rank*/) {}
  virtual void ended_uninitialised(int /*rank*/) {}
  // A PMIx fence over `signature` ("*" or a rank list): `blob` is this
  // host's contribution; `done` gets every host's, concatenated.
  virtual void fence(const std::string& signature, std::string blob,
                     std::function<void(bool ok, std::string all)> done) = 0;
  // Direct modex: rank `rank` (on another host) has its PMIx data fetched
  // from its host's agent; `done` gets the PMIx status and the blob.
  virtual void modex(int rank, std::function<void(int status, std::string blob)> done) = 0;
  // PMIx_Spawn: the controller places the processes and has every agent
  // start its own; `done` gets the PMIx status and the new namespace.
  virtual void spawn(const SpawnRequest& request, std::function<void(int status, std::string nspace)> done) = 0;
  // A spawned process of this host ended (its slot is free again).
  virtual void spawned_ended(int id) = 0;
  // PMIx_Job_control for processes on other hosts: the controller passes
  // the signal to their agents.
  virtual void signal_procs(int sig, bool stop, const std::vector<int>& ids) = 0;
  // `n` bytes of pushed stdin reached every local rank that takes it: the
  // controller may send that much more.
  virtual void stdin_consumed(size_t n) = 0;
  // The daemon's phase: 1 its ranks started and its loop runs (it ticks
  // twice a second from now on), 2 its ranks ended and it cleans up.
  virtual void phase(int p) = 0;
  // Called from the loop at least twice a second (heartbeats); false once
  // the controller has been silent too long (its host or the network went
  // away), which the daemon treats as the controller being gone.
  virtual bool tick() { return true; }
  // The job's servers are going (its ranks ended): answers still to come
  // (fences, modex, lookups, spawns) reach nobody; the rounds and requests
  // stay counted, so what the controller sends later is still in order.
  virtual void forget_waiters() {}
};

// How to run a job, besides the Plan.  Built once from the options and the
// environment accrun started with; nothing below reads getenv().
struct RunConfig {
  std::vector<std::string> command;     // program and arguments (non-empty)
  std::optional<std::string> wdir;      // --wdir
  bool wdir_soft = false;               // wdir is the launcher's cwd: used where it exists (as mpirun)
  bool tag_output = false;              // --tag-output
  std::optional<std::string> output_dir;  // --output-dir
  StdinMode stdin_mode = StdinMode::kRank;  // --stdin
  int stdin_rank = 0;
  double timeout_s = 0;                 // --timeout (0: none)
  double kill_grace_s = 5;              // --kill-grace
  OnFailure on_failure = OnFailure::kKill;  // --on-failure
  MpiMode mpi = MpiMode::kAuto;         // --mpi: which of the PMIx and PMI servers ranks are pointed at
  bool report_bindings = false;         // --report-bindings
  bool hup_ignored = false;             // accrun started with SIGHUP ignored (nohup): so start the ranks
  bool bind = true;                     // false when the topology is not this host's (XML)
  std::vector<std::pair<std::string, std::optional<std::string>>> exports;  // -x
  Env inherited;                        // the environment accrun started with
  std::string tmpdir = "/tmp";          // where the rendezvous directory goes (TMPDIR)
  std::string shm_root = "/dev/shm";    // where ACCRUN_SHM_DIR goes
  int host = 0;                         // which of Plan::hosts this daemon runs
  int err_fd = 2;                       // where accrun's own messages go
  int in_fd = 0;                        // what is forwarded to ranks' stdin
  bool stdin_pushed = false;            // instead, the controller pushes it (DaemonControl::stdin_data)
  Upstream* upstream = nullptr;         // the job controller: output, failures, fences, the directory go there (required)
  bool own_signals = true;              // acts on signals sent to its process (false: they come through upstream)
  std::string jobid;                    // the job's id (every host's agent uses the controller's); "" = a new one
  int universe = 0;                     // MPI_UNIVERSE_SIZE: the ranks and the slots they left free (0: the job's size)
};

// A fresh job id: 12 hex digits from getrandom (the PMIx namespace is
// "accrun.<id>"; job directories are named after it).  Thread-safe.
std::string new_job_id();

// Runs this host's ranks of `plan` to completion and returns accrun's exit
// status (docs/design.md §9: 0; the first failing rank's status; 124 on
// --timeout; 126/127 when the program cannot be executed; 130 after Ctrl-C).
// Blocks.  Must be called from the process's main thread before any other
// thread exists (it blocks signals, forks a janitor and starts PMIx); at most
// one job per process at a time.  Messages go to `config.err_fd`.
//
// `remains`, when given, receives what a job across hosts leaves on this
// host after its ranks ended: the objects they put (accrun_put(3)), which
// this host's agent goes on serving to the other hosts' ranks until the job
// ends.  Destroying it stops serving and removes them.
class JobRemains {
 public:
  virtual ~JobRemains() = default;
};
// The part of a one-host job's start that needs neither its plan nor its
// options: the signal handling, the janitor, the job's directories and the
// PMIx server, most of the time before the first rank starts.  The agent
// that accrun forks on its own host for a job of this host alone starts it
// at once, while the controller still detects and plans.  Destroying it
// undoes it.  Same rules as run_job (main thread, before other threads).
class PreparedJob {
 public:
  virtual ~PreparedJob() = default;
};
struct EarlyStart {
  std::string host;                    // the name the plan will give this host
  std::string jobid;                   // RunConfig::jobid
  std::string tmpdir = "/tmp";         // RunConfig::tmpdir
  std::string shm_root = "/dev/shm";   // RunConfig::shm_root
  int err_fd = 2;
  Upstream* upstream = nullptr;        // the job controller (required)
};
// Null when it failed (run_job then starts afresh and says why).
std::unique_ptr<PreparedJob> prepare_job(const EarlyStart& early);

// `prepared`, when given, is taken over if the plan and config are what it
// was prepared for (one host, this one, the same job id), else undone.
int run_job(const Plan& plan, const RunConfig& config, std::unique_ptr<JobRemains>* remains = nullptr,
            std::unique_ptr<PreparedJob> prepared = nullptr);

}  // namespace accrun::launcher
