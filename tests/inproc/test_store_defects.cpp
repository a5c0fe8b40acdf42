// Store backend, in process: members that leave normally, a full /dev/shm,
// the bound on buffered sends, mismatched collective arguments, and what a
// timeout names.
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "store/store_backend.hpp"
#include "store_harness.hpp"

namespace accrun::collectives::testing {
namespace {

using Clock = std::chrono::steady_clock;

bool has(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

TEST(StoreDeparture, MemberThatLeftNormallyDoesNotFailOthersCalls) {
  // Group rank 2 destroys its handle and goes; the job's monitor then says
  // its process is gone (as it does for any process that no longer
  // exists).  Ranks 0 and 1 exchange 4 MiB each way, rank 0 waiting in recv
  // while rank 1 is still busy: their calls do not involve rank 2 and
  // succeed with exact bytes.
  World w;
  std::atomic<bool> left{false};
  const std::size_t n = (4u << 20) / sizeof(std::int32_t);
  w.run(spec("departure", 3, 20'000), [&](int r, Backend& b) {
    if (r == 2) {
      left = true;
      return;  // the handle is destroyed as the thread ends
    }
    while (!left) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (r == 0) w.peers.fail(2, "rank 2 on host localhost is gone (process no longer exists)");
    std::vector<std::int32_t> out(n), in(n, -1);
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::int32_t>(i * 3 + r);
    const int peer = 1 - r;
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(150));  // rank 0 waits in recv meanwhile
    Status s = b.send(out.data(), n, DType::kInt32, peer, nullptr);
    ASSERT_TRUE(s.is_ok()) << s.message();
    s = b.recv(in.data(), n, DType::kInt32, peer, nullptr);
    ASSERT_TRUE(s.is_ok()) << "rank " << r << ": " << s.message();
    for (std::size_t i = 0; i < n; i += 4099) ASSERT_EQ(in[i], static_cast<std::int32_t>(i * 3 + peer));
    // A collective needs rank 2: that one fails, naming it.
    b.set_timeout(5000);
    s = b.barrier();
    EXPECT_EQ(s.code(), Code::kRemote) << s.message();
    EXPECT_TRUE(has(s, "job rank 2")) << s.message();
  });
}

// Messages sent to a member that has destroyed its group are never read:
// their side files go when the sender destroys its own (they stayed in the
// job's directory until the job ended).
TEST(StoreDeparture, SideFilesForAMemberThatLeftGoWithTheSender) {
  World w;
  store::Tuning t;
  t.ring_bytes = 64 << 10;
  MemRendezvous rv;
  const GroupSpec g = spec("leftfiles", 2, 20'000);
  auto side_files = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(w.dir.path()))
      n += e.path().filename().string().find("-p0-") != std::string::npos ? 1 : 0;
    return n;
  };
  std::atomic<bool> left{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto b = store::make_store_backend_tuned(w.context(g, r, &rv), t);
      ASSERT_TRUE(b.is_ok()) << b.status().message();
      ASSERT_TRUE((*b)->barrier().is_ok());
      if (r == 1) {
        b->reset();  // accrun_group_destroy
        left = true;
        return;
      }
      while (!left) std::this_thread::yield();
      std::vector<char> m(1 << 20, 'x');
      for (int k = 0; k < 2; ++k) ASSERT_TRUE((*b)->send(m.data(), m.size(), DType::kUInt8, 1, nullptr).is_ok());
      EXPECT_EQ(side_files(), 2);
      b->reset();
      EXPECT_EQ(side_files(), 0);
    });
  }
  for (auto& th : threads) th.join();
}

// ---- mismatched arguments

