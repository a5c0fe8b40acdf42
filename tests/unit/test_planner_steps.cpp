// Each step of the planner on its own (launcher/src/planner/steps.hpp), in
// the order plan() runs them.  test_planner.cpp checks plan() as a whole.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "planner/steps.hpp"
#include "planner_fixtures.hpp"

namespace accrun::launcher::planner {

// gtest prints runs readably (found by argument-dependent lookup).
void PrintTo(const Run& r, std::ostream* os) { *os << "{" << r.candidate << ", " << r.count << "}"; }

namespace {

using Runs = std::vector<Run>;  // inside a test body, Run is ::testing::Test::Run

using namespace planner_test;
using detect::Quantity;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string error_of(const Status& s) { return s.is_ok() ? "<ok>" : s.message(); }

// The candidates of every host, as plan() builds them.
std::vector<Candidate> candidates(const JobSpec& spec, const std::vector<HostSlots>& hosts) {
  auto eligible = eligible_hosts(spec, hosts);
  EXPECT_TRUE(eligible.is_ok()) << eligible.status().message();
  return host_capacities(spec, hosts, eligible.is_ok() ? *eligible : std::vector<int>{});
}

// The error placing `spec` on `hosts` gives (in order, or in pod blocks
// under --pod-blocks), or "<placed>".
std::string placement_error(const JobSpec& spec, const std::vector<HostSlots>& hosts) {
  std::vector<Candidate> c = candidates(spec, hosts);
  auto runs = spec.pod_blocks > 0 ? place_pod_blocks(spec, hosts, c) : place_in_order(spec, hosts, c);
  if (runs.is_ok()) return "<placed>";
  EXPECT_EQ(runs.status().code(), Code::kInvalidArgument);
  return runs.status().message();
}

// --- 1. validate_spec, ranks_on_devices ----------------------------------------

TEST(PlannerSpec, RefusesWhatNoHostCouldChange) {
  EXPECT_TRUE(validate_spec(spec_of(4, {{"GPU", q("0.5")}, {"TPU", q("4")}})).is_ok());
  EXPECT_EQ(error_of(validate_spec(spec_of(0))), "-n must be at least 1");
  EXPECT_TRUE(has(error_of(validate_spec(spec_of(1 << 23))), "more ranks than accrun plans"));
  EXPECT_EQ(error_of(validate_spec(spec_of(1, {{"gpu", q("1")}}))),
            "resource 'gpu' must be given by its canonical name 'GPU'");
  EXPECT_EQ(error_of(validate_spec(spec_of(1, {{"GPU", q("1")}, {"GPU", q("0.5")}}))), "GPU is requested twice");
  EXPECT_TRUE(has(error_of(validate_spec(spec_of(1, {{"TPU", q("0.5")}}))), "1, 2, 4 or 8 TPU chips"));
  EXPECT_TRUE(has(error_of(validate_spec(spec_of(1, {{"FPGA", q("1")}}))), "FPGA"));
  JobSpec s = spec_of(1);
  s.pod_blocks = -1;
  EXPECT_EQ(error_of(validate_spec(s)), "--pod-blocks must be at least 1");
  s = spec_of(1);
  s.cpus_per_rank = -2;
  EXPECT_EQ(error_of(validate_spec(s)), "-c must be at least 1");
  s = spec_of(1);
  s.npernode = -1;
  EXPECT_EQ(error_of(validate_spec(s)), "--npernode must be at least 1");
}

TEST(PlannerSpec, RanksOnDevicesPacksFractionsAndWholeDevices) {
  EXPECT_EQ(ranks_on_devices(3, q("0.5")), 6);
  EXPECT_EQ(ranks_on_devices(2, q("0.3")), 6) << "three 0.3s per device; the 0.1 left over holds none";
  EXPECT_EQ(ranks_on_devices(8, q("1")), 8);
  EXPECT_EQ(ranks_on_devices(5, q("2")), 2) << "whole requests never split a device";
  EXPECT_EQ(ranks_on_devices(0, q("0.5")), 0);
  EXPECT_EQ(ranks_on_devices(0, Quantity()), kUnlimited) << "asking for nothing fits anywhere";
}

// --- 2. eligible_hosts ---------------------------------------------------------

TEST(PlannerHosts, WithoutATypeEveryHostIsEligible) {
  auto e = eligible_hosts(spec_of(1), {slots(host("a", 0), 1), slots(host("b", 2), 1), slots(host("c", 1), 1)});
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(*e, (std::vector<int>{0, 1, 2}));
}

TEST(PlannerHosts, AcceleratorTypeKeepsHostsOfTheTypeOrAVariantOfIt) {
  const std::vector<HostSlots> hosts = {slots(host("h100", 2, "H100"), 2), slots(host("a40", 2, "A100-40G"), 2),
                                        slots(host("none", 0), 2), slots(host("a80", 2, "A100-80G"), 2)};
  JobSpec s = spec_of(1);
  s.accelerator_type = "a100";
  auto e = eligible_hosts(s, hosts);
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  EXPECT_EQ(*e, (std::vector<int>{1, 3})) << "A100 is met by both memory variants";
  s.accelerator_type = "A100-80G";
  e = eligible_hosts(s, hosts);
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  EXPECT_EQ(*e, (std::vector<int>{3})) << "a variant is not met by another";
}

TEST(PlannerHosts, NoHostOfTheTypeListsTheTypesThere) {
  JobSpec s = spec_of(1);
  s.accelerator_type = "MI300X";
  auto e = eligible_hosts(s, {slots(host("a", 1, "H100"), 1), slots(host("b", 1, "H100"), 1),
                              slots(host("c", 1, "H100"), 1), slots(host("d", 1, "L4"), 1)});
  ASSERT_FALSE(e.is_ok());
  EXPECT_EQ(e.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(e.status().message(),
            "--accelerator-type MI300X: no host has accelerators of type MI300X; types here: H100 (a and 2 more), "
            "L4 (d)");
  e = eligible_hosts(s, {slots(host("a", 0), 1)});
  ASSERT_FALSE(e.is_ok());
  EXPECT_TRUE(has(e.status().message(), "the hosts have no accelerators of a known type")) << e.status().message();
  // The hint asks for devices with the type: a type alone was what the
  // user had given already.
  EXPECT_TRUE(has(e.status().message(),
                  "declare gpus=N with accelerator_type= in the hostfile, or give this host "
                  "--num-gpus N with --host-accelerator-type"))
      << e.status().message();
  // A host whose type names only the family cannot meet a variant.
  s.accelerator_type = "A100-80G";
  e = eligible_hosts(s, {slots(host("a", 1, "A100"), 1)});
  ASSERT_FALSE(e.is_ok());
  EXPECT_TRUE(has(e.status().message(), "(A100 does not say its variant: declare accelerator_type=A100-80G"))
      << e.status().message();
}

// --- 3. host_capacities --------------------------------------------------------

TEST(PlannerHosts, CapacityIsTheTightestOfDevicesSlotsAndNpernode) {
  detect::Inventory inv = host("h", 4);
  for (int i = 0; i < 3; ++i) inv.accelerators.push_back(host("x", 3, "GAUDI2", "habana", "HPU").accelerators[i]);
  const std::vector<HostSlots> hosts = {slots(inv, 6), slots(host("free", 0), std::nullopt)};
  JobSpec s = spec_of(1, {{"GPU", q("0.5")}, {"HPU", q("1")}});
  std::vector<Candidate> c = host_capacities(s, hosts, {0, 1});
  ASSERT_EQ(c.size(), 2u);
  ASSERT_EQ(c[0].resources.size(), 2u);
  EXPECT_EQ(c[0].resources[0].devices.size(), 4u);
  EXPECT_EQ(c[0].resources[0].ranks_fit, 8);
  EXPECT_EQ(c[0].resources[1].devices.size(), 3u);
  EXPECT_EQ(c[0].device_cap, 3) << "three HPUs hold three ranks, whatever the GPUs hold";
  EXPECT_EQ(c[0].slot_cap, 6);
  EXPECT_EQ(c[0].cap(), 3);
  EXPECT_EQ(c[1].device_cap, 0);
  EXPECT_EQ(c[1].slot_cap, kUnlimited) << "no slots: the local host without a hostfile";

  // Under --oversubscribe slots stop being a limit but are still filled first.
  s = spec_of(1);
  s.oversubscribe = true;
  c = host_capacities(s, hosts, {0});
  EXPECT_EQ(c[0].slot_cap, kUnlimited);
  EXPECT_EQ(c[0].first_pass_cap, 6);
  s.npernode = 2;
  c = host_capacities(s, hosts, {0, 1});
  EXPECT_EQ(c[0].cap(), 2);
  EXPECT_EQ(c[1].first_pass_cap, 2);
  EXPECT_EQ(c[1].input, 1);
}

// --- 4. place_in_order ---------------------------------------------------------

TEST(PlannerPlacement, InOrderFillsSlotsThenSpreadsUnderOversubscribe) {
  const std::vector<HostSlots> hosts = {slots(host("a", 0), 3), slots(host("b", 0), 1), slots(host("c", 0), 2)};
  JobSpec s = spec_of(5);
  std::vector<Candidate> c = candidates(s, hosts);
  auto runs = place_in_order(s, hosts, c);
  ASSERT_TRUE(runs.is_ok()) << runs.status().message();
  EXPECT_EQ(*runs, (Runs{{0, 3}, {1, 1}, {2, 1}}));
  EXPECT_EQ(c[2].used, 1);

  s = spec_of(10);
  s.oversubscribe = true;
  c = candidates(s, hosts);
  runs = place_in_order(s, hosts, c);
  ASSERT_TRUE(runs.is_ok()) << runs.status().message();
  // 6 in the slots, then 4 round-robin: a, b, c, a.
  EXPECT_EQ(*runs, (Runs{{0, 5}, {1, 2}, {2, 3}}));
}

TEST(PlannerPlacement, InOrderNamesWhatRanOut) {
  const std::vector<HostSlots> hosts = {slots(host("a", 2), 4, "hosts:1"), slots(host("b", 1), 4, "hosts:2")};
  EXPECT_EQ(placement_error(spec_of(3, {{"GPU", q("1")}}), hosts), "<placed>");
  EXPECT_EQ(placement_error(spec_of(4, {{"GPU", q("1")}}), hosts),
            "cannot place rank 3 of -n 4: every GPU is taken — the hosts hold 3 ranks of GPU=1; the last host, "
            "'b' (hosts:2), ran out at GPU 0 (its 1 GPU hold 1 such ranks); ask for fewer ranks or less per "
            "rank, or add hosts");
  EXPECT_EQ(placement_error(spec_of(9), hosts),
            "cannot place rank 8 of -n 9: the hosts have 8 slots (a: 4, b: 4); add hosts or slots, or give "
            "--oversubscribe");
  // A mask that hid the devices is named.
  std::vector<HostSlots> masked = {slots(host("m", 0), 4)};
  masked[0].inventory.masks["GPU"] = "CUDA_VISIBLE_DEVICES=-1";
  const std::string msg = placement_error(spec_of(1, {{"GPU", q("1")}}), masked);
  EXPECT_TRUE(has(msg, "no host has the devices asked for (GPU=1 per rank); "
                       "CUDA_VISIBLE_DEVICES=-1 (inherited) leaves 'm' (test) 0 GPUs"))
      << msg;
}

// --- 4. pod_groups, place_pod_blocks -------------------------------------------

std::vector<HostSlots> labelled(const std::vector<std::pair<std::string, std::optional<std::string>>>& pods,
                                int gpus = 2) {
  std::vector<HostSlots> out;
  for (const auto& [name, pod] : pods) {
    detect::Inventory inv = host(name, gpus);
    inv.labels.pod = pod;
    inv.labels.zone = "z";
    out.push_back(slots(std::move(inv), gpus));
  }
  return out;
}

TEST(PlannerPlacement, PodGroupsFollowFirstAppearanceAndWorkerOrder) {
  std::vector<HostSlots> hosts = labelled({{"a1", "A"}, {"b1", "B"}, {"lone", std::nullopt}, {"a2", "A"},
                                           {"a3", "A"}});
  hosts[0].inventory.pod_order = 2;
  hosts[3].inventory.pod_order = 0;  // a2 is worker 0, a1 worker 2, a3 says nothing
  JobSpec s = spec_of(1);
  std::vector<Candidate> c = candidates(s, hosts);
  std::vector<PodGroup> g = pod_groups(s, hosts, c);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0].name, "pod 'A'");
  EXPECT_EQ(g[0].members, (std::vector<int>{3, 0, 4}));
  EXPECT_EQ(g[1].name, "pod 'B'");
  EXPECT_EQ(g[2].name, "host lone") << "an unlabelled host is a group of its own";
  // Worker order is a pod's; a zone keeps the input order.
  s.pod_level = PodLevel::kZone;
  g = pod_groups(s, hosts, c);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].name, "zone 'z'");
  EXPECT_EQ(g[0].members, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(PlannerPlacement, BlocksGoToTheFirstGroupWithRoomForAllOfThem) {
  // Pod A has 4 slots on two hosts, pod B 6 on three, interleaved.
  const std::vector<HostSlots> hosts = labelled({{"a1", "A"}, {"b1", "B"}, {"a2", "A"}, {"b2", "B"}, {"b3", "B"}});
  JobSpec s = spec_of(9, {{"GPU", q("1")}});
  s.pod_blocks = 3;
  std::vector<Candidate> c = candidates(s, hosts);
  auto runs = place_pod_blocks(s, hosts, c);
  ASSERT_TRUE(runs.is_ok()) << runs.status().message();
  // Block 0 → A (a1 a1 a2); block 1: A has 1 left, so B (b1 b1 b2);
  // block 2 → B (b2 b3 b3), b2's ranks one run.
  EXPECT_EQ(*runs, (Runs{{0, 2}, {2, 1}, {1, 2}, {3, 2}, {4, 2}}));
}

TEST(PlannerPlacement, OversubscribedBlocksSpreadOverOneGroupsDevices) {
  std::vector<HostSlots> hosts = labelled({{"a1", "A"}, {"a2", "A"}}, 4);
  for (auto& h : hosts) h.slots = 1;
  JobSpec s = spec_of(6, {{"GPU", q("1")}});
  s.pod_blocks = 3;
  s.oversubscribe = true;
  std::vector<Candidate> c = candidates(s, hosts);
  auto runs = place_pod_blocks(s, hosts, c);
  ASSERT_TRUE(runs.is_ok()) << runs.status().message();
  // Slots hold 2 of the first block: each block goes round-robin over the
  // group's devices from its first host, each host's share contiguous.
  EXPECT_EQ(*runs, (Runs{{0, 2}, {1, 1}, {0, 2}, {1, 1}}));
  EXPECT_EQ(c[0].used, 4);
  EXPECT_EQ(c[1].used, 2);
}

TEST(PlannerPlacement, BlockThatFitsNowhereNamesTheLargestGroupOrTheRoomLeft) {
  const std::vector<HostSlots> hosts = labelled({{"a1", "A"}, {"b1", "B"}, {"b2", "B"}});
  JobSpec s = spec_of(8, {{"GPU", q("1")}});
  s.pod_blocks = 8;
  EXPECT_EQ(placement_error(s, hosts),
            "--pod-blocks 8: block of ranks 0-7 fits in no pod group: the largest, pod 'B' (2 hosts), holds 4 "
            "ranks and the block needs 8 in one group; use --pod-blocks 4 or less, or put more hosts in a pod");
  s.np = 6;
  s.pod_blocks = 3;
  EXPECT_EQ(placement_error(s, hosts),
            "--pod-blocks 3: block of ranks 3-5 fits in no pod group: earlier blocks filled the groups; the most "
            "room left is 2 ranks in pod 'A' and the block needs 3; ask for fewer ranks or add hosts");
  s.np = 5;
  EXPECT_EQ(placement_error(s, hosts), "<placed>") << "the last, shorter block fits in pod 'A'";
}

// --- 5. number_ranks, host_oversubscribed --------------------------------------

TEST(PlannerNumbering, HostsAreNumberedByTheirFirstRank) {
  const std::vector<HostSlots> hosts = {slots(host("a", 0), 4), slots(host("b", 0), 4), slots(host("c", 0), 4)};
  JobSpec s = spec_of(1);
  std::vector<Candidate> c = candidates(s, hosts);
  Plan out;
  const std::vector<int> nodes = number_ranks({{2, 2}, {0, 1}, {2, 1}}, hosts, c, out);
  EXPECT_EQ(nodes, (std::vector<int>{2, 0})) << "c first, a second; b has no ranks";
  ASSERT_EQ(out.hosts.size(), 2u);
  EXPECT_EQ(out.hosts[0].inventory.host, "c");
  ASSERT_EQ(out.ranks.size(), 4u);
  EXPECT_EQ(c[2].ranks, (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(c[0].ranks, (std::vector<int>{2}));
  EXPECT_TRUE(c[1].ranks.empty());
  for (int r = 0; r < 4; ++r) EXPECT_EQ(out.ranks[static_cast<std::size_t>(r)].rank, r);
  EXPECT_EQ(out.ranks[2].host, 1);
  EXPECT_EQ(out.ranks[2].local_rank, 0);
  EXPECT_EQ(out.ranks[3].host, 0);
  EXPECT_EQ(out.ranks[3].local_rank, 2);
}

TEST(PlannerNumbering, OversubscribedMeansBeyondSlotsProcessorsOrCores) {
  JobSpec s = spec_of(1);
  EXPECT_FALSE(host_oversubscribed(s, slots(host("h", 0), 4), 4));
  EXPECT_TRUE(host_oversubscribed(s, slots(host("h", 0), 4), 5));
  detect::Inventory inv = with_cores(host("h", 0), 1, 2);  // 2 cores, 4 PUs
  EXPECT_FALSE(host_oversubscribed(s, slots(inv, std::nullopt), 4)) << "without slots: the PUs";
  EXPECT_TRUE(host_oversubscribed(s, slots(inv, std::nullopt), 5));
  EXPECT_FALSE(host_oversubscribed(s, slots(host("h", 0), std::nullopt), 1000)) << "nothing known: never";
  s.cpus_per_rank = 2;
  EXPECT_TRUE(host_oversubscribed(s, slots(inv, 8), 2)) << "-c 2 for 2 ranks needs 4 cores";
  EXPECT_FALSE(host_oversubscribed(s, slots(inv, 8), 1));
}

// --- 6. assign_devices ---------------------------------------------------------

// Candidates with their ranks numbered: `np` ranks in order on the hosts.
Plan numbered(const JobSpec& spec, const std::vector<HostSlots>& hosts, std::vector<Candidate>& c) {
  c = candidates(spec, hosts);
  auto runs = place_in_order(spec, hosts, c);
  EXPECT_TRUE(runs.is_ok()) << runs.status().message();
  Plan out;
  if (runs.is_ok()) number_ranks(*runs, hosts, c, out);
  return out;
}

std::vector<int> ids_of(const RankPlan& r, const std::string& resource) {
  std::vector<int> ids;
  for (const auto& d : r.devices) {
    if (d.resource == resource) ids.push_back(d.id);
  }
  return ids;
}

TEST(PlannerDevices, FractionsPackAndWholeRequestsTakeConsecutiveDevices) {
  detect::Inventory inv = host("h", 3);
  for (auto& a : inv.accelerators) a.id += 4;  // ids 4, 5, 6: the ids handed out are the host's
  for (const auto& a : host("x", 4, "GAUDI2", "habana", "HPU").accelerators) inv.accelerators.push_back(a);
  const std::vector<HostSlots> hosts = {slots(inv, 8)};
  JobSpec s = spec_of(4, {{"GPU", q("0.3")}, {"HPU", q("1")}});
  std::vector<Candidate> c;
  Plan p = numbered(s, hosts, c);
  assign_devices(c[0], p.ranks);
  ASSERT_EQ(p.ranks[3].devices.size(), 2u);
  EXPECT_EQ(ids_of(p.ranks[0], "GPU"), (std::vector<int>{4}));
  EXPECT_EQ(ids_of(p.ranks[2], "GPU"), (std::vector<int>{4}));
  EXPECT_EQ(ids_of(p.ranks[3], "GPU"), (std::vector<int>{5})) << "0.1 left on GPU 4 holds no 0.3";
  EXPECT_EQ(p.ranks[3].devices[0].fraction, q("0.3"));
  EXPECT_EQ(ids_of(p.ranks[3], "HPU"), (std::vector<int>{3}));
  EXPECT_EQ(p.ranks[3].devices[1].fraction, Quantity::whole(1));

  s = spec_of(2, {{"HPU", q("2")}});
  p = numbered(s, hosts, c);
  assign_devices(c[0], p.ranks);
  EXPECT_EQ(ids_of(p.ranks[0], "HPU"), (std::vector<int>{0, 1}));
  EXPECT_EQ(ids_of(p.ranks[1], "HPU"), (std::vector<int>{2, 3}));
}

// --- 7. binding_policy, bind_cpus ----------------------------------------------

TEST(PlannerCpus, DefaultPolicyFollowsTheRequest) {
  EXPECT_EQ(binding_policy(spec_of(1)), BindTo::kNone);
  JobSpec s = spec_of(1);
  s.cpus_per_rank = 2;
  EXPECT_EQ(binding_policy(s), BindTo::kCore);
  s.per_rank = {{"GPU", q("1")}};
  EXPECT_EQ(binding_policy(s), BindTo::kAccelerator);
  s.bind_to = BindTo::kNuma;
  EXPECT_EQ(binding_policy(s), BindTo::kNuma);
}

// A host's ranks with the devices given, for bind_cpus.
std::vector<RankPlan> ranks_with(const std::vector<std::vector<int>>& gpus) {
  std::vector<RankPlan> out;
  for (const auto& ids : gpus) {
    RankPlan r;
    r.rank = static_cast<int>(out.size());
    for (int id : ids) r.devices.push_back({"GPU", id, Quantity::whole(1)});
    out.push_back(std::move(r));
  }
  return out;
}

TEST(PlannerCpus, RanksSplitTheCoresNearTheirDevices) {
  // 2 NUMA nodes × 4 cores (PUs c and c+8); GPUs 0-1 on node 0, 2-3 on node 1.
  const detect::Inventory inv = with_cores(host("h", 4), 2, 4);
  JobSpec s = spec_of(3, {{"GPU", q("1")}});
  const std::vector<RankPlan> ranks = ranks_with({{0}, {1}, {3}});
  std::vector<CpuBinding> b = bind_cpus(s, inv, {0, 1, 2}, ranks);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].cpus, "0-1,8-9") << "two ranks near node 0 split its 4 cores";
  EXPECT_EQ(b[1].cpus, "2-3,10-11");
  EXPECT_EQ(b[2].cpus, "4-7,12-15") << "alone near node 1: all of it";
  EXPECT_EQ(b[2].cores, 4);
  s.cpus_per_rank = 1;
  b = bind_cpus(s, inv, {0, 1, 2}, ranks);
  EXPECT_EQ(b[1].cpus, "1,9");
  EXPECT_EQ(b[1].cores, 1);
}

TEST(PlannerCpus, LocalCpusStandInForAMissingNumaNode) {
  detect::Inventory inv = with_cores(host("h", 2), 2, 2);  // PUs c and c+4
  inv.accelerators[1].numa.reset();
  inv.accelerators[1].cpus = "2";  // a core of node 1
  std::vector<CpuBinding> b = bind_cpus(spec_of(1, {{"GPU", q("1")}}), inv, {0}, ranks_with({{1}}));
  EXPECT_EQ(b[0].cpus, "2-3,6-7");
  // Locality unknown: every core.
  inv.accelerators[1].cpus.reset();
  b = bind_cpus(spec_of(1, {{"GPU", q("1")}}), inv, {0}, ranks_with({{1}}));
  EXPECT_EQ(b[0].cpus, "0-7");
}

TEST(PlannerCpus, NumaCoreAndNone) {
  const detect::Inventory inv = with_cores(host("h", 0), 2, 2);  // PUs c and c+4
  JobSpec s = spec_of(3);
  s.bind_to = BindTo::kNuma;
  std::vector<CpuBinding> b = bind_cpus(s, inv, {0, 1, 2}, ranks_with({{}, {}, {}}));
  EXPECT_EQ(b[0].cpus, "0-1,4-5") << "whole nodes, round-robin";
  EXPECT_EQ(b[1].cpus, "2-3,6-7");
  EXPECT_EQ(b[2].cpus, "0-1,4-5");
  EXPECT_EQ(b[2].cores, 2);
  s.bind_to = BindTo::kCore;
  b = bind_cpus(s, inv, {0, 1, 2}, ranks_with({{}, {}, {}}));
  EXPECT_EQ(b[2].cpus, "2,6");
  EXPECT_EQ(b[2].cores, 1);
  s.bind_to = BindTo::kNone;
  b = bind_cpus(s, inv, {0}, ranks_with({{}}));
  EXPECT_EQ(b[0].cpus, "");
  EXPECT_EQ(b[0].cores, 0);
  s.bind_to = BindTo::kCore;
  b = bind_cpus(s, host("h", 0), {0}, ranks_with({{}}));
  EXPECT_EQ(b[0].cpus, "") << "topology unknown: nothing to bind to";
}

TEST(PlannerCpus, OnlyTheHostsRanksAreBound) {
  // `local` picks the host's ranks out of the plan's, in local order.
  const detect::Inventory inv = with_cores(host("h", 2), 2, 1);  // PUs c and c+2
  std::vector<RankPlan> ranks = ranks_with({{9}, {1}, {9}, {0}});
  std::vector<CpuBinding> b = bind_cpus(spec_of(4, {{"GPU", q("1")}}), inv, {3, 1}, ranks);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].cpus, "0,2");
  EXPECT_EQ(b[1].cpus, "1,3");
}

