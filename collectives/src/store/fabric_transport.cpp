#include "store/fabric_transport.hpp"

#include <rdma/fi_cm.h>
#include <dlfcn.h>
#include <rdma/fi_errno.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <type_traits>
#include <utility>

#include "accrun/log.hpp"
#include "store/wait.hpp"

namespace accrun::collectives::store {
namespace {

constexpr std::size_t kHeaderFixed = 16;  // total (u64), head length (u32), data inline (u32)
constexpr std::size_t kMaxHead = 256;     // heads longer than this travel in the body
constexpr std::size_t kHeaderMax = kHeaderFixed + kMaxHead + FabricTransport::kInline;

void put32(char* p, std::uint32_t v) { std::memcpy(p, &v, 4); }
void put64(char* p, std::uint64_t v) { std::memcpy(p, &v, 8); }
std::uint32_t get32(const char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
std::uint64_t get64(const char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

std::string to_hex(const void* p, std::size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<const unsigned char*>(p)[i];
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

bool from_hex(const std::string& s, std::string* out) {
  if (s.size() % 2 != 0) return false;
  out->clear();
  for (std::size_t i = 0; i < s.size(); i += 2) {
    auto nib = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
    int a = nib(s[i]), b = nib(s[i + 1]);
    if (a < 0 || b < 0) return false;
    out->push_back(static_cast<char>(a * 16 + b));
  }
  return true;
}

// libfabric, opened when a group first asks for this transport rather
// than when libaccrun is loaded: the provider libraries it depends on run
// constructors at load (PSM's clock calibration sleeps about 200 ms), which
// every program linking libaccrun paid at start-up.  Only the library's
// exported functions are looked up; the rest of its API is inline calls
// through the objects' operation tables.
struct FabricLib {
  decltype(&::fi_getinfo) getinfo = nullptr;
  decltype(&::fi_freeinfo) freeinfo = nullptr;
  decltype(&::fi_dupinfo) dupinfo = nullptr;
  decltype(&::fi_fabric) fabric = nullptr;
  decltype(&::fi_strerror) strerror = nullptr;
};

// The library, or nullptr (with the reason in *why when given).
const FabricLib* fabric_lib(std::string* why = nullptr) {
  static std::string error;
  static const FabricLib* const lib = []() -> const FabricLib* {
    void* h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = dlerror();
      error = e != nullptr ? e : "libfabric.so.1 cannot be loaded";
      return nullptr;
    }
    static FabricLib l;
    auto find = [h](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (fn == nullptr && error.empty()) error = std::string("libfabric.so.1 has no ") + name;
    };
    find(l.getinfo, "fi_getinfo");
    find(l.freeinfo, "fi_freeinfo");
    find(l.dupinfo, "fi_dupinfo");
    find(l.fabric, "fi_fabric");
    find(l.strerror, "fi_strerror");
    return error.empty() ? &l : nullptr;  // (left loaded: nothing else holds it)
  }();
  if (lib == nullptr && why != nullptr) *why = error;
  return lib;
}

}  // namespace

FabricTransport::FabricTransport(const GroupContext& ctx, std::vector<bool> needs,
                                 std::size_t pair_buffer_max)
    : group_(ctx.name),
      rank_(ctx.rank),
      members_(ctx.members),
      needs_(std::move(needs)),
      rendezvous_(ctx.rendezvous),
      peers_(ctx.peers),
      pair_buffer_max_(pair_buffer_max),
      memory_bytes_(host_memory_bytes()),
      oversubscribed_(host_oversubscribed(ctx)),
      addr_(members_.size(), FI_ADDR_UNSPEC),
      outstanding_(members_.size(), 0),
      credit_(members_.size()),
      ack_recv_(members_.size(), nullptr),
      lost_(members_.size()) {}

Result<std::unique_ptr<FabricTransport>> FabricTransport::create(const GroupContext& ctx, std::vector<bool> needs,
                                                                 std::size_t pair_buffer_max) {
  std::unique_ptr<FabricTransport> t(new FabricTransport(ctx, std::move(needs), pair_buffer_max));
  ACCRUN_RETURN_IF_ERROR(t->open(ctx));
  t->progress_thread_ = std::thread([p = t.get()] { p->progress_loop(); });
  return t;
}

FabricTransport::~FabricTransport() {
  stop_ = true;
  if (progress_thread_.joinable()) progress_thread_.join();
  close_all();
}

std::unique_lock<std::mutex> FabricTransport::enter() {
  std::unique_lock<std::mutex> lock(mu_);
  return lock;
}

void FabricTransport::progress_loop() {
  while (!stop_) {
    bool busy;
    {
      std::lock_guard<std::mutex> lock(mu_);
      progress();
      busy = !unposted_.empty();
      for (const Op& o : ops_)
        if (o.is_send && !o.done) busy = true;
    }
    // With more ranks than cores, every wake-up is taken from a rank.
    if (oversubscribed_)
      std::this_thread::sleep_for(busy ? std::chrono::milliseconds(2) : std::chrono::milliseconds(20));
    else
      std::this_thread::sleep_for(busy ? std::chrono::microseconds(50) : std::chrono::milliseconds(2));
  }
}

std::string FabricTransport::error_text(int err) const {
  const FabricLib* fi = fabric_lib();
  return fi != nullptr ? fi->strerror(err < 0 ? -err : err) : "error " + std::to_string(err);
}

Status FabricTransport::open(const GroupContext& ctx) {
  const std::string where = "group '" + group_ + "': libfabric transport";
  std::string why;
  const FabricLib* fi = fabric_lib(&why);
  if (fi == nullptr) return not_supported(where + ": " + why + " (install libfabric1, or use the tcp transport)");
  fi_info* hints = fi->dupinfo(nullptr);
  if (hints == nullptr) return no_memory(where + ": fi_allocinfo");
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_TAGGED;
  hints->mode = FI_CONTEXT;
  hints->tx_attr->msg_order = FI_ORDER_SAS;
  // A send completes once the peer has it, not once the provider has
  // queued it: a member that flushes and closes its endpoint (it leaves
  // the group) must not take its last messages with it.  Measured here it
  // costs nothing visible (2 hosts x 1, 8 B ... 4 MiB).
  hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  hints->rx_attr->msg_order = FI_ORDER_SAS;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->domain_attr->av_type = FI_AV_TABLE;
  hints->domain_attr->mr_mode = 0;  // no memory registration asked of us
  int rc = fi->getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info_);
  fi->freeinfo(hints);
  if (rc != 0 || info_ == nullptr)
    return not_supported(where + ": no provider offers reliable tagged messages here (fi_getinfo: " +
                         error_text(rc) + "; FI_PROVIDER narrows the choice)");
  name_str_ = std::string("libfabric (") + info_->fabric_attr->prov_name + ")";
  manual_progress_ = info_->domain_attr->data_progress == FI_PROGRESS_MANUAL;
  auto fail = [&](const char* call, int r) {
    return Status(Code::kSystem, where + ": " + call + ": " + error_text(r));
  };
  if ((rc = fi->fabric(info_->fabric_attr, &fabric_, nullptr)) != 0) return fail("fi_fabric", rc);
  if ((rc = fi_domain(fabric_, info_, &domain_, nullptr)) != 0) return fail("fi_domain", rc);
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  cq_attr.wait_obj = FI_WAIT_NONE;
  cq_attr.size = 1024;
  if ((rc = fi_cq_open(domain_, &cq_attr, &cq_, nullptr)) != 0) return fail("fi_cq_open", rc);
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  av_attr.count = members_.size();
  if ((rc = fi_av_open(domain_, &av_attr, &av_, nullptr)) != 0) return fail("fi_av_open", rc);
  if ((rc = fi_endpoint(domain_, info_, &ep_, nullptr)) != 0) return fail("fi_endpoint", rc);
  if ((rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV)) != 0) return fail("fi_ep_bind (cq)", rc);
  if ((rc = fi_ep_bind(ep_, &av_->fid, 0)) != 0) return fail("fi_ep_bind (av)", rc);
  if ((rc = fi_enable(ep_)) != 0) return fail("fi_enable", rc);
  char name[256];
  std::size_t len = sizeof name;
  if ((rc = fi_getname(&ep_->fid, name, &len)) != 0) return fail("fi_getname", rc);
  ACCRUN_RETURN_IF_ERROR(ctx.rendezvous->publish("fi.addr." + std::to_string(rank_), to_hex(name, len)));
  log(LogLevel::kDebug, "group %s: libfabric endpoint on %s (%s)", group_.c_str(), info_->fabric_attr->prov_name,
      info_->domain_attr->name);
  return Status::ok();
}

namespace {

// Endpoints of failed groups left open (close_all()): kept here, reachable
// until the process ends, on purpose.
struct Parked {
  fi_info* info;
  fid_fabric* fabric;
  fid_domain* domain;
  fid_cq* cq;
  fid_av* av;
  fid_ep* ep;
};

void park(Parked p) {
  static std::mutex mu;
  static auto* parked = new std::vector<Parked>();
  std::lock_guard<std::mutex> lock(mu);
  parked->push_back(p);
}

}  // namespace

// Whether a peer's link or the group has failed.
bool FabricTransport::broken() const {
  if (failed_ || close_pending_) return true;
  for (std::size_t q = 0; q < members_.size(); ++q)
    if (!lost_[q].empty() || (peers_ != nullptr && peers_->failure(members_[q].job_rank))) return true;
  return false;
}

void FabricTransport::close_all() {
  if (closed_) return;
  closed_ = true;
  if (manual_progress_ && broken()) {
    // Closing an endpoint that still has transfers to a lost peer flushes
    // them through the provider's error path, and there the tcp;ofi_rxm
    // provider of libfabric 1.17 can crash (a flushed completion whose
    // context is gone: SIGSEGV inside fi_close, about 1 close in 10 after
    // a host's link went down).  With manual progress the provider moves
    // no data outside our calls, so an endpoint no longer called is as
    // still as a closed one: it is left open, unused, until the process
    // ends.  A provider that progresses by itself (hardware that reads
    // and writes memory on its own) is closed as below.
    // (A peer on this host that has exited counts as gone even when it
    // finished normally, so a group whose peers left first parks too.)
    log(LogLevel::kDebug,
        "group %s: the libfabric endpoint is left open, unused, until this process ends: the group failed or a "
        "peer is gone (it may have finished first)",
        group_.c_str());
    park(Parked{info_, fabric_, domain_, cq_, av_, ep_});
    std::fill(ack_recv_.begin(), ack_recv_.end(), nullptr);
    unposted_.clear();
    orphans_.clear();
    ops_.clear();
    held_.clear();
    return;
  }
  // Closing the endpoint ends whatever it still reads or writes.
  if (ep_ != nullptr) fi_close(&ep_->fid);
  if (av_ != nullptr) fi_close(&av_->fid);
  if (cq_ != nullptr) fi_close(&cq_->fid);
  if (domain_ != nullptr) fi_close(&domain_->fid);
  if (fabric_ != nullptr) fi_close(&fabric_->fid);
  if (const FabricLib* fi = fabric_lib(); info_ != nullptr && fi != nullptr) fi->freeinfo(info_);
  ep_ = nullptr;
  std::fill(ack_recv_.begin(), ack_recv_.end(), nullptr);
  unposted_.clear();
  orphans_.clear();
  ops_.clear();
  held_.clear();
}

std::string FabricTransport::describe(int peer) const { return describe_member(members_, peer); }

std::uint64_t FabricTransport::tag_of(int sender, Tag tag, bool body) const {
  return (static_cast<std::uint64_t>(sender) << 8) | (static_cast<std::uint64_t>(tag) * 2 + (body ? 1 : 0));
}

void FabricTransport::progress() {
  if (closed_) return;
  // Requests that came in the last round: answered now, outside the
  // completion loop.
  for (auto [q, t] : std::exchange(requests_, {})) maybe_report(q, t);
  post_unposted();
  fi_cq_tagged_entry e[16];
  for (;;) {
    ssize_t n = fi_cq_read(cq_, e, 16);
    if (n == -FI_EAGAIN) return;
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (fi_cq_readerr(cq_, &err, 0) != 1) return;
      auto* op = static_cast<Op*>(err.op_context);
      if (op == nullptr) continue;
      if (op->is_ack) {  // not posted again: the link's other operations report what failed
        ack_recv_[static_cast<std::size_t>(op->peer)] = nullptr;
        ops_.remove_if([op](const Op& o) { return &o == op; });
        continue;
      }
      op->done = true;
      op->error = err.err != 0 ? err.err : FI_EIO;
      op->length = err.len;
      if (op->error != FI_ECANCELED && op->peer >= 0 && lost_[static_cast<std::size_t>(op->peer)].empty()) {
        char buf[256] = {};
        const char* detail = fi_cq_strerror(cq_, err.prov_errno, err.err_data, buf, sizeof buf);
        lost_[static_cast<std::size_t>(op->peer)] =
            std::string("link failed: ") + error_text(op->error) + (detail != nullptr ? std::string(" (") + detail + ")" : "");
      }
      if (op->is_send) {
        outstanding_[static_cast<std::size_t>(op->peer)] -= op->borrowed ? 0 : op->own.size();
        ops_.remove_if([op](const Op& o) { return &o == op; });
      }
      continue;
    }
    if (n < 0) return;
    for (ssize_t i = 0; i < n; ++i) {
      auto* op = static_cast<Op*>(e[i].op_context);
      if (op == nullptr) continue;
      if (op->is_ack) {  // the peer's report or request: post the next receive
        const int q = op->peer;
        if (e[i].len == 16) {
          const std::uint32_t kind = get32(op->own.data()), t = get32(op->own.data() + 4);
          const std::uint64_t value = get64(op->own.data() + 8);
          if (t < 2) {
            Credit& c = credit_[static_cast<std::size_t>(q)][t];
            if (kind == 0) {
              c.acked = std::max(c.acked, value);
              c.asked = false;
            } else {
              c.wanted = true;
              requests_.push_back({q, t});  // answered after this loop
            }
          }
        }
        ack_recv_[static_cast<std::size_t>(q)] = nullptr;
        ops_.remove_if([op](const Op& o) { return &o == op; });
        post_ack_recv(q);
        continue;
      }
      op->done = true;
      op->length = e[i].len;
      if (op->is_send) {
        outstanding_[static_cast<std::size_t>(op->peer)] -= op->borrowed ? 0 : op->own.size();
        ops_.remove_if([op](const Op& o) { return &o == op; });
      }
    }
  }
}

