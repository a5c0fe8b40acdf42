// Hierarchical collectives for a store group across hosts (hier_group.hpp).
#include "store/hier_group.hpp"

#include <algorithm>
#include <cstring>
#include <map>

#include "accrun/log.hpp"
#include "store/wait.hpp"

namespace accrun::collectives::store {
namespace {

enum Coll : std::uint32_t { kAllreduce = 1, kReduce, kBroadcast, kAllgather, kReducescatter, kBarrier, kSetup, kAbort = 0xab };

const char* coll_name(std::uint32_t c) {
  switch (c) {
    case kAllreduce: return "allreduce";
    case kReduce: return "reduce";
    case kBroadcast: return "broadcast";
    case kAllgather: return "allgather";
    case kReducescatter: return "reducescatter";
    case kBarrier: return "barrier";
    case kSetup: return "group creation";
  }
  return "an unknown call";
}

// While one lives, a mark on this member in the host's segment is set, for
// its host's members' timeout messages: Across, that it waits for another
// host (Ctrl::across_since_ns); InCall, that it is inside a collective call
// on the group (Ctrl::outer_left_ns).
template <void (StoreGroup::*kNote)(bool)>
class Marked {
 public:
  explicit Marked(StoreGroup& local) : local_(local) { (local_.*kNote)(true); }
  ~Marked() { (local_.*kNote)(false); }
  Marked(const Marked&) = delete;
  Marked& operator=(const Marked&) = delete;

 private:
  StoreGroup& local_;
};
using Across = Marked<&StoreGroup::note_across>;
using InCall = Marked<&StoreGroup::note_in_outer_call>;

// The waits of the group's creation, bounded by its set-up timeout.
Wait creation_wait(int timeout_ms) {
  Wait w;
  w.op = "group creation";
  w.timeout_ms = timeout_ms;
  if (timeout_ms >= 0) w.deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  return w;
}

// The group's rendezvous under a prefix: the host group's keys.
class PrefixRendezvous final : public Rendezvous {
 public:
  PrefixRendezvous(Rendezvous* base, std::string prefix) : base_(base), prefix_(std::move(prefix)) {}
  Status publish(const std::string& k, const std::string& v) override { return base_->publish(prefix_ + k, v); }
  Result<std::string> lookup(const std::string& k, int timeout_ms) override {
    return base_->lookup(prefix_ + k, timeout_ms);
  }

