// job_controller.cpp — a job across hosts (job_controller.hpp).
#include "controller/job_controller.hpp"

#include <pmix_common.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "accrun/commands.hpp"
#include "accrun/hostfile.hpp"
#include "accrun/log.hpp"
#include "agent/node_daemon.hpp"
#include "controller/agents.hpp"
#include "controller/output_queue.hpp"
#include "controller/protocol.hpp"
#include "controller/spawns.hpp"
#include "iof.hpp"
#include "agent/pmix_server.hpp"
#include "wire/codec.hpp"

namespace accrun::launcher {

AgentsConfig agents_config(const Options& options, char** envp);  // detect_command.cpp

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kHeartbeatLimit = std::chrono::seconds(3);
// Until an agent's first word after its launch (its PMIx server and ranks
// starting, slow on a loaded host), silence is judged more leniently.
constexpr auto kStartLimit = std::chrono::seconds(30);
// Whatever the agent's phase, its host acknowledging nothing of what the
// controller sent (a beat every second) for this long: the host or its
// network is down.  This names a host lost while its agent starts ranks
// (when the agent's own beats may pause) without waiting kStartLimit;
// while the ranks run, kHeartbeatLimit names it first.
constexpr auto kUnackedLimit = std::chrono::seconds(5);

void say(const std::string& line) {
  std::string s = "accrun: " + line + "\n";
  [[maybe_unused]] ssize_t w = write(2, s.data(), s.size());
}

// A plan that cannot be made is bad input (status 2), unless the system
// failed (1), as under --dry-run.
int plan_failure_status(const Status& s) { return s.code() == Code::kSystem ? 1 : 2; }

Result<std::vector<hostfiles::HostEntry>> entries_of(const Options& options) {
  if (options.hostfile) return hostfiles::read_hostfile(*options.hostfile);
  if (options.host_list) return hostfiles::parse_host_list(*options.host_list);
  return std::vector<hostfiles::HostEntry>{};
}

class Controller {
 public:
  Controller(const Options& options, char** envp, std::function<Result<Plan>()> plan_here)
      : options_(options), envp_(envp), plan_here_(std::move(plan_here)), planned_(bool(plan_here_)) {
    struct sigaction hup {};
    hup_ignored_ = sigaction(SIGHUP, nullptr, &hup) == 0 && hup.sa_handler == SIG_IGN;
  }
  int run();

 private:
  // accrun was started with SIGHUP ignored (nohup): a hangup is not
  // forwarded, and the ranks start with it ignored, as nohup's commands do.
  bool hup_ignored_ = false;
  // The signals accrun handles, blocked from the start of run() (so one
  // that comes while the agents start is neither lost nor fatal) and read
  // by loop()'s signalfd; the mask this host's agent is forked with.
  sigset_t signals_{};
  sigset_t old_mask_{};
  int stopped_by_ = 0;  // INT, TERM or HUP taken while the agents started
  bool interrupted();
  int agents_failed(const Status& s);
  int too_many_ranks();
  int plan_here_and_start();
  int start_agents(bool wait = true, const std::string& prepare_as = "");
  int plan_and_launch();
  int plan_from_hellos();
  int launch();
  int loop();
  void on_frame(int agent, const wire::Frame& f);
  void on_lost(int agent, const std::string& why);
  void signal_all(int sig, int except = -1);
  // Tells every agent but `except` that a rank failed (msg::kPeerFailed).
  void peer_failed(int rank, int status, const std::string& kind, const std::string& text, int except);
  void fail(int status);
  void end_others(int agent);

  const Options& options_;
  char** envp_;
  std::vector<hostfiles::HostEntry> entries_;
  std::unique_ptr<AgentSet> agents_;
  std::function<Result<Plan>()> plan_here_;  // this host only: planned here (run_cluster_job)
  bool planned_;  // planned here: the agents' hellos do not change it
  Plan plan_;
  // " on every host" when the job spans hosts, for messages.
  std::string everywhere() const { return plan_.hosts.size() > 1 ? " on every host" : ""; }
  std::vector<int> agent_of_host_;           // plan host -> agent index
  std::vector<int> host_of_agent_;           // agent index -> plan host (-1: no ranks)
  std::vector<bool> done_;                   // agent reported kDone or was lost
  std::vector<Clock::time_point> last_seen_;
  std::vector<bool> heard_since_launch_;       // its event loop runs (kPhase 1): beats are due every second
  std::vector<bool> ranks_started_;            // it said kPhase 1 once: its ranks started
  std::optional<int> exit_code_;
  bool terminating_ = false;
  bool output_lost_[2] = {false, false};  // stdout, stderr could not be written
  // The ranks' output waiting for accrun's stdout and stderr to take it.
  OutputQueue out_[2] = {OutputQueue(1), OutputQueue(2)};
  bool output_paused_ = false;
  int output_errno_ = 0;  // why the first stream could not be written
  void output_failed(int which);
  void flow_output();
  int interrupts_ = 0;
  std::optional<Clock::time_point> deadline_;
  // Standard input, across hosts: read here, pushed to the agents whose
  // ranks take it, at most kStdinWindow bytes ahead of each.
  bool stdin_open_ = false;
  std::map<int, size_t> stdin_in_flight_;  // agent -> bytes sent, not yet taken
  bool stdin_has_room() const;
  // Direct modex requests on their way: the controller's id -> (asking
  // agent, its id, owning agent).
  struct ModexWay {
    int asker = 0;
    uint64_t id = 0;
    int owner = 0;
  };
  std::map<uint64_t, ModexWay> modex_;
  uint64_t next_modex_ = 0;
  void modex_reply(int agent, uint64_t id, int status, std::string_view blob);
  void forward_stdin();
  // Fences: per signature, rounds in order; each agent's k-th contribution
  // with a signature belongs to round k.
  struct Round {
    std::map<int, std::string> parts;  // agent -> blob
  };
  std::map<std::string, std::deque<Round>> rounds_;
  std::map<std::pair<int, std::string>, size_t> contributed_;  // (agent, signature) -> count
  std::map<std::string, size_t> completed_;                    // signature -> rounds done
  std::set<int> participants(const std::string& signature) const;
  // Hosts lost under --on-failure continue: a fence with ranks there can
  // never complete, so each of its rounds is answered with a failure, to
  // every agent that contributed, as its contributions come.  Whole-job
  // fences along a launch tree fail at the agents instead (a lost agent
  // cuts off the parts below it): fail_tree_fences().
  std::set<int> lost_;
  bool lost_participant(const std::string& signature) const;
  // Ranks (and spawned processes) that failed, or ended without
  // initialising, under --on-failure continue the job goes on without.
  // An agent whose every member of a fence is gone never sends its part
  // (its PMIx server has no rank left to enter the fence), so the rounds
  // complete without it, as the PMIx server completes a fence of its own
  // host's ranks without the ones that died; a part it sends after all
  // belongs to its round if that is still open and is dropped otherwise.
  // PMI fences (pmi:*) are left out: there the failed host's part says
  // that the round fails (pmi/pmi_host.hpp).  Whole-job fences along a
  // launch tree wait for every agent's part at its parent: they fail as
  // for a lost host (fail_tree_fences()).
  std::set<int> gone_procs_;
  std::vector<int> ranks_of_agent_, gone_ranks_of_agent_;
  bool gone_from(int agent, const std::string& signature) const;
  void proc_gone(int id);
  // Completes the rounds of `signature` whose participants are all in, in order.
  void complete_rounds(const std::string& signature);
  void fail_rounds(const std::string& signature, const std::string& why);
  // A failed round's answer (kFenceDone, the reason for its data), sent to `agent`.
  void fence_failed(int agent, const std::string& signature, const std::string& why);
  // "host H was lost", naming the first lost host among its participants.
  std::string lost_why(const std::string& signature) const;
  // Whole-job fences along the launch tree (agent/tree_links.hpp): each
  // agent's parent agent (-1: it sends to the controller itself), when the
  // tree carries them; empty when every agent fences here directly.
  std::vector<int> fence_parent_;
  void plan_fence_tree();
  // Whether a signature is a whole-job fence's, which travel the tree.
  bool along_tree(const std::string& signature) const;
  // A host was lost: every agent hears that whole-job fences fail
  // (kFencesFail), with the answer of each one's last completed round, and why.
  bool tree_fences_failed_ = false;
  std::map<std::string, std::string> last_answer_;  // whole-job signature -> kFenceDone payload
  void fail_tree_fences(const std::string& why);
  // A rank that ended without initialising PMIx while another did
  // (kInitialised, kEndedUninitialised): a failure, as it holds up the
  // job's fences.  The first rank that initialised, and those that ended
  // uninitialised, not judged yet.
  std::optional<int> first_initialised_;
  std::vector<int> ended_uninitialised_;
  void judge_uninitialised();
  // Whether contributions from `sender` may carry agent `agent`'s part.
  bool carries_for(int sender, int agent) const;
  // The agent whose host runs a rank or a spawned process (-1: none).
  int agent_of_proc(int id) const;
  const std::string& host_name_of_proc(int id) const;

