// Store backend point-to-point, grouping, bad arguments, setup failures,
// dead peers and timeouts, in process.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "store/store_backend.hpp"
#include "store_harness.hpp"

namespace accrun::collectives::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::int32_t> pattern(int from, std::size_t n, int salt) {
  std::vector<std::int32_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = from * 1000003 + static_cast<std::int32_t>(i) * 7 + salt;
  return v;
}

TEST(StoreP2P, BothSendThenBothReceiveWithoutGrouping) {
  // The pattern that deadlocks unbuffered sends: A and B each send to the
  // other first, then receive.  Small, ring-sized and spilled (4 MiB) messages.
  World w;
  w.run(spec("swap", 2), [&](int r, Backend& b) {
    const int peer = 1 - r;
    for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{200000}, std::size_t{1u << 20}}) {
      auto out = pattern(r, n, 1);
      ASSERT_TRUE(b.send(out.data(), n, DType::kInt32, peer, nullptr).is_ok());
      std::vector<std::int32_t> in(n);
      Status s = b.recv(in.data(), n, DType::kInt32, peer, nullptr);
      ASSERT_TRUE(s.is_ok()) << s.message();
      ASSERT_EQ(in, pattern(peer, n, 1)) << "n=" << n;
    }
  });
  EXPECT_TRUE(w.dir.entries().empty());
}

TEST(StoreP2P, ManyMessagesKeepTheirOrderAcrossRingWraps) {
  World w;
  w.run(spec("stream", 3), [&](int r, Backend& b) {
    // Everyone sends 300 messages of varying size to everyone (itself too),
    // then receives them; the rings wrap and some messages spill.
    for (int m = 0; m < 300; ++m)
      for (int q = 0; q < 3; ++q) {
        auto v = pattern(r, static_cast<std::size_t>(1 + (m * 37) % 900), m);
        ASSERT_TRUE(b.send(v.data(), v.size(), DType::kInt32, q, nullptr).is_ok());
      }
    for (int q = 0; q < 3; ++q)
      for (int m = 0; m < 300; ++m) {
        std::vector<std::int32_t> v(static_cast<std::size_t>(1 + (m * 37) % 900));
        ASSERT_TRUE(b.recv(v.data(), v.size(), DType::kInt32, q, nullptr).is_ok());
        ASSERT_EQ(v, pattern(q, v.size(), m)) << "from " << q << " message " << m;
      }
  });
  EXPECT_TRUE(w.dir.entries().empty());
}

TEST(StoreP2P, GroupStartEndPostsReceivesFirst) {
  World w;
  w.run(spec("grouped", 4), [&](int r, Backend& b) {
    // A ring shift with the receive posted before the send, inside a group.
    const int next = (r + 1) % 4, prev = (r + 3) % 4;
    std::vector<std::int32_t> in(300000);
    auto out = pattern(r, in.size(), 9);
    ASSERT_TRUE(b.group_start().is_ok());
    ASSERT_TRUE(b.recv(in.data(), in.size(), DType::kInt32, prev, nullptr).is_ok());
    ASSERT_TRUE(b.send(out.data(), out.size(), DType::kInt32, next, nullptr).is_ok());
    ASSERT_TRUE(b.group_end().is_ok());
    ASSERT_EQ(in, pattern(prev, in.size(), 9));
    EXPECT_EQ(b.group_end().code(), Code::kInvalidUsage);
  });
}

TEST(StoreP2P, OversizedMessageStaysQueued) {
  World w;
  w.run(spec("trunc", 2), [&](int r, Backend& b) {
    if (r == 0) {
      auto v = pattern(0, 10, 0);
      ASSERT_TRUE(b.send(v.data(), 10, DType::kInt32, 1, nullptr).is_ok());
    } else {
      std::vector<std::int32_t> small(5), big(10);
      Status s = b.recv(small.data(), 5, DType::kInt32, 0, nullptr);
      EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.message();
      ASSERT_TRUE(b.recv(big.data(), 10, DType::kInt32, 0, nullptr).is_ok());
      EXPECT_EQ(big, pattern(0, 10, 0));
    }
  });
}

