// Waiting on shared memory: a bounded spin, then yields, then growing sleeps;
// on an oversubscribed host a long call's waits sleep on the host's doorbell.
#pragma once

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>
#include <thread>

#include "accrun/backend.hpp"
#include "accrun/status.hpp"
#include "store/transport.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ACCRUN_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define ACCRUN_CPU_RELAX() asm volatile("yield" ::: "memory")
#else
#define ACCRUN_CPU_RELAX() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

namespace accrun::collectives::store {

// How often a wait asks whether the peers it waits for have failed, and
// when first: most waits end sooner, and a look can cost a system call per
// peer (kill(pid, 0)).  Every transport's wait keeps to it.
inline constexpr std::chrono::milliseconds kPeerCheck{1};

// Whether this member's waits should give its CPU away at once instead of
// spinning first: the launcher said its host has more ranks than slots
// (ACCRUN_OVERSUBSCRIBED), or more of the group's members share its host
// than the host has CPUs.  (Not the rank's affinity: a rank bound to one
// core is the normal case.)  Spinning there only keeps a CPU from the peers
// it waits for.
inline bool host_oversubscribed(const GroupContext& ctx) {
  if (ctx.oversubscribed) return true;
  const std::string& here = ctx.members[static_cast<std::size_t>(ctx.rank)].host;
  long sharing = 0;
  for (const Member& m : ctx.members) sharing += m.host == here ? 1 : 0;
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return cpus > 0 && sharing > cpus;
}

// A host's doorbell, in its shared segment: where the members of an
// oversubscribed host sleep while they wait (a futex shared between
// processes), instead of yielding their CPU by turns.  A member that
// publishes something another may wait for rings it; the ring costs a
// fence and a read of a line nobody writes unless someone sleeps.  No
// wake-up is lost: a sleeper counts itself before it reads `word` and
// looks at what it waits for, a ringer publishes before its fence and
// reads the count after it, so either the ringer sees the sleeper (and
// moves `word`, which the futex compares) or the sleeper sees what was
// published.  A sleep is bounded anyway (its caller's next check).
struct alignas(64) Doorbell {
  std::atomic<std::uint32_t> word;
  std::atomic<std::uint32_t> sleepers;

  void ring() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_relaxed) == 0) return;
    word.fetch_add(1, std::memory_order_seq_cst);
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
  // Sleeps until a ring or `ns` nanoseconds, unless ready() holds.
  template <class Ready>
  void sleep(Ready ready, long ns) {
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    const std::uint32_t seen = word.load(std::memory_order_seq_cst);
    if (!ready()) {
      const timespec ts{static_cast<time_t>(ns / 1'000'000'000), ns % 1'000'000'000};
      syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, seen, &ts, nullptr, 0);
    }
    sleepers.fetch_sub(1, std::memory_order_relaxed);
  }
};
static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t) &&
              std::atomic<std::uint32_t>::is_always_lock_free);

struct Waiter {
  // Whether this host's members may sleep on its doorbell (the host's part
  // of a group across hosts, oversubscribed); then, once the segment is
  // mapped, the doorbell.  Elsewhere nobody sleeps and nobody rings.
  bool doorbell = false;
  Doorbell* bell = nullptr;
  bool sleep = false;  // this call's waits sleep on the doorbell (set per call; needs bell)
  bool oversubscribed = false;  // yield at once instead of spinning
  bool patient = false;         // sleep at once instead of yielding (a group's set-up)
  bool crowded = false;         // several ranks per CPU: yield briefly, then sleep
  int spin_ns = 50'000;

  // The same waiter for a wait that happens once per group (its set-up):
  // no yields, which on a host with more ranks than cores keep every
  // waiting rank runnable and slow the ranks the wait is for; sleeps that
  // grow to a millisecond instead.
  Waiter patient_one() const {
    Waiter w = *this;
    w.patient = true;
    return w;
  }

  // Polls ready(): a bounded spin first (a wake-up costs tens of µs, a
  // small message far less), then yields, then sleeps in growing steps.
  // Every kPeerCheck, from kPeerCheck on, it asks check() whether a peer it
  // waits for has failed (a non-ok Status ends the wait), and past the
  // deadline returns timed_out().  (On an oversubscribed host checks at
  // once came to several system calls per broadcast.)  A failure is
  // the wait's only when ready() is still false after check() saw it: a
  // peer may put what this member waits for in place and exit (a
  // broadcast's root runs ahead of its readers) between the last ready()
  // and check().
  template <class Ready, class Check, class TimedOut>
  Status until(Ready ready, Check check, Clock::time_point deadline, TimedOut timed_out) const {
    if (ready()) return Status::ok();  // (most waits of a small call: before reading the clock)
    const auto start = Clock::now();
    if (!oversubscribed) {
      const auto spin_end = start + std::chrono::nanoseconds(spin_ns);
      for (;;) {
        for (int i = 0; i < 64; ++i) {
          if (ready()) return Status::ok();
          ACCRUN_CPU_RELAX();
        }
        if (Clock::now() >= spin_end) break;
      }
    }
    auto next_check = start + kPeerCheck;
    for (;;) {
      if (ready()) return Status::ok();
      const auto now = Clock::now();
      if (now >= next_check) {
        Status s = check();
        if (!s) return ready() ? Status::ok() : s;
        if (now >= deadline) return ready() ? Status::ok() : timed_out();
        next_check = now + kPeerCheck;
      }
      const auto waited = now - start;
      if (sleep) {
        // Until the next check: rung, or a millisecond at most.
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(next_check - now).count();
        bell->sleep(ready, std::clamp<long>(static_cast<long>(ns), 1000, 1'000'000));
      } else if (patient || (crowded && waited >= std::chrono::microseconds(100))) {
        std::this_thread::sleep_for(std::min<Clock::duration>(
            std::chrono::microseconds(50) + waited / 8, std::chrono::milliseconds(1)));
      } else if (oversubscribed || waited < std::chrono::milliseconds(2)) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(waited < std::chrono::milliseconds(50) ? std::chrono::microseconds(20)
                                                                          : std::chrono::microseconds(500));
      }
    }
  }
};

}  // namespace accrun::collectives::store