template <class Ready>
Status FabricTransport::wait_for(Ready ready, int peer, const Wait& w, const char* what) {
  Clock::time_point start, next_check;  // (from the first look that finds it not ready)
  for (bool first = true;; first = false) {
    if (closed_) return remote_error("group '" + group_ + "': " + w.op + ": the libfabric endpoint is closed (the group failed)");
    progress();
    if (ready()) return Status::ok();
    const auto now = Clock::now();
    if (first) {
      start = now;
      next_check = now + kPeerCheck;
    }
    if (now >= next_check) {
      next_check = now + kPeerCheck;
      if (peer >= 0) {
        if (peers_ != nullptr)
          if (auto f = peers_->failure(members_[static_cast<std::size_t>(peer)].job_rank)) {
            // What it sent before it went may already be here.
            for (int i = 0; i < 16 && !ready(); ++i) progress();
            if (ready()) return Status::ok();
            return remote_error("group '" + group_ + "': " + w.op + ": " + describe(peer) + " failed: " + *f);
          }
        if (!lost_[static_cast<std::size_t>(peer)].empty())
          return remote_error("group '" + group_ + "': " + w.op + ": " + describe(peer) + ": " +
                              lost_[static_cast<std::size_t>(peer)]);
      }
      if (w.watch_members && peers_ != nullptr) {
        for (std::size_t q = 0; q < members_.size(); ++q) {
          if (static_cast<int>(q) == peer || static_cast<int>(q) == rank_) continue;
          if (auto f = peers_->reported_failure(
                  members_[q].job_rank)) {  // (a member that exited normally: none)
            for (int i = 0; i < 16 && !ready(); ++i) progress();
            if (ready()) return Status::ok();
            return remote_error("group '" + group_ + "': " + w.op + ": " +
                                describe(static_cast<int>(q)) + " failed: " + *f);
          }
        }
      }
      if (w.also) {
        if (Status s = w.also(); !s) return ready() ? Status::ok() : s;
      }
      if (now >= w.deadline) {
        // What has come already is read before the wait is called out
        // (tcp_transport.cpp says why).
        for (int i = 0; i < 16 && !ready(); ++i) progress();
        if (ready()) return Status::ok();
        return timeout_error("group '" + group_ + "': " + w.op + ": waited " + std::to_string(w.timeout_ms) +
                             " ms for " + what + (peer >= 0 ? " from " + describe(peer) : std::string()));
      }
    }
    // Busy for 200 µs (an answer between hosts is often that close), then
    // give the core away between looks.  With more ranks than cores a rank
    // that only yields still takes the cores from the others (and from
    // accrun's agents): it sleeps instead.
    const auto waited = now - start;
    if (oversubscribed_ || waited > std::chrono::microseconds(200)) {
      if (lock_ != nullptr) lock_->unlock();
      if (oversubscribed_)
        std::this_thread::sleep_for(waited > std::chrono::milliseconds(1) ? std::chrono::microseconds(200)
                                                                          : std::chrono::microseconds(20));
      else if (waited > std::chrono::milliseconds(20))
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      else
        sched_yield();
      if (lock_ != nullptr) lock_->lock();
    }
  }
}

