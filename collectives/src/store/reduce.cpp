// The reduction family over the shared-memory rounds: allreduce, reduce,
// reducescatter.  Every rank reduces the parts in rank order, so all ranks
// get bit-identical results.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "store/copy.hpp"
#include "store/group.hpp"

namespace accrun::collectives::store {

Status StoreGroup::allreduce(const void* send, void* recv, std::size_t count, DType dt, Op op, void* stream) {
  ACCRUN_RETURN_IF_ERROR(enter("allreduce", stream));
  ACCRUN_RETURN_IF_ERROR(check_buffers(send, recv, count, dtype_size(dt)));
  return reduce_to(static_cast<const char*>(send), static_cast<char*>(recv), count, dt, op, -1);
}

Status StoreGroup::reduce(const void* send, void* recv, std::size_t count, DType dt, Op op, int root, void* stream) {
  ACCRUN_RETURN_IF_ERROR(enter("reduce", stream));
  ACCRUN_RETURN_IF_ERROR(check_rank(root, "root"));
  ACCRUN_RETURN_IF_ERROR(check_buffers(send, rank_ == root ? recv : send, count, dtype_size(dt)));
  return reduce_to(static_cast<const char*>(send), static_cast<char*>(recv), count, dt, op, root);
}

// Allreduce (root < 0) and reduce: every rank takes part in every round; the
// ranks that want the result (all, or the root) read it.
Status StoreGroup::reduce_to(const char* in, char* out, std::size_t count, DType dt, Op op, int root) {
  const std::size_t ds = dtype_size(dt);
  const std::size_t bytes = count * ds;
  if (bytes == 0) return Status::ok();
  if (size_ == 1) {
    if (in != out) copy_block(out, in, bytes);
    return Status::ok();
  }
  const bool wants = root < 0 || rank_ == root;
  sign(root < 0 ? Coll::kAllreduce : Coll::kReduce, count, dt, op, root);

  if (bytes <= kBoxBytes) {
    const int h = begin_round();
    if (!ok_) return broken_;
    copy_block(box(rank_, h), in, bytes);
    const std::uint64_t v = publish_box(h);
    if (wants) {
      ACCRUN_RETURN_IF_ERROR(wait_boxes(h, v));
      reduce_parts(dt, op, out, count, [&](int q) { return box(q, h); });
    } else {
      // The root this member names checks every signature; this member
      // checks that root's, so members that disagree on the root fail too.
      ACCRUN_RETURN_IF_ERROR(guard(wait_box(root, h, v, false)));
      ACCRUN_RETURN_IF_ERROR(check_box_sig(root, h));
    }
    end_round();
    return Status::ok();
  }
  if (bytes <= shm_->half() && allreduce_in_one_round(tun_, bytes, size_, shm_->waiter().oversubscribed)) {
    // One round: every rank copies in, then reduces every slot.  Published
    // in the box, as above: the line a reader waits on holds the signature
    // it checks next.
    const int h = begin_round();
    if (!ok_) return broken_;
    copy_block(slot(rank_, h), in, bytes);
    const std::uint64_t v = publish_box(h);
    if (wants) {
      ACCRUN_RETURN_IF_ERROR(wait_boxes(h, v));
      reduce_parts(dt, op, out, count, [&](int q) { return slot(q, h); });
    } else {
      ACCRUN_RETURN_IF_ERROR(guard(wait_box(root, h, v, false)));  // as above
      ACCRUN_RETURN_IF_ERROR(check_box_sig(root, h));
    }
    end_round();
    return Status::ok();
  }
  const std::size_t cma_min =
      shm_->waiter().oversubscribed ? tun_.allreduce_over_cma_min : tun_.allreduce_cma_min;
  if (root < 0 && shm_->cma() && bytes >= cma_min) return allreduce_cma(in, out, count, dt, op);
  // Reduce-scatter + allgather per chunk: each rank reduces one slice of the
  // chunk (its own data first, then the others in rank order) into its own
  // half, then the ranks that want the result copy all slices out.  Only
  // the slices the others reduce are copied in: this rank's own is read
  // where it lies, and its half takes the result (at 2 ranks 4.5 passes
  // over the chunk's bytes instead of 5.5).
  const std::size_t chunk = chunk_elems(tun_.allreduce_chunk, tun_.allreduce_round_bytes, ds);
  for (std::size_t off = 0; off < count; off += chunk) {
    const std::size_t n = std::min(chunk, count - off);
    const int h = begin_round();
    if (!ok_) return broken_;
    for (int q = 0; q < size_; ++q) {
      auto [qlo, qhi] = slice(n, ds, q);
      if (q != rank_ && qhi > qlo)
        copy_block(slot(rank_, h) + qlo * ds, in + (off + qlo) * ds, (qhi - qlo) * ds);
    }
    const std::uint64_t a = publish();
    auto [lo, hi] = slice(n, ds, rank_);
    const char* acc = in + (off + lo) * ds;
    for (int i = 1; i < size_; ++i) {
      const int q = (rank_ + i) % size_;
      ACCRUN_RETURN_IF_ERROR(guard(wait_one(q, a)));
      if (off == 0) ACCRUN_RETURN_IF_ERROR(check_box_sig(q, h));
      if (hi > lo)
        reduce_pair(dt, op, slot(rank_, h) + lo * ds, acc, slot(q, h) + lo * ds, hi - lo);
      acc = slot(rank_, h) + lo * ds;
    }
    const std::uint64_t b = publish();
    for (int i = 0; i < size_ && wants; ++i) {
      const int q = (rank_ + i) % size_;
      if (q != rank_) ACCRUN_RETURN_IF_ERROR(guard(wait_one(q, b)));
      auto [qlo, qhi] = slice(n, ds, q);
      if (qhi > qlo) copy_block(out + (off + qlo) * ds, slot(q, h) + qlo * ds, (qhi - qlo) * ds);
    }
    end_round();
  }
  return Status::ok();
}

Status StoreGroup::allreduce_around(const void* send, void* recv, std::size_t count, DType dt, Op op,
                                    const Between& between) {
  ACCRUN_RETURN_IF_ERROR(enter("allreduce", nullptr));
  const std::size_t ds = dtype_size(dt);
  ACCRUN_RETURN_IF_ERROR(check_buffers(send, recv, count, ds));
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  if (count == 0) return Status::ok();
  if (size_ == 1) {
    if (in != out) copy_block(out, in, count * ds);
    return between(out, count);
  }
  if (!shm_->cma()) return invalid_usage(where() + ": allreduce_around needs cross-memory attach");
  sign(Coll::kAllreduce, count, dt, op, -1);
  return allreduce_cma(in, out, count, dt, op, &between);
}

// Allreduce by cross-memory attach: three synchronisations whatever the
// size.  Rank r reduces slice r from every rank's send buffer (its own
// first, the others in rank order) into its recv buffer, then every rank
// reads the other slices from their owners' recv buffers; the last step
// keeps every buffer alive until all reads are done.  `between`, when
// given, runs on this rank's reduced slice before the others read it.
Status StoreGroup::allreduce_cma(const char* in, char* out, std::size_t count, DType dt, Op op,
                                 const Between* between) {
  const std::size_t ds = dtype_size(dt);
  const int h = begin_round();
  if (!ok_) return broken_;
  const std::uint64_t mine[2] = {reinterpret_cast<std::uint64_t>(in), reinterpret_cast<std::uint64_t>(out)};
  std::memcpy(box(rank_, h), mine, sizeof mine);
  const std::uint64_t v = publish_box(h);
  std::vector<std::uint64_t> send_at(static_cast<std::size_t>(size_)), recv_at(send_at.size());
  for (int q = 0; q < size_; ++q) {
    if (q != rank_) {
      ACCRUN_RETURN_IF_ERROR(guard(wait_box(q, h, v)));
      ACCRUN_RETURN_IF_ERROR(check_box_sig(q, h));
    }
    std::uint64_t a[2];
    std::memcpy(a, box(q, h), sizeof a);
    send_at[q] = a[0];
    recv_at[q] = a[1];
  }
  auto [lo, hi] = slice(count, ds, rank_);
  if (hi > lo) {
    if (in != out) copy_block(out + lo * ds, in + lo * ds, (hi - lo) * ds);
    // This round's half of the slot is free: a bounce buffer.
    char* tmp = slot(rank_, h);
    const std::size_t step = std::max<std::size_t>(1, shm_->half() / ds);
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      for (std::size_t off = lo; off < hi; off += step) {
        const std::size_t n = std::min(step, hi - off);
        ACCRUN_RETURN_IF_ERROR(guard(shm_->cma_read(q, tmp, send_at[q] + off * ds, n * ds, op_)));
        reduce_into(dt, op, out + off * ds, tmp, n);
      }
    }
  }
  if (between != nullptr) {
    // A failure here is the caller's to report (it gives up on the group).
    if (Status s = (*between)(out + lo * ds, hi - lo); !s) return s;
  }
  const std::uint64_t a = publish();
  ACCRUN_RETURN_IF_ERROR(guard(wait_all(a)));
  for (int i = 1; i < size_; ++i) {
    const int q = (rank_ + i) % size_;
    auto [qlo, qhi] = slice(count, ds, q);
    if (qhi > qlo)
      ACCRUN_RETURN_IF_ERROR(guard(shm_->cma_read(q, out + qlo * ds, recv_at[q] + qlo * ds, (qhi - qlo) * ds, op_)));
  }
  const std::uint64_t b = publish();
  ACCRUN_RETURN_IF_ERROR(guard(wait_all(b)));
  end_round();
  return Status::ok();
}

