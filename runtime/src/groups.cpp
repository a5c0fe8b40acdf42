#include "groups.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <sstream>

#include "accrun/log.hpp"
#include "config.hpp"

namespace accrun::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using collectives::BackendKind;

std::string join_ints(const std::vector<int>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// The closed marker of an incarnation group rank 0 destroyed ends so.
constexpr const char* kDestroyedBy = " was destroyed by group rank 0";

// A closed marker is "<code> <message>".
std::string encode_closed(Code code, const std::string& msg) {
  return std::to_string(static_cast<int>(code)) + " " + msg;
}
Status decode_closed(const std::string& v) {
  auto sp = v.find(' ');
  int code = std::atoi(v.substr(0, sp).c_str());
  std::string msg = sp == std::string::npos ? v : v.substr(sp + 1);
  if (code <= 0 || code > static_cast<int>(Code::kNoMemory)) code = static_cast<int>(Code::kInvalidUsage);
  return {static_cast<Code>(code), msg};
}

const char* requested_name(int requested) {
  return requested < 0 ? "auto" : collectives::backend_name(static_cast<BackendKind>(requested));
}

// The next incarnation of each group name, by job and job rank, for
// managers to come (GroupManager::~GroupManager).
std::mutex g_epochs_mu;
std::map<std::pair<std::string, int>, std::map<std::string, std::uint64_t>> g_epochs;

}  // namespace

std::string escape_key_component(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '/') out += "%2F";
    else if (c == '%') out += "%25";
    else out += c;
  }
  if (out.size() <= kMaxEscapedName) return out;
  auto fnv = [&s](std::uint64_t h) {
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
    return h;
  };
  char hex[40];
  std::snprintf(hex, sizeof hex, "%%H%016llx%016llx", static_cast<unsigned long long>(fnv(0xcbf29ce484222325ULL)),
                static_cast<unsigned long long>(fnv(0x84222325cbf29ce4ULL)));
  return hex;
}

std::string encode_record(const MemberRecord& r) {
  std::ostringstream o;
  o << "world=" << r.world_size << "\nbackend=" << r.requested << "\njob_rank=" << r.member.job_rank
    << "\nhost=" << r.member.host << "\nnode_rank=" << r.member.node_rank
    << "\nlocal_rank=" << r.member.local_rank << "\npid=" << r.member.pid
    << "\ngpus=" << join_ints(r.facts.gpu_ids) << "\nwhole=" << (r.facts.gpus_whole ? 1 : 0)
    << "\nnccl=" << (r.facts.nccl_loadable ? 1 : 0) << "\nmpi=" << (r.facts.mpi_initialized ? 1 : 0)
    << "\n";
  return o.str();
}

Result<MemberRecord> decode_record(const std::string& s) {
  MemberRecord r;
  std::istringstream in(s);
  std::string line;
  int fields = 0;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    ++fields;
    if (k == "world") r.world_size = std::atoi(v.c_str());
    else if (k == "backend") r.requested = std::atoi(v.c_str());
    else if (k == "job_rank") r.member.job_rank = std::atoi(v.c_str());
    else if (k == "host") r.member.host = v;
    else if (k == "node_rank") r.member.node_rank = std::atoi(v.c_str());
    else if (k == "local_rank") r.member.local_rank = std::atoi(v.c_str());
    else if (k == "pid") r.member.pid = std::atol(v.c_str());
    else if (k == "gpus") {
      auto ids = parse_id_list(v);
      if (!ids) return ids.status();
      r.facts.gpu_ids = *ids;
    } else if (k == "whole") r.facts.gpus_whole = v == "1";
    else if (k == "nccl") r.facts.nccl_loadable = v == "1";
    else if (k == "mpi") r.facts.mpi_initialized = v == "1";
    else --fields;
  }
  if (fields < 11) return invalid_usage("malformed group member record");
  r.facts.host = r.member.host;
  return r;
}