TEST(StoreP2P, UnreceivedSpilledMessagesAreRemovedAtDestroy) {
  World w;
  w.run(spec("unread", 2), [&](int r, Backend& b) {
    std::vector<std::int32_t> v(1u << 20, r);  // 4 MiB: spilled to a side file
    ASSERT_TRUE(b.send(v.data(), v.size(), DType::kInt32, 1 - r, nullptr).is_ok());
    ASSERT_TRUE(b.barrier().is_ok());
  });
  EXPECT_TRUE(w.dir.entries().empty()) << w.dir.entries().front();
}

TEST(StoreArgs, BadArgumentsAreErrorsThatLeaveTheGroupUsable) {
  World w;
  w.run(spec("args", 2), [&](int r, Backend& b) {
    int x = 1, y = 0, dummy = 0;
    EXPECT_EQ(b.broadcast(&x, 1, DType::kInt32, 2, nullptr).code(), Code::kInvalidArgument);
    EXPECT_EQ(b.reduce(&x, &y, 1, DType::kInt32, Op::kSum, -1, nullptr).code(), Code::kInvalidArgument);
    EXPECT_EQ(b.allreduce(&x, &y, 1, DType::kInt32, Op::kSum, &dummy).code(), Code::kInvalidArgument);
    EXPECT_EQ(b.allreduce(nullptr, &y, 1, DType::kInt32, Op::kSum, nullptr).code(), Code::kInvalidArgument);
    EXPECT_EQ(b.send(&x, 1, DType::kInt32, 5, nullptr).code(), Code::kInvalidArgument);
    ASSERT_TRUE(b.group_start().is_ok());
    EXPECT_EQ(b.barrier().code(), Code::kInvalidUsage);
    ASSERT_TRUE(b.group_end().is_ok());
    Status s = b.allreduce(&x, &y, 1, DType::kInt32, Op::kSum, nullptr);
    ASSERT_TRUE(s.is_ok()) << s.message();
    EXPECT_EQ(y, 2);
    (void)r;
  });
}

TEST(StoreSetup, MissingMemberIsATimeoutNamingIt) {
  World w;
  MemRendezvous rv;
  GroupSpec g = spec("missing", 3, 300, {10, 11, 12});
  Status s0, s1;
  const auto start = Clock::now();
  std::thread t0([&] { auto b = make_store_backend(w.context(g, 0, &rv)); s0 = b.status(); });
  std::thread t1([&] { auto b = make_store_backend(w.context(g, 1, &rv)); s1 = b.status(); });
  t0.join();
  t1.join();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(s0.code(), Code::kTimeout) << s0.message();
  EXPECT_NE(s0.message().find("job rank 12"), std::string::npos) << s0.message();
  EXPECT_FALSE(s1.is_ok());
  EXPECT_TRUE(w.dir.entries().empty());
}

TEST(StoreSetup, RankZeroNeverArrives) {
  World w;
  MemRendezvous rv;
  GroupSpec g = spec("norank0", 2, 200);
  auto b = make_store_backend(w.context(g, 1, &rv));
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), Code::kTimeout);
  EXPECT_NE(b.status().message().find("group rank 0"), std::string::npos) << b.status().message();
}

