// call_lock.hpp — the lock that serialises the calls on one group handle.
//
// Calls on a group nearly always come from one thread, the one that made
// it.  A locked instruction per call would cost that thread more than the
// lock itself: on x86 it waits for every earlier store to reach the cache,
// and a store to a line another core reads (a broadcast root's slot, a
// box) takes as long as a round trip between the cores.  Without one, the
// thread goes on to its next call while the line travels, as an MPI
// library without thread support does.  So the lock is biased to the
// thread that made the handle: that thread holds it with plain stores
// while no other thread has wanted it.
//
// The first other thread that does takes the bias away for good: it holds
// the word lock, clears `biased_`, runs membarrier(2) so that every thread
// of the process passes a full memory barrier, and waits for `busy_` to
// drop.  After that the owner sees the bias gone and takes the word lock
// like every other thread.  (The owner stores `busy_` and then loads
// `biased_`; the taker stores `biased_`, the membarrier orders the
// owner's two accesses for it, and it loads `busy_`: one of the two sees
// the other's store.)  Where the expedited membarrier is missing (kernels
// before 4.14, a seccomp filter) no lock is biased.
#pragma once

#include <atomic>

namespace accrun::runtime {

// A mutex of one word: one compare-and-swap to take and one exchange to
// release when nobody waits; waiters sleep in atomic::wait (a futex).
class WordLock {
 public:
  void lock() noexcept {
    int seen = kFree;
    if (state_.compare_exchange_strong(seen, kHeld, std::memory_order_acquire)) return;
    if (seen != kContended) seen = state_.exchange(kContended, std::memory_order_acquire);
    while (seen != kFree) {
      state_.wait(kContended, std::memory_order_relaxed);
      seen = state_.exchange(kContended, std::memory_order_acquire);
    }
  }
  void unlock() noexcept {
    if (state_.exchange(kFree, std::memory_order_release) == kContended) state_.notify_one();
  }

 private:
  static constexpr int kFree = 0, kHeld = 1, kContended = 2;
  std::atomic<int> state_{kFree};
};

// This thread, as its thread pointer: no call, no TLS lookup.
inline const void* this_thread_mark() noexcept { return __builtin_thread_pointer(); }

// Whether locks may be biased in this process: registers it for
// membarrier's private expedited command the first time it is asked.
bool call_lock_bias_available() noexcept;

class CallLock {
 public:
  // Biased to the calling thread where membarrier allows it (bias false:
  // never biased).
  explicit CallLock(bool bias = call_lock_bias_available()) noexcept
      : owner_(this_thread_mark()), biased_(bias) {}
  CallLock(const CallLock&) = delete;
  CallLock& operator=(const CallLock&) = delete;

  void lock() noexcept {
    if (owner_ == this_thread_mark() && biased_.load(std::memory_order_relaxed)) {
      busy_.store(1, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);  // the taker's membarrier is the fence
      if (biased_.load(std::memory_order_relaxed)) [[likely]]
        return;
      release_busy();  // taken away meanwhile: its taker may wait for this
    }
    word_.lock();
    if (biased_.load(std::memory_order_relaxed)) [[unlikely]]
      take_bias();
  }

  // (busy_ is set only by the owner holding the lock biased: no flag of
  // its own, one store fewer a call.)
  void unlock() noexcept {
    if (owner_ == this_thread_mark() && busy_.load(std::memory_order_relaxed) != 0) {
      release_busy();
      return;
    }
    word_.unlock();
  }

  bool biased() const noexcept { return biased_.load(std::memory_order_relaxed); }

 private:
  void release_busy() noexcept {
    busy_.store(0, std::memory_order_release);
    // A taker has cleared biased_ before its membarrier; were this load
    // to miss it, the store above would be visible to the taker's own load.
    if (!biased_.load(std::memory_order_relaxed)) busy_.notify_all();
  }
  void take_bias() noexcept;  // holding word_

  const void* const owner_;
  std::atomic<bool> biased_;
  std::atomic<int> busy_{0};  // the owner holds the lock biased (written by the owner only)
  WordLock word_;
};

}  // namespace accrun::runtime