Status GroupRendezvous::publish(const std::string& key, const std::string& value) {
  return dir_.publish(prefix_ + "rv/" + key, value);
}

Result<std::string> GroupRendezvous::lookup(const std::string& key, int timeout_ms) {
  // As a one-key lookup_all: the PMIx directory then has the launcher hold
  // the request until the key is published instead of polling for it.
  auto v = dir_.lookup_all({prefix_ + "rv/" + key}, timeout_ms);
  if (!v) return v.status();
  return std::move(v->front());
}

GroupManager::GroupManager(Directory& dir, PeerTable* peers, SelfInfo self, GroupManagerOptions opts,
                           BackendFactory factory, AutoResolver resolver)
    : dir_(dir), peers_(peers), self_(std::move(self)), opts_(std::move(opts)),
      factory_(std::move(factory)), resolver_(std::move(resolver)) {
  if (opts_.job.empty()) return;
  std::lock_guard lock(g_epochs_mu);
  if (auto it = g_epochs.find({opts_.job, self_.member.job_rank}); it != g_epochs.end()) next_epoch_ = it->second;
}

GroupManager::~GroupManager() {
  if (opts_.job.empty()) return;
  std::lock_guard lock(g_epochs_mu);
  auto& kept = g_epochs[{opts_.job, self_.member.job_rank}];
  for (const auto& [name, next] : next_epoch_) kept[name] = std::max(kept[name], next);
}

std::string GroupManager::cannot_gather(const std::vector<std::string>& keys,
                                        const std::vector<int>& others,
                                        const std::map<int, std::string>& failed) {
  if (failed.empty()) return "";
  std::set<int> present = {self_.member.job_rank};
  std::vector<int> missing;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto v = dir_.lookup(keys[i], 0);
    auto rec = v ? decode_record(*v) : Result<MemberRecord>(v.status());
    if (rec) {
      present.insert(rec->member.job_rank);
    } else {
      missing.push_back(others[i]);
    }
  }
  int left = 0;
  for (int j = 0; j < opts_.job_size; ++j)
    left += present.count(j) == 0 && failed.count(j) == 0 ? 1 : 0;
  if (missing.empty() || static_cast<int>(missing.size()) <= left) return "";
  std::string list, dead;
  for (std::size_t i = 0; i < missing.size(); ++i)
    list += (i ? ", " : "") + std::to_string(missing[i]);
  for (const auto& [rank, text] : failed)
    if (present.count(rank) == 0) dead += (dead.empty() ? "" : "; ") + text;
  return "group rank" + std::string(missing.size() > 1 ? "s " : " ") + list +
         " can never arrive: " + dead + ", and " + std::to_string(left) +
         " of the job's other ranks " + (left == 1 ? "is" : "are") + " left to be " +
         std::to_string(missing.size()) + " member" + (missing.size() > 1 ? "s" : "");
}

std::string GroupManager::prefix(const std::string& name, std::uint64_t epoch) const {
  return "accrun.g/" + escape_key_component(name) + "/" + std::to_string(epoch) + "/";
}

void GroupManager::close(const std::string& p, const std::string& reason) {
  // Of several closers the first wins; a later one finds it closed already.
  (void)dir_.publish(p + "closed", reason);
}

