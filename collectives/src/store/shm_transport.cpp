// The shared-memory transport (layout and protocol: shm_transport.hpp).
#include "store/shm_transport.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "store/copy.hpp"

namespace accrun::collectives::store {
namespace {

constexpr std::uint64_t kMagic = 0x6163637275'6e5354ULL;  // "accrunST"
constexpr std::size_t kPage = 4096;
constexpr std::uint64_t kFrameInline = 0;
constexpr std::uint64_t kFrameSpill = 1;
constexpr int kPretouchMaxRanks = 16;

std::size_t round_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) { h ^= c; h *= 1099511628211ULL; }
  return h;
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { if (fd_ >= 0) close(fd_); }
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string mib(unsigned long long b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1 << 20));
  return buf;
}

}  // namespace

struct ShmTransport::Header {
  alignas(128) std::uint64_t magic;
  std::uint64_t size;
  std::uint64_t half_bytes;
  std::uint64_t ring_bytes;
  std::uint64_t total_bytes;
  std::atomic<std::uint32_t> ready;   // 1: every member attached; 2: setup failed
  Doorbell bell;
};

struct alignas(128) ShmTransport::RingCtrl {
  std::atomic<std::uint64_t> tail;     // bytes written by the sender
  std::atomic<std::uint64_t> spilled;  // bytes the sender put in side files
  char pad[112];
  std::atomic<std::uint64_t> head;     // bytes consumed by the receiver
  std::atomic<std::uint64_t> unspilled;  // side-file bytes the receiver took
};

struct ShmTransport::Frame {
  std::uint64_t len;
  std::uint64_t kind;
  std::uint64_t id;
  std::uint64_t reserved;
};

ShmTransport::ShmTransport(const GroupContext& ctx, const Tuning& t, const Waiter& waiter)
    : name_(ctx.name), epoch_(ctx.epoch), rank_(ctx.rank), size_(ctx.size), members_(ctx.members),
      peers_(ctx.peers), tun_(t), waiter_(waiter), self_pid_(getpid()) {
  channels_.reserve(static_cast<std::size_t>(size_));
  for (int q = 0; q < size_; ++q) channels_.emplace_back(*this, q);
}

ShmTransport::~ShmTransport() {
  if (seg_ == nullptr) {
    if (fd_ >= 0) close(fd_);
    return;
  }
  // Side files of messages from src to dst that dst never received.
  auto sweep = [this](int src, int dst) {
    RingCtrl& rc = ring_ctrl(src, dst);
    std::uint64_t head = rc.head.load(std::memory_order_acquire);
    const std::uint64_t tail = rc.tail.load(std::memory_order_acquire);
    while (head < tail) {
      Frame f;
      ring_read(src, dst, head, &f, sizeof f);
      if (f.kind == kFrameSpill) unlink(spill_path(src, f.id).c_str());
      head += sizeof(Frame) + (f.kind == kFrameInline ? round_up(f.len, 8) : 0);
    }
  };
  for (int src = 0; src < size_; ++src) sweep(src, rank_);
  // This rank has left (2): what is sent to it from now on is never read,
  // and its senders remove those files as they leave in turn.
  ctrl(rank_).attached.store(2, std::memory_order_release);
  for (int dst = 0; dst < size_; ++dst)
    if (dst != rank_ && ctrl(dst).attached.load(std::memory_order_acquire) == 2) sweep(rank_, dst);
  munmap(seg_, seg_bytes_);
  if (fd_ >= 0) close(fd_);
}

ShmTransport::RingCtrl& ShmTransport::ring_ctrl(int src, int dst) const {
  return reinterpret_cast<RingCtrl*>(base() + rctrl_off_)[src * size_ + dst];
}

void ShmTransport::ring_write(int src, int dst, std::uint64_t pos, const void* data, std::size_t len) {
  const std::size_t at = pos % ring_bytes_;
  const std::size_t first = std::min(len, ring_bytes_ - at);
  char* r = ring(src, dst);
  if (first > 0) copy_block(r + at, data, first);
  if (len > first) copy_block(r, static_cast<const char*>(data) + first, len - first);
}

