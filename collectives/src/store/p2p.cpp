// Point-to-point over each peer's Channel, whatever transport carries it.
//
// A send is buffered by the channel and never waits for its matching
// receive (within the transport's bound on buffered bytes), so two ranks
// that each send to the other and then receive do not deadlock.  Between
// group_start and group_end sends go out as they are posted and receives
// complete at group_end, in the order they were posted.
#include "store/group.hpp"

namespace accrun::collectives::store {

Status StoreGroup::send(const void* buf, std::size_t count, DType dt, int peer, void* stream) {
  ACCRUN_RETURN_IF_ERROR(check_p2p("send", stream, peer));
  const std::size_t ds = dtype_size(dt);
  ACCRUN_RETURN_IF_ERROR(check_buffers(buf, buf, count, ds));
  return channel(peer)->send(buf, count * ds, wait_spec());
}

Status StoreGroup::recv(void* buf, std::size_t count, DType dt, int peer, void* stream) {
  ACCRUN_RETURN_IF_ERROR(check_p2p("recv", stream, peer));
  const std::size_t ds = dtype_size(dt);
  ACCRUN_RETURN_IF_ERROR(check_buffers(buf, buf, count, ds));
  if (group_depth_ > 0) {
    pending_.push_back(PendingRecv{buf, count * ds, peer});
    return Status::ok();
  }
  return channel(peer)->recv(buf, count * ds, wait_spec());
}

Status StoreGroup::group_start() {
  ++group_depth_;
  return Status::ok();
}

Status StoreGroup::group_end() {
  if (group_depth_ == 0) return invalid_usage(where() + ": group_end without group_start");
  if (--group_depth_ > 0) return Status::ok();
  std::vector<PendingRecv> todo;
  todo.swap(pending_);
  op_ = "recv";
  for (const PendingRecv& r : todo) ACCRUN_RETURN_IF_ERROR(channel(r.peer)->recv(r.buf, r.bytes, wait_spec()));
  return Status::ok();
}

}  // namespace accrun::collectives::store
