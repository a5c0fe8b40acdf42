// The store backend over shared memory: one segment per group incarnation.
//
// Segment layout (all offsets page- or cache-line aligned):
//   Header                      magic, geometry, setup handshake
//   Ctrl[size]                  per rank: `seq`, a monotonic publish counter
//   slots[size][2][half_bytes]  per rank: two halves, used alternately
//   RingCtrl[size*size]         per ordered pair (src, dst): head/tail
//   rings[size*size][ring]      per ordered pair: a byte ring of frames
//   bring[2][slots]             group-wide broadcast rings (small, chunked):
//                               each slot a seq line + data
//
// Collectives run as a sequence of rounds.  In a round a rank may write into
// its own current half, then publishes (seq += 1, release); readers wait for
// the writer's seq (acquire) and read.  Every rank publishes the same number
// of times in every collective, so seq values line up across ranks.  A half
// is written again two rounds later, and only once every rank's seq has
// reached the value it published first after the earlier round — a rank
// publishes that only after finishing its reads — so no extra
// synchronisation is needed and consecutive rounds pipeline.
//
// Broadcast (below bcast_cma_min, or without CMA) streams through one of two
// group-wide rings instead: messages up to bcast_small_max use a deep ring
// of small slots, larger ones go chunk by chunk through a ring of
// bcast_chunk slots.  Every rank counts each ring's chunks (`step`)
// identically; chunk t goes to slot t % slots, stamped t + 1.  The root of
// chunk t may overwrite that slot only once every rank's `bc_done` for that
// ring (chunks it has finished) reaches t - slots + 1.
// So a root runs up to `slots` chunks ahead of its slowest reader, like an
// eager send, instead of two rounds: with more ranks than cores each call no
// longer costs a context switch.  It publishes nothing on `seq`, so the
// rounds of the other collectives stay in step.
//
// Send/recv: frames [len, kind, id] + payload in the pair's ring; a message
// that does not fit the free space is written to a side file in shm_dir and
// only its descriptor goes through the ring (a send never waits for its
// receive; it blocks only when the ring cannot take even a descriptor).
//
// Setup: group rank 0 creates the file (0600, O_EXCL) in shm_dir, publishes
// its path through the Rendezvous, waits until every member has mapped it and
// unlinks it, so nothing is left behind even if a rank crashes later.
#include "store/store_backend.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "accrun/log.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ACCRUN_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define ACCRUN_CPU_RELAX() asm volatile("yield" ::: "memory")
#else
#define ACCRUN_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

namespace accrun::collectives {
namespace store {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint64_t kMagic = 0x6163637275'6e5354ULL;  // "accrunST"
constexpr int kDefaultSetupTimeoutMs = 60'000;
constexpr std::size_t kPage = 4096;
constexpr std::uint64_t kFrameInline = 0;
constexpr std::uint64_t kFrameSpill = 1;

struct alignas(128) Header {
  std::uint64_t magic;
  std::uint64_t size;
  std::uint64_t half_bytes;
  std::uint64_t ring_bytes;
  std::uint64_t total_bytes;
  std::atomic<std::uint32_t> ready;   // 1: every member attached; 2: setup failed
};

// Messages of at most kBoxBytes travel inside the cache line that also
// carries their sequence number (one line transfer per peer instead of two).
constexpr std::size_t kBoxBytes = 56;
struct alignas(64) Box {
  std::atomic<std::uint64_t> seq;
  char data[kBoxBytes];
};

struct alignas(128) Ctrl {
  std::atomic<std::uint64_t> seq;
  std::atomic<std::uint32_t> attached;
  std::int64_t pid;
  Box box[2];  // used by rounds of parity 0 and 1, like the slot halves
  // Set when this rank gave up on the group (a dead peer, a timeout), with
  // the reason, so ranks waiting on it fail at once instead of hanging.
  std::atomic<std::uint32_t> broken;
  char reason[240];
  std::uint64_t probe_addr;        // an address in this process holding its pid (CMA probe)
  std::atomic<std::uint32_t> cma;  // 1: this rank can read its peer's memory, 2: it cannot
  // Broadcast ring chunks this rank has finished with, per ring (its own
  // line: the owner writes it once per chunk, roots read it before reusing
  // a slot).
  alignas(64) std::atomic<std::uint64_t> bc_done[2];
};

// One slot of a broadcast ring: a chunk of at most kBoxBytes lies in the
// line that carries its stamp, a larger one in the data that follows.
struct alignas(64) BSlot {
  std::atomic<std::uint64_t> seq;  // chunk number + 1 of the chunk it holds
  char inline_data[kBoxBytes];
};

struct alignas(128) RingCtrl {
  std::atomic<std::uint64_t> tail;  // bytes written by the sender
  char pad[120];
  std::atomic<std::uint64_t> head;  // bytes consumed by the receiver
};

struct Frame {
  std::uint64_t len;
  std::uint64_t kind;
  std::uint64_t id;
  std::uint64_t reserved;
};

std::size_t round_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) { h ^= c; h *= 1099511628211ULL; }
  return h;
}

// An mmap'ed segment; unmapped on destruction.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* base, std::size_t bytes) : base_(base), bytes_(bytes) {}
  Mapping(Mapping&& o) noexcept : base_(o.base_), bytes_(o.bytes_) { o.base_ = nullptr; }
  Mapping& operator=(Mapping&& o) noexcept {
    std::swap(base_, o.base_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { if (base_ != nullptr) munmap(base_, bytes_); }
  char* data() const { return static_cast<char*>(base_); }
  std::size_t size() const { return bytes_; }

 private:
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
};

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

Result<Mapping> map_file(int fd, std::size_t bytes, const std::string& path) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return system_error("mmap " + path);
  return Mapping(p, bytes);
}