void ShmTransport::ring_read(int src, int dst, std::uint64_t pos, void* data, std::size_t len) const {
  const std::size_t at = pos % ring_bytes_;
  const std::size_t first = std::min(len, ring_bytes_ - at);
  const char* r = ring(src, dst);
  if (first > 0) copy_block(data, r + at, first);
  if (len > first) copy_block(static_cast<char*>(data) + first, r, len - first);
}

std::string ShmTransport::where() const {
  return "group '" + name_ + "' (epoch " + std::to_string(epoch_) + ", rank " + std::to_string(rank_) + ")";
}

std::string ShmTransport::describe(int q) const {
  return "group rank " + std::to_string(q) + " (job rank " +
         std::to_string(members_[static_cast<std::size_t>(q)].job_rank) + ")";
}

// Reserves the file's blocks now, so that a full file system is an error
// here rather than SIGBUS at the first store into the mapping.
Status ShmTransport::reserve(int fd, std::size_t off, std::size_t bytes, const std::string& path,
                             const std::string& what) const {
  const int err = posix_fallocate(fd, static_cast<off_t>(off), static_cast<off_t>(bytes));
  if (err == 0) return Status::ok();
  if (err != ENOSPC && err != EFBIG) return system_error(where() + ": " + what + ": reserve " + path, err);
  std::string fs = dir_;
  struct statvfs sv;
  std::string room;
  if (statvfs(dir_.c_str(), &sv) == 0) {
    room = " (" + mib(static_cast<unsigned long long>(sv.f_blocks) * sv.f_frsize) + ", " +
           mib(static_cast<unsigned long long>(sv.f_bavail) * sv.f_frsize) + " free)";
  }
  const bool dev_shm = dir_.rfind("/dev/shm", 0) == 0;
  return no_memory(where() + ": " + what + ": no room for " + std::to_string(bytes) + " bytes in " +
                   (dev_shm ? "/dev/shm" : dir_) + room + ": " + std::strerror(err) + "; enlarge " +
                   (dev_shm ? "/dev/shm" : "it") +
                   " (containers: --shm-size) or move less data at a time");
}

