// The --detect JSON (docs/design.md §9): written, read back, and bad input.
#include <gtest/gtest.h>

#include "accrun/detect.hpp"

using namespace accrun;
using namespace accrun::detect;

namespace {

Inventory sample() {
  Inventory inv;
  inv.host = "node\"1";
  inv.cpus = 16;
  inv.numa_nodes = 2;
  inv.labels.pod = "slice-a";
  Accelerator a;
  a.resource = "GPU";
  a.vendor = "nvidia";
  a.id = 3;
  a.type = "H100";
  a.pci = "0000:3b:00.0";
  a.numa = 1;
  a.cpus = "8-15";
  a.uuid = "GPU-1";
  inv.accelerators.push_back(a);
  Accelerator l;
  l.resource = "TPU";
  l.vendor = "google";
  l.id = 0;
  l.type = "TPU-V4";
  l.logical = true;
  inv.accelerators.push_back(l);
  return inv;
}

}  // namespace

TEST(DetectJson, ExactShape) {
  Inventory inv;
  inv.host = "h";
  inv.cpus = 2;
  inv.numa_nodes = 1;
  Accelerator a;
  a.resource = "GPU";
  a.id = 0;
  a.type = "H100";
  a.logical = true;
  inv.accelerators.push_back(a);
  EXPECT_EQ(to_json({inv}),
            "{\"hosts\": [{\"host\": \"h\", \"cpus\": 2, \"numa_nodes\": 1, \"labels\": {\"pod\": null, "
            "\"zone\": null, \"region\": null, \"worker\": null}, \"accelerators\": [{\"resource\": \"GPU\", \"id\": 0, "
            "\"type\": \"H100\", \"pci\": null, \"numa\": null, \"cpus\": null, \"uuid\": null, "
            "\"logical\": true}]}]}\n");
}

TEST(DetectJson, RoundTrip) {
  std::vector<Inventory> hosts{sample(), sample()};
  hosts[1].host = "other";
  hosts[1].labels = {};
  hosts[0].pod_order = 3;  // a TPU host's detected worker id travels as labels.worker
  auto back = from_json(to_json(hosts));
  ASSERT_TRUE(back) << back.status().message();
  ASSERT_EQ(back->size(), 2u);
  const Inventory& b = (*back)[0];
  EXPECT_EQ(b.host, "node\"1");
  EXPECT_EQ(b.cpus, 16);
  EXPECT_EQ(b.numa_nodes, 2);
  EXPECT_EQ(b.labels.pod, "slice-a");
  EXPECT_FALSE(b.labels.zone);
  EXPECT_EQ(b.pod_order, 3);
  EXPECT_FALSE((*back)[1].pod_order);
  ASSERT_EQ(b.accelerators.size(), 2u);
  EXPECT_EQ(b.accelerators[0].id, 3);
  EXPECT_EQ(b.accelerators[0].vendor, "nvidia") << "the vendor follows from the type";
  EXPECT_EQ(b.accelerators[0].cpus, "8-15");
  EXPECT_EQ(b.accelerators[0].numa, 1);
  EXPECT_FALSE(b.accelerators[0].logical);
  EXPECT_EQ(b.accelerators[1].vendor, "google");
  EXPECT_TRUE(b.accelerators[1].logical);
  EXPECT_FALSE(b.accelerators[1].pci);
  EXPECT_EQ(to_json(*back), to_json(hosts));
}