Status FabricTransport::address_of(int peer, const Wait& w, fi_addr_t* out) {
  fi_addr_t& a = addr_[static_cast<std::size_t>(peer)];
  if (a == FI_ADDR_UNSPEC) {
    const std::string key = "fi.addr." + std::to_string(peer);
    auto v = lookup_published(rendezvous_, key, peers_, members_, peer, w);
    if (!v.is_ok()) {
      // A member on the TCP transport published its address under "tcp.".
      if (rendezvous_->lookup("tcp.addr." + std::to_string(peer), 0).is_ok())
        return invalid_usage("group '" + group_ + "': " + describe(peer) +
                             " uses the tcp store transport and this member libfabric: set ACCRUN_STORE_TRANSPORT "
                             "the same on every rank (accrun -x ACCRUN_STORE_TRANSPORT)");
      return v.status().with_context("group '" + group_ + "': " + w.op + ": the libfabric address of " + describe(peer));
    }
    std::string raw;
    if (!from_hex(*v, &raw)) return Status(Code::kSystem, "group '" + group_ + "': malformed " + key);
    int n = fi_av_insert(av_, raw.data(), 1, &a, 0, nullptr);
    if (n != 1) {
      a = FI_ADDR_UNSPEC;
      return Status(Code::kSystem, "group '" + group_ + "': fi_av_insert for " + describe(peer) + " failed");
    }
  }
  *out = a;
  return Status::ok();
}