Status ShmTransport::setup(Rendezvous* rv, int setup_timeout_ms, const std::string& shm_dir) {
  dir_ = shm_dir.empty() ? "/dev/shm" : shm_dir;
  char buf[64];
  std::snprintf(buf, sizeof buf, "accrun-store-%016llx-%llu", static_cast<unsigned long long>(fnv1a(name_)),
                static_cast<unsigned long long>(epoch_));
  std::string path = dir_ + "/" + buf;
  if (rank_ == 0 && shm_dir.empty()) path.append(1, '-').append(std::to_string(self_pid_));
  spill_prefix_ = path;

  const std::size_t p = static_cast<std::size_t>(size_);
  half_ = round_up(std::max<std::size_t>(tun_.half_bytes, kPage), kPage);
  slot_stride_ = half_ + kPage;
  ring_bytes_ = tun_.ring_bytes;
  if (ring_bytes_ == 0) {
    ring_bytes_ = 1u << 20;
    while (ring_bytes_ > (64u << 10) && ring_bytes_ * p * p > (32u << 20)) ring_bytes_ /= 2;
  }
  ring_bytes_ = round_up(ring_bytes_, kPage);
  ring_reserved_.assign(p, false);
  ctrl_off_ = round_up(sizeof(Header), 128);
  slots_off_ = round_up(ctrl_off_ + p * sizeof(Ctrl), kPage);
  rctrl_off_ = slots_off_ + p * 2 * slot_stride_;
  rings_off_ = round_up(rctrl_off_ + p * p * sizeof(RingCtrl), kPage);
  std::size_t end = rings_off_ + p * p * ring_bytes_;
  const std::size_t ring_data[kBRings] = {tun_.bcast_small_max, tun_.bcast_chunk, kTinyBytes};
  const std::size_t ring_slots[kBRings] = {tun_.bcast_small_slots, tun_.bcast_slots, tun_.bcast_tiny_slots};
  for (int i = 0; i < kBRings; ++i) {
    BRingGeom& r = bring_[i];
    if (i == kTinyRing) {  // inline only, two slots to a line
      r.data = ring_data[i];
      r.stride = sizeof(TSlot);
    } else {
      r.data = round_up(std::max<std::size_t>(ring_data[i], 64), 64);
      r.stride = sizeof(BSlot) + r.data;
    }
    r.slots = std::max<std::size_t>(ring_slots[i], 2);
    r.off = round_up(end, kPage);
    end = r.off + r.slots * r.stride;
  }
  const std::size_t total = round_up(end, kPage);
  const auto deadline = Clock::now() + std::chrono::milliseconds(setup_timeout_ms);
  auto map = [&](int fd, const std::string& at) -> Status {
    void* m = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return system_error(where() + ": mmap " + at);
    seg_ = m;
    seg_bytes_ = total;
    return Status::ok();
  };

  if (rank_ == 0) {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
      // A leftover of a crashed incarnation with the same name and epoch.
      unlink(path.c_str());
      fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    }
    if (fd < 0) return system_error(where() + ": create shared segment " + path);
    fd_ = fd;
    // The pair rings stay sparse until their sender first uses them
    // (ShmChannel::send reserves them then); everything else now.
    const std::string what = "shared segment of " + std::to_string(size_) + " ranks";
    Status s = ftruncate(fd, static_cast<off_t>(total)) == 0 ? Status::ok()
                                                             : system_error(where() + ": size " + path);
    if (s) s = reserve(fd, 0, rings_off_, path, what);
    if (s) s = reserve(fd, bring_[0].off, total - bring_[0].off, path, what);
    if (s) s = map(fd, path);
    if (!s) { unlink(path.c_str()); return s; }
    Header* h = header();
    h->size = p;
    h->half_bytes = half_;
    h->ring_bytes = ring_bytes_;
    h->total_bytes = total;
    std::atomic_thread_fence(std::memory_order_release);
    h->magic = kMagic;
    Status pub = rv->publish("store.segment", path);
    if (!pub) { unlink(path.c_str()); return pub.with_context(where() + ": publish segment"); }
  } else {
    auto v = rv->lookup("store.segment", setup_timeout_ms);
    if (!v) {
      return Status(v.status().code(), where() + ": group rank 0 (job rank " +
                                           std::to_string(members_[0].job_rank) +
                                           ") did not create the shared segment: " + v.status().message());
    }
    const std::string& peer_path = v.value();
    fd_ = open(peer_path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd_ < 0) return system_error(where() + ": open shared segment " + peer_path);
    struct stat st;
    if (fstat(fd_, &st) != 0) return system_error(where() + ": stat " + peer_path);
    if (static_cast<std::size_t>(st.st_size) != total) {
      return invalid_usage(where() + ": shared segment " + peer_path + " has " + std::to_string(st.st_size) +
                           " bytes, expected " + std::to_string(total) +
                           " (members disagree on the group size or accrun version)");
    }
    ACCRUN_RETURN_IF_ERROR(map(fd_, peer_path));
    if (header()->magic != kMagic || header()->size != p) {
      return invalid_usage(where() + ": shared segment " + peer_path + " does not belong to this group");
    }
    spill_prefix_ = peer_path;
  }
  // Fault in this rank's slot now rather than in the first timed call
  // (not in large groups: there every member's 128 page faults at once
  // delay the set-up more than a first call that touches a few pages).
  if (size_ <= kPretouchMaxRanks)
    for (int h = 0; h < 2; ++h) std::memset(slot(rank_, h), 0, half_);
  ctrl(rank_).pid = self_pid_;
  ctrl(rank_).probe_addr = reinterpret_cast<std::uint64_t>(&self_pid_);
  ctrl(rank_).attached.store(1, std::memory_order_release);

  Header* h = header();
  if (waiter_.doorbell) waiter_.bell = &h->bell;
  const Wait setup_wait{deadline, setup_timeout_ms, "setup", {}};
  const Waiter waiter = waiter_.patient_one();
  if (rank_ == 0) {
    std::vector<int> missing;
    auto unattached = [&] {
      missing.clear();
      for (int q = 0; q < size_; ++q)
        if (ctrl(q).attached.load(std::memory_order_acquire) == 0) missing.push_back(q);
      return missing;
    };
    Status s = waiter.until([&] { return unattached().empty(); },
                            [&]() -> Status {
                              for (int q : missing) ACCRUN_RETURN_IF_ERROR(check_peer(q, "setup"));
                              return Status::ok();
                            },
                            deadline, [&] {
                              std::string list;
                              for (int q : unattached())
                                list += (list.empty() ? "" : ", ") + std::to_string(q) + " (job rank " +
                                        std::to_string(members_[static_cast<std::size_t>(q)].job_rank) + ")";
                              return timeout_error(where() + ": group ranks never attached to the shared segment within " +
                                                   std::to_string(setup_timeout_ms) + " ms (the last of ACCRUN_GROUP_INIT_TIMEOUT): " + list);
                            });
    unlink(path.c_str());
    if (s) s = probe_cma(deadline, setup_timeout_ms);
    if (!s) {
      h->ready.store(2, std::memory_order_release);
      return s;
    }
    h->ready.store(1, std::memory_order_release);
  } else {
    ACCRUN_RETURN_IF_ERROR(probe_cma(deadline, setup_timeout_ms));
    Status s = waiter.until([&] { return h->ready.load(std::memory_order_acquire) != 0; },
                            [&] { return check_peer(0, "setup"); }, deadline,
                            [&] { return timed_out(setup_wait, {0}); });
    if (!s) return s;
    if (h->ready.load(std::memory_order_acquire) != 1)
      return remote_error(where() + ": group rank 0 reported that some members never arrived");
  }
  // Touch every slot so later reads take no page fault (not in large
  // groups, where that costs more at set-up, for every rank, than it saves).
  volatile char sink = 0;
  for (int q = 0; q < size_ && size_ <= kPretouchMaxRanks; ++q)
    for (int h = 0; h < 2; ++h)
      for (std::size_t off = 0; off <= half_; off += kPage)
        sink = sink + slot(q, h)[std::min(off, half_ - 1)];
  for (const BRingGeom& r : bring_)
    for (std::size_t off = 0; size_ <= kPretouchMaxRanks && off < r.slots * r.stride; off += kPage) sink = sink + base()[r.off + off];
  (void)sink;
  use_cma_ = tun_.cma && size_ > 1;
  for (int q = 0; q < size_; ++q)
    if (ctrl(q).cma.load(std::memory_order_acquire) != 1) use_cma_ = false;
  return Status::ok();
}