TEST(StoreFailure, DeadPeerMidCollectiveIsRemoteNamingIt) {
  // Job rank 7 (group rank 2) joins, then stops participating; the monitor
  // reports it dead a little later.  The survivors' allreduce (small and
  // chunked), and every call after it, fails with kRemote naming it, well
  // within 5 s.
  for (std::size_t count : {std::size_t{4}, std::size_t{100000}}) {
    World w;
    GroupSpec g = spec("death", 3, -1, {5, 6, 7});
    std::thread reporter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      w.peers.fail(7, "rank 7 on host localhost was killed by signal 9");
    });
    w.run(g, [&](int r, Backend& b) {
      if (r == 2) return;  // "dies"
      std::vector<float> in(count, 1.0f), out(in.size());
      const auto start = Clock::now();
      Status s = b.allreduce(in.data(), out.data(), in.size(), DType::kFloat32, Op::kSum, nullptr);
      EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
      EXPECT_EQ(s.code(), Code::kRemote) << s.message();
      EXPECT_NE(s.message().find("job rank 7"), std::string::npos) << s.message();
      EXPECT_EQ(b.barrier().code(), Code::kRemote);
    });
    reporter.join();
  }
}

TEST(StoreFailure, BroadcastRunningAheadOfADeadReaderIsRemote) {
  // The root may run ahead of a reader only as far as the broadcast ring:
  // with group rank 2 gone, the root's calls (and the other reader's) fail
  // with kRemote naming it, well within 5 s, instead of running on or hanging.
  World w;
  GroupSpec g = spec("deadreader", 3, -1, {5, 6, 7});
  std::thread reporter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    w.peers.fail(7, "rank 7 on host localhost was killed by signal 9");
  });
  w.run(g, [&](int r, Backend& b) {
    if (r == 2) return;  // "dies"
    const auto start = Clock::now();
    Status s;
    std::int64_t v = 0;
    for (int i = 0; i < 1'000'000 && s.is_ok(); ++i) {
      v = r == 0 ? i : -1;
      s = b.broadcast(&v, 1, DType::kInt64, 0, nullptr);
      if (s.is_ok()) {
        ASSERT_EQ(v, i);
      }
    }
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
    EXPECT_EQ(s.code(), Code::kRemote) << s.message();
    if (r == 0) {
      EXPECT_NE(s.message().find("job rank 7"), std::string::npos) << s.message();
    }
  });
  reporter.join();
}

TEST(StoreFailure, ARootThatExitsRightAfterItsBroadcastStillDeliversIt) {
  // A small broadcast's root puts the data in place and returns without
  // waiting for its readers; it may then exit.  A reader that was already
  // waiting, and that asks whether the root failed only after the root put
  // the data there and exited, takes the data: the root's end is not this
  // call's failure.  (The test lets the root broadcast, return and be
  // reported gone exactly while the reader asks about it.)
  World w;
  GroupSpec g = spec("rootexits", 2, 20'000, {5, 6});
  std::mutex mu;
  std::condition_variable cv;
  bool armed = false, go = false, root_done = false;
  w.peers.on_ask = [&](int job_rank) {
    std::unique_lock<std::mutex> lock(mu);
    if (job_rank != 5 || !armed || go) return;
    go = true;
    cv.notify_all();
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return root_done; }));
    lock.unlock();
    w.peers.fail(5, "rank 5 on host localhost exited with status 0");
  };
  w.run(g, [&](int r, Backend& b) {
    std::int64_t v = r == 0 ? 42 : -1;
    if (r == 0) {
      {
        std::unique_lock<std::mutex> lock(mu);
        ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return go; }));
      }
      ASSERT_TRUE(b.broadcast(&v, 1, DType::kInt64, 0, nullptr).is_ok());
      std::lock_guard<std::mutex> lock(mu);
      root_done = true;
      cv.notify_all();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      armed = true;
    }
    Status s = b.broadcast(&v, 1, DType::kInt64, 0, nullptr);
    EXPECT_TRUE(s.is_ok()) << s.message();
    EXPECT_EQ(v, 42);
    // The next call has nothing in place: there the root's end is the error.
    s = b.broadcast(&v, 1, DType::kInt64, 0, nullptr);
    EXPECT_EQ(s.code(), Code::kRemote) << s.message();
    EXPECT_NE(s.message().find("job rank 5"), std::string::npos) << s.message();
  });
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_TRUE(go) << "the reader never asked about the root while waiting";
}