Status StoreGroup::reducescatter(const void* send, void* recv, std::size_t recv_count, DType dt, Op op,
                                 void* stream) {
  ACCRUN_RETURN_IF_ERROR(enter("reducescatter", stream));
  const std::size_t ds = dtype_size(dt);
  ACCRUN_RETURN_IF_ERROR(check_buffers(send, recv, recv_count, ds));
  if (recv_count == 0) return Status::ok();
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  if (size_ == 1) {
    if (in != out) copy_block(out, in, recv_count * ds);
    return Status::ok();
  }
  sign(Coll::kReducescatter, recv_count, dt, op, -1);
  // Each round packs this rank's contribution to every other rank's block
  // into its half; rank r then reduces block r of every half, its own
  // contribution read where it lies.  In place, the result lands at the
  // start of recv; each round reads the input before any output of that
  // range is written (rank 0's own block is that range itself).  Where the
  // result goes over this rank's own block anywhere else (in place as NCCL
  // has it, recv == send + rank x recv_count, which the NCCL backend's
  // staging passes on), that block is packed too, before the round writes.
  const std::uintptr_t own = reinterpret_cast<std::uintptr_t>(in) + rank_ * recv_count * ds;
  const std::uintptr_t res = reinterpret_cast<std::uintptr_t>(out), len = recv_count * ds;
  const bool direct = !(res < own + len && own < res + len) || (rank_ == 0 && res == own);
  const std::size_t chunk = std::max<std::size_t>(1, shm_->half() / ds / static_cast<std::size_t>(size_));
  for (std::size_t off = 0; off < recv_count; off += chunk) {
    const std::size_t n = std::min(chunk, recv_count - off);
    const int h = begin_round();
    if (!ok_) return broken_;
    for (int q = 0; q < size_; ++q)
      if (q != rank_ || !direct)
        copy_block(slot(rank_, h) + q * n * ds, in + (q * recv_count + off) * ds, n * ds);
    const std::uint64_t v = publish();
    ACCRUN_RETURN_IF_ERROR(guard(wait_all(v)));
    if (off == 0) ACCRUN_RETURN_IF_ERROR(check_all_sigs(h));
    char* dst = out + off * ds;
    reduce_parts(dt, op, dst, n, [&](int q) -> const char* {
      return q == rank_ && direct ? in + (q * recv_count + off) * ds : slot(q, h) + rank_ * n * ds;
    });
    end_round();
  }
  return Status::ok();
}

}  // namespace accrun::collectives::store