// Every rank tries to read its successor's pid out of that process's memory
// (cross-memory attach), records the outcome, and waits for every other
// rank's outcome, so all members agree whether CMA is usable.  Rank 0 runs
// it before declaring the segment ready, the others after.
Status ShmTransport::probe_cma(Clock::time_point deadline, int setup_timeout_ms) {
  const int q = (rank_ + 1) % size_;
  const Wait w{deadline, setup_timeout_ms, "setup", {}};
  const Waiter waiter = waiter_.patient_one();
  ACCRUN_RETURN_IF_ERROR(waiter.until([&] { return ctrl(q).attached.load(std::memory_order_acquire) != 0; },
                                      [&] { return check_peer(q, "setup"); }, deadline,
                                      [&] { return timed_out(w, {q}); }));
  long got = 0;
  iovec local{&got, sizeof got};
  iovec remote{reinterpret_cast<void*>(ctrl(q).probe_addr), sizeof got};
  const bool ok = tun_.cma && process_vm_readv(static_cast<pid_t>(ctrl(q).pid), &local, 1, &remote, 1, 0) ==
                                  static_cast<ssize_t>(sizeof got) && got == ctrl(q).pid;
  ctrl(rank_).cma.store(ok ? 1 : 2, std::memory_order_release);
  if (rank_ != 0) return Status::ok();
  return waiter.until([&] {
    for (int o = 0; o < size_; ++o)
      if (ctrl(o).cma.load(std::memory_order_acquire) == 0) return false;
    return true;
  }, [] { return Status::ok(); }, deadline, [&] { return timed_out(w, {}); });
}