TEST(StoreFailure, RankThatGaveUpStopsTheOthers) {
  // Rank 1 times out waiting for rank 2 (alive but stuck elsewhere); rank 0,
  // waiting on rank 1 with no timeout, learns of it at once.
  World w;
  w.run(spec("gaveup", 3, -1), [&](int r, Backend& b) {
    if (r == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
      return;
    }
    if (r == 1) b.set_timeout(150);
    const auto start = Clock::now();
    std::vector<double> v(5000, 1.0), out(v.size());
    Status s = b.allreduce(v.data(), out.data(), v.size(), DType::kFloat64, Op::kSum, nullptr);
    EXPECT_FALSE(s.is_ok());
    EXPECT_EQ(s.code(), Code::kTimeout) << s.message();
    EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(700)) << "rank " << r;
  });
}

// Keys as files, so a forked process can meet the test process.
class FileRendezvous final : public Rendezvous {
 public:
  explicit FileRendezvous(std::string dir) : dir_(std::move(dir)) {}
  Status publish(const std::string& key, const std::string& value) override {
    const std::string tmp = dir_ + "/rv.tmp." + std::to_string(getpid()), dst = dir_ + "/rv." + key;
    { std::ofstream f(tmp); f << value; }
    return std::rename(tmp.c_str(), dst.c_str()) == 0 ? Status::ok() : system_error("rename");
  }
  Result<std::string> lookup(const std::string& key, int timeout_ms) override {
    const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      std::ifstream f(dir_ + "/rv." + key);
      if (f) { std::stringstream ss; ss << f.rdbuf(); return ss.str(); }
      if (Clock::now() > end) return timeout_error("key " + key);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

 private:
  std::string dir_;
};

TEST(StoreFailure, KilledProcessIsRemoteWithoutAMonitor) {
  // A real second process joins, then is SIGKILLed; with no PeerMonitor the
  // survivor notices through kill(pid, 0) and names the peer.
  World w;
  const pid_t parent = getpid();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  GroupSpec g = spec("killed", 2, 5000, {0, 1});
  if (child == 0) {
    FileRendezvous rv(w.dir.path());
    GroupContext ctx = w.context(g, 1, nullptr);
    ctx.rendezvous = &rv;
    ctx.peers = nullptr;
    ctx.members[0].pid = parent;
    ctx.members[1].pid = getpid();
    auto b = make_store_backend(ctx);
    if (b.is_ok()) (void)(*b)->barrier();
    raise(SIGKILL);
    _exit(1);
  }
  FileRendezvous rv(w.dir.path());
  GroupContext ctx = w.context(g, 0, nullptr);
  ctx.rendezvous = &rv;
  ctx.peers = nullptr;
  ctx.timeout_ms = -1;
  ctx.members[1].pid = child;
  auto b = make_store_backend(ctx);
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  ASSERT_TRUE((*b)->barrier().is_ok());
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);  // reaped: the pid is gone
  ASSERT_TRUE(WIFSIGNALED(st));
  const auto start = Clock::now();
  std::vector<float> v(100000, 1.0f), out(v.size());
  Status s = (*b)->allreduce(v.data(), out.data(), v.size(), DType::kFloat32, Op::kSum, nullptr);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(s.code(), Code::kRemote) << s.message();
  EXPECT_NE(s.message().find("pid " + std::to_string(child)), std::string::npos) << s.message();
  for (const auto& e : w.dir.entries()) EXPECT_EQ(e.rfind("rv.", 0), 0u) << "left behind: " << e;
}

TEST(StoreFailure, RecvFromDeadPeerIsRemote) {
  World w;
  GroupSpec g = spec("deadrecv", 2, -1);
  std::thread reporter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    w.peers.fail(1, "rank 1 exited with status 3");
  });
  w.run(g, [&](int r, Backend& b) {
    if (r == 1) return;
    int v = 0;
    Status s = b.recv(&v, 1, DType::kInt32, 1, nullptr);
    EXPECT_EQ(s.code(), Code::kRemote) << s.message();
    EXPECT_NE(s.message().find("exited with status 3"), std::string::npos);
  });
  reporter.join();
}