 private:
  Rendezvous* base_;
  std::string prefix_;
};

}  // namespace

HierGroup::HierGroup(const GroupContext& ctx, const Tuning& t)
    : name_(ctx.name), rank_(ctx.rank), size_(ctx.size), timeout_ms_(ctx.timeout_ms), members_(ctx.members) {
  // Hosts in the order of their lowest group rank.
  std::map<std::string, int> index;
  host_of_.resize(static_cast<std::size_t>(size_));
  for (int g = 0; g < size_; ++g) {
    const std::string& h = members_[static_cast<std::size_t>(g)].host;
    auto [it, fresh] = index.emplace(h, static_cast<int>(hosts_.size()));
    if (fresh) hosts_.emplace_back();
    hosts_[static_cast<std::size_t>(it->second)].push_back(g);
    host_of_[static_cast<std::size_t>(g)] = it->second;
  }
  my_host_ = host_of_[static_cast<std::size_t>(rank_)];
  local_rank_ = local_index(rank_);
  GroupContext local = ctx;
  const auto& mine = hosts_[static_cast<std::size_t>(my_host_)];
  local.name = ctx.name + "@" + ctx.members[static_cast<std::size_t>(rank_)].host;
  local.rank = local_rank_;
  local.size = static_cast<int>(mine.size());
  local.members.clear();
  for (int g : mine) local.members.push_back(ctx.members[static_cast<std::size_t>(g)]);
  local_rv_ = std::make_unique<PrefixRendezvous>(ctx.rendezvous, "h" + std::to_string(mine.front()) + "/");
  local.rendezvous = local_rv_.get();
  local_ = std::make_unique<StoreGroup>(local, t, true);
  pair_buffer_max_ = t.pair_buffer_max;
  sleep_min_ = t.across_sleep_min;
  reader_gap_ = std::chrono::nanoseconds(t.across_reader_gap_ns);
  chain_chunk_ = std::max<std::size_t>(t.chain_chunk, 1);
  chain_chunk_crowded_ = std::max<std::size_t>(t.chain_chunk_oversubscribed, 1);
}

HierGroup::~HierGroup() {
  // Buffered sends still reach their peers after the last call; in a group
  // that failed, only briefly (the word that this member gave up, to the
  // other leaders).
  if (links_ != nullptr) {
    Wait w;
    w.op = "destroy";
    w.timeout_ms = broken_.is_ok() ? 10'000 : 1'000;
    w.deadline = Clock::now() + std::chrono::milliseconds(w.timeout_ms);
    if (links_->flush(w).is_ok() && broken_.is_ok()) links_->leaving();
  }
}

Status HierGroup::setup(const GroupContext& ctx, int setup_timeout_ms) {
  ACCRUN_RETURN_IF_ERROR(local_->setup(local_rv_.get(), setup_timeout_ms, ctx.shm_dir));
  // A leader whose part between hosts fails (a member elsewhere died while
  // the group was made) tells its host's members, who wait for it in
  // agree() however long the group's timeout, and the other
  // leaders, as a call that fails does.
  Status s = setup_links(ctx, setup_timeout_ms);
  if (s.is_ok()) return s;
  if (links_ != nullptr && s.code() != Code::kInvalidArgument) return fail(std::move(s));
  broken_ = s;
  local_->give_up(s);
  return s;
}

Status HierGroup::setup_links(const GroupContext& ctx, int setup_timeout_ms) {
  std::vector<bool> needs(static_cast<std::size_t>(size_));
  for (int g = 0; g < size_; ++g) needs[static_cast<std::size_t>(g)] = host_of_[static_cast<std::size_t>(g)] != my_host_;
  auto t = make_host_links(ctx.host_transport, ctx, std::move(needs), pair_buffer_max_);
  if (!t.is_ok()) return t.status();
  links_ = std::move(t).value();
  if (leader()) {
    // The leaders' links carry every collective between hosts: made now,
    // one connection per pair of leaders.
    std::vector<int> others;
    for (std::size_t h = 0; h < hosts_.size(); ++h)
      if (static_cast<int>(h) != my_host_) others.push_back(hosts_[h].front());
    const Wait w = creation_wait(setup_timeout_ms);
    ACCRUN_RETURN_IF_ERROR(links_->pair_up(others, w));
  }
  ACCRUN_RETURN_IF_ERROR(agree(host_oversubscribed(ctx), setup_timeout_ms));
  log(LogLevel::kDebug, "group %s: store backend ready (%d ranks on %zu hosts, shm inside a host, %s between; %s)",
      name_.c_str(), size_, hosts_.size(), links_->name(),
      leader() ? "this rank leads its host" : "led by its host's lowest rank");
  return Status::ok();
}

// What only each host knows, which the leaders exchange and then tell their
// hosts: whether its members read each other's memory (lanes, hier_group.hpp,
// need every host's to, and the same number of members on every host, two or
// more, which every member knows), and whether it is oversubscribed (a large
// broadcast's chunk between hosts: every host must cut the same chunks).
Status HierGroup::agree(bool oversubscribed, int setup_timeout_ms) {
  constexpr std::uint8_t kCma = 1, kCrowded = 2;
  std::uint8_t all =
      static_cast<std::uint8_t>((local_->cma() ? kCma : 0) | (oversubscribed ? kCrowded : 0));
  if (leader()) {
    sig_ = Sig{kSetup, 0, 0, -1, 0};
    const Wait w = creation_wait(setup_timeout_ms);
    std::vector<std::string> parts;
    const char mine = static_cast<char>(all);
    if (Status st = leaders_exchange(&mine, 1, &parts, w); !st) {
      links_->unborrow();  // `mine` is gone once this returns; what is still queued of it must not be
      return st;
    }
    for (std::size_t h = 0; h < hosts_.size(); ++h) {
      if (static_cast<int>(h) == my_host_) continue;
      const bool whole = parts[h].size() == sizeof(Sig) + 1;
      const auto theirs = whole ? static_cast<std::uint8_t>(parts[h].back()) : std::uint8_t{0};
      all = static_cast<std::uint8_t>((all & theirs & kCma) | ((all | theirs) & kCrowded));
    }
  }
  ACCRUN_RETURN_IF_ERROR(local_->broadcast(&all, 1, DType::kUInt8, 0, nullptr));
  const std::size_t per_host = hosts_.front().size();
  bool even = per_host >= 2;
  for (const auto& h : hosts_) even = even && h.size() == per_host;
  if (even && (all & kCma) != 0) lanes_ = static_cast<int>(per_host);
  if ((all & kCrowded) != 0) chain_chunk_ = chain_chunk_crowded_;
  return Status::ok();
}

void HierGroup::set_timeout(int timeout_ms) {
  timeout_ms_ = timeout_ms;
  local_->set_timeout(timeout_ms);
}

int HierGroup::local_index(int group_rank) const {
  const auto& v = hosts_[static_cast<std::size_t>(host_of_[static_cast<std::size_t>(group_rank)])];
  return static_cast<int>(std::find(v.begin(), v.end(), group_rank) - v.begin());
}

Wait HierGroup::wait_spec() const {
  // (A rank's part, in allgather: the bytes each message between hosts carries.)
  Wait w = p2p_wait_spec(sig_.count * dtype_size(static_cast<DType>(sig_.dtype)));
  w.also = [this] { return local_->gave_up(op_); };
  w.watch_members = true;  // a collective stops for a dead member anywhere
  return w;
}

Wait HierGroup::p2p_wait_spec(std::size_t bytes) const {
  Wait w;
  w.timeout_ms = timeout_ms_;
  w.op = op_;
  if (timeout_ms_ >= 0) w.deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
  w.sleep = bytes >= sleep_min_;
  return w;
}

Status HierGroup::enter(const char* op, void* stream, bool collective) {
  op_ = op;
  if (collective) {
    local_->note_outer_call(++calls_);
    prev_sig_ = sig_;
  }
  if (!broken_.is_ok()) return broken_;
  local_->sign_root_as(-1);  // reduce and broadcast name theirs
  local_->sign_call_as(StoreGroup::Coll{}, 0);  // allreduce and reducescatter theirs
  if (stream != nullptr)
    return invalid_argument("group '" + name_ + "': " + op + ": the store backend works on host memory; stream must be NULL");
  if (collective && depth_ > 0)
    return invalid_usage("group '" + name_ + "': " + op + " inside group_start/group_end (only send and recv may be grouped)");
  return Status::ok();
}

Status HierGroup::check_rank(int r, const char* what) const {
  if (r < 0 || r >= size_)
    return invalid_argument("group '" + name_ + "': " + op_ + ": " + what + " " + std::to_string(r) +
                            " is out of range (group size " + std::to_string(size_) + ")");
  return Status::ok();
}

Status HierGroup::check_count(std::size_t count, std::size_t per, DType dt) const {
  std::size_t bytes;
  if (!count_bytes(count, per, dtype_size(dt), &bytes))
    return invalid_argument("group '" + name_ + "': " + op_ + ": count " + std::to_string(count) +
                            " is too large");
  return Status::ok();
}

Status HierGroup::fail(Status s) {
  if (s.code() == Code::kInvalidArgument) return s;  // refused before anything moved
  if (broken_.is_ok()) {
    broken_ = Status(s.code(), s.message() + " (the group is unusable now; destroy it)");
    local_->give_up(s);  // this host's members
    // On a timeout, where this member's links to the other hosts stood: a
    // message one side counts as sent and the other never got shows in the
    // two members' logs.
    if (s.code() == Code::kTimeout && links_ != nullptr && (leader() || lanes_ > 1)) {
      for (std::size_t h = 0; h < hosts_.size(); ++h) {
        if (static_cast<int>(h) == my_host_) continue;
        const int peer = hosts_[h][static_cast<std::size_t>(local_rank_)];
        const std::string state = links_->link_state(peer);
        if (!state.empty())
          log(LogLevel::kWarn, "group %s: giving up in collective call %llu; link to %s: %s", name_.c_str(),
              static_cast<unsigned long long>(calls_), links_->describe(peer).c_str(), state.c_str());
      }
    }
    if (leader() || lanes_ > 1) {
      // The other hosts' members of this member's lane (the leaders, for a
      // leader), so none waits for this one; they tell their hosts in turn.
      // One told by another host tells the rest too: a host waiting for
      // this one (the next down a broadcast's chain) reads nothing from the
      // host that gave up first, and this member's program may go on
      // holding the group, its links open, for as long as it likes.
      // (Its code rides in `op`: a timeout or a misuse stays one for every
      // member, as inside a host.)
      const Sig abort{kAbort, 0, static_cast<std::uint32_t>(s.code()), 0, 0};
      Wait w;
      w.op = op_;
      w.deadline = Clock::now() + std::chrono::seconds(1);
      for (std::size_t h = 0; h < hosts_.size(); ++h) {
        if (static_cast<int>(h) == my_host_ || static_cast<int>(h) == told_by_) continue;
        (void)links_->send2(hosts_[h][static_cast<std::size_t>(local_rank_)], HostLinks::kCollective, &abort, sizeof abort, s.message().data(),
                          s.message().size(), w);
      }
    }
  }
  // After the word went out: the caller's buffers are its own again.
  if (links_ != nullptr) links_->unborrow();
  return s;
}

// ------------------------------------------------------------ between leaders

void HierGroup::say_algorithm(const char* algorithm, std::size_t bytes) {
  // Once per change of a collective's algorithm, not per call.
  const std::uint32_t c = std::min<std::uint32_t>(sig_.coll, kSaid - 1);
  const bool in_lanes = in_lanes_;
  if (said_[c] == algorithm && said_lanes_[c] == in_lanes) return;
  said_[c] = algorithm;
  said_lanes_[c] = in_lanes;
  if (in_lanes) {
    log(LogLevel::kDebug, "group %s: %s between %zu hosts in %d lanes: this member's part, %zu bytes: %s",
        name_.c_str(), coll_name(sig_.coll), hosts_.size(), lanes_, bytes, algorithm);
  } else {
    log(LogLevel::kDebug, "group %s: %s of %zu bytes between %zu hosts: %s", name_.c_str(), coll_name(sig_.coll),
        bytes, hosts_.size(), algorithm);
  }
}

Status HierGroup::lsend(int host, const void* data, std::size_t len, const Wait& w, bool borrow) {
  Across across(*local_);  // (past the bound on what is queued, a send waits)
  return why_lost(host, links_->send2(lane_peer(host), HostLinks::kCollective, &sig_, sizeof sig_,
                                      data, len, w, borrow));
}

Status HierGroup::lflush(int host, const Wait& w) {
  Across across(*local_);
  return why_lost(host, links_->flush_link(lane_peer(host), w));
}

Status HierGroup::why_lost(int host, Status s) {
  if (s.code() != Code::kRemote) return s;
  // A member that gave up told this one why, or sent a call that does not
  // match, before it closed the link: that message is the reason, not the
  // closed link a send met first.
  Wait now;
  now.op = op_;
  now.timeout_ms = 0;
  now.deadline = Clock::now();
  std::string first;
  if (!links_->recv_message(lane_peer(host), HostLinks::kCollective, &first, now).is_ok()) return s;
  Status said = check_sig(lane_peer(host), first);
  return said.is_ok() ? s : said;
}

Status HierGroup::lrecv(int host, void* data, std::size_t len, const Wait& w) {
  const int from = lane_peer(host);
  std::string head;
  bool placed = false;
  Across across(*local_);
  // The data goes straight into `data` as it arrives; the signature to head.
  ACCRUN_RETURN_IF_ERROR(speaks_for(links_->recv_split(from, HostLinks::kCollective, sizeof(Sig),
                                                       static_cast<char*>(data), len, &head, &placed, w),
                                    host));
  return check_split(from, head, placed, len);
}

// A timeout waiting for another host's member of this lane: that member
// waits in turn for its host's members, so the one missing may be any of
// them; the message says so, and which collective call on the group this
// member was in (the others' errors say theirs).
Status HierGroup::speaks_for(Status s, int host) const {
  if (s.code() != Code::kTimeout || s.message().find(" gave up: ") != std::string::npos) return s;
  std::string m = s.message();
  const auto& ranks = hosts_[static_cast<std::size_t>(host)];
  if (ranks.size() >= 2) {
    std::string who;
    for (int g : ranks) who += (who.empty() ? "" : ", ") + std::to_string(g);
    m += ", which speaks for its host's members (group ranks " + who +
         "): the one that had not arrived may be any of them";
  }
  // Against the others' errors: which call each member was in.
  return Status(s.code(), m + " (in this member's collective call " + std::to_string(calls_) + " on the group)");
}

// What an lrecv took: its signature against this member's call, and its
// length (`placed`: the data went to its place, so it had the length due).
Status HierGroup::check_split(int from, const std::string& head, bool placed, std::size_t len) {
  ACCRUN_RETURN_IF_ERROR(check_sig(from, head));
  if (placed) return Status::ok();
  return invalid_usage("group '" + name_ + "': " + op_ + ": " + links_->describe(from) + " sent " +
                       std::to_string(head.size() - sizeof(Sig)) + " bytes where " + std::to_string(len) +
                       " were due");
}

// lrecv from several hosts at once: every receive is posted before any is
// waited for, so messages that come in another order still go straight to
// their buffers.
Status HierGroup::lrecv_all(const std::vector<Into>& from, const Wait& w) {
  std::vector<HostLinks::Split> splits;
  splits.reserve(from.size());
  for (const Into& f : from)
    splits.push_back(HostLinks::Split{lane_peer(f.host), HostLinks::kCollective, sizeof(Sig), f.dest, f.len, {}});
  Across across(*local_);
  if (Status st = links_->recv_splits(&splits, w); !st) {
    // Taken in order: the first not taken is the one waited for.
    for (const HostLinks::Split& s : splits)
      if (s.head.empty() && !s.placed) return speaks_for(std::move(st), host_of_[static_cast<std::size_t>(s.peer)]);
    return st;
  }
  for (const HostLinks::Split& s : splits) ACCRUN_RETURN_IF_ERROR(check_split(s.peer, s.head, s.placed, s.len));
  return Status::ok();
}

// The next leader message from a host, its signature checked (and left in
// front: the data starts sizeof(Sig) bytes in, so nothing is moved).
Status HierGroup::lrecv_any(int host, std::string* out, const Wait& w) {
  const int from = lane_peer(host);
  Across across(*local_);
  ACCRUN_RETURN_IF_ERROR(speaks_for(links_->recv_message(from, HostLinks::kCollective, out, w), host));
  return check_sig(from, *out);
}

// A leader message's signature against this member's call; another
// leader's abort notice is its error.
Status HierGroup::check_sig(int from, const std::string& message) {
  const std::string* out = &message;
  Sig theirs{};
  if (out->size() >= sizeof theirs) std::memcpy(&theirs, out->data(), sizeof theirs);
  if (out->size() >= sizeof theirs && theirs.coll == kAbort) {
    told_by_ = host_of_[static_cast<std::size_t>(from)];  // (not told again)
    const Code code = static_cast<Code>(theirs.op);
    return Status(code == Code::kTimeout || code == Code::kInvalidUsage ? code : Code::kRemote,
                  "group '" + name_ + "': " + op_ + ": " + links_->describe(from) + " gave up: " +
                      out->substr(sizeof theirs));
  }
  if (out->size() < sizeof theirs || std::memcmp(&theirs, &sig_, sizeof sig_) != 0) {
    auto text = [](const Sig& s) {
      return std::string(coll_name(s.coll)) + " of " + std::to_string(s.count) + " " +
             (s.coll == kBarrier ? std::string("-") : std::string(dtype_name(static_cast<DType>(s.dtype)))) +
             (s.coll == kAllreduce || s.coll == kReduce || s.coll == kReducescatter
                  ? std::string(" ") + op_name(static_cast<Op>(s.op))
                  : std::string()) +
             (s.coll == kReduce || s.coll == kBroadcast ? " root " + std::to_string(s.root) : std::string());
    };
    std::string mine = text(sig_), other = text(theirs), hint;
    if (theirs.coll == kBroadcast && prev_sig_.coll == kBroadcast &&
        theirs.call == prev_sig_.call && theirs.call + 1 == sig_.call &&
        theirs.root != prev_sig_.root) {
      // Each host that took itself for the root's only sent: that
      // broadcast returned on both sides, and its data shows up now.
      return invalid_usage(
          "group '" + name_ + "': the members disagree on a broadcast's root: group rank " +
          std::to_string(rank_) + " called " + text(prev_sig_) + " as its collective call " +
          std::to_string(prev_sig_.call) + " on the group, " + links_->describe(from) + " called " +
          other +
          "; each host whose members named a root of their own sent the "
          "data and received none, so that broadcast returned with different data on different "
          "hosts, found at the next call");
    }
    if (theirs.call != sig_.call) {
      mine += " as its collective call " + std::to_string(sig_.call) + " on the group";
      other += " as its call " + std::to_string(theirs.call);
      hint = "; a member made another number of collective calls than the others before this one (a call "
             "refused on it alone, or a loop that ran another number of times)";
    }
    return invalid_usage("group '" + name_ + "': the members disagree: group rank " + std::to_string(rank_) +
                         " called " + mine + ", " + links_->describe(from) + " called " + other + hint);
  }
  return Status::ok();
}

// Every leader sends its part to every other and receives theirs.
Status HierGroup::leaders_exchange(const char* mine, std::size_t mine_len, std::vector<std::string>* theirs,
                                   const Wait& w) {
  const int hosts = static_cast<int>(hosts_.size());
  // `mine` stays as it is until this returns: sent from where it lies.
  for (int i = 1; i < hosts; ++i) ACCRUN_RETURN_IF_ERROR(lsend((my_host_ + i) % hosts, mine, mine_len, w, true));
  theirs->assign(static_cast<std::size_t>(hosts), std::string());
  for (int i = 1; i < hosts; ++i) {
    const int h = (my_host_ - i + hosts) % hosts;
    ACCRUN_RETURN_IF_ERROR(lrecv_any(h, &(*theirs)[static_cast<std::size_t>(h)], w));
  }
  for (int i = 1; i < hosts; ++i) ACCRUN_RETURN_IF_ERROR(lflush((my_host_ + i) % hosts, w));
  return Status::ok();
}

// Small collectives between a power of two hosts above 2 run by recursive
// doubling: log2(hosts) steps with one message each way, where the exchange
// takes one step with hosts - 1 messages each way.  On a busy host each
// message between hosts costs CPU (the kernel's TCP path runs twice per
// message, for its data and its acknowledgement) more than a step costs
// waiting.  `bytes`: what the exchange would have each leader send, up to
// `most`.
bool HierGroup::doubling(std::size_t bytes, std::size_t most) const {
  const std::size_t hosts = hosts_.size();
  return hosts > 2 && (hosts & (hosts - 1)) == 0 && bytes <= most;
}

Status HierGroup::leaders_allreduce(char* buf, std::size_t count, DType dt, Op op) {
  const int hosts = static_cast<int>(hosts_.size());
  const std::size_t ds = dtype_size(dt);
  const std::size_t bytes = count * ds;
  if (hosts == 1 || bytes == 0) return Status::ok();
  if (doubling(bytes * static_cast<std::size_t>(hosts - 1), kSmallBytes)) {
    say_algorithm("recursive doubling", bytes);
    const Wait w = wait_spec();
    char* const acc = acc_.get(bytes);
    for (int mask = 1; mask < hosts; mask *= 2) {
      const int partner = my_host_ ^ mask;
      ACCRUN_RETURN_IF_ERROR(lsend(partner, buf, bytes, w));
      ACCRUN_RETURN_IF_ERROR(lrecv(partner, acc, bytes, w));
      if (my_host_ < partner) {
        reduce_into(dt, op, buf, acc, count);
      } else {
        reduce_into(dt, op, acc, buf, count);
        std::memcpy(buf, acc, bytes);
      }
    }
    return Status::ok();
  }
  // The exchange sends every leader's whole vector to every other: one
  // step, while what each leader sends stays small.
  if (bytes * static_cast<std::size_t>(hosts - 1) <= kSmallBytes || count < static_cast<std::size_t>(hosts)) {
    say_algorithm("exchange", bytes);
    std::vector<std::string> parts;
    ACCRUN_RETURN_IF_ERROR(leaders_exchange(buf, bytes, &parts, wait_spec()));
    for (int h = 0; h < hosts; ++h) {
      if (h != my_host_ && parts[static_cast<std::size_t>(h)].size() != sizeof(Sig) + bytes)
        return invalid_usage("group '" + name_ + "': " + op_ + ": a host sent a part of another size");
    }
    auto part = [&](int h) -> const char* {
      return h == my_host_ ? buf : parts[static_cast<std::size_t>(h)].data() + sizeof(Sig);
    };
    // In host order, so every leader computes the same bits.
    char* const acc = acc_.get(bytes);
    std::memcpy(acc, part(0), bytes);
    for (int h = 1; h < hosts; ++h) reduce_into(dt, op, acc, part(h), count);
    std::memcpy(buf, acc, bytes);
    return Status::ok();
  }
  const Wait w = wait_spec();
  auto block = [&](int b) {
    const std::size_t base = count / static_cast<std::size_t>(hosts), extra = count % static_cast<std::size_t>(hosts);
    const std::size_t ub = static_cast<std::size_t>(b);
    const std::size_t lo = ub * base + std::min(ub, extra);
    return std::make_pair(lo, base + (ub < extra ? 1 : 0));
  };
  if (hosts > 2 && (hosts & (hosts - 1)) == 0) {
    // A power of two: recursive halving then doubling, log2(hosts) steps
    // each way instead of the ring's hosts - 1, the same bytes.  The
    // leaders pair across one bit of their host index per step, the highest
    // first; each keeps the half of its blocks on its side of that bit, so
    // the leader of host h ends with block h reduced, then the halves come
    // back in the reverse order.
    say_algorithm("recursive halving and doubling", bytes);
    auto span = [&](int lo, int hi) {  // blocks [lo, hi): first element, elements
      const std::size_t first = block(lo).first;
      return std::make_pair(first, block(hi - 1).first + block(hi - 1).second - first);
    };
    char* const in = acc_.get(span(0, hosts / 2).second * ds);
    int lo = 0, hi = hosts;
    for (int mask = hosts / 2; mask >= 1; mask /= 2) {
      const int mid = (lo + hi) / 2;
      const bool upper = (my_host_ & mask) != 0;
      const auto [slo, sn] = upper ? span(lo, mid) : span(mid, hi);
      const auto [klo, kn] = upper ? span(mid, hi) : span(lo, mid);
      // (Sent from where it lies: the halves given away are not written
      // until the doubling below receives into them.)
      ACCRUN_RETURN_IF_ERROR(lsend(my_host_ ^ mask, buf + slo * ds, sn * ds, w, true));
      ACCRUN_RETURN_IF_ERROR(lrecv(my_host_ ^ mask, in, kn * ds, w));
      reduce_into(dt, op, buf + klo * ds, in, kn);
      (upper ? lo : hi) = mid;
    }
    for (int mask = 1; mask < hosts; mask *= 2) {
      const bool upper = (my_host_ & mask) != 0;
      const int width = hi - lo;
      const auto [slo, sn] = span(lo, hi);
      const auto [rlo, rn] = upper ? span(lo - width, lo) : span(hi, hi + width);
      // What comes back lands in the half given to this partner on the
      // way down: that send must have left.  (Waited for before this
      // step's send: a transport that counts a send done once its receive
      // took it, libfabric, would have both partners wait for each other.)
      ACCRUN_RETURN_IF_ERROR(lflush(my_host_ ^ mask, w));
      ACCRUN_RETURN_IF_ERROR(lsend(my_host_ ^ mask, buf + slo * ds, sn * ds, w, true));
      ACCRUN_RETURN_IF_ERROR(lrecv(my_host_ ^ mask, buf + rlo * ds, rn * ds, w));
      (upper ? lo : hi) = upper ? lo - width : hi + width;
    }
    for (int mask = 1; mask < hosts; mask *= 2) ACCRUN_RETURN_IF_ERROR(lflush(my_host_ ^ mask, w));
    return Status::ok();
  }
  // Ring: reduce-scatter then allgather, in blocks of about count / hosts.
  say_algorithm("ring", bytes);
  const int next = (my_host_ + 1) % hosts, prev = (my_host_ - 1 + hosts) % hosts;
  char* const in = acc_.get(block(0).second * ds);
  for (int s = 0; s < hosts - 1; ++s) {
    const auto [slo, sn] = block((my_host_ - s + hosts) % hosts);
    const auto [rlo, rn] = block((my_host_ - s - 1 + 2 * hosts) % hosts);
    // (Sent from where it lies: no later step of this half writes the
    // block step s sends.)
    ACCRUN_RETURN_IF_ERROR(lsend(next, buf + slo * ds, sn * ds, w, true));
    ACCRUN_RETURN_IF_ERROR(lrecv(prev, in, rn * ds, w));
    reduce_into(dt, op, buf + rlo * ds, in, rn);
  }
  // The allgather's step s receives into the block step s above sent.
  ACCRUN_RETURN_IF_ERROR(lflush(next, w));
  for (int s = 0; s < hosts - 1; ++s) {
    const auto [slo, sn] = block((my_host_ + 1 - s + hosts) % hosts);
    const auto [rlo, rn] = block((my_host_ - s + hosts) % hosts);
    ACCRUN_RETURN_IF_ERROR(lsend(next, buf + slo * ds, sn * ds, w, true));
    ACCRUN_RETURN_IF_ERROR(lrecv(prev, buf + rlo * ds, rn * ds, w));
  }
  return lflush(next, w);  // the caller's buffer is its own again
}

// A small broadcast between the leaders, down a binomial tree rooted at the
// root's leader: the leader at position p from it (counted around the
// hosts) receives from p less its lowest set bit, then sends to p + 2^k
// for each 2^k below that bit, the farthest first.  The root's leader sends
// log2(hosts) messages instead of one per host, and the sends spread over
// the leaders (a large broadcast runs down a chain, in broadcast()).
Status HierGroup::leaders_broadcast(char* buf, std::size_t bytes, int root_host) {
  const int hosts = static_cast<int>(hosts_.size());
  if (hosts == 1 || bytes == 0) return Status::ok();
  const Wait w = wait_spec();
  say_algorithm("binomial tree of leaders", bytes);
  const int pos = (my_host_ - root_host + hosts) % hosts;
  int bit = 1;
  for (; bit < hosts; bit <<= 1) {
    if ((pos & bit) != 0) {
      Wait reader = w;
      reader.look_gap = reader_gap_;
      ACCRUN_RETURN_IF_ERROR(lrecv((root_host + pos - bit) % hosts, buf, bytes, reader));
      break;
    }
  }
  int kids[32], n = 0;
  for (bit >>= 1; bit > 0; bit >>= 1)
    if (pos + bit < hosts) kids[n++] = (root_host + pos + bit) % hosts;
  for (int i = 0; i < n; ++i) ACCRUN_RETURN_IF_ERROR(lsend(kids[i], buf, bytes, w, true));
  for (int i = 0; i < n; ++i) ACCRUN_RETURN_IF_ERROR(lflush(kids[i], w));
  return Status::ok();
}

// ------------------------------------------------------------ collectives

Status HierGroup::allreduce(const void* send, void* recv, std::size_t count, DType dt, Op op, void* stream) {
  const InCall in_call(*local_);
  ACCRUN_RETURN_IF_ERROR(enter("allreduce", stream, true));
  ACCRUN_RETURN_IF_ERROR(check_count(count, 1, dt));
  if (count > 0 && (send == nullptr || recv == nullptr)) return invalid_argument("group '" + name_ + "': allreduce: a NULL buffer");
  local_->sign_call_as(StoreGroup::Coll::kAllreduce, count);
  return allreduce_as(Sig{kAllreduce, static_cast<std::uint32_t>(dt),
                          static_cast<std::uint32_t>(op), -1, count, calls_},
                      send, recv, count, dt, op);
}

Status HierGroup::allreduce_as(const Sig& sig, const void* send, void* recv, std::size_t count,
                               DType dt, Op op) {
  sig_ = sig;
  if (lanes_ > 1 && count * dtype_size(dt) >= kLanesMinBytes) {
    return run(local_->allreduce_around(send, recv, count, dt, op, [&](char* slice, std::size_t n) {
      if (n == 0) return Status::ok();  // as on every host: the slices are the same
      lane_ = local_rank_;
      in_lanes_ = true;
      Status s = leaders_allreduce(slice, n, dt, op);
      lane_ = 0;
      in_lanes_ = false;
      return s;
    }));
  }
  ACCRUN_RETURN_IF_ERROR(run(local_->reduce(send, recv, count, dt, op, 0, nullptr)));
  if (leader()) ACCRUN_RETURN_IF_ERROR(run(leaders_allreduce(static_cast<char*>(recv), count, dt, op)));
  return run(local_->broadcast(recv, count, dt, 0, nullptr));
}

Status HierGroup::reduce(const void* send, void* recv, std::size_t count, DType dt, Op op, int root, void* stream) {
  const InCall in_call(*local_);
  ACCRUN_RETURN_IF_ERROR(enter("reduce", stream, true));
  ACCRUN_RETURN_IF_ERROR(check_count(count, 1, dt));
  ACCRUN_RETURN_IF_ERROR(check_rank(root, "root"));
  local_->sign_root_as(root);
  const std::size_t bytes = count * dtype_size(dt);
  sig_ = Sig{kReduce, static_cast<std::uint32_t>(dt), static_cast<std::uint32_t>(op), root, count, calls_};
  const int root_host = host_of_[static_cast<std::size_t>(root)];
  const bool root_leads = local_index(root) == 0;
  char* at_leader = static_cast<char*>(recv);
  if (leader() && rank_ != root) at_leader = tmp_.get(bytes);
  ACCRUN_RETURN_IF_ERROR(run(local_->reduce(send, leader() ? at_leader : nullptr, count, dt, op, 0, nullptr)));
  if (leader()) ACCRUN_RETURN_IF_ERROR(run(leaders_allreduce(at_leader, count, dt, op)));
  if (my_host_ == root_host && !root_leads) {
    // The leader hands the result to the root by a broadcast inside the
    // host, never by the point-to-point channel, which carries the
    // program's own sends; the host's other members take it into scratch.
    char* into = at_leader;
    if (!leader() && rank_ != root) into = tmp_.get(bytes);
    return run(local_->broadcast(into, count, dt, 0, nullptr));
  }
  return Status::ok();
}

Status HierGroup::broadcast(void* buf, std::size_t count, DType dt, int root, void* stream) {
  const InCall in_call(*local_);
  ACCRUN_RETURN_IF_ERROR(enter("broadcast", stream, true));
  ACCRUN_RETURN_IF_ERROR(check_count(count, 1, dt));
  ACCRUN_RETURN_IF_ERROR(check_rank(root, "root"));
  local_->sign_root_as(root);
  if (count > 0 && buf == nullptr) return invalid_argument("group '" + name_ + "': broadcast: a NULL buffer");
  sig_ = Sig{kBroadcast, static_cast<std::uint32_t>(dt), 0, root, count, calls_};
  const int root_host = host_of_[static_cast<std::size_t>(root)];
  const std::size_t ds = dtype_size(dt), bytes = count * ds;
  const int hosts = static_cast<int>(hosts_.size());
  if (bytes > kSmallBytes) {
    // Down a chain of leaders from the root's host, in chunks; each host
    // broadcasts a chunk inside as soon as its leader has it, so the
    // broadcasts inside the hosts overlap the chain, and every link carries
    // the data once.  On the root's host the root broadcasts each chunk,
    // and its leader passes it on.
    if (leader()) say_algorithm("pipelined chain", bytes);
    const Wait w = wait_spec();
    const int pos = (my_host_ - root_host + hosts) % hosts;
    const int prev = (my_host_ - 1 + hosts) % hosts, next = (my_host_ + 1) % hosts;
    const bool passes = leader() && pos < hosts - 1;
    const int local_root = pos == 0 ? local_index(root) : 0;
    char* b = static_cast<char*>(buf);
    if (local_->cma()) {
      // The members of a host read each chunk from the leader's buffer as
      // it arrives, and the leader waits for them only at the end.
      StoreGroup::Piece fill, after;
      if (pos > 0 && leader()) fill = [&](std::size_t off, std::size_t n) { return lrecv(prev, b + off, n, w); };
      if (passes) after = [&](std::size_t off, std::size_t n) { return lsend(next, b + off, n, w, true); };
      ACCRUN_RETURN_IF_ERROR(
          run(local_->broadcast_stream(buf, count, dt, local_root, chain_chunk_, fill, after)));
      return passes ? run(lflush(next, w)) : Status::ok();
    }
    for (std::size_t off = 0; off < bytes; off += chain_chunk_) {
      const std::size_t n = std::min(chain_chunk_, bytes - off);
      if (pos > 0 && leader()) ACCRUN_RETURN_IF_ERROR(run(lrecv(prev, b + off, n, w)));
      // (The next host first, when this leader has the chunk already.)
      if (passes && local_root == 0) ACCRUN_RETURN_IF_ERROR(run(lsend(next, b + off, n, w, true)));
      ACCRUN_RETURN_IF_ERROR(run(local_->broadcast_part(b + off, n / ds, dt, local_root, count)));
      if (passes && local_root != 0) ACCRUN_RETURN_IF_ERROR(run(lsend(next, b + off, n, w, true)));
    }
    return passes ? run(lflush(next, w)) : Status::ok();
  }
  // Small: the root's leader sends to every other leader, and each host
  // broadcasts inside.  A root that does not lead its host first
  // broadcasts inside it (its leader gets the data so, never by the
  // point-to-point channel, which carries the program's own sends).
  if (my_host_ == root_host && local_index(root) != 0) {
    ACCRUN_RETURN_IF_ERROR(run(local_->broadcast(buf, count, dt, local_index(root), nullptr)));
    return leader() ? run(leaders_broadcast(static_cast<char*>(buf), bytes, root_host)) : Status::ok();
  }
  if (leader()) ACCRUN_RETURN_IF_ERROR(run(leaders_broadcast(static_cast<char*>(buf), bytes, root_host)));
  return run(local_->broadcast(buf, count, dt, 0, nullptr));
}

Status HierGroup::allgather(const void* send, void* recv, std::size_t n, DType dt, void* stream) {
  const InCall in_call(*local_);
  ACCRUN_RETURN_IF_ERROR(enter("allgather", stream, true));
  ACCRUN_RETURN_IF_ERROR(check_count(n, static_cast<std::size_t>(size_), dt));
  if (n > 0 && (send == nullptr || recv == nullptr)) return invalid_argument("group '" + name_ + "': allgather: a NULL buffer");
  sig_ = Sig{kAllgather, static_cast<std::uint32_t>(dt), 0, -1, n, calls_};
  const std::size_t blk = n * dtype_size(dt);
  const auto& mine = hosts_[static_cast<std::size_t>(my_host_)];
  char* out = static_cast<char*>(recv);
  // In place (send == recv): this member's part is already at its block.
  const char* part = send == recv ? out + static_cast<std::size_t>(rank_) * blk : static_cast<const char*>(send);
  if (lanes_ > 1 && static_cast<std::size_t>(size_) * blk > kLanesAllgatherMinBytes) {
    // In lanes: each member swaps its own block with its lane's members on
    // the other hosts, straight into `recv`, then the members of a host read
    // each other's lanes' blocks.
    const int hosts = static_cast<int>(hosts_.size());
    const Wait w = wait_spec();
    // Sent from its own block of `recv`, which nothing else writes.
    char* own = out + static_cast<std::size_t>(rank_) * blk;
    if (part != own) std::memmove(own, part, blk);
    lane_ = local_rank_;
    in_lanes_ = true;
    say_algorithm("exchange", static_cast<std::size_t>(hosts) * blk);
    Status s;
    for (int i = 1; i < hosts && s.is_ok(); ++i) s = lsend((my_host_ + i) % hosts, own, blk, w, true);
    std::vector<Into> from;
    for (int i = 1; i < hosts; ++i) {
      const int h = (my_host_ - i + hosts) % hosts;
      from.push_back(Into{h, out + static_cast<std::size_t>(lane_peer(h)) * blk, blk});
    }
    if (s.is_ok()) s = lrecv_all(from, w);
    for (int i = 1; i < hosts && s.is_ok(); ++i) s = lflush((my_host_ + i) % hosts, w);
    lane_ = 0;
    in_lanes_ = false;
    ACCRUN_RETURN_IF_ERROR(run(s));
    return run(local_->share_ranges(out, n, dt, [&](int q, std::vector<std::pair<std::size_t, std::size_t>>* r) {
      for (const auto& ranks : hosts_) r->emplace_back(static_cast<std::size_t>(ranks[static_cast<std::size_t>(q)]) * blk, blk);
    }));
  }
  // This host's block: the local allgather's result, or the part itself
  // when the member is alone on its host.
  const char* host_block = part;
  if (mine.size() > 1) {
    char* const acc = acc_.get(mine.size() * blk);
    ACCRUN_RETURN_IF_ERROR(run(local_->allgather(part, acc, n, dt, nullptr)));
    host_block = acc;
  }
  const int hosts = static_cast<int>(hosts_.size());
  // (Allgather's last step carries half the result: by doubling only while
  // that is small.)
  if (leader() && doubling(static_cast<std::size_t>(size_) * blk, kSmallBytes / 4)) {
    say_algorithm("recursive doubling", static_cast<std::size_t>(size_) * blk);
    const Wait w = wait_spec();
    // `have`: the blocks of hosts [lo, lo + mask), in host order; each step
    // swaps them with the partner's, which lie next to them.
    std::string have(host_block, mine.size() * blk), got;
    int lo = my_host_;
    for (int mask = 1; mask < hosts; mask *= 2) {
      const int partner = my_host_ ^ mask, plo = lo ^ mask;
      ACCRUN_RETURN_IF_ERROR(run(lsend(partner, have.data(), have.size(), w)));
      ACCRUN_RETURN_IF_ERROR(run(lrecv_any(partner, &got, w)));
      std::size_t due = 0;
      for (int h = plo; h < plo + mask; ++h) due += hosts_[static_cast<std::size_t>(h)].size() * blk;
      if (got.size() != sizeof(Sig) + due)
        return run(invalid_usage("group '" + name_ + "': allgather: a host sent blocks of another size"));
      if (plo < lo) {
        have.insert(0, got, sizeof(Sig), due);
        lo = plo;
      } else {
        have.append(got, sizeof(Sig), due);
      }
    }
    const char* at = have.data();
    for (const auto& ranks : hosts_)
      for (int g : ranks) std::memcpy(out + static_cast<std::size_t>(g) * blk, at, blk), at += blk;
  } else if (leader()) {
    const Wait w = wait_spec();
    // Sent from where it lies; the leaders' blocks land in `recv` directly
    // when a host's ranks are consecutive.
    for (int i = 1; i < hosts; ++i)
      ACCRUN_RETURN_IF_ERROR(run(lsend((my_host_ + i) % hosts, host_block, mine.size() * blk, w, true)));
    std::vector<Into> direct;
    for (int i = 1; i < hosts; ++i) {
      const int h = (my_host_ - i + hosts) % hosts;
      const auto& ranks = hosts_[static_cast<std::size_t>(h)];
      if (ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size()))
        direct.push_back(Into{h, out + static_cast<std::size_t>(ranks.front()) * blk, ranks.size() * blk});
    }
    ACCRUN_RETURN_IF_ERROR(run(lrecv_all(direct, w)));
    for (int i = 1; i < hosts; ++i) {
      const int h = (my_host_ - i + hosts) % hosts;
      const auto& ranks = hosts_[static_cast<std::size_t>(h)];
      if (ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size())) continue;
      std::string got;
      ACCRUN_RETURN_IF_ERROR(run(lrecv_any(h, &got, w)));
      if (got.size() != sizeof(Sig) + ranks.size() * blk)
        return run(invalid_usage("group '" + name_ + "': allgather: a host sent a block of another size"));
      for (std::size_t k = 0; k < ranks.size(); ++k)
        std::memcpy(out + static_cast<std::size_t>(ranks[k]) * blk, got.data() + sizeof(Sig) + k * blk, blk);
    }
    for (std::size_t k = 0; k < mine.size(); ++k) {
      char* to = out + static_cast<std::size_t>(mine[k]) * blk;
      if (to != host_block + k * blk) std::memmove(to, host_block + k * blk, blk);
    }
    for (int i = 1; i < hosts; ++i) ACCRUN_RETURN_IF_ERROR(run(lflush((my_host_ + i) % hosts, w)));
  }
  return run(local_->broadcast(recv, n * static_cast<std::size_t>(size_), dt, 0, nullptr));
}