Status ShmTransport::cma_read(int q, char* dst, std::uint64_t addr, std::size_t len, const char* op) const {
  const pid_t pid = static_cast<pid_t>(ctrl(q).pid);
  while (len > 0) {
    iovec l{dst, len};
    iovec r{reinterpret_cast<void*>(addr), len};
    const ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ESRCH) {
      ACCRUN_RETURN_IF_ERROR(check_peer(q, op));
      return remote_error(where() + ": " + op + ": peer group rank " + std::to_string(q) + " (pid " +
                          std::to_string(pid) + ") is gone");
    }
    if (n <= 0) {
      // A member that gave up on the call (a peer elsewhere failed) may have
      // freed the buffer being read (EFAULT): its reason is the error.
      ACCRUN_RETURN_IF_ERROR(check_peer(q, op));
      return system_error(where() + ": " + op + ": process_vm_readv from group rank " + std::to_string(q));
    }
    dst += n;
    addr += static_cast<std::uint64_t>(n);
    len -= static_cast<std::size_t>(n);
  }
  return Status::ok();
}

Status ShmTransport::check_peer(int q, const char* op) const {
  ACCRUN_RETURN_IF_ERROR(check_flags(op));
  return check_one(q, op);
}

Status ShmTransport::check_flags(const char* op) const {
  // Flags in the segment: reading them costs no system call.
  for (int o = 0; o < size_; ++o) {
    if (const std::uint32_t code = ctrl(o).broken.load(std::memory_order_acquire); code != 0) {
      // A timeout stays one, and so does a wrong call (members that
      // disagree: every member's error is the same misuse); the rest is a
      // peer's failure.
      const Code theirs = static_cast<Code>(code);
      const Code c = theirs == Code::kTimeout || theirs == Code::kInvalidUsage ? theirs : Code::kRemote;
      return Status(c, where() + ": " + op + ": group rank " + std::to_string(o) + " gave up: " +
                           std::string(ctrl(o).reason, strnlen(ctrl(o).reason, sizeof ctrl(o).reason)));
    }
  }
  return Status::ok();
}

Status ShmTransport::check_one(int q, const char* op) const {
  if (q == rank_) return Status::ok();
  const Member& m = members_[static_cast<std::size_t>(q)];
  if (peers_ != nullptr) {
    if (auto why = peers_->failure(m.job_rank)) {
      return remote_error(where() + ": " + op + ": peer group rank " + std::to_string(q) + " (job rank " +
                          std::to_string(m.job_rank) + (m.host.empty() ? "" : " on " + m.host) + ") failed: " + *why);
    }
  }
  if (m.pid > 0 && m.pid != self_pid_ && kill(static_cast<pid_t>(m.pid), 0) != 0 && errno == ESRCH) {
    return remote_error(where() + ": " + op + ": peer group rank " + std::to_string(q) + " (job rank " +
                        std::to_string(m.job_rank) + ", pid " + std::to_string(m.pid) + ") is gone");
  }
  return Status::ok();
}

void ShmTransport::mark_broken(const Status& s) {
  Ctrl& me = ctrl(rank_);
  std::snprintf(me.reason, sizeof me.reason, "%s", s.message().c_str());
  me.broken.store(static_cast<std::uint32_t>(s.code()), std::memory_order_release);
  ring();
}

