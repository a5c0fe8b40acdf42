// The OSU-style benchmark harness shared by the osu_* programs (under
// accrun) and store_micro (forked or under mpirun).  A backend is one table
// entry (Impl): a name and the operations it runs; the harness sweeps sizes,
// interleaves the backends it was given, and prints OSU tables with the
// algbw/busbw columns nccl-tests define.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace accrun::bench {

// One backend's implementation of the measured operations.  Buffers are host
// memory, or device memory with -d cuda; every call returns 0 on success.
// Sizes are in bytes; reductions are float32 sums.  A backend whose calls
// return once queued (NCCL) sets `wait`, which waits for what was queued: the
// harness calls it after the warm-up and before it stops the clock, as
// nccl-tests does.
struct Impl {
  std::string name;
  std::function<int(const void* send, void* recv, std::size_t bytes)> allreduce;
  std::function<int(void* buf, std::size_t bytes, int root)> bcast;
  std::function<int(const void* send, void* recv, std::size_t bytes_per_rank)> allgather;
  std::function<int(const void* send, void* recv, std::size_t recv_bytes)> reduce_scatter;
  std::function<int()> barrier;
  std::function<int(const void* buf, std::size_t bytes, int peer)> send;
  std::function<int(void* buf, std::size_t bytes, int peer)> recv;
  std::function<int()> wait;  // may be empty
};

// Where the measured buffers live: host memory unless a device allocator is
// given (-d cuda).  upload copies host bytes into a buffer from alloc.
struct Memory {
  std::function<void*(std::size_t bytes)> alloc;  // empty: host memory
  std::function<void(void*)> release;
  std::function<int(void* dst, const void* src, std::size_t bytes)> upload;
};

// The launch the benchmark runs in.
struct Env {
  int rank = 0;
  int size = 1;
  std::function<double(double)> sum;  // sum of a value over every rank (collective)
  std::function<double(double)> max;  // its maximum over every rank (collective)
  std::function<void()> sync;         // a barrier outside the measured backends
  Memory memory;
};

struct Options {
  std::string bench = "allreduce";   // latency bw allreduce bcast allgather reduce_scatter barrier
  std::vector<std::string> backends;  // in interleaving order
  std::size_t min_size = 8;
  std::size_t max_size = 4u << 20;
  int iters_small = 1000, iters_large = 100;  // large: above 64 KiB
  int warmup_small = 100, warmup_large = 10;
  int reps = 3;                      // interleaved repetitions per size; the median is printed
  bool cuda = false;                 // -d cuda: device buffers (the nccl and raw-nccl backends)
};

inline void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--backend B[,B...]] [-m MIN:MAX] [-i ITERS] [-x WARMUP] [-r REPS] [-d cuda]\n"
               "  backends: store, mpi, raw-mpi; with -d cuda: nccl, raw-nccl\n"
               "  (several, comma-separated, run interleaved)\n",
               argv0);
}

// Parses the common options; returns false (after a message) on bad input.
inline bool parse_options(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) { std::fprintf(stderr, "%s: option %s needs a value\n", argv[0], a.c_str()); return nullptr; }
      return argv[++i];
    };
    if (a == "--backend" || a == "-b") {
      const char* v = next();
      if (v == nullptr) return false;
      o->backends.clear();
      std::string s = v;
      for (std::size_t at = 0; at <= s.size();) {
        const std::size_t comma = std::min(s.find(',', at), s.size());
        if (comma > at) o->backends.push_back(s.substr(at, comma - at));
        at = comma + 1;
      }
    } else if (a == "-m") {
      const char* v = next();
      if (v == nullptr) return false;
      const char* colon = std::strchr(v, ':');
      if (colon != nullptr) {
        if (colon != v) o->min_size = std::strtoull(v, nullptr, 10);
        o->max_size = std::strtoull(colon + 1, nullptr, 10);
      } else {
        o->max_size = std::strtoull(v, nullptr, 10);
      }
    } else if (a == "-i") {
      const char* v = next();
      if (v == nullptr) return false;
      o->iters_small = std::atoi(v);
      o->iters_large = std::max(1, o->iters_small / 10);
    } else if (a == "-x") {
      const char* v = next();
      if (v == nullptr) return false;
      o->warmup_small = std::atoi(v);
      o->warmup_large = std::max(1, o->warmup_small / 10);
    } else if (a == "-r") {
      const char* v = next();
      if (v == nullptr) return false;
      o->reps = std::max(1, std::atoi(v));
    } else if (a == "-d") {
      const char* v = next();
      if (v == nullptr) return false;
      if (std::strcmp(v, "cuda") != 0) { std::fprintf(stderr, "%s: -d %s: only 'cuda' is known\n", argv[0], v); return false; }
      o->cuda = true;
    } else if (a == "-h" || a == "--help") {
      usage(argv[0]);
      return false;
    } else {
      std::fprintf(stderr, "%s: unknown option '%s'\n", argv[0], a.c_str());
      usage(argv[0]);
      return false;
    }
  }
  if (o->backends.empty()) o->backends.push_back("store");
  if (o->min_size < 1 || o->min_size > o->max_size) {
    std::fprintf(stderr, "%s: -m %zu:%zu: need 1 <= MIN <= MAX\n", argv[0], o->min_size, o->max_size);
    return false;
  }
  return true;
}

