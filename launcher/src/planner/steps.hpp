// The planner's steps (docs/design.md §4 "Planning").  plan() in planner.cpp
// runs them in this order:
//
//   1. validate_spec       the request alone: -n, resource names and quantities
//   2. eligible_hosts      --accelerator-type: which hosts may be used
//   3. host_capacities     how many ranks each of them holds (devices, slots)
//   4. place_in_order /    how many ranks go to each host, in rank order
//      place_pod_blocks    (hosts in order, or blocks inside pod groups)
//   5. number_ranks        global and local ranks, node ranks, the plan's hosts
//   then for each host of the plan:
//   6. assign_devices      device ids and fractions per rank
//   7. bind_cpus           a cpuset per rank, close to its devices
//   8. RankEnvironment     the variables accrun sets for each rank
//
// Every step is a pure function of its arguments (no I/O, no getenv) and is
// unit-tested on its own (tests/unit/test_planner_steps.cpp).  Work is linear
// in hosts + ranks (+ groups × blocks for --pod-blocks): 80,000 ranks on
// 10,000 hosts plan in well under a second (benchmarks/bench_planner.cpp).
// Internal to the launcher: only plan() in accrun/plan.hpp is public.
#pragma once

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "accrun/plan.hpp"

namespace accrun::detect {
class Provider;
}

