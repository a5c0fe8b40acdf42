// The call lock of a group handle (runtime/src/call_lock.hpp): biased to
// the thread that made it, taken from it by the first other thread, and a
// mutex throughout.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "call_lock.hpp"

namespace {

using accrun::runtime::CallLock;
using namespace std::chrono_literals;

TEST(CallLock, BiasedWhereMembarrierAllows) {
  if (!accrun::runtime::call_lock_bias_available())
    GTEST_SKIP() << "membarrier's private expedited command is missing here: no lock is biased";
  CallLock lock;
  EXPECT_TRUE(lock.biased());
  for (int i = 0; i < 1000; ++i) {
    lock.lock();
    lock.unlock();
  }
  EXPECT_TRUE(lock.biased()) << "the owner's own calls keep the bias";
}

// With the lock held by this thread: another thread that wants it waits
// until this one lets it go, then gets it.
void expect_another_thread_waits(CallLock& lock, const char* held) {
  std::atomic<bool> got{false};
  std::thread other([&] {
    lock.lock();
    got = true;
    lock.unlock();
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(got.load()) << "a second thread got the lock while the owner held it " << held;
  lock.unlock();
  other.join();
  EXPECT_TRUE(got.load()) << held;
}

// Another thread that wants the lock while the owner holds it (biased)
// waits for the owner's unlock, and the bias is gone from then on; the
// owner then takes the word lock, and another thread still waits for it.
TEST(CallLock, AnotherThreadWaitsForTheOwnersCall) {
  CallLock lock;
  lock.lock();
  expect_another_thread_waits(lock, "biased");
  EXPECT_FALSE(lock.biased());
  lock.lock();
  expect_another_thread_waits(lock, "through the word lock");
}

// Mutual exclusion while the bias is taken away in the middle of the
// owner's calls: counts kept without atomics come out exact, and no two
// holders are ever inside at once.
void hammer(bool bias) {
  CallLock lock(bias);
  long count = 0;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  constexpr int kOwnerCalls = 400000, kOtherCalls = 20000, kOthers = 3;
  // (No locked instruction in here: one would be the fence the biased
  // path does without.)
  auto body = [&] {
    if (inside.load(std::memory_order_relaxed) != 0) overlaps.store(1, std::memory_order_relaxed);
    inside.store(1, std::memory_order_relaxed);
    ++count;
    inside.store(0, std::memory_order_relaxed);
  };
  std::vector<std::thread> others;
  std::atomic<bool> go{false};
  for (int t = 0; t < kOthers; ++t)
    others.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < kOtherCalls; ++i) {
        lock.lock();
        body();
        lock.unlock();
      }
    });
  for (int i = 0; i < kOwnerCalls; ++i) {
    if (i == kOwnerCalls / 10) go = true;  // the others come in while the owner is busy
    lock.lock();
    body();
    lock.unlock();
  }
  for (auto& t : others) t.join();
  EXPECT_EQ(count, long{kOwnerCalls} + long{kOtherCalls} * kOthers);
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_FALSE(lock.biased());
}

TEST(CallLock, ExclusiveWhileTheBiasIsTakenAway) { hammer(true); }
TEST(CallLock, ExclusiveUnbiased) { hammer(false); }

}  // namespace