// busbw/algbw factor and the byte count algbw is computed from, as nccl-tests.
inline double bus_factor(const std::string& bench, int n) {
  if (bench == "allreduce") return 2.0 * (n - 1) / n;
  if (bench == "allgather" || bench == "reduce_scatter") return double(n - 1) / n;
  return 1.0;
}
inline double alg_bytes(const std::string& bench, std::size_t size, int n) {
  if (bench == "allgather") return double(size) * n;  // the gathered output
  return double(size);
}

// Runs one measurement of `bench` at `size` with impl; returns the mean
// latency in µs of this rank (for bw: MB/s).  Returns < 0 on a failed call.
inline double measure(const std::string& bench, const Impl& im, const Env& env, const Options& o, std::size_t size,
                      char* a, char* b) {
  using Clock = std::chrono::steady_clock;
  const bool large = size > 64 * 1024;
  const int iters = large ? o.iters_large : o.iters_small;
  const int warm = large ? o.warmup_large : o.warmup_small;
  const int n = env.size;
  int rc = 0;
  auto wait = [&]() -> int { return im.wait ? im.wait() : 0; };
  auto once = [&]() -> int {
    if (bench == "allreduce") return im.allreduce(a, b, size);
    if (bench == "bcast") return im.bcast(a, size, 0);
    if (bench == "allgather") return im.allgather(a, b, size);
    if (bench == "reduce_scatter") return im.reduce_scatter(a, b, std::max<std::size_t>(4, size / n / 4 * 4));
    if (bench == "barrier") return im.barrier();
    if (bench == "latency") {
      if (env.rank == 0) {
        if (int r = im.send(a, size, 1)) return r;
        return im.recv(b, size, 1);
      }
      if (env.rank == 1) {
        if (int r = im.recv(b, size, 0)) return r;
        return im.send(a, size, 0);
      }
      return 0;
    }
    return -1;
  };
  if (bench == "bw") {
    constexpr int kWindow = 64;
    auto window = [&]() -> int {
      if (env.rank == 0) {
        for (int w = 0; w < kWindow; ++w)
          if (int r = im.send(a, size, 1)) return r;
        return im.recv(b, 4, 1);
      }
      if (env.rank == 1) {
        for (int w = 0; w < kWindow; ++w)
          if (int r = im.recv(b, size, 0)) return r;
        return im.send(a, 4, 0);
      }
      return 0;
    };
    const int bw_iters = std::max(1, iters / 10), bw_warm = std::max(1, warm / 10);
    for (int i = 0; i < bw_warm && rc == 0; ++i) rc = window();
    if (rc == 0) rc = wait();
    env.sync();
    const auto t0 = Clock::now();
    for (int i = 0; i < bw_iters && rc == 0; ++i) rc = window();
    if (rc == 0) rc = wait();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (rc != 0) return -1;
    return double(size) * kWindow * bw_iters / s / 1e6;
  }
  for (int i = 0; i < warm && rc == 0; ++i) rc = once();
  if (rc == 0) rc = wait();
  env.sync();
  const auto t0 = Clock::now();
  for (int i = 0; i < iters && rc == 0; ++i) rc = once();
  if (rc == 0) rc = wait();
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;
  if (rc != 0) return -1;
  return bench == "latency" ? us / 2 : us;
}