Status FabricTransport::post_send(int peer, std::uint64_t tag, const void* data, std::size_t len, std::string own,
                                  bool borrowed, const Wait& w, std::size_t charge) {
  auto& out = outstanding_[static_cast<std::size_t>(peer)];
  // A credit report never waits: the peer may be waiting for it.
  const bool report = kind_of(tag) == kAckTag;
  if (!borrowed && !report && out > 0 && out + own.size() > pair_buffer_max_)
    ACCRUN_RETURN_IF_ERROR(wait_for([&] { return out == 0 || out + own.size() <= pair_buffer_max_; }, peer, w,
                                    "room to buffer a send"));
  fi_addr_t dest;
  ACCRUN_RETURN_IF_ERROR(address_of(peer, w, &dest));
  Op& op = ops_.emplace_back();
  op.peer = peer;
  op.is_send = true;
  op.borrowed = borrowed;
  op.own = std::move(own);
  op.tag = tag;
  op.charge = charge;
  op.buf = borrowed ? data : op.own.data();
  op.len = borrowed ? len : op.own.size();
  if (!borrowed) out += op.own.size();
  // Posted now if the provider has room and nothing is waiting before it;
  // otherwise later, in order, by progress(): a send never waits for the
  // receiver to make room.
  unposted_.push_back(&op);
  if (op.charge > 0 && ack_recv_[static_cast<std::size_t>(peer)] == nullptr) post_ack_recv(peer);
  post_unposted();
  // A collective's broken link is reported by its next receive, which may
  // first find why the peer gave up (its last message before it left).
  const bool collective = kind_of(tag) == kCollective;
  if (!collective && !lost_[static_cast<std::size_t>(peer)].empty())
    return remote_error("group '" + group_ + "': " + w.op + ": " + describe(peer) + ": " +
                        lost_[static_cast<std::size_t>(peer)]);
  return Status::ok();
}