  // PMIx_Spawn: placed here, started by every agent (controller/spawns.hpp).
  std::unique_ptr<SpawnBook> spawns_;
  struct PendingSpawn {
    int asker = 0;        // the requesting agent
    uint64_t id = 0;      // its request id
    std::string who;      // the requester, as messages name it
    int count = 0;
    std::string nspace;
    std::set<int> waiting;  // agents yet to say they started
    std::set<int> hosting;  // agents with processes of it
    int status = 0;
    std::string why;
  };
  std::map<int, PendingSpawn> spawning_;  // by k
  std::map<int, int> spawner_of_;         // spawned process id -> the job's rank it descends from
  std::string job_id_;
  void on_spawn_request(int agent, const wire::Frame& f);
  void on_spawn_started(int agent, int k, int status, const std::string& why);
  void spawn_reply(int agent, uint64_t id, int status, const std::string& nspace);

  // The job-wide name directory: key -> (publisher rank, packed value).
  struct Entry {
    int rank = 0;
    std::string packed;
  };
  std::map<std::string, Entry> directory_;
  struct Lookup {
    int agent = 0;
    uint64_t id = 0;
    std::vector<std::string> keys;
    bool wait = false;
    size_t wait_count = 0;
    std::optional<Clock::time_point> deadline;
  };
  std::vector<Lookup> waiting_;
  bool try_answer(const Lookup& l, bool final);
  void on_directory(int agent, const wire::Frame& f);
  void expire_lookups(Clock::time_point now);
  int poll_ms(Clock::time_point now) const;
};

bool Controller::try_answer(const Lookup& l, bool final) {
  std::vector<const std::string*> found;
  for (const auto& k : l.keys)
    if (directory_.count(k)) found.push_back(&k);
  size_t needed = l.wait_count == 0 ? l.keys.size() : std::min(l.wait_count, l.keys.size());
  if (l.wait && found.size() < needed && !final) return false;
  int status = PMIX_SUCCESS;
  if (l.wait && found.size() < needed) {
    status = PMIX_ERR_TIMEOUT;
    found.clear();
  } else if (found.empty()) {
    status = PMIX_ERR_NOT_FOUND;
  }
  wire::Writer w;
  w.u64(l.id);
  w.i32(status);
  w.u32(static_cast<uint32_t>(found.size()));
  for (const std::string* k : found) {
    const Entry& e = directory_.at(*k);
    w.str(*k);
    w.u32(static_cast<uint32_t>(e.rank));
    w.bytes(e.packed.data(), e.packed.size());
  }
  agents_->send(l.agent, msg::kLookupDone, w.data());
  return true;
}

// The loop's turn: at most 200 ms, less when a held lookup ends sooner.
int Controller::poll_ms(Clock::time_point now) const {
  auto until = now + std::chrono::milliseconds(200);
  for (const Lookup& l : waiting_)
    if (l.deadline) until = std::min(until, *l.deadline);
  return static_cast<int>(std::max<int64_t>(
      0, std::chrono::ceil<std::chrono::milliseconds>(until - now).count()));
}

void Controller::expire_lookups(Clock::time_point now) {
  std::erase_if(waiting_, [&](const Lookup& l) { return l.deadline && *l.deadline <= now && try_answer(l, true); });
}

void Controller::on_directory(int agent, const wire::Frame& f) {
  wire::Reader r(f.payload);
  auto id = r.u64("directory: id");
  auto rank = r.u32("directory: rank");
  if (!id || !rank) return on_lost(agent, "sent a malformed directory request");
  auto reply = [&](uint16_t type, int status) {
    wire::Writer w;
    w.u64(*id);
    w.i32(status);
    agents_->send(agent, type, w.data());
  };
  if (f.type == msg::kPublish) {
    auto n = r.u32("publish: count");
    if (!n || *n > f.payload.size()) return on_lost(agent, "sent a malformed publish");
    std::vector<std::pair<std::string, std::string>> values;
    for (uint32_t i = 0; i < *n; ++i) {
      auto key = r.str("publish: key");
      auto value = r.bytes("publish: value");
      if (!key || !value) return on_lost(agent, "sent a malformed publish");
      values.emplace_back(std::move(*key), std::move(*value));
    }
    for (const auto& [key, value] : values)
      if (directory_.count(key)) return reply(msg::kPublishDone, PMIX_ERR_DUPLICATE_KEY);
    for (auto& [key, value] : values) directory_[key] = {static_cast<int>(*rank), std::move(value)};
    reply(msg::kPublishDone, PMIX_SUCCESS);
    std::erase_if(waiting_, [&](const Lookup& l) { return try_answer(l, false); });
  } else if (f.type == msg::kLookup) {
    Lookup l;
    l.agent = agent;
    l.id = *id;
    auto keys = r.string_vector("lookup: keys");
    auto wait = r.boolean("lookup: wait");
    auto count = r.u32("lookup: wait count");
    auto timeout = r.f64("lookup: timeout");
    if (!keys || !wait || !count || !timeout) return on_lost(agent, "sent a malformed lookup");
    l.keys = std::move(*keys);
    l.wait = *wait;
    l.wait_count = *count;
    if (*timeout > 0 && *timeout < 1e7)
      l.deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(*timeout * 1000));
    if (!try_answer(l, false)) waiting_.push_back(std::move(l));
  } else {
    auto keys = r.string_vector("unpublish: keys");
    if (!keys) return on_lost(agent, "sent a malformed unpublish");
    int me = static_cast<int>(*rank);
    if (keys->empty()) {
      std::erase_if(directory_, [me](const auto& e) { return e.second.rank == me; });
    } else {
      // Only the publisher may take a key back.
      for (const auto& k : *keys) {
        auto it = directory_.find(k);
        if (it != directory_.end() && it->second.rank != me && !PmixServer::anyone_may_unpublish(k))
          return reply(msg::kUnpublishDone, PMIX_ERR_NO_PERMISSIONS);
      }
      for (const auto& k : *keys) directory_.erase(k);
    }
    reply(msg::kUnpublishDone, PMIX_SUCCESS);
  }
}

