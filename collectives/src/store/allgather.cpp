// Allgather, the ranges members share, and barrier over the shared-memory
// rounds.
#include <algorithm>
#include <cstring>
#include <vector>

#include "store/copy.hpp"
#include "store/group.hpp"

namespace accrun::collectives::store {

Status StoreGroup::allgather(const void* send, void* recv, std::size_t count_per_rank, DType dt, void* stream) {
  ACCRUN_RETURN_IF_ERROR(enter("allgather", stream));
  const std::size_t ds = dtype_size(dt);
  ACCRUN_RETURN_IF_ERROR(check_buffers(send, recv, count_per_rank, ds));
  if (count_per_rank == 0) return Status::ok();
  const std::size_t m = count_per_rank * ds;
  char* out = static_cast<char*>(recv);
  // In place: this rank's part already sits at recv + rank * m.
  const char* given = send == recv ? out + rank_ * m : static_cast<const char*>(send);
  const char* mine = out + rank_ * m;
  auto copy_mine = [&] {
    if (given != mine) std::memmove(out + rank_ * m, given, m);
  };
  if (size_ == 1) return copy_mine(), Status::ok();
  sign(Coll::kAllgather, count_per_rank, dt, Op::kSum, -1);
  const std::size_t cma_min =
      shm_->waiter().oversubscribed ? tun_.allgather_over_cma_min : tun_.allgather_cma_min;
  if (shm_->cma() && m >= cma_min) {
    // Single copy: the others read this rank's part where the caller gave
    // it (the send buffer, untouched by this call: reading lines another
    // core has just written costs twice as much), while this rank copies
    // its own part and then reads theirs.
    // A send buffer that overlaps the receive buffer elsewhere than this
    // rank's part would change under the others' reads: copied first, and
    // read from its place in the receive buffer.
    const char* end = out + static_cast<std::size_t>(size_) * m;
    const bool overlaps = given != mine && given < end && given + m > out;
    if (overlaps) copy_mine();
    const int h = begin_round();
    if (!ok_) return broken_;
    const std::uint64_t addr = reinterpret_cast<std::uint64_t>(overlaps ? mine : given);
    std::memcpy(box(rank_, h), &addr, sizeof addr);
    const std::uint64_t v = publish_box(h);
    if (!overlaps) copy_mine();
    for (int i = 1; i < size_; ++i) {
      const int q = (rank_ + i) % size_;
      std::uint64_t qa;
      ACCRUN_RETURN_IF_ERROR(peer_address(q, h, v, &qa));
      ACCRUN_RETURN_IF_ERROR(guard(shm_->cma_read(q, out + q * m, qa, m, op_)));
    }
    const std::uint64_t c = publish();
    ACCRUN_RETURN_IF_ERROR(guard(wait_all(c)));  // nobody reuses its buffer while others read it
    end_round();
    return Status::ok();
  }
  copy_mine();
  if (m <= kBoxBytes) {
    const int h = begin_round();
    if (!ok_) return broken_;
    copy_block(box(rank_, h), mine, m);
    const std::uint64_t v = publish_box(h);
    for (int i = 1; i < size_; ++i) {
      const int q = (rank_ + i) % size_;
      ACCRUN_RETURN_IF_ERROR(guard(wait_box(q, h, v)));
      ACCRUN_RETURN_IF_ERROR(check_box_sig(q, h));
      copy_block(out + q * m, box(q, h), m);
    }
    saw_all(v);
    end_round();
    return Status::ok();
  }
  const std::size_t chunk = chunk_elems(tun_.allgather_chunk, tun_.allgather_round_bytes, ds) * ds;
  for (std::size_t off = 0; off < m; off += chunk) {
    const std::size_t n = std::min(chunk, m - off);
    const int h = begin_round();
    if (!ok_) return broken_;
    copy_block(slot(rank_, h), mine + off, n);
    const std::uint64_t v = publish();
    for (int i = 1; i < size_; ++i) {
      const int q = (rank_ + i) % size_;
      ACCRUN_RETURN_IF_ERROR(guard(wait_one(q, v)));
      if (off == 0) ACCRUN_RETURN_IF_ERROR(check_box_sig(q, h));
      copy_block(out + q * m + off, slot(q, h), n);
    }
    end_round();
  }
  return Status::ok();
}

Status StoreGroup::peer_address(int q, int h, std::uint64_t v, std::uint64_t* addr) {
  ACCRUN_RETURN_IF_ERROR(guard(wait_box(q, h, v)));
  ACCRUN_RETURN_IF_ERROR(check_box_sig(q, h));
  std::memcpy(addr, box(q, h), sizeof *addr);
  return Status::ok();
}

Status StoreGroup::share_ranges(char* buf, std::size_t count, DType dt, const Owned& owned) {
  ACCRUN_RETURN_IF_ERROR(enter("allgather", nullptr));
  if (size_ == 1) return Status::ok();
  if (!shm_->cma()) return invalid_usage(where() + ": share_ranges needs cross-memory attach");
  sign(Coll::kAllgather, count, dt, Op::kSum, -1);
  // On an oversubscribed host, through the slots: every byte is copied
  // twice, but by memcpy from lines in the cache, where a cross-memory
  // read pins each page of a buffer the kernel has just filled from the
  // network and copies it without streaming stores (4 hosts x 2 ranks on
  // 2 CPUs, 512 KiB-4 MiB per rank: 5-9 % faster; benchmarks/README.md).
  if (shm_->waiter().oversubscribed) return share_in_rounds(buf, owned);
  const int h = begin_round();
  if (!ok_) return broken_;
  const std::uint64_t addr = reinterpret_cast<std::uint64_t>(buf);
  std::memcpy(box(rank_, h), &addr, sizeof addr);
  const std::uint64_t v = publish_box(h);
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  for (int i = 1; i < size_; ++i) {
    const int q = (rank_ + i) % size_;
    std::uint64_t qa;
    ACCRUN_RETURN_IF_ERROR(peer_address(q, h, v, &qa));
    ranges.clear();
    owned(q, &ranges);
    for (const auto& [off, len] : ranges)
      ACCRUN_RETURN_IF_ERROR(guard(shm_->cma_read(q, buf + off, qa + off, len, op_)));
  }
  const std::uint64_t c = publish();
  ACCRUN_RETURN_IF_ERROR(guard(wait_all(c)));  // nobody reuses its buffer while others read it
  end_round();
  return Status::ok();
}

// Member q's ranges, in order, are its stream; round k carries bytes
// [k * C, (k + 1) * C) of every member's stream through the members' slot
// halves (C: a half).  Every member knows every member's ranges, so all
// make the same number of rounds.
Status StoreGroup::share_in_rounds(char* buf, const Owned& owned) {
  using Ranges = std::vector<std::pair<std::size_t, std::size_t>>;
  std::vector<Ranges> all(static_cast<std::size_t>(size_));
  std::vector<std::size_t> total(static_cast<std::size_t>(size_), 0);
  std::size_t most = 0;
  for (int q = 0; q < size_; ++q) {
    const auto i = static_cast<std::size_t>(q);
    owned(q, &all[i]);
    for (const auto& r : all[i]) total[i] += r.second;
    most = std::max(most, total[i]);
  }
  const std::size_t chunk = shm_->half();
  // fn(offset in buf, offset in the round's piece, length) over the stream
  // bytes [from, from + n) of `ranges`.
  auto walk = [](const Ranges& ranges, std::size_t from, std::size_t n, auto fn) {
    std::size_t pos = 0, done = 0;
    for (const auto& [off, len] : ranges) {
      if (done == n) break;
      if (pos + len > from) {
        const std::size_t skip = from > pos ? from - pos : 0;
        const std::size_t take = std::min(len - skip, n - done);
        fn(off + skip, done, take);
        done += take;
      }
      pos += len;
    }
  };
  for (std::size_t from = 0; from < most; from += chunk) {
    auto piece = [&](int q) {
      const std::size_t t = total[static_cast<std::size_t>(q)];
      return t > from ? std::min(chunk, t - from) : 0;
    };
    const int h = begin_round();
    if (!ok_) return broken_;
    char* mine = slot(rank_, h);
    walk(all[static_cast<std::size_t>(rank_)], from, piece(rank_),
         [&](std::size_t o, std::size_t at, std::size_t len) {
           copy_block(mine + at, buf + o, len);
         });
    const std::uint64_t v = publish();
    for (int i = 1; i < size_; ++i) {
      const int q = (rank_ + i) % size_;
      ACCRUN_RETURN_IF_ERROR(guard(wait_one(q, v)));
      if (from == 0) ACCRUN_RETURN_IF_ERROR(check_box_sig(q, h));
      const char* theirs = slot(q, h);
      walk(all[static_cast<std::size_t>(q)], from, piece(q),
           [&](std::size_t o, std::size_t at, std::size_t len) {
             copy_block(buf + o, theirs + at, len);
           });
    }
    end_round();
  }
  return Status::ok();
}

Status StoreGroup::barrier() {
  ACCRUN_RETURN_IF_ERROR(enter("barrier", nullptr));
  if (size_ == 1) return Status::ok();
  // Each member marks its step as a barrier's: a bare step of the counters
  // is met by any collective's, so a member calling something else here
  // (or one that gave up and left) would let the barrier pass.  The mark
  // carries the member's count of broadcasts (those through the rings take
  // no step of the counters), so one that skipped or added a broadcast
  // fails here too, and its roots' fingerprint, so one that named another
  // root for a broadcast does.
  constexpr std::uint64_t kSteps = (std::uint64_t{1} << 40) - 1;
  constexpr std::uint64_t kRoots = std::uint64_t{0xff} << 40;
  const std::uint64_t calls = (bcast_calls_ & 0xffff) << kCallShift | std::uint64_t{bcast_roots_} << 40;
  shm_->ctrl(rank_).barrier_seq.store(calls | ((seq_ + 1) & kSteps), std::memory_order_relaxed);
  const std::uint64_t v = publish();
  ACCRUN_RETURN_IF_ERROR(guard(wait_all(v)));
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    const std::uint64_t mark = shm_->ctrl(q).barrier_seq.load(std::memory_order_relaxed);
    // (A member that has passed this barrier may be in the next one.)
    if ((mark & kSteps) > (v & kSteps)) continue;
    if ((mark & kSteps) == (v & kSteps)) {
      if ((mark & ~kSteps) == calls) continue;
      if ((mark & ~kSteps & ~kRoots) == (calls & ~kRoots)) return roots_differ(q);
      return out_of_order("barrier after " + std::to_string(bcast_calls_ & 0xffff) + " broadcasts on the group",
                          shm_->describe(q) + " after " + std::to_string(mark >> kCallShift));
    }
    // Its step came from another call: say why if it gave up or is gone.
    ACCRUN_RETURN_IF_ERROR(guard(shm_->check_peer(q, op_)));
    return out_of_order("barrier", shm_->describe(q) + " called another collective at this point");
  }
  return Status::ok();
}

}  // namespace accrun::collectives::store
