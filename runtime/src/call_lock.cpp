// call_lock.cpp — see call_lock.hpp.
#include "call_lock.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace accrun::runtime {

namespace {

long membarrier(int cmd) { return ::syscall(SYS_membarrier, cmd, 0, 0); }

}  // namespace

bool call_lock_bias_available() noexcept {
  static const bool available = [] {
    const long cmds = membarrier(MEMBARRIER_CMD_QUERY);
    return cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 &&
           membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
  }();
  return available;
}

void CallLock::take_bias() noexcept {
  biased_.store(false, std::memory_order_relaxed);
  // Every running thread of the process passes a full barrier: the owner
  // either sees biased_ cleared or has made busy_ visible.  (Once the
  // process registered it does not fail; a forked child inherits that.)
  std::atomic_thread_fence(std::memory_order_seq_cst);
  (void)membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
  for (int seen = busy_.load(std::memory_order_acquire); seen != 0; seen = busy_.load(std::memory_order_acquire))
    busy_.wait(seen, std::memory_order_acquire);
}

}  // namespace accrun::runtime
