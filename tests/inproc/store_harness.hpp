// In-process multi-rank harness for the store backend: threads play the
// ranks of one process, the shared-memory segment is real (in a private temp
// directory under /dev/shm), and the Rendezvous and PeerMonitor live in memory.
#pragma once

#include <gtest/gtest.h>
#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "accrun/backend.hpp"
#include "store/store_backend.hpp"

namespace accrun::collectives::testing {

class MemRendezvous final : public Rendezvous {
 public:
  Status publish(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!kv_.emplace(key, value).second) return invalid_usage("key " + key + " exists");
    cv_.notify_all();
    return Status::ok();
  }
  Result<std::string> lookup(const std::string& key, int timeout_ms) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto found = [&] { return kv_.count(key) != 0; };
    if (timeout_ms < 0) {
      cv_.wait(lock, found);
    } else if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), found)) {
      return timeout_error("key " + key + " not published within " + std::to_string(timeout_ms) + " ms");
    }
    return kv_.at(key);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
};

class FakePeers final : public PeerMonitor {
 public:
  std::optional<std::string> failure(int job_rank) const override {
    if (on_ask) on_ask(job_rank);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = failed_.find(job_rank);
    if (it == failed_.end()) return std::nullopt;
    return it->second;
  }
  void fail(int job_rank, std::string why) {
    std::lock_guard<std::mutex> lock(mu_);
    failed_[job_rank] = std::move(why);
  }
  // Called first by every failure(job_rank): a test's way in at the moment
  // a member asks whether a peer failed.  Set before the group starts.
  std::function<void(int)> on_ask;

 private:
  mutable std::mutex mu_;
  std::map<int, std::string> failed_;
};

// A private directory under /dev/shm, removed (with anything left) at the end.
class ShmDir {
 public:
  ShmDir() {
    char tmpl[] = "/dev/shm/accrun-inproc-XXXXXX";
    const char* d = mkdtemp(tmpl);
    path_ = d != nullptr ? d : "";
  }
  ~ShmDir() {
    for (const auto& e : entries()) unlink((path_ + "/" + e).c_str());
    rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    if (DIR* d = opendir(path_.c_str())) {
      while (dirent* e = readdir(d))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out.emplace_back(e->d_name);
      closedir(d);
    }
    return out;
  }

 private:
  std::string path_;
};

// One incarnation of a group: its context for every rank.
struct GroupSpec {
  std::string name = "g";
  std::uint64_t epoch = 1;
  int size = 1;
  std::vector<int> job_ranks;  // default: 0..size-1
  int timeout_ms = 20'000;     // every wait in a test is bounded
  // Host of each group rank (default: all on "localhost").  Members on
  // different hosts make a hierarchical group: shared memory inside each
  // "host", TCP (here over this machine's own addresses) between them.
  std::string hosts;           // one letter per group rank: "aabb"
  std::string transport = "tcp";  // between hosts: tcp or libfabric
  // Whether the members are told their host is oversubscribed (the store
  // then yields and takes its oversubscribed paths); default: from 3 ranks.
  int oversubscribed = -1;
  // Where not empty: the hosts (letters, as in `hosts`) whose members are
  // told so, the others not (instead of `oversubscribed`).
  std::string oversubscribed_hosts;
};

// The spec on hosts named by letters, one per group rank.
inline GroupSpec on_hosts(GroupSpec g, std::string hosts, std::string transport = "tcp") {
  g.hosts = std::move(hosts);
  g.transport = std::move(transport);
  return g;
}

inline GroupSpec spec(std::string name, int size, int timeout_ms = 20'000, std::vector<int> job_ranks = {},
                      std::uint64_t epoch = 1) {
  GroupSpec g;
  g.name = std::move(name);
  g.size = size;
  g.timeout_ms = timeout_ms;
  g.job_ranks = std::move(job_ranks);
  g.epoch = epoch;
  return g;
}

class World {
 public:
  GroupContext context(const GroupSpec& g, int rank, MemRendezvous* rv) const {
    GroupContext ctx;
    ctx.name = g.name;
    ctx.epoch = g.epoch;
    ctx.rank = rank;
    ctx.size = g.size;
    for (int q = 0; q < g.size; ++q) {
      Member m;
      m.job_rank = g.job_ranks.empty() ? q : g.job_ranks[static_cast<std::size_t>(q)];
      m.host = g.hosts.empty() ? std::string("localhost") : std::string("host-") + g.hosts[static_cast<std::size_t>(q)];
      m.local_rank = m.job_rank;
      m.pid = static_cast<long>(getpid());
      ctx.members.push_back(m);
    }
    ctx.shm_dir = dir.path();
    ctx.oversubscribed = g.oversubscribed < 0 ? g.size > 2 : g.oversubscribed == 1;
    if (!g.oversubscribed_hosts.empty())
      ctx.oversubscribed = g.oversubscribed_hosts.find(
                               g.hosts.at(static_cast<std::size_t>(rank))) != std::string::npos;
    ctx.host_transport = g.transport;
    ctx.timeout_ms = g.timeout_ms;
    ctx.rendezvous = rv;
    ctx.peers = &peers;
    return ctx;
  }