int Controller::run() {
  sigemptyset(&signals_);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT}) sigaddset(&signals_, s);
  if (hup_ignored_) sigdelset(&signals_, SIGHUP);
  // Blocked until accrun exits: one that comes after loop() read its last
  // would otherwise end accrun before it returns the job's status.
  sigprocmask(SIG_BLOCK, &signals_, &old_mask_);
  const auto t0 = Clock::now();
  auto trace = [&](const char* what) {
    if (log_level() >= LogLevel::kDebug)
      log(LogLevel::kDebug, "controller %8.3f ms  %s",
          std::chrono::duration<double, std::milli>(Clock::now() - t0).count(), what);
  };
  if (planned_) {
    if (int rc = plan_here_and_start(); rc != 0) return rc;
  } else {
    auto entries = entries_of(options_);
    if (!entries) {
      say(entries.status().message());
      return 2;
    }
    entries_ = std::move(*entries);
    if (int rc = too_many_ranks(); rc != 0) return rc;
    if (int rc = start_agents(); rc != 0) return rc;
  }
  trace("agents up");
  int rc = plan_and_launch();
  trace("launch sent");
  if (rc < 0) rc = loop();
  trace("every host done");
  agents_->shutdown();
  trace("agents gone");
  return rc;
}

// A job of this host alone.  Its agent is forked first and starts the
// job's janitor, directories and PMIx server (node_daemon.hpp,
// prepare_job) while this process detects the host and plans: most of the
// time before the first rank starts goes to those two, and they overlap.
// Bad input still starts no rank: the agent undoes its start and leaves
// before accrun exits with status 2.
int Controller::plan_here_and_start() {
  const detect::DetectConfig config = detect_config(options_, envp_);
  std::string name = this_hostname(config);  // what the plan calls this host
  if (options_.hostfile || options_.host_list) {
    auto entries = entries_of(options_);
    if (entries && entries->size() == 1) name = entries->front().name;
  }
  hostfiles::HostEntry e;
  e.name = name;
  e.origin = "local";
  entries_.push_back(std::move(e));
  job_id_ = new_job_id();
  if (int rc = start_agents(false, name); rc != 0) return rc;
  auto plan = plan_here_();
  if (Status s = agents_->wait_for_hellos(); !s) return agents_failed(s);
  if (!plan) {
    say(plan.status().message());
    agents_->shutdown();
    return plan_failure_status(plan.status());
  }
  plan_ = std::move(*plan);
  if (plan_.hosts.size() == 1 && plan_.hosts[0].inventory.host == entries_[0].name) {
    entries_[0].origin = plan_.hosts[0].origin;
    return 0;
  }
  // Not the one host it was started for: an agent per host of the plan
  // (every one of them this host), started afresh.
  agents_->shutdown();
  agents_.reset();
  entries_.clear();
  for (const auto& h : plan_.hosts) {
    hostfiles::HostEntry he;
    he.name = h.inventory.host;
    he.origin = h.origin;
    entries_.push_back(std::move(he));
  }
  return start_agents();
}

int Controller::start_agents(bool wait, const std::string& prepare_as) {
  AgentsConfig config = agents_config(options_, envp_);
  const std::string self = this_hostname(detect_config(options_, envp_));
  for (const auto& e : entries_) {
    config.hosts.push_back(e.name);
    config.local.push_back(planned_ || names_this_host(e.name, self));
  }
  char** envp = envp_;
  EarlyJob early;
  if (!prepare_as.empty()) early = EarlyJob{prepare_as, job_id_};
  // (This host's agent is forked with the signals accrun blocks as they were.)
  config.local_agent = [envp, early, mask = old_mask_](int fd, int index) {
    sigprocmask(SIG_SETMASK, &mask, nullptr);
    return run_local_agent(fd, index, envp, early);
  };
  config.interrupted = [this] { return interrupted(); };
  auto started = AgentSet::start(config);
  if (!started) {
    say(started.status().message());
    return started.status().code() == Code::kInvalidUsage ? 2 : 1;
  }
  agents_ = std::move(*started);
  if (!wait) return 0;
  if (Status s = agents_->wait_for_hellos(); !s) return agents_failed(s);
  return 0;
}

// Bad input that needs no agent to see, so none is started: more ranks
// than the hosts' slots, every one of them given (-H host:N, slots=N),
// without --oversubscribe.  The planner, from the declarations, words it
// as the launch would have.
int Controller::too_many_ranks() {
  if (!options_.np || options_.oversubscribe || entries_.empty()) return 0;
  long slots = 0;
  for (const auto& e : entries_) {
    if (!e.slots) return 0;
    slots += *e.slots;
  }
  if (*options_.np <= slots) return 0;
  auto plan = build_plan(options_, envp_, 0);
  if (plan || plan.status().code() == Code::kSystem) return 0;  // (then the launch says what is wrong)
  say(plan.status().message());
  return 2;
}

// An INT, TERM or HUP that came while the agents start ends the start (a
// job of ranks not yet started has nothing to forward it to); the other
// signals stay pending for loop().
bool Controller::interrupted() {
  if (stopped_by_ != 0) return true;
  sigset_t stop;
  sigemptyset(&stop);
  for (int s : {SIGINT, SIGTERM, SIGHUP})
    if (sigismember(&signals_, s)) sigaddset(&stop, s);
  const timespec now{0, 0};
  const int sig = sigtimedwait(&stop, nullptr, &now);
  if (sig > 0) stopped_by_ = sig;
  return stopped_by_ != 0;
}

int Controller::agents_failed(const Status& s) {
  if (stopped_by_ != 0) {
    say(std::string("received ") + sigabbrev_np(stopped_by_) +
        " while the agents were starting; stopping them (no rank had started)");
  } else {
    say(s.message());
  }
  agents_->shutdown();
  return stopped_by_ != 0 ? 128 + stopped_by_ : 1;
}

int Controller::plan_and_launch() {
  if (!planned_) {
    if (int rc = plan_from_hellos(); rc != 0) return rc;
  }
  return launch();
}

int Controller::plan_from_hellos() {
  std::map<std::string, detect::Inventory> detected;
  for (const auto& h : agents_->hellos()) {
    if (h.detected && h.inventory_json.empty()) continue;  // this host: detected by build_plan
    if (!h.detected) {
      say("host " + h.host + ": detection failed: " + h.inventory_json);
      return 2;
    }
    auto inv = detect::from_json(h.inventory_json);
    auto cores = detect::cores_from_text(h.cores);
    if (!inv || inv->size() != 1 || !cores) {
      say("host " + h.host + ": the agent's inventory is unreadable");
      return 1;
    }
    // Its cores too, so that its ranks are bound as this host's would be.
    inv->front().cores = std::move(*cores);
    inv->front().topology_from_xml = h.cores_from_xml;
    detected[h.host] = inv->front();
  }
  // Hosts that are this one are planned from their agent's detection too.
  Options planned = options_;
  auto plan = build_plan(planned, envp_, 0, &detected);
  if (!plan) {
    say(plan.status().message());
    return plan_failure_status(plan.status());
  }
  plan_ = std::move(*plan);
  return 0;
}