void FabricTransport::post_ack_recv(int peer) {
  const auto q = static_cast<std::size_t>(peer);
  if (closed_ || ack_recv_[q] != nullptr || !lost_[q].empty()) return;
  Op& op = ops_.emplace_back();
  op.peer = peer;
  op.is_ack = true;
  op.own.assign(16, '\0');
  const ssize_t rc = fi_trecv(ep_, op.own.data(), op.own.size(), nullptr, FI_ADDR_UNSPEC,
                              tag_of(peer, kAckTag, false), 0, &op.ctx);
  if (rc != 0) {  // no room now: the next send to the peer tries again
    ops_.pop_back();
    return;
  }
  op.posted_recv = true;
  ack_recv_[q] = &op;
}

void FabricTransport::post_credit(int peer, std::uint32_t kind, std::uint32_t tag, std::uint64_t value) {
  std::string m(16, '\0');
  put32(m.data(), kind);
  put32(m.data() + 4, tag);
  put64(m.data() + 8, value);
  Wait w;
  w.op = "credits";
  w.deadline = Clock::now() + std::chrono::seconds(5);
  (void)post_send(peer, tag_of(rank_, kAckTag, false), nullptr, 0, std::move(m), false, w);
}

void FabricTransport::maybe_report(int peer, std::uint32_t tag) {
  Credit& c = credit_[static_cast<std::size_t>(peer)][tag];
  if (c.taken == c.told || !(c.wanted || c.taken - c.told >= kCreditWindow / 4)) return;
  c.told = c.taken;
  c.wanted = false;
  post_credit(peer, 0, tag, c.taken);
}

bool FabricTransport::gone(int peer) const {
  const auto q = static_cast<std::size_t>(peer);
  return !lost_[q].empty() || (peers_ != nullptr && peers_->failure(members_[q].job_rank));
}