  // Runs body(rank, backend) on one thread per rank of a fresh group and
  // joins them.  Factory failures are test failures.  A test that bounds
  // how long something takes starts its clock in body, after the group is
  // made: libfabric's first fi_getinfo in a process takes 0.8-1.0 s here
  // (it reads /proc/kallsyms twice), 1.9-2.3 s beside six CPU hogs, and
  // once on the loaded CI machine a leader's call timed from before it
  // read 4.25 s against a bound of 3 s.
  void run(const GroupSpec& g, const std::function<void(int, Backend&)>& body) { run(g, store::Tuning{}, body); }
  // The same with the store's knobs set (buffer bounds, ring sizes, ...).
  void run(const GroupSpec& g, const store::Tuning& t, const std::function<void(int, Backend&)>& body) {
    MemRendezvous rv;
    rendezvous = &rv;
    std::vector<std::thread> threads;
    for (int r = 0; r < g.size; ++r) {
      threads.emplace_back([&, r] {
        auto b = store::make_store_backend_tuned(context(g, r, &rv), t);
        ASSERT_TRUE(b.is_ok()) << "rank " << r << ": " << b.status().message();
        body(r, **b);
      });
    }
    for (auto& t : threads) t.join();
    rendezvous = nullptr;
  }

  ShmDir dir;
  MemRendezvous* rendezvous = nullptr;  // the running group's directory, while run() runs
  FakePeers peers;
};

// Writes v (an exactly representable integer) as element i of dtype dt.
inline void put_value(DType dt, void* base, std::size_t i, double v) {
  switch (dt) {
    case DType::kInt8: static_cast<std::int8_t*>(base)[i] = static_cast<std::int8_t>(static_cast<std::int64_t>(v)); break;
    case DType::kUInt8: static_cast<std::uint8_t*>(base)[i] = static_cast<std::uint8_t>(static_cast<std::int64_t>(v)); break;
    case DType::kInt32: static_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(static_cast<std::int64_t>(v)); break;
    case DType::kInt64: static_cast<std::int64_t*>(base)[i] = static_cast<std::int64_t>(v); break;
    case DType::kFloat16: static_cast<_Float16*>(base)[i] = static_cast<_Float16>(v); break;
    case DType::kBFloat16: {
      const float f = static_cast<float>(v);
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      static_cast<std::uint16_t*>(base)[i] = static_cast<std::uint16_t>(u >> 16);  // exact for small integers
      break;
    }
    case DType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    case DType::kFloat64: static_cast<double*>(base)[i] = v; break;
  }
}

inline constexpr DType kAllDTypes[] = {DType::kInt8,     DType::kUInt8,   DType::kInt32,   DType::kInt64,
                                       DType::kFloat16,  DType::kBFloat16, DType::kFloat32, DType::kFloat64};
inline constexpr Op kAllOps[] = {Op::kSum, Op::kProd, Op::kMin, Op::kMax};

inline bool is_unsigned(DType dt) { return dt == DType::kUInt8; }

// Input of rank r, element i, for op: small integers whose reduction over at
// most 8 ranks is exact in every dtype (products are powers of two ≤ 256,
// which wrap in the 8-bit integer types exactly as the kernels do).
inline double input_value(Op op, DType dt, int r, std::size_t i) {
  const long k = static_cast<long>(i % 9973);
  switch (op) {
    case Op::kSum: return is_unsigned(dt) ? double((r + 2 * k) % 5) : double((r + 2 * k) % 5 - 2);
    case Op::kProd: return double((r + k) % 2 + 1);
    case Op::kMin:
    case Op::kMax: return is_unsigned(dt) ? double((r * 7 + k * 3) % 11) : double((r * 7 + k * 3) % 11 - 5);
  }
  return 0;
}

inline double combine_exact(Op op, double a, double b) {
  switch (op) {
    case Op::kSum: return a + b;
    case Op::kProd: return a * b;
    case Op::kMin: return b < a ? b : a;
    case Op::kMax: return b > a ? b : a;
  }
  return a;
}

// The exact reduction of element i over ranks [0, p).
inline double expected_value(Op op, DType dt, int p, std::size_t i) {
  double acc = input_value(op, dt, 0, i);
  for (int r = 1; r < p; ++r) acc = combine_exact(op, acc, input_value(op, dt, r, i));
  return acc;
}

inline std::vector<char> make_buffer(DType dt, std::size_t count, const std::function<double(std::size_t)>& f) {
  std::vector<char> b(count * dtype_size(dt) + 1);  // +1: never a zero-size buffer
  for (std::size_t i = 0; i < count; ++i) put_value(dt, b.data(), i, f(i));
  return b;
}

}  // namespace accrun::collectives::testing