int Controller::launch() {
  // MASTER_PORT: free on rank 0's host, chosen there by its agent.
  std::map<std::string, int> agent_by_name;
  for (size_t i = 0; i < entries_.size(); ++i) agent_by_name[entries_[i].name] = static_cast<int>(i);
  agent_of_host_.clear();
  host_of_agent_.assign(entries_.size(), -1);
  for (size_t h = 0; h < plan_.hosts.size(); ++h) {
    int a = agent_by_name.at(plan_.hosts[h].inventory.host);
    agent_of_host_.push_back(a);
    host_of_agent_[static_cast<size_t>(a)] = static_cast<int>(h);
  }
  ranks_of_agent_.assign(entries_.size(), 0);
  gone_ranks_of_agent_.assign(entries_.size(), 0);
  for (const auto& r : plan_.ranks)
    ++ranks_of_agent_[static_cast<size_t>(agent_of_host_[static_cast<size_t>(r.host)])];
  if (!plan_.ranks.empty()) {
    int port = agents_->hellos()[static_cast<size_t>(agent_of_host_[static_cast<size_t>(plan_.ranks[0].host)])].free_port;
    // Planned without a port (0): every rank gets the one rank 0's agent chose.
    for (auto& r : plan_.ranks)
      if (port > 0 && r.env.count("MASTER_ADDR") != 0) r.env.emplace("MASTER_PORT", std::to_string(port));
  }
  RunConfig cfg;
  cfg.command = options_.command;
  // A relative --wdir or --output-dir is under accrun's working directory
  // on every host (as mpirun's), not under each agent's own (the login's
  // home directory on another host).
  char cwd[4096];
  const bool have_cwd = getcwd(cwd, sizeof cwd) != nullptr;
  auto absolute = [&](std::optional<std::string> dir) {
    if (dir && dir->front() != '/' && have_cwd) dir = std::string(cwd) + "/" + *dir;
    return dir;
  };
  cfg.wdir = absolute(options_.wdir);
  if (!cfg.wdir && have_cwd) {
    // Ranks start where accrun was started, on hosts where that directory
    // exists (a shared file system), else in the agent's home (as mpirun).
    cfg.wdir = std::string(cwd);
    cfg.wdir_soft = true;
  }
  cfg.tag_output = options_.tag_output;
  cfg.output_dir = absolute(options_.output_dir);
  cfg.stdin_mode = options_.stdin_mode;
  cfg.stdin_rank = options_.stdin_rank;
  // This host only: its agent, forked here, reads accrun's stdin itself (a
  // file is handed to the ranks as it is).  Otherwise this process reads it
  // and pushes it to the agents whose ranks take it.
  if (!planned_ && options_.stdin_mode != StdinMode::kNone && fcntl(0, F_GETFD) >= 0) {
    cfg.stdin_pushed = true;
    for (const auto& r : plan_.ranks) {
      if (options_.stdin_mode == StdinMode::kRank && r.rank != options_.stdin_rank) continue;
      stdin_in_flight_[agent_of_host_[static_cast<size_t>(r.host)]] = 0;
    }
    stdin_open_ = !stdin_in_flight_.empty();
  }
  cfg.kill_grace_s = options_.kill_grace_s;
  // Every agent ends its ranks at --timeout, as counted from the launch
  // (they get it at the same moment), and says which were still running.
  cfg.timeout_s = options_.timeout_s;
  cfg.on_failure = options_.on_failure;
  cfg.mpi = options_.mpi;
  cfg.report_bindings = options_.report_bindings;
  cfg.hup_ignored = hup_ignored_;
  // -x VAR takes its value from accrun's environment here, not the agents'.
  for (auto [name, value] : options_.exports) {
    if (!value) {
      for (char** e = envp_; e != nullptr && *e != nullptr; ++e)
        if (std::strncmp(*e, name.c_str(), name.size()) == 0 && (*e)[name.size()] == '=') value = *e + name.size() + 1;
    }
    cfg.exports.emplace_back(name, value);
  }
  cfg.bind = !options_.topology;
  // One job id, so one PMIx namespace, on every host.
  if (job_id_.empty()) job_id_ = new_job_id();
  cfg.jobid = job_id_;
  // MPI_Comm_spawn places its processes in the slots the ranks left free.
  {
    std::vector<SpawnBook::Host> hosts;
    for (const auto& h : plan_.hosts) hosts.push_back({h.inventory.host, h.slots, 0, h.inventory.cpus});
    for (const auto& r : plan_.ranks) ++hosts[static_cast<size_t>(r.host)].ranks;
    spawns_ = std::make_unique<SpawnBook>(std::move(hosts), options_.oversubscribe);
    cfg.universe = spawns_->universe();
  }
  plan_fence_tree();
  done_.assign(entries_.size(), false);
  last_seen_.assign(entries_.size(), Clock::now());
  heard_since_launch_.assign(entries_.size(), false);
  ranks_started_.assign(entries_.size(), false);
  // An agent lost here is handled once every other has its launch: what
  // its loss tells them (kFencesFail) must come after their kLaunch.
  std::vector<int> unsent;
  for (size_t a = 0; a < entries_.size(); ++a) {
    int h = host_of_agent_[a];
    if (h < 0) {
      agents_->send(static_cast<int>(a), msg::kShutdown, "");
      agents_->close_agent(static_cast<int>(a));
      done_[a] = true;
      continue;
    }
    if (!agents_->send(static_cast<int>(a), msg::kLaunch, msg::encode_launch(h, plan_, cfg)))
      unsent.push_back(static_cast<int>(a));
  }
  for (int a : unsent) on_lost(a, "cannot send it its ranks");
  log(LogLevel::kDebug, "launched %zu ranks on %zu hosts", plan_.ranks.size(), plan_.hosts.size());
  // The controller's own deadline only backs the agents' up: an agent that
  // has not ended its ranks by then has its host's ranks killed.
  if (options_.timeout_s > 0)
    deadline_ = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(
                                   (options_.timeout_s + options_.kill_grace_s) * 1000) + 3000);
  return -1;
}

std::set<int> Controller::participants(const std::string& signature) const {
  std::set<int> out;
  auto members = msg::parse_signature(signature);
  if (!members) return out;
  if (members->all) {
    for (size_t a = 0; a < host_of_agent_.size(); ++a)
      if (host_of_agent_[a] >= 0) out.insert(static_cast<int>(a));
    return out;
  }
  for (int id : members->ids)
    if (int a = agent_of_proc(id); a >= 0) out.insert(a);
  return out;
}

bool Controller::lost_participant(const std::string& signature) const {
  if (lost_.empty() || along_tree(signature)) return false;
  // (A lost host whose ranks in the fence were all gone before took no
  // part in its rounds any more: they go on without it.)
  for (int a : participants(signature))
    if (lost_.count(a) != 0 && !gone_from(a, signature)) return true;
  return false;
}

bool Controller::gone_from(int agent, const std::string& signature) const {
  if (gone_procs_.empty() || signature.rfind("pmi:", 0) == 0) return false;
  auto members = msg::parse_signature(signature);
  if (!members) return false;
  if (members->all) {
    size_t a = static_cast<size_t>(agent);
    return ranks_of_agent_[a] > 0 && gone_ranks_of_agent_[a] == ranks_of_agent_[a];
  }
  bool any = false;
  for (int id : members->ids) {
    if (agent_of_proc(id) != agent) continue;
    if (gone_procs_.count(id) == 0) return false;
    any = true;
  }
  return any;
}

void Controller::proc_gone(int id) {
  // Under kill the job is ending: the other ranks wait in their fences for that.
  if (options_.on_failure != OnFailure::kContinue || !gone_procs_.insert(id).second) return;
  int agent = agent_of_proc(id);
  if (agent < 0) return;
  if (id < static_cast<int>(plan_.ranks.size())) ++gone_ranks_of_agent_[static_cast<size_t>(agent)];
  if (!fence_parent_.empty() && !tree_fences_failed_ && lost_.count(agent) == 0 &&
      gone_from(agent, "*")) {
    fail_tree_fences(
        "host " + entries_[static_cast<size_t>(agent)].name +
        " has no rank left in the job, and whole-job fences travel the tree of agents through it");
  }
  std::vector<std::string> open;
  for (auto& [sig, q] : rounds_)
    if (!q.empty()) open.push_back(sig);
  for (const std::string& sig : open) complete_rounds(sig);
}