TEST(StoreFailure, StalledCollectiveTimesOut) {
  World w;
  w.run(spec("stall", 2), [&](int r, Backend& b) {
    b.set_timeout(200);
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(600));
      return;
    }
    const auto start = Clock::now();
    std::uint8_t v = 1;
    Status s = b.broadcast(&v, 1, DType::kUInt8, 1, nullptr);
    const auto took = Clock::now() - start;
    EXPECT_EQ(s.code(), Code::kTimeout) << s.message();
    EXPECT_GE(took, std::chrono::milliseconds(190));
    EXPECT_LT(took, std::chrono::seconds(3));
    int x = 0;
    EXPECT_EQ(b.recv(&x, 1, DType::kInt32, 1, nullptr).code(), Code::kTimeout);
  });
}

TEST(StoreTuning, TinyHalvesAndRingsStillGiveExactResults) {
  // Small halves force many pipelined rounds, small rings force spills.
  World w;
  store::Tuning t;
  t.half_bytes = 4096;
  t.allreduce_small_max = 256;
  t.allreduce_chunk = 1024;
  t.bcast_chunk = 512;
  t.allgather_chunk = 768;
  t.ring_bytes = 4096;
  t.allreduce_over_cma_min = 1024;  // 5000 elements take the cross-memory-attach paths
  t.allreduce_cma_min = 1024;
  t.allgather_cma_min = 1024;
  t.allgather_over_cma_min = 1024;
  t.bcast_cma_min = 1024;
  t.bcast_small_slots = 3;  // broadcast rings wrap many times
  t.bcast_tiny_slots = 2;
  t.bcast_slots = 3;
  for (bool cma : {false, true}) {
  t.cma = cma;
  MemRendezvous rv;
  GroupSpec g = spec(cma ? "tiny-cma" : "tiny", 3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto b = store::make_store_backend_tuned(w.context(g, r, &rv), t);
      ASSERT_TRUE(b.is_ok()) << b.status().message();
      for (std::size_t n : {std::size_t{1}, std::size_t{63}, std::size_t{5000}}) {
        std::vector<double> in(n, r + 1.0), out(n);
        ASSERT_TRUE((*b)->allreduce(in.data(), out.data(), n, DType::kFloat64, Op::kSum, nullptr).is_ok());
        ASSERT_EQ(out, std::vector<double>(n, 6.0));
        std::vector<std::int32_t> bc(n, r);
        ASSERT_TRUE((*b)->broadcast(bc.data(), n, DType::kInt32, 2, nullptr).is_ok());
        ASSERT_EQ(bc, std::vector<std::int32_t>(n, 2));
        // Each rank's part, gathered from its send buffer and in place.
        std::vector<std::int32_t> all(3 * n), want(3 * n);
        for (int q = 0; q < 3; ++q)
          for (std::size_t i = 0; i < n; ++i) want[q * n + i] = q * 100000 + static_cast<std::int32_t>(i);
        std::vector<std::int32_t> part(want.begin() + r * n, want.begin() + (r + 1) * n);
        ASSERT_TRUE((*b)->allgather(part.data(), all.data(), n, DType::kInt32, nullptr).is_ok());
        ASSERT_EQ(all, want);
        std::vector<std::int32_t> inplace(3 * n, -1);
        std::copy(part.begin(), part.end(), inplace.begin() + r * n);
        ASSERT_TRUE((*b)->allgather(inplace.data(), inplace.data(), n, DType::kInt32, nullptr).is_ok());
        ASSERT_EQ(inplace, want);
        // A send buffer inside the receive buffer, in another rank's part
        // (never at its start: send == recv means in place): it is
        // overwritten by that rank's part during the call.
        std::vector<std::int32_t> inside(3 * n, -1);
        const std::size_t at = static_cast<std::size_t>(r == 2 ? 1 : r + 1) * n;
        std::copy(part.begin(), part.end(), inside.begin() + static_cast<long>(at));
        ASSERT_TRUE((*b)->allgather(inside.data() + at, inside.data(), n, DType::kInt32, nullptr).is_ok());
        ASSERT_EQ(inside, want) << "rank " << r << " n " << n << " cma " << cma;
        std::vector<std::int64_t> rs(3 * n, r), rs_out(n);
        ASSERT_TRUE((*b)->reducescatter(rs.data(), rs_out.data(), n, DType::kInt64, Op::kSum, nullptr).is_ok());
        ASSERT_EQ(rs_out, std::vector<std::int64_t>(n, 3));
        auto v = pattern(r, n, 3);
        ASSERT_TRUE((*b)->send(v.data(), n, DType::kInt32, (r + 1) % 3, nullptr).is_ok());
        std::vector<std::int32_t> got(n);
        ASSERT_TRUE((*b)->recv(got.data(), n, DType::kInt32, (r + 2) % 3, nullptr).is_ok());
        ASSERT_EQ(got, pattern((r + 2) % 3, n, 3));
      }
    });
  }
  for (auto& th : threads) th.join();
  }
  EXPECT_TRUE(w.dir.entries().empty());
}