Status HierGroup::reducescatter(const void* send, void* recv, std::size_t recv_count, DType dt, Op op, void* stream) {
  const InCall in_call(*local_);
  ACCRUN_RETURN_IF_ERROR(enter("reducescatter", stream, true));
  ACCRUN_RETURN_IF_ERROR(check_count(recv_count, static_cast<std::size_t>(size_), dt));
  if (recv_count > 0 && (send == nullptr || recv == nullptr))
    return invalid_argument("group '" + name_ + "': reducescatter: a NULL buffer");
  const std::size_t ds = dtype_size(dt);
  char* const all = tmp_.get(recv_count * static_cast<std::size_t>(size_) * ds);
  // One collective call, signed as the reducescatter it is, inside the
  // host too.
  local_->sign_call_as(StoreGroup::Coll::kReducescatter, recv_count);
  ACCRUN_RETURN_IF_ERROR(allreduce_as(Sig{kReducescatter, static_cast<std::uint32_t>(dt),
                                          static_cast<std::uint32_t>(op), -1, recv_count, calls_},
                                      send, all, recv_count * static_cast<std::size_t>(size_), dt,
                                      op));
  std::memcpy(recv, all + static_cast<std::size_t>(rank_) * recv_count * ds, recv_count * ds);
  return Status::ok();
}

