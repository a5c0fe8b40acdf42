// protocol.hpp — the messages between the job controller and the node
// agents (docs/design.md §4), carried in wire frames (wire/frame.hpp) after the
// handshake that proves the job's secret (wire/auth.hpp).  Each payload is
// written with wire::Writer and read with wire::Reader; the field lists
// below are the whole format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/node_daemon.hpp"
#include "accrun/plan.hpp"
#include "accrun/status.hpp"

namespace accrun::launcher::msg {

enum Type : uint16_t {
  // agent → controller: u32 index, str host name (as the agent sees it),
  // bool detected, str inventory JSON (accrun --detect --json, one host) or
  // the detection error, u16 a TCP port free on its host now (MASTER_PORT
  // when rank 0 lands there; 0 if none), str its cores (detect::
  // cores_to_text; "" from this host's agent, which the controller detects
  // itself), bool whether they came from an hwloc XML file.
  kHello = 1,
  // agent → controller: u32 index of a child agent whose launch agent
  // exited, i32 waitpid status.  The controller fails the job if that
  // agent never said hello.
  kLaunchExited = 2,
  // controller → agent: nothing; the agent ends (its ranks, if any, are
  // killed) and exits 0.
  kShutdown = 3,
  // controller → agent: this host's part of the job (encode_launch below).
  kLaunch = 4,
  // agent → controller: u8 stream (1 stdout, 2 stderr), bytes: whole lines
  // of the ranks' output, tagged already where --tag-output asks.
  kOutput = 5,
  // agent → controller: u32 rank, i32 status, str text, str kind: a local
  // rank's failure ("rank 3 on host h2 exited with status 3"; kind: exit,
  // signal, abort, no-finalize).
  kRankFailed = 6,
  // agent → controller, and along the launch tree child agent → parent
  // agent: str signature ("*" or ranks), then the contributions to that
  // round of a PMIx fence it carries (encode_fence): its own host's, and
  // for a whole-job fence along the tree those of the agents below it.
  kFence = 7,
  // controller → agent, and parent agent → child agent: str signature,
  // bool ok, bytes every host's contributions, concatenated in agent order.
  kFenceDone = 8,
  // controller → agent: i32 signal for every local rank's process group.
  kSignal = 9,
  // agent → controller: i32 the host's exit status (its ranks all ended).
  kDone = 10,
  // agent → controller: nothing; sent every second so that a host that
  // drops off the network is noticed.
  kHeartbeat = 11,
  // The job-wide name directory (PMIx publish/lookup/unpublish), kept by
  // the controller.  Each request carries a u64 id its answer repeats.
  // agent → controller: u64 id, u32 rank, u32 n, n × (str key, bytes value)
  kPublish = 12,
  // controller → agent: u64 id, i32 PMIx status
  kPublishDone = 13,
  // agent → controller: u64 id, u32 rank, string vector keys, bool wait,
  // u32 wait count (0: all), f64 timeout in seconds (0: none)
  kLookup = 14,
  // controller → agent: u64 id, i32 PMIx status, u32 n, n × (str key,
  // u32 publisher rank, bytes value)
  kLookupDone = 15,
  // agent → controller: u64 id, u32 rank, string vector keys (none: all of
  // the rank's)
  kUnpublish = 16,
  // controller → agent: u64 id, i32 PMIx status
  kUnpublishDone = 17,
  // controller → agent: u8 stream (1 stdout, 2 stderr), i32 errno: the
  // controller cannot write that stream any more (its reader went away, its
  // file is full); the agent closes its ranks' pipes of it, so a rank that
  // writes there gets SIGPIPE, as in a shell pipeline.
  kOutputClosed = 18,
  // controller → agent: bool end, bytes: accrun's standard input for the
  // agent's ranks that take it (RunConfig::stdin_pushed); after `end`,
  // nothing more.  The controller has at most kStdinWindow bytes sent and
  // not yet taken per agent.
  kStdin = 19,
  // agent → controller: u64 n: n more bytes of stdin reached every local
  // rank that takes it (or nobody takes them any more).
  kStdinTaken = 20,
  // Direct modex.  agent → controller: u64 id, u32 rank: the PMIx data of a
  // rank on another host; controller → the owning agent: the same, with the
  // controller's own id.
  kModexRequest = 21,
  // owning agent → controller, then controller → the asking agent: u64 id,
  // i32 PMIx status, bytes the library's blob.
  kModexData = 22,
  // controller → agent: bool pause: stop (true) or resume (false) reading
  // the ranks' output pipes; the controller holds more output than its
  // reader has taken (a slow reader's backpressure reaches the ranks).
  kOutputFlow = 23,
  // agent → controller: u8 phase: 1 its ranks started and its event loop
  // runs (from now on it beats every second: silence past 3 s is a lost
  // host); 2 its ranks ended and it cleans up (slow on a loaded host: its
  // silence is judged as leniently as while it started).
  kPhase = 24,
  // controller → agent: u32 rank, i32 status, str kind, str host, str text:
  // a rank on another host failed, or was lost with its host (kind "lost",
  // --on-failure continue); the agent tells its ranks with a PMIx event, as
  // it does for its own ranks' failures, so libraries waiting on that rank
  // give up.
  kPeerFailed = 25,
  // PMIx_Spawn (MPI_Comm_spawn).  agent → controller: u64 id, then the
  // request (encode_spawn_request).
  kSpawn = 26,
  // controller → every agent still running: the placed spawn
  // (encode_spawn_launch).
  kSpawnLaunch = 27,
  // agent → controller: u32 k, i32 PMIx status, str why (on failure): the
  // namespace is registered and this host's processes of it started.
  kSpawnStarted = 28,
  // controller → the requesting agent: u64 id, i32 PMIx status, str the
  // new namespace (on success).
  kSpawnDone = 29,
  // agent → controller: u32 id of a spawned process that ended (its slot
  // is free again).
  kSpawnedEnded = 30,
  // PMIx_Job_control.  agent → controller, then controller → each agent
  // that runs some of them: i32 signal, bool stop (kill or terminate: the
  // deaths are asked for, not failures), u32 n, n × u32 process id.
  kSignalProcs = 31,
  // controller → agent, before kLaunch: u32 n, n × u32 agent id: whole-job
  // fences travel the launch tree (agent/tree_links.hpp); each round waits
  // for the contributions of these children.  Without it (the tree would
  // need an agent without ranks to relay, or a srun step started the
  // agents), every agent fences with the controller directly.
  kFenceTree = 32,
  // child agent → the agent that started it, first on their link: u32 the
  // child's agent id.
  kTreeJoin = 33,
  // controller → every agent, under --on-failure continue when a host was
  // lost (or has no rank left) while whole-job fences travel the launch
  // tree: that agent's part, and those it carried, never come, so
  // whole-job fences stop travelling the tree and every round not answered
  // yet fails, now and later, as with direct fences.  u32 n, n × (str
  // signature, u64 rounds the controller completed, bytes the last one's
  // answer (a kFenceDone payload; a host whose parent agent was lost may
  // not have had it)), then str why.
  kFencesFail = 34,
  // agent → controller, in a job across hosts: u32 the first of this
  // host's ranks that initialised PMIx or PMI (once), and u32 each rank of
  // the job that ended with status 0 without initialising.  A rank that
  // never initialised while another did holds up the job's fences for ever,
  // so the controller takes it for a failed rank (on one host the agent
  // itself does).
  kInitialised = 35,
  kEndedUninitialised = 36,
};

constexpr size_t kStdinWindow = 1 << 20;

// kLaunch: the host this agent runs (an index into plan.hosts), the plan
// as the daemon needs it (host names; each rank's host, CPUs and
// environment), and how to run the ranks.  The agent's own environment is
// what its ranks inherit; `inherited` is not carried.
std::string encode_launch(int host, const Plan& plan, const RunConfig& config);
struct Launch {
  int host = 0;
  Plan plan;
  RunConfig config;
};
Result<Launch> decode_launch(std::string_view payload);

// kSpawn's payload: u64 id, u32 requester, str who, string map of job
// directives, u32 n, n × app (str cmd, string vector argv, string vector
// env, str cwd, i32 maxprocs, string map of directives).
std::string encode_spawn_request(uint64_t id, const SpawnRequest& request);
Result<std::pair<uint64_t, SpawnRequest>> decode_spawn_request(std::string_view payload);
// kSpawnLaunch's payload: u32 k, str nspace, u32 base, u32 requester, u32 spawner, str
// who, u32 n, n × app (as above), u32 m, m × (u32 host, u32 app).
std::string encode_spawn_launch(const SpawnLaunch& launch);
Result<SpawnLaunch> decode_spawn_launch(std::string_view payload);

// A fence round's signature, as the agents' PMIx and PMI servers write it:
// an optional kind ("pmi:", "connect:", "disconnect:") that keeps rounds of
// different kinds apart, then "*" (every rank of the job) or the ids of the
// members (pmix_server.hpp), comma-separated.  nullopt: malformed.
struct FenceMembers {
  bool all = false;
  std::vector<int> ids;
};
std::optional<FenceMembers> parse_signature(std::string_view signature);
// Whether a signature is a fence of every rank of the job ("*", any kind):
// those travel the launch tree.
bool whole_job(std::string_view signature);

// kFenceDone's payload: the signature, bool ok, bytes every host's
// contribution, or why it failed (the controller's words, for the ranks'
// error messages; may be empty).
struct FenceDone {
  std::string signature;
  bool ok = false;
  std::string all;
};
std::string encode_fence_done(const std::string& signature, bool ok, std::string_view all);
std::optional<FenceDone> decode_fence_done(std::string_view payload);

// kFence's payload: the signature, then u32 n, n × (u32 agent id, bytes
// that agent's host's contribution).
struct FenceParts {
  std::string signature;
  std::vector<std::pair<int, std::string>> parts;
};
std::string encode_fence(const std::string& signature, const std::vector<std::pair<int, std::string>>& parts);
Result<FenceParts> decode_fence(std::string_view payload);

// kSignalProcs's payload, both ways.
struct SignalProcs {
  int sig = 0;
  bool stop = false;
  std::vector<int> ids;
};
std::string encode_signal_procs(int sig, bool stop, const std::vector<int>& ids);
Result<SignalProcs> decode_signal_procs(std::string_view payload);

}  // namespace accrun::launcher::msg