void Controller::complete_rounds(const std::string& sig) {
  // A whole-job round along the tree is answered to the top of the tree,
  // which passes it down; any other to each participant.
  auto& q = rounds_[sig];
  std::set<int> who = participants(sig);
  bool tree = along_tree(sig);
  auto in = [&](const Round& round) {
    for (int a : who)
      if (round.parts.count(a) == 0 && !gone_from(a, sig)) return false;
    return true;
  };
  while (!q.empty() && in(q.front())) {
    std::string all;
    for (auto& [a, part] : q.front().parts) all += part;
    log(LogLevel::kDebug, "fence %s: round %zu complete, %zu host(s), %zu bytes", sig.c_str(),
        completed_[sig] + 1, q.front().parts.size(), all.size());
    std::string answer = msg::encode_fence_done(sig, true, all);
    for (auto& [a, part] : q.front().parts)
      if (!tree || fence_parent_[static_cast<size_t>(a)] < 0)
        agents_->send(a, msg::kFenceDone, answer);
    if (tree) last_answer_[sig] = std::move(answer);
    q.pop_front();
    ++completed_[sig];
  }
}

void Controller::fence_failed(int agent, const std::string& signature, const std::string& why) {
  if (!done_[static_cast<size_t>(agent)])
    agents_->send(agent, msg::kFenceDone, msg::encode_fence_done(signature, false, why));
}

std::string Controller::lost_why(const std::string& signature) const {
  for (int a : participants(signature))
    if (lost_.count(a) != 0 && !gone_from(a, signature))
      return "host " + entries_[static_cast<size_t>(a)].name + " was lost";
  return "a host of the fence was lost";
}

void Controller::fail_rounds(const std::string& signature, const std::string& why) {
  auto& q = rounds_[signature];
  while (!q.empty()) {
    log(LogLevel::kDebug, "fence %s: round %zu fails: %s", signature.c_str(),
        completed_[signature] + 1, why.c_str());
    for (auto& [a, part] : q.front().parts) fence_failed(a, signature, why);
    q.pop_front();
    ++completed_[signature];
  }
}

bool Controller::along_tree(const std::string& signature) const {
  return !fence_parent_.empty() && msg::whole_job(signature);
}

void Controller::fail_tree_fences(const std::string& why) {
  tree_fences_failed_ = true;
  wire::Writer w;
  std::vector<std::string> sigs;
  for (auto& [sig, n] : completed_)
    if (n > 0 && along_tree(sig)) sigs.push_back(sig);
  w.u32(static_cast<uint32_t>(sigs.size()));
  for (const std::string& sig : sigs) {
    w.str(sig);
    w.u64(completed_[sig]);
    const std::string& answer = last_answer_[sig];
    w.bytes(answer.data(), answer.size());
  }
  w.str(why);
  for (size_t a = 0; a < done_.size(); ++a)
    if (!done_[a] && lost_.count(static_cast<int>(a)) == 0)
      agents_->send(static_cast<int>(a), msg::kFencesFail, w.data());
  // The parts held here belong to rounds the agents now fail themselves.
  for (auto& [sig, q] : rounds_)
    if (along_tree(sig)) q.clear();
  log(LogLevel::kDebug, "whole-job fences fail from now on: %s", why.c_str());
}

void Controller::plan_fence_tree() {
  fence_parent_.clear();
  const std::vector<int>& tree = agents_->tree();
  int fanout = agents_->fanout();
  // Only a tree of more than one round spares the controller anything.
  if (static_cast<int>(tree.size()) <= fanout) return;
  std::vector<bool> has_ranks;
  for (int a : tree) has_ranks.push_back(host_of_agent_[static_cast<size_t>(a)] >= 0);
  auto children = fence_children(has_ranks, fanout);
  if (!children) {
    log(LogLevel::kDebug, "whole-job fences go to the controller directly: an agent without ranks is inside the launch tree");
    return;
  }
  fence_parent_.assign(entries_.size(), -1);
  for (size_t i = 0; i < tree.size(); ++i) {
    if (!has_ranks[i]) continue;
    int p = tree_parent(static_cast<int>(i), fanout);
    if (p >= 0) fence_parent_[static_cast<size_t>(tree[i])] = tree[static_cast<size_t>(p)];
    wire::Writer w;
    w.u32(static_cast<uint32_t>((*children)[i].size()));
    for (int c : (*children)[i]) w.u32(static_cast<uint32_t>(tree[static_cast<size_t>(c)]));
    agents_->send(tree[i], msg::kFenceTree, w.data());
  }
  log(LogLevel::kDebug, "whole-job fences go along the launch tree (fanout %d)", fanout);
}

bool Controller::carries_for(int sender, int agent) const {
  if (agent < 0 || static_cast<size_t>(agent) >= entries_.size()) return false;
  if (agent == sender) return true;
  if (fence_parent_.empty()) return false;
  for (int a = fence_parent_[static_cast<size_t>(agent)]; a >= 0; a = fence_parent_[static_cast<size_t>(a)])
    if (a == sender) return true;
  return false;
}

int Controller::agent_of_proc(int id) const {
  int h = -1;
  if (id >= 0 && static_cast<size_t>(id) < plan_.ranks.size()) {
    h = plan_.ranks[static_cast<size_t>(id)].host;
  } else if (spawns_ && is_spawned_id(id)) {
    h = spawns_->host_of(id);
  }
  return h >= 0 ? agent_of_host_[static_cast<size_t>(h)] : -1;
}

const std::string& Controller::host_name_of_proc(int id) const {
  return entries_[static_cast<size_t>(agent_of_proc(id))].name;
}

void Controller::spawn_reply(int agent, uint64_t id, int status, const std::string& nspace) {
  if (done_[static_cast<size_t>(agent)]) return;
  wire::Writer w;
  w.u64(id);
  w.i32(status);
  w.str(nspace);
  agents_->send(agent, msg::kSpawnDone, w.data());
}

