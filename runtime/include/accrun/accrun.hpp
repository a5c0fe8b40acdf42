// accrun/accrun.hpp — a thin, header-only C++20 layer over <accrun/accrun.h>
// (libaccrun(3)).
//
// RAII for the job context (accrun::Runtime) and for groups (accrun::Group),
// std::span buffers with the dtype taken from the element type, and
// exceptions (accrun::Error, carrying the ACCRUN_* code and
// accrun_last_error()'s text) on the C++ side only: the C library underneath
// never throws.  Blocking, thread safety and errors are those of the C call
// each method wraps (see its man page).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "accrun/accrun.h"

namespace accrun {

// A failed call: code() is the ACCRUN_* status, what() the detail.
class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
  int code() const noexcept { return code_; }

 private:
  int code_;
};

// Throws accrun::Error for a non-success status.
inline void check(int rc, const char* call) {
  if (rc != ACCRUN_SUCCESS)
    throw Error(rc, std::string(call) + ": " + accrun_strerror(rc) + ": " + accrun_last_error());
}

// 16-bit floating point element types, carried as raw bits.
struct Float16 { std::uint16_t bits; };
struct BFloat16 { std::uint16_t bits; };

// The accrun dtype of an element type.
template <class T> struct DTypeOf;
template <> struct DTypeOf<std::int8_t> { static constexpr accrun_dtype_t value = ACCRUN_INT8; };
template <> struct DTypeOf<std::uint8_t> { static constexpr accrun_dtype_t value = ACCRUN_UINT8; };
template <> struct DTypeOf<std::byte> { static constexpr accrun_dtype_t value = ACCRUN_UINT8; };
template <> struct DTypeOf<std::int32_t> { static constexpr accrun_dtype_t value = ACCRUN_INT32; };
template <> struct DTypeOf<std::int64_t> { static constexpr accrun_dtype_t value = ACCRUN_INT64; };
template <> struct DTypeOf<Float16> { static constexpr accrun_dtype_t value = ACCRUN_FLOAT16; };
template <> struct DTypeOf<BFloat16> { static constexpr accrun_dtype_t value = ACCRUN_BFLOAT16; };
template <> struct DTypeOf<float> { static constexpr accrun_dtype_t value = ACCRUN_FLOAT32; };
template <> struct DTypeOf<double> { static constexpr accrun_dtype_t value = ACCRUN_FLOAT64; };
template <class T>
inline constexpr accrun_dtype_t dtype_of = DTypeOf<std::remove_cv_t<T>>::value;

enum class Op { kSum = ACCRUN_SUM, kProd = ACCRUN_PROD, kMin = ACCRUN_MIN, kMax = ACCRUN_MAX };
enum class Backend {
  kAuto = ACCRUN_BACKEND_AUTO,
  kStore = ACCRUN_BACKEND_STORE,
  kMpi = ACCRUN_BACKEND_MPI,
  kNccl = ACCRUN_BACKEND_NCCL
};

// The job context: accrun_init() on construction, accrun_finalize() on
// destruction.  One per process at a time; move-only.
class Runtime {
 public:
  Runtime() { check(accrun_init(), "accrun_init"); }
  ~Runtime() {
    if (owned_) accrun_finalize();
  }
  Runtime(Runtime&& o) noexcept : owned_(std::exchange(o.owned_, false)) {}
  Runtime& operator=(Runtime&&) = delete;
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  static int rank() { return accrun_rank(); }
  static int size() { return accrun_size(); }
  static int local_rank() { return accrun_local_rank(); }
  static int local_size() { return accrun_local_size(); }
  // The ids of the rank's devices of `resource` ("GPU", "TPU", ...): empty
  // when it holds none.
  static std::vector<int> accelerator_ids(const std::string& resource) {
    int count = 0;
    check(accrun_accelerator_ids(resource.c_str(), nullptr, 0, &count), "accrun_accelerator_ids");
    std::vector<int> ids(static_cast<std::size_t>(count));
    if (count > 0)
      check(accrun_accelerator_ids(resource.c_str(), ids.data(), count, &count), "accrun_accelerator_ids");
    return ids;
  }
  static std::optional<std::string> accelerator_type(const std::string& resource) {
    const char* t = accrun_accelerator_type(resource.c_str());
    return t ? std::optional<std::string>(t) : std::nullopt;
  }
  // "pod", "zone" or "region": the rank's host's label at that level.
  static std::optional<std::string> pod(const std::string& level = "pod") {
    const char* p = accrun_pod(level.c_str());
    return p ? std::optional<std::string>(p) : std::nullopt;
  }

 private:
  bool owned_ = true;
};

