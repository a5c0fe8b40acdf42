// Hostfiles, host lists and Slurm-style ranges (accrun-hostfile(5)).
#include <gtest/gtest.h>

#include "accrun/detect.hpp"
#include "accrun/hostfile.hpp"

namespace accrun::hostfiles {
namespace {

const std::string kDir = std::string(ACCRUN_FIXTURES_DIR) + "/hostfiles/";

std::vector<std::string> names(const std::vector<HostEntry>& v) {
  std::vector<std::string> out;
  for (const auto& e : v) out.push_back(e.name);
  return out;
}

std::vector<std::string> expand(const char* expr) {
  auto r = expand_hostnames(expr);
  EXPECT_TRUE(r.is_ok()) << expr << ": " << r.status().message();
  return r.is_ok() ? *r : std::vector<std::string>{};
}

std::string error_of(std::string_view text) {
  auto r = parse_hostfile(text, "hosts");
  EXPECT_FALSE(r.is_ok()) << text;
  return r.is_ok() ? "" : r.status().message();
}

TEST(HostRanges, ExpandsListsAndKeepsZeroPadding) {
  EXPECT_EQ(expand("node[01-04,07]"),
            (std::vector<std::string>{"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(expand("n[8-11]"), (std::vector<std::string>{"n8", "n9", "n10", "n11"}));
  EXPECT_EQ(expand("n[098-101]"), (std::vector<std::string>{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand("plain.example.com"), (std::vector<std::string>{"plain.example.com"}));
  EXPECT_EQ(expand("x[5]"), (std::vector<std::string>{"x5"}));
}

TEST(HostRanges, SeveralBracketsFirstVariesSlowest) {
  EXPECT_EQ(expand("rack[1-2]-gpu[1-3]"),
            (std::vector<std::string>{"rack1-gpu1", "rack1-gpu2", "rack1-gpu3", "rack2-gpu1",
                                      "rack2-gpu2", "rack2-gpu3"}));
}

TEST(HostRanges, MalformedRangesSayWhatIsWrong) {
  struct Case {
    const char* expr;
    const char* says;
  };
  for (const Case& c : {Case{"node[04-01]", "04 is more than 01"}, Case{"node[01-04", "without ']'"},
                        Case{"node01]", "without '['"}, Case{"node[]", "empty brackets"},
                        Case{"node[a-b]", "not a number"}, Case{"node[1,,2]", "empty item"},
                        Case{"node[[1]]", "nested"}, Case{"n[1-9999999]", "more than"}}) {
    auto r = expand_hostnames(c.expr);
    ASSERT_FALSE(r.is_ok()) << c.expr;
    EXPECT_NE(r.status().message().find("malformed host range"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << r.status().message();
  }
}

TEST(Hostfile, OpenMpiSyntaxWithCommentsAndBlankLines) {
  auto r = parse_hostfile("# cluster\n\nnode01 slots=4\n  node02   slots=2   # two\n\tnode03\n", "h");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ(names(*r), (std::vector<std::string>{"node01", "node02", "node03"}));
  EXPECT_EQ((*r)[0].slots, 4);
  EXPECT_EQ((*r)[1].slots, 2);
  EXPECT_FALSE((*r)[2].slots.has_value());
  EXPECT_EQ((*r)[1].origin, "h:4");
}

TEST(Hostfile, AcceleratorAndGroupKeys) {
  auto r = parse_hostfile(
      "g1 slots=8 gpus=8 accelerator_type=h100 pod=p1 zone=z region=r\n"
      "t1 resources=TPU:4,hpu=2 worker=3 pod=s\n"
      "t2 TPU=4 neuron_cores=2\n"
      "o1 max_slots=16 slots=4\n",
      "h");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const auto& g = (*r)[0];
  EXPECT_EQ(g.gpus, 8);
  ASSERT_EQ(g.resources.size(), 1u);
  EXPECT_EQ(g.resources[0].first, "GPU");
  EXPECT_EQ(g.resources[0].second, detect::Quantity::whole(8));
  EXPECT_EQ(g.accelerator_type, detect::canonical_type("h100"));
  EXPECT_EQ(g.labels.pod, "p1");
  EXPECT_EQ(g.labels.zone, "z");
  EXPECT_EQ(g.labels.region, "r");
  const auto& t = (*r)[1];
  ASSERT_EQ(t.resources.size(), 2u);
  EXPECT_EQ(t.resources[0].first, "TPU");
  EXPECT_EQ(t.resources[1].first, "HPU");
  EXPECT_EQ(t.resources[1].second, detect::Quantity::whole(2));
  EXPECT_EQ(t.pod_order, 3);
  const auto& t2 = (*r)[2];
  ASSERT_EQ(t2.resources.size(), 2u);
  EXPECT_EQ(t2.resources[1].first, "neuron_cores");
  EXPECT_EQ((*r)[3].slots, 4);
}

TEST(Hostfile, RangeLinesDeclareEveryHostAndNumberWorkers) {
  auto r = read_hostfile(kDir + "tpu-slice.hosts");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->size(), 8u);
  EXPECT_EQ((*r)[4].name, "tpu-b0");
  EXPECT_EQ((*r)[4].pod_order, 0);
  EXPECT_EQ((*r)[7].name, "tpu-b3");
  EXPECT_EQ((*r)[7].pod_order, 3);
  EXPECT_EQ((*r)[7].origin, kDir + "tpu-slice.hosts:6");
}

TEST(Hostfile, ErrorsNameFileLineAndSuggest) {
  auto r = read_hostfile(kDir + "bad-key.hosts");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), kDir + "bad-key.hosts:3: unknown key 'gpu' (did you mean 'gpus'?)");

  r = read_hostfile(kDir + "bad-number.hosts");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(),
            kDir + "bad-number.hosts:2: slots: 'eight' is not a whole number (e.g. slots=8)");

  r = read_hostfile(kDir + "duplicate.hosts");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), kDir + "duplicate.hosts:2: duplicate host 'node02' (first declared at " +
                                      kDir + "duplicate.hosts:1; give each host once)");

  r = read_hostfile(kDir + "bad-range.hosts");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("bad-range.hosts:1: malformed host range 'node[04-01]'"),
            std::string::npos)
      << r.status().message();
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);