Status ShmTransport::timed_out(const Wait& w, const std::vector<int>& missing) const {
  std::string who;
  for (int q : missing) who += (who.empty() ? "" : ", ") + describe(q);
  // How far each of them got, against this member: a counter every call
  // moves on alike (behind: it is in an earlier call; level: it is in this
  // one and stopped inside it), and the broadcasts each entered.
  std::string where_they_are;
  const Ctrl& me = ctrl(rank_);
  for (int q : missing) {
    const Ctrl& c = ctrl(q);
    where_they_are += std::string(where_they_are.empty() ? "" : "; ") + "group rank " + std::to_string(q) +
                      "'s progress counter " + std::to_string(c.seq.load(std::memory_order_acquire)) +
                      " against this member's " + std::to_string(me.seq.load(std::memory_order_relaxed)) +
                      ", broadcasts entered " + std::to_string(c.bcast_entered.load(std::memory_order_acquire)) +
                      " against " + std::to_string(me.bcast_entered.load(std::memory_order_relaxed));
    // In a group across hosts: which call it is in, and whether it waits
    // for another host (the hold-up is there) or not (it is busy, or not
    // given a CPU, here).
    // Or that it returned from its last call and has made none since: the
    // hold-up is outside accrun, in the program or another library.
    if (const std::uint64_t call = c.outer_call.load(std::memory_order_relaxed); call > 0) {
      const std::int64_t now = coarse_now_ns();  // (the marks' clock)
      const std::int64_t left = c.outer_left_ns.load(std::memory_order_relaxed);
      const std::int64_t since = c.across_since_ns.load(std::memory_order_relaxed);
      if (left > 0) {
        where_they_are += "; it returned from its collective call " + std::to_string(call) +
                          " on the whole group " + std::to_string((now - left) / 1'000'000) +
                          " ms ago and has not called the group since (it is in the program's own code or "
                          "another library, not in accrun)";
      } else {
        where_they_are += "; it is in its collective call " + std::to_string(call) + " on the whole group";
        where_they_are += since > 0 ? ", waiting for another host for " + std::to_string((now - since) / 1'000'000) + " ms"
                                    : ", not waiting for another host";
      }
    }
  }
  const std::string waited =
      who.empty() ? "the group's members" : who + ", which had not arrived (" + where_they_are + ")";
  // The set-up gets what is left of the group's creation time, which may
  // be far less than the whole.
  if (w.op == std::string("setup"))
    return timeout_error(where() + ": setup timed out waiting for " + waited + " (the set-up had the last " +
                         std::to_string(w.timeout_ms) + " ms of ACCRUN_GROUP_INIT_TIMEOUT)");
  return timeout_error(where() + ": " + w.op + " timed out after " + std::to_string(w.timeout_ms < 0 ? 0 : w.timeout_ms) +
                       " ms waiting for " + waited + " (accrun_group_set_timeout(3))");
}

// ------------------------------------------------------------------ channels