// Which allreduce path a message takes on a host: the one round while it
// is at most allreduce_small_max, except where three or more ranks with a
// CPU each would read too much just-written memory of the others.
TEST(StoreTuning, OneRoundAllreduceNarrowsWithMoreRanksOnCoresOfTheirOwn) {
  const store::Tuning t;
  ASSERT_EQ(t.allreduce_small_max, 16u * 1024);
  ASSERT_EQ(t.allreduce_small_extra_max, 2048u);
  EXPECT_TRUE(store::allreduce_in_one_round(t, 16 * 1024, 2, false));
  EXPECT_FALSE(store::allreduce_in_one_round(t, 16 * 1024 + 1, 2, false));
  EXPECT_TRUE(store::allreduce_in_one_round(t, 16 * 1024, 4, true)) << "oversubscribed: one round saves rounds of waits";
  EXPECT_TRUE(store::allreduce_in_one_round(t, 1024, 4, false));   // 3*2/4 * 1024 = 1536
  EXPECT_FALSE(store::allreduce_in_one_round(t, 2048, 4, false));  // 3072
  EXPECT_TRUE(store::allreduce_in_one_round(t, 256, 8, false));    // 7*6/8 * 256 = 1344
  EXPECT_FALSE(store::allreduce_in_one_round(t, 512, 8, false));   // 2688
  EXPECT_TRUE(store::allreduce_in_one_round(t, 3072, 3, false));   // 2*1/3 * 3072 = 2048
  EXPECT_FALSE(store::allreduce_in_one_round(t, 4096, 3, false));
  store::Tuning never = t;
  never.allreduce_small_extra_max = SIZE_MAX / (1u << 20);
  EXPECT_TRUE(store::allreduce_in_one_round(never, 16 * 1024, 64, false));
}

// Single-copy broadcast below 16 MiB only with one reader, from 32 KiB.
TEST(StoreTuning, MidSizedSingleCopyBroadcastOnlyWithOneReader) {
  const store::Tuning t;
  EXPECT_TRUE(store::broadcast_single_copy(t, 256 * 1024, 2));
  EXPECT_FALSE(store::broadcast_single_copy(t, 256 * 1024, 3));
  EXPECT_FALSE(store::broadcast_single_copy(t, 256 * 1024, 8));
  EXPECT_TRUE(store::broadcast_single_copy(t, 32 * 1024, 2));
  EXPECT_FALSE(store::broadcast_single_copy(t, 16 * 1024, 2));
  EXPECT_TRUE(store::broadcast_single_copy(t, 1024 * 1024, 2));
  EXPECT_TRUE(store::broadcast_single_copy(t, (16u << 20) - 1, 2));
  EXPECT_FALSE(store::broadcast_single_copy(t, (16u << 20) - 1, 3));
  EXPECT_TRUE(store::broadcast_single_copy(t, 16u << 20, 8));
}

