// Named groups and epochs over an in-memory directory: several GroupManagers
// (one per simulated process, each in its own thread) share one directory.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "directory.hpp"
#include "groups.hpp"

namespace accrun::runtime {
namespace {

using collectives::Backend;
using collectives::BackendKind;
using collectives::DType;
using collectives::GroupContext;
using collectives::Op;

// A backend that only checks its rendezvous: every member publishes "hello"
// under its rank and reads everyone else's, so two incarnations sharing keys
// would collide (publish fails) or read stale values (epoch mismatch).
class FakeBackend final : public Backend {
 public:
  explicit FakeBackend(GroupContext ctx) : ctx_(std::move(ctx)) {}
  BackendKind kind() const override { return BackendKind::kStore; }
  void set_timeout(int ms) override { timeout_ = ms; }
  Status allreduce(const void*, void*, std::size_t, DType, Op, void*) override { return Status::ok(); }
  Status reduce(const void*, void*, std::size_t, DType, Op, int, void*) override { return Status::ok(); }
  Status broadcast(void*, std::size_t, DType, int, void*) override { return Status::ok(); }
  Status allgather(const void*, void*, std::size_t, DType, void*) override { return Status::ok(); }
  Status reducescatter(const void*, void*, std::size_t, DType, Op, void*) override { return Status::ok(); }
  Status barrier() override { return Status::ok(); }
  Status send(const void*, std::size_t, DType, int, void*) override { return Status::ok(); }
  Status recv(void*, std::size_t, DType, int, void*) override { return Status::ok(); }
  Status group_start() override { return Status::ok(); }
  Status group_end() override { return Status::ok(); }
  GroupContext ctx_;
  int timeout_ = 0;
};

Result<std::unique_ptr<Backend>> fake_factory(BackendKind, const GroupContext& ctx) {
  std::string mine = std::to_string(ctx.epoch) + ":" + std::to_string(ctx.members[ctx.rank].job_rank);
  ACCRUN_RETURN_IF_ERROR(ctx.rendezvous->publish("hello/" + std::to_string(ctx.rank), mine));
  for (int r = 0; r < ctx.size; ++r) {
    auto v = ctx.rendezvous->lookup("hello/" + std::to_string(r), 5000);
    if (!v) return v.status();
    std::string expect = std::to_string(ctx.epoch) + ":" + std::to_string(ctx.members[r].job_rank);
    if (*v != expect) return Status(Code::kSystem, "stale rendezvous value " + *v + ", expected " + expect);
  }
  return std::unique_ptr<Backend>(new FakeBackend(ctx));
}

BackendKind fake_resolver(const std::vector<collectives::MemberFacts>& facts, std::string* why) {
  *why = "fake";
  // Every member holding a GPU: pretend NCCL, so tests see the facts arrive.
  for (const auto& f : facts)
    if (f.gpu_ids.empty()) return BackendKind::kStore;
  return BackendKind::kNccl;
}

// One simulated process.
struct Proc {
  Proc(MemoryDirectory& dir, int job_rank, int timeout_ms = 5000, std::vector<int> gpus = {},
       std::string job = {}, int job_size = 0) {
    SelfInfo self;
    self.member.job_rank = job_rank;
    self.member.host = "h0";
    self.member.local_rank = job_rank;
    self.member.pid = 1000 + job_rank;
    self.facts.host = "h0";
    self.facts.gpu_ids = std::move(gpus);
    GroupManagerOptions o;
    o.shm_dir = "/nonexistent";
    o.init_timeout_ms = timeout_ms;
    o.job = std::move(job);
    o.job_size = job_size;
    mgr = std::make_unique<GroupManager>(dir, &peers, self, o, fake_factory, fake_resolver);
  }
  PeerTable peers{"h0"};
  std::unique_ptr<GroupManager> mgr;
};

using GroupResult = Result<std::shared_ptr<Group>>;

// Runs create() on each (proc, rank) concurrently.
std::vector<GroupResult> create_all(std::vector<Proc*> procs, const std::string& name, int world,
                                    std::vector<int> ranks,
                                    std::optional<BackendKind> kind = BackendKind::kStore) {
  std::vector<std::future<GroupResult>> fs;
  for (std::size_t i = 0; i < procs.size(); ++i)
    fs.push_back(std::async(std::launch::async,
                            [=] { return procs[i]->mgr->create(name, world, ranks[i], kind); }));
  std::vector<GroupResult> out;
  for (auto& f : fs) out.push_back(f.get());
  return out;
}

TEST(RuntimeGroups, MembersMeetInRankOrder) {
  MemoryDirectory dir;
  Proc a(dir, 7), b(dir, 3), c(dir, 5);
  // Group ranks need not follow job ranks.
  auto gs = create_all({&a, &b, &c}, "g", 3, {0, 1, 2});
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(gs[i].is_ok()) << gs[i].status().message();
    const auto& g = *gs[i].value();
    EXPECT_EQ(g.epoch, 0u);
    EXPECT_EQ(g.rank, i);
    EXPECT_EQ(g.size, 3);
    ASSERT_EQ(g.members.size(), 3u);
    EXPECT_EQ(g.members[0].job_rank, 7);
    EXPECT_EQ(g.members[1].job_rank, 3);
    EXPECT_EQ(g.members[2].job_rank, 5);
    EXPECT_EQ(g.members[1].pid, 1003);
  }
}

TEST(RuntimeGroups, WorldOfOne) {
  MemoryDirectory dir;
  Proc a(dir, 0);
  auto g = a.mgr->create("solo", 1, 0, BackendKind::kStore);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_EQ(g.value()->size, 1);
}

TEST(RuntimeGroups, RecreatedNameGetsNewEpochAndFreshKeys) {
  MemoryDirectory dir;
  Proc a(dir, 0), b(dir, 1);
  for (std::uint64_t round = 0; round < 4; ++round) {
    auto gs = create_all({&a, &b}, "again", 2, {0, 1});
    ASSERT_TRUE(gs[0].is_ok()) << gs[0].status().message();
    ASSERT_TRUE(gs[1].is_ok()) << gs[1].status().message();
    EXPECT_EQ(gs[0].value()->epoch, round);
    EXPECT_EQ(gs[1].value()->epoch, round);
    ASSERT_TRUE(a.mgr->destroy(*gs[0].value()).is_ok());
    ASSERT_TRUE(b.mgr->destroy(*gs[1].value()).is_ok());
  }
}

TEST(RuntimeGroups, FastMemberRecreatesBeforeSlowMemberDestroys) {
  MemoryDirectory dir;
  Proc a(dir, 0), b(dir, 1);
  auto gs = create_all({&a, &b}, "race", 2, {0, 1});
  ASSERT_TRUE(gs[0].is_ok() && gs[1].is_ok());
  ASSERT_TRUE(a.mgr->destroy(*gs[0].value()).is_ok());
  // a declares the next incarnation while b still holds the old one.
  auto fa = std::async(std::launch::async, [&] { return a.mgr->create("race", 2, 0, BackendKind::kStore); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(b.mgr->destroy(*gs[1].value()).is_ok());
  auto gb = b.mgr->create("race", 2, 1, BackendKind::kStore);
  auto ga = fa.get();
  ASSERT_TRUE(ga.is_ok()) << ga.status().message();
  ASSERT_TRUE(gb.is_ok()) << gb.status().message();
  EXPECT_EQ(ga.value()->epoch, 1u);
  EXPECT_EQ(gb.value()->epoch, 1u);
}

// accrun_finalize frees the manager; after accrun_init the member declares
// the name again before the slow member has closed the old incarnation.
TEST(RuntimeGroups, DeclaredAgainAfterReinitWhileTheOldIncarnationIsOpen) {
  MemoryDirectory dir;
  auto a = std::make_unique<Proc>(dir, 0, 5000, std::vector<int>{}, "job-reinit");
  auto b = std::make_unique<Proc>(dir, 1, 5000, std::vector<int>{}, "job-reinit");
  auto gs = create_all({a.get(), b.get()}, "reinit", 2, {0, 1});
  ASSERT_TRUE(gs[0].is_ok() && gs[1].is_ok());
  ASSERT_TRUE(b->mgr->destroy(*gs[1].value()).is_ok());
  b.reset();  // accrun_finalize, then accrun_init
  b = std::make_unique<Proc>(dir, 1, 5000, std::vector<int>{}, "job-reinit");
  auto fb = std::async(std::launch::async, [&] { return b->mgr->create("reinit", 2, 1, BackendKind::kStore); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(a->mgr->destroy(*gs[0].value()).is_ok());
  auto ga = a->mgr->create("reinit", 2, 0, BackendKind::kStore);
  auto gb = fb.get();
  ASSERT_TRUE(ga.is_ok()) << ga.status().message();
  ASSERT_TRUE(gb.is_ok()) << gb.status().message();
  EXPECT_EQ(ga.value()->epoch, 1u);
  EXPECT_EQ(gb.value()->epoch, 1u);
}

TEST(RuntimeGroups, NewcomersSkipClosedIncarnations) {
  MemoryDirectory dir;
  Proc a(dir, 0), b(dir, 1), c(dir, 2);
  for (int i = 0; i < 3; ++i) {
    auto gs = create_all({&a, &b}, "grow", 2, {0, 1});
    ASSERT_TRUE(gs[0].is_ok() && gs[1].is_ok());
    (void)a.mgr->destroy(*gs[0].value());
    (void)b.mgr->destroy(*gs[1].value());
  }
  // c never saw "grow": it scans past the three closed incarnations.
  auto gs = create_all({&a, &b, &c}, "grow", 3, {0, 1, 2});
  for (auto& g : gs) {
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    EXPECT_EQ(g.value()->epoch, 3u);
  }
}

TEST(RuntimeGroups, WorldSizesThatDisagreeFailFast) {
  MemoryDirectory dir;
  Proc a(dir, 0), b(dir, 1);
  auto start = std::chrono::steady_clock::now();
  auto ga = std::async(std::launch::async, [&] { return a.mgr->create("ws", 2, 0, BackendKind::kStore); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto gb = b.mgr->create("ws", 3, 1, BackendKind::kStore);
  auto ra = ga.get();
  ASSERT_FALSE(gb.is_ok());
  ASSERT_FALSE(ra.is_ok());
  EXPECT_EQ(gb.status().code(), Code::kInvalidUsage);
  EXPECT_EQ(ra.status().code(), Code::kInvalidUsage);
  EXPECT_NE(gb.status().message().find("world size"), std::string::npos) << gb.status().message();
  EXPECT_NE(ra.status().message().find("world size"), std::string::npos) << ra.status().message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));  // not the 5 s timeout
}

TEST(RuntimeGroups, TwoMembersClaimingOneRankFail) {
  MemoryDirectory dir;
  Proc a(dir, 0), b(dir, 1), c(dir, 2);
  // Group rank 0 joins first: a member arriving after the conflict closed
  // the incarnation would, by design, open the next one and wait there.
  auto first = std::async(std::launch::async, [&] { return a.mgr->create("dup", 3, 0, BackendKind::kStore); });
  ASSERT_TRUE(dir.lookup("accrun.g/dup/0/rank/0", 5000).is_ok());
  std::vector<GroupResult> gs = create_all({&b, &c}, "dup", 3, {1, 1});
  gs.push_back(first.get());
  int invalid = 0;
  for (auto& g : gs) {
    ASSERT_FALSE(g.is_ok());
    if (g.status().code() == Code::kInvalidUsage) ++invalid;
  }
  EXPECT_EQ(invalid, 3);
  bool named = false;
  for (auto& g : gs) named |= g.status().message().find("two members claim group rank 1") != std::string::npos;
  EXPECT_TRUE(named);
  // Group rank 2, arriving after the conflict closed the incarnation, opens
  // the next one alone; its timeout says what became of the one before.
  Proc d(dir, 3, 300);
  auto late = d.mgr->create("dup", 3, 2, BackendKind::kStore);
  ASSERT_FALSE(late.is_ok());
  EXPECT_EQ(late.status().code(), Code::kTimeout) << late.status().message();
  EXPECT_NE(late.status().message().find("the incarnation before it (epoch 0) failed: "), std::string::npos)
      << late.status().message();
  EXPECT_NE(late.status().message().find("two members claim group rank 1"), std::string::npos)
      << late.status().message();
}

TEST(RuntimeGroups, TimeoutNamesTheRanksThatNeverArrived) {
  MemoryDirectory dir;
  Proc a(dir, 0, 300), c(dir, 2, 300);
  auto gs = create_all({&a, &c}, "late", 4, {0, 2});
  for (auto& g : gs) {
    ASSERT_FALSE(g.is_ok());
    EXPECT_EQ(g.status().code(), Code::kTimeout);
    EXPECT_NE(g.status().message().find("group ranks 1, 3 of 4"), std::string::npos) << g.status().message();
  }
  // The failed incarnation is closed: a complete retry gets the next epoch.
  Proc b(dir, 1), d(dir, 3);
  Proc a2(dir, 10), c2(dir, 12);
  auto again = create_all({&a2, &b, &c2, &d}, "late", 4, {0, 1, 2, 3});
  for (auto& g : again) {
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    EXPECT_EQ(g.value()->epoch, 1u);
  }
}

// A rank of the job that failed before declaring the group cannot join it:
// once fewer of the job's ranks are left than members are missing, every
// member fails naming it (kRemote), well before the init timeout (10 s
// here).  Before, they waited the whole timeout.
TEST(RuntimeGroups, AGroupThatCanNeverGatherFailsOnceARankOfTheJobFailed) {
  MemoryDirectory dir;
  Proc a(dir, 0, 10000, {}, {}, 3), b(dir, 1, 10000, {}, {}, 3);
  std::thread reporter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    a.peers.report_failure(2, "exited with status 3", "h2");
    b.peers.report_failure(2, "exited with status 3", "h2");
  });
  const auto start = std::chrono::steady_clock::now();
  auto gs = create_all({&a, &b}, "short", 3, {0, 1});
  reporter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
  for (auto& g : gs) {
    ASSERT_FALSE(g.is_ok());
    EXPECT_EQ(g.status().code(), Code::kRemote);
    EXPECT_NE(g.status().message().find(
                  "group rank 2 can never arrive: rank 2 on host h2 exited with status 3, "
                  "and 0 of the job's other ranks are left to be 1 member"),
              std::string::npos)
        << g.status().message();
  }
  // A failed rank is no reason while others are left to take its place.
  MemoryDirectory dir2;
  Proc c(dir2, 0, 10000, {}, {}, 4), d(dir2, 1, 10000, {}, {}, 4), e(dir2, 3, 10000, {}, {}, 4);
  c.peers.report_failure(2, "exited with status 3", "h2");
  d.peers.report_failure(2, "exited with status 3", "h2");
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    auto g = e.mgr->create("spare", 3, 2, BackendKind::kStore);
    EXPECT_TRUE(g.is_ok()) << g.status().message();
  });
  for (auto& g : create_all({&c, &d}, "spare", 3, {0, 1}))
    EXPECT_TRUE(g.is_ok()) << g.status().message();
  late.join();
}

TEST(RuntimeGroups, BackendsThatDisagreeFail) {
  MemoryDirectory dir;
  Proc a(dir, 0), b(dir, 1);
  std::vector<std::future<GroupResult>> fs;
  fs.push_back(std::async(std::launch::async, [&] { return a.mgr->create("be", 2, 0, BackendKind::kStore); }));
  fs.push_back(std::async(std::launch::async, [&] { return b.mgr->create("be", 2, 1, BackendKind::kMpi); }));
  for (auto& f : fs) {
    auto g = f.get();
    ASSERT_FALSE(g.is_ok());
    EXPECT_EQ(g.status().code(), Code::kInvalidUsage);
    EXPECT_NE(g.status().message().find("disagree on the backend"), std::string::npos);
  }
}

TEST(RuntimeGroups, OneProcessCannotHoldTwoRanks) {
  MemoryDirectory dir;
  Proc a(dir, 0), a_again(dir, 0);
  auto gs = create_all({&a, &a_again}, "twice", 2, {0, 1});
  for (auto& g : gs) {
    ASSERT_FALSE(g.is_ok());
    EXPECT_NE(g.status().message().find("holds two ranks"), std::string::npos);
  }
}

TEST(RuntimeGroups, AutoSeesEveryMembersFacts) {
  MemoryDirectory dir;
  Proc a(dir, 0, 5000, {0}), b(dir, 1, 5000, {1}), c(dir, 2, 5000, {});
  auto all_gpu = create_all({&a, &b}, "auto1", 2, {0, 1}, std::nullopt);
  for (auto& g : all_gpu) {
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    EXPECT_EQ(g.value()->kind, BackendKind::kNccl);
  }
  auto mixed = create_all({&a, &b, &c}, "auto2", 3, {0, 1, 2}, std::nullopt);
  for (auto& g : mixed) {
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    EXPECT_EQ(g.value()->kind, BackendKind::kStore);
  }
}

TEST(RuntimeGroups, ManyGroupsAtOnceOnTheSameRanks) {
  MemoryDirectory dir;
  constexpr int kRanks = 3, kGroups = 12;
  std::vector<std::unique_ptr<Proc>> procs;
  for (int r = 0; r < kRanks; ++r) procs.push_back(std::make_unique<Proc>(dir, r));
  std::atomic<int> ok{0};
  std::vector<std::thread> ts;
  for (int r = 0; r < kRanks; ++r)
    for (int k = 0; k < kGroups; ++k)
      ts.emplace_back([&, r, k] {
        // Subsets too: group k leaves out rank k % kRanks when k is odd.
        bool odd = k % 2 == 1;
        int skip = k % kRanks;
        if (odd && r == skip) return;
        int world = odd ? kRanks - 1 : kRanks;
        int grank = odd && r > skip ? r - 1 : r;
        auto g = procs[r]->mgr->create("many" + std::to_string(k), world, grank, BackendKind::kStore);
        if (g.is_ok() && g.value()->size == world) ++ok;
      });
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), kGroups / 2 * kRanks + kGroups / 2 * (kRanks - 1));
}

