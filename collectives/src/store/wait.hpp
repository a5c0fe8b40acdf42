// Waiting on shared memory: a bounded spin, then yields, then growing sleeps.
#pragma once

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
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

struct Waiter {
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
  // Every millisecond or so it asks check() whether a peer it waits for has
  // failed (a non-ok Status ends the wait), and past the deadline returns
  // timed_out().  A failure is the wait's only when ready() is still false
  // after check() saw it: a peer may put what this member waits for in
  // place and exit (a broadcast's root runs ahead of its readers) between
  // the last ready() and check().
  template <class Ready, class Check, class TimedOut>
  Status until(Ready ready, Check check, Clock::time_point deadline, TimedOut timed_out) const {
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
    auto next_check = start;
    for (;;) {
      if (ready()) return Status::ok();
      const auto now = Clock::now();
      if (now >= next_check) {
        Status s = check();
        if (!s) return ready() ? Status::ok() : s;
        if (now >= deadline) return ready() ? Status::ok() : timed_out();
        next_check = now + std::chrono::milliseconds(1);
      }
      const auto waited = now - start;
      if (patient || (crowded && waited >= std::chrono::microseconds(100))) {
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