// A rank's PMIx_Spawn: placed in the slots the ranks left free, then every
// agent still running registers the namespace and starts its processes of
// it; the answer goes back once all have said so.
void Controller::on_spawn_request(int agent, const wire::Frame& f) {
  auto req = msg::decode_spawn_request(f.payload);
  if (!req) return on_lost(agent, "sent a malformed spawn request: " + req.status().message());
  uint64_t id = req->first;
  SpawnRequest& request = req->second;
  int total = 0;
  for (const SpawnApp& a : request.apps) total += a.maxprocs;
  auto refuse = [&](int status, const std::string& why) {
    say(request.who + "'s MPI_Comm_spawn (PMIx_Spawn) of " + std::to_string(total) + " process(es) was refused: " + why);
    spawn_reply(agent, id, status, "");
  };
  // The job's rank a spawn descends from, through spawned processes.
  int spawner = request.requester;
  if (auto s = spawner_of_.find(spawner); s != spawner_of_.end()) spawner = s->second;
  if (agent_of_proc(request.requester) != agent)
    return refuse(PMIX_ERR_BAD_PARAM, "the request names a process its host does not run");
  if (terminating_) return refuse(PMIX_ERR_OUT_OF_RESOURCE, "the job is ending");
  std::vector<bool> live(plan_.hosts.size(), false);
  for (size_t h = 0; h < plan_.hosts.size(); ++h) live[h] = !done_[static_cast<size_t>(agent_of_host_[h])];
  auto placed = spawns_->place(request, host_of_agent_[static_cast<size_t>(agent)], live);
  if (!placed) return refuse(PMIX_ERR_OUT_OF_RESOURCE, placed.status().message());
  SpawnLaunch launch;
  spawns_->add(job_id_, *placed, &launch);
  launch.spawner = spawner;
  launch.requester = request.requester;
  for (int i = 0; i < static_cast<int>(launch.host_of.size()); ++i) spawner_of_[launch.base + i] = launch.spawner;
  launch.who = request.who;
  launch.apps = std::move(request.apps);
  PendingSpawn& p = spawning_[launch.k];
  p.asker = agent;
  p.id = id;
  p.who = request.who;
  p.count = total;
  p.nspace = launch.nspace;
  for (int h : launch.host_of) p.hosting.insert(agent_of_host_[static_cast<size_t>(h)]);
  std::string payload = msg::encode_spawn_launch(launch);
  for (size_t a = 0; a < done_.size(); ++a) {
    if (done_[a] || host_of_agent_[a] < 0) continue;
    p.waiting.insert(static_cast<int>(a));
    agents_->send(static_cast<int>(a), msg::kSpawnLaunch, payload);
  }
  log(LogLevel::kDebug, "spawn %d: %d process(es) as %s", launch.k, total, launch.nspace.c_str());
  if (p.waiting.empty()) on_spawn_started(-1, launch.k, PMIX_SUCCESS, "");
}

void Controller::on_spawn_started(int agent, int k, int status, const std::string& why) {
  auto it = spawning_.find(k);
  if (it == spawning_.end()) return;
  PendingSpawn& p = it->second;
  p.waiting.erase(agent);
  // An agent with none of the processes may have ended meanwhile: only
  // the hosts that run some matter.
  if (status != PMIX_SUCCESS && p.hosting.count(agent) != 0 && p.status == PMIX_SUCCESS) {
    p.status = status;
    p.why = "on host " + entries_[static_cast<size_t>(agent)].name + ": " + why;
  }
  if (!p.waiting.empty()) return;
  if (p.status != PMIX_SUCCESS)
    say(p.who + "'s MPI_Comm_spawn (PMIx_Spawn) of " + std::to_string(p.count) + " process(es) failed " + p.why);
  spawn_reply(p.asker, p.id, p.status, p.status == PMIX_SUCCESS ? p.nspace : "");
  spawning_.erase(it);
}

void Controller::signal_all(int sig, int except) {
  wire::Writer w;
  w.i32(sig);
  for (size_t a = 0; a < done_.size(); ++a)
    if (!done_[a] && static_cast<int>(a) != except) agents_->send(static_cast<int>(a), msg::kSignal, w.data());
}

void Controller::fail(int status) {
  if (!exit_code_) exit_code_ = status;
}

void Controller::judge_uninitialised() {
  if (!first_initialised_) return;
  std::vector<int> ended;
  ended.swap(ended_uninitialised_);
  for (int rank : ended) {
    if (terminating_) return;
    if (lost_.count(agent_of_proc(rank)) != 0) continue;  // reported lost with its host
    const std::string text = "rank " + std::to_string(rank) + " on host " + host_name_of_proc(rank) +
                             " exited without initialising PMIx or PMI (MPI_Init), while rank " +
                             std::to_string(*first_initialised_) + " on host " + host_name_of_proc(*first_initialised_) +
                             " did: once one rank initialises, every rank must, or the others wait for it in the "
                             "job's fences for ever";
    say(text);
    bool first = !exit_code_.has_value();
    fail(1);
    // Every host's ranks hear of it, its own host's too (its agent did not judge it).
    peer_failed(rank, 1, "no-init", text, -1);
    if (first && options_.on_failure == OnFailure::kKill) {
      say("terminating the ranks still running on every host (--on-failure kill)");
      end_others(-1);
    }
    proc_gone(rank);
  }
}

// The job's first failure, on `agent`'s host: under --on-failure kill the
// other hosts' ranks are terminated (that host applies the policy to its
// own).
void Controller::end_others(int agent) {
  if (options_.on_failure != OnFailure::kKill) return;
  terminating_ = true;
  signal_all(SIGTERM, agent);
}

void Controller::on_lost(int agent, const std::string& why) {
  if (done_[static_cast<size_t>(agent)]) return;
  done_[static_cast<size_t>(agent)] = true;
  agents_->abandon(agent);
  // A spawn waiting for it goes on without it (and fails if it was to run
  // some of the processes).
  std::vector<int> waiting_on;
  for (const auto& [k, p] : spawning_)
    if (p.waiting.count(agent) != 0) waiting_on.push_back(k);
  for (int k : waiting_on) on_spawn_started(agent, k, PMIX_ERR_UNREACH, "its host was lost (" + why + ")");
  // Whoever waits for data from its ranks hears that it is gone.
  for (auto it = modex_.begin(); it != modex_.end();) {
    if (it->second.owner != agent) {
      ++it;
      continue;
    }
    modex_reply(it->second.asker, it->second.id, PMIX_ERR_UNREACH, "");
    it = modex_.erase(it);
  }
  if (terminating_) return;
  const std::string& host = entries_[static_cast<size_t>(agent)].name;
  fail(1);
  if (options_.on_failure == OnFailure::kContinue) {
    // The job goes on without the host: every other host's ranks hear that
    // its ranks are lost, as of any failed rank.
    say("host " + host + ": " + why + "; its ranks are lost, the others go on (--on-failure continue)");
    lost_.insert(agent);
    if (!fence_parent_.empty() && !tree_fences_failed_)
      fail_tree_fences("host " + host + " was lost");
    for (auto& [sig, q] : rounds_)
      if (!q.empty() && lost_participant(sig)) fail_rounds(sig, lost_why(sig));
    for (size_t r = 0; r < plan_.ranks.size(); ++r) {
      if (agent_of_host_[static_cast<size_t>(plan_.ranks[r].host)] != agent) continue;
      peer_failed(static_cast<int>(r), 1, "lost",
                  "rank " + std::to_string(r) + " on host " + host + " was lost with its host (" + why + ")", agent);
    }
    return;
  }
  say("host " + host + ": " + why + "; its ranks are lost, terminating the others");
  terminating_ = true;
  signal_all(SIGKILL);
}

void Controller::peer_failed(int rank, int status, const std::string& kind, const std::string& text, int except) {
  wire::Writer w;
  w.u32(static_cast<uint32_t>(rank));
  w.i32(status);
  w.str(kind);
  w.str(host_name_of_proc(rank));
  w.str(text);
  for (size_t a = 0; a < done_.size(); ++a)
    if (!done_[a] && static_cast<int>(a) != except) agents_->send(static_cast<int>(a), msg::kPeerFailed, w.data());
}