Status HierGroup::barrier() {
  const InCall in_call(*local_);
  ACCRUN_RETURN_IF_ERROR(enter("barrier", nullptr, true));
  sig_ = Sig{kBarrier, 0, 0, -1, 0, calls_};
  ACCRUN_RETURN_IF_ERROR(run(local_->barrier()));
  if (leader() && doubling(0, 0)) {
    const Wait w = wait_spec();
    std::string got;
    for (int mask = 1; mask < static_cast<int>(hosts_.size()); mask *= 2) {
      ACCRUN_RETURN_IF_ERROR(run(lsend(my_host_ ^ mask, nullptr, 0, w)));
      ACCRUN_RETURN_IF_ERROR(run(lrecv_any(my_host_ ^ mask, &got, w)));
    }
  } else if (leader()) {
    std::vector<std::string> parts;
    ACCRUN_RETURN_IF_ERROR(run(leaders_exchange(nullptr, 0, &parts, wait_spec())));
  }
  return run(local_->barrier());
}

// ------------------------------------------------------------ point-to-point

Status HierGroup::send(const void* buf, std::size_t count, DType dt, int peer, void* stream) {
  ACCRUN_RETURN_IF_ERROR(enter("send", stream, false));
  ACCRUN_RETURN_IF_ERROR(check_count(count, 1, dt));
  ACCRUN_RETURN_IF_ERROR(check_rank(peer, "peer"));
  if (count > 0 && buf == nullptr) return invalid_argument("group '" + name_ + "': send: a NULL buffer");
  if (host_of_[static_cast<std::size_t>(peer)] == my_host_) return local_->send(buf, count, dt, local_index(peer), nullptr);
  return links_->send(peer, HostLinks::kP2p, buf, count * dtype_size(dt), p2p_wait_spec(count * dtype_size(dt)));
}

