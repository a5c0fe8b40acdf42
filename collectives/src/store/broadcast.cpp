// Broadcast over the shared-memory transport.
//
// Below bcast_cma_min (all, without CMA), apart from the single-copy window
// [bcast_cma_mid_min, bcast_cma_mid_max) in a group of two on the host (from
// 32 KiB on, by default),
// chunks stream through one of three
// group-wide rings: messages of at most kTinyBytes (8) use a deep ring of
// 32-byte slots, two to a cache line (a root running ahead writes the
// second into a line it still holds: with one line per message a 2-rank
// broadcast of 8 B cost 0.19 µs a call, about the time a line takes to
// come back from the reader's core, against 0.12 with two), messages up to
// bcast_small_max a deep ring of small slots, larger ones go chunk by chunk
// through a ring of bcast_chunk slots.
// Every rank counts each ring's chunks (`step`) identically; chunk t goes to
// slot t % slots, stamped t + 1 with the call's signature.  The root of
// chunk t may overwrite that slot only once every rank's `bc_done` for that
// ring (chunks it has finished) reaches t - slots + 1.  So a root runs up to
// `slots` chunks ahead of its slowest reader, like an eager send, instead of
// two rounds: with more ranks than cores each call no longer costs a context
// switch.  It publishes nothing on `seq`, so the rounds of the other
// collectives stay in step.
#include <algorithm>
#include <cstring>

#include "store/copy.hpp"
#include "store/group.hpp"