// The chunked rounds, forced at every size, with fewer elements than ranks
// (some ranks reduce an empty slice) and counts that do not divide.
TEST(StoreTuning, ChunkedAllreduceOfFewerElementsThanRanksIsExact) {
  World w;
  store::Tuning t;
  t.allreduce_small_max = 0;
  MemRendezvous rv;
  const GroupSpec g = spec("chunked-few", 5);
  std::vector<std::thread> threads;
  for (int r = 0; r < 5; ++r) {
    threads.emplace_back([&, r] {
      auto b = store::make_store_backend_tuned(w.context(g, r, &rv), t);
      ASSERT_TRUE(b.is_ok()) << b.status().message();
      for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{4}, std::size_t{7}, std::size_t{301}}) {
        std::vector<std::int32_t> in(n), out(n, -1), want(n);
        for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<std::int32_t>(i * 10 + r);
        for (std::size_t i = 0; i < n; ++i) want[i] = static_cast<std::int32_t>(i * 10 * 5 + 10);
        ASSERT_TRUE((*b)->allreduce(in.data(), out.data(), n, DType::kInt32, Op::kSum, nullptr).is_ok());
        ASSERT_EQ(out, want) << "rank " << r << " n " << n;
        std::vector<std::int32_t> mx(n, -1);
        ASSERT_TRUE((*b)->allreduce(in.data(), mx.data(), n, DType::kInt32, Op::kMax, nullptr).is_ok());
        for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(mx[i], static_cast<std::int32_t>(i * 10 + 4)) << "rank " << r;
      }
    });
  }
  for (auto& th : threads) th.join();
}

// Broadcasts of up to 8 bytes go through the tiny ring, two slots to a
// line, 9 bytes and up through the small one: sizes on both sides of the
// edge, every root, a ring of 3 slots that wraps every few calls and
// 2-slot lines shared by consecutive calls, with other collectives between.
TEST(StoreTuning, TinyRingBroadcastsAcrossItsEdgeAreExact) {
  for (int members : {2, 3}) {
    World w;
    store::Tuning t;
    t.bcast_tiny_slots = 3;
    t.bcast_small_slots = 2;
    MemRendezvous rv;
    const GroupSpec g = spec("tiny-ring" + std::to_string(members), members);
    std::vector<std::thread> threads;
    for (int r = 0; r < members; ++r) {
      threads.emplace_back([&, r] {
        auto b = store::make_store_backend_tuned(w.context(g, r, &rv), t);
        ASSERT_TRUE(b.is_ok()) << b.status().message();
        for (int call = 0; call < 400; ++call) {
          const std::size_t n = 1 + static_cast<std::size_t>(call % 10);  // 1..10 bytes
          const int root = (call / 10) % members;
          std::vector<std::uint8_t> v(n), want(n);
          for (std::size_t i = 0; i < n; ++i) {
            want[i] = static_cast<std::uint8_t>(call * 7 + i);
            v[i] = r == root ? want[i] : 0xee;
          }
          ASSERT_TRUE((*b)->broadcast(v.data(), n, DType::kUInt8, root, nullptr).is_ok()) << "call " << call;
          ASSERT_EQ(v, want) << "rank " << r << " call " << call;
          if (call % 37 == 0) {
            std::int64_t x = r, sum = -1;
            ASSERT_TRUE((*b)->allreduce(&x, &sum, 1, DType::kInt64, Op::kSum, nullptr).is_ok());
            ASSERT_EQ(sum, members * (members - 1) / 2);
          }
        }
        EXPECT_TRUE((*b)->barrier().is_ok());
      });
    }
    for (auto& th : threads) th.join();
  }
}

}  // namespace
}  // namespace accrun::collectives::testing
