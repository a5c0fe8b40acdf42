// Private: the store backend's tuning knobs, for benchmarks and tests that
// sweep them.  Programs use make_store_backend() from <accrun/backend.hpp>.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "accrun/backend.hpp"

namespace accrun::collectives::store {

// Sizes in bytes.  Defaults were measured on a 2-core AMD EPYC VM
// (benchmarks/README.md); every chunk but bcast_chunk is at most half_bytes.
struct Tuning {
  std::size_t half_bytes = 256 * 1024;         // each rank's slot is two halves (double buffering)
  std::size_t allreduce_small_max = 16 * 1024; // up to this, every rank reduces every slot
  // With a CPU for every rank, a group of three or more on the host keeps
  // that one round only while the bytes each rank reads from the others'
  // slots beyond what the chunked rounds read, (size-1)(size-2)/size of
  // the message, stay within this: every line read was just written on
  // another core.  On 16 cores (store_micro, benchmarks/README.md) the
  // rounds won from 2 KiB at 4 and 8 ranks (4 ranks 2 KiB: 3.0 µs against
  // 4.5; 8 ranks 16 KiB: 13.6 against 47.9).
  std::size_t allreduce_small_extra_max = 2048;
  // Above allreduce_small_max: reduce-scatter + allgather per chunk of
  // this many bytes; 0: allreduce_round_bytes / members, at least 64 KiB
  // and at most half_bytes (so 256 KiB at 2 ranks, 128 KiB at 4, 64 KiB
  // from 8).  Fewer rounds are fewer synchronisations.  At 2 ranks on the
  // 2-CPU VM of 2026-12-07, whose speed moved by up to 4x between phases,
  // 256 KiB chunks beat 64 KiB ones at 256 KiB-4 MiB in every phase
  // (benchmarks/README.md).
  std::size_t allreduce_chunk = 0;
  std::size_t allreduce_round_bytes = 512 * 1024;
  // Broadcasts below bcast_cma_min (all, without CMA) stream through
  // group-wide rings: up to 8 bytes (kTinyBytes) a ring of bcast_tiny_slots
  // slots two to a cache line, up to bcast_small_max bytes a ring of
  // bcast_small_slots slots, above it chunks through a ring of bcast_slots
  // slots of bcast_chunk bytes.  A root runs up to that many chunks ahead
  // of its slowest reader.
  std::size_t bcast_tiny_slots = 256;
  std::size_t bcast_small_max = 1024;
  std::size_t bcast_small_slots = 128;
  std::size_t bcast_chunk = 16 * 1024;
  std::size_t bcast_slots = 32;
  // Per rank and round, in the rounds through the slots (an oversubscribed
  // host, or no CMA); 0: allgather_round_bytes / members, within the same
  // bounds (256 KiB at 2 and 4 ranks, 128 KiB at 8).  At 4 ranks on 2 CPUs,
  // 256 KiB-4 MiB per rank: 0.49-0.66 of raw MPI against 0.67-0.83 in
  // 64 KiB pieces.
  std::size_t allgather_chunk = 0;
  std::size_t allgather_round_bytes = 1024 * 1024;
  std::size_t ring_bytes = 0;                  // per ordered pair; 0: by group size (64 KiB … 1 MiB)
  int spin_ns = 50'000;                        // busy-poll this long before yielding (not oversubscribed)
  // In a group across hosts, on an oversubscribed host, calls whose
  // message (a rank's part, in allgather) has at least this many bytes
  // wait asleep (on the host's doorbell in shared memory, in poll on the
  // sockets between hosts) instead of yielding the CPU by turns: their
  // waits are for other hosts, long enough for a wake-up to pay.  Smaller
  // calls, and every call of a group on one host, whose waits are many and
  // short, still yield.
  std::size_t across_sleep_min = 512 * 1024;
  // Between hosts, a small broadcast's reader (a leader that only waits
  // for its host's part) pauses this long between looks at its socket
  // instead of looking without pause, where its host has a CPU for every
  // rank.  Every look is a system call on the socket the sender is
  // delivering into, and over veth the sender's CPU runs that delivery;
  // messages that come meanwhile are taken in one read.  2 hosts x 1 rank,
  // 8 B-1 KiB, against Open MPI in the same launch: 0.975-1.068 looking
  // without pause, 0.942-0.992 with 3 us (benchmarks/README.md); at most
  // 3 us more for a single broadcast, whose one-way trip takes 7.4 us
  // (Open MPI's 11.2 us).  0: look without pause.
  int across_reader_gap_ns = 3000;
  // A large broadcast between hosts runs down a chain of the hosts' leaders
  // in chunks, each host broadcasting a chunk inside as soon as its leader
  // has it.  A chunk costs every member of a host a wake-up and the leader
  // system calls; smaller chunks overlap the hops more.  Between 2 hosts x
  // 1 rank 512 KiB was fastest (4 MiB: 479 us against 544 in 256 KiB and
  // 506 in 1 MiB chunks).  Where any host is oversubscribed the hosts do
  // not move their chunks at the same time anyway, sharing CPUs: on 4
  // hosts x 2 ranks (8 ranks on 2 CPUs), 4 MiB, interleaved launches,
  // medians: 3,889 us in 512 KiB chunks against 3,416 in 1 MiB; 3,547 in
  // 1 MiB against 3,371 in 2 MiB; 3,069 in 2 MiB against 3,522 whole
  // (benchmarks/README.md).  Every host cuts the same chunks: the leaders
  // agree on whether any host is oversubscribed.
  std::size_t chain_chunk = 512 * 1024;
  std::size_t chain_chunk_oversubscribed = 2 * 1024 * 1024;
  // From this size, allreduce on a host with more ranks than CPUs reads
  // the peers' user buffers directly with process_vm_readv (single copy,
  // three synchronisations per call) when every member can (checked at
  // setup).
  std::size_t allreduce_over_cma_min = 256 * 1024;
  // Allreduce on a host with a CPU for every rank reads single copy from
  // this size: by default never.  There the chunked rounds, whose pieces
  // stay in the cache while both cores work on them, measured 0.72-0.99 of
  // raw MPI at 2 ranks, 256 KiB-16 MiB, against 1.04-1.59 single copy
  // (benchmarks/README.md); oversubscribed, single copy's three
  // synchronisations win (4 ranks on 2 CPUs, 1-4 MiB: 0.88-1.05 against
  // 1.14-1.37).
  std::size_t allreduce_cma_min = SIZE_MAX;
  // Allgather reads the others' parts from their send buffers, lines no
  // core has just written: with a CPU for every rank single copy wins from
  // 16 KiB here.
  std::size_t allgather_cma_min = 16 * 1024;
  // Oversubscribed, by default never: the rounds through the slots
  // measured 0.60-0.81 of raw MPI at 4 ranks on 2 CPUs, 256 KiB-4 MiB,
  // against 0.79-1.32 single copy (benchmarks/README.md).
  std::size_t allgather_over_cma_min = SIZE_MAX;
  bool cma = true;
  // Broadcast only: the rings beat single-copy reads through 4 MiB here
  // (benchmarks/README.md), so CMA is kept for larger messages.
  std::size_t bcast_cma_min = 16u << 20;
  // With one reader (two ranks) single copy from 32 KiB.  There the rings
  // depend on where the hypervisor runs the two CPUs: on the 2-CPU VM of
  // 2026-12-07, as raw MPI's one copy took 110-135 us for 1 MiB in every
  // launch, the rings took 50 us in some launches and 230-320 in others
  // (store/raw-mpi 1.3-2.2 at 1-8 MiB in 5 of 6 launches; 1.2-1.5 at 32
  // and 64 KiB in 6 of 11), while single copy stayed at 0.83-1.09 from 32
  // KiB to 4 MiB in every launch: its time follows raw MPI's.  (At 128-512
  // KiB it was also 30% faster than the rings on the VM of 2026-11-28.)
  // Several readers of the root's one buffer are slower than the rings:
  // on 16 cores 2.1x the rings' time at 3 ranks, 2.2-2.7x at 4, 4.5x at 8.
  std::size_t bcast_cma_mid_min = 32 * 1024;
  std::size_t bcast_cma_mid_max = 16u << 20;  // exclusive (bcast_cma_min takes over)
  // Send/recv: the bytes a sender keeps buffered in side files towards one
  // receiver; past it a send waits until the receiver has taken enough (a
  // larger message goes alone).  accrun_send(3).
  std::size_t pair_buffer_max = 64u << 20;
};

// Whether an allreduce (or reduce) of `bytes` on a host's `members` ranks
// takes the one round in which every rank reduces every slot.
inline bool allreduce_in_one_round(const Tuning& t, std::size_t bytes, int members, bool oversubscribed) {
  if (bytes > t.allreduce_small_max) return false;
  if (oversubscribed || members <= 2) return true;
  const auto m = static_cast<std::size_t>(members);
  return bytes * (m - 1) * (m - 2) / m <= t.allreduce_small_extra_max;
}

// Whether a broadcast of `bytes` on a host's `members` ranks reads the
// root's buffer single copy (given that every member can).
inline bool broadcast_single_copy(const Tuning& t, std::size_t bytes, int members) {
  return bytes >= t.bcast_cma_min || (members == 2 && bytes >= t.bcast_cma_mid_min && bytes < t.bcast_cma_mid_max);
}

Result<std::unique_ptr<Backend>> make_store_backend_tuned(const GroupContext& ctx, const Tuning& tuning);

}  // namespace accrun::collectives::store
