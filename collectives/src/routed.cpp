// An AUTO group over GPUs: NCCL for device buffers, the host backend for
// host buffers, per call (backend.hpp, make_routed_backend).  The RFC's
// rule that buffers, not the rank's GPU assignment, decide the backend.
#include <memory>
#include <string>
#include <utility>

#include "accrun/backend.hpp"

namespace accrun::collectives {
namespace {

struct Buf {
  const void* ptr;
  std::size_t count;
  const char* what;
};

class RoutedBackend final : public Backend {
 public:
  RoutedBackend(std::unique_ptr<Backend> device, std::unique_ptr<Backend> host, std::string name)
      : device_(std::move(device)), host_(std::move(host)), name_(std::move(name)) {}

  BackendKind kind() const override { return device_->kind(); }
  void set_timeout(int timeout_ms) override {
    device_->set_timeout(timeout_ms);
    host_->set_timeout(timeout_ms);
  }

  Status allreduce(const void* send, void* recv, std::size_t count, DType dt, Op op, void* stream) override {
    Backend* b = nullptr;
    ACCRUN_RETURN_IF_ERROR(pick("allreduce", {{send, count, "send buffer"}, {recv, count, "receive buffer"}}, &b));
    return b->allreduce(send, recv, count, dt, op, for_backend(b, stream));
  }
  Status reduce(const void* send, void* recv, std::size_t count, DType dt, Op op, int root, void* stream) override {
    Backend* b = nullptr;
    ACCRUN_RETURN_IF_ERROR(pick("reduce", {{send, count, "send buffer"}, {recv, count, "receive buffer"}}, &b));
    return b->reduce(send, recv, count, dt, op, root, for_backend(b, stream));
  }
  Status broadcast(void* buf, std::size_t count, DType dt, int root, void* stream) override {
    Backend* b = nullptr;
    ACCRUN_RETURN_IF_ERROR(pick("broadcast", {{buf, count, "buffer"}}, &b));
    return b->broadcast(buf, count, dt, root, for_backend(b, stream));
  }
  Status allgather(const void* send, void* recv, std::size_t count_per_rank, DType dt, void* stream) override {
    Backend* b = nullptr;
    ACCRUN_RETURN_IF_ERROR(
        pick("allgather", {{send, count_per_rank, "send buffer"}, {recv, count_per_rank, "receive buffer"}}, &b));
    return b->allgather(send, recv, count_per_rank, dt, for_backend(b, stream));
  }
  Status reducescatter(const void* send, void* recv, std::size_t recv_count, DType dt, Op op, void* stream) override {
    Backend* b = nullptr;
    ACCRUN_RETURN_IF_ERROR(
        pick("reducescatter", {{send, recv_count, "send buffer"}, {recv, recv_count, "receive buffer"}}, &b));
    return b->reducescatter(send, recv, recv_count, dt, op, for_backend(b, stream));
  }
  Status barrier() override { return host_->barrier(); }
  Status send(const void* buf, std::size_t count, DType dt, int peer, void* stream) override {
    Backend* b = nullptr;
    ACCRUN_RETURN_IF_ERROR(pick("send", {{buf, count, "buffer"}}, &b));
    return b->send(buf, count, dt, peer, for_backend(b, stream));
  }
  Status recv(void* buf, std::size_t count, DType dt, int peer, void* stream) override {
    Backend* b = nullptr;
    ACCRUN_RETURN_IF_ERROR(pick("recv", {{buf, count, "buffer"}}, &b));
    return b->recv(buf, count, dt, peer, for_backend(b, stream));
  }
  Status group_start() override {
    ACCRUN_RETURN_IF_ERROR(device_->group_start());
    Status st = host_->group_start();
    if (!st.is_ok()) (void)device_->group_end();
    return st;
  }
  Status group_end() override {
    Status d = device_->group_end();
    Status h = host_->group_end();
    return d.is_ok() ? h : d;
  }

 private:
  // Device (or managed) memory goes to NCCL, host memory to the host
  // backend; a call that mixes them is refused before anything moves.
  Status pick(const char* call, std::initializer_list<Buf> bufs, Backend** out) const {
    const Buf* host = nullptr;
    const Buf* device = nullptr;
    for (const Buf& b : bufs) {
      if (b.ptr == nullptr || b.count == 0) continue;
      (memory_kind(b.ptr) == MemoryKind::kHost ? host : device) = &b;
    }
    if (host != nullptr && device != nullptr) {
      return invalid_argument(std::string(call) + " on group '" + name_ + "': the " + device->what +
                              " is GPU memory and the " + host->what +
                              " host memory; one call takes both in the same kind of memory");
    }
    *out = device != nullptr ? device_.get() : host_.get();
    return Status::ok();
  }

  // Host backends take no stream: their calls complete before returning.
  void* for_backend(const Backend* b, void* stream) const { return b == device_.get() ? stream : nullptr; }

  std::unique_ptr<Backend> device_;
  std::unique_ptr<Backend> host_;
  std::string name_;
};

}  // namespace

std::unique_ptr<Backend> make_routed_backend(std::unique_ptr<Backend> device, std::unique_ptr<Backend> host,
                                             std::string group_name) {
  return std::make_unique<RoutedBackend>(std::move(device), std::move(host), std::move(group_name));
}

}  // namespace accrun::collectives