namespace accrun::launcher::planner {

// A capacity without a limit; sums of it never overflow.
constexpr long long kUnlimited = std::numeric_limits<long long>::max() / 4;

// One requested resource with the devices of it on one host.
struct ResourceSlot {
  std::string name;
  detect::Quantity q;                               // per rank
  std::vector<const detect::Accelerator*> devices;  // in inventory order
  long long ranks_fit = 0;                          // how many ranks the devices hold
};

// A host as placement works on it.
struct Candidate {
  int input = 0;                          // index into plan()'s hosts argument
  std::vector<ResourceSlot> resources;    // one per requested resource, in request order
  long long device_cap = kUnlimited;      // ranks the devices hold
  long long slot_cap = kUnlimited;        // slots (unless --oversubscribe), --npernode
  long long first_pass_cap = kUnlimited;  // slots even under --oversubscribe: filled first
  long long cap() const { return std::min(device_cap, slot_cap); }
  long long used = 0;                     // ranks placed so far
  std::vector<int> ranks;                 // global ranks placed here, ascending (number_ranks)
};

// `count` consecutive ranks on candidate `candidate`.
struct Run {
  int candidate = 0;
  int count = 0;
  bool operator==(const Run&) const = default;
};

// --- 1. the request -----------------------------------------------------------

// Checks the request on its own: -n in range, canonical resource names given
// once each, quantities each resource allows, non-negative counts.  Errors
// are invalid arguments naming the option.
Status validate_spec(const JobSpec& spec);
// How messages name the ranks asked for: "-n 8", or "32 ranks (the hosts'
// slots, as -n was not given)".
std::string ranks_asked(const JobSpec& spec);

// How many ranks asking `q` of a resource fit on `devices` devices: fractions
// pack one device before the next, whole requests take whole devices.
// kUnlimited for a zero request.
long long ranks_on_devices(std::size_t devices, detect::Quantity q);

// --- 2–3. hosts ---------------------------------------------------------------

// Indexes into `hosts` of the hosts the job may use, in order: every host, or
// under --accelerator-type those having a device of that type (or of a
// variant of it).  No host of the type is an error listing the types the
// hosts do have.
Result<std::vector<int>> eligible_hosts(const JobSpec& spec, const std::vector<HostSlots>& hosts);

// One Candidate per eligible host: its devices of each requested resource and
// the ranks they, the host's slots and --npernode allow.
std::vector<Candidate> host_capacities(const JobSpec& spec, const std::vector<HostSlots>& hosts,
                                       const std::vector<int>& eligible);

// --- 4. placement -------------------------------------------------------------

// mpirun's default: fills the candidates in order up to their slots, then
// under --oversubscribe spreads the rest round-robin within the device and
// --npernode limits.  Updates each candidate's `used`.  Fails, naming the
// resource or slots that ran out, when the ranks do not fit.
Result<std::vector<Run>> place_in_order(const JobSpec& spec, const std::vector<HostSlots>& hosts,
                                        std::vector<Candidate>& cands);

// The groups of candidates at spec.pod_level, in order of first appearance;
// a host without a label is a group of its own.  At the pod level the hosts
// of a group follow their worker order (Inventory::pod_order; hosts without
// one after, in input order).
struct PodGroup {
  std::string name;          // "pod 'nvl-a'", "host gpu7": for messages
  std::vector<int> members;  // candidate indexes
};
std::vector<PodGroup> pod_groups(const JobSpec& spec, const std::vector<HostSlots>& hosts,
                                 const std::vector<Candidate>& cands);

// --pod-blocks K: every block of K consecutive ranks (the last may be
// shorter) goes to the first group with room for all of it, filling its hosts
// in order; under --oversubscribe a block that fits in no group's slots goes
// to the first group whose devices still hold it, spread round-robin over its
// hosts.  A block that fits nowhere fails, naming the largest group.
Result<std::vector<Run>> place_pod_blocks(const JobSpec& spec, const std::vector<HostSlots>& hosts,
                                          std::vector<Candidate>& cands);

// --- 5. numbering -------------------------------------------------------------

// Numbers the ranks in run order: fills each candidate's `ranks`, sizes
// `out.ranks` and sets every RankPlan's rank, host (node rank: hosts are
// numbered by their first rank) and local rank, and appends the hosts used to
// `out.hosts`.  Returns the candidate index of each node, by node rank.
std::vector<int> number_ranks(const std::vector<Run>& runs, const std::vector<HostSlots>& hosts,
                              std::vector<Candidate>& cands, Plan& out);

// Whether `local_size` ranks oversubscribe host `h`: more than its slots (or,
// without slots, its processing units), or -c cores each beyond its cores.
bool host_oversubscribed(const JobSpec& spec, const HostSlots& h, int local_size);

// --- 6. devices ---------------------------------------------------------------

// Appends to each rank of `c` (indexes into `ranks`) its devices of every
// requested resource: fractions pack one device before the next, whole
// requests take whole devices in order.  host_capacities() counted the same
// way, so a placed rank never runs out.
void assign_devices(const Candidate& c, std::vector<RankPlan>& ranks);

// --- 7. CPUs ------------------------------------------------------------------

// --bind-to as it applies: the default is accelerator for jobs that request
// devices, core under -c, else none.
BindTo binding_policy(const JobSpec& spec);

struct CpuBinding {
  std::string cpus;  // hwloc list string; "" for no binding
  int cores = 0;     // cores in it (OMP_NUM_THREADS unless -c or the user sets it)
};

// A cpuset for each of a host's ranks (`local`: indexes into `ranks`, by
// local rank).  Ranks whose devices share locality split the cores near
// those devices (the devices' NUMA nodes, else their local CPUs), so they do
// not share cores while there are enough; -c fixes each rank's share; numa
// binds to whole NUMA nodes.  Nothing binds where the topology is unknown.
std::vector<CpuBinding> bind_cpus(const JobSpec& spec, const detect::Inventory& inv,
                                  const std::vector<int>& local, const std::vector<RankPlan>& ranks);

// --- 8. environment -----------------------------------------------------------

// The variables accrun sets for the ranks of one host (docs/design.md §9,
// accrun(7)).  What the host's ranks share is built once; for_rank() copies
// it and adds the rank's own.
class RankEnvironment {
 public:
  // `c`'s ranks must have their devices (assign_devices).  `node` is the
  // host's node rank, `master_addr` rank 0's host.
  RankEnvironment(const JobSpec& spec, const HostSlots& h, const Candidate& c, int node,
                  bool oversubscribed, const std::string& master_addr,
                  const std::vector<RankPlan>& ranks);

  // The environment of the host's rank at `local_rank`, with `cores` cores.
  // Refuses an -x that would change a variable accrun sets for the rank
  // (its identity, its devices' ids and visibility) to another value,
  // which would undo the plan; the same value passes, and MASTER_ADDR,
  // MASTER_PORT and OMP_NUM_THREADS are the user's to set.
  Result<Env> for_rank(int local_rank, const RankPlan& rank, int cores) const;

 private:
  struct Resource {
    const ResourceSlot* slot;
    std::string ids_var;                 // ACCRUN_<R>_IDS
    const detect::Provider* provider;    // writes the vendor's variable; null without devices
    std::vector<int> host_ids;           // --visible-devices node: the host's job devices
  };
  const JobSpec& spec_;
  std::vector<Resource> resources_;
  Env common_;
  bool tpu_split_ = false;
  bool user_omp_ = false;
};

}  // namespace accrun::launcher::planner