// --- 8. RankEnvironment --------------------------------------------------------

// Runs steps 2–6 for `hosts` and returns the environment of every rank.
std::vector<Env> environments(const JobSpec& spec, const std::vector<HostSlots>& hosts, int cores = 0) {
  std::vector<Candidate> c;
  Plan p = numbered(spec, hosts, c);
  std::vector<Env> out(p.ranks.size());
  int node = 0;
  for (auto& cand : c) {
    if (cand.ranks.empty()) continue;
    assign_devices(cand, p.ranks);
    const HostSlots& h = hosts[static_cast<std::size_t>(cand.input)];
    RankEnvironment env(spec, h, cand, node++, false, "head", p.ranks);
    for (std::size_t li = 0; li < cand.ranks.size(); ++li) {
      const RankPlan& r = p.ranks[static_cast<std::size_t>(cand.ranks[li])];
      auto e = env.for_rank(static_cast<int>(li), r, cores);
      EXPECT_TRUE(e.is_ok()) << e.status().message();
      if (e) out[static_cast<std::size_t>(r.rank)] = std::move(*e);
    }
  }
  return out;
}

TEST(PlannerEnvironment, RankHostAndJobVariables) {
  detect::Inventory b = host("b", 2, "A100-80G");
  b.labels.pod = "p1";
  b.labels.region = "r";
  JobSpec s = spec_of(3, {{"GPU", q("0.5")}});
  std::vector<Env> env = environments(s, {slots(host("a", 1), 2), slots(b, 2)}, 4);
  ASSERT_EQ(env.size(), 3u);
  const Env& e = env[2];
  EXPECT_EQ(var(e, "ACCRUN_RANK"), "2");
  EXPECT_EQ(var(e, "RANK"), "2");
  EXPECT_EQ(var(e, "OMPI_COMM_WORLD_RANK"), "2");
  EXPECT_EQ(var(e, "ACCRUN_LOCAL_RANK"), "0");
  EXPECT_EQ(var(e, "LOCAL_RANK"), "0");
  EXPECT_EQ(var(e, "ACCRUN_LOCAL_SIZE"), "1");
  EXPECT_EQ(var(e, "OMPI_COMM_WORLD_LOCAL_SIZE"), "1");
  EXPECT_EQ(var(e, "ACCRUN_SIZE"), "3");
  EXPECT_EQ(var(e, "WORLD_SIZE"), "3");
  EXPECT_EQ(var(e, "ACCRUN_NODE_RANK"), "1");
  EXPECT_EQ(var(e, "ACCRUN_HOST"), "b");
  EXPECT_EQ(var(e, "MASTER_ADDR"), "head");
  EXPECT_EQ(var(e, "MASTER_PORT"), "29500");
  EXPECT_EQ(var(e, "ACCRUN_OVERSUBSCRIBED"), "0");
  EXPECT_EQ(var(e, "ACCRUN_ACCELERATOR_TYPE"), "A100-80G");
  EXPECT_EQ(var(e, "ACCRUN_POD"), "p1");
  EXPECT_EQ(var(e, "ACCRUN_ZONE"), "<unset>") << "only where labelled";
  EXPECT_EQ(var(e, "ACCRUN_REGION"), "r");
  EXPECT_EQ(var(e, "ACCRUN_GPU_IDS"), "0");
  EXPECT_EQ(var(e, "ACCRUN_GPU_FRACTION"), "0.5");
  EXPECT_EQ(var(e, "CUDA_VISIBLE_DEVICES"), "0") << "written by the vendor's provider";
  EXPECT_EQ(var(e, "OMP_NUM_THREADS"), "4") << "the rank's cores";
  EXPECT_EQ(var(env[1], "ACCRUN_POD"), "<unset>");
}