Status ShmChannel::send(const void* buf, std::size_t len, const Wait& w) {
  using Frame = ShmTransport::Frame;
  const int me = t_.rank_;
  ShmTransport::RingCtrl& rc = t_.ring_ctrl(me, peer_);
  const std::uint64_t tail = rc.tail.load(std::memory_order_relaxed);
  const std::size_t inline_need = sizeof(Frame) + round_up(len, 8);
  auto used = [&] { return tail - rc.head.load(std::memory_order_acquire); };
  Frame f{len, kFrameInline, 0, 0};
  if (!t_.ring_reserved_[static_cast<std::size_t>(peer_)]) {
    // The pair's ring is written for the first time: its blocks now.
    ACCRUN_RETURN_IF_ERROR(t_.reserve(t_.fd_, static_cast<std::size_t>(t_.ring(me, peer_) - t_.base()), t_.ring_bytes_,
                                      "shared segment", std::string(w.op) + " to group rank " + std::to_string(peer_)));
    t_.ring_reserved_[static_cast<std::size_t>(peer_)] = true;
  }
  // Messages copied into the ring leave an eighth of it free, for the
  // descriptors of messages that go to side files: a full ring of data must
  // not make a later send wait for its receive.
  const std::size_t descriptor_room = t_.ring_bytes_ / 8;
  if (inline_need + descriptor_room <= t_.ring_bytes_ - used()) {
    t_.ring_write(me, peer_, tail, &f, sizeof f);
    t_.ring_write(me, peer_, tail + sizeof f, buf, len);
    rc.tail.store(tail + inline_need, std::memory_order_release);
    t_.ring();
    return Status::ok();
  }
  auto check = [&] { return t_.check_peer(peer_, w.op); };
  auto late = [&] { return t_.timed_out(w, {peer_}); };
  // Too large for the free space: the payload goes to a side file, the ring
  // carries its descriptor, and the receiver unlinks the file.  Past the
  // bound on side-file bytes towards this peer, wait for the receiver to
  // take some (a message larger than the bound goes alone).
  const std::uint64_t spilled = rc.spilled.load(std::memory_order_relaxed);
  auto held = [&] { return spilled - rc.unspilled.load(std::memory_order_acquire); };
  if (held() > 0 && held() + len > t_.tun_.pair_buffer_max) {
    // Only this member can take what it sent itself, and not while its
    // send waits (a group's calls run one at a time): it would wait out
    // the timeout and then name itself.
    if (peer_ == me)
      return invalid_usage(t_.where() + ": " + w.op + " to itself of " + std::to_string(len) + " bytes: with " +
                           std::to_string(held()) + " bytes it sent itself not yet received, that passes the " +
                           std::to_string(t_.tun_.pair_buffer_max >> 20) +
                           " MiB a pair of members may hold buffered, and only its own receive could make room; "
                           "receive what it sent before sending more");
    ACCRUN_RETURN_IF_ERROR(t_.waiter_.until(
        [&] { return held() == 0 || held() + len <= t_.tun_.pair_buffer_max; }, check, w.deadline, late));
  }
  f.kind = kFrameSpill;
  f.id = t_.next_spill_id_++;
  const std::string path = t_.spill_path(me, f.id);
  {
    Fd fd(open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (fd.get() < 0) return system_error(t_.where() + ": send to " + std::to_string(peer_) + ": create " + path);
    if (len > 0) {
      Status s = t_.reserve(fd.get(), 0, len, path, std::string(w.op) + " to group rank " + std::to_string(peer_));
      void* m = MAP_FAILED;
      if (s) {
        m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
        if (m == MAP_FAILED) s = system_error(t_.where() + ": send: mmap " + path);
      }
      if (!s) { unlink(path.c_str()); return s; }
      copy_block(m, buf, len);
      munmap(m, len);
    }
  }
  // Only the descriptor has to fit: block on ring capacity alone (only the
  // receiver makes room, so a member sending to itself fails at once).
  Status s;
  if (peer_ == me && sizeof(Frame) > t_.ring_bytes_ - used())
    s = invalid_usage(t_.where() + ": " + w.op + " to itself: its ring is full of messages it sent itself "
                      "and has not received, and only its own receive could make room; receive what it sent "
                      "before sending more");
  else
    s = t_.waiter_.until([&] { return sizeof(Frame) <= t_.ring_bytes_ - used(); }, check, w.deadline, late);
  if (!s) { unlink(path.c_str()); return s; }
  rc.spilled.store(spilled + len, std::memory_order_relaxed);
  t_.ring_write(me, peer_, tail, &f, sizeof f);
  rc.tail.store(tail + sizeof f, std::memory_order_release);
  t_.ring();
  return Status::ok();
}

Status ShmChannel::recv(void* buf, std::size_t max_bytes, const Wait& w) {
  using Frame = ShmTransport::Frame;
  const int me = t_.rank_;
  ShmTransport::RingCtrl& rc = t_.ring_ctrl(peer_, me);
  const std::uint64_t head = rc.head.load(std::memory_order_relaxed);
  Status s = t_.waiter_.until([&] { return rc.tail.load(std::memory_order_acquire) > head; },
                              [&] { return t_.check_peer(peer_, w.op); }, w.deadline,
                              [&] { return t_.timed_out(w, {peer_}); });
  if (!s) return s;
  Frame f;
  t_.ring_read(peer_, me, head, &f, sizeof f);
  if (f.len > max_bytes) {
    return invalid_argument(t_.where() + ": recv from " + std::to_string(peer_) + ": the message has " +
                            std::to_string(f.len) + " bytes, the buffer " + std::to_string(max_bytes) +
                            " (it stays queued)");
  }
  if (f.kind == kFrameInline) {
    t_.ring_read(peer_, me, head + sizeof f, buf, f.len);
    rc.head.store(head + sizeof f + round_up(f.len, 8), std::memory_order_release);
    t_.ring();
    return Status::ok();
  }
  const std::string path = t_.spill_path(peer_, f.id);
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return system_error(t_.where() + ": recv from " + std::to_string(peer_) + ": open " + path);
  if (f.len > 0) {
    void* p = mmap(nullptr, f.len, PROT_READ, MAP_SHARED, fd.get(), 0);
    if (p == MAP_FAILED) return system_error(t_.where() + ": recv: mmap " + path);
    copy_block(buf, p, f.len);
    munmap(p, f.len);
  }
  unlink(path.c_str());
  rc.unspilled.store(rc.unspilled.load(std::memory_order_relaxed) + f.len, std::memory_order_release);
  rc.head.store(head + sizeof f, std::memory_order_release);
  t_.ring();
  return Status::ok();
}

}  // namespace accrun::collectives::store