TEST(StoreMismatch, AllreduceCountsThatDifferFailEveryMemberNamingBoth) {
  for (std::size_t base : {std::size_t{4}, std::size_t{100'000}}) {
    World w;
    w.run(spec("count", 2, 5000), [&](int r, Backend& b) {
      const std::size_t count = base * static_cast<std::size_t>(r + 1);
      std::vector<float> in(count, 1.0f), out(count);
      Status s = b.allreduce(in.data(), out.data(), count, DType::kFloat32, Op::kSum, nullptr);
      EXPECT_EQ(s.code(), Code::kInvalidUsage) << "rank " << r << ": " << s.message();
      if (s.code() == Code::kInvalidUsage) {
        EXPECT_TRUE(has(s, "allreduce of " + std::to_string(base) + " float32 (sum)")) << s.message();
        EXPECT_TRUE(has(s, "allreduce of " + std::to_string(2 * base) + " float32 (sum)")) << s.message();
      }
      EXPECT_FALSE(b.barrier().is_ok());
    });
  }
}

TEST(StoreMismatch, DtypeAndOpThatDifferAreNamed) {
  World w;
  w.run(spec("dtype", 3, 5000), [&](int r, Backend& b) {
    std::vector<std::int32_t> in(2000, 1), out(in.size());
    const DType dt = r == 2 ? DType::kFloat32 : DType::kInt32;
    const Op op = r == 1 ? Op::kMax : Op::kSum;
    Status s = b.allreduce(in.data(), out.data(), in.size(), dt, op, nullptr);
    // Whoever found the disagreement, every member's error is the same
    // misuse, not a peer's failure.
    EXPECT_EQ(s.code(), Code::kInvalidUsage) << "rank " << r << ": " << s.message();
    EXPECT_TRUE(has(s, "float32") || has(s, "max")) << s.message();
  });
}

// Counts on either side of a path's threshold (the small ring, the chunk
// ring, single copy): the reader looks where the root did not put it.  And
// two broadcasts whose counts are swapped between the members: each
// member's first call would meet the root's second.  Either way no data
// moves to the wrong call and no member waits for the timeout.
TEST(StoreMismatch, BroadcastCountsOnDifferentPathsOrSwappedFail) {
  const std::vector<std::pair<std::size_t, std::size_t>> pairs = {{100, 2000}, {2000, 100}, {200'000, 1000}, {1000, 200'000}};
  for (const auto& [root_n, other_n] : pairs) {
    World w;
    w.run(spec("paths", 2, 20'000), [&](int r, Backend& b) {
      std::vector<std::uint8_t> v(std::max(root_n, other_n), static_cast<std::uint8_t>(r == 0 ? 7 : 0));
      const auto t0 = std::chrono::steady_clock::now();
      Status s = b.broadcast(v.data(), r == 0 ? root_n : other_n, DType::kUInt8, 0, nullptr);
      if (s.is_ok()) s = b.barrier();  // the root hears at its next call
      // (Which member finds it first varies: the root may be in its next
      // call already, whose own check then names that call.)
      EXPECT_EQ(s.code(), Code::kInvalidUsage) << root_n << "/" << other_n << " rank " << r << ": " << s.message();
      EXPECT_TRUE(has(s, "members called different collectives")) << s.message();
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "waited for the timeout";
    });
  }
  World w;
  w.run(spec("swapped", 2, 20'000), [&](int r, Backend& b) {
    std::vector<std::uint8_t> small(100, r == 0 ? 1 : 0), big(2000, r == 0 ? 2 : 0);
    Status s1 = r == 0 ? b.broadcast(small.data(), 100, DType::kUInt8, 0, nullptr)
                       : b.broadcast(big.data(), 2000, DType::kUInt8, 0, nullptr);
    Status s2 = r == 0 ? b.broadcast(big.data(), 2000, DType::kUInt8, 0, nullptr)
                       : b.broadcast(small.data(), 100, DType::kUInt8, 0, nullptr);
    if (r == 1) {
      EXPECT_EQ(s1.code(), Code::kInvalidUsage) << s1.message();
      EXPECT_TRUE(has(s1, "broadcast #")) << s1.message();
      EXPECT_EQ(big[0], 0) << "the first call took the root's second broadcast";
    }
    EXPECT_FALSE(b.barrier().is_ok()) << "rank " << r;
  });
}

TEST(StoreMismatch, ABarrierMetByAnotherCollectiveFailsBoth) {
  World w;
  w.run(spec("bar", 2, 5000), [&](int r, Backend& b) {
    std::int32_t v[4] = {1, 2, 3, 4};
    Status s = r == 0 ? b.barrier() : b.allreduce(v, v, 4, DType::kInt32, Op::kSum, nullptr);
    EXPECT_EQ(s.code(), Code::kInvalidUsage) << "rank " << r << ": " << s.message();
    EXPECT_TRUE(has(s, "this rank called barrier")) << s.message();
    // The whole reason crosses to the peer, not its first 240 bytes.
    EXPECT_TRUE(has(s, "in the same order")) << s.message();
  });
}

TEST(StoreMismatch, ABarrierAfterAMemberGaveUpFails) {
  World w;
  w.run(spec("late", 2, 300), [&](int r, Backend& b) {
    if (r == 0) {
      std::int32_t v = 1;
      EXPECT_EQ(b.allreduce(&v, &v, 1, DType::kInt32, Op::kSum, nullptr).code(), Code::kTimeout);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    Status s = b.barrier();
    EXPECT_FALSE(s.is_ok()) << "a barrier passed that the other member never entered";
    EXPECT_TRUE(has(s, "gave up")) << s.message();
  });
}

TEST(StoreMismatch, ReduceRootsThatDifferFailBothRootsAndTheOthersNextCall) {
  World w;
  w.run(spec("root", 3, 5000), [&](int r, Backend& b) {
    const int root = r == 1 ? 1 : 0;
    double in = 1, out = 0;
    Status s = b.reduce(&in, &out, 1, DType::kFloat64, Op::kSum, root, nullptr);
    if (r != 2) {
      EXPECT_EQ(s.code(), Code::kInvalidUsage) << "rank " << r << ": " << s.message();
      EXPECT_TRUE(has(s, "to root 0") && has(s, "to root 1")) << s.message();
    }
    EXPECT_FALSE(b.barrier().is_ok()) << "rank " << r;
  });
}

// Variant 0, each member its own root: the second to stamp the slot fails
// at once; two that stamp at the same moment (a root stamps with a plain
// store) both pass, and their roots' fingerprint fails both at the barrier.
TEST(StoreMismatch, BroadcastRootsOrCountsThatDifferFail) {
  for (int variant = 0; variant < 2; ++variant) {
    for (int run = 0; run < (variant == 0 ? 20 : 1); ++run) {
      World w;
      std::atomic<int> failed_now{0};
      std::vector<Status> at_barrier(2);
      w.run(spec("bc", 2, 5000), [&](int r, Backend& b) {
        std::vector<std::int64_t> v(variant == 0 ? 3 : 3 + r, r);
        const int root = variant == 0 ? r : 0;  // variant 0: each thinks itself the root
        Status s = b.broadcast(v.data(), v.size(), DType::kInt64, root, nullptr);
        if (!s.is_ok()) {
          ++failed_now;
          EXPECT_EQ(s.code(), Code::kInvalidUsage) << s.message();
          EXPECT_TRUE(has(s, "broadcast of")) << s.message();
        }
        at_barrier[r] = b.barrier();
        EXPECT_FALSE(at_barrier[r].is_ok()) << "rank " << r;
      });
      if (variant == 1) {
        EXPECT_GE(failed_now.load(), 1);
      }
      if (failed_now.load() == 0) {
        for (const Status& s : at_barrier) {
          EXPECT_TRUE(has(s, "named different roots for the same broadcast")) << s.message();
        }
      }
    }
  }
}

// A root that names another member as the reduce's root (so no member
// thinks itself the root) and a member that skips a broadcast: every member
// fails with ACCRUN_ERR_INVALID_USAGE, at this call or its next barrier,
// instead of passing with nobody holding the result.
TEST(StoreMismatch, ARootNamingAnotherRootFailsEveryMember) {
  for (std::size_t count : {std::size_t{3}, std::size_t{2000}}) {  // one box, one round of slots
    World w;
    w.run(spec("rroot", 3, 5000), [&](int r, Backend& b) {
      std::vector<std::int32_t> v(count, r + 1), out(count, -1);
      Status s = b.reduce(v.data(), out.data(), count, DType::kInt32, Op::kSum, r == 0 ? 2 : 0, nullptr);
      if (s.is_ok()) s = b.barrier();
      EXPECT_EQ(s.code(), Code::kInvalidUsage) << "count " << count << ", rank " << r << ": " << s.message();
    });
  }
}

TEST(StoreMismatch, AMemberThatSkipsABroadcastFailsEveryMember) {
  for (const char* next : {"barrier", "allreduce"}) {
    World w;
    w.run(spec("skip", 3, 5000), [&](int r, Backend& b) {
      std::vector<std::int32_t> v(4, r);
      Status s;
      if (r != 2) s = b.broadcast(v.data(), v.size(), DType::kInt32, 0, nullptr);
      if (s.is_ok())
        s = std::string(next) == "barrier" ? b.barrier()
                                           : b.allreduce(v.data(), v.data(), v.size(), DType::kInt32, Op::kSum, nullptr);
      if (s.is_ok()) s = b.barrier();
      EXPECT_EQ(s.code(), Code::kInvalidUsage) << next << ", rank " << r << ": " << s.message();
      if (r == 2 && s.message().find("gave up") == std::string::npos) {
        EXPECT_NE(s.message().find("the same calls in the same order"), std::string::npos) << s.message();
      }
    });
  }
}

// One member broadcasts while the others allreduce (the root among them):
// neither waits for the other until the timeout; every member fails at once.
TEST(StoreMismatch, ABroadcastMetByAnAllreduceFailsEveryMemberAtOnce) {
  for (int odd : {0, 1}) {  // the broadcast's root itself, or a reader
    World w;
    const auto start = Clock::now();
    w.run(spec("bcar", 3, 10'000), [&](int r, Backend& b) {
      std::vector<std::int32_t> v(4, r);
      Status s = r == odd ? b.broadcast(v.data(), v.size(), DType::kInt32, 0, nullptr)
                          : b.allreduce(v.data(), v.data(), v.size(), DType::kInt32, Op::kSum, nullptr);
      if (s.is_ok()) s = b.barrier();
      EXPECT_EQ(s.code(), Code::kInvalidUsage) << "odd " << odd << ", rank " << r << ": " << s.message();
    });
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(3)) << "odd " << odd;
  }
}

// A reduce-scatter met by an allreduce over the same input: the bytes each
// member puts in are the same, only what it takes out differs, so the
// signatures alone tell the calls apart.  Small (the box; across hosts, the
// same reduce inside each host, where only the signature the member across
// hosts gives it tells them apart) and chunked (lanes across hosts); one
// host, and two hosts with one of each call on the first.
TEST(StoreMismatch, AReduceScatterMetByAnAllreduceFailsEveryMember) {
  for (const std::string hosts : {"", "aabb"}) {
    for (std::size_t n : {std::size_t{4}, std::size_t{100'000}}) {
      World w;
      const auto start = Clock::now();
      const int m = hosts.empty() ? 2 : static_cast<int>(hosts.size());
      const GroupSpec g = spec("rsar", m, 10'000);
      w.run(hosts.empty() ? g : on_hosts(g, hosts), [&](int r, Backend& b) {
        const std::size_t whole = n * static_cast<std::size_t>(m);
        std::vector<float> in(whole, 1.0f), out(whole);
        Status s =
            r != 1 ? b.allreduce(in.data(), out.data(), whole, DType::kFloat32, Op::kSum, nullptr)
                   : b.reducescatter(in.data(), out.data(), n, DType::kFloat32, Op::kSum, nullptr);
        if (s.is_ok()) s = b.barrier();
        EXPECT_EQ(s.code(), Code::kInvalidUsage)
            << hosts << " n " << n << ", rank " << r << ": " << s.message();
        if (r <= 1) {
          EXPECT_TRUE(has(s, "reducescatter of " + std::to_string(n) + " float32 per rank"))
              << s.message();
        }
      });
      EXPECT_LT(Clock::now() - start, std::chrono::seconds(3)) << hosts << " n " << n;
    }
  }
}

// A correct program whose members leave a call at different times: a
// reduce's non-roots go on to the next broadcast while a slow member has
// not reached the reduce, and the root waiting for it must not take the
// ones that went on for members that called something else.
TEST(StoreMismatch, MembersThatGoOnBeforeASlowOneAreNoMismatch) {
  World w;
  w.run(spec("slow", 3, 20'000), [&](int r, Backend& b) {
    for (int i = 0; i < 200; ++i) {
      if (r == 2 && i % 2 == 0) std::this_thread::sleep_for(std::chrono::microseconds(1500));
      std::vector<std::int32_t> v(256, r + i), out(256, 0);
      Status s = b.reduce(v.data(), out.data(), v.size(), DType::kInt32, Op::kSum, 0, nullptr);
      ASSERT_TRUE(s.is_ok()) << "iteration " << i << ", rank " << r << ": " << s.message();
      if (r == 0) {
        ASSERT_EQ(out[7], 3 * i + 3);
      }
      std::vector<std::int32_t> c(4, r == 1 ? i : -1);
      s = b.broadcast(c.data(), c.size(), DType::kInt32, 1, nullptr);
      ASSERT_TRUE(s.is_ok()) << "iteration " << i << ", rank " << r << ": " << s.message();
      ASSERT_EQ(c[3], i);
    }
  });
}

// ---- timeouts

TEST(StoreTimeout, NamesTheCallAndThePeersThatHadNotArrived) {
  World w;
  w.run(spec("late", 3, 20'000, {4, 5, 6}), [&](int r, Backend& b) {
    if (r == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(600));
      return;
    }
    b.set_timeout(200);
    std::vector<float> v(1000, 1.0f), out(v.size());
    Status s = b.allreduce(v.data(), out.data(), v.size(), DType::kFloat32, Op::kSum, nullptr);
    EXPECT_EQ(s.code(), Code::kTimeout) << s.message();
    if (r == 0 || s.message().find("gave up") == std::string::npos) {
      EXPECT_TRUE(has(s, "allreduce timed out after 200 ms")) << s.message();
      EXPECT_TRUE(has(s, "group rank 2 (job rank 6)")) << s.message();
      EXPECT_TRUE(has(s, "had not arrived")) << s.message();
      // Where it was: no further than the group's set-up, behind this member.
      EXPECT_TRUE(has(s, "group rank 2's progress counter 0 against this member's ")) << s.message();
    }
  });
}

// Every member that had not arrived is named, whichever round the call
// takes: allreduce with data in the box line (8 bytes) or in the slots
// (4 KB), both waited on through the members' boxes; allgather with data
// in the box line (8 bytes) or in rounds of slots (16 KB per rank: the
// harness counts a group of more than 2 as oversubscribed, where the
// allgather takes no single-copy round), waited on member by member.
TEST(StoreTimeout, NamesEveryPeerThatHadNotArrivedInTheBoxAndSlotRounds) {
  const std::pair<const char*, std::size_t> calls[] = {
      {"allreduce", 2}, {"allreduce", 1000}, {"allgather", 2}, {"allgather", 4096}};
  for (const auto& call : calls) {
    const std::string name = call.first;
    const std::size_t count = call.second;
    World w;
    w.run(spec("late2", 4, 20'000, {4, 5, 6, 7}), [&](int r, Backend& b) {
      if (r >= 2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(600));
        return;
      }
      b.set_timeout(200);
      std::vector<float> v(count, 1.0f), out(4 * v.size());
      Status s =
          name == "allgather"
              ? b.allgather(v.data(), out.data(), v.size(), DType::kFloat32, nullptr)
              : b.allreduce(v.data(), out.data(), v.size(), DType::kFloat32, Op::kSum, nullptr);
      const std::string what = name + " of " + std::to_string(count) + ": ";
      EXPECT_EQ(s.code(), Code::kTimeout) << what << s.message();
      if (r == 0 || s.message().find("gave up") == std::string::npos) {
        EXPECT_TRUE(has(s, name + " timed out after 200 ms")) << what << s.message();
        EXPECT_TRUE(has(s, "group rank 2 (job rank 6)")) << what << s.message();
        EXPECT_TRUE(has(s, "group rank 3 (job rank 7)")) << what << s.message();
        EXPECT_TRUE(has(s, "had not arrived")) << what << s.message();
      }
    });
  }
}

// A member that never comes: the set-up's messages give the time the
// set-up had (what was left of the group's creation time), never "0 ms",
// and name the member; group rank 1 waits in its memory-reading probe for
// rank 2, rank 0 for every member to attach.
TEST(StoreTimeout, ASetUpThatTimesOutSaysHowLongItHadAndWhoNeverCame) {
  World w;
  const GroupSpec g = spec("absent", 3, 300, {4, 5, 6});
  MemRendezvous rv;
  std::vector<Status> got(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto b = make_store_backend(w.context(g, r, &rv));
      got[static_cast<std::size_t>(r)] = b.status();
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(got[0].code(), Code::kTimeout) << got[0].message();
  EXPECT_TRUE(has(got[0], "never attached to the shared segment within 300 ms")) << got[0].message();
  EXPECT_TRUE(has(got[0], "2 (job rank 6)")) << got[0].message();
  EXPECT_EQ(got[1].code(), Code::kTimeout) << got[1].message();
  EXPECT_TRUE(has(got[1], "setup timed out waiting for group rank 2 (job rank 6")) << got[1].message();
  EXPECT_TRUE(has(got[1], "the set-up had the last 300 ms of ACCRUN_GROUP_INIT_TIMEOUT")) << got[1].message();
  EXPECT_FALSE(has(got[1], " 0 ms")) << got[1].message();
}

// ---- buffered sends: the bound per pair

// A 64 KiB ring per pair and a 1 MiB bound on side files, so that a few
// messages of 768 KiB reach the bound.
store::Tuning small_buffers() {
  store::Tuning t;
  t.ring_bytes = 64 << 10;
  t.pair_buffer_max = 1 << 20;
  return t;
}

TEST(StoreBuffer, SendsPastThePairBoundWaitForTheReceiver) {
  World w;
  const store::Tuning t = small_buffers();
  const GroupSpec g = spec("bound", 2, 20'000);
  const std::size_t n = (768u << 10) / sizeof(std::int32_t);
  w.run(g, t, [&](int r, Backend& b) {
    if (r == 0) {
      std::vector<std::int32_t> m(n);
      const auto start = Clock::now();
      for (int k = 0; k < 3; ++k) {
        for (std::size_t i = 0; i < n; ++i) m[i] = static_cast<std::int32_t>(i) + k;
        ASSERT_TRUE(b.send(m.data(), n, DType::kInt32, 1, nullptr).is_ok());
        // The first goes at once; the second would hold 1.5 MiB (> 1 MiB)
        // and waits for the receiver, who starts after 300 ms.
        if (k == 0) { EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(250)); }
        if (k == 1) { EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(250)); }
      }
      // Past the bound with nobody receiving: a timeout naming the peer.
      b.set_timeout(150);
      ASSERT_TRUE(b.send(m.data(), n, DType::kInt32, 1, nullptr).is_ok());
      Status s = b.send(m.data(), n, DType::kInt32, 1, nullptr);
      EXPECT_EQ(s.code(), Code::kTimeout) << s.message();
      EXPECT_TRUE(has(s, "send timed out") && has(s, "group rank 1")) << s.message();
      b.set_timeout(20'000);
      ASSERT_TRUE(b.barrier().is_ok());
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::vector<std::int32_t> m(n);
      for (int k = 0; k < 3; ++k) {
        ASSERT_TRUE(b.recv(m.data(), n, DType::kInt32, 0, nullptr).is_ok());
        for (std::size_t i = 0; i < n; i += 1021) ASSERT_EQ(m[i], static_cast<std::int32_t>(i) + k);
      }
      ASSERT_TRUE(b.barrier().is_ok());
    }
  });
}

// Sends to itself past the bound: only its own receive could make room,
// and its calls run one at a time, so it fails at once instead of waiting
// out the timeout; what it holds is still received whole.
TEST(StoreBuffer, SendsToItselfPastTheBoundFailAtOnce) {
  World w;
  const store::Tuning t = small_buffers();
  MemRendezvous rv;
  const GroupSpec g = spec("self", 1, 20'000);
  auto b = store::make_store_backend_tuned(w.context(g, 0, &rv), t);
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  const std::size_t n = (768u << 10) / sizeof(std::int32_t);
  std::vector<std::int32_t> m(n, 5), got(n, 0);
  ASSERT_TRUE((*b)->send(m.data(), n, DType::kInt32, 0, nullptr).is_ok());
  const auto start = Clock::now();
  Status s = (*b)->send(m.data(), n, DType::kInt32, 0, nullptr);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(s.code(), Code::kInvalidUsage) << s.message();
  EXPECT_TRUE(has(s, "to itself") && has(s, "receive what it sent")) << s.message();
  ASSERT_TRUE((*b)->recv(got.data(), n, DType::kInt32, 0, nullptr).is_ok());
  EXPECT_EQ(got[n - 1], 5);
  EXPECT_TRUE((*b)->send(m.data(), n, DType::kInt32, 0, nullptr).is_ok()) << "room again after the receive";
}

// A message copied into the ring that leaves less free than a descriptor
// must not make the next send wait for its receive: both members send two
// messages, the first of sizes that leave 0 to 48 bytes of a 64 KiB ring
// free, then receive.
TEST(StoreBuffer, AnAlmostFullRingStillTakesTheNextSendsDescriptor) {
  World w;
  const store::Tuning t = small_buffers();
  const GroupSpec g = spec("nearfull", 2, 3'000);
  w.run(g, t, [&](int r, Backend& b) {
    const int peer = 1 - r;
    for (std::size_t left = 0; left <= 48; left += 8) {
      const std::size_t big = t.ring_bytes - 32 - left;  // a 32-byte frame header, then the data
      std::vector<char> a(big, static_cast<char>(r + 1)), s(100, static_cast<char>(r + 7));
      ASSERT_TRUE(b.send(a.data(), a.size(), DType::kUInt8, peer, nullptr).is_ok());
      Status st = b.send(s.data(), s.size(), DType::kUInt8, peer, nullptr);
      ASSERT_TRUE(st.is_ok()) << "leaving " << left << " bytes: " << st.message();
      std::vector<char> ga(big), gs(100);
      ASSERT_TRUE(b.recv(ga.data(), ga.size(), DType::kUInt8, peer, nullptr).is_ok());
      ASSERT_TRUE(b.recv(gs.data(), gs.size(), DType::kUInt8, peer, nullptr).is_ok());
      ASSERT_EQ(ga, std::vector<char>(big, static_cast<char>(peer + 1)));
      ASSERT_EQ(gs, std::vector<char>(100, static_cast<char>(peer + 7)));
    }
  });
}

// Small sends to itself until its ring holds no more descriptors: that
// send fails at once (only its own receive could make room), and every
// message sent before it is received whole, in order.
TEST(StoreBuffer, SendsToItselfThatFillTheRingFailAtOnce) {
  World w;
  const store::Tuning t = small_buffers();
  MemRendezvous rv;
  auto b = store::make_store_backend_tuned(w.context(spec("selfring", 1, 20'000), 0, &rv), t);
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  int sent = 0;
  Status s;
  const auto start = Clock::now();
  for (; sent < 100'000; ++sent) {
    std::vector<std::int32_t> m(25, sent);
    s = (*b)->send(m.data(), m.size(), DType::kInt32, 0, nullptr);
    if (!s.is_ok()) break;
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(s.code(), Code::kInvalidUsage) << s.message();
  EXPECT_TRUE(has(s, "to itself") && has(s, "receive what it sent")) << s.message();
  EXPECT_GT(sent, 256);
  for (int k = 0; k < sent; ++k) {
    std::vector<std::int32_t> m(25, -1);
    ASSERT_TRUE((*b)->recv(m.data(), m.size(), DType::kInt32, 0, nullptr).is_ok()) << "message " << k;
    ASSERT_EQ(m, std::vector<std::int32_t>(25, k));
  }
}

// ---- a full /dev/shm

// Runs body in a child process that sees a private 8 MiB tmpfs on
// /dev/shm.  Returns the child's exit status, or -1 (skip) when a private
// mount namespace is not available (not root).
int in_small_dev_shm(const std::function<int()>& body) {
  const pid_t child = fork();
  if (child < 0) return -2;
  if (child == 0) {
    if (unshare(CLONE_NEWNS) != 0) _exit(77);
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(77);
    if (mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=8m") != 0) _exit(77);
    _exit(body());
  }
  int st = 0;
  if (waitpid(child, &st, 0) != child) return -2;
  if (WIFSIGNALED(st)) return 1000 + WTERMSIG(st);
  return WEXITSTATUS(st) == 77 ? -1 : WEXITSTATUS(st);
}

int count_entries(const char* dir) {
  int n = 0;
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) ++n;
    closedir(d);
  }
  return n;
}

TEST(StoreShmFull, SendLargerThanDevShmIsNoMemoryNotSigbus) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a private 8 MiB tmpfs on /dev/shm";
  const int rc = in_small_dev_shm([] {
    World w;  // its directory lies in the small /dev/shm
    MemRendezvous rv;
    GroupContext ctx = w.context(spec("full", 1), 0, &rv);
    auto b = make_store_backend(ctx);
    if (!b.is_ok()) { std::fprintf(stderr, "init: %s\n", b.status().message().c_str()); return 2; }
    std::vector<char> big(32u << 20, 'x');
    Status s = (*b)->send(big.data(), big.size(), DType::kUInt8, 0, nullptr);
    if (s.code() != Code::kNoMemory) { std::fprintf(stderr, "send: %s\n", s.message().c_str()); return 3; }
    if (!has(s, "/dev/shm") || !has(s, "8.0 MiB")) { std::fprintf(stderr, "message: %s\n", s.message().c_str()); return 4; }
    if (count_entries(w.dir.path().c_str()) != 0) return 5;  // no side file left (the segment is unlinked at setup)
    // The group still works: a message that fits goes through.
    std::vector<char> small(1u << 20, 'y'), got(small.size());
    if (!(*b)->send(small.data(), small.size(), DType::kUInt8, 0, nullptr).is_ok()) return 6;
    if (!(*b)->recv(got.data(), got.size(), DType::kUInt8, 0, nullptr).is_ok() || got != small) return 7;
    b->reset();
    if (count_entries(w.dir.path().c_str()) != 0) return 8;
    return 0;
  });
  if (rc == -1) GTEST_SKIP() << "no private mount namespace here (unshare(CLONE_NEWNS) or mount failed)";
  EXPECT_EQ(rc, 0) << (rc >= 1000 ? "child killed by signal " + std::to_string(rc - 1000) : "child step " + std::to_string(rc));
}

TEST(StoreShmFull, SegmentLargerThanDevShmIsNoMemory) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a private 8 MiB tmpfs on /dev/shm";
  const int rc = in_small_dev_shm([] {
    World w;
    store::Tuning t;
    t.half_bytes = 2 << 20;  // 4 ranks: 16 MiB of slots
    MemRendezvous rv;
    const GroupSpec g = spec("bigseg", 4, 500);
    std::atomic<int> bad{0};
    std::vector<std::thread> threads;
    for (int r = 0; r < 4; ++r) {
      threads.emplace_back([&, r] {
        auto b = store::make_store_backend_tuned(w.context(g, r, &rv), t);
        if (r == 0 && (b.status().code() != Code::kNoMemory || !has(b.status(), "/dev/shm"))) {
          std::fprintf(stderr, "rank 0: %s\n", b.status().message().c_str());
          ++bad;
        }
        if (b.is_ok()) ++bad;
      });
    }
    for (auto& th : threads) th.join();
    if (bad != 0) return 2;
    return count_entries(w.dir.path().c_str()) == 0 ? 0 : 3;
  });
  if (rc == -1) GTEST_SKIP() << "no private mount namespace here (unshare(CLONE_NEWNS) or mount failed)";
  EXPECT_EQ(rc, 0) << (rc >= 1000 ? "child killed by signal " + std::to_string(rc - 1000) : "child step " + std::to_string(rc));
}

}  // namespace
}  // namespace accrun::collectives::testing
