// Private: the store backend's tuning knobs, for benchmarks and tests that
// sweep them.  Programs use make_store_backend() from <accrun/backend.hpp>.
#pragma once

#include <cstddef>
#include <memory>

#include "accrun/backend.hpp"

namespace accrun::collectives::store {

// Sizes in bytes.  Defaults were measured on a 2-core AMD EPYC VM
// (benchmarks/README.md); every chunk is at most half_bytes.
struct Tuning {
  std::size_t half_bytes = 256 * 1024;         // each rank's slot is two halves (double buffering)
  std::size_t allreduce_small_max = 16 * 1024; // up to this, every rank reduces every slot
  std::size_t allreduce_chunk = 64 * 1024;     // above it: reduce-scatter + allgather per chunk
  std::size_t bcast_chunk = 64 * 1024;
  std::size_t allgather_chunk = 64 * 1024;     // per rank and round
  std::size_t ring_bytes = 0;                  // per ordered pair; 0: by group size (64 KiB … 1 MiB)
  int spin_ns = 50'000;                        // busy-poll this long before yielding (not oversubscribed)
  // From this size, allreduce/reduce/broadcast/allgather read the peers' user
  // buffers directly with process_vm_readv (single copy, three
  // synchronisations per call) when every member can (checked at setup).
  std::size_t cma_min = 256 * 1024;
  bool cma = true;
};

Result<std::unique_ptr<Backend>> make_store_backend_tuned(const GroupContext& ctx, const Tuning& tuning);

}  // namespace accrun::collectives::store