TEST(DetectJson, BadInputNamesTheField) {
  EXPECT_FALSE(from_json(""));
  EXPECT_FALSE(from_json("[]"));
  EXPECT_FALSE(from_json("{\"hosts\": [1]}"));
  auto r = from_json("{\"hosts\": [{\"host\": \"h\", \"cpus\": \"x\", \"numa_nodes\": 1}]}");
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("hosts[0].cpus"), std::string::npos) << r.status().message();
  r = from_json("{\"hosts\": [{\"host\": \"h\", \"cpus\": 1, \"numa_nodes\": 1, \"accelerators\": "
                "[{\"resource\": \"FPGA\", \"id\": 0}]}]}");
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("FPGA"), std::string::npos);
  EXPECT_FALSE(from_json("{\"hosts\": []} trailing"));
  EXPECT_FALSE(from_json("{\"hosts\": [{\"host\": \"h\", \"cpus\": 1.5, \"numa_nodes\": 1}]}"));
  r = from_json("{\"hosts\": [{\"host\": \"h\", \"cpus\": 1, \"numa_nodes\": 1, \"labels\": {\"worker\": -1}}]}");
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("hosts[0].labels.worker"), std::string::npos) << r.status().message();
}

// Written and read by nlohmann-json: what it writes is valid JSON whatever
// the bytes of a name, and what it reads is bounded.
TEST(DetectJson, AlwaysValidAndBounded) {
  Inventory inv;
  inv.host = std::string("bad\xff\x01name");
  auto back = from_json(to_json({inv}));
  ASSERT_TRUE(back) << back.status().message() << " in " << to_json({inv});
  EXPECT_EQ((*back)[0].host, "bad\xEF\xBF\xBD\x01name") << "invalid UTF-8 becomes U+FFFD; control bytes survive";
  EXPECT_NE(to_json({inv}).find("\\u0001"), std::string::npos);
  // Nesting far deeper than the inventory's, and integers out of range.
  std::string deep = "{\"hosts\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_FALSE(from_json(deep));
  EXPECT_FALSE(from_json("{\"hosts\": [{\"host\": \"h\", \"cpus\": 99999999999, \"numa_nodes\": 1}]}"));
  EXPECT_FALSE(from_json("{\"hosts\": [{\"host\": \"h\", \"cpus\": 2.0, \"numa_nodes\": 1}]}"));
  auto r = from_json("{\"hosts\": [{\"host\": \"h\", \"cpus\": 1, \"numa_nodes\": 1, \"accelerators\": "
                     "[{\"resource\": \"GPU\", \"id\": 0, \"logical\": 1}]}]}");
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("hosts[0].accelerators[0].logical"), std::string::npos) << r.status().message();
  // Whitespace and member order are free on input.
  r = from_json(" {\n\"hosts\":[{\"numa_nodes\":1,\"cpus\":4,\"host\":\"h\"}]}\n");
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ((*r)[0].cpus, 4);
}

// The cores the JSON leaves out travel in the agents' hellos as text; a
// host across the network is bound from them (they were lost before, and
// --bind-to left every rank on another host unbound).
TEST(DetectCores, TextRoundTripAndBadInput) {
  std::vector<Core> cores{{0, {0, 4}}, {1, {1}}, {1, {2, 6, 10}}};
  std::string text = cores_to_text(cores);
  EXPECT_EQ(text, "0:0,4;1:1;1:2,6,10");
  auto back = cores_from_text(text);
  ASSERT_TRUE(back) << back.status().message();
  ASSERT_EQ(back->size(), 3u);
  EXPECT_EQ((*back)[2].numa, 1);
  EXPECT_EQ((*back)[2].pus, (std::vector<int>{2, 6, 10}));
  auto none = cores_from_text("");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
  for (const char* bad : {"0", "0:", "x:1", "0:1,", "0:1;;", "0:-1", "0:1;2"}) {
    auto r = cores_from_text(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_NE(r.status().message().find("core "), std::string::npos) << r.status().message();
    }
  }
}

TEST(DetectTable, ReadableAndSaysWhenEmpty) {
  std::string t = format_table({sample()});
  EXPECT_NE(t.find("RESOURCE"), std::string::npos);
  EXPECT_NE(t.find("0000:3b:00.0"), std::string::npos);
  EXPECT_NE(t.find("logical"), std::string::npos);
  EXPECT_NE(t.find("pod=slice-a"), std::string::npos);
  Inventory none;
  none.host = "h";
  EXPECT_NE(format_table({none}).find("no accelerators"), std::string::npos);
}