namespace accrun::collectives::store {

Status StoreGroup::broadcast(void* buf, std::size_t count, DType dt, int root, void* stream) {
  ACCRUN_RETURN_IF_ERROR(enter("broadcast", stream));
  return broadcast_entered(buf, count, dt, root, count);
}

Status StoreGroup::broadcast_part(void* buf, std::size_t count, DType dt, int root, std::size_t whole) {
  ACCRUN_RETURN_IF_ERROR(enter("broadcast", nullptr));
  return broadcast_entered(buf, count, dt, root, whole);
}

// (A two-rank broadcast of a few bytes is bound by the root's own time
// per call: its path below keeps to one division-free pass.)
Status StoreGroup::broadcast_entered(void* buf, std::size_t count, DType dt, int root, std::size_t whole) {
  ACCRUN_RETURN_IF_ERROR(check_rank(root, "root"));
  const std::size_t ds = dtype_size(dt);
  ACCRUN_RETURN_IF_ERROR(check_buffers(buf, buf, count, ds));
  if (count == 0 || size_ == 1) return Status::ok();
  sign_broadcast(whole, dt, root);
  char* data = static_cast<char*>(buf);
  const std::size_t total = count * ds;
  if (shm_->cma() && broadcast_single_copy(tun_, total, size_)) {
    // Single copy: every other rank reads the root's buffer directly; the
    // root returns once all have read it.
    const int h = begin_round();
    if (!ok_) return broken_;
    if (rank_ == root) {
      const std::uint64_t addr = reinterpret_cast<std::uint64_t>(data);
      post_broadcast(h, &addr, sizeof addr);
    } else {
      std::uint64_t addr;
      ACCRUN_RETURN_IF_ERROR(read_root_box(root, h, &addr, sizeof addr));
      ACCRUN_RETURN_IF_ERROR(guard(shm_->cma_read(root, data, addr, count * ds, op_)));
    }
    return end_single_copy(root, h);
  }
  // Chunks stream through a broadcast ring (see the top of the file).
  const std::size_t bytes = count * ds;
  const int which = bytes <= kTinyBytes ? kTinyRing : bytes <= shm_->bring(kSmallRing).data ? kSmallRing : kChunkRing;
  const BRingGeom& r = shm_->bring(which);
  BRingState& st = bring_[which];
  const std::size_t chunk = bytes <= r.data ? bytes : std::max<std::size_t>(1, r.data / ds) * ds;
  std::atomic<std::uint64_t>& done = shm_->ctrl(rank_).bc_done[which];
  for (std::size_t off = 0; off < bytes; off += chunk) {
    const std::size_t n = std::min(chunk, bytes - off);
    const std::uint64_t t = st.step++;
    SlotHead* s = shm_->bslot(which, st.slot);
    if (++st.slot == r.slots) st.slot = 0;
    char* d = reinterpret_cast<char*>(s) + (n <= kBoxBytes ? sizeof(SlotHead) : sizeof(BSlot));
    if (rank_ == root) {
      if (t >= r.slots && st.known_min < t - r.slots + 1)
        ACCRUN_RETURN_IF_ERROR(guard(wait_bc_done(which, t - r.slots + 1)));
      // A rank that also believes itself the root may have stamped this
      // chunk already: this one fails naming both calls.  The stamp is a
      // plain store, not a compare-and-swap: a locked instruction would
      // wait for the line to arrive from the reader's core, where a store
      // lets the root go on to its next call meanwhile (2 ranks, 8 B:
      // 0.2 against 0.1 µs a call).  Two roots stamping at the same moment
      // both pass here; their roots' fingerprint (bcast_roots_) fails them
      // at their next call that meets the others'.
      if (s->seq.load(std::memory_order_acquire) >= t + 1) {
        const std::uint64_t theirs[2] = {s->sig[0], s->sig[1]};
        return guard(invalid_usage(where() + ": members called different collectives: this rank called " +
                                   describe_sig(sig_) + ", another member called " + describe_sig(theirs) +
                                   "; every member must pass the same count, dtype and root"));
      }
      copy_block(d, data + off, n);
      s->sig[0] = sig_[0];
      s->sig[1] = sig_[1];
      s->seq.store(t + 1, std::memory_order_release);
      if (off == 0) mark_posted();
      shm_->ring();
    } else {
      auto ready = [&] { return s->seq.load(std::memory_order_acquire) >= t + 1; };
      if (!ready()) {
        const Wait w = wait_spec();
        ACCRUN_RETURN_IF_ERROR(guard(shm_->waiter().until(
            ready, [&] { return root_went_elsewhere(root, bcast_calls_, off == 0, ready); }, w.deadline,
            [&] { return shm_->timed_out(w, {root}); })));
      }
      if (s->sig[0] != sig_[0] || s->sig[1] != sig_[1]) {
        // The root's signature, told from its slot.
        return check_sig(root, s->sig);
      }
      copy_block(data + off, d, n);
    }
    done.store(t + 1, std::memory_order_release);
    if (rank_ != root) shm_->ring();
  }
  return Status::ok();
}

Status StoreGroup::broadcast_stream(void* buf, std::size_t count, DType dt, int root, std::size_t piece,
                                    const Piece& fill, const Piece& after) {
  ACCRUN_RETURN_IF_ERROR(enter("broadcast", nullptr));
  ACCRUN_RETURN_IF_ERROR(check_rank(root, "root"));
  const std::size_t ds = dtype_size(dt);
  ACCRUN_RETURN_IF_ERROR(check_buffers(buf, buf, count, ds));
  char* data = static_cast<char*>(buf);
  const std::size_t total = count * ds;
  if (size_ == 1) {
    for (std::size_t off = 0; off < total; off += piece) {
      const std::size_t n = std::min(piece, total - off);
      if (fill) ACCRUN_RETURN_IF_ERROR(fill(off, n));
      if (after) ACCRUN_RETURN_IF_ERROR(after(off, n));
    }
    return Status::ok();
  }
  if (count == 0) return Status::ok();
  sign_broadcast(count, dt, root);
  const int h = begin_round();
  if (!ok_) return broken_;
  if (rank_ == root) {
    // The buffer's address, and where this call's bytes start on the
    // count readers wait for.
    const std::uint64_t at[2] = {reinterpret_cast<std::uint64_t>(data), streamed_};
    post_broadcast(h, at, sizeof at);
    Ctrl& me = shm_->ctrl(rank_);
    for (std::size_t off = 0; off < total; off += piece) {
      const std::size_t n = std::min(piece, total - off);
      if (fill) ACCRUN_RETURN_IF_ERROR(fill(off, n));
      me.streamed.store(streamed_ + (fill ? off + n : total), std::memory_order_release);
      shm_->ring();
      if (after) ACCRUN_RETURN_IF_ERROR(after(off, n));
    }
    streamed_ += total;
  } else {
    std::uint64_t at[2];
    ACCRUN_RETURN_IF_ERROR(read_root_box(root, h, at, sizeof at));
    const Wait w = wait_spec();
    const auto& posted = shm_->ctrl(root).streamed;
    auto in_place = [&] { return static_cast<std::size_t>(posted.load(std::memory_order_acquire) - at[1]); };
    for (std::size_t have = 0; have < total;) {
      // Piece by piece for `after`; else whatever the root has posted.
      const std::size_t want = after ? std::min(total, have + piece) : have + 1;
      auto ready = [&] { return in_place() >= want; };
      if (!ready())
        ACCRUN_RETURN_IF_ERROR(guard(shm_->waiter().until(
            ready, [&] { return shm_->check_peer(root, op_); }, w.deadline,
            [&] { return shm_->timed_out(w, {root}); })));
      const std::size_t upto = after ? want : std::min(total, in_place());
      ACCRUN_RETURN_IF_ERROR(guard(shm_->cma_read(root, data + have, at[0] + have, upto - have, op_)));
      if (after) ACCRUN_RETURN_IF_ERROR(after(have, upto - have));
      have = upto;
    }
  }
  return end_single_copy(root, h);
}

void StoreGroup::sign_broadcast(std::size_t whole, DType dt, int root) {
  sign(Coll::kBroadcast, whole, dt, Op::kSum, root);
  // Which of the group's broadcasts this is (16 bits of it), in the
  // signature the root stamps and every reader compares: a reader whose
  // count sent it another way (the other ring, or single copy) then fails
  // instead of taking a later call's data or waiting for ever.
  const std::uint64_t call = ++bcast_calls_ & 0xffff;
  sig_[0] |= call << kCallShift;
  // The roots named so far, this one (as signed) included, for the calls
  // after it: rotated so that one difference stays one.
  const std::uint32_t named = static_cast<std::uint32_t>(sig_[1]) * 0x9E3779B1u;
  bcast_roots_ = static_cast<std::uint8_t>(((bcast_roots_ << 1) | (bcast_roots_ >> 7)) ^ (named >> 24));
  shm_->ctrl(rank_).bcast_entered.store(bcast_calls_, std::memory_order_release);
}

void StoreGroup::mark_posted() {
  Ctrl& me = shm_->ctrl(rank_);
  me.bcast_sig[0].store(sig_[0], std::memory_order_relaxed);
  me.bcast_sig[1].store(sig_[1], std::memory_order_relaxed);
  me.bcast_posted.store(bcast_calls_, std::memory_order_release);
}

void StoreGroup::post_broadcast(int h, const void* what, std::size_t len) {
  copy_block(box(rank_, h), what, len);
  publish_box(h);
  mark_posted();
}

Status StoreGroup::read_root_box(int root, int h, void* out, std::size_t len) {
  const std::uint64_t v = publish();
  const auto& stamp = shm_->box(root, h).seq;
  auto ready = [&] { return stamp.load(std::memory_order_acquire) >= v; };
  if (!ready()) {
    const Wait w = wait_spec();
    ACCRUN_RETURN_IF_ERROR(guard(shm_->waiter().until(
        ready, [&] { return root_went_elsewhere(root, bcast_calls_, true, ready); }, w.deadline,
        [&] { return shm_->timed_out(w, {root}); })));
  }
  ACCRUN_RETURN_IF_ERROR(check_box_sig(root, h));
  copy_block(out, box(root, h), len);
  return Status::ok();
}

Status StoreGroup::end_single_copy(int root, int h) {
  const std::uint64_t c = publish();
  if (rank_ == root) {
    ACCRUN_RETURN_IF_ERROR(guard(wait_all(c)));
    ACCRUN_RETURN_IF_ERROR(check_all_sigs(h));
  }
  end_round();
  return Status::ok();
}

template <class Ready>
Status StoreGroup::root_went_elsewhere(int root, std::uint64_t call, bool first_chunk, Ready ready) {
  ACCRUN_RETURN_IF_ERROR(shm_->check_peer(root, op_));
  const Ctrl& c = shm_->ctrl(root);
  // A root that has not posted this broadcast but took a step of the
  // rounds this member has not: it called another collective here.
  if (c.seq.load(std::memory_order_acquire) > seq_ && c.bcast_posted.load(std::memory_order_acquire) < call &&
      !ready())
    return out_of_order(describe_sig(sig_), "the root, " + shm_->describe(root) + ", called another collective instead");
  const std::uint64_t posted = c.bcast_posted.load(std::memory_order_acquire);
  // Posted means its first chunk is in place; the later ones are once the
  // root has gone on to another broadcast.
  if (posted < call || (!first_chunk && posted == call) || ready()) return Status::ok();
  const std::uint64_t theirs[2] = {c.bcast_sig[0].load(std::memory_order_relaxed),
                                   c.bcast_sig[1].load(std::memory_order_relaxed)};
  std::atomic_thread_fence(std::memory_order_acquire);
  // A root in its next broadcast may be rewriting them: look again later.
  // (What they say only words the error: the mismatch is established.)
  if (c.bcast_posted.load(std::memory_order_relaxed) != posted) return Status::ok();
  Status s = check_sig(root, theirs);
  if (!s.is_ok()) return s;
  return guard(invalid_usage(where() + ": members called different collectives: this rank's " + describe_sig(sig_) +
                             " is not where the root put it; every member must pass the same count, dtype and root"));
}

}  // namespace accrun::collectives::store
