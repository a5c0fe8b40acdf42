// The exact-result suite for a collectives Backend: every op × dtype ×
// in/out-of-place, reduce and broadcast roots, allgather, reducescatter,
// barrier, send/recv (including the send-first ring inside
// group_start/group_end).  Inputs are small integers whose results are exact
// in every dtype (float16 and bfloat16 included), so results are compared
// exactly.  Backend-neutral: any backend and any launcher can drive it.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "accrun/backend.hpp"

namespace accrun::testing {

using collectives::Backend;
using collectives::DType;
using collectives::Op;

inline constexpr DType kAllDTypes[] = {DType::kInt8,    DType::kUInt8,    DType::kInt32,   DType::kInt64,
                                       DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64};
inline constexpr Op kAllOps[] = {Op::kSum, Op::kProd, Op::kMin, Op::kMax};

inline const char* dt_text(DType d) {
  static const char* const k[] = {"int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"};
  return k[static_cast<int>(d)];
}
inline const char* op_text(Op o) {
  static const char* const k[] = {"sum", "prod", "min", "max"};
  return k[static_cast<int>(o)];
}
inline std::size_t dt_size(DType d) {
  static const std::size_t k[] = {1, 1, 4, 8, 2, 2, 4, 8};
  return k[static_cast<int>(d)];
}

// Exact conversions for the small integers the suite uses (normal numbers).
inline std::uint16_t to_f16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  if ((x & 0x7fffffffu) == 0) return sign;
  const int exp = static_cast<int>((x >> 23) & 0xffu) - 127 + 15;
  return static_cast<std::uint16_t>(sign | (exp << 10) | ((x & 0x7fffffu) >> 13));
}
inline float from_f16(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  std::uint32_t x = sign;
  if (exp != 0 || mant != 0) x |= ((exp - 15 + 127) << 23) | (mant << 13);
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
inline std::uint16_t to_bf16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  return static_cast<std::uint16_t>(x >> 16);
}
inline float from_bf16(std::uint16_t h) {
  std::uint32_t x = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

inline void store(DType d, void* p, std::size_t i, double v) {
  switch (d) {
    case DType::kInt8: static_cast<std::int8_t*>(p)[i] = static_cast<std::int8_t>(v); break;
    case DType::kUInt8: static_cast<std::uint8_t*>(p)[i] = static_cast<std::uint8_t>(v); break;
    case DType::kInt32: static_cast<std::int32_t*>(p)[i] = static_cast<std::int32_t>(v); break;
    case DType::kInt64: static_cast<std::int64_t*>(p)[i] = static_cast<std::int64_t>(v); break;
    case DType::kFloat16: static_cast<std::uint16_t*>(p)[i] = to_f16(static_cast<float>(v)); break;
    case DType::kBFloat16: static_cast<std::uint16_t*>(p)[i] = to_bf16(static_cast<float>(v)); break;
    case DType::kFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::kFloat64: static_cast<double*>(p)[i] = v; break;
  }
}
inline double load(DType d, const void* p, std::size_t i) {
  switch (d) {
    case DType::kInt8: return static_cast<const std::int8_t*>(p)[i];
    case DType::kUInt8: return static_cast<const std::uint8_t*>(p)[i];
    case DType::kInt32: return static_cast<const std::int32_t*>(p)[i];
    case DType::kInt64: return static_cast<double>(static_cast<const std::int64_t*>(p)[i]);
    case DType::kFloat16: return from_f16(static_cast<const std::uint16_t*>(p)[i]);
    case DType::kBFloat16: return from_bf16(static_cast<const std::uint16_t*>(p)[i]);
    case DType::kFloat32: return static_cast<const float*>(p)[i];
    case DType::kFloat64: return static_cast<const double*>(p)[i];
  }
  return 0;
}

// Rank r's input element i for a reduction: results stay exact at 8 ranks
// (sums ≤ 48, products ≤ 8, min/max in −5..10).
inline double input(Op op, DType d, int r, std::size_t i) {
  const bool is_unsigned = d == DType::kUInt8;
  switch (op) {
    case Op::kSum: return static_cast<double>(r % 4 + 1 + static_cast<int>(i % 3));
    case Op::kProd: return ((i + static_cast<std::size_t>(r)) % 3 == 0) ? 2.0 : 1.0;
    case Op::kMin:
    case Op::kMax: {
      const int v = static_cast<int>((static_cast<std::size_t>(r) * 7 + i * 3) % 11);
      return is_unsigned ? v : v - 5;
    }
  }
  return 0;
}
inline double expected(Op op, DType d, int size, std::size_t i) {
  double acc = input(op, d, 0, i);
  for (int r = 1; r < size; ++r) {
    const double v = input(op, d, r, i);
    switch (op) {
      case Op::kSum: acc += v; break;
      case Op::kProd: acc *= v; break;
      case Op::kMin: acc = v < acc ? v : acc; break;
      case Op::kMax: acc = v > acc ? v : acc; break;
    }
  }
  return acc;
}

class ExactSuite {
 public:
  ExactSuite(Backend& b, int rank, int size, std::string label)
      : b_(b), rank_(rank), size_(size), label_(std::move(label)) {}

  int checks() const { return checks_; }
  const std::vector<std::string>& failures() const { return failures_; }

  // grouped_collectives: whether the backend takes collectives inside
  // group_start/group_end (MPI and NCCL do; the store takes send/recv only).
  void run_all(const std::vector<std::size_t>& counts, bool grouped_collectives = true) {
    for (std::size_t n : counts) {
      for (DType d : kAllDTypes) {
        for (Op op : kAllOps) {
          for (bool inplace : {false, true}) {
            allreduce(n, d, op, inplace);
            for (int root : roots()) reduce(n, d, op, root, inplace);
            reducescatter(n, d, op, inplace);
          }
        }
        for (int root : roots()) broadcast(n, d, root);
        for (bool inplace : {false, true}) allgather(n, d, inplace);
        allgather(n, d, true, true);
      }
    }
    barrier();
    p2p_pairs(4099);
    ring_send_first(1 << 18);
    if (grouped_collectives) grouped_collective_and_p2p(257);
  }

  void allreduce(std::size_t n, DType d, Op op, bool inplace) {
    const std::size_t es = dt_size(d);
    std::vector<char> send(n * es), recv(n * es);
    for (std::size_t i = 0; i < n; ++i) store(d, send.data(), i, input(op, d, rank_, i));
    void* out = inplace ? send.data() : recv.data();
    const std::string what = ctx("allreduce", n, d, op, inplace);
    if (!ok(b_.allreduce(send.data(), out, n, d, op, nullptr), what)) return;
    compare(what, d, out, n, [&](std::size_t i) { return expected(op, d, size_, i); });
    if (!inplace) compare(what + " (send buffer untouched)", d, send.data(), n,
                          [&](std::size_t i) { return input(op, d, rank_, i); });
  }

  void reduce(std::size_t n, DType d, Op op, int root, bool inplace) {
    const std::size_t es = dt_size(d);
    std::vector<char> send(n * es), recv(n * es);
    for (std::size_t i = 0; i < n; ++i) store(d, send.data(), i, input(op, d, rank_, i));
    void* out = inplace ? send.data() : recv.data();
    const std::string what = ctx("reduce", n, d, op, inplace) + " root " + std::to_string(root);
    if (!ok(b_.reduce(send.data(), out, n, d, op, root, nullptr), what)) return;
    if (rank_ == root) compare(what, d, out, n, [&](std::size_t i) { return expected(op, d, size_, i); });
  }

  void reducescatter(std::size_t n, DType d, Op op, bool inplace) {
    const std::size_t es = dt_size(d);
    const std::size_t total = n * static_cast<std::size_t>(size_);
    std::vector<char> send(total * es), recv(n * es);
    for (std::size_t i = 0; i < total; ++i) store(d, send.data(), i, input(op, d, rank_, i));
    void* out = inplace ? send.data() + static_cast<std::size_t>(rank_) * n * es : recv.data();
    const std::string what = ctx("reducescatter", n, d, op, inplace);
    if (!ok(b_.reducescatter(send.data(), out, n, d, op, nullptr), what)) return;
    const std::size_t base = static_cast<std::size_t>(rank_) * n;
    compare(what, d, out, n, [&](std::size_t i) { return expected(op, d, size_, base + i); });
  }

  void broadcast(std::size_t n, DType d, int root) {
    std::vector<char> buf(n * dt_size(d));
    auto value = [&](std::size_t i) { return static_cast<double>((root * 3 + static_cast<int>(i)) % 100); };
    for (std::size_t i = 0; i < n; ++i) store(d, buf.data(), i, rank_ == root ? value(i) : 0.0);
    const std::string what = ctx("broadcast", n, d, Op::kSum, false) + " root " + std::to_string(root);
    if (!ok(b_.broadcast(buf.data(), n, d, root, nullptr), what)) return;
    compare(what, d, buf.data(), n, value);
  }

  // In place: send == this rank's slot of recv, or (same_buffer) send ==
  // recv, the part in the slot all the same.
  void allgather(std::size_t n, DType d, bool inplace, bool same_buffer = false) {
    const std::size_t es = dt_size(d);
    const std::size_t total = n * static_cast<std::size_t>(size_);
    auto value = [&](int r, std::size_t i) { return static_cast<double>((r * 13 + static_cast<int>(i)) % 100); };
    std::vector<char> send(n * es), recv(total * es);
    char* mine = inplace ? recv.data() + static_cast<std::size_t>(rank_) * n * es : send.data();
    for (std::size_t i = 0; i < n; ++i) store(d, mine, i, value(rank_, i));
    const std::string what = ctx("allgather", n, d, Op::kSum, inplace) + (same_buffer ? " send == recv" : "");
    if (!ok(b_.allgather(same_buffer ? recv.data() : mine, recv.data(), n, d, nullptr), what)) return;
    compare(what, d, recv.data(), total,
            [&](std::size_t i) { return value(static_cast<int>(i / n), i % n); });
  }

  // Rank 0 arrives late: no rank may leave the barrier before rank 0 entered
  // it.  The ranks share one host and so one steady clock; rank 0's entry
  // time is broadcast afterwards, so a rank the scheduler delays cannot make
  // the check fail.
  void barrier() {
    using Clock = std::chrono::steady_clock;
    ok(b_.barrier(), label_ + " barrier (warm-up)");
    std::int64_t entered = 0;
    if (rank_ == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(60));
      entered = Clock::now().time_since_epoch().count();
    }
    if (!ok(b_.barrier(), label_ + " barrier")) return;
    const std::int64_t left = Clock::now().time_since_epoch().count();
    if (!ok(b_.broadcast(&entered, 1, DType::kInt64, 0, nullptr), label_ + " barrier (entry time)")) return;
    ++checks_;
    if (left < entered)
      fail(label_ + " barrier: left " + std::to_string((entered - left) / 1000) + " us before rank 0 entered it");
  }

  // Blocking send/recv in pairs (0→1, 2→3, ...), outside any bracket.
  void p2p_pairs(std::size_t n) {
    const DType d = DType::kInt32;
    std::vector<std::int32_t> buf(n);
    const int partner = rank_ % 2 == 0 ? rank_ + 1 : rank_ - 1;
    if (partner >= size_) return;
    const std::string what = label_ + " send/recv pair " + std::to_string(rank_) + "<->" + std::to_string(partner);
    if (rank_ % 2 == 0) {
      for (std::size_t i = 0; i < n; ++i) buf[i] = static_cast<std::int32_t>(rank_ * 100000 + i);
      ok(b_.send(buf.data(), n, d, partner, nullptr), what);
      if (!ok(b_.recv(buf.data(), n, d, partner, nullptr), what)) return;
      compare(what + " (reply)", d, buf.data(), n, [&](std::size_t i) { return -static_cast<double>(partner * 100000 + i); });
    } else {
      if (!ok(b_.recv(buf.data(), n, d, partner, nullptr), what)) return;
      compare(what, d, buf.data(), n, [&](std::size_t i) { return static_cast<double>(partner * 100000 + i); });
      for (std::size_t i = 0; i < n; ++i) buf[i] = -static_cast<std::int32_t>(rank_ * 100000 + i);
      ok(b_.send(buf.data(), n, d, partner, nullptr), what);
    }
  }

  // Everybody sends to the right first, then receives from the left: a
  // deadlock with blocking calls for large messages, safe inside a bracket.
  void ring_send_first(std::size_t n) {
    if (size_ < 2) return;
    const DType d = DType::kFloat32;
    const int right = (rank_ + 1) % size_;
    const int left = (rank_ + size_ - 1) % size_;
    std::vector<float> out(n), in(n, -1.0f);
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(rank_ * 1000 + static_cast<int>(i % 1000));
    const std::string what = label_ + " ring send-first in group_start/end, " + std::to_string(n) + " floats";
    if (!ok(b_.group_start(), what)) return;
    ok(b_.send(out.data(), n, d, right, nullptr), what + " send");
    ok(b_.recv(in.data(), n, d, left, nullptr), what + " recv");
    if (!ok(b_.group_end(), what + " group_end")) return;
    compare(what, d, in.data(), n, [&](std::size_t i) { return static_cast<double>(left * 1000 + static_cast<int>(i % 1000)); });
  }

  // A collective and a point-to-point exchange posted together.
  void grouped_collective_and_p2p(std::size_t n) {
    if (size_ < 2) return;
    const DType d = DType::kInt64;
    std::vector<std::int64_t> a(n), b_in(n, 0), b_out(n);
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = static_cast<std::int64_t>(input(Op::kSum, d, rank_, i));
      b_out[i] = rank_ + 7;
    }
    const int right = (rank_ + 1) % size_;
    const int left = (rank_ + size_ - 1) % size_;
    const std::string what = label_ + " allreduce+sendrecv in one bracket";
    if (!ok(b_.group_start(), what)) return;
    ok(b_.allreduce(a.data(), a.data(), n, d, Op::kSum, nullptr), what);
    ok(b_.recv(b_in.data(), n, d, left, nullptr), what);
    ok(b_.send(b_out.data(), n, d, right, nullptr), what);
    if (!ok(b_.group_end(), what + " group_end")) return;
    compare(what + " (allreduce)", d, a.data(), n, [&](std::size_t i) { return expected(Op::kSum, d, size_, i); });
    compare(what + " (recv)", d, b_in.data(), n, [&](std::size_t) { return static_cast<double>(left + 7); });
  }

 private:
  std::vector<int> roots() const { return size_ > 1 ? std::vector<int>{0, size_ - 1} : std::vector<int>{0}; }

  std::string ctx(const char* what, std::size_t n, DType d, Op op, bool inplace) const {
    return label_ + " " + what + " " + dt_text(d) + " " + op_text(op) + " n=" + std::to_string(n) +
           (inplace ? " in-place" : " out-of-place");
  }

  bool ok(const Status& st, const std::string& what) {
    ++checks_;
    if (st.is_ok()) return true;
    fail(what + ": " + code_name(st.code()) + ": " + st.message());
    return false;
  }

  template <class F>
  void compare(const std::string& what, DType d, const void* p, std::size_t n, F want) {
    ++checks_;
    for (std::size_t i = 0; i < n; ++i) {
      const double got = load(d, p, i);
      const double exp = want(i);
      if (got != exp) {
        fail(what + ": element " + std::to_string(i) + " is " + std::to_string(got) + ", expected " +
             std::to_string(exp));
        return;
      }
    }
  }

  void fail(std::string m) {
    if (failures_.size() < 50) failures_.push_back("rank " + std::to_string(rank_) + ": " + std::move(m));
  }

  Backend& b_;
  int rank_;
  int size_;
  std::string label_;
  int checks_ = 0;
  std::vector<std::string> failures_;
};

}  // namespace accrun::testing
