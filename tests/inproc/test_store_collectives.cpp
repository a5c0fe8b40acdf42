// Store backend collectives, in process: every op × dtype × in-place and
// out-of-place × world sizes 1, 2, 3, 4, 8, with inputs whose result is
// exactly known.  Counts cover the one-round path (1, 7, 1000 elements), the
// reduce-scatter + allgather path (6000) and, separately, messages of 4 MiB and more.
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "accrun/config.h"
#include "store/store_backend.hpp"
#include "store_harness.hpp"

namespace accrun::collectives::testing {
namespace {

constexpr std::size_t kCounts[] = {1, 7, 1000, 6000};

std::string what(const char* coll, DType dt, Op op, std::size_t count, bool in_place, int root = -1) {
  std::string s = std::string(coll) + " " + dtype_name(dt) + " " + op_name(op) + " count " + std::to_string(count) +
                  (in_place ? " in place" : " out of place");
  if (root >= 0) s += " root " + std::to_string(root);
  return s;
}

// A world: its size, and the host of each rank (empty: one host).
struct Layout {
  int size;
  const char* hosts;
  const char* transport = "tcp";  // between hosts
};

class StoreWorld : public ::testing::TestWithParam<Layout> {
 protected:
  static GroupSpec at(GroupSpec g) { return on_hosts(std::move(g), GetParam().hosts, GetParam().transport); }
};

TEST_P(StoreWorld, AllreduceEveryDtypeOpInPlaceAndNot) {
  const int p = GetParam().size;
  World w;
  w.run(at(spec("allreduce", p)), [&](int r, Backend& b) {
    for (DType dt : kAllDTypes)
      for (Op op : kAllOps)
        for (std::size_t count : kCounts)
          for (bool in_place : {false, true}) {
            auto in = make_buffer(dt, count, [&](std::size_t i) { return input_value(op, dt, r, i); });
            auto want = make_buffer(dt, count, [&](std::size_t i) { return expected_value(op, dt, p, i); });
            std::vector<char> out(in.size(), 0x5a);
            Status s = in_place ? b.allreduce(in.data(), in.data(), count, dt, op, nullptr)
                                : b.allreduce(in.data(), out.data(), count, dt, op, nullptr);
            ASSERT_TRUE(s.is_ok()) << s.message();
            const auto& got = in_place ? in : out;
            ASSERT_EQ(0, std::memcmp(got.data(), want.data(), count * dtype_size(dt)))
                << "rank " << r << ": " << what("allreduce", dt, op, count, in_place);
          }
  });
  EXPECT_TRUE(w.dir.entries().empty()) << "segment left behind: " << w.dir.entries().front();
}

TEST_P(StoreWorld, ReduceEveryDtypeOpRotatingRoot) {
  const int p = GetParam().size;
  World w;
  w.run(at(spec("reduce", p)), [&](int r, Backend& b) {
    int root = 0;
    for (DType dt : kAllDTypes)
      for (Op op : kAllOps)
        for (std::size_t count : kCounts)
          for (bool in_place : {false, true}) {
            root = (root + 1) % p;
            auto in = make_buffer(dt, count, [&](std::size_t i) { return input_value(op, dt, r, i); });
            auto want = make_buffer(dt, count, [&](std::size_t i) { return expected_value(op, dt, p, i); });
            std::vector<char> out(in.size(), 0x5a);
            const std::vector<char> untouched = out;
            Status s = in_place && r == root ? b.reduce(in.data(), in.data(), count, dt, op, root, nullptr)
                                             : b.reduce(in.data(), out.data(), count, dt, op, root, nullptr);
            ASSERT_TRUE(s.is_ok()) << s.message();
            if (r == root) {
              const auto& got = in_place ? in : out;
              ASSERT_EQ(0, std::memcmp(got.data(), want.data(), count * dtype_size(dt)))
                  << what("reduce", dt, op, count, in_place, root);
            } else {
              ASSERT_EQ(out, untouched) << "a non-root's receive buffer was written";
            }
          }
  });
}

TEST_P(StoreWorld, ReduceAndBroadcastFromEachRoot) {
  const int p = GetParam().size;
  World w;
  w.run(at(spec("roots", p)), [&](int r, Backend& b) {
    for (int root = 0; root < p; ++root)
      for (DType dt : kAllDTypes)
        for (std::size_t count : {std::size_t{3}, std::size_t{6000}}) {
          auto in = make_buffer(dt, count, [&](std::size_t i) { return input_value(Op::kSum, dt, r, i); });
          auto want = make_buffer(dt, count, [&](std::size_t i) { return expected_value(Op::kSum, dt, p, i); });
          std::vector<char> out(in.size());
          ASSERT_TRUE(b.reduce(in.data(), out.data(), count, dt, Op::kSum, root, nullptr).is_ok());
          if (r == root) {
            ASSERT_EQ(0, std::memcmp(out.data(), want.data(), count * dtype_size(dt)));
          }
          // Broadcast: the root's values (its rank) replace everyone's.
          auto buf = make_buffer(dt, count, [&](std::size_t i) { return double((r == root ? root : 100) + i % 7); });
          auto bwant = make_buffer(dt, count, [&](std::size_t i) { return double(root + i % 7); });
          ASSERT_TRUE(b.broadcast(buf.data(), count, dt, root, nullptr).is_ok());
          ASSERT_EQ(0, std::memcmp(buf.data(), bwant.data(), count * dtype_size(dt)))
              << "broadcast " << dtype_name(dt) << " count " << count << " root " << root << " at rank " << r;
        }
  });
}

TEST_P(StoreWorld, AllgatherEveryDtypeInPlaceAndNot) {
  const int p = GetParam().size;
  World w;
  w.run(at(spec("allgather", p)), [&](int r, Backend& b) {
    for (DType dt : kAllDTypes)
      for (std::size_t count : kCounts)
        for (bool in_place : {false, true}) {
          const std::size_t ds = dtype_size(dt);
          auto part = [&](int q, std::size_t i) { return double((q * 13 + static_cast<long>(i % 61)) % 100); };
          auto want = make_buffer(dt, count * p, [&](std::size_t j) { return part(int(j / count), j % count); });
          auto mine = make_buffer(dt, count, [&](std::size_t i) { return part(r, i); });
          std::vector<char> out(count * p * ds + 1, 0x5a);
          Status s;
          if (in_place) {
            std::memcpy(out.data() + r * count * ds, mine.data(), count * ds);
            s = b.allgather(out.data(), out.data(), count, dt, nullptr);
          } else {
            s = b.allgather(mine.data(), out.data(), count, dt, nullptr);
          }
          ASSERT_TRUE(s.is_ok()) << s.message();
          ASSERT_EQ(0, std::memcmp(out.data(), want.data(), count * p * ds))
              << "rank " << r << ": " << what("allgather", dt, Op::kSum, count, in_place);
        }
  });
}

// In place both ways: the result at the start of send, and (as the NCCL
// backend's staging passes it) over this rank's own block of send.
TEST_P(StoreWorld, ReducescatterEveryDtypeOpInPlaceAndNot) {
  const int p = GetParam().size;
  World w;
  w.run(at(spec("reducescatter", p)), [&](int r, Backend& b) {
    for (DType dt : kAllDTypes)
      for (Op op : kAllOps)
        for (std::size_t count : {std::size_t{1}, std::size_t{100}, std::size_t{3000}})
          for (int place : {0, 1, 2}) {  // elsewhere, at send, at send's block r
            const std::size_t ds = dtype_size(dt);
            auto in = make_buffer(dt, count * p, [&](std::size_t j) { return input_value(op, dt, r, j); });
            auto want = make_buffer(dt, count, [&](std::size_t i) { return expected_value(op, dt, p, r * count + i); });
            std::vector<char> out(count * ds + 1, 0x5a);
            char* into = place == 0 ? out.data() : in.data() + (place == 2 ? r * count * ds : 0);
            Status s = b.reducescatter(in.data(), into, count, dt, op, nullptr);
            ASSERT_TRUE(s.is_ok()) << s.message();
            ASSERT_EQ(0, std::memcmp(into, want.data(), count * ds))
                << "rank " << r << ": " << what("reducescatter", dt, op, count, place != 0)
                << (place == 2 ? " (into its own block)" : "");
          }
  });
}

TEST_P(StoreWorld, BarrierOrdersEveryRank) {
  const int p = GetParam().size;
  World w;
  std::atomic<int> arrived{0};
  w.run(at(spec("barrier", p)), [&](int, Backend& b) {
    for (int round = 1; round <= 50; ++round) {
      arrived.fetch_add(1);
      ASSERT_TRUE(b.barrier().is_ok());
      // Nobody leaves barrier `round` before all p ranks entered it.
      ASSERT_GE(arrived.load(), round * p);
      ASSERT_TRUE(b.barrier().is_ok());
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, StoreWorld,
                         ::testing::Values(Layout{1, ""}, Layout{2, ""}, Layout{3, ""}, Layout{4, ""}, Layout{8, ""}),
                         [](const auto& info) { return "ranks" + std::to_string(info.param.size); });
// Across hosts: 2 hosts × 2 ranks, 4 hosts × 1, uneven hosts whose ranks
// interleave (leaders are not group rank 0 of the exchange order).
INSTANTIATE_TEST_SUITE_P(Hosts, StoreWorld,
                         ::testing::Values(Layout{4, "aabb"}, Layout{4, "abcd"}, Layout{3, "aba"},
                                           Layout{5, "abacb"}, Layout{8, "aabbccdd"}),
                         [](const auto& info) { return std::string("hosts_") + info.param.hosts; });
#if ACCRUN_HAVE_LIBFABRIC
// The same between hosts over libfabric (its tcp provider here).
INSTANTIATE_TEST_SUITE_P(FabricHosts, StoreWorld,
                         ::testing::Values(Layout{4, "aabb", "libfabric"}, Layout{4, "abcd", "libfabric"},
                                           Layout{5, "abacb", "libfabric"}),
                         [](const auto& info) { return std::string("libfabric_") + info.param.hosts; });
#endif

// Broadcast roots run ahead of their readers through the broadcast rings:
// while one rank stalls, the others broadcast (from rotating roots, small
// and chunked messages alternating) far more chunks than either ring holds;
// the stalled rank must still receive every call's own data.
TEST(StoreBroadcast, RootsRunAheadOfAStalledReader) {
  World w;
  w.run(spec("runahead", 4), [&](int r, Backend& b) {
    for (int staller = 0; staller < 4; ++staller) {
      if (r == staller) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      for (int j = 0; j < 300; ++j) {
        const int i = staller * 1000 + j;
        const int root = (staller + 1 + j % 3) % 4;
        const std::size_t count = j % 2 == 0 ? 5000 : 3 + j % 5;  // 20 KB: two chunks
        std::vector<std::int32_t> buf(count, r == root ? i : -1);
        buf[count - 1] = r == root ? i * 3 : -2;
        ASSERT_TRUE(b.broadcast(buf.data(), count, DType::kInt32, root, nullptr).is_ok());
        ASSERT_EQ(buf[0], i) << "call " << i << " at rank " << r;
        ASSERT_EQ(buf[count - 2], i) << "call " << i << " at rank " << r;
        ASSERT_EQ(buf[count - 1], i * 3) << "call " << i << " at rank " << r;
      }
    }
    ASSERT_TRUE(b.barrier().is_ok());
  });
}

// The rounds' halves are rewritten every other round, once every reader is
// known to be done with them: from their control lines, or from their boxes
// of a later round.  Back to back, with the ranks knocked out of step (4
// threads on fewer cores, and yields and sleeps that differ per rank and
// call), small calls of every round kind (the box, the one-round slot,
// reduce to rotating roots, whose other members wait on the root alone,
// allgather of a box each) carry values of their own call: a half rewritten
// while a member still reads it gives that member another call's values.
TEST(StoreRounds, NoHalfIsRewrittenWhileAMemberStillReadsIt) {
  constexpr int kRanks = 4;
  World w;
  w.run(spec("rounds", kRanks), [&](int r, Backend& b) {
    for (int i = 0; i < 4000; ++i) {
      const int kind = i % 4;
      if ((i * 7 + r * 3) % 11 == 0) std::this_thread::yield();
      if ((i + r * 5) % 97 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      const std::size_t count = kind == 0 ? 2 : 64;  // 8 B: in the box; 256 B: the slot
      std::vector<std::int32_t> in(count), out(count * (kind == 3 ? kRanks : 1), -1);
      for (std::size_t k = 0; k < count; ++k) in[k] = i * 8 + r + static_cast<std::int32_t>(k % 3);
      auto want_sum = [&](std::size_t k) {
        return kRanks * (i * 8 + static_cast<std::int32_t>(k % 3)) + kRanks * (kRanks - 1) / 2;
      };
      if (kind <= 1) {
        const Status s = b.allreduce(in.data(), out.data(), count, DType::kInt32, Op::kSum, nullptr);
        ASSERT_TRUE(s.is_ok()) << "call " << i << ": " << s.message();
        for (std::size_t k = 0; k < count; ++k) ASSERT_EQ(out[k], want_sum(k)) << "call " << i << " at rank " << r;
      } else if (kind == 2) {
        const int root = (i / 4) % kRanks;
        const Status s = b.reduce(in.data(), out.data(), count, DType::kInt32, Op::kSum, root, nullptr);
        ASSERT_TRUE(s.is_ok()) << "call " << i << ": " << s.message();
        for (std::size_t k = 0; k < count && r == root; ++k)
          ASSERT_EQ(out[k], want_sum(k)) << "call " << i << " at root " << r;
      } else {
        const Status s = b.allgather(in.data(), out.data(), 2, DType::kInt32, nullptr);
        ASSERT_TRUE(s.is_ok()) << "call " << i << ": " << s.message();
        for (int q = 0; q < kRanks; ++q)
          ASSERT_EQ(out[2 * q + 1], i * 8 + q + 1) << "call " << i << " at rank " << r << ", part " << q;
      }
    }
    ASSERT_TRUE(b.barrier().is_ok());
  });
}

// Small broadcasts across hosts go down a binomial tree of the hosts'
// leaders, rooted at the root's leader.  From every rank in turn, back to
// back, on host counts that are and are not powers of two (with the root's
// host anywhere around them, and hosts of one and of several members),
// at sizes up to the largest the tree carries: a leader that waits on the
// wrong parent or forwards to the wrong child hangs (the timeout fails the
// test) or takes another call's bytes.
TEST(StoreBroadcast, SmallBroadcastsAcrossHostsFromEveryRoot) {
  for (auto [p, hosts] : {std::pair<int, const char*>{3, "abc"}, {5, "abcde"}, {6, "aabcde"}, {7, "abcdefg"},
                          {8, "abcdefgb"}}) {
    World w;
    w.run(on_hosts(spec("tree", p), hosts), [&](int r, Backend& b) {
      for (std::size_t bytes : {std::size_t{1}, std::size_t{4000}, std::size_t{64 * 1024}}) {
        for (int root = 0; root < p; ++root) {
          auto byte = [&](std::size_t i) { return static_cast<std::uint8_t>(i * 7 + root * 31 + bytes); };
          std::vector<std::uint8_t> buf(bytes, static_cast<std::uint8_t>(0xEE)), want(bytes);
          for (std::size_t i = 0; i < bytes; ++i) want[i] = byte(i);
          if (r == root) buf = want;
          ASSERT_TRUE(b.broadcast(buf.data(), bytes, DType::kUInt8, root, nullptr).is_ok())
              << bytes << " B from root " << root << " at rank " << r << " on hosts " << hosts;
          ASSERT_TRUE(buf == want) << bytes << " B from root " << root << " at rank " << r << " on hosts " << hosts;
        }
      }
    });
  }
}

// 4 MiB and more: allreduce, broadcast and allgather across many chunks.
// Between hosts: the ring (3 hosts) and recursive halving and doubling (4
// and 8 hosts, some with uneven ranks per host), blocks of uneven sizes.
TEST(StoreLarge, FourMiBAndMore) {
  for (auto [p, hosts] : {std::pair<int, const char*>{2, ""}, {4, ""}, {4, "aabb"}, {3, "abc"}, {8, "aabbccdd"},
                          {5, "abcdd"}, {8, "abcdefgh"}}) {
    World w;
    w.run(on_hosts(spec("large", p), hosts), [&](int r, Backend& b) {
      const std::size_t count = (4u << 20) / 4 + 123;  // a little over 4 MiB of float32
      auto in = make_buffer(DType::kFloat32, count, [&](std::size_t i) { return input_value(Op::kSum, DType::kFloat32, r, i); });
      auto want = make_buffer(DType::kFloat32, count, [&](std::size_t i) { return expected_value(Op::kSum, DType::kFloat32, p, i); });
      std::vector<char> out(in.size());
      ASSERT_TRUE(b.allreduce(in.data(), out.data(), count, DType::kFloat32, Op::kSum, nullptr).is_ok());
      ASSERT_EQ(0, std::memcmp(out.data(), want.data(), count * 4));
      // From a host's leader and from the last rank (on several layouts a
      // member that does not lead its host), bytes that differ by place and
      // root: a piece put at the wrong offset shows.
      for (int root : {0, p - 1}) {
        auto byte = [&](std::size_t i) { return static_cast<std::uint8_t>((i % 251) * 3 + root * 17); };
        std::vector<std::uint8_t> bc(5u << 20, static_cast<std::uint8_t>(r)), bwant(bc.size());
        for (std::size_t i = 0; i < bc.size(); ++i) bwant[i] = byte(i);
        if (r == root) bc = bwant;
        ASSERT_TRUE(b.broadcast(bc.data(), bc.size(), DType::kUInt8, root, nullptr).is_ok());
        ASSERT_TRUE(bc == bwant) << "broadcast from root " << root << " at rank " << r;
      }
      std::vector<std::int64_t> part(1u << 19, r), all(part.size() * p);
      ASSERT_TRUE(b.allgather(part.data(), all.data(), part.size(), DType::kInt64, nullptr).is_ok());
      for (int q = 0; q < p; ++q) ASSERT_EQ(all[q * part.size() + 77], q);
    });
  }
}

// Large allreduces across hosts whose members all read each other's memory
// run in lanes (hier_group.hpp): each member reduces a slice of its host's
// vectors, with the same slice of the other hosts.  Every dtype and op, in
// place and not, at counts just over the lanes' threshold that split
// unevenly, with 2 and 3 lanes, between 2 hosts (ring) and 4 (recursive
// halving and doubling), and with a host's ranks not consecutive.
TEST(StoreLanes, AllreduceEveryDtypeOpInPlaceAndNot) {
  for (auto [p, hosts] : {std::pair<int, const char*>{4, "aabb"}, {6, "aaabbb"}, {8, "aabbccdd"}, {4, "abab"}}) {
    World w;
    w.run(on_hosts(spec("lanes", p), hosts), [&](int r, Backend& b) {
      for (DType dt : kAllDTypes)
        for (Op op : kAllOps)
          for (bool in_place : {false, true}) {
            const std::size_t count = (64u << 10) / dtype_size(dt) + 37;
            auto in = make_buffer(dt, count, [&](std::size_t i) { return input_value(op, dt, r, i); });
            auto want = make_buffer(dt, count, [&](std::size_t i) { return expected_value(op, dt, p, i); });
            std::vector<char> out(in.size());
            Status s = in_place ? b.allreduce(in.data(), in.data(), count, dt, op, nullptr)
                                : b.allreduce(in.data(), out.data(), count, dt, op, nullptr);
            ASSERT_TRUE(s.is_ok()) << hosts << " rank " << r << ": " << s.message();
            const auto& got = in_place ? in : out;
            ASSERT_EQ(0, std::memcmp(got.data(), want.data(), count * dtype_size(dt)))
                << hosts << " rank " << r << ": " << what("allreduce", dt, op, count, in_place);
          }
    });
  }
}

// Allgathers in lanes (a whole above 16 KiB): each member swaps its block with its lane on
// the other hosts, then reads the other lanes' blocks from the members of
// its host.  Every dtype, in place and not, ranks of a host consecutive or
// not, 2 and 3 lanes, 2 and 4 hosts; told the hosts are oversubscribed
// (rounds through the slots) and not (cross-memory attach, where this
// machine has a CPU for each rank of a host).
TEST(StoreLanes, AllgatherEveryDtypeInPlaceAndNot) {
  for (int over : {1, 0})
  for (auto [p, hosts] : {std::pair<int, const char*>{4, "aabb"}, {6, "aaabbb"}, {6, "abcabc"}, {8, "abcdabcd"}, {4, "abba"}}) {
    SCOPED_TRACE(over ? "oversubscribed" : "not oversubscribed");
    World w;
    GroupSpec g = on_hosts(spec("lanes-ag", p), hosts);
    g.oversubscribed = over;
    w.run(g, [&](int r, Backend& b) {
      for (std::size_t whole : {std::size_t{20} << 10, std::size_t{96} << 10})  // lanes from 16 KiB
        for (DType dt : kAllDTypes)
          for (bool in_place : {false, true}) {
            const std::size_t n =
                whole / dtype_size(dt) / static_cast<std::size_t>(p) + 5;  // per rank
            auto value = [](int q, std::size_t i) {
              return double((q * 31 + static_cast<long>(i)) % 100);
            };
            auto want = make_buffer(
                dt, n * p, [&](std::size_t i) { return value(static_cast<int>(i / n), i % n); });
            auto mine = make_buffer(dt, n, [&](std::size_t i) { return value(r, i); });
            std::vector<char> out(want.size(), 0);
            if (in_place)
              std::memcpy(out.data() + r * n * dtype_size(dt), mine.data(), n * dtype_size(dt));
            Status s = b.allgather(in_place ? out.data() + r * n * dtype_size(dt) : mine.data(),
                                   out.data(), n, dt, nullptr);
            ASSERT_TRUE(s.is_ok()) << hosts << " rank " << r << ": " << s.message();
            ASSERT_EQ(0, std::memcmp(out.data(), want.data(), n * p * dtype_size(dt)))
                << hosts << " rank " << r << ": allgather " << dtype_name(dt)
                << (in_place ? " in place" : "");
          }
    });
  }
}

// Large blocks shared in lanes cross the slots' boundaries mid-block, and
// members hold different numbers of bytes (3 hosts of 2, 2 hosts of 3):
// every block lands whole and in its place.
TEST(StoreLanes, AllgatherBlocksLargerThanASlotHalf) {
  for (int over : {1, 0})
  for (auto [p, hosts] : {std::pair<int, const char*>{4, "abab"}, {6, "abcabc"}, {6, "aaabbb"}}) {
    SCOPED_TRACE(std::string(hosts) + (over ? ", oversubscribed" : ", not oversubscribed"));
    World w;
    GroupSpec g = on_hosts(spec("lanes-big", p), hosts);
    g.oversubscribed = over;
    w.run(g, [&](int r, Backend& b) {
      const std::size_t n = (700u << 10) / 4 + 3;  // per rank, int32: 2.7 slot halves and a bit
      auto value = [](int q, std::size_t i) { return static_cast<std::int32_t>(q * 1000003 + static_cast<long>(i) * 7); };
      std::vector<std::int32_t> mine(n), out(n * p, -1), want(n * p);
      for (std::size_t i = 0; i < n; ++i) mine[i] = value(r, i);
      for (std::size_t i = 0; i < want.size(); ++i) want[i] = value(static_cast<int>(i / n), i % n);
      for (int call = 0; call < 2; ++call) {
        ASSERT_TRUE(b.allgather(mine.data(), out.data(), n, DType::kInt32, nullptr).is_ok());
        ASSERT_TRUE(out == want) << "rank " << r << ", call " << call;
        std::fill(out.begin(), out.end(), -1);
      }
    });
  }
}

// Whether a group runs in lanes is agreed between the hosts: where one
// host's members cannot read each other's memory, every host's leader
// reduces alone.  (A host deciding by itself would send its leader's whole
// vector where the other host's leader expects a slice.)
TEST(StoreLanes, AHostWithoutCrossMemoryAttachMakesEveryHostReduceThroughItsLeader) {
  World w;
  MemRendezvous rv;
  const GroupSpec g = on_hosts(spec("nolanes", 4, 20'000), "aabb");
  const std::size_t count = (1u << 20) / 4 + 5;
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      store::Tuning t;
      t.cma = r < 2;  // host a reads across processes, host b does not
      auto b = store::make_store_backend_tuned(w.context(g, r, &rv), t);
      ASSERT_TRUE(b.is_ok()) << b.status().message();
      for (int k = 0; k < 3; ++k) {
        auto in = make_buffer(DType::kFloat32, count, [&](std::size_t i) { return input_value(Op::kSum, DType::kFloat32, r + k, i); });
        std::vector<char> out(in.size());
        Status s = (*b)->allreduce(in.data(), out.data(), count, DType::kFloat32, Op::kSum, nullptr);
        ASSERT_TRUE(s.is_ok()) << "rank " << r << ": " << s.message();
        for (std::size_t i : {std::size_t{0}, count / 2, count - 1}) {
          double want = 0;
          for (int q = 0; q < 4; ++q) want += input_value(Op::kSum, DType::kFloat32, q + k, i);
          float got;
          std::memcpy(&got, out.data() + i * 4, 4);
          ASSERT_EQ(static_cast<float>(want), got) << "rank " << r << " element " << i;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
}

TEST(StoreGroups, ManyConcurrentGroupsAndThreads) {
  // Four "processes" (job ranks 0-3); each belongs to three groups and drives
  // each group from its own thread, all at once.
  World w;
  struct G { std::string name; std::vector<int> job_ranks; };
  const std::vector<G> groups = {{"all", {0, 1, 2, 3}}, {"low", {0, 1}}, {"high", {2, 3}},
                                 {"odd", {1, 3}},       {"even", {0, 2}}, {"trio", {3, 1, 0}}};
  std::vector<std::thread> threads;
  for (const G& g : groups) {
    threads.emplace_back([&w, g] {
      GroupSpec gs = spec(g.name, int(g.job_ranks.size()), 20000, g.job_ranks);
      w.run(gs, [&](int r, Backend& b) {
        for (int it = 0; it < 200; ++it) {
          std::int64_t v = g.job_ranks[r] + it, sum = 0;
          ASSERT_TRUE(b.allreduce(&v, &sum, 1, DType::kInt64, Op::kSum, nullptr).is_ok());
          std::int64_t want = 0;
          for (int j : g.job_ranks) want += j + it;
          ASSERT_EQ(want, sum) << g.name;
        }
      });
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(w.dir.entries().empty());
}

TEST(StoreGroups, RecreatedNameGetsAFreshSegment) {
  World w;
  for (std::uint64_t epoch = 1; epoch <= 3; ++epoch) {
    w.run(spec("again", 3, 20000, {}, epoch), [&](int r, Backend& b) {
      int v = r * static_cast<int>(epoch), out = 0;
      ASSERT_TRUE(b.allreduce(&v, &out, 1, DType::kInt32, Op::kSum, nullptr).is_ok());
      ASSERT_EQ(out, 3 * static_cast<int>(epoch));
    });
    EXPECT_TRUE(w.dir.entries().empty());
  }
}

}  // namespace
}  // namespace accrun::collectives::testing