Status HierGroup::recv(void* buf, std::size_t count, DType dt, int peer, void* stream) {
  ACCRUN_RETURN_IF_ERROR(enter("recv", stream, false));
  ACCRUN_RETURN_IF_ERROR(check_count(count, 1, dt));
  ACCRUN_RETURN_IF_ERROR(check_rank(peer, "peer"));
  if (count > 0 && buf == nullptr) return invalid_argument("group '" + name_ + "': recv: a NULL buffer");
  if (host_of_[static_cast<std::size_t>(peer)] == my_host_) return local_->recv(buf, count, dt, local_index(peer), nullptr);
  const std::size_t bytes = count * dtype_size(dt);
  if (depth_ > 0) {
    pending_.push_back(PendingRecv{buf, bytes, peer});
    return Status::ok();
  }
  std::size_t got = 0;
  return links_->recv(peer, HostLinks::kP2p, buf, bytes, &got, p2p_wait_spec(bytes));
}

Status HierGroup::group_start() {
  ACCRUN_RETURN_IF_ERROR(local_->group_start());
  ++depth_;
  return Status::ok();
}

Status HierGroup::group_end() {
  if (depth_ == 0) return invalid_usage("group '" + name_ + "': group_end without group_start");
  --depth_;
  // The bracket's receives from other hosts belong to this bracket, also
  // when its ops on this host failed: they are taken now, into the
  // buffers they were given for (kept for the next bracket, they would
  // write into this one's buffers and take the next one's messages).
  std::vector<PendingRecv> todo;
  if (depth_ == 0) todo.swap(pending_);
  Status first = local_->group_end();
  op_ = "recv";
  // One deadline for them all: past it each takes what is there and fails
  // at once, not one timeout after another.
  std::size_t most = 0;
  for (const PendingRecv& r : todo) most = std::max(most, r.bytes);
  const Wait w = p2p_wait_spec(most);
  for (const PendingRecv& r : todo) {
    std::size_t got = 0;
    Status s = links_->recv(r.peer, HostLinks::kP2p, r.buf, r.bytes, &got, w);
    if (first && !s) first = s;
  }
  return first;
}

}  // namespace accrun::collectives::store