TEST(PlannerEnvironment, MasterPortTheUsersOrTheLaunchersOrNone) {
  JobSpec s = spec_of(1);
  s.inherited["MASTER_PORT"] = "23456";
  EXPECT_EQ(var(environments(s, {slots(host("a", 0), 1)})[0], "MASTER_PORT"), "23456");
  s.inherited["MASTER_PORT"] = "";
  EXPECT_EQ(var(environments(s, {slots(host("a", 0), 1)})[0], "MASTER_PORT"), "29500");
  s.master_port = 0;
  EXPECT_EQ(var(environments(s, {slots(host("a", 0), 1)})[0], "MASTER_PORT"), "<unset>");
}

TEST(PlannerEnvironment, ThreadsAndExports) {
  JobSpec s = spec_of(1);
  EXPECT_EQ(var(environments(s, {slots(host("a", 0), 1)}, 0)[0], "OMP_NUM_THREADS"), "<unset>")
      << "no cores bound: left alone";
  s.cpus_per_rank = 3;
  EXPECT_EQ(var(environments(s, {slots(host("a", 0), 1)}, 2)[0], "OMP_NUM_THREADS"), "3") << "-c wins";
  s.inherited = {{"OMP_NUM_THREADS", "7"}, {"FOO", "inherited"}};
  s.exports = {
      {"FOO", std::nullopt}, {"BAR", "1"}, {"MISSING", std::nullopt}, {"MASTER_PORT", "1234"}};
  const Env e = environments(s, {slots(host("a", 0), 1)}, 2)[0];
  EXPECT_EQ(var(e, "OMP_NUM_THREADS"), "<unset>") << "the user's value reaches the rank by inheritance";
  EXPECT_EQ(var(e, "FOO"), "inherited");
  EXPECT_EQ(var(e, "BAR"), "1");
  EXPECT_EQ(var(e, "MISSING"), "<unset>");
  EXPECT_EQ(var(e, "MASTER_PORT"), "1234") << "the rendezvous is the user's to set";
}

