// A store group's set-up, argument checks, signatures and rounds, and the
// store backend's factory.
#include "store/group.hpp"
#include "store/hier_group.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "accrun/log.hpp"

namespace accrun::collectives {
namespace store {
namespace {

constexpr int kDefaultSetupTimeoutMs = 60'000;

std::size_t round_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

const char* coll_name(unsigned c) {
  switch (c) {
    case 1: return "allreduce";
    case 2: return "reduce";
    case 3: return "broadcast";
    case 4: return "allgather";
    case 5: return "reducescatter";
  }
  return "an unknown collective";
}

}  // namespace

StoreGroup::StoreGroup(const GroupContext& ctx, const Tuning& t, bool across)
    : rank_(ctx.rank), size_(ctx.size), timeout_ms_(ctx.timeout_ms), tun_(t) {
  // An oversubscribed host: yield at once instead of spinning.
  Waiter w;
  w.oversubscribed = host_oversubscribed(ctx);
  w.doorbell = across && w.oversubscribed;
  w.spin_ns = t.spin_ns;
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  // Eight or more ranks per CPU: a rank that keeps yielding keeps the
  // ranks it waits for from the CPU, so past a short while it sleeps.
  if (cpus > 0 && size_ >= 8 * cpus) w.crowded = true;
  shm_ = std::make_unique<ShmTransport>(ctx, t, w);
}

Status StoreGroup::setup(Rendezvous* rv, int setup_timeout_ms, const std::string& shm_dir) {
  return shm_->setup(rv, setup_timeout_ms, shm_dir);
}

// ------------------------------------------------------------ argument checks

Status StoreGroup::enter(const char* op, void* stream) {
  op_ = op;
  shm_->sleep_in_waits(false);  // until sign() knows the call's size
  if (!ok_) return broken_;
  if (stream != nullptr)
    return invalid_argument(where() + ": " + op + ": the store backend works on host memory; stream must be NULL");
  if (group_depth_ > 0)
    return invalid_usage(where() + ": " + op + " inside group_start/group_end (only send and recv may be grouped)");
  return Status::ok();
}

Status StoreGroup::check_p2p(const char* op, void* stream, int peer) {
  op_ = op;
  shm_->sleep_in_waits(false);
  if (!ok_) return broken_;
  if (stream != nullptr)
    return invalid_argument(where() + ": " + op + ": the store backend works on host memory; stream must be NULL");
  return check_rank(peer, "peer");
}

Status StoreGroup::check_rank(int r, const char* what) const {
  if (r < 0 || r >= size_)
    return invalid_argument(where() + ": " + op_ + ": " + what + " " + std::to_string(r) +
                            " is out of range (group size " + std::to_string(size_) + ")");
  return Status::ok();
}

Status StoreGroup::check_buffers(const void* a, const void* b, std::size_t count, std::size_t ds) const {
  std::size_t bytes;  // (no division: a broadcast of a few bytes feels one)
  if (!count_bytes(count, 1, ds, &bytes))
    return invalid_argument(where() + ": " + op_ + ": count " + std::to_string(count) + " is too large");
  if (count > 0 && (a == nullptr || b == nullptr))
    return invalid_argument(where() + ": " + op_ + ": NULL buffer with count " + std::to_string(count));
  return Status::ok();
}

Status StoreGroup::guard(Status s) {
  if (!s && ok_) {
    ok_ = false;
    broken_ = Status(s.code(), s.message() + " (the group is unusable now; destroy it)");
    shm_->mark_broken(s);
  }
  return s;
}

Wait StoreGroup::wait_spec() const {
  Wait w;
  w.timeout_ms = timeout_ms_;
  w.op = op_;
  if (timeout_ms_ >= 0) w.deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
  return w;
}

// ----------------------------------------------------------------- signatures

void StoreGroup::sign(Coll c, std::size_t count, DType dt, Op op, int root) {
  shm_->sleep_in_waits(count * dtype_size(dt) >= tun_.across_sleep_min);  // (where there is a doorbell)
  if (outer_coll_ != Coll{}) {
    c = outer_coll_;
    count = outer_count_;
  }
  // (A broadcast stamps its own number in, broadcast.cpp.)
  sig_[0] = count | (c == Coll::kBroadcast ? 0 : (bcast_calls_ & 0xffff) << kCallShift);
  if (outer_root_ != kNoOuterRoot) root = outer_root_;
  sig_[1] = (static_cast<std::uint64_t>(c) << 56) | (static_cast<std::uint64_t>(dt) << 48) |
            (static_cast<std::uint64_t>(op) << 40) | (static_cast<std::uint64_t>(bcast_roots_) << kRootsShift) |
            static_cast<std::uint32_t>(root + 1);
}

std::string StoreGroup::describe_sig(const std::uint64_t* sig, bool with_calls) {
  const unsigned c = static_cast<unsigned>(sig[1] >> 56);
  const auto dt = static_cast<DType>((sig[1] >> 48) & 0xff);
  const auto op = static_cast<Op>((sig[1] >> 40) & 0xff);
  const int root = static_cast<int>(static_cast<std::uint32_t>(sig[1])) - 1;
  const std::uint64_t call = sig[0] >> kCallShift;  // broadcasts only
  const std::uint64_t count = sig[0] & ((std::uint64_t{1} << kCallShift) - 1);
  if (c < 1 || c > 5 || static_cast<unsigned>(dt) > 7 || static_cast<unsigned>(op) > 3) return coll_name(c);
  std::string s = std::string(coll_name(c)) + " of " + std::to_string(count) + " " + dtype_name(dt);
  if (c == 4 || c == 5) s += " per rank";
  if (c != 3 && c != 4) s += std::string(" (") + op_name(op) + ")";
  if (c == 2) s += " to root " + std::to_string(root);
  if (c == 3) s += " from root " + std::to_string(root);
  if (c == 3 && call != 0) s += " (the group's broadcast #" + std::to_string(call) + ")";
  if (c != 3 && with_calls) s += " after " + std::to_string(call) + " broadcast" + (call == 1 ? "" : "s") + " on the group";
  return s;
}

Status StoreGroup::check_sig(int q, const std::uint64_t* theirs) {
  if (theirs[0] == sig_[0] && theirs[1] == sig_[1]) return Status::ok();
  const std::uint64_t t[2] = {theirs[0], theirs[1]};  // a copy: the peer may move on
  const std::uint64_t calls = ~((std::uint64_t{1} << kCallShift) - 1);
  // Only the broadcasts made before differ: the calls' order, or (as
  // many of them) the roots they named.
  constexpr std::uint64_t roots = std::uint64_t{0xff} << kRootsShift;
  if ((t[1] & ~roots) == (sig_[1] & ~roots) && (t[0] & ~calls) == (sig_[0] & ~calls)) {
    if (t[0] == sig_[0]) return roots_differ(q);
    return out_of_order(describe_sig(sig_, true), shm_->describe(q) + " called " + describe_sig(t, true));
  }
  return guard(invalid_usage(where() + ": members called different collectives: this rank called " +
                             describe_sig(sig_) + ", " + shm_->describe(q) + " called " + describe_sig(t) +
                             "; every member must pass the same count, dtype, op and root"));
}

Status StoreGroup::roots_differ(int q) {
  return guard(invalid_usage(where() + ": members named different roots for the same broadcast: this rank and " +
                             shm_->describe(q) + " disagree on the root of one of the group's " +
                             std::to_string(bcast_calls_) + " broadcasts so far (both took themselves for it?); "
                             "every member must pass the same root"));
}

Status StoreGroup::out_of_order(const std::string& mine, const std::string& theirs) {
  return guard(invalid_usage(where() + ": members called different collectives: this rank called " + mine + ", " +
                             theirs + "; every member must make the same calls in the same order"));
}

Status StoreGroup::check_all_sigs(int h) {
  for (int q = 0; q < size_; ++q)
    if (q != rank_) ACCRUN_RETURN_IF_ERROR(check_box_sig(q, h));
  return Status::ok();
}

// --------------------------------------------------------------------- rounds

void StoreGroup::note_outer_call(std::uint64_t call) {
  shm_->ctrl(rank_).outer_call.store(call, std::memory_order_relaxed);
}

namespace {
// Now, never 0 (0 says "no mark").  (The marks' times are coarse_now_ns()'s:
// the messages that read them count milliseconds, and a small call across
// hosts sets three.)
std::int64_t mark_now() { return std::max<std::int64_t>(coarse_now_ns(), 1); }
}  // namespace

// (Alone on its host, a member has nobody to read its marks.)
void StoreGroup::note_in_outer_call(bool inside) {
  if (size_ > 1)
    shm_->ctrl(rank_).outer_left_ns.store(inside ? 0 : mark_now(), std::memory_order_relaxed);
}

void StoreGroup::note_across(bool waiting) {
  if (size_ > 1)
    shm_->ctrl(rank_).across_since_ns.store(waiting ? mark_now() : 0, std::memory_order_relaxed);
}

std::uint64_t StoreGroup::publish() {
  shm_->ctrl(rank_).seq.store(++seq_, std::memory_order_release);
  shm_->ring();
  return seq_;
}

std::uint64_t StoreGroup::publish_box(int h) {
  shm_->box(rank_, h).seq.store(seq_ + 1, std::memory_order_release);
  return publish();
}

int StoreGroup::begin_round() {
  const int h = static_cast<int>(round_ & 1);
  if (reuse_need_[h] > known_min_) {
    Status s = guard(wait_all(reuse_need_[h]));
    if (!s) return h;
  }
  Box& b = shm_->box(rank_, h);
  b.sig[0] = sig_[0];
  b.sig[1] = sig_[1];
  return h;
}

void StoreGroup::end_round() {
  reuse_need_[round_ & 1] = seq_ + 1;
  ++round_;
}

std::size_t StoreGroup::chunk_elems(std::size_t chunk_bytes, std::size_t round_bytes,
                                    std::size_t ds) const {
  if (chunk_bytes == 0)
    chunk_bytes = std::max<std::size_t>(64 * 1024, round_bytes / static_cast<std::size_t>(size_));
  const std::size_t b = std::min(std::max<std::size_t>(chunk_bytes, 64), shm_->half());
  return std::max<std::size_t>(1, b / ds);
}

std::pair<std::size_t, std::size_t> StoreGroup::slice(std::size_t n, std::size_t ds, int q) const {
  const std::size_t unit = 64 / ds;
  const std::size_t per = round_up((n + size_ - 1) / size_, unit);
  const std::size_t lo = std::min(n, per * static_cast<std::size_t>(q));
  return {lo, std::min(n, lo + per)};
}

Status StoreGroup::wait_all(std::uint64_t v) {
  return wait_every(v, [this](int q) { return shm_->ctrl(q).seq.load(std::memory_order_acquire); });
}

// (A member stamps a box at v only after its part of every earlier round is
// done: what begin_round's reuse check needs to know, which its seq at v
// says too, so that check then reads no member's control line.)
Status StoreGroup::wait_boxes(int h, std::uint64_t v) {
  auto stamp = [this, h](int q) { return shm_->box(q, h).seq.load(std::memory_order_acquire); };
  // The boxes already there are checked as they are read (one pass); at
  // the first one missing, every member is waited for alike.
  int q = 0;
  for (; q < size_; ++q) {
    if (q == rank_) continue;
    if (stamp(q) < v) break;
    ACCRUN_RETURN_IF_ERROR(check_box_sig(q, h));
  }
  if (q < size_) {
    ACCRUN_RETURN_IF_ERROR(guard(wait_every(v, stamp)));
    for (; q < size_; ++q)
      if (q != rank_) ACCRUN_RETURN_IF_ERROR(check_box_sig(q, h));
  }
  saw_all(v);
  return Status::ok();
}

template <class Stamp>
Status StoreGroup::wait_every(std::uint64_t v, Stamp stamp) {
  // Fast path: one pass over the stamps.
  int first = 0;
  while (first < size_ && stamp(first) >= v) ++first;
  if (first == size_) { saw_all(v); return Status::ok(); }
  const Wait w = wait_spec();
  // Liveness of the first rank still missing: the one this call waits on.
  auto all = [&] {
    while (first < size_ && stamp(first) >= v) ++first;
    return first == size_;
  };
  // (The check is on the member found missing, alone: one that arrived
  // since and went on to its next call is no mismatch, whoever else is
  // still missing.)
  auto elsewhere = [&] {
    const int q = first;
    return peer_elsewhere(q, [&, q] { return stamp(q) >= v; });
  };
  Status s = shm_->waiter().until(all, elsewhere, w.deadline,
                                  [&] { return shm_->timed_out(w, late(v, stamp)); });
  if (s) saw_all(v);
  return s;
}

Status StoreGroup::wait_bc_done(int which, std::uint64_t v) {
  std::uint64_t& known = bring_[which].known_min;  // below v: the caller looked (inline, the root's fast path)
  int first = 0;
  auto done_of = [&](int q) { return shm_->ctrl(q).bc_done[which].load(std::memory_order_acquire); };
  auto done = [&] {
    while (first < size_ && done_of(first) >= v) ++first;
    return first == size_;
  };
  if (!done()) {
    const Wait w = wait_spec();
    // A reader that took a step of the rounds this root has not called
    // another collective instead of this broadcast.
    auto elsewhere = [&]() -> Status {
      ACCRUN_RETURN_IF_ERROR(shm_->check_peer(first, op_));
      if (shm_->ctrl(first).seq.load(std::memory_order_acquire) <= seq_ || done()) return Status::ok();
      return out_of_order(describe_sig(sig_), shm_->describe(first) + " called another collective instead");
    };
    Status s = shm_->waiter().until(done, elsewhere, w.deadline,
                                    [&] { return shm_->timed_out(w, late(v, done_of)); });
    if (!s) return s;
  }
  // Remember the true minimum: later roots skip the scan while it covers them.
  std::uint64_t lo = UINT64_MAX;
  for (int q = 0; q < size_; ++q) lo = std::min(lo, done_of(q));
  known = std::max(known, lo);
  return Status::ok();
}

Status StoreGroup::wait_box(int q, int h, std::uint64_t v, bool every_late) {
  return wait_member(q, v, every_late, [this, h](int p) {
    return shm_->box(p, h).seq.load(std::memory_order_acquire);
  });
}

Status StoreGroup::wait_one(int q, std::uint64_t v) {
  return wait_member(q, v, true,
                     [this](int p) { return shm_->ctrl(p).seq.load(std::memory_order_acquire); });
}

template <class Stamp>
Status StoreGroup::wait_member(int q, std::uint64_t v, bool every_late, Stamp stamp) {
  if (stamp(q) >= v) return Status::ok();
  const Wait w = wait_spec();
  auto ready = [&] { return stamp(q) >= v; };
  return shm_->waiter().until(
      ready, [&] { return peer_elsewhere(q, ready); }, w.deadline,
      [&] { return shm_->timed_out(w, every_late ? late(v, stamp) : std::vector<int>{q}); });
}

template <class Stamp>
std::vector<int> StoreGroup::late(std::uint64_t v, Stamp stamp) const {
  std::vector<int> missing;
  for (int q = 0; q < size_; ++q)
    if (stamp(q) < v) missing.push_back(q);
  return missing;
}

template <class Ready>
Status StoreGroup::peer_elsewhere(int q, Ready ready) {
  ACCRUN_RETURN_IF_ERROR(shm_->check_peer(q, op_));
  // q enters a broadcast only after its part of every earlier round is
  // published, so one seen in a broadcast this member never made, while
  // this round still misses it, called something else here.
  const std::uint64_t entered = shm_->ctrl(q).bcast_entered.load(std::memory_order_acquire);
  if (entered <= bcast_calls_ || ready()) return Status::ok();
  return out_of_order(std::string(op_) + " after " + std::to_string(bcast_calls_) + " broadcasts on the group",
                      shm_->describe(q) + " called the group's broadcast #" + std::to_string(entered) + " instead");
}

// -------------------------------------------------------------------- factory

Result<std::unique_ptr<Backend>> make_store_backend_tuned(const GroupContext& ctx, const Tuning& tuning) {
  const std::string where = "group '" + ctx.name + "'";
  if (ctx.size < 1 || ctx.rank < 0 || ctx.rank >= ctx.size)
    return invalid_argument(where + ": rank " + std::to_string(ctx.rank) + " is out of range for size " +
                            std::to_string(ctx.size));
  if (ctx.members.size() != static_cast<std::size_t>(ctx.size))
    return invalid_argument(where + ": " + std::to_string(ctx.members.size()) + " members for size " +
                            std::to_string(ctx.size));
  if (ctx.rendezvous == nullptr && ctx.size > 1) return invalid_argument(where + ": no rendezvous");
  const std::string& my_host = ctx.members[static_cast<std::size_t>(ctx.rank)].host;
  bool one_host = true;
  for (const Member& m : ctx.members) one_host = one_host && m.host == my_host;
  if (!one_host) {
    // Across hosts: shared memory inside each host, TCP between them.
    auto hier = std::make_unique<HierGroup>(ctx, tuning);
    ACCRUN_RETURN_IF_ERROR(hier->setup(ctx, ctx.timeout_ms >= 0 ? ctx.timeout_ms : kDefaultSetupTimeoutMs));
    return std::unique_ptr<Backend>(std::move(hier));
  }
  auto backend = std::make_unique<StoreGroup>(ctx, tuning);
  const int setup_timeout = ctx.timeout_ms >= 0 ? ctx.timeout_ms : kDefaultSetupTimeoutMs;
  // A one-rank group still gets a segment (send to itself) but needs no rendezvous.
  class Local final : public Rendezvous {
   public:
    Status publish(const std::string&, const std::string&) override { return Status::ok(); }
    Result<std::string> lookup(const std::string& k, int) override { return not_found(k); }
  } local;
  Rendezvous* rv = ctx.rendezvous != nullptr ? ctx.rendezvous : &local;
  Status s = backend->setup(rv, setup_timeout, ctx.shm_dir);
  if (!s) return s;
  log(LogLevel::kDebug, "group %s: store backend ready (%d ranks, transport shm)", ctx.name.c_str(), ctx.size);
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace store

Result<std::unique_ptr<Backend>> make_store_backend(const GroupContext& ctx) {
  return store::make_store_backend_tuned(ctx, store::Tuning{});
}

}  // namespace accrun::collectives