TEST(RuntimeGroups, NamesWithSlashesDoNotCollide) {
  EXPECT_EQ(escape_key_component("a/0"), "a%2F0");
  EXPECT_EQ(escape_key_component("50%"), "50%25");
  MemoryDirectory dir;
  Proc a(dir, 0);
  auto g1 = a.mgr->create("x/0", 1, 0, BackendKind::kStore);
  auto g2 = a.mgr->create("x", 1, 0, BackendKind::kStore);
  ASSERT_TRUE(g1.is_ok()) << g1.status().message();
  ASSERT_TRUE(g2.is_ok()) << g2.status().message();
  EXPECT_EQ(g2.value()->epoch, 0u);
}

// A 256-byte name of '/' or '%' (the longest accrun_group_init(3) and
// accrun_put(3) take) fits PMIx's 511-byte keys with accrun's prefixes.
TEST(RuntimeGroups, TheLongestNamesFitThePmixKeyLimit) {
  const std::string slashes(256, '/'), percents(256, '%'), plain(256, 'a');
  for (const std::string* n : {&slashes, &percents, &plain}) {
    const std::string k = escape_key_component(*n);
    EXPECT_LE(("accrun.g/" + k + "/4294967295/rank/2147483647").size(), 511u) << k;
  }
  EXPECT_EQ(escape_key_component(plain), plain);  // short enough: kept readable
  EXPECT_EQ(escape_key_component(slashes).rfind("%H", 0), 0u);
  EXPECT_NE(escape_key_component(slashes), escape_key_component(percents));
  EXPECT_NE(escape_key_component(slashes), escape_key_component(std::string(255, '/') + "%"));
  EXPECT_EQ(escape_key_component(slashes), escape_key_component(std::string(256, '/')));
}

