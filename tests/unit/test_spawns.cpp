// The job controller's book of spawned processes (launcher/src/controller/
// spawns.hpp) and the spawn messages (controller/protocol.hpp).
#include <gtest/gtest.h>
#include <pmix_common.h>

#include "controller/protocol.hpp"
#include "controller/spawns.hpp"

namespace accrun::launcher {
namespace {

SpawnRequest request(std::vector<int> counts) {
  SpawnRequest r;
  r.requester = 0;
  r.who = "rank 0";
  for (int n : counts) {
    SpawnApp a;
    a.cmd = "worker";
    a.maxprocs = n;
    r.apps.push_back(a);
  }
  return r;
}

// h0: 2 slots, 2 ranks (full); h1: 4 slots, 1 rank; h2: 2 slots, no rank.
SpawnBook three_hosts(bool oversubscribe = false) {
  return SpawnBook({{"h0", 2, 2, 8}, {"h1", 4, 1, 8}, {"h2", 2, 0, 8}}, oversubscribe);
}

TEST(SpawnBook, FillsFreeSlotsFromTheRequestersHost) {
  SpawnBook book = three_hosts();
  std::vector<bool> live(3, true);
  // From h1: its own 3 free slots first, then h0 (full), then h2.
  auto p = book.place(request({4}), 1, live);
  ASSERT_TRUE(p) << p.status().message();
  EXPECT_EQ(p->host_of, (std::vector<int>{1, 1, 1, 2}));
  EXPECT_EQ(p->app_of, (std::vector<int>{0, 0, 0, 0}));
  // Two applications are ranked in order.
  auto two = book.place(request({1, 2}), 0, live);
  ASSERT_TRUE(two);
  EXPECT_EQ(two->app_of, (std::vector<int>{0, 1, 1}));
  EXPECT_EQ(two->host_of, (std::vector<int>{1, 1, 1}));
}

TEST(SpawnBook, SlotsTakenUntilTheProcessesEnd) {
  SpawnBook book = three_hosts();
  std::vector<bool> live(3, true);
  auto p = book.place(request({5}), 0, live);
  ASSERT_TRUE(p);
  SpawnLaunch l;
  book.add("abc", *p, &l);
  EXPECT_EQ(l.k, 1);
  EXPECT_EQ(l.nspace, "accrun.abc.1");
  EXPECT_EQ(l.base, kSpawnedIdBase);
  EXPECT_EQ(book.host_of(kSpawnedIdBase + 4), 2);
  EXPECT_EQ(book.host_of(kSpawnedIdBase + 5), -1);
  EXPECT_EQ(book.host_of(3), -1);
  // Every slot is taken now.
  auto more = book.place(request({1}), 0, live);
  ASSERT_FALSE(more);
  EXPECT_NE(more.status().message().find("the job's hosts have 0 free slot(s) (h0 0 of 2, h1 0 of 4, h2 0 of 2)"),
            std::string::npos)
      << more.status().message();
  EXPECT_NE(more.status().message().find("--oversubscribe"), std::string::npos);
  // One ends (twice reported: counted once); its slot is free again.
  book.ended(kSpawnedIdBase + 4);
  book.ended(kSpawnedIdBase + 4);
  auto again = book.place(request({1}), 0, live);
  ASSERT_TRUE(again) << again.status().message();
  EXPECT_EQ(again->host_of, (std::vector<int>{2}));
  EXPECT_FALSE(book.place(request({2}), 0, live));
  SpawnLaunch second;
  book.add("abc", *again, &second);
  EXPECT_EQ(second.k, 2);
  EXPECT_EQ(second.base, kSpawnedIdBase + 5);
}

TEST(SpawnBook, OversubscribeGoesRoundTheHosts) {
  SpawnBook book = three_hosts(true);
  std::vector<bool> live(3, true);
  auto p = book.place(request({8}), 0, live);
  ASSERT_TRUE(p);
  // 3 free on h1, 2 on h2, then round the hosts from the requester's.
  EXPECT_EQ(p->host_of, (std::vector<int>{1, 1, 1, 2, 2, 0, 1, 2}));
}

TEST(SpawnBook, HostsThatEndedAndNamedHosts) {
  SpawnBook book = three_hosts();
  std::vector<bool> live{true, false, true};
  auto p = book.place(request({2}), 0, live);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->host_of, (std::vector<int>{2, 2})) << "h1's agent has ended";
  SpawnRequest named = request({1});
  named.apps[0].info[PMIX_HOST] = "h1";
  auto on_h1 = book.place(named, 0, std::vector<bool>(3, true));
  ASSERT_TRUE(on_h1);
  EXPECT_EQ(on_h1->host_of, (std::vector<int>{1}));
  named.apps[0].info[PMIX_HOST] = "h9";
  auto bad = book.place(named, 0, std::vector<bool>(3, true));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("it asks for host 'h9', which is not one of the job's hosts still running "
                                        "(h0, h1, h2)"),
            std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(book.place(request({0}), 0, std::vector<bool>(3, true)));
}

TEST(SpawnBook, UniverseCountsSlotsOrProcessingUnits) {
  EXPECT_EQ(three_hosts().universe(), 8);
  // No slot count (one host without a hostfile): its processing units, or
  // its ranks when there are more.
  EXPECT_EQ(SpawnBook({{"local", std::nullopt, 2, 16}}, false).universe(), 16);
  EXPECT_EQ(SpawnBook({{"local", std::nullopt, 64, 2}}, false).universe(), 64);
  SpawnBook unlimited({{"local", std::nullopt, 2, 2}}, false);
  auto p = unlimited.place(request({10}), 0, {true});
  ASSERT_TRUE(p) << "no slot count: no limit, as for -n";
  EXPECT_EQ(p->host_of.size(), 10u);
}

TEST(SpawnMessages, RoundTripAndRejectGarbage) {
  SpawnRequest r = request({2, 1});
  r.requester = 5;
  r.info["pmix.wdir"] = "/tmp";
  r.apps[1].argv = {"worker", "--x"};
  r.apps[1].env = {"A=1", "OMPI_PARENT_PORT=p"};
  r.apps[1].cwd = "/work";
  auto back = msg::decode_spawn_request(msg::encode_spawn_request(42, r));
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(back->first, 42u);
  EXPECT_EQ(back->second.requester, 5);
  EXPECT_EQ(back->second.who, "rank 0");
  EXPECT_EQ(back->second.info, r.info);
  ASSERT_EQ(back->second.apps.size(), 2u);
  EXPECT_EQ(back->second.apps[1].argv, r.apps[1].argv);
  EXPECT_EQ(back->second.apps[1].env, r.apps[1].env);
  EXPECT_EQ(back->second.apps[1].cwd, "/work");
  EXPECT_EQ(back->second.apps[0].maxprocs, 2);

  SpawnLaunch l;
  l.k = 3;
  l.nspace = "accrun.abc.3";
  l.base = kSpawnedIdBase + 7;
  l.requester = kSpawnedIdBase + 1;
  l.spawner = 2;
  l.who = "spawned process 1";
  l.apps = r.apps;
  l.host_of = {0, 1, 1};
  l.app_of = {0, 0, 1};
  auto lb = msg::decode_spawn_launch(msg::encode_spawn_launch(l));
  ASSERT_TRUE(lb) << lb.status().message();
  EXPECT_EQ(lb->k, 3);
  EXPECT_EQ(lb->nspace, l.nspace);
  EXPECT_EQ(lb->base, l.base);
  EXPECT_EQ(lb->requester, l.requester);
  EXPECT_EQ(lb->spawner, 2);
  EXPECT_EQ(lb->host_of, l.host_of);
  EXPECT_EQ(lb->app_of, l.app_of);

  // Untrusted input: every truncation fails cleanly, a base below the
  // spawned ids and an application index out of range are refused.
  std::string good = msg::encode_spawn_launch(l);
  for (size_t n = 0; n < good.size(); ++n) EXPECT_FALSE(msg::decode_spawn_launch(good.substr(0, n))) << n;
  SpawnLaunch low = l;
  low.base = 3;
  EXPECT_FALSE(msg::decode_spawn_launch(msg::encode_spawn_launch(low)));
  SpawnLaunch bad_app = l;
  bad_app.app_of = {0, 0, 2};
  EXPECT_FALSE(msg::decode_spawn_launch(msg::encode_spawn_launch(bad_app)));
  std::string req = msg::encode_spawn_request(1, r);
  for (size_t n = 0; n < req.size(); ++n) EXPECT_FALSE(msg::decode_spawn_request(req.substr(0, n))) << n;
}

// Fence signatures: what the agents write and both the agents and the
// controller read to know a round's members.
TEST(SpawnMessages, FenceSignatures) {
  auto all = msg::parse_signature("*");
  ASSERT_TRUE(all);
  EXPECT_TRUE(all->all);
  auto pmi = msg::parse_signature("pmi:*");
  ASSERT_TRUE(pmi);
  EXPECT_TRUE(pmi->all);
  auto some = msg::parse_signature("connect:0,3," + std::to_string(kSpawnedIdBase + 1));
  ASSERT_TRUE(some);
  EXPECT_FALSE(some->all);
  EXPECT_EQ(some->ids, (std::vector<int>{0, 3, kSpawnedIdBase + 1}));
  EXPECT_TRUE(msg::whole_job("*"));
  EXPECT_TRUE(msg::whole_job("pmi:*"));
  EXPECT_FALSE(msg::whole_job("connect:0,3"));
  EXPECT_FALSE(msg::whole_job("1,,2"));
  // A round's answer, as the controller writes it and the agents read it.
  auto done = msg::decode_fence_done(msg::encode_fence_done("pmi:*", true, std::string("a\0b", 3)));
  ASSERT_TRUE(done);
  EXPECT_EQ(done->signature, "pmi:*");
  EXPECT_TRUE(done->ok);
  EXPECT_EQ(done->all, std::string("a\0b", 3));
  const std::string failed = msg::encode_fence_done("*", false, "");
  for (size_t n = 0; n < failed.size(); ++n) EXPECT_FALSE(msg::decode_fence_done(failed.substr(0, n))) << n;
  for (const char* bad : {"", "connect:", "1,,2", "1,", "-1", "x", "9999999999", "1;2"})
    EXPECT_FALSE(msg::parse_signature(bad)) << bad;
}

TEST(SpawnMessages, SignalProcs) {
  auto back = msg::decode_signal_procs(msg::encode_signal_procs(15, true, {3, kSpawnedIdBase + 1}));
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(back->sig, 15);
  EXPECT_TRUE(back->stop);
  EXPECT_EQ(back->ids, (std::vector<int>{3, kSpawnedIdBase + 1}));
  EXPECT_FALSE(msg::decode_signal_procs(msg::encode_signal_procs(0, false, {1}))) << "no signal 0";
  EXPECT_FALSE(msg::decode_signal_procs(msg::encode_signal_procs(99, false, {1}))) << "no such signal";
  std::string good = msg::encode_signal_procs(9, false, {1, 2});
  for (size_t n = 0; n < good.size(); ++n) EXPECT_FALSE(msg::decode_signal_procs(good.substr(0, n))) << n;
}

}  // namespace
}  // namespace accrun::launcher