Result<std::shared_ptr<Group>> GroupManager::create(const std::string& name, int world_size, int rank,
                                                    std::optional<BackendKind> requested) {
  const std::string label = "group '" + name + "'";
  std::uint64_t epoch = 0;
  {
    std::lock_guard lock(mu_);
    epoch = next_epoch_[name];
  }
  auto remember = [&](std::uint64_t next) {
    std::lock_guard lock(mu_);
    next_epoch_[name] = std::max(next_epoch_[name], next);
  };
  const auto deadline = Clock::now() + std::chrono::milliseconds(opts_.init_timeout_ms);
  auto remaining_ms = [&] {
    return static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
  };

  MemberRecord mine;
  mine.world_size = world_size;
  mine.requested = requested ? static_cast<int>(*requested) : -1;
  mine.member = self_.member;
  mine.facts = self_.facts;
  if (!requested && opts_.refresh_facts) opts_.refresh_facts(mine.facts);
  const std::string my_record = encode_record(mine);
  const std::string who = "job rank " + std::to_string(self_.member.job_rank);

  std::vector<MemberRecord> records;
  std::string p;
  // Why the last incarnation this member passed over failed, when it did
  // (not destroyed): a member that came after the others failed there
  // starts the next one alone, and its timeout says what became of them.
  std::string before;
  for (;; ++epoch) {
    p = prefix(name, epoch);
    if (auto c = dir_.lookup(p + "closed", 0)) {  // an incarnation that is over
      const std::string why = decode_closed(*c).message();
      before = why.find(kDestroyedBy) == std::string::npos
                   ? "; the incarnation before it (epoch " + std::to_string(epoch) + ") failed: " + why
                   : std::string();
      continue;
    }
    // Open the incarnation, or find it opened by another member.
    int world = world_size;
    if (Status st = dir_.publish(p + "world", std::to_string(world_size)); !st) {
      if (st.code() != Code::kInvalidUsage) return st.with_context(label);
      auto w = dir_.lookup(p + "world", 1000);
      if (!w) return w.status().with_context(label);
      world = std::atoi(w->c_str());
    }
    if (world != world_size) {
      std::string reason = label + ": world sizes disagree: it was declared with world size " +
                           std::to_string(world) + " and by " + who + " (group rank " +
                           std::to_string(rank) + ") with world size " + std::to_string(world_size) +
                           "; every member must pass the same world size";
      close(p, encode_closed(Code::kInvalidUsage, reason));
      remember(epoch + 1);
      return invalid_usage(reason);
    }
    if (opts_.job_size > 0 && world_size > opts_.job_size) {
      // Refused before this member's record is published, the incarnation
      // left open: a member that declares another world size still finds
      // this one's and fails at once, and one that declares the same size
      // fails here too.
      remember(epoch + 1);
      return invalid_argument(label + ": world size " + std::to_string(world_size) +
                              " is larger than the job, which has " + std::to_string(opts_.job_size) +
                              (opts_.job_size == 1 ? " rank" : " ranks") +
                              ": a group's members are ranks of the job, one each (accrun -n sets how many)");
    }
    const std::string my_key = p + "rank/" + std::to_string(rank);
    if (Status st = dir_.publish(my_key, my_record); !st) {
      if (st.code() != Code::kInvalidUsage) return st.with_context(label);
      // The slot is taken: by a member of an incarnation that has just
      // closed (go on to the next one), or by another live member.
      if (dir_.lookup(p + "closed", 0)) continue;
      std::string other = "another member";
      if (auto v = dir_.lookup(my_key, 1000)) {
        if (auto rec = decode_record(*v)) other = "job rank " + std::to_string(rec->member.job_rank);
      }
      std::string reason = label + ": two members claim group rank " + std::to_string(rank) + ": " +
                           other + " and " + who + "; each member must pass its own rank";
      close(p, encode_closed(Code::kInvalidUsage, reason));
      remember(epoch + 1);
      return invalid_usage(reason);
    }

    // Gather every member's record: one lookup of all keys, which the
    // launcher holds until the last member has published, in slices so a
    // closed marker (another member's error) is noticed: 200 ms in the first
    // second, then a second.
    records.assign(static_cast<std::size_t>(world_size), MemberRecord{});
    records[static_cast<std::size_t>(rank)] = mine;
    std::vector<int> others;
    std::vector<std::string> keys;
    for (int r = 0; r < world_size; ++r) {
      if (r == rank) continue;
      others.push_back(r);
      keys.push_back(p + "rank/" + std::to_string(r));
    }
    const auto gather_start = Clock::now();
    for (bool first = true; !keys.empty(); first = false) {
      const int left = remaining_ms();
      const int slice = Clock::now() - gather_start < std::chrono::seconds(1) ? 200 : 1000;
      auto vals = dir_.lookup_all(keys, first ? 0 : std::clamp(left, 0, slice));
      if (vals) {
        for (std::size_t i = 0; i < keys.size(); ++i) {
          auto rec = decode_record((*vals)[i]);
          if (!rec) return rec.status().with_context(label);
          records[static_cast<std::size_t>(others[i])] = *rec;
        }
        break;
      }
      if (vals.status().code() != Code::kNotFound && vals.status().code() != Code::kTimeout)
        return vals.status().with_context(label);
      if (auto c = dir_.lookup(p + "closed", 0)) {
        remember(epoch + 1);
        return decode_closed(*c);
      }
      // Ranks of the job that failed cannot join: once fewer of the job's
      // other ranks are left than members are missing, the group can never
      // gather, and waiting for the init timeout only hides why.
      if (!first && peers_ != nullptr && opts_.job_size > 0) {
        // (Only more failed ranks than the job has to spare can leave too
        // few: the members' records are looked up one by one only then.)
        auto failed = peers_->failures();
        const std::string why = static_cast<int>(failed.size()) > opts_.job_size - world_size
                                    ? cannot_gather(keys, others, failed)
                                    : std::string();
        if (!why.empty()) {
          const std::string reason =
              label + " (epoch " + std::to_string(epoch) + "): " + why + before;
          close(p, encode_closed(Code::kRemote, reason));
          remember(epoch + 1);
          return Status(Code::kRemote, reason);
        }
      }
      if (!first && remaining_ms() <= 0) {
        std::vector<int> missing;
        for (std::size_t i = 0; i < keys.size(); ++i)
          if (!dir_.lookup(keys[i], 0)) missing.push_back(others[i]);
        if (missing.empty()) continue;  // the last one arrived just now
        std::string list;
        for (std::size_t i = 0; i < missing.size(); ++i)
          list += (i ? ", " : "") + std::to_string(missing[i]);
        std::string reason = label + " (epoch " + std::to_string(epoch) + "): group rank" +
                             (missing.size() > 1 ? "s " : " ") + list + " of " +
                             std::to_string(world_size) + " never called accrun_group_init within " +
                             std::to_string(opts_.init_timeout_ms / 1000.0).substr(0, 5) +
                             " s (ACCRUN_GROUP_INIT_TIMEOUT)" + before;
        close(p, encode_closed(Code::kTimeout, reason));
        remember(epoch + 1);
        return timeout_error(reason);
      }
    }
    break;
  }
  remember(epoch + 1);

  // Every member checks the same records, so all reach the same verdict.
  std::set<int> job_ranks;
  std::vector<collectives::MemberFacts> facts;
  for (int r = 0; r < world_size; ++r) {
    const auto& rec = records[static_cast<std::size_t>(r)];
    Status bad;
    if (!job_ranks.insert(rec.member.job_rank).second) {
      bad = invalid_usage(label + ": job rank " + std::to_string(rec.member.job_rank) +
                          " holds two ranks of the group; a process holds at most one");
    } else if (rec.requested != records[0].requested) {
      bad = invalid_usage(label + ": members disagree on the backend: group rank 0 asked for " +
                          requested_name(records[0].requested) + ", group rank " + std::to_string(r) +
                          " for " + requested_name(rec.requested));
    }
    if (!bad) {
      close(p, encode_closed(bad.code(), bad.message()));
      return bad;
    }
    facts.push_back(rec.facts);
  }
  BackendKind kind = BackendKind::kStore;
  std::string why;
  if (requested == BackendKind::kNccl) {
    // Every member sees the same facts, so all fail here together.
    if (std::string shared = collectives::gpu_sharing(facts); !shared.empty()) {
      Status bad = invalid_usage(label + ": " + shared +
                                 "; NCCL needs one whole GPU per rank, so ranks sharing a GPU (fractional "
                                 "--gpus-per-rank) cannot form an NCCL group: use the store or MPI backend");
      close(p, encode_closed(bad.code(), bad.message()));
      return bad;
    }
  }
  if (requested) {
    kind = *requested;
    why = "requested";
  } else {
    kind = resolver_(facts, &why);
  }
  log(LogLevel::kDebug, "%s epoch %llu: rank %d of %d, backend %s (%s)", label.c_str(),
      static_cast<unsigned long long>(epoch), rank, world_size, collectives::backend_name(kind),
      why.c_str());

  auto g = std::make_shared<Group>();
  g->name = name;
  g->epoch = epoch;
  g->rank = rank;
  g->size = world_size;
  g->kind = kind;
  for (const auto& rec : records) g->members.push_back(rec.member);
  g->rendezvous = std::make_unique<GroupRendezvous>(dir_, p);
  if (peers_ != nullptr)
    for (const auto& m : g->members) peers_->note_member(m.job_rank, m.host, m.pid);

  collectives::GroupContext ctx;
  ctx.name = name;
  ctx.epoch = epoch;
  ctx.rank = rank;
  ctx.size = world_size;
  ctx.members = g->members;
  ctx.shm_dir = opts_.shm_dir;
  ctx.oversubscribed = opts_.oversubscribed;
  ctx.host_transport = opts_.store_transport;
  ctx.tcp_congestion = opts_.store_tcp_congestion;
  ctx.timeout_ms = std::max(remaining_ms(), 1);  // the backend's own handshake
  ctx.rendezvous = g->rendezvous.get();
  ctx.peers = peers_;
  auto backend = factory_(kind, ctx);
  if (!backend) {
    Status st = backend.status().with_context(label + " (backend " + collectives::backend_name(kind) + ")");
    close(p, encode_closed(st.code(), st.message()));
    return st;
  }
  g->backend = std::move(backend).value();
  if (!requested && kind == BackendKind::kNccl) {
    // AUTO on GPUs: buffers decide, per call.  Host buffers go to a host
    // backend made now, with the same members: MPI when every member has
    // initialised it, the store otherwise.
    bool all_mpi = true;
    for (const auto& f : facts) all_mpi = all_mpi && f.mpi_initialized;
    const BackendKind host_kind = all_mpi ? BackendKind::kMpi : BackendKind::kStore;
    ctx.timeout_ms = std::max(remaining_ms(), 1);
    g->host_rendezvous = std::make_unique<GroupRendezvous>(dir_, p + "host/");  // keys of its own
    ctx.rendezvous = g->host_rendezvous.get();
    auto host = factory_(host_kind, ctx);
    if (!host) {
      Status st = host.status().with_context(label + " (backend " + collectives::backend_name(host_kind) +
                                             ", for host buffers beside NCCL)");
      close(p, encode_closed(st.code(), st.message()));
      return st;
    }
    log(LogLevel::kDebug, "%s epoch %llu: host buffers go to the %s backend, GPU buffers to NCCL", label.c_str(),
        static_cast<unsigned long long>(epoch), collectives::backend_name(host_kind));
    g->backend = collectives::make_routed_backend(std::move(g->backend), std::move(host).value(), name);
  }
  // Every group gets the default data-call timeout (an NCCL group's
  // watchdog aborts the communicator past it).
  g->timeout_ms = opts_.data_timeout_ms < 0 ? -1 : opts_.data_timeout_ms;
  g->backend->set_timeout(g->timeout_ms);
  return g;
}

Status GroupManager::destroy(Group& g) {
  g.backend.reset();
  // The marker sends a later creator on to the next incarnation; one
  // member's is enough (every member's was a round trip to the launcher
  // each, 64 at once in a group of 64, and all but the first refused).
  if (g.rank == 0)
    close(prefix(g.name, g.epoch),
          encode_closed(Code::kInvalidUsage, "group '" + g.name + "'" + kDestroyedBy));
  return Status::ok();
}

}  // namespace accrun::runtime