// A named group (accrun_group_init(3)); destroyed with the object.  Move-only.
class Group {
 public:
  Group(const std::string& name, int world_size, int rank, Backend backend = Backend::kAuto) {
    check(accrun_group_init(name.c_str(), world_size, rank, static_cast<accrun_backend_t>(backend), &g_),
          "accrun_group_init");
  }
  ~Group() {
    if (g_ != nullptr) accrun_group_destroy(g_);
  }
  Group(Group&& o) noexcept : g_(std::exchange(o.g_, nullptr)) {}
  Group& operator=(Group&& o) noexcept {
    if (this != &o) {
      if (g_ != nullptr) accrun_group_destroy(g_);
      g_ = std::exchange(o.g_, nullptr);
    }
    return *this;
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int rank() const { return accrun_group_rank(g_); }
  int size() const { return accrun_group_size(g_); }
  accrun_group_t native() const { return g_; }
  void set_timeout(std::chrono::milliseconds t) {
    check(accrun_group_set_timeout(g_, static_cast<int>(t.count())), "accrun_group_set_timeout");
  }

  template <class T>
  void allreduce(std::span<const T> send, std::span<T> recv, Op op = Op::kSum, void* stream = nullptr) {
    same_size(send.size(), recv.size(), "allreduce");
    check(accrun_allreduce(g_, send.data(), recv.data(), send.size(), dtype_of<T>, c_op(op), stream),
          "accrun_allreduce");
  }
  template <class T>
  void allreduce(std::span<T> inout, Op op = Op::kSum, void* stream = nullptr) {
    check(accrun_allreduce(g_, inout.data(), inout.data(), inout.size(), dtype_of<T>, c_op(op), stream),
          "accrun_allreduce");
  }
  // recv is used on the root only (may be empty elsewhere).
  template <class T>
  void reduce(std::span<const T> send, std::span<T> recv, int root, Op op = Op::kSum, void* stream = nullptr) {
    if (rank() == root) same_size(send.size(), recv.size(), "reduce");
    check(accrun_reduce(g_, send.data(), recv.data(), send.size(), dtype_of<T>, c_op(op), root, stream),
          "accrun_reduce");
  }
  template <class T>
  void broadcast(std::span<T> buf, int root, void* stream = nullptr) {
    check(accrun_broadcast(g_, buf.data(), buf.size(), dtype_of<T>, root, stream), "accrun_broadcast");
  }
  // recv holds size() * send.size() elements, in group-rank order.
  template <class T>
  void allgather(std::span<const T> send, std::span<T> recv, void* stream = nullptr) {
    same_size(send.size() * static_cast<std::size_t>(size()), recv.size(), "allgather");
    check(accrun_allgather(g_, send.data(), recv.data(), send.size(), dtype_of<T>, stream), "accrun_allgather");
  }
  // send holds size() * recv.size() elements.
  template <class T>
  void reducescatter(std::span<const T> send, std::span<T> recv, Op op = Op::kSum, void* stream = nullptr) {
    same_size(send.size(), recv.size() * static_cast<std::size_t>(size()), "reducescatter");
    check(accrun_reducescatter(g_, send.data(), recv.data(), recv.size(), dtype_of<T>, c_op(op), stream),
          "accrun_reducescatter");
  }
  void barrier() { check(accrun_barrier(g_), "accrun_barrier"); }
  template <class T>
  void send(std::span<const T> buf, int peer, void* stream = nullptr) {
    check(accrun_send(g_, buf.data(), buf.size(), dtype_of<T>, peer, stream), "accrun_send");
  }
  template <class T>
  void recv(std::span<T> buf, int peer, void* stream = nullptr) {
    check(accrun_recv(g_, buf.data(), buf.size(), dtype_of<T>, peer, stream), "accrun_recv");
  }
  void start() { check(accrun_group_start(g_), "accrun_group_start"); }
  void end() { check(accrun_group_end(g_), "accrun_group_end"); }

 private:
  static accrun_op_t c_op(Op op) { return static_cast<accrun_op_t>(op); }
  static void same_size(std::size_t a, std::size_t b, const char* what) {
    if (a != b)
      throw Error(ACCRUN_ERR_INVALID_ARGUMENT, std::string(what) + ": buffer sizes do not match (" +
                                                   std::to_string(a) + " vs " + std::to_string(b) + ")");
  }
  accrun_group_t g_ = nullptr;
};

// Sends and receives posted while it lives complete when it ends
// (accrun_group_start/accrun_group_end).
class GroupCall {
 public:
  explicit GroupCall(Group& g) : g_(g) { g_.start(); }
  ~GroupCall() noexcept(false) {
    if (std::uncaught_exceptions() == 0) g_.end();
    else accrun_group_end(g_.native());
  }
  GroupCall(const GroupCall&) = delete;
  GroupCall& operator=(const GroupCall&) = delete;

 private:
  Group& g_;
};

// ---- the object store (accrun_put(3)) ----
inline void put(const std::string& key, std::span<const std::byte> data) {
  check(accrun_put(key.c_str(), data.data(), data.size()), "accrun_put");
}
template <class T>
void put(const std::string& key, std::span<const T> data) {
  put(key, std::as_bytes(data));
}
// Waits up to `timeout` (negative: forever) for the key; returns its bytes.
inline std::vector<std::byte> get(const std::string& key,
                                  std::chrono::milliseconds timeout = std::chrono::milliseconds(-1)) {
  std::size_t len = 0;
  check(accrun_get(key.c_str(), nullptr, 0, &len, static_cast<int>(timeout.count())), "accrun_get");
  std::vector<std::byte> out(len);
  check(accrun_get(key.c_str(), out.data(), out.size(), &len, 0), "accrun_get");
  out.resize(len);
  return out;
}
inline void remove(const std::string& key) { check(accrun_delete(key.c_str()), "accrun_delete"); }

}  // namespace accrun