// Counts the requests a directory gets (the PMIx directory answers each with
// a round trip to the launcher).
class CountingDirectory final : public Directory {
 public:
  Status publish(const std::string& k, const std::string& v) override { return inner.publish(k, v); }
  Result<std::string> lookup(const std::string& k, int t) override {
    ++lookups;
    return inner.lookup(k, t);
  }
  Status unpublish(const std::string& k) override { return inner.unpublish(k); }
  void cancel_waits() override { inner.cancel_waits(); }
  Result<std::vector<std::string>> lookup_all(const std::vector<std::string>& keys, int t) override {
    ++lookups;
    return inner.lookup_all(keys, t);
  }
  MemoryDirectory inner;
  std::atomic<int> lookups{0};
};

TEST(RuntimeGroups, RendezvousIsAFewRequestsPerMemberNotOnePerPair) {
  // 24 members arriving one after another: each asks for all the others'
  // records at once, so the requests grow with the members, not their pairs.
  CountingDirectory dir;
  constexpr int kN = 24;
  std::vector<std::unique_ptr<GroupManager>> mgrs;
  std::vector<std::unique_ptr<PeerTable>> peers;
  for (int r = 0; r < kN; ++r) {
    SelfInfo self;
    self.member.job_rank = r;
    self.member.host = "h0";
    self.member.pid = 1000 + r;
    self.facts.host = "h0";
    GroupManagerOptions o;
    o.init_timeout_ms = 10000;
    peers.push_back(std::make_unique<PeerTable>("h0"));
    mgrs.push_back(std::make_unique<GroupManager>(dir, peers.back().get(), self, o,
                                                  [](BackendKind, const GroupContext& ctx) -> Result<std::unique_ptr<Backend>> {
                                                    return std::unique_ptr<Backend>(new FakeBackend(ctx));
                                                  },
                                                  fake_resolver));
  }
  std::vector<std::future<GroupResult>> fs;
  for (int r = 0; r < kN; ++r) {
    fs.push_back(std::async(std::launch::async, [&, r] { return mgrs[r]->create("wide", kN, r, BackendKind::kStore); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (auto& f : fs) {
    auto g = f.get();
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    EXPECT_EQ(g.value()->members.size(), static_cast<std::size_t>(kN));
  }
  // Per member: the closed check, the world key, and a few waits for all.
  EXPECT_LT(dir.lookups.load(), kN * 8) << "directory requests for " << kN << " members";
}

TEST(RuntimeGroups, NewGroupsGetTheDefaultDataTimeout) {
  for (int timeout : {collectives::kDefaultGroupTimeoutMs, 250, -1}) {
    MemoryDirectory dir;
    SelfInfo self;
    self.member.host = "h0";
    self.facts.host = "h0";
    GroupManagerOptions o;
    if (timeout != collectives::kDefaultGroupTimeoutMs) o.data_timeout_ms = timeout;
    PeerTable peers("h0");
    GroupManager mgr(dir, &peers, self, o, fake_factory, fake_resolver);
    auto g = mgr.create("t", 1, 0, BackendKind::kStore);
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    EXPECT_EQ(g.value()->timeout_ms, timeout);
    EXPECT_EQ(static_cast<FakeBackend&>(*g.value()->backend).timeout_, timeout);
  }
  EXPECT_EQ(collectives::kDefaultGroupTimeoutMs, 600'000);  // ten minutes, as documented
}

TEST(RuntimeGroups, MemberRecordRoundTrips) {
  MemberRecord r;
  r.world_size = 8;
  r.requested = -1;
  r.member.job_rank = 5;
  r.member.host = "node-3.example";
  r.member.node_rank = 2;
  r.member.local_rank = 1;
  r.member.pid = 424242;
  r.facts.gpu_ids = {3, 7};
  r.facts.gpus_whole = false;
  r.facts.nccl_loadable = true;
  r.facts.mpi_initialized = true;
  auto d = decode_record(encode_record(r));
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->world_size, 8);
  EXPECT_EQ(d->requested, -1);
  EXPECT_EQ(d->member.job_rank, 5);
  EXPECT_EQ(d->member.host, "node-3.example");
  EXPECT_EQ(d->member.pid, 424242);
  EXPECT_EQ(d->facts.gpu_ids, (std::vector<int>{3, 7}));
  EXPECT_FALSE(d->facts.gpus_whole);
  EXPECT_TRUE(d->facts.nccl_loadable);
  EXPECT_TRUE(d->facts.mpi_initialized);
  EXPECT_EQ(d->facts.host, "node-3.example");
  EXPECT_FALSE(decode_record("garbage").is_ok());
}

TEST(RuntimePeers, DeadLocalPidIsAFailure) {
  PeerTable peers("h0");
  pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  peers.note_member(4, "h0", child);
  int st = 0;
  waitpid(child, &st, 0);
  auto f = peers.failure(4);
  ASSERT_TRUE(f.has_value());
  EXPECT_NE(f->find("rank 4 on host h0"), std::string::npos) << *f;
  // A live process is not; a peer elsewhere is not pid-checked.
  peers.note_member(5, "h0", getpid());
  EXPECT_FALSE(peers.failure(5).has_value());
  peers.note_member(6, "other", child);
  EXPECT_FALSE(peers.failure(6).has_value());
  peers.report_failure(6, "exited with status 3");
  EXPECT_EQ(peers.failure(6).value(), "rank 6 on host other exited with status 3");
}

}  // namespace
}  // namespace accrun::runtime