class StoreBackend final : public Backend {
 public:
  StoreBackend(const GroupContext& ctx, const Tuning& t)
      : name_(ctx.name), epoch_(ctx.epoch), rank_(ctx.rank), size_(ctx.size), members_(ctx.members),
        oversubscribed_(ctx.oversubscribed), timeout_ms_(ctx.timeout_ms), peers_(ctx.peers), tun_(t),
        self_pid_(getpid()) {
    // More ranks in the group than CPUs on the host: spinning only steals
    // the core a peer needs, so yield at once (as ACCRUN_OVERSUBSCRIBED=1).
    // (Not this rank's affinity: a rank bound to one core is the normal case.)
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus > 0 && cpus < size_) oversubscribed_ = true;
  }

  ~StoreBackend() override {
    if (seg_.data() == nullptr) return;
    // Side files of messages sent to this rank and never received.
    for (int src = 0; src < size_; ++src) {
      RingCtrl& rc = ring_ctrl(src, rank_);
      std::uint64_t head = rc.head.load(std::memory_order_relaxed);
      const std::uint64_t tail = rc.tail.load(std::memory_order_acquire);
      while (head < tail) {
        Frame f;
        ring_read(src, rank_, head, &f, sizeof f);
        if (f.kind == kFrameSpill) unlink(spill_path(src, f.id).c_str());
        head += sizeof(Frame) + (f.kind == kFrameInline ? round_up(f.len, 8) : 0);
      }
    }
  }

  Status setup(Rendezvous* rv, int setup_timeout_ms, const std::string& shm_dir) {
    const std::string dir = shm_dir.empty() ? "/dev/shm" : shm_dir;
    char buf[64];
    std::snprintf(buf, sizeof buf, "accrun-store-%016llx-%llu", static_cast<unsigned long long>(fnv1a(name_)),
                  static_cast<unsigned long long>(epoch_));
    std::string path = dir + "/" + buf;
    if (rank_ == 0 && shm_dir.empty()) {
      const std::string pid = std::to_string(self_pid_);
      path.append(1, '-').append(pid);
    }
    spill_prefix_ = path;

    const std::size_t p = static_cast<std::size_t>(size_);
    half_ = round_up(std::max<std::size_t>(tun_.half_bytes, kPage), kPage);
    ring_bytes_ = tun_.ring_bytes;
    if (ring_bytes_ == 0) {
      ring_bytes_ = 1u << 20;
      while (ring_bytes_ > (64u << 10) && ring_bytes_ * p * p > (32u << 20)) ring_bytes_ /= 2;
    }
    ring_bytes_ = round_up(ring_bytes_, kPage);
    ctrl_off_ = round_up(sizeof(Header), 128);
    slots_off_ = round_up(ctrl_off_ + p * sizeof(Ctrl), kPage);
    rctrl_off_ = slots_off_ + p * 2 * half_;
    rings_off_ = round_up(rctrl_off_ + p * p * sizeof(RingCtrl), kPage);
    std::size_t end = rings_off_ + p * p * ring_bytes_;
    const std::size_t ring_data[2] = {tun_.bcast_small_max, tun_.bcast_chunk};
    const std::size_t ring_slots[2] = {tun_.bcast_small_slots, tun_.bcast_slots};
    for (int i = 0; i < 2; ++i) {
      BRing& r = bring_[i];
      r.data = round_up(std::max<std::size_t>(ring_data[i], 64), 64);
      r.stride = sizeof(BSlot) + r.data;
      r.slots = std::max<std::size_t>(ring_slots[i], 2);
      r.off = round_up(end, kPage);
      end = r.off + r.slots * r.stride;
    }
    const std::size_t total = round_up(end, kPage);
    const auto deadline = Clock::now() + std::chrono::milliseconds(setup_timeout_ms);

    if (rank_ == 0) {
      int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0 && errno == EEXIST) {
        // A leftover of a crashed incarnation with the same name and epoch.
        unlink(path.c_str());
        fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      }
      if (fd < 0) return system_error(where() + ": create shared segment " + path);
      Fd owner(fd);
      if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
        Status s = system_error(where() + ": size shared segment " + path + " to " + std::to_string(total));
        unlink(path.c_str());
        return s;
      }
      auto m = map_file(fd, total, path);
      if (!m) { unlink(path.c_str()); return m.status().with_context(where()); }
      seg_ = std::move(m).value();
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
      Fd fd(open(peer_path.c_str(), O_RDWR | O_CLOEXEC));
      if (fd.get() < 0) return system_error(where() + ": open shared segment " + peer_path);
      struct stat st;
      if (fstat(fd.get(), &st) != 0) return system_error(where() + ": stat " + peer_path);
      if (static_cast<std::size_t>(st.st_size) != total) {
        return invalid_usage(where() + ": shared segment " + peer_path + " has " + std::to_string(st.st_size) +
                             " bytes, expected " + std::to_string(total) +
                             " (members disagree on the group size or accrun version)");
      }
      auto m = map_file(fd.get(), total, peer_path);
      if (!m) return m.status().with_context(where());
      seg_ = std::move(m).value();
      if (header()->magic != kMagic || header()->size != p) {
        return invalid_usage(where() + ": shared segment " + peer_path + " does not belong to this group");
      }
      spill_prefix_ = peer_path;
    }
    // Fault in this rank's slot now rather than in the first timed call.
    std::memset(slot(rank_, 0), 0, 2 * half_);
    ctrl(rank_).pid = self_pid_;
    ctrl(rank_).probe_addr = reinterpret_cast<std::uint64_t>(&self_pid_);
    ctrl(rank_).attached.store(1, std::memory_order_release);

    Header* h = header();
    if (rank_ == 0) {
      Status s = wait_until([&] {
        for (int q = 0; q < size_; ++q)
          if (ctrl(q).attached.load(std::memory_order_acquire) == 0) return false;
        return true;
      }, [&]() -> Status {
        for (int q = 0; q < size_; ++q)
          if (ctrl(q).attached.load(std::memory_order_acquire) == 0) ACCRUN_RETURN_IF_ERROR(check_peer(q));
        return Status::ok();
      }, deadline, "setup");
      unlink(path.c_str());
      if (s) s = probe_cma(deadline);
      if (!s) {
        h->ready.store(2, std::memory_order_release);
        if (s.code() == Code::kTimeout) {
          std::string missing;
          for (int q = 0; q < size_; ++q) {
            if (ctrl(q).attached.load(std::memory_order_acquire) != 0) continue;
            if (!missing.empty()) missing += ", ";
            missing += std::to_string(q) + " (job rank " + std::to_string(members_[q].job_rank) + ")";
          }
          return timeout_error(where() + ": group ranks never attached to the shared segment within " +
                               std::to_string(setup_timeout_ms) + " ms: " + missing);
        }
        return s;
      }
      h->ready.store(1, std::memory_order_release);
    } else {
      ACCRUN_RETURN_IF_ERROR(probe_cma(deadline));
      Status s = wait_until([&] { return h->ready.load(std::memory_order_acquire) != 0; },
                            [&] { return check_peer(0); }, deadline, "setup");
      if (!s) return s;
      if (h->ready.load(std::memory_order_acquire) != 1)
        return remote_error(where() + ": group rank 0 reported that some members never arrived");
    }
    // Touch every slot so later reads take no page fault.
    volatile char sink = 0;
    for (int q = 0; q < size_; ++q)
      for (std::size_t off = 0; off < 2 * half_; off += kPage) sink = sink + slot(q, 0)[off];
    for (const BRing& r : bring_)
      for (std::size_t off = 0; off < r.slots * r.stride; off += kPage) sink = sink + seg_.data()[r.off + off];
    (void)sink;
    use_cma_ = tun_.cma && size_ > 1;
    for (int q = 0; q < size_; ++q)
      if (ctrl(q).cma.load(std::memory_order_acquire) != 1) use_cma_ = false;
    return Status::ok();
  }

  // Every rank tries to read its successor's pid out of that process's
  // memory (cross-memory attach), records the outcome, and waits for every
  // other rank's outcome, so all members agree whether CMA is usable.
  // Rank 0 runs it before declaring the segment ready, the others after.
  Status probe_cma(Clock::time_point deadline) {
    const int q = (rank_ + 1) % size_;
    ACCRUN_RETURN_IF_ERROR(wait_until([&] { return ctrl(q).attached.load(std::memory_order_acquire) != 0; },
                                      [&] { return check_peer(q); }, deadline, "setup"));
    long got = 0;
    iovec local{&got, sizeof got};
    iovec remote{reinterpret_cast<void*>(ctrl(q).probe_addr), sizeof got};
    const bool ok = tun_.cma && process_vm_readv(static_cast<pid_t>(ctrl(q).pid), &local, 1, &remote, 1, 0) ==
                                    static_cast<ssize_t>(sizeof got) && got == ctrl(q).pid;
    ctrl(rank_).cma.store(ok ? 1 : 2, std::memory_order_release);
    if (rank_ != 0) return Status::ok();
    return wait_until([&] {
      for (int o = 0; o < size_; ++o)
        if (ctrl(o).cma.load(std::memory_order_acquire) == 0) return false;
      return true;
    }, [] { return Status::ok(); }, deadline, "setup");
  }

  BackendKind kind() const override { return BackendKind::kStore; }
  void set_timeout(int timeout_ms) override { timeout_ms_ = timeout_ms; }

  // ---------------------------------------------------------------- collectives
  Status allreduce(const void* send, void* recv, std::size_t count, DType dt, Op op, void* stream) override {
    ACCRUN_RETURN_IF_ERROR(enter("allreduce", stream));
    const std::size_t ds = dtype_size(dt);
    const std::size_t bytes = count * ds;
    ACCRUN_RETURN_IF_ERROR(check_buffers(send, recv, count, ds));
    if (bytes == 0) return Status::ok();
    const char* in = static_cast<const char*>(send);
    char* out = static_cast<char*>(recv);
    if (size_ == 1) { if (in != out) std::memcpy(out, in, bytes); return Status::ok(); }

    if (bytes <= kBoxBytes) {
      const int h = begin_round(true);
      if (!ok_) return broken_;
      std::memcpy(box(rank_, h), in, bytes);
      const std::uint64_t v = publish_box(h);
      for (int q = 0; q < size_; ++q)
        if (q != rank_) ACCRUN_RETURN_IF_ERROR(guard(wait_box(q, h, v)));
      reduce_parts(dt, op, out, count, [&](int q) { return box(q, h); });
      end_round();
      return Status::ok();
    }
    if (bytes <= std::min(tun_.allreduce_small_max, half_)) {
      // One round: every rank copies in, then reduces every slot in rank
      // order, so all ranks compute bit-identical results.
      const int h = begin_round(true);
      if (!ok_) return broken_;
      std::memcpy(slot(rank_, h), in, bytes);
      const std::uint64_t v = publish();
      ACCRUN_RETURN_IF_ERROR(guard(wait_all(v)));
      reduce_parts(dt, op, out, count, [&](int q) { return slot(q, h); });
      end_round();
      return Status::ok();
    }
    if (use_cma_ && bytes >= tun_.cma_min) return allreduce_cma(in, out, count, dt, op);
    // Reduce-scatter + allgather per chunk: each rank reduces one slice of the
    // chunk (its own data first, then the others in rank order) into its own
    // half, then every rank copies all slices out.
    const std::size_t chunk = chunk_elems(tun_.allreduce_chunk, ds);
    for (std::size_t off = 0; off < count; off += chunk) {
      const std::size_t n = std::min(chunk, count - off);
      const int h = begin_round(true);
      if (!ok_) return broken_;
      std::memcpy(slot(rank_, h), in + off * ds, n * ds);
      const std::uint64_t a = publish();
      auto [lo, hi] = slice(n, ds, rank_);
      for (int i = 1; i < size_; ++i) {
        const int q = (rank_ + i) % size_;
        ACCRUN_RETURN_IF_ERROR(guard(wait_one(q, a)));
        if (hi > lo) reduce_into(dt, op, slot(rank_, h) + lo * ds, slot(q, h) + lo * ds, hi - lo);
      }
      const std::uint64_t b = publish();
      for (int i = 0; i < size_; ++i) {
        const int q = (rank_ + i) % size_;
        if (q != rank_) ACCRUN_RETURN_IF_ERROR(guard(wait_one(q, b)));
        auto [qlo, qhi] = slice(n, ds, q);
        if (qhi > qlo) std::memcpy(out + (off + qlo) * ds, slot(q, h) + qlo * ds, (qhi - qlo) * ds);
      }
      end_round();
    }
    return Status::ok();
  }

  Status reduce(const void* send, void* recv, std::size_t count, DType dt, Op op, int root, void* stream) override {
    ACCRUN_RETURN_IF_ERROR(enter("reduce", stream));
    ACCRUN_RETURN_IF_ERROR(check_rank(root, "root"));
    const std::size_t ds = dtype_size(dt);
    const std::size_t bytes = count * ds;
    ACCRUN_RETURN_IF_ERROR(check_buffers(send, rank_ == root ? recv : send, count, ds));
    if (bytes == 0) return Status::ok();
    const char* in = static_cast<const char*>(send);
    char* out = static_cast<char*>(recv);
    if (size_ == 1) { if (in != out) std::memcpy(out, in, bytes); return Status::ok(); }

    if (bytes <= kBoxBytes) {
      const int h = begin_round(true);
      if (!ok_) return broken_;
      std::memcpy(box(rank_, h), in, bytes);
      const std::uint64_t v = publish_box(h);
      if (rank_ == root) {
        for (int q = 0; q < size_; ++q)
          if (q != rank_) ACCRUN_RETURN_IF_ERROR(guard(wait_box(q, h, v)));
        reduce_parts(dt, op, out, count, [&](int q) { return box(q, h); });
      }
      end_round();
      return Status::ok();
    }
    if (bytes <= std::min(tun_.allreduce_small_max, half_)) {
      const int h = begin_round(true);
      if (!ok_) return broken_;
      std::memcpy(slot(rank_, h), in, bytes);
      const std::uint64_t v = publish();
      if (rank_ == root) {
        ACCRUN_RETURN_IF_ERROR(guard(wait_all(v)));
        reduce_parts(dt, op, out, count, [&](int q) { return slot(q, h); });
      }
      end_round();
      return Status::ok();
    }
    const std::size_t chunk = chunk_elems(tun_.allreduce_chunk, ds);
    for (std::size_t off = 0; off < count; off += chunk) {
      const std::size_t n = std::min(chunk, count - off);
      const int h = begin_round(true);
      if (!ok_) return broken_;
      std::memcpy(slot(rank_, h), in + off * ds, n * ds);
      const std::uint64_t a = publish();
      auto [lo, hi] = slice(n, ds, rank_);
      for (int i = 1; i < size_; ++i) {
        const int q = (rank_ + i) % size_;
        ACCRUN_RETURN_IF_ERROR(guard(wait_one(q, a)));
        if (hi > lo) reduce_into(dt, op, slot(rank_, h) + lo * ds, slot(q, h) + lo * ds, hi - lo);
      }
      const std::uint64_t b = publish();
      if (rank_ == root) {
        for (int i = 0; i < size_; ++i) {
          const int q = (rank_ + i) % size_;
          if (q != rank_) ACCRUN_RETURN_IF_ERROR(guard(wait_one(q, b)));
          auto [qlo, qhi] = slice(n, ds, q);
          if (qhi > qlo) std::memcpy(out + (off + qlo) * ds, slot(q, h) + qlo * ds, (qhi - qlo) * ds);
        }
      }
      end_round();
    }
    return Status::ok();
  }

  Status broadcast(void* buf, std::size_t count, DType dt, int root, void* stream) override {
    ACCRUN_RETURN_IF_ERROR(enter("broadcast", stream));
    ACCRUN_RETURN_IF_ERROR(check_rank(root, "root"));
    const std::size_t ds = dtype_size(dt);
    ACCRUN_RETURN_IF_ERROR(check_buffers(buf, buf, count, ds));
    if (count == 0 || size_ == 1) return Status::ok();
    char* data = static_cast<char*>(buf);
    if (use_cma_ && count * ds >= tun_.bcast_cma_min) {
      // Single copy: every other rank reads the root's buffer directly; the
      // root returns once all have read it.
      const int h = begin_round(rank_ == root);
      if (!ok_) return broken_;
      if (rank_ == root) {
        const std::uint64_t addr = reinterpret_cast<std::uint64_t>(data);
        std::memcpy(box(root, h), &addr, sizeof addr);
        publish_box(h);
      } else {
        const std::uint64_t v = publish();
        ACCRUN_RETURN_IF_ERROR(guard(wait_box(root, h, v)));
        std::uint64_t addr;
        std::memcpy(&addr, box(root, h), sizeof addr);
        ACCRUN_RETURN_IF_ERROR(guard(cma_read(root, data, addr, count * ds)));
      }
      const std::uint64_t c = publish();
      if (rank_ == root) ACCRUN_RETURN_IF_ERROR(guard(wait_all(c)));
      end_round();
      return Status::ok();
    }
    // Chunks stream through the broadcast ring (see the top of the file).
    const std::size_t bytes = count * ds;
    const int which = bytes <= bring_[0].data ? 0 : 1;
    BRing& r = bring_[which];
    const std::size_t chunk = std::max<std::size_t>(1, r.data / ds) * ds;
    std::atomic<std::uint64_t>& done = ctrl(rank_).bc_done[which];
    for (std::size_t off = 0; off < bytes; off += chunk) {
      const std::size_t n = std::min(chunk, bytes - off);
      const std::uint64_t t = r.step++;
      BSlot* s = r.slot(seg_.data(), t);
      char* d = n <= kBoxBytes ? s->inline_data : reinterpret_cast<char*>(s) + sizeof(BSlot);
      if (rank_ == root) {
        if (t >= r.slots) ACCRUN_RETURN_IF_ERROR(guard(wait_bc_done(which, t - r.slots + 1)));
        std::memcpy(d, data + off, n);
        s->seq.store(t + 1, std::memory_order_release);
      } else {
        if (s->seq.load(std::memory_order_acquire) < t + 1) {
          ACCRUN_RETURN_IF_ERROR(guard(wait_until([&] { return s->seq.load(std::memory_order_acquire) >= t + 1; },
                                                  [&] { return check_peer(root); }, deadline_from_now(), op_)));
        }
        std::memcpy(data + off, d, n);
      }
      done.store(t + 1, std::memory_order_release);
    }
    return Status::ok();
  }

  Status allgather(const void* send, void* recv, std::size_t count_per_rank, DType dt, void* stream) override {
    ACCRUN_RETURN_IF_ERROR(enter("allgather", stream));
    const std::size_t ds = dtype_size(dt);
    ACCRUN_RETURN_IF_ERROR(check_buffers(send, recv, count_per_rank, ds));
    if (count_per_rank == 0) return Status::ok();
    const std::size_t m = count_per_rank * ds;
    char* out = static_cast<char*>(recv);
    // In place: this rank's part already sits at recv + rank * m.
    const char* mine = send == recv ? out + rank_ * m : static_cast<const char*>(send);
    if (mine != out + rank_ * m) std::memmove(out + rank_ * m, mine, m);
    mine = out + rank_ * m;
    if (size_ == 1) return Status::ok();
    if (m <= kBoxBytes) {
      const int h = begin_round(true);
      if (!ok_) return broken_;
      std::memcpy(box(rank_, h), mine, m);
      const std::uint64_t v = publish_box(h);
      for (int i = 1; i < size_; ++i) {
        const int q = (rank_ + i) % size_;
        ACCRUN_RETURN_IF_ERROR(guard(wait_box(q, h, v)));
        std::memcpy(out + q * m, box(q, h), m);
      }
      end_round();
      return Status::ok();
    }
    if (use_cma_ && m >= tun_.cma_min) {
      // Single copy: read every other rank's part where it lies.
      const int h = begin_round(true);
      if (!ok_) return broken_;
      const std::uint64_t addr = reinterpret_cast<std::uint64_t>(mine);
      std::memcpy(box(rank_, h), &addr, sizeof addr);
      const std::uint64_t v = publish_box(h);
      for (int i = 1; i < size_; ++i) {
        const int q = (rank_ + i) % size_;
        ACCRUN_RETURN_IF_ERROR(guard(wait_box(q, h, v)));
        std::uint64_t qa;
        std::memcpy(&qa, box(q, h), sizeof qa);
        ACCRUN_RETURN_IF_ERROR(guard(cma_read(q, out + q * m, qa, m)));
      }
      const std::uint64_t c = publish();
      ACCRUN_RETURN_IF_ERROR(guard(wait_all(c)));  // nobody reuses its buffer while others read it
      end_round();
      return Status::ok();
    }
    const std::size_t chunk = chunk_elems(tun_.allgather_chunk, ds) * ds;
    for (std::size_t off = 0; off < m; off += chunk) {
      const std::size_t n = std::min(chunk, m - off);
      const int h = begin_round(true);
      if (!ok_) return broken_;
      std::memcpy(slot(rank_, h), mine + off, n);
      const std::uint64_t v = publish();
      for (int i = 1; i < size_; ++i) {
        const int q = (rank_ + i) % size_;
        ACCRUN_RETURN_IF_ERROR(guard(wait_one(q, v)));
        std::memcpy(out + q * m + off, slot(q, h), n);
      }
      end_round();
    }
    return Status::ok();
  }

  Status reducescatter(const void* send, void* recv, std::size_t recv_count, DType dt, Op op,
                       void* stream) override {
    ACCRUN_RETURN_IF_ERROR(enter("reducescatter", stream));
    const std::size_t ds = dtype_size(dt);
    ACCRUN_RETURN_IF_ERROR(check_buffers(send, recv, recv_count, ds));
    if (recv_count == 0) return Status::ok();
    const char* in = static_cast<const char*>(send);
    char* out = static_cast<char*>(recv);
    if (size_ == 1) { if (in != out) std::memcpy(out, in, recv_count * ds); return Status::ok(); }
    // Each round packs this rank's contribution to every rank's block into
    // its half; rank r then reduces block r of every half.  In place, the
    // result lands at the start of recv; each round reads the input before
    // any output of that range is written.
    const std::size_t chunk = std::max<std::size_t>(1, half_ / ds / static_cast<std::size_t>(size_));
    for (std::size_t off = 0; off < recv_count; off += chunk) {
      const std::size_t n = std::min(chunk, recv_count - off);
      const int h = begin_round(true);
      if (!ok_) return broken_;
      for (int q = 0; q < size_; ++q)
        std::memcpy(slot(rank_, h) + q * n * ds, in + (q * recv_count + off) * ds, n * ds);
      const std::uint64_t v = publish();
      ACCRUN_RETURN_IF_ERROR(guard(wait_all(v)));
      char* dst = out + off * ds;
      reduce_parts(dt, op, dst, n, [&](int q) { return slot(q, h) + rank_ * n * ds; });
      end_round();
    }
    return Status::ok();
  }

  Status barrier() override {
    ACCRUN_RETURN_IF_ERROR(enter("barrier", nullptr));
    if (size_ == 1) return Status::ok();
    const std::uint64_t v = publish();
    return guard(wait_all(v));
  }

  // ------------------------------------------------------------ point-to-point
  Status send(const void* buf, std::size_t count, DType dt, int peer, void* stream) override {
    ACCRUN_RETURN_IF_ERROR(check_p2p("send", stream, peer));
    const std::size_t ds = dtype_size(dt);
    ACCRUN_RETURN_IF_ERROR(check_buffers(buf, buf, count, ds));
    const std::size_t len = count * ds;
    RingCtrl& rc = ring_ctrl(rank_, peer);
    const std::uint64_t tail = rc.tail.load(std::memory_order_relaxed);
    const std::size_t inline_need = sizeof(Frame) + round_up(len, 8);
    auto used = [&] { return tail - rc.head.load(std::memory_order_acquire); };
    Frame f{len, kFrameInline, 0, 0};
    if (inline_need <= ring_bytes_ - used()) {
      ring_write(rank_, peer, tail, &f, sizeof f);
      ring_write(rank_, peer, tail + sizeof f, buf, len);
      rc.tail.store(tail + inline_need, std::memory_order_release);
      return Status::ok();
    }
    // Too large for the free space: the payload goes to a side file, the
    // ring carries its descriptor, and the receiver unlinks the file.
    f.kind = kFrameSpill;
    f.id = next_spill_id_++;
    const std::string path = spill_path(rank_, f.id);
    {
      Fd fd(open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
      if (fd.get() < 0) return system_error(where() + ": send to " + std::to_string(peer) + ": create " + path);
      if (len > 0) {
        if (ftruncate(fd.get(), static_cast<off_t>(len)) != 0) {
          const int err = errno;
          Status s = system_error(where() + ": send: size " + path, err);
          unlink(path.c_str());
          return err == ENOSPC ? no_memory(s.message()) : s;
        }
        auto m = map_file(fd.get(), len, path);
        if (!m) { unlink(path.c_str()); return m.status().with_context(where()); }
        std::memcpy(m->data(), buf, len);
      }
    }
    // Only the descriptor has to fit: block on ring capacity alone.
    const auto deadline = deadline_from_now();
    Status s = wait_until([&] { return sizeof(Frame) <= ring_bytes_ - used(); }, [&] { return check_peer(peer); },
                          deadline, "send");
    if (!s) { unlink(path.c_str()); return s; }
    ring_write(rank_, peer, tail, &f, sizeof f);
    rc.tail.store(tail + sizeof f, std::memory_order_release);
    return Status::ok();
  }

  Status recv(void* buf, std::size_t count, DType dt, int peer, void* stream) override {
    ACCRUN_RETURN_IF_ERROR(check_p2p("recv", stream, peer));
    const std::size_t ds = dtype_size(dt);
    ACCRUN_RETURN_IF_ERROR(check_buffers(buf, buf, count, ds));
    if (group_depth_ > 0) {
      pending_.push_back(PendingRecv{buf, count * ds, peer});
      return Status::ok();
    }
    return do_recv(buf, count * ds, peer);
  }

  Status group_start() override {
    ++group_depth_;
    return Status::ok();
  }

  Status group_end() override {
    if (group_depth_ == 0) return invalid_usage(where() + ": group_end without group_start");
    if (--group_depth_ > 0) return Status::ok();
    // Sends were buffered as they were posted; the receives complete here,
    // in the order they were posted.
    std::vector<PendingRecv> todo;
    todo.swap(pending_);
    for (const PendingRecv& r : todo) ACCRUN_RETURN_IF_ERROR(do_recv(r.buf, r.bytes, r.peer));
    return Status::ok();
  }

 private:
  // Copies len bytes at addr in group rank q's process into dst.
  Status cma_read(int q, char* dst, std::uint64_t addr, std::size_t len) {
    const pid_t pid = static_cast<pid_t>(ctrl(q).pid);
    while (len > 0) {
      iovec l{dst, len};
      iovec r{reinterpret_cast<void*>(addr), len};
      const ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == ESRCH) {
        ACCRUN_RETURN_IF_ERROR(check_peer(q));
        return remote_error(where() + ": " + op_ + ": peer group rank " + std::to_string(q) + " (pid " +
                            std::to_string(pid) + ") is gone");
      }
      if (n <= 0) return system_error(where() + ": " + op_ + ": process_vm_readv from group rank " + std::to_string(q));
      dst += n;
      addr += static_cast<std::uint64_t>(n);
      len -= static_cast<std::size_t>(n);
    }
    return Status::ok();
  }

  // Allreduce by cross-memory attach: three synchronisations whatever the
  // size.  Rank r reduces slice r from every rank's send buffer (its own
  // first, the others in rank order) into its recv buffer, then every rank
  // reads the other slices from their owners' recv buffers; the last step
  // keeps every buffer alive until all reads are done.
  Status allreduce_cma(const char* in, char* out, std::size_t count, DType dt, Op op) {
    const std::size_t ds = dtype_size(dt);
    const int h = begin_round(true);
    if (!ok_) return broken_;
    const std::uint64_t mine[2] = {reinterpret_cast<std::uint64_t>(in), reinterpret_cast<std::uint64_t>(out)};
    std::memcpy(box(rank_, h), mine, sizeof mine);
    const std::uint64_t v = publish_box(h);
    std::vector<std::uint64_t> send_at(static_cast<std::size_t>(size_)), recv_at(send_at.size());
    for (int q = 0; q < size_; ++q) {
      if (q != rank_) ACCRUN_RETURN_IF_ERROR(guard(wait_box(q, h, v)));
      std::uint64_t a[2];
      std::memcpy(a, box(q, h), sizeof a);
      send_at[q] = a[0];
      recv_at[q] = a[1];
    }
    auto [lo, hi] = slice(count, ds, rank_);
    if (hi > lo) {
      if (in != out) std::memcpy(out + lo * ds, in + lo * ds, (hi - lo) * ds);
      // This round's half of the slot is free: a bounce buffer.
      char* tmp = slot(rank_, h);
      const std::size_t step = std::max<std::size_t>(1, half_ / ds);
      for (int q = 0; q < size_; ++q) {
        if (q == rank_) continue;
        for (std::size_t off = lo; off < hi; off += step) {
          const std::size_t n = std::min(step, hi - off);
          ACCRUN_RETURN_IF_ERROR(guard(cma_read(q, tmp, send_at[q] + off * ds, n * ds)));
          reduce_into(dt, op, out + off * ds, tmp, n);
        }
      }
    }
    const std::uint64_t a = publish();
    ACCRUN_RETURN_IF_ERROR(guard(wait_all(a)));
    for (int i = 1; i < size_; ++i) {
      const int q = (rank_ + i) % size_;
      auto [qlo, qhi] = slice(count, ds, q);
      if (qhi > qlo) ACCRUN_RETURN_IF_ERROR(guard(cma_read(q, out + qlo * ds, recv_at[q] + qlo * ds, (qhi - qlo) * ds)));
    }
    const std::uint64_t b = publish();
    ACCRUN_RETURN_IF_ERROR(guard(wait_all(b)));
    end_round();
    return Status::ok();
  }

  struct PendingRecv {
    void* buf;
    std::size_t bytes;
    int peer;
  };

  Header* header() const { return reinterpret_cast<Header*>(seg_.data()); }
  Ctrl& ctrl(int q) const { return reinterpret_cast<Ctrl*>(seg_.data() + ctrl_off_)[q]; }
  char* slot(int q, int h) const {
    return seg_.data() + slots_off_ + (static_cast<std::size_t>(q) * 2 + static_cast<std::size_t>(h)) * half_;
  }
  RingCtrl& ring_ctrl(int src, int dst) const {
    return reinterpret_cast<RingCtrl*>(seg_.data() + rctrl_off_)[src * size_ + dst];
  }
  char* ring(int src, int dst) const {
    return seg_.data() + rings_off_ + static_cast<std::size_t>(src * size_ + dst) * ring_bytes_;
  }
  void ring_write(int src, int dst, std::uint64_t pos, const void* data, std::size_t len) {
    const std::size_t at = pos % ring_bytes_;
    const std::size_t first = std::min(len, ring_bytes_ - at);
    char* r = ring(src, dst);
    if (first > 0) std::memcpy(r + at, data, first);
    if (len > first) std::memcpy(r, static_cast<const char*>(data) + first, len - first);
  }
  void ring_read(int src, int dst, std::uint64_t pos, void* data, std::size_t len) const {
    const std::size_t at = pos % ring_bytes_;
    const std::size_t first = std::min(len, ring_bytes_ - at);
    const char* r = ring(src, dst);
    if (first > 0) std::memcpy(data, r + at, first);
    if (len > first) std::memcpy(static_cast<char*>(data) + first, r, len - first);
  }
  std::string spill_path(int src, std::uint64_t id) const {
    return spill_prefix_ + "-p" + std::to_string(src) + "-" + std::to_string(id);
  }

  std::string where() const {
    return "group '" + name_ + "' (epoch " + std::to_string(epoch_) + ", rank " + std::to_string(rank_) + ")";
  }

  Status enter(const char* op, void* stream) {
    op_ = op;
    if (!ok_) return broken_;
    if (stream != nullptr)
      return invalid_argument(where() + ": " + op + ": the store backend works on host memory; stream must be NULL");
    if (group_depth_ > 0)
      return invalid_usage(where() + ": " + op + " inside group_start/group_end (only send and recv may be grouped)");
    return Status::ok();
  }
  Status check_p2p(const char* op, void* stream, int peer) {
    op_ = op;
    if (!ok_) return broken_;
    if (stream != nullptr)
      return invalid_argument(where() + ": " + op + ": the store backend works on host memory; stream must be NULL");
    return check_rank(peer, "peer");
  }
  Status check_rank(int r, const char* what) const {
    if (r < 0 || r >= size_)
      return invalid_argument(where() + ": " + op_ + ": " + what + " " + std::to_string(r) +
                              " is out of range (group size " + std::to_string(size_) + ")");
    return Status::ok();
  }
  Status check_buffers(const void* a, const void* b, std::size_t count, std::size_t ds) const {
    if (count > (SIZE_MAX / 8) / ds)
      return invalid_argument(where() + ": " + op_ + ": count " + std::to_string(count) + " is too large");
    if (count > 0 && (a == nullptr || b == nullptr))
      return invalid_argument(where() + ": " + op_ + ": NULL buffer with count " + std::to_string(count));
    return Status::ok();
  }

  // A failure inside a collective leaves the ranks' counters out of step, so
  // the group cannot be used again: later calls return the same error.
  Status guard(Status s) {
    if (!s && ok_) {
      ok_ = false;
      broken_ = Status(s.code(), s.message() + " (the group is unusable now; destroy it)");
      Ctrl& me = ctrl(rank_);
      std::snprintf(me.reason, sizeof me.reason, "%s", s.message().c_str());
      me.broken.store(static_cast<std::uint32_t>(s.code()), std::memory_order_release);
    }
    return s;
  }

  std::uint64_t publish() {
    ctrl(rank_).seq.store(++seq_, std::memory_order_release);
    return seq_;
  }
  // Publishes bytes placed in this rank's box h (a small-message round).
  std::uint64_t publish_box(int h) {
    ctrl(rank_).box[h].seq.store(seq_ + 1, std::memory_order_release);
    return publish();
  }
  char* box(int q, int h) const { return ctrl(q).box[h].data; }

  // out = part(0) op part(1) op ... op part(size_ - 1), in rank order, so
  // every rank reducing the same parts gets bit-identical results.
  template <class Part>
  void reduce_parts(DType dt, Op op, void* out, std::size_t count, Part part) const {
    std::memcpy(out, part(0), count * dtype_size(dt));
    for (int q = 1; q < size_; ++q) reduce_into(dt, op, out, part(q), count);
  }
  // Starts a data round; a rank that will write its half first waits until
  // every reader is done with that half's previous use.
  int begin_round(bool will_write) {
    const int h = static_cast<int>(round_ & 1);
    if (will_write && reuse_need_[h] > known_min_) {
      Status s = guard(wait_all(reuse_need_[h]));
      if (!s) return h;
    }
    return h;
  }
  void end_round() {
    reuse_need_[round_ & 1] = seq_ + 1;
    ++round_;
  }
  std::size_t chunk_elems(std::size_t chunk_bytes, std::size_t ds) const {
    const std::size_t b = std::min(std::max<std::size_t>(chunk_bytes, 64), half_);
    return std::max<std::size_t>(1, b / ds);
  }
  // Rank q's slice of an n-element chunk, in cache-line multiples.
  std::pair<std::size_t, std::size_t> slice(std::size_t n, std::size_t ds, int q) const {
    const std::size_t unit = 64 / ds;
    const std::size_t per = round_up((n + size_ - 1) / size_, unit);
    const std::size_t lo = std::min(n, per * static_cast<std::size_t>(q));
    return {lo, std::min(n, lo + per)};
  }

  Clock::time_point deadline_from_now() const {
    if (timeout_ms_ < 0) return Clock::time_point::max();
    return Clock::now() + std::chrono::milliseconds(timeout_ms_);
  }

  Status wait_all(std::uint64_t v) {
    // Fast path: one pass over the counters.
    int first = 0;
    while (first < size_ && ctrl(first).seq.load(std::memory_order_acquire) >= v) ++first;
    if (first == size_) { known_min_ = std::max(known_min_, v); return Status::ok(); }
    Status s = wait_until([&] {
      while (first < size_ && ctrl(first).seq.load(std::memory_order_acquire) >= v) ++first;
      return first == size_;
    }, [&]() -> Status {
      for (int q = first; q < size_; ++q)
        if (ctrl(q).seq.load(std::memory_order_acquire) < v) ACCRUN_RETURN_IF_ERROR(check_peer(q));
      return Status::ok();
    }, deadline_from_now(), op_);
    if (s) known_min_ = std::max(known_min_, v);
    return s;
  }
  // Waits until every rank has finished broadcast chunk v - 1.
  Status wait_bc_done(int which, std::uint64_t v) {
    std::uint64_t& known = bring_[which].known_min;
    if (known >= v) return Status::ok();
    int first = 0;
    auto done = [&] {
      while (first < size_ && ctrl(first).bc_done[which].load(std::memory_order_acquire) >= v) ++first;
      return first == size_;
    };
    if (!done()) {
      Status s = wait_until(done, [&]() -> Status {
        for (int q = first; q < size_; ++q)
          if (ctrl(q).bc_done[which].load(std::memory_order_acquire) < v) ACCRUN_RETURN_IF_ERROR(check_peer(q));
        return Status::ok();
      }, deadline_from_now(), op_);
      if (!s) return s;
    }
    // Remember the true minimum: later roots skip the scan while it covers them.
    std::uint64_t lo = UINT64_MAX;
    for (int q = 0; q < size_; ++q) lo = std::min(lo, ctrl(q).bc_done[which].load(std::memory_order_acquire));
    known = std::max(known, lo);
    return Status::ok();
  }
  Status wait_box(int q, int h, std::uint64_t v) {
    const auto& c = ctrl(q).box[h].seq;
    if (c.load(std::memory_order_acquire) >= v) return Status::ok();
    return wait_until([&] { return c.load(std::memory_order_acquire) >= v; }, [&] { return check_peer(q); },
                      deadline_from_now(), op_);
  }
  Status wait_one(int q, std::uint64_t v) {
    if (ctrl(q).seq.load(std::memory_order_acquire) >= v) return Status::ok();
    return wait_until([&] { return ctrl(q).seq.load(std::memory_order_acquire) >= v; },
                      [&] { return check_peer(q); }, deadline_from_now(), op_);
  }

  // Polls ready(): a bounded spin first (a wake-up costs tens of µs, a
  // small message far less), then yields, then sleeps in growing steps.
  // Oversubscribed ranks yield at once.  Every millisecond or so it asks
  // check() whether a peer it waits for has died, and enforces the deadline.
  template <class Ready, class Check>
  Status wait_until(Ready ready, Check check, Clock::time_point deadline, const char* what) {
    const auto start = Clock::now();
    if (!oversubscribed_) {
      const auto spin_end = start + std::chrono::nanoseconds(tun_.spin_ns);
      for (;;) {
        for (int i = 0; i < 64; ++i) {
          if (ready()) return Status::ok();
          ACCRUN_CPU_RELAX();
        }
        if (Clock::now() >= spin_end) break;
      }
    }
    auto next_check = start;
    for (unsigned iter = 0;; ++iter) {
      if (ready()) return Status::ok();
      const auto now = Clock::now();
      if (now >= next_check) {
        Status s = check();
        if (!s) return s;
        if (now >= deadline) {
          return timeout_error(where() + ": " + what + " timed out after " + std::to_string(timeout_ms_ < 0 ? 0 : timeout_ms_) +
                               " ms waiting for a peer");
        }
        next_check = now + std::chrono::milliseconds(1);
      }
      const auto waited = now - start;
      if (oversubscribed_ || waited < std::chrono::milliseconds(2)) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(waited < std::chrono::milliseconds(50) ? std::chrono::microseconds(20)
                                                                          : std::chrono::microseconds(500));
      }
    }
  }

  // Whether peer q, or any member, is known to have failed or given up.
  Status check_peer(int q) const {
    ACCRUN_RETURN_IF_ERROR(check_one(q));
    for (int o = 0; o < size_; ++o)
      if (o != q && o != rank_) ACCRUN_RETURN_IF_ERROR(check_one(o));
    return Status::ok();
  }
  Status check_one(int q) const {
    if (const std::uint32_t code = ctrl(q).broken.load(std::memory_order_acquire); code != 0) {
      const Code c = static_cast<Code>(code) == Code::kTimeout ? Code::kTimeout : Code::kRemote;
      return Status(c, where() + ": " + op_ + ": group rank " + std::to_string(q) + " gave up: " +
                           std::string(ctrl(q).reason, strnlen(ctrl(q).reason, sizeof ctrl(q).reason)));
    }
    const Member& m = members_[static_cast<std::size_t>(q)];
    if (peers_ != nullptr) {
      if (auto why = peers_->failure(m.job_rank)) {
        return remote_error(where() + ": " + op_ + ": peer group rank " + std::to_string(q) + " (job rank " +
                            std::to_string(m.job_rank) + (m.host.empty() ? "" : " on " + m.host) + ") failed: " + *why);
      }
    }
    if (m.pid > 0 && m.pid != self_pid_ && kill(static_cast<pid_t>(m.pid), 0) != 0 && errno == ESRCH) {
      return remote_error(where() + ": " + op_ + ": peer group rank " + std::to_string(q) + " (job rank " +
                          std::to_string(m.job_rank) + ", pid " + std::to_string(m.pid) + ") is gone");
    }
    return Status::ok();
  }

  Status do_recv(void* buf, std::size_t max_bytes, int peer) {
    RingCtrl& rc = ring_ctrl(peer, rank_);
    const std::uint64_t head = rc.head.load(std::memory_order_relaxed);
    Status s = wait_until([&] { return rc.tail.load(std::memory_order_acquire) > head; },
                          [&] { return check_peer(peer); }, deadline_from_now(), "recv");
    if (!s) return s;
    Frame f;
    ring_read(peer, rank_, head, &f, sizeof f);
    if (f.len > max_bytes) {
      return invalid_argument(where() + ": recv from " + std::to_string(peer) + ": the message has " +
                              std::to_string(f.len) + " bytes, the buffer " + std::to_string(max_bytes) +
                              " (it stays queued)");
    }
    if (f.kind == kFrameInline) {
      ring_read(peer, rank_, head + sizeof f, buf, f.len);
      rc.head.store(head + sizeof f + round_up(f.len, 8), std::memory_order_release);
      return Status::ok();
    }
    const std::string path = spill_path(peer, f.id);
    Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) return system_error(where() + ": recv from " + std::to_string(peer) + ": open " + path);
    if (f.len > 0) {
      void* p = mmap(nullptr, f.len, PROT_READ, MAP_SHARED, fd.get(), 0);
      if (p == MAP_FAILED) return system_error(where() + ": recv: mmap " + path);
      std::memcpy(buf, p, f.len);
      munmap(p, f.len);
    }
    unlink(path.c_str());
    rc.head.store(head + sizeof f, std::memory_order_release);
    return Status::ok();
  }

  std::string name_;
  std::uint64_t epoch_;
  int rank_;
  int size_;
  std::vector<Member> members_;
  bool oversubscribed_;
  int timeout_ms_;
  const PeerMonitor* peers_;
  Tuning tun_;
  long self_pid_;

  Mapping seg_;
  std::size_t half_ = 0, ring_bytes_ = 0;
  std::size_t ctrl_off_ = 0, slots_off_ = 0, rctrl_off_ = 0, rings_off_ = 0;
  std::string spill_prefix_;
  std::uint64_t next_spill_id_ = 0;

  std::uint64_t seq_ = 0;          // this rank's last published value
  std::uint64_t round_ = 0;        // data rounds so far; the half is round_ & 1
  std::uint64_t reuse_need_[2] = {0, 0};
  std::uint64_t known_min_ = 0;    // every rank's seq is known to be at least this
  // The broadcast rings: 0 for messages up to bcast_small_max, 1 chunked.
  struct BRing {
    std::size_t off = 0, data = 0, stride = 0, slots = 0;  // geometry in the segment
    std::uint64_t step = 0;       // chunks through this ring so far (the same on every rank)
    std::uint64_t known_min = 0;  // every rank's bc_done for it is known to be at least this
    BSlot* slot(char* base, std::uint64_t t) const {
      return reinterpret_cast<BSlot*>(base + off + static_cast<std::size_t>(t % slots) * stride);
    }
  };
  BRing bring_[2];
  const char* op_ = "setup";
  bool ok_ = true;
  bool use_cma_ = false;           // every member can read every other's memory
  Status broken_;
  int group_depth_ = 0;
  std::vector<PendingRecv> pending_;
};

}  // namespace

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
  for (int q = 0; q < ctx.size; ++q) {
    const Member& m = ctx.members[static_cast<std::size_t>(q)];
    if (m.host != my_host) {
      return not_supported(where + ": the store backend spans one host so far; group rank " + std::to_string(q) +
                           " is on " + m.host + ", this rank on " + my_host +
                           " (the TCP transport is not built yet; use the mpi backend across hosts)");
    }
  }
  auto backend = std::make_unique<StoreBackend>(ctx, tuning);
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
  log(LogLevel::kDebug, "group %s: store backend ready (%d ranks)", ctx.name.c_str(), ctx.size);
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace store

Result<std::unique_ptr<Backend>> make_store_backend(const GroupContext& ctx) {
  return store::make_store_backend_tuned(ctx, store::Tuning{});
}

}  // namespace accrun::collectives