  r = read_hostfile(kDir + "no-such-file");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("cannot read hostfile"), std::string::npos);
}

TEST(Hostfile, MoreBadInput) {
  EXPECT_EQ(error_of("n1 slots=0\n"), "hosts:1: slots: '0' must be at least 1 (e.g. slots=8)");
  EXPECT_EQ(error_of("n1 slots=4 slots=5\n"), "hosts:1: key 'slots' given twice on one line");
  EXPECT_EQ(error_of("n1 slot=4\n"), "hosts:1: unknown key 'slot' (did you mean 'slots'?)");
  EXPECT_NE(error_of("n1 gpus=2 resources=GPU:2\n").find("GPU is declared twice"), std::string::npos);
  EXPECT_NE(error_of("n1 gpus=1.5\n").find("hosts:1: gpus: '1.5' is not a whole number"), std::string::npos);
  EXPECT_NE(error_of("n1 TPU=0.5\n").find("a host has whole devices"), std::string::npos);
  EXPECT_NE(error_of("n1 resources=FOO:1\n").find("unknown resource 'FOO'"), std::string::npos);
  EXPECT_NE(error_of("n1 slots\n").find("hosts:1: 'slots' is not key=value"), std::string::npos);
  EXPECT_NE(error_of("slots=4\n").find("starts with the host name"), std::string::npos);
  EXPECT_NE(error_of("n1 pod=\n").find("key 'pod' has no value"), std::string::npos);
  EXPECT_NE(error_of("\n\nn1 worker=-1\n").find("hosts:3: worker:"), std::string::npos);
}

TEST(HostList, HostsSlotsAndRanges) {
  auto r = parse_host_list("a:2,node[1-3]:4,b");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(names(*r), (std::vector<std::string>{"a", "node1", "node2", "node3", "b"}));
  EXPECT_EQ((*r)[0].slots, 2);
  EXPECT_EQ((*r)[3].slots, 4);
  EXPECT_FALSE((*r)[4].slots.has_value());
  EXPECT_EQ((*r)[0].origin, "-H");
}

TEST(HostList, BadInput) {
  for (const char* bad : {"", "a,,b", "a:x", "a:0", "a,a", "n[2-1]"}) {
    auto r = parse_host_list(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().message().rfind("-H: ", 0), 0u) << r.status().message();
  }
}

TEST(ResourceList, BothSeparatorsAndCanonicalNames) {
  auto r = parse_resource_list("gpu=0.5,Neuron_Cores:2");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].first, "GPU");
  EXPECT_EQ((*r)[0].second.units(), 5000);
  EXPECT_EQ((*r)[1].first, "neuron_cores");
  EXPECT_FALSE(parse_resource_list("GPU=1,gpu=2").is_ok());
  EXPECT_FALSE(parse_resource_list("GPU").is_ok());
  EXPECT_FALSE(parse_resource_list("GPU=x").is_ok());
}

TEST(ClosestMatch, TyposAndPrefixes) {
  std::vector<std::string> c = {"--gpus-per-rank", "--num-gpus", "--pod-blocks", "--pod-level"};
  EXPECT_EQ(closest_match("--gpu-per-rank", c), "--gpus-per-rank");
  EXPECT_EQ(closest_match("--num-gpu", c), "--num-gpus");
  EXPECT_EQ(closest_match("--gpus", c), "--gpus-per-rank");
  EXPECT_FALSE(closest_match("--pod", c).has_value());  // ambiguous
  EXPECT_FALSE(closest_match("--frobnicate", c).has_value());
}

TEST(DeclaredInventory, TypeDecidesVendorAndDevicesAreNumbered) {
  auto r = parse_hostfile("m slots=8 gpus=2 accelerator_type=AMD-Instinct-MI300X-OAM pod=p worker=1\n"
                          "n gpus=3\nt TPU=4 accelerator_type=TPU-V4\nc slots=4\n",
                          "h");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  auto m = declared_inventory((*r)[0]);
  EXPECT_EQ(m.host, "m");
  ASSERT_EQ(m.accelerators.size(), 2u);
  EXPECT_EQ(m.accelerators[1].id, 1);
  EXPECT_EQ(m.accelerators[0].resource, "GPU");
  EXPECT_EQ(m.accelerators[0].type, detect::canonical_type("MI300X"));
  EXPECT_EQ(m.accelerators[0].vendor, detect::vendor_of_type(detect::canonical_type("MI300X")));
  EXPECT_EQ(m.labels.pod, "p");
  EXPECT_EQ(m.pod_order, 1);
  EXPECT_TRUE(m.cores.empty());
  auto n = declared_inventory((*r)[1]);
  ASSERT_EQ(n.accelerators.size(), 3u);
  EXPECT_EQ(n.accelerators[0].vendor, detect::default_vendor("GPU"));
  auto t = declared_inventory((*r)[2]);
  ASSERT_EQ(t.accelerators.size(), 4u);
  EXPECT_EQ(t.accelerators[0].resource, "TPU");
  EXPECT_EQ(t.accelerators[0].vendor, detect::default_vendor("TPU"));
  EXPECT_TRUE(declared_inventory((*r)[3]).accelerators.empty());
}

}  // namespace
}  // namespace accrun::hostfiles
