// groups.hpp — named groups over the job's name directory (docs/design.md §5,
// accrun(7) NAMED GROUPS).
//
// Key layout (every key under "accrun.g/<escaped name>/<epoch>/"):
//   world        the incarnation's world size; its first publisher opens it
//   rank/<r>     member record of group rank r (claimed by publish: one winner)
//   closed       the incarnation is over: "destroyed ..." or the reason its
//                init failed; newcomers skip closed incarnations
//   rv/<key>     the backend's rendezvous keys (collectives::Rendezvous)
//   host/rv/<key> an AUTO group's host backend beside NCCL: its own keys
// Keys stay published until the job ends: a member that destroys a group
// early must not pull a key from under a slower member still joining it.
// A process remembers the next epoch per name, so a name it destroyed and
// creates again starts one past the last incarnation it was part of.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "accrun/backend.hpp"
#include "directory.hpp"
#include "peers.hpp"

namespace accrun::runtime {

// What this process contributes to every group it joins.
struct SelfInfo {
  collectives::Member member;       // job rank, host, node/local rank, pid
  collectives::MemberFacts facts;   // for AUTO selection
};

// Creates the backend for a group: the real factories in libaccrun, fakes in tests.
using BackendFactory = std::function<Result<std::unique_ptr<collectives::Backend>>(
    collectives::BackendKind, const collectives::GroupContext&)>;
// Resolves AUTO (collectives::resolve_auto in libaccrun).
using AutoResolver =
    std::function<collectives::BackendKind(const std::vector<collectives::MemberFacts>&, std::string*)>;

// The Rendezvous a backend gets: the directory under one (name, epoch).
class GroupRendezvous final : public collectives::Rendezvous {
 public:
  GroupRendezvous(Directory& dir, std::string prefix) : dir_(dir), prefix_(std::move(prefix)) {}
  Status publish(const std::string& key, const std::string& value) override;
  Result<std::string> lookup(const std::string& key, int timeout_ms) override;

 private:
  Directory& dir_;
  std::string prefix_;
};

// One live incarnation of a group in this process.
struct Group {
  std::string name;
  std::uint64_t epoch = 0;
  int rank = 0, size = 1;
  collectives::BackendKind kind = collectives::BackendKind::kStore;
  std::vector<collectives::Member> members;
  std::unique_ptr<GroupRendezvous> rendezvous;  // outlives the backend (declared first)
  std::unique_ptr<GroupRendezvous> host_rendezvous;  // AUTO on GPUs: the host backend's, under "host/"
  std::unique_ptr<collectives::Backend> backend;
  int timeout_ms = -1;
};

struct GroupManagerOptions {
  std::string shm_dir;
  bool oversubscribed = false;
  std::string store_transport = "tcp";  // between hosts: tcp or libfabric
  std::string store_tcp_congestion;     // its TCP congestion control ("" = accrun's default)
  int init_timeout_ms = 60000;
  // Every data call's timeout on a new host-memory group (< 0: none) until
  // accrun_group_set_timeout(3) changes it.
  int data_timeout_ms = collectives::kDefaultGroupTimeoutMs;
  // Refreshes the facts that change while a program runs (MPI initialised,
  // NCCL loadable) before a group resolves AUTO.  May be empty.
  std::function<void(collectives::MemberFacts&)> refresh_facts;
  // The job whose directory this is (its PMIx namespace).  Where set, which
  // incarnation of each name comes next outlives the manager (see
  // ~GroupManager); empty: it does not.
  std::string job;
  // The job's number of ranks: a group larger can never gather (each member
  // is a rank of the job) and fails at once.  0: unknown, not checked.
  int job_size = 0;
};

// Creates and destroys groups for one process.  Thread-safe: groups may be
// created and destroyed from several threads at once.
class GroupManager {
 public:
  GroupManager(Directory& dir, PeerTable* peers, SelfInfo self, GroupManagerOptions opts,
               BackendFactory factory, AutoResolver resolver);
  // Keeps which incarnation of each name comes next for this job and job
  // rank past the manager (accrun_finalize frees it): a group declared
  // again after accrun_init must not meet this process's own record of an
  // earlier incarnation that another member has not closed yet.
  ~GroupManager();
  // Joins (name, world_size, rank): blocks until all world_size members have
  // declared it, the init timeout passes (kTimeout naming the missing group
  // ranks) or a member finds the declarations inconsistent (kInvalidUsage).
  // `requested` is nullopt for AUTO.  Arguments are checked by the caller.
  Result<std::shared_ptr<Group>> create(const std::string& name, int world_size, int rank,
                                        std::optional<collectives::BackendKind> requested);
  // Ends this member's part of the incarnation: the backend is destroyed and
  // the incarnation closed for newcomers.  Does not wait for other members.
  Status destroy(Group& g);

 private:
  std::string prefix(const std::string& name, std::uint64_t epoch) const;
  // Why an incarnation still missing the members under `keys` (group ranks
  // `others`) can never gather, given the job's `failed` ranks: fewer of
  // the job's ranks are left (neither failed nor members already) than
  // members are missing.  Empty: it may still gather.
  std::string cannot_gather(const std::vector<std::string>& keys, const std::vector<int>& others,
                            const std::map<int, std::string>& failed);
  void close(const std::string& prefix, const std::string& reason);

  Directory& dir_;
  PeerTable* peers_;
  SelfInfo self_;
  GroupManagerOptions opts_;
  BackendFactory factory_;
  AutoResolver resolver_;
  std::mutex mu_;
  std::map<std::string, std::uint64_t> next_epoch_;
};

// The member record published under rank/<r> (a few "key=value" lines).
struct MemberRecord {
  int world_size = 0;
  int requested = -1;  // -1 AUTO, else BackendKind
  collectives::Member member;
  collectives::MemberFacts facts;
};
std::string encode_record(const MemberRecord& r);
Result<MemberRecord> decode_record(const std::string& s);

}  // namespace accrun::runtime
