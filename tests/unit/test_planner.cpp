// The placement planner: invariants over a matrix of hosts × requests, a few
// golden plans, randomised requests, and every error path's message.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "accrun/detect.hpp"
#include "accrun/hostfile.hpp"
#include "accrun/plan.hpp"
#include "planner_fixtures.hpp"

namespace accrun::launcher {
namespace {

using detect::Quantity;

const std::string kDir = std::string(ACCRUN_FIXTURES_DIR) + "/hostfiles/";

using namespace planner_test;

std::vector<HostSlots> from_hostfile(const std::string& file) {
  auto entries = hostfiles::read_hostfile(kDir + file);
  EXPECT_TRUE(entries.is_ok()) << entries.status().message();
  std::vector<HostSlots> out;
  if (!entries) return out;
  for (const auto& e : *entries) out.push_back(slots(hostfiles::declared_inventory(e), e.slots, e.origin));
  return out;
}

const std::string& env(const RankPlan& r, const std::string& k) { return var(r.env, k); }

std::vector<int> cpus_of(const std::string& list) {
  std::vector<int> out;
  std::size_t i = 0;
  while (i < list.size()) {
    std::size_t comma = list.find(',', i);
    std::string part = list.substr(i, comma == std::string::npos ? std::string::npos : comma - i);
    std::size_t dash = part.find('-');
    int lo = std::stoi(part.substr(0, dash));
    int hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
    for (int c = lo; c <= hi; ++c) out.push_back(c);
    if (comma == std::string::npos) break;
    i = comma + 1;
  }
  return out;
}

const std::optional<std::string>& label(const detect::Inventory& inv, PodLevel level) {
  return level == PodLevel::kPod ? inv.labels.pod : level == PodLevel::kZone ? inv.labels.zone : inv.labels.region;
}

// Every invariant a plan must satisfy, whatever the request.
void check_invariants(const JobSpec& spec, const Plan& p) {
  ASSERT_EQ(p.ranks.size(), static_cast<std::size_t>(spec.np));
  std::map<int, std::vector<int>> by_host;
  for (std::size_t i = 0; i < p.ranks.size(); ++i) {
    const RankPlan& r = p.ranks[i];
    ASSERT_EQ(r.rank, static_cast<int>(i));
    ASSERT_GE(r.host, 0);
    ASSERT_LT(static_cast<std::size_t>(r.host), p.hosts.size());
    by_host[r.host].push_back(r.rank);
    EXPECT_EQ(env(r, "ACCRUN_RANK"), std::to_string(r.rank));
    EXPECT_EQ(env(r, "RANK"), std::to_string(r.rank));
    EXPECT_EQ(env(r, "ACCRUN_SIZE"), std::to_string(spec.np));
    EXPECT_EQ(env(r, "ACCRUN_NODE_RANK"), std::to_string(r.host));
    EXPECT_EQ(env(r, "ACCRUN_HOST"), p.hosts[static_cast<std::size_t>(r.host)].inventory.host);
    EXPECT_EQ(env(r, "MASTER_ADDR"), p.hosts[static_cast<std::size_t>(p.ranks[0].host)].inventory.host);
    EXPECT_EQ(env(r, "OMPI_COMM_WORLD_LOCAL_RANK"), std::to_string(r.local_rank));
  }
  // Every host in the plan got ranks; node ranks follow first ranks.
  ASSERT_EQ(by_host.size(), p.hosts.size());
  int last_first = -1;
  for (const auto& [h, ranks] : by_host) {
    EXPECT_GT(ranks.front(), last_first);
    last_first = ranks.front();
    const HostSlots& hs = p.hosts[static_cast<std::size_t>(h)];
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const RankPlan& r = p.ranks[static_cast<std::size_t>(ranks[i])];
      EXPECT_EQ(r.local_rank, static_cast<int>(i));
      EXPECT_EQ(env(r, "ACCRUN_LOCAL_SIZE"), std::to_string(ranks.size()));
    }
    if (hs.slots && !spec.oversubscribe) {
      EXPECT_LE(ranks.size(), static_cast<std::size_t>(*hs.slots));
    }
    if (spec.npernode > 0) {
      EXPECT_LE(ranks.size(), static_cast<std::size_t>(spec.npernode));
    }
    if (spec.accelerator_type) {
      bool match = false;
      for (const auto& a : hs.inventory.accelerators) {
        match = match || detect::type_matches(a.type, *spec.accelerator_type);  // the type or its family
      }
      EXPECT_TRUE(match) << hs.inventory.host;
    }
    // Devices: never over capacity, each rank exactly its request, fractions packed.
    for (const auto& [res, want] : spec.per_rank) {
      std::map<int, Quantity> used;
      int prev_dev = -1;
      for (int rank : ranks) {
        const RankPlan& r = p.ranks[static_cast<std::size_t>(rank)];
        Quantity got;
        std::set<int> ids;
        for (const auto& d : r.devices) {
          if (d.resource != res) continue;
          got = got + d.fraction;
          ids.insert(d.id);
          used[d.id] = used[d.id] + d.fraction;
          bool exists = false;
          for (const auto& a : hs.inventory.accelerators) exists = exists || (a.resource == res && a.id == d.id);
          EXPECT_TRUE(exists) << res << " " << d.id << " on " << hs.inventory.host;
          if (want.units() < Quantity::kScale) {
            EXPECT_GE(d.id, prev_dev) << "fractions not packed";
            if (d.id > prev_dev && prev_dev >= 0) {
              EXPECT_LT(Quantity::whole(1) - used[prev_dev], want) << "device " << prev_dev << " left with room";
            }
            prev_dev = d.id;
          } else {
            EXPECT_EQ(d.fraction, Quantity::whole(1));
          }
        }
        EXPECT_EQ(got, want) << "rank " << rank;
        if (want.units() >= Quantity::kScale) {
          EXPECT_EQ(ids.size(), static_cast<std::size_t>(want.whole_part()));
        }
        EXPECT_NE(env(r, "ACCRUN_" + std::string(res == "neuron_cores" ? "NEURON_CORES" : res) + "_IDS"), "<unset>");
      }
      for (const auto& [id, u] : used) EXPECT_LE(u, Quantity::whole(1)) << res << " " << id << " oversubscribed";
    }
  }
  // Pod blocks: every block inside one group.
  if (spec.pod_blocks > 0) {
    for (int start = 0; start < spec.np; start += spec.pod_blocks) {
      const auto& first = p.hosts[static_cast<std::size_t>(p.ranks[static_cast<std::size_t>(start)].host)].inventory;
      for (int r = start; r < std::min(spec.np, start + spec.pod_blocks); ++r) {
        const auto& inv = p.hosts[static_cast<std::size_t>(p.ranks[static_cast<std::size_t>(r)].host)].inventory;
        if (label(first, spec.pod_level)) {
          EXPECT_EQ(label(inv, spec.pod_level), label(first, spec.pod_level)) << "rank " << r;
        } else {
          EXPECT_EQ(inv.host, first.host) << "rank " << r;
        }
      }
    }
  }
}

Plan ok(const JobSpec& spec, const std::vector<HostSlots>& hosts) {
  auto r = plan(spec, hosts);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  if (!r) return {};
  check_invariants(spec, *r);
  return std::move(r).value();
}

std::string fails(const JobSpec& spec, const std::vector<HostSlots>& hosts) {
  auto r = plan(spec, hosts);
  EXPECT_FALSE(r.is_ok());
  if (r) return "";
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  return r.status().message();
}

// --- golden plans -----------------------------------------------------------

TEST(Planner, HalfGpusPackTwoRanksPerDevice) {
  // accrun --dry-run -n 4 --num-gpus 2 --gpus-per-rank 0.5
  Plan p = ok(spec_of(4, {{"GPU", q("0.5")}}), {slots(host("local", 2), std::nullopt, "local")});
  std::vector<std::string> seen;
  for (const auto& r : p.ranks) seen.push_back(env(r, "CUDA_VISIBLE_DEVICES"));
  EXPECT_EQ(seen, (std::vector<std::string>{"0", "0", "1", "1"}));
  EXPECT_EQ(env(p.ranks[3], "ACCRUN_GPU_IDS"), "1");
  EXPECT_EQ(env(p.ranks[3], "ACCRUN_GPU_FRACTION"), "0.5");
  EXPECT_EQ(env(p.ranks[0], "ACCRUN_ACCELERATOR_TYPE"), "H100");
}

// A rank holding devices of two resources hears each one's type (one
// ACCRUN_ACCELERATOR_TYPE cannot say both); a rank of one resource keeps
// the one variable.
TEST(Planner, EachResourcesTypeWhenARankHoldsSeveral) {
  detect::Inventory inv = host("h", 2, "H100");
  for (const auto& a : host("h", 2, "ASCEND910B", "huawei", "NPU").accelerators) inv.accelerators.push_back(a);
  Plan both = ok(spec_of(2, {{"GPU", q("1")}, {"NPU", q("1")}}), {slots(inv, std::nullopt)});
  for (const auto& r : both.ranks) {
    EXPECT_EQ(env(r, "ACCRUN_GPU_TYPE"), "H100");
    EXPECT_EQ(env(r, "ACCRUN_NPU_TYPE"), "ASCEND910B");
  }
  Plan one = ok(spec_of(2, {{"NPU", q("1")}}), {slots(inv, std::nullopt)});
  EXPECT_EQ(env(one.ranks[0], "ACCRUN_ACCELERATOR_TYPE"), "ASCEND910B");
  EXPECT_EQ(env(one.ranks[0], "ACCRUN_NPU_TYPE"), "<unset>");
  EXPECT_EQ(env(one.ranks[0], "ACCRUN_GPU_TYPE"), "<unset>");
}

TEST(Planner, ThirdsNeverDriftOntoAFullDevice) {
  Plan p = ok(spec_of(6, {{"GPU", q("0.3")}}), {slots(host("h", 2), std::nullopt)});
  std::vector<int> ids;
  for (const auto& r : p.ranks) ids.push_back(r.devices.at(0).id);
  EXPECT_EQ(ids, (std::vector<int>{0, 0, 0, 1, 1, 1}));
}

TEST(Planner, WholeRequestsTakeConsecutiveDevices) {
  Plan p = ok(spec_of(4, {{"GPU", q("2")}}), {slots(host("h", 8), 8)});
  EXPECT_EQ(env(p.ranks[0], "CUDA_VISIBLE_DEVICES"), "0,1");
  EXPECT_EQ(env(p.ranks[3], "CUDA_VISIBLE_DEVICES"), "6,7");
  EXPECT_EQ(env(p.ranks[3], "ACCRUN_GPU_IDS"), "6,7");
  EXPECT_EQ(env(p.ranks[3], "ACCRUN_GPU_FRACTION"), "<unset>");
}

TEST(Planner, KeepsTheUsersMasterPort) {
  JobSpec s = spec_of(2);
  s.inherited["MASTER_PORT"] = "23456";
  Plan p = ok(s, {slots(host("a", 0), 4)});
  EXPECT_EQ(env(p.ranks[0], "MASTER_PORT"), "23456");
  EXPECT_EQ(env(p.ranks[1], "MASTER_PORT"), "23456");
  s.inherited["MASTER_PORT"] = "";  // set but empty: accrun's own
  EXPECT_EQ(env(ok(s, {slots(host("a", 0), 4)}).ranks[1], "MASTER_PORT"), "29500");
}

TEST(Planner, FillsHostsInOrderUpToSlots) {
  Plan p = ok(spec_of(6), {slots(host("a", 0), 4), slots(host("b", 0), 4)});
  for (int r = 0; r < 4; ++r) EXPECT_EQ(p.ranks[static_cast<std::size_t>(r)].host, 0);
  EXPECT_EQ(p.ranks[4].host, 1);
  EXPECT_EQ(env(p.ranks[5], "LOCAL_RANK"), "1");
  EXPECT_EQ(env(p.ranks[5], "LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(env(p.ranks[5], "MASTER_ADDR"), "a");
  EXPECT_EQ(env(p.ranks[5], "MASTER_PORT"), "29500");
  EXPECT_EQ(env(p.ranks[0], "ACCRUN_OVERSUBSCRIBED"), "0");
  EXPECT_FALSE(p.oversubscribed);
  // A rank that requested nothing keeps the vendor variables as accrun found them.
  EXPECT_EQ(env(p.ranks[0], "CUDA_VISIBLE_DEVICES"), "<unset>");
}

TEST(Planner, NpernodeSpreadsAcrossHosts) {
  JobSpec s = spec_of(4);
  s.npernode = 2;
  Plan p = ok(s, {slots(host("a", 0), 8), slots(host("b", 0), 8)});
  EXPECT_EQ(p.ranks[1].host, 0);
  EXPECT_EQ(p.ranks[2].host, 1);
}

TEST(Planner, LocalHostWithoutHostfileTakesAnyNumberAndSaysOversubscribed) {
  detect::Inventory inv = with_cores(host("local", 0), 1, 2);  // 4 PUs
  Plan p = ok(spec_of(8), {slots(inv, std::nullopt, "local")});
  EXPECT_TRUE(p.oversubscribed);
  EXPECT_EQ(env(p.ranks[7], "ACCRUN_OVERSUBSCRIBED"), "1");
  Plan small = ok(spec_of(2), {slots(inv, std::nullopt, "local")});
  EXPECT_EQ(env(small.ranks[1], "ACCRUN_OVERSUBSCRIBED"), "0");
}

TEST(Planner, SlotsAreALimitUnlessOversubscribe) {
  std::vector<HostSlots> hosts = {slots(host("a", 0), 2, "hosts:1"), slots(host("b", 0), 2, "hosts:2")};
  std::string msg = fails(spec_of(5), hosts);
  EXPECT_NE(msg.find("cannot place rank 4 of -n 5: the hosts have 4 slots (a: 2, b: 2)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--oversubscribe"), std::string::npos) << msg;
  JobSpec s = spec_of(7);
  s.oversubscribe = true;
  Plan p = ok(s, hosts);
  int on_a = 0;
  for (const auto& r : p.ranks) on_a += r.host == 0;
  EXPECT_EQ(on_a, 4);  // 2 slots, then round-robin: 4 on a, 3 on b
  EXPECT_TRUE(p.oversubscribed);
  EXPECT_EQ(env(p.ranks[0], "ACCRUN_OVERSUBSCRIBED"), "1");
}

TEST(Planner, DevicesAreNeverOversubscribedAndTheMessageNamesWhatRanOut) {
  std::string msg = fails(spec_of(5, {{"GPU", q("0.5")}}), {slots(host("local", 2), std::nullopt, "local")});
  EXPECT_NE(msg.find("cannot place rank 4 of -n 5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'local'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ran out at GPU 1"), std::string::npos) << msg;
  JobSpec s = spec_of(3, {{"GPU", q("1")}});
  s.oversubscribe = true;
  msg = fails(s, {slots(host("a", 2), 8, "hosts:1")});
  EXPECT_NE(msg.find("'a' (hosts:1), ran out at GPU 1"), std::string::npos) << msg;
  msg = fails(spec_of(1, {{"TPU", q("4")}}), {slots(host("a", 2), 8)});
  EXPECT_NE(msg.find("no host has the devices asked for (TPU=4 per rank)"), std::string::npos) << msg;
}

TEST(Planner, RequestRulesAreCheckedAgain) {
  EXPECT_NE(fails(spec_of(1, {{"TPU", q("3")}}), {slots(host("a", 4), 4)}).find("1, 2, 4 or 8"), std::string::npos);
  EXPECT_NE(fails(spec_of(1, {{"GPU", q("1.5")}}), {slots(host("a", 4), 4)}).find("whole"), std::string::npos);
  EXPECT_NE(fails(spec_of(0), {slots(host("a", 4), 4)}).find("-n must be at least 1"), std::string::npos);
  EXPECT_NE(fails(spec_of(1), {}).find("no hosts"), std::string::npos);
  EXPECT_NE(fails(spec_of(100'000'000), {slots(host("a", 0), std::nullopt)}).find("more ranks than accrun plans"),
            std::string::npos);
}

TEST(Planner, AcceleratorTypeIsAConstraint) {
  auto hosts = from_hostfile("mixed-types.hosts");
  ASSERT_EQ(hosts.size(), 5u);
  JobSpec s = spec_of(8, {{"GPU", q("1")}});
  s.accelerator_type = "amd-instinct-mi300x-oam";
  Plan p = ok(s, hosts);
  ASSERT_EQ(p.hosts.size(), 1u);
  EXPECT_EQ(p.hosts[0].inventory.host, "mi300-1");
  EXPECT_EQ(env(p.ranks[2], "ACCRUN_ACCELERATOR_TYPE"), detect::canonical_type("MI300X"));
  EXPECT_EQ(env(p.ranks[2], "CUDA_VISIBLE_DEVICES"), "<unset>");
  EXPECT_NE(env(p.ranks[2], "ROCR_VISIBLE_DEVICES"), "<unset>");
  s.accelerator_type = "h100";
  p = ok(s, hosts);
  EXPECT_EQ(p.hosts.size(), 1u);
  s.accelerator_type = "A100";
  std::string msg = fails(s, hosts);
  EXPECT_NE(msg.find("--accelerator-type A100: no host has accelerators of type A100"), std::string::npos) << msg;
  EXPECT_NE(msg.find("H100 (h100-1 and 1 more)"), std::string::npos) << msg;
  EXPECT_NE(msg.find(detect::canonical_type("MI300X") + " (mi300-1)"), std::string::npos) << msg;
}

// Types carry their variant; a request without it takes every variant.
TEST(Planner, AcceleratorTypeFamiliesAndVariants) {
  std::vector<HostSlots> hosts = {slots(host("a40", 2, "A100-40G"), 2), slots(host("a80", 2, "A100-80G"), 2),
                                  slots(host("trn2", 4, "TRAINIUM2", "aws", "neuron_cores"), 4),
                                  slots(host("inf2", 4, "INFERENTIA2", "aws", "neuron_cores"), 4)};
  JobSpec s = spec_of(4, {{"GPU", q("1")}});
  s.accelerator_type = "A100";
  Plan p = ok(s, hosts);
  ASSERT_EQ(p.hosts.size(), 2u) << "A100 is met by A100-40G and A100-80G";
  EXPECT_EQ(env(p.ranks[0], "ACCRUN_ACCELERATOR_TYPE"), "A100-40G");
  EXPECT_EQ(env(p.ranks[3], "ACCRUN_ACCELERATOR_TYPE"), "A100-80G");
  s = spec_of(2, {{"GPU", q("1")}});
  s.accelerator_type = "A100-80G";
  p = ok(s, hosts);
  ASSERT_EQ(p.hosts.size(), 1u);
  EXPECT_EQ(p.hosts[0].inventory.host, "a80") << "an A100-40G host does not satisfy A100-80G";
  s = spec_of(3, {{"GPU", q("1")}});
  s.accelerator_type = "A100-80G";
  EXPECT_NE(fails(s, hosts).find("cannot place rank 2"), std::string::npos) << fails(s, hosts);
  // Ray's aws-neuron-core: every Neuron host, Trainium2 and Inferentia2 included.
  s = spec_of(8, {{"neuron_cores", q("1")}});
  s.accelerator_type = "aws-neuron-core";
  p = ok(s, hosts);
  EXPECT_EQ(p.hosts.size(), 2u);
  // Unknown names are kept as written and never collide.
  std::vector<HostSlots> gcp = {slots(host("hi", 8, detect::canonical_type("a3-highgpu-8g")), 8)};
  s = spec_of(1, {{"GPU", q("1")}});
  s.accelerator_type = "a3-megagpu-8g";
  std::string msg = fails(s, gcp);
  EXPECT_NE(msg.find("no host has accelerators of type a3-megagpu-8g; types here: a3-highgpu-8g (hi)"),
            std::string::npos)
      << msg;
  s.accelerator_type = "A3-HIGHGPU-8G";
  EXPECT_EQ(ok(s, gcp).ranks.size(), 1u);
  // A host of the family with no known variant is not proven to be the variant.
  std::vector<HostSlots> plain = {slots(host("a", 2, "A100"), 2)};
  s.accelerator_type = "A100-80G";
  msg = fails(s, plain);
  EXPECT_NE(msg.find("A100 does not say its variant"), std::string::npos) << msg;
}

TEST(Planner, PodBlocksStayInsideOnePodWhateverTheOrder) {
  for (const char* file : {"two-pods.hosts", "two-pods-interleaved.hosts"}) {
    auto hosts = from_hostfile(file);
    JobSpec s = spec_of(16, {{"GPU", q("1")}});
    s.pod_blocks = 8;
    Plan p = ok(s, hosts);  // check_invariants verifies each block is in one pod
    EXPECT_EQ(env(p.ranks[0], "ACCRUN_POD"), "nvl-a") << file;
    EXPECT_EQ(env(p.ranks[7], "ACCRUN_POD"), "nvl-a") << file;
    EXPECT_EQ(env(p.ranks[8], "ACCRUN_POD"), "nvl-b") << file;
    EXPECT_EQ(p.hosts[1].inventory.host, "gpu-a2") << file;  // node ranks follow the blocks
    s.pod_blocks = 16;
    std::string msg = fails(s, hosts);
    EXPECT_NE(msg.find("--pod-blocks 16: block of ranks 0-15 fits in no pod group: the largest, pod 'nvl-a' "
                       "(2 hosts), holds 8 ranks and the block needs 16"),
              std::string::npos)
        << msg;
  }
}

TEST(Planner, PodLevelZoneAndUnlabelledHosts) {
  auto hosts = from_hostfile("two-pods.hosts");
  JobSpec s = spec_of(16);
  s.pod_blocks = 16;
  s.pod_level = PodLevel::kZone;
  Plan p = ok(s, hosts);
  EXPECT_EQ(env(p.ranks[15], "ACCRUN_ZONE"), "z1");
  // Hosts without a label are groups of their own.
  std::vector<HostSlots> bare = {slots(host("x", 0), 4), slots(host("y", 0), 4)};
  s = spec_of(8);
  s.pod_blocks = 4;
  p = ok(s, bare);
  EXPECT_EQ(env(p.ranks[3], "ACCRUN_POD"), "<unset>");
  s.pod_blocks = 5;
  EXPECT_NE(fails(s, bare).find("the largest, host x (1 host), holds 4 ranks"), std::string::npos);
}

TEST(Planner, SliceHostsFollowWorkerOrder) {
  auto hosts = from_hostfile("tpu-slice.hosts");
  JobSpec s = spec_of(32, {{"TPU", q("1")}});
  s.pod_blocks = 16;
  Plan p = ok(s, hosts);
  for (int w = 0; w < 4; ++w) {
    EXPECT_EQ(p.hosts[static_cast<std::size_t>(p.ranks[static_cast<std::size_t>(4 * w)].host)].inventory.host,
              "tpu-w" + std::to_string(w));
  }
  EXPECT_EQ(env(p.ranks[16], "ACCRUN_POD"), "v4-b");
  // Chips of a host split between ranks: each process its own mesh port.
  EXPECT_NE(env(p.ranks[0], "TPU_MESH_CONTROLLER_PORT"), env(p.ranks[1], "TPU_MESH_CONTROLLER_PORT"));
  EXPECT_NE(env(p.ranks[0], "TPU_VISIBLE_CHIPS"), "<unset>");
  JobSpec whole = spec_of(4, {{"TPU", q("4")}});
  whole.pod_blocks = 4;
  p = ok(whole, hosts);
  EXPECT_EQ(env(p.ranks[0], "TPU_MESH_CONTROLLER_PORT"), "<unset>");
  EXPECT_EQ(p.hosts[0].inventory.host, "tpu-w0");
}

TEST(Planner, OversubscribedBlocksFillSlotsFirstThenSpread) {
  std::vector<HostSlots> hosts = {slots(host("a1", 0), 2), slots(host("a2", 0), 2), slots(host("b1", 0), 2)};
  hosts[0].inventory.labels.pod = "a";
  hosts[1].inventory.labels.pod = "a";
  hosts[2].inventory.labels.pod = "b";
  JobSpec s = spec_of(12);
  s.pod_blocks = 6;
  s.oversubscribe = true;
  Plan p = ok(s, hosts);
  std::map<std::string, int> per_host;
  for (const auto& r : p.ranks) per_host[env(r, "ACCRUN_HOST")]++;
  // Block 0 fits no pod within slots: spread 3+3 over pod a; block 1 then
  // goes to the first pod that holds it.
  EXPECT_EQ(per_host["a1"] + per_host["a2"] + per_host["b1"], 12);
  EXPECT_GE(per_host["a1"], 3);
  EXPECT_GE(per_host["a2"], 3);
  EXPECT_TRUE(p.oversubscribed);
}

TEST(Planner, LaterBlocksFindRoomElsewhere) {
  // Pod a holds 6, pod b 8: blocks of 4 → a, b, b; the last a slot pair stays free.
  std::vector<HostSlots> hosts = {slots(host("a1", 0), 6), slots(host("b1", 0), 8)};
  hosts[0].inventory.labels.pod = "a";
  hosts[1].inventory.labels.pod = "b";
  JobSpec s = spec_of(12);
  s.pod_blocks = 4;
  Plan p = ok(s, hosts);
  EXPECT_EQ(p.ranks[4].host, 1);
  s.np = 16;
  std::string msg = fails(s, hosts);
  EXPECT_NE(msg.find("earlier blocks filled the groups; the most room left is 2 ranks in pod 'a'"),
            std::string::npos)
      << msg;
}

// --- binding ----------------------------------------------------------------

TEST(Binding, AcceleratorCpusAreLocalAndNotShared) {
  // 2 NUMA nodes × 4 cores, GPUs 0-1 on node 0, 2-3 on node 1.
  detect::Inventory inv = with_cores(host("h", 4), 2, 4);
  Plan p = ok(spec_of(4, {{"GPU", q("1")}}), {slots(inv, 8)});
  std::set<int> all;
  for (const auto& r : p.ranks) {
    auto cpus = cpus_of(r.cpus);
    ASSERT_FALSE(cpus.empty());
    const int node = r.devices[0].id / 2;
    for (int c : cpus) {
      EXPECT_EQ((c % 8) / 4, node) << "rank " << r.rank << " cpu " << c;
      EXPECT_TRUE(all.insert(c).second) << "cpu " << c << " shared";
    }
    EXPECT_EQ(env(r, "OMP_NUM_THREADS"), "2");
  }
  EXPECT_EQ(p.ranks[0].cpus, "0-1,8-9");
}

TEST(Binding, CoresPerRankAndPolicies) {
  detect::Inventory inv = with_cores(host("h", 0), 2, 4);
  JobSpec s = spec_of(3);
  s.cpus_per_rank = 2;
  Plan p = ok(s, {slots(inv, 8)});
  EXPECT_EQ(p.ranks[0].cpus, "0-1,8-9");
  EXPECT_EQ(p.ranks[2].cpus, "4-5,12-13");
  EXPECT_EQ(env(p.ranks[2], "OMP_NUM_THREADS"), "2");
  s.bind_to = BindTo::kNuma;
  p = ok(s, {slots(inv, 8)});
  EXPECT_EQ(p.ranks[1].cpus, "4-7,12-15");
  s.bind_to = BindTo::kNone;
  s.cpus_per_rank = 0;
  p = ok(s, {slots(inv, 8)});
  EXPECT_EQ(p.ranks[0].cpus, "");
  EXPECT_EQ(env(p.ranks[0], "OMP_NUM_THREADS"), "<unset>");
  s.bind_to = BindTo::kCore;
  p = ok(s, {slots(inv, 8)});
  EXPECT_EQ(p.ranks[1].cpus, "1,9");
  // Topology unknown: no CPUs, whatever the policy.
  p = ok(s, {slots(host("h", 0), 8)});
  EXPECT_EQ(p.ranks[1].cpus, "");
}

TEST(Binding, UserThreadsWin) {
  detect::Inventory inv = with_cores(host("h", 0), 1, 4);
  JobSpec s = spec_of(2);
  s.cpus_per_rank = 2;
  s.inherited = {{"OMP_NUM_THREADS", "7"}, {"FOO", "inherited"}};
  s.exports = {{"FOO", std::nullopt}, {"BAR", "1"}, {"MISSING", std::nullopt}};
  Plan p = ok(s, {slots(inv, 8)});
  EXPECT_EQ(env(p.ranks[0], "OMP_NUM_THREADS"), "<unset>");  // inherited by the rank, not set by accrun
  EXPECT_EQ(env(p.ranks[0], "FOO"), "inherited");
  EXPECT_EQ(env(p.ranks[0], "BAR"), "1");
  EXPECT_EQ(env(p.ranks[0], "MISSING"), "<unset>");
  s.inherited.clear();
  s.exports = {{"OMP_NUM_THREADS", "3"}};
  p = ok(s, {slots(inv, 8)});
  EXPECT_EQ(env(p.ranks[1], "OMP_NUM_THREADS"), "3");
}

// --- visibility ---------------------------------------------------------------

TEST(Visibility, NodeListsTheHostsJobDevicesOwnFirst) {
  JobSpec s = spec_of(4, {{"GPU", q("1")}});
  s.visible_devices = Visibility::kNode;
  Plan p = ok(s, {slots(host("h", 8), 8)});
  EXPECT_EQ(env(p.ranks[0], "CUDA_VISIBLE_DEVICES"), "0,1,2,3");
  EXPECT_EQ(env(p.ranks[2], "CUDA_VISIBLE_DEVICES"), "2,0,1,3");
  EXPECT_EQ(env(p.ranks[2], "ACCRUN_GPU_IDS"), "2");
}

// --- randomised -------------------------------------------------------------

TEST(PlannerProperty, RandomRequestsKeepEveryInvariant) {
  std::mt19937 rng(12345);
  const std::vector<const char*> fractions = {"0.25", "0.3", "0.5", "1", "2", "0.1", "4"};
  int placed = 0;
  for (int iter = 0; iter < 400; ++iter) {
    std::vector<HostSlots> hosts;
    const int nh = 1 + static_cast<int>(rng() % 6);
    long long slot_total = 0;
    for (int h = 0; h < nh; ++h) {
      detect::Inventory inv = host("h" + std::to_string(h), static_cast<int>(rng() % 9), h % 2 ? "A100" : "H100");
      if (rng() % 2) inv = with_cores(std::move(inv), 1 + static_cast<int>(rng() % 2), 2 + static_cast<int>(rng() % 3));
      if (rng() % 3) inv.labels.pod = "p" + std::to_string(rng() % 3);
      const int sl = 1 + static_cast<int>(rng() % 10);
      slot_total += sl;
      hosts.push_back(slots(std::move(inv), sl));
    }
    JobSpec s = spec_of(1 + static_cast<int>(rng() % 24));
    if (rng() % 4) s.per_rank = {{"GPU", q(fractions[rng() % fractions.size()])}};
    if (rng() % 4 == 0) s.pod_blocks = 1 + static_cast<int>(rng() % 6);
    if (rng() % 5 == 0) s.accelerator_type = "A100";
    if (rng() % 5 == 0) s.npernode = 1 + static_cast<int>(rng() % 4);
    s.oversubscribe = rng() % 4 == 0;
    if (rng() % 3 == 0) s.visible_devices = Visibility::kNode;
    auto r = plan(s, hosts);
    if (r) {
      ++placed;
      check_invariants(s, *r);
    } else {
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
      EXPECT_FALSE(r.status().message().empty());
      // Without constraints beyond slots, a job that fits must be placed.
      if (s.per_rank.empty() && !s.pod_blocks && !s.accelerator_type && !s.npernode) {
        EXPECT_GT(s.np, slot_total) << r.status().message();
      }
    }
    if (HasFatalFailure() || HasFailure()) {
      ADD_FAILURE() << "iteration " << iter;
      return;
    }
  }
  EXPECT_GT(placed, 100);
}

// --- output -----------------------------------------------------------------

TEST(PlanOutput, JsonAndTable) {
  JobSpec s = spec_of(2, {{"GPU", q("0.5")}});
  s.exports = {{"QUOTE", "a\"b\\c"}};
  Plan p = ok(s, {slots(with_cores(host("h", 1), 1, 2), std::nullopt)});
  const std::string j = plan_to_json(p);
  EXPECT_EQ(j.rfind("{\"ranks\": [", 0), 0u);
  EXPECT_NE(j.find("{\"rank\": 1, \"host\": \"h\", \"cpus\": \"1,3\", \"accelerators\": "
                   "[{\"resource\": \"GPU\", \"id\": 0, \"fraction\": 0.5}], \"env\": {"),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("\"QUOTE\": \"a\\\"b\\\\c\""), std::string::npos);
  const std::string t = format_plan_table(p);
  EXPECT_NE(t.find("RANK"), std::string::npos);
  EXPECT_NE(t.find("GPU 0 (0.5)"), std::string::npos) << t;
  EXPECT_NE(t.find("2 ranks on 1 host"), std::string::npos) << t;
}

}  // namespace
}  // namespace accrun::launcher