// An -x that would change a variable accrun sets for each rank would undo
// the plan (-x ACCRUN_RANK=5 gave every rank 5; -x CUDA_VISIBLE_DEVICES
// gave a one-GPU rank the inherited three): it is bad input.  The same
// value passes, and so does a bare -x of a variable accrun does not have;
// where the plan sets no device variable, the user's passes.
TEST(PlannerEnvironment, AnExportThatWouldChangeAVariableAccrunSetsPerRankIsRefused) {
  JobSpec s = spec_of(2, {{"GPU", q("1")}});
  s.inherited = {{"CUDA_VISIBLE_DEVICES", "2,5,7"}};
  std::vector<Candidate> c;
  std::vector<HostSlots> hosts = {slots(host("a", 8), 2)};
  Plan p = numbered(s, hosts, c);
  assign_devices(c[0], p.ranks);
  auto rank0 = [&](std::vector<std::pair<std::string, std::optional<std::string>>> exports) {
    s.exports = std::move(exports);
    RankEnvironment env(s, hosts[0], c[0], 0, false, "head", p.ranks);
    return env.for_rank(0, p.ranks[0], 0);
  };
  for (auto [name, value] : std::vector<std::pair<std::string, std::optional<std::string>>>{
           {"ACCRUN_RANK", "5"},
           {"RANK", "1"},
           {"WORLD_SIZE", "9"},
           {"CUDA_VISIBLE_DEVICES", std::nullopt},
           {"ACCRUN_GPU_IDS", "3"}}) {
    auto e = rank0({{name, value}});
    ASSERT_FALSE(e.is_ok()) << name;
    EXPECT_EQ(e.status().code(), Code::kInvalidArgument);
    EXPECT_NE(e.status().message().find("option '-x': " + name +
                                        " is set by accrun for each rank (here rank 0 gets " +
                                        name + "="),
              std::string::npos)
        << e.status().message();
  }
  auto same = rank0({{"WORLD_SIZE", "2"}, {"ACCRUN_RANK", "0"}, {"UNSET_HERE", std::nullopt}});
  ASSERT_TRUE(same.is_ok()) << same.status().message();
  EXPECT_EQ(var(*same, "UNSET_HERE"), "<unset>");
  JobSpec none = spec_of(1);
  none.inherited = {{"CUDA_VISIBLE_DEVICES", "2,5,7"}};
  none.exports = {{"CUDA_VISIBLE_DEVICES", std::nullopt}};
  EXPECT_EQ(var(environments(none, {slots(host("a", 8), 1)})[0], "CUDA_VISIBLE_DEVICES"), "2,5,7");
}