void Controller::on_frame(int agent, const wire::Frame& f) {
  last_seen_[static_cast<size_t>(agent)] = Clock::now();
  wire::Reader r(f.payload);
  switch (f.type) {
    case msg::kOutput: {
      auto stream = r.u8("output: stream");
      auto data = r.bytes_view("output: data");
      if (!stream || !data) return on_lost(agent, "sent malformed output");
      int which = *stream == 1 ? 0 : 1;
      if (output_lost_[which]) return;
      out_[which].push(*data);
      if (!out_[which].flush()) output_failed(which);
      flow_output();
      return;
    }
    case msg::kRankFailed: {
      auto rank = r.u32("failed: rank");
      auto status = r.i32("failed: status");
      auto text = r.str("failed: text");
      auto kind = r.str("failed: kind");
      if (!rank || !status || !text || !kind || *rank > INT32_MAX || agent_of_proc(static_cast<int>(*rank)) != agent)
        return on_lost(agent, "sent a malformed failure");
      bool first = !exit_code_.has_value() && !terminating_;
      fail(*status);
      // The other hosts' ranks hear of it too (their libraries may be
      // waiting on it), before any policy signal.
      peer_failed(static_cast<int>(*rank), *status, *kind, *text, agent);
      if (first) end_others(agent);
      proc_gone(static_cast<int>(*rank));
      return;
    }
    case msg::kFence: {
      auto fence = msg::decode_fence(f.payload);
      if (!fence) return on_lost(agent, "sent a malformed fence");
      const std::string& sig = fence->signature;
      // Sent before its agents heard that whole-job fences fail: they fail
      // that round themselves.
      if (tree_fences_failed_ && along_tree(sig)) return;
      auto& q = rounds_[sig];
      size_t base = completed_[sig];
      for (auto& [a, blob] : fence->parts) {
        if (!carries_for(agent, a)) return on_lost(agent, "sent a fence contribution of another agent's");
        size_t k = contributed_[{a, sig}]++;
        if (k < base) {  // its round ended already: failed (a participant's host was lost) or went
                         // on without it
          fence_failed(
              a, sig,
              lost_participant(sig) ? lost_why(sig) : "the round ended without this host's part");
          continue;
        }
        while (q.size() <= k - base) q.emplace_back();
        q[k - base].parts[a] = std::move(blob);
      }
      if (lost_participant(sig)) return fail_rounds(sig, lost_why(sig));
      return complete_rounds(sig);
    }
    case msg::kInitialised:
    case msg::kEndedUninitialised: {
      auto rank = r.u32("initialised: rank");
      if (!rank || *rank > INT32_MAX || agent_of_proc(static_cast<int>(*rank)) != agent)
        return on_lost(agent, "sent a malformed rank");
      if (f.type == msg::kEndedUninitialised) {
        ended_uninitialised_.push_back(static_cast<int>(*rank));
      } else if (!first_initialised_) {
        first_initialised_ = static_cast<int>(*rank);
      }
      return judge_uninitialised();
    }
    case msg::kDone: {
      auto status = r.i32("done: status");
      done_[static_cast<size_t>(agent)] = true;
      if (!status || *status == 0) return;
      // A host whose ranks never started (a program or --wdir missing
      // there) fails the job as a rank would: the others' ranks may be
      // running.  (A host whose ranks ran reported their failures itself,
      // or ended them at --timeout as every host does.)
      bool first = !exit_code_.has_value() && !terminating_;
      fail(*status);
      if (first && !ranks_started_[static_cast<size_t>(agent)]) end_others(agent);
      return;
    }
    case msg::kModexRequest: {
      auto id = r.u64("modex request: id");
      auto rank = r.u32("modex request: rank");
      if (!id || !rank) return on_lost(agent, "sent a malformed modex request");
      int owner = *rank <= INT32_MAX ? agent_of_proc(static_cast<int>(*rank)) : -1;
      if (owner < 0 || owner == agent || done_[static_cast<size_t>(owner)])
        return modex_reply(agent, *id, PMIX_ERR_NOT_FOUND, "");
      uint64_t mine = ++next_modex_;
      modex_[mine] = {agent, *id, owner};
      wire::Writer w;
      w.u64(mine);
      w.u32(*rank);
      agents_->send(owner, msg::kModexRequest, w.data());
      return;
    }
    case msg::kModexData: {
      auto id = r.u64("modex data: id");
      auto st = r.i32("modex data: status");
      auto blob = r.bytes_view("modex data: blob");
      if (!id || !st || !blob) return on_lost(agent, "sent malformed modex data");
      auto it = modex_.find(*id);
      if (it == modex_.end() || it->second.owner != agent) return;
      ModexWay way = it->second;
      modex_.erase(it);
      return modex_reply(way.asker, way.id, *st, *blob);
    }
    case msg::kStdinTaken: {
      auto n = r.u64("stdin taken");
      if (!n) return on_lost(agent, "sent a malformed stdin acknowledgement");
      auto it = stdin_in_flight_.find(agent);
      if (it != stdin_in_flight_.end()) it->second -= std::min<size_t>(it->second, *n);
      return;
    }
    case msg::kPhase: {
      auto phase = r.u8("phase");
      if (!phase) return on_lost(agent, "sent a malformed phase");
      heard_since_launch_[static_cast<size_t>(agent)] = *phase == 1;
      if (*phase == 1) {
        ranks_started_[static_cast<size_t>(agent)] = true;
        // (From now on its silence past 3 s is a lost host.)
        log(LogLevel::kDebug, "host %s: its agent started its ranks", entries_[static_cast<size_t>(agent)].name.c_str());
      }
      return;
    }
    case msg::kSpawn:
      return on_spawn_request(agent, f);
    case msg::kSpawnStarted: {
      auto k = r.u32("spawn started: k");
      auto status = r.i32("spawn started: status");
      auto why = r.str("spawn started: why");
      if (!k || !status || !why) return on_lost(agent, "sent a malformed spawn answer");
      return on_spawn_started(agent, static_cast<int>(*k), *status, *why);
    }
    case msg::kSpawnedEnded: {
      auto id = r.u32("spawned ended: id");
      if (!id || *id > INT32_MAX) return on_lost(agent, "sent a malformed end of a spawned process");
      if (spawns_) spawns_->ended(static_cast<int>(*id));
      return;
    }
    case msg::kSignalProcs: {
      auto sp = msg::decode_signal_procs(f.payload);
      if (!sp) return on_lost(agent, "sent a malformed job control");
      std::map<int, std::vector<int>> by_agent;
      for (int id : sp->ids)
        if (int a = agent_of_proc(id); a >= 0 && a != agent && !done_[static_cast<size_t>(a)]) by_agent[a].push_back(id);
      for (const auto& [a, ids] : by_agent) agents_->send(a, msg::kSignalProcs, msg::encode_signal_procs(sp->sig, sp->stop, ids));
      return;
    }
    case msg::kHeartbeat:
    case msg::kLaunchExited:
      return;
    case msg::kPublish:
    case msg::kLookup:
    case msg::kUnpublish:
      return on_directory(agent, f);
    default:
      return on_lost(agent, "sent an unexpected message (type " + std::to_string(f.type) + ")");
  }
}

void Controller::modex_reply(int agent, uint64_t id, int status, std::string_view blob) {
  if (done_[static_cast<size_t>(agent)]) return;
  wire::Writer w;
  w.u64(id);
  w.i32(status);
  w.bytes(blob.data(), blob.size());
  agents_->send(agent, msg::kModexData, w.data());
}

// As a shell pipeline ends when its reader goes away (accrun(1) OUTPUT):
// every rank's pipe of that stream closes, the ranks die of SIGPIPE as
// they write, and accrun exits 141.
void Controller::output_failed(int which) {
  if (output_lost_[which]) return;
  int err = out_[which].error();
  output_lost_[which] = true;
  if (output_errno_ == 0) output_errno_ = err;
  say(std::string("cannot write the ranks' standard ") + (which == 0 ? "output" : "error") + ": " +
      std::strerror(err) + "; closing it for every rank" + everywhere() + " (a rank writing to it gets SIGPIPE)");
  wire::Writer w;
  w.u8(static_cast<uint8_t>(which + 1));
  w.i32(err);
  for (size_t a = 0; a < done_.size(); ++a)
    if (!done_[a]) agents_->send(static_cast<int>(a), msg::kOutputClosed, w.data());
}

