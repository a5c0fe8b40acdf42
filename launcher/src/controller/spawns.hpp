// spawns.hpp — what the job controller keeps of the processes the job's
// ranks spawn (PMIx_Spawn, MPI_Comm_spawn; accrun(7) "Spawned processes"):
// where they may go (the slots the ranks left free), where each one runs,
// and the ids it hands out.  Pure bookkeeping, no I/O; not thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "agent/node_daemon.hpp"
#include "accrun/status.hpp"

namespace accrun::launcher {

class SpawnBook {
 public:
  struct Host {
    std::string name;
    std::optional<int> slots;  // none: no slot count (the local host without a hostfile)
    int ranks = 0;             // the job's ranks on it
    int cpus = 0;              // its processing units
  };
  SpawnBook(std::vector<Host> hosts, bool oversubscribe) : hosts_(std::move(hosts)), oversubscribe_(oversubscribe) {
    live_.assign(hosts_.size(), 0);
  }

  // MPI_UNIVERSE_SIZE, as mpirun counts it: every host's slots, or where a
  // host has no slot count, its ranks or processing units, whichever is more.
  int universe() const;

  // Places the processes of `request` (the requester runs on host `near`;
  // `live[h]`: host h's agent can still start processes).  Each process
  // goes to the first host with a free slot: the application's host when
  // it names one (PMIX_HOST), else `near`, then the others in order; with
  // --oversubscribe, round the hosts when none is free.  Returns each
  // process's host and application, or why not (Code::kInvalidArgument,
  // the message says what to change).
  struct Placement {
    std::vector<int> host_of;
    std::vector<int> app_of;
  };
  Result<Placement> place(const SpawnRequest& request, int near, const std::vector<bool>& live) const;

  // Records a placed spawn and fills `launch` (its k, nspace, base id and
  // placement); `jobid` names the job's namespace.
  void add(const std::string& jobid, const Placement& placement, SpawnLaunch* launch);
  // The plan host of a spawned process (-1: no such id).
  int host_of(int id) const;
  // A spawned process ended: its slot is free again (once per id).
  void ended(int id);

 private:
  int free_slots(size_t h) const;

  std::vector<Host> hosts_;
  bool oversubscribe_;
  std::vector<int> live_;  // spawned processes running, per host
  struct Range {
    int base = 0;
    std::vector<int> host_of;
    std::vector<bool> ended;
  };
  std::vector<Range> spawns_;
  int next_id_ = kSpawnedIdBase;
};

}  // namespace accrun::launcher