void FabricTransport::post_unposted() {
  // In order per peer; a peer the provider cannot take more for yet (its
  // connection is still being made, or gone) holds up only its own sends,
  // and a tag without credits only that peer's messages of the tag.
  std::vector<char> blocked;  // per peer: bit 0 the provider's; bits 1, 2: tag 0, 1 without credits
  std::vector<std::pair<int, std::uint32_t>> ask;
  for (auto it = unposted_.begin(); it != unposted_.end() && !closed_;) {
    Op* op = *it;
    const auto q = static_cast<std::size_t>(op->peer);
    const std::uint32_t t = kind_of(op->tag);
    const char tag_bit = t < 2 ? static_cast<char>(2 << t) : 0;
    if (q < blocked.size() && (blocked[q] & (1 | tag_bit)) != 0) {
      ++it;
      continue;
    }
    const bool alive = !gone(op->peer);
    if (alive && op->charge > 0 && t < 2) {
      Credit& c = credit_[q][t];
      if (c.charged > c.acked && c.charged - c.acked + op->charge > kCreditWindow) {
        if (ack_recv_[q] == nullptr) post_ack_recv(op->peer);
        if (!c.asked) {
          c.asked = true;
          ask.push_back({op->peer, t});  // after this loop (post_credit posts, in order)
        }
        if (blocked.size() <= q) blocked.resize(members_.size(), 0);
        blocked[q] = static_cast<char>(blocked[q] | tag_bit);
        ++it;
        continue;
      }
    }
    ssize_t rc = -FI_EAGAIN;
    if (alive) {
      rc = fi_tsend(ep_, op->buf, op->len, nullptr, addr_[q], op->tag, &op->ctx);
      if (rc == -FI_EAGAIN) {
        if (blocked.size() <= q) blocked.resize(members_.size(), 0);
        blocked[q] = static_cast<char>(blocked[q] | 1);
        ++it;
        continue;
      }
    } else {
      rc = -FI_ECONNABORTED;  // the peer failed: its sends are dropped
    }
    it = unposted_.erase(it);
    if (rc == 0) {
      op->posted = true;
      if (t < 2) credit_[q][t].charged += op->charge;
      continue;
    }
    if (lost_[q].empty() && rc != -FI_ECONNABORTED) lost_[q] = "fi_tsend: " + error_text(static_cast<int>(rc));
    outstanding_[q] -= op->borrowed ? 0 : op->own.size();
    ops_.remove_if([op](const Op& o) { return &o == op; });
  }
  for (auto [q, t] : ask) post_credit(q, 1, t, 0);
}

Status FabricTransport::send(int peer, Tag tag, const void* data, std::size_t len, const Wait& w) {
  return send2(peer, tag, nullptr, 0, data, len, w, false);
}

Status FabricTransport::send2(int peer, Tag tag, const void* head, std::size_t head_len, const void* data,
                              std::size_t len, const Wait& w, bool borrow) {
  auto lock = enter();
  lock_ = &lock;
  if (closed_) return remote_error("group '" + group_ + "': " + w.op + ": the libfabric endpoint is closed (the group failed)");
  const std::uint64_t total = head_len + len;
  // The header's post carries the message's charge (the body's none).
  const std::size_t charge = charge_of(total);
  std::string h(kHeaderFixed, '\0');
  put64(h.data(), total);
  if (total <= kInline) {
    put32(h.data() + 8, static_cast<std::uint32_t>(head_len));
    put32(h.data() + 12, 1);
    h.append(static_cast<const char*>(head), head_len);
    h.append(static_cast<const char*>(data), len);
    return post_send(peer, tag_of(rank_, tag, false), nullptr, 0, std::move(h), false, w, charge);
  }
  if (head_len <= kMaxHead) {
    put32(h.data() + 8, static_cast<std::uint32_t>(head_len));
    h.append(static_cast<const char*>(head), head_len);
    ACCRUN_RETURN_IF_ERROR(post_send(peer, tag_of(rank_, tag, false), nullptr, 0, std::move(h), false, w, charge));
    return borrow ? post_send(peer, tag_of(rank_, tag, true), data, len, std::string(), true, w)
                  : post_send(peer, tag_of(rank_, tag, true), nullptr, 0,
                              std::string(static_cast<const char*>(data), len), false, w);
  }
  // A long head travels with the data (head length 0: the receiver takes
  // the message whole).
  ACCRUN_RETURN_IF_ERROR(post_send(peer, tag_of(rank_, tag, false), nullptr, 0, std::move(h), false, w, charge));
  std::string body(static_cast<const char*>(head), head_len);
  body.append(static_cast<const char*>(data), len);
  return post_send(peer, tag_of(rank_, tag, true), nullptr, 0, std::move(body), false, w);
}

Status FabricTransport::flush_link(int peer, const Wait& w) {
  auto lock = enter();
  lock_ = &lock;
  auto borrowed_left = [&] {
    for (const Op& o : ops_)
      if (o.is_send && o.borrowed && o.peer == peer && !o.done) return true;
    return false;
  };
  return wait_for([&] { return !borrowed_left(); }, peer, w, "its receipt of a send");
}

