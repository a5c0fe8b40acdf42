// The store's copies of large blocks between its shared-memory slots and
// the callers' buffers.
#pragma once

#include <cstddef>
#include <cstring>

namespace accrun::collectives::store {

// Blocks from this size are copied with vector loads and stores (copy.cpp).
constexpr std::size_t kVectorCopyMin = 4096;

void vector_copy(void* dst, const void* src, std::size_t n);

// memcpy for small blocks; from kVectorCopyMin a loop of vector moves.
// glibc copies blocks from 2 KiB with `rep movsb`; on an AMD EPYC host
// (measured under KVM) the store's 2-rank allreduce of 1 MiB took 3.0
// times raw MPI's time with it and 0.73 times with glibc's vector loop
// instead (GLIBC_TUNABLES x86_rep_movsb_threshold), in the same launch,
// though `rep movsb` alone, in one process, was fast there; with the slots
// moved off the callers' page offsets (ShmTransport::slot) the loop still
// beat it (benchmarks/README.md).
inline void copy_block(void* dst, const void* src, std::size_t n) {
  if (n < kVectorCopyMin) {
    std::memcpy(dst, src, n);
  } else {
    vector_copy(dst, src, n);
  }
}

}  // namespace accrun::collectives::store