// The size sweep, interleaving the backends: for each size, reps rounds of
// (every backend once); the median over rounds is reported per backend.
// Rank 0 prints one OSU table per backend and, with two or more backends, the
// ratio of each to the last one.  Returns the process exit status.
inline int run(const Options& o, const std::vector<Impl>& impls, const Env& env) {
  const bool p2p = o.bench == "latency" || o.bench == "bw";
  if (p2p && env.size < 2) {
    if (env.rank == 0) std::fprintf(stderr, "osu_%s: needs at least 2 ranks\n", o.bench.c_str());
    return 2;
  }
  std::vector<std::size_t> sizes;
  if (o.bench == "barrier") {
    sizes.push_back(0);
  } else {
    for (std::size_t s = o.min_size; s <= o.max_size; s *= 2) sizes.push_back(s);
  }
  const std::size_t cap = std::max<std::size_t>(o.bench == "allgather" ? o.max_size * env.size : o.max_size, 64);
  // The send side holds float32 ones, the receive side zeros.
  std::vector<char> host_a(cap, 0), host_b(cap, 0);
  for (std::size_t i = 0; i < cap / 4; ++i) reinterpret_cast<float*>(host_a.data())[i] = 1.0f;
  char* a = host_a.data();
  char* b = host_b.data();
  const Memory& mem = env.memory;
  if (mem.alloc) {
    a = static_cast<char*>(mem.alloc(cap));
    b = static_cast<char*>(mem.alloc(cap));
    if (a == nullptr || b == nullptr || mem.upload(a, host_a.data(), cap) != 0 ||
        mem.upload(b, host_b.data(), cap) != 0) {
      std::fprintf(stderr, "osu_%s: rank %d: device buffers of %zu bytes could not be set up\n", o.bench.c_str(),
                   env.rank, cap);
      return 1;
    }
  }
  std::vector<std::vector<double>> med(impls.size(), std::vector<double>(sizes.size(), 0));
  int failed = 0;
  // Unrecorded rounds of every backend at the first size, for a second at
  // least (the longest over the ranks decides, so every rank runs as many):
  // the first calls after start-up pay for what no later size pays (page
  // faults, new connections, the launch's own processes finishing).  Across
  // the test bed's hosts the first size of a sweep measured up to 2.7 times
  // its neighbours without them, and after one round still 0.4-8.5 times,
  // in either backend.
  if (!sizes.empty()) {
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    do {
      for (const Impl& im : impls)
        if (measure(o.bench, im, env, o, sizes[0], a, b) < 0) failed = 1;
      // (A rank whose call failed stops every rank here.)
    } while (env.max(failed != 0 ? 1e9 : std::chrono::duration<double>(Clock::now() - t0).count()) <
             1.0);
  }
  for (std::size_t si = 0; si < sizes.size(); ++si) {
    std::vector<std::vector<double>> samples(impls.size());
    for (int rep = 0; rep < o.reps; ++rep)
      for (std::size_t k = 0; k < impls.size(); ++k) {
        double v = measure(o.bench, impls[k], env, o, sizes[si], a, b);
        if (v < 0) failed = 1;
        // A collective's time is its slowest rank's: the calls run back to
        // back, and a broadcast's root only hands its data to the network
        // (across hosts the kernel's socket buffers take tens of MiB), so
        // the mean over ranks, as OSU prints it, counted the root's few
        // microseconds against the others' delivery.  Point to point: rank
        // 0's figure.
        samples[k].push_back(p2p ? env.sum(env.rank == 0 ? v : 0.0) : env.max(v));
      }
    for (std::size_t k = 0; k < impls.size(); ++k) {
      auto& s = samples[k];
      std::sort(s.begin(), s.end());
      med[k][si] = s[s.size() / 2];
    }
  }
  if (mem.alloc) {
    mem.release(a);
    mem.release(b);
  }
  if (env.rank != 0) return failed;
  for (std::size_t k = 0; k < impls.size(); ++k) {
    std::printf("# accrun OSU-style %s, %d ranks, backend %s, %s buffers (median of %d interleaved runs)\n",
                o.bench.c_str(), env.size, impls[k].name.c_str(), mem.alloc ? "device" : "host", o.reps);
    if (o.bench == "bw") {
      std::printf("# Size      Bandwidth (MB/s)\n");
    } else if (o.bench == "barrier") {
      std::printf("# Avg Latency(us)\n");
    } else {
      std::printf("# Size       Avg Latency(us)   algbw(GB/s)   busbw(GB/s)\n");
    }
    for (std::size_t si = 0; si < sizes.size(); ++si) {
      const double v = med[k][si];
      if (o.bench == "bw") {
        std::printf("%-10zu %18.2f\n", sizes[si], v);
      } else if (o.bench == "barrier") {
        std::printf("%16.2f\n", v);
      } else {
        const double algbw = alg_bytes(o.bench, sizes[si], env.size) / (v * 1e-6) / 1e9;
        std::printf("%-10zu %18.2f %13.3f %13.3f\n", sizes[si], v, algbw, algbw * bus_factor(o.bench, env.size));
      }
    }
  }
  if (impls.size() >= 2) {
    // Each backend against the last one named, per size.
    const std::size_t ref = impls.size() - 1;
    auto table = [&](const char* title, const char* op, const char* suffix, auto cell) {
      std::printf("# %s %s: time of each backend %s time of %s%s\n", title, o.bench.c_str(), op,
                  impls[ref].name.c_str(), suffix);
      std::printf("# Size    ");
      for (std::size_t k = 0; k < ref; ++k) std::printf(" %12s", impls[k].name.c_str());
      std::printf("\n");
      for (std::size_t si = 0; si < sizes.size(); ++si) {
        std::printf("%-10zu", sizes[si]);
        for (std::size_t k = 0; k < ref; ++k) std::printf(" %12.3f", cell(k, si));
        std::printf("\n");
      }
    };
    table("ratio", "/", o.bench == "bw" ? " (bandwidth: inverse)" : "", [&](std::size_t k, std::size_t si) {
      return o.bench == "bw" ? med[ref][si] / med[k][si] : med[k][si] / med[ref][si];
    });
    if (o.bench != "bw") {
      table("difference", "-", " (us)", [&](std::size_t k, std::size_t si) { return med[k][si] - med[ref][si]; });
    }
  }
  std::fflush(stdout);
  return failed;
}

}  // namespace accrun::bench