void FabricTransport::unborrow() {
  auto lock = enter();
  lock_ = &lock;
  failed_ = true;
  // Not handed to the provider yet: copied, and the caller's memory is free.
  for (Op* op : unposted_)
    if (op->borrowed) {
      op->own.assign(static_cast<const char*>(op->buf), op->len);
      op->buf = op->own.data();
      op->borrowed = false;
      outstanding_[static_cast<std::size_t>(op->peer)] += op->len;
    }
  auto borrowed_left = [&] {
    for (const Op& o : ops_)
      if (o.is_send && o.borrowed && o.posted && !o.done && !gone(o.peer)) return true;
    return false;
  };
  // Handed over: they may still finish; a receiver that is failing too
  // never takes them, and then only closing the endpoint stops the
  // provider reading the caller's memory.  With manual progress nothing
  // leaves unless this member calls the provider, and its program may
  // return from the failed call and never call again: a live peer's
  // transfers are driven to their end here, then what else is queued (the
  // word that this member gave up), or a leader on another host that
  // waits for a chunk's data, or for the word, waits out its group's
  // timeout.  A second for the transfers: with three CPU hogs beside a
  // 4-rank test group on this machine's two CPUs three 512 KiB chunks took
  // 110-320 ms to finish; at a 200 ms bound 7 runs of 15 left the other host
  // waiting out the timeout.
  Wait w;
  w.op = "unborrow";
  w.deadline = Clock::now() + std::chrono::seconds(1);
  (void)wait_for([&] { return !borrowed_left(); }, -1, w, "borrowed sends");
  w.deadline = Clock::now() + std::chrono::milliseconds(500);
  (void)wait_for(
      [&] {
        for (const Op* o : unposted_)
          if (!gone(o->peer)) return false;
        for (const Op& o : ops_)
          if (o.is_send && !o.borrowed && !o.done && !gone(o.peer)) return false;
        return true;
      },
      -1, w, "queued sends");
  // A dead peer's transfers never finish, nor a live one's that outlasted
  // the second: only closing takes them back.
  bool stuck = close_pending_;
  for (const Op& o : ops_) stuck = stuck || (o.is_send && o.borrowed && o.posted && !o.done);
  if (stuck) close_all();
}

Status FabricTransport::flush(const Wait& w) {
  auto lock = enter();
  lock_ = &lock;
  return wait_for(
      [&] {
        for (const Op& o : ops_)
          if (o.is_send && !o.done && lost_[static_cast<std::size_t>(o.peer)].empty()) return false;
        return true;
      },
      -1, w, "its sends to leave");
}

Status FabricTransport::post_recv(int peer, std::uint64_t tag, void* data, std::size_t len, Op* op, const Wait& w) {
  return wait_for(
      [&] {
        ssize_t rc = fi_trecv(ep_, data, len, nullptr, FI_ADDR_UNSPEC, tag, 0, &op->ctx);
        if (rc == -FI_EAGAIN) return false;
        op->posted_recv = rc == 0;
        if (rc != 0) {
          op->done = true;
          op->error = static_cast<int>(-rc);
        }
        return true;
      },
      peer, w, "room to post a receive");
}

Status FabricTransport::next_header(int peer, Tag tag, Header* out, const Wait& w) {
  const std::pair<int, int> key{peer, static_cast<int>(tag)};
  if (auto it = held_.find(key); it != held_.end()) {
    *out = std::move(it->second);
    held_.erase(it);
    return Status::ok();
  }
  if (closed_) return remote_error("group '" + group_ + "': " + w.op + ": the libfabric endpoint is closed (the group failed)");
  // A receive an earlier call gave up on stays posted (its buffer is ours),
  // and takes the next header: nothing is lost, nothing is cancelled.
  Op* p = nullptr;
  auto& waiting = orphans_[key];
  if (!waiting.empty()) {
    p = waiting.front();
    waiting.pop_front();
  } else {
    Op& op = ops_.emplace_back();
    op.peer = peer;
    op.own.resize(kHeaderMax);
    p = &op;
    Status st = post_recv(peer, tag_of(peer, tag, false), op.own.data(), op.own.size(), p, w);
    if (!st.is_ok()) {
      ops_.remove_if([p](const Op& o) { return &o == p; });
      return st;
    }
  }
  Status st = wait_for([&] { return p->done; }, peer, w, "a message");
  if (!st.is_ok()) {
    if (!closed_) orphans_[key].push_front(p);
    return st;
  }
  auto drop = [&] { ops_.remove_if([p](const Op& o) { return &o == p; }); };
  if (p->error != 0 || p->length < kHeaderFixed) {
    std::string why = p->error != 0 ? error_text(p->error) : "a short header";
    drop();
    return remote_error("group '" + group_ + "': " + w.op + ": " + describe(peer) + ": link failed: " + why);
  }
  out->total = get64(p->own.data());
  out->head_len = get32(p->own.data() + 8);
  bool inl = get32(p->own.data() + 12) != 0;
  out->bytes.assign(p->own.data() + kHeaderFixed, p->length - kHeaderFixed);
  drop();
  // Taken: reported to the sender every quarter window, or now if it asked
  // (its requests come on the ack tag, whose receive is posted from here on).
  if (ack_recv_[static_cast<std::size_t>(peer)] == nullptr) post_ack_recv(peer);
  credit_[static_cast<std::size_t>(peer)][tag].taken += charge_of(out->total);
  maybe_report(peer, tag);
  // The sizes are the peer's words: every receive below relies on them.
  if ((inl && out->bytes.size() != out->total) || out->bytes.size() > out->total ||
      out->head_len > out->total || out->total > memory_bytes_)
    return Status(Code::kSystem, "group '" + group_ + "': " + describe(peer) +
                                     " sent a malformed header (a message of " +
                                     std::to_string(out->total) + " bytes with " +
                                     std::to_string(out->bytes.size()) + " in its header)");
  return Status::ok();
}