TEST(PlannerEnvironment, NodeVisibilityListsTheHostsJobDevicesOwnFirst) {
  JobSpec s = spec_of(3, {{"GPU", q("1")}});
  s.visible_devices = Visibility::kNode;
  std::vector<Env> env = environments(s, {slots(host("a", 8), 8)});
  EXPECT_EQ(var(env[1], "CUDA_VISIBLE_DEVICES"), "1,0,2");
  EXPECT_EQ(var(env[1], "ACCRUN_GPU_IDS"), "1");
}

TEST(PlannerEnvironment, SplitTpuHostsGiveEachRankAMeshPort) {
  JobSpec s = spec_of(2, {{"TPU", q("2")}});
  std::vector<Env> env = environments(s, {slots(host("t", 4, "TPU-V4", "google", "TPU"), 4)});
  EXPECT_EQ(var(env[0], "TPU_MESH_CONTROLLER_PORT"), "8476");
  EXPECT_EQ(var(env[1], "TPU_MESH_CONTROLLER_PORT"), "8477");
  EXPECT_EQ(var(env[1], "TPU_VISIBLE_CHIPS"), "2,3");
  EXPECT_EQ(var(env[1], "TPU_CHIPS_PER_HOST_BOUNDS"), "1,2,1") << "the provider is told the host has 4";
  s = spec_of(1, {{"TPU", q("4")}});
  env = environments(s, {slots(host("t", 4, "TPU-V4", "google", "TPU"), 4)});
  EXPECT_EQ(var(env[0], "TPU_MESH_CONTROLLER_PORT"), "<unset>") << "a whole host is not split";
}

TEST(PlannerEnvironment, TypeFallsBackToTheHostsFirstTypedDevice) {
  detect::Inventory inv = host("h", 0);
  detect::Accelerator untyped = host("x", 1).accelerators[0];
  untyped.type.clear();
  inv.accelerators.push_back(untyped);
  inv.accelerators.push_back(host("x", 1, "GAUDI3", "habana", "HPU").accelerators[0]);
  EXPECT_EQ(var(environments(spec_of(1), {slots(inv, 1)})[0], "ACCRUN_ACCELERATOR_TYPE"), "GAUDI3");
  EXPECT_EQ(var(environments(spec_of(1), {slots(host("h", 0), 1)})[0], "ACCRUN_ACCELERATOR_TYPE"), "<unset>");
}

}  // namespace
}  // namespace accrun::launcher::planner