// The agents stop reading their ranks' output while more than kHigh bytes
// wait for a slow reader here, and start again below kLow.
void Controller::flow_output() {
  constexpr size_t kHigh = 8 << 20, kLow = 1 << 20;
  size_t queued = out_[0].queued() + out_[1].queued();
  bool pause = output_paused_ ? queued > kLow : queued > kHigh;
  if (pause == output_paused_) return;
  output_paused_ = pause;
  wire::Writer w;
  w.boolean(pause);
  for (size_t a = 0; a < done_.size(); ++a)
    if (!done_[a]) agents_->send(static_cast<int>(a), msg::kOutputFlow, w.data());
}

bool Controller::stdin_has_room() const {
  for (const auto& [a, n] : stdin_in_flight_)
    if (!done_[static_cast<size_t>(a)] && n >= msg::kStdinWindow) return false;
  return true;
}

void Controller::forward_stdin() {
  char buf[65536];
  ssize_t n = read(0, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  bool end = n <= 0;
  wire::Writer w;
  w.boolean(end);
  w.bytes(buf, end ? 0 : static_cast<size_t>(n));
  for (auto& [a, sent] : stdin_in_flight_) {
    if (done_[static_cast<size_t>(a)]) continue;
    agents_->send(a, msg::kStdin, w.data());
    sent += end ? 0 : static_cast<size_t>(n);
  }
  if (end) stdin_open_ = false;
}

int Controller::loop() {
  // (Blocked since run() began: what came meanwhile is read here.)
  int sigfd = signalfd(-1, &signals_, SFD_CLOEXEC | SFD_NONBLOCK);
  Clock::time_point last_beat{};
  Clock::time_point last_turn = Clock::now();
  for (;;) {
    bool all_done = true;
    for (bool d : done_) all_done &= d;
    if (all_done) break;
    std::vector<pollfd> fds;
    std::vector<int> who;
    fds.push_back({sigfd, POLLIN, 0});
    who.push_back(-1);
    bool want_stdin = stdin_open_ && stdin_has_room();
    fds.push_back({want_stdin ? 0 : -1, POLLIN, 0});
    who.push_back(-1);
    for (int k = 0; k < 2; ++k) {
      fds.push_back({out_[k].empty() || output_lost_[k] ? -1 : out_[k].fd(), POLLOUT, 0});
      who.push_back(-1);
    }
    for (size_t a = 0; a < done_.size(); ++a) {
      if (done_[a]) continue;
      fds.push_back({agents_->agent_fd(static_cast<int>(a)), POLLIN, 0});
      who.push_back(static_cast<int>(a));
    }
    poll(fds.data(), fds.size(), poll_ms(Clock::now()));
    if (fds[0].revents) {
      signalfd_siginfo si;
      while (read(sigfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
        int sig = static_cast<int>(si.ssi_signo);
        if (sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGCONT) {
          signal_all(sig);
        } else if (sig == SIGTSTP) {
          // Ctrl-Z: every host's ranks stop, then accrun (fg resumes all).
          signal_all(SIGTSTP);
          kill(getpid(), SIGSTOP);
        } else if (++interrupts_ == 1) {
          say(std::string("received ") + sigabbrev_np(sig) + ", forwarding it to the ranks" + everywhere() +
              " (again to kill them)");
          fail(128 + sig);
          terminating_ = true;
          signal_all(sig);
        } else {
          signal_all(SIGKILL);
        }
      }
    }
    if (fds[1].revents) forward_stdin();
    for (int k = 0; k < 2; ++k) {
      if (!fds[2 + k].revents) continue;
      if (!out_[k].flush()) output_failed(k);
      flow_output();
    }
    for (size_t i = 4; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      int a = who[i];
      auto frames = agents_->receive(a);
      if (!frames) {
        if (!done_[static_cast<size_t>(a)]) on_lost(a, frames.status().message());
        continue;
      }
      for (const auto& f : *frames) on_frame(a, f);
    }
    auto now = Clock::now();
    // A turn that took long (writing output to a slow reader blocks; so
    // does a stop after Ctrl-Z) was not the agents' silence.
    if (now - last_turn > std::chrono::seconds(1))
      for (auto& seen : last_seen_) seen = std::max(seen, now - std::chrono::milliseconds(500));
    if (now - last_beat >= std::chrono::seconds(1)) {
      last_beat = now;
      // Before this beat goes out (wire::UnackedWatch).
      for (size_t a = 0; a < done_.size(); ++a)
        if (!done_[a] && agents_->unacknowledged_for(static_cast<int>(a), kUnackedLimit))
          on_lost(static_cast<int>(a), "acknowledged nothing accrun sent it for " +
                                           std::to_string(kUnackedLimit.count()) +
                                           " s (the host or its network is down)");
      // Agents whose ranks are done hear it too: one may still serve its
      // host's objects to the others, and ends when we go silent.
      for (size_t a = 0; a < done_.size(); ++a) agents_->send(static_cast<int>(a), msg::kHeartbeat, "");
    }
    for (size_t a = 0; a < done_.size(); ++a)
      if (auto limit = heard_since_launch_[a] ? kHeartbeatLimit : kStartLimit; !done_[a] && now - last_seen_[a] > limit)
        on_lost(static_cast<int>(a), "no word from its agent for " + std::to_string(limit.count()) +
                                         " s (the host or its network is down)");
    last_turn = Clock::now();
    if (deadline_ && now >= *deadline_) {
      deadline_.reset();
      say("--timeout " + std::to_string(static_cast<int64_t>(std::ceil(options_.timeout_s))) +
          " s passed and ranks are still running; killing them" + everywhere());
      fail(124);
      terminating_ = true;
      signal_all(SIGKILL);
    }
    expire_lookups(now);
  }
  // What the reader has not taken yet still goes out, as the reader takes
  // it; a job ended by a signal does not wait for it, and a signal now
  // ends the wait.
  while (interrupts_ == 0) {
    std::vector<pollfd> fds{{sigfd, POLLIN, 0}};
    for (int k = 0; k < 2; ++k)
      if (!output_lost_[k] && !out_[k].empty()) fds.push_back({out_[k].fd(), POLLOUT, 0});
    if (fds.size() == 1) break;
    poll(fds.data(), fds.size(), -1);
    signalfd_siginfo si;
    if (fds[0].revents && read(sigfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si) &&
        si.ssi_signo != SIGCONT && si.ssi_signo != SIGUSR1 && si.ssi_signo != SIGUSR2)
      break;
    for (int k = 0; k < 2; ++k)
      if (!output_lost_[k] && !out_[k].empty() && !out_[k].flush()) output_failed(k);
  }
  close(sigfd);
  // Output was lost although no rank failed (they wrote it and ended before
  // they could learn it): as a pipeline's writer, 141 for a reader that
  // went away (128 + SIGPIPE), 1 for another write error.
  if (!exit_code_ && output_errno_ != 0) return output_errno_ == EPIPE ? 128 + SIGPIPE : 1;
  return exit_code_.value_or(0);
}

}  // namespace

bool names_other_hosts(const Options& options, char** envp) {
  auto entries = entries_of(options);
  if (!entries) return false;
  const std::string self = this_hostname(detect_config(options, envp));
  for (const auto& e : *entries)
    if (!names_this_host(e.name, self)) return true;
  return false;
}

int run_cluster_job(const Options& options, char** envp, std::function<Result<Plan>()> plan_here) {
  signal(SIGPIPE, SIG_IGN);
  Controller c(options, envp, std::move(plan_here));
  return c.run();
}

}  // namespace accrun::launcher