Status FabricTransport::receive_body(int peer, Tag tag, char* dest, std::size_t len, const Wait& w) {
  Op& op = ops_.emplace_back();
  op.peer = peer;
  Op* p = &op;
  auto drop = [&] { ops_.remove_if([p](const Op& o) { return &o == p; }); };
  Status st = post_recv(peer, tag_of(peer, tag, true), dest, len, p, w);
  if (st.is_ok()) st = wait_for([&] { return p->done; }, peer, w, "a message's data");
  if (!st.is_ok()) {
    // The caller's buffer must not be written after it has the error.
    if (!closed_ && p->posted_recv) {
      fi_cancel(&ep_->fid, &p->ctx);
      auto until = Clock::now() + std::chrono::milliseconds(100);
      while (!p->done && Clock::now() < until) progress();
      if (!p->done) {
        // Only closing the endpoint takes it back.  In a collective, after
        // the group has told the other hosts (unborrow()); now otherwise.
        if (tag == kCollective)
          close_pending_ = true;
        else
          close_all();
      }
    }
    if (!closed_ && p->done) drop();
    return st;
  }
  int err = p->error;
  std::size_t got = p->length;
  drop();
  if (err != 0)
    return remote_error("group '" + group_ + "': " + w.op + ": " + describe(peer) + ": link failed: " + error_text(err));
  if (got != len) return Status(Code::kSystem, "group '" + group_ + "': " + describe(peer) + " sent a body of the wrong size");
  return Status::ok();
}

Status FabricTransport::recv(int peer, Tag tag, void* data, std::size_t max_len, std::size_t* got, const Wait& w) {
  auto lock = enter();
  lock_ = &lock;
  Header h;
  ACCRUN_RETURN_IF_ERROR(next_header(peer, tag, &h, w));
  if (h.total > max_len) {
    std::size_t total = h.total;
    held_[{peer, static_cast<int>(tag)}] = std::move(h);
    return invalid_argument("group '" + group_ + "': " + w.op + ": a message of " + std::to_string(total) +
                            " bytes from " + describe(peer) + " is larger than the buffer's " + std::to_string(max_len) +
                            " (it stays queued)");
  }
  char* out = static_cast<char*>(data);
  std::memcpy(out, h.bytes.data(), h.bytes.size());
  if (h.bytes.size() < h.total)
    ACCRUN_RETURN_IF_ERROR(receive_body(peer, tag, out + h.bytes.size(), h.total - h.bytes.size(), w));
  *got = h.total;
  return Status::ok();
}

Status FabricTransport::recv_message(int peer, Tag tag, std::string* out, const Wait& w) {
  auto lock = enter();
  lock_ = &lock;
  Header h;
  ACCRUN_RETURN_IF_ERROR(next_header(peer, tag, &h, w));
  std::size_t have = h.bytes.size();
  *out = std::move(h.bytes);
  out->resize(h.total);
  if (have < h.total) ACCRUN_RETURN_IF_ERROR(receive_body(peer, tag, out->data() + have, h.total - have, w));
  return Status::ok();
}

Status FabricTransport::recv_split(int peer, Tag tag, std::size_t keep, char* dest, std::size_t len, std::string* head,
                                   bool* placed, const Wait& w) {
  auto lock = enter();
  lock_ = &lock;
  Header h;
  ACCRUN_RETURN_IF_ERROR(next_header(peer, tag, &h, w));
  if (h.head_len == keep && h.total == keep + len && h.bytes.size() >= keep) {
    head->assign(h.bytes.data(), keep);
    std::memcpy(dest, h.bytes.data() + keep, h.bytes.size() - keep);
    if (h.bytes.size() < h.total)
      ACCRUN_RETURN_IF_ERROR(receive_body(peer, tag, dest + (h.bytes.size() - keep), h.total - h.bytes.size(), w));
    *placed = true;
    return Status::ok();
  }
  std::size_t have = h.bytes.size();
  *head = std::move(h.bytes);
  head->resize(h.total);
  if (have < h.total) ACCRUN_RETURN_IF_ERROR(receive_body(peer, tag, head->data() + have, h.total - have, w));
  *placed = false;
  return Status::ok();
}

}  // namespace accrun::collectives::store
