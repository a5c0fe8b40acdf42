// Detection against fake sysfs roots (one per vendor, with decoys), hwloc XML
// topologies and the test-built fake NVML: what the host has, visible-device
// restriction, logical overrides and labels.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "accrun/detect.hpp"

using namespace accrun;
using namespace accrun::detect;

namespace {

const std::string kSysfs = std::string(ACCRUN_FIXTURES_DIR) + "/sysfs/";
const std::string kXml = std::string(ACCRUN_FIXTURES_DIR) + "/hwloc/";

DetectConfig fixture(const std::string& name, Env env = {}) {
  DetectConfig c;
  c.sysfs_root = kSysfs + name;
  c.hostname = "node0";
  c.nvml_library = "";  // hermetic: never the host's NVML
  c.environment = std::move(env);
  return c;
}

Inventory detect_ok(const DetectConfig& c) {
  auto inv = detect_host(c);
  EXPECT_TRUE(inv) << inv.status().message();
  return inv ? std::move(*inv) : Inventory{};
}

std::vector<int> ids_of(const Inventory& inv, const std::string& resource = "") {
  std::vector<int> out;
  for (const auto& a : inv.accelerators) {
    if (resource.empty() || a.resource == resource) out.push_back(a.id);
  }
  return out;
}

struct VendorCase {
  const char* root;
  const char* resource;
  const char* vendor;
  const char* type;
  int count;
  const char* first_pci;  // the device with id 0; nullptr when not located
  // Whether each accelerator has its PCI function, NUMA node and CPUs.
  // Neuron cores on a multi-NUMA Trainium host do not: the driver's device
  // numbers are not in bus order and its class devices do not link to PCI.
  bool located = true;
};

// Names the case in test output (gtest would print the struct's bytes).
void PrintTo(const VendorCase& c, std::ostream* os) { *os << c.root; }

class VendorFixture : public ::testing::TestWithParam<VendorCase> {};

}  // namespace

TEST_P(VendorFixture, ReportsExactlyItsAccelerators) {
  const VendorCase& v = GetParam();
  Inventory inv = detect_ok(fixture(v.root));
  EXPECT_EQ(inv.host, "node0");
  ASSERT_EQ(static_cast<int>(inv.accelerators.size()), v.count) << to_json({inv});
  for (const auto& a : inv.accelerators) {
    EXPECT_EQ(a.resource, v.resource);
    EXPECT_EQ(a.vendor, v.vendor);
    EXPECT_EQ(a.type, v.type);
    EXPECT_FALSE(a.logical);
    if (!v.located) {
      EXPECT_FALSE(a.pci) << "no guessed PCI function";
      EXPECT_FALSE(a.numa) << "no guessed NUMA node";
      EXPECT_FALSE(a.cpus);
      continue;
    }
    ASSERT_TRUE(a.pci);
    ASSERT_TRUE(a.numa);
    ASSERT_TRUE(a.cpus);
    // The fixtures put the first half of the devices on NUMA node 0 (CPUs
    // 0-7) and the rest on node 1 (8-15); TPU hosts have one node.
    EXPECT_EQ(*a.cpus, *a.numa == 0 ? (std::string(v.resource) == "TPU" ? "0-15" : "0-7") : "8-15");
  }
  std::vector<int> ids = ids_of(inv);
  std::vector<int> want(static_cast<size_t>(v.count));
  for (int i = 0; i < v.count; ++i) want[static_cast<size_t>(i)] = i;
  EXPECT_EQ(ids, want);
  if (v.located) {
    EXPECT_EQ(*inv.accelerators.front().pci, v.first_pci);
  }
  EXPECT_FALSE(inv.cores.empty()) << "the real host's cores";
  EXPECT_FALSE(inv.topology_from_xml);
}

INSTANTIATE_TEST_SUITE_P(
    Vendors, VendorFixture,
    ::testing::Values(VendorCase{"nvidia-8xh100", "GPU", "nvidia", "H100-SXM", 8, "0000:18:00.0"},
                      // ROCr order is KFD node order: node 2 is the GPU on bus 0x22.
                      VendorCase{"amd-8xmi300x", "GPU", "amd", "MI300X", 8, "0000:22:00.0"},
                      VendorCase{"intel-4xmax1550", "GPU", "intel", "MAX-1550", 4, "0000:29:00.0"},
                      VendorCase{"neuron-trn1", "neuron_cores", "aws", "TRAINIUM1", 8, nullptr, false},
                      VendorCase{"tpu-v4", "TPU", "google", "TPU-V4", 4, "0000:00:04.0"},
                      // Module 0 is the third Gaudi on the bus.
                      VendorCase{"gaudi2", "HPU", "habana", "GAUDI2", 8, "0000:53:00.0"},
                      VendorCase{"ascend-910b", "NPU", "huawei", "ASCEND910B", 8, "0000:c1:00.0"}),
    [](const auto& info) {
      std::string n = info.param.root;
      std::replace(n.begin(), n.end(), '-', '_');
      return n;
    });

TEST(DetectFixtures, NumaNodesFollowTheDevices) {
  Inventory inv = detect_ok(fixture("nvidia-8xh100"));
  ASSERT_EQ(inv.accelerators.size(), 8u);
  for (const auto& a : inv.accelerators) EXPECT_EQ(*a.numa, a.id < 4 ? 0 : 1) << a.id;
  EXPECT_EQ(*inv.accelerators[0].uuid, "GPU-00000000-1111-2222-3333-444455556666");
}

TEST(DetectFixtures, DecoysAreNotAccelerators) {
  Inventory inv = detect_ok(fixture("decoys"));
  EXPECT_TRUE(inv.accelerators.empty()) << to_json({inv});
  EXPECT_GT(inv.cpus, 0);
  EXPECT_GE(inv.numa_nodes, 1);
}

TEST(DetectFixtures, NeuronCoresFromCoreCountAndLogicalConfig) {
  // Trainium2: core_count says 8 physical cores per device; the runtime's
  // default grouping (2 per logical core) makes 4 ids per device.
  Inventory inv = detect_ok(fixture("neuron-trn2"));
  ASSERT_EQ(inv.accelerators.size(), 8u) << to_json({inv});
  for (const auto& a : inv.accelerators) {
    EXPECT_EQ(a.type, "TRAINIUM2");
    EXPECT_FALSE(a.pci) << "two devices: which function is neuron0 is not known";
    ASSERT_TRUE(a.numa) << "both devices on one node: the node is known";
    EXPECT_EQ(*a.numa, 1);
    EXPECT_EQ(*a.cpus, "8-15");
  }
  EXPECT_EQ(detect_ok(fixture("neuron-trn2", {{"NEURON_LOGICAL_NC_CONFIG", "1"}})).accelerators.size(), 16u);
  EXPECT_FALSE(detect_host(fixture("neuron-trn2", {{"NEURON_LOGICAL_NC_CONFIG", "3"}})));
  // Trainium1 ignores the grouping (it has none) and reads core_count.
  EXPECT_EQ(detect_ok(fixture("neuron-trn1", {{"NEURON_LOGICAL_NC_CONFIG", "2"}})).accelerators.size(), 8u);
}

TEST(DetectFixtures, NeuronSingleDeviceWithoutCoreCount) {
  // core_count is readable by root only: without it Inferentia2 has its 2
  // cores, and a lone device is certainly the lone PCI function.
  Inventory inv = detect_ok(fixture("neuron-inf2"));
  ASSERT_EQ(inv.accelerators.size(), 2u) << to_json({inv});
  for (const auto& a : inv.accelerators) {
    EXPECT_EQ(a.type, "INFERENTIA2");
    ASSERT_TRUE(a.pci);
    EXPECT_EQ(*a.pci, "0000:00:1e.0");
    EXPECT_EQ(*a.numa, 0);
    EXPECT_EQ(*a.cpus, "0-3");
  }
}

TEST(DetectFixtures, TpuV3ToldFromV2BySubsystemId) {
  Inventory inv = detect_ok(fixture("tpu-v3"));
  ASSERT_EQ(inv.accelerators.size(), 4u);
  for (const auto& a : inv.accelerators) EXPECT_EQ(a.type, "TPU-V3");
}

TEST(DetectFixtures, TpuChipsFromVfioGroupsInAContainer) {
  // No PCI view: without the TPU environment nothing says these are TPUs.
  EXPECT_TRUE(detect_ok(fixture("tpu-v6e-container")).accelerators.empty());
  Inventory inv = detect_ok(fixture("tpu-v6e-container", {{"TPU_ACCELERATOR_TYPE", "v6e-8"}}));
  ASSERT_EQ(inv.accelerators.size(), 8u) << to_json({inv});
  EXPECT_EQ(ids_of(inv), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7})) << "chip ids, not IOMMU group numbers";
  for (const auto& a : inv.accelerators) EXPECT_EQ(a.type, "TPU-V6E");
}

TEST(DetectRestrict, CudaVisibleDevicesByIdKeepsOriginalIds) {
  Inventory inv = detect_ok(fixture("nvidia-8xh100", {{"CUDA_VISIBLE_DEVICES", "3,1"}}));
  EXPECT_EQ(ids_of(inv), (std::vector<int>{1, 3}));
  EXPECT_EQ(*inv.accelerators[1].pci, "0000:6c:00.0");
}

TEST(DetectRestrict, CudaVisibleDevicesByUuidAndPrefix) {
  Inventory inv = detect_ok(fixture(
      "nvidia-8xh100", {{"CUDA_VISIBLE_DEVICES", "GPU-00000005-1111-2222-3333-444455556666,GPU-00000002"}}));
  EXPECT_EQ(ids_of(inv), (std::vector<int>{2, 5}));
}

TEST(DetectRestrict, EmptyValueHidesAll) {
  Inventory inv = detect_ok(fixture("nvidia-8xh100", {{"CUDA_VISIBLE_DEVICES", ""}}));
  EXPECT_TRUE(inv.accelerators.empty());
}

TEST(DetectRestrict, MalformedValuesAreErrors) {
  for (const char* bad : {"0,,1", "1x", "9", "GPU-ffff", "0,GPU-0000000"}) {
    auto inv = detect_host(fixture("nvidia-8xh100", {{"CUDA_VISIBLE_DEVICES", bad}}));
    ASSERT_FALSE(inv) << bad;
    EXPECT_EQ(inv.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(inv.status().message().find("CUDA_VISIBLE_DEVICES="), std::string::npos) << inv.status().message();
  }
  auto mig = detect_host(fixture("nvidia-8xh100", {{"CUDA_VISIBLE_DEVICES", "MIG-abc"}}));
  ASSERT_FALSE(mig);
  EXPECT_NE(mig.status().message().find("MIG"), std::string::npos);
}

TEST(DetectRestrict, VariablesOfAbsentVendorsAreIgnored) {
  // No NVIDIA GPU here: a stale CUDA_VISIBLE_DEVICES restricts nothing.
  Inventory inv = detect_ok(fixture("gaudi2", {{"CUDA_VISIBLE_DEVICES", "7"}}));
  EXPECT_EQ(inv.accelerators.size(), 8u);
}

TEST(DetectRestrict, AmdRocrThenHip) {
  Inventory inv = detect_ok(fixture("amd-8xmi300x", {{"ROCR_VISIBLE_DEVICES", "6,2,4"}}));
  EXPECT_EQ(ids_of(inv), (std::vector<int>{2, 4, 6}));
  // HIP picks positions among ROCR's list, in its order.
  inv = detect_ok(fixture("amd-8xmi300x", {{"ROCR_VISIBLE_DEVICES", "6,2,4"}, {"HIP_VISIBLE_DEVICES", "0,2"}}));
  EXPECT_EQ(ids_of(inv), (std::vector<int>{4, 6}));
  inv = detect_ok(fixture("amd-8xmi300x", {{"HIP_VISIBLE_DEVICES", "1"}}));
  EXPECT_EQ(ids_of(inv), (std::vector<int>{1}));
  inv = detect_ok(fixture("amd-8xmi300x", {{"ROCR_VISIBLE_DEVICES", "GPU-1111000000000000"}}));
  EXPECT_EQ(ids_of(inv), (std::vector<int>{1})) << "the GPU on bus 0x0c is KFD's second";
  EXPECT_FALSE(detect_host(fixture("amd-8xmi300x", {{"ROCR_VISIBLE_DEVICES", "0"}, {"HIP_VISIBLE_DEVICES", "1"}})));
}

TEST(DetectRestrict, OtherVendorsVariables) {
  EXPECT_EQ(ids_of(detect_ok(fixture("intel-4xmax1550", {{"ONEAPI_DEVICE_SELECTOR", "level_zero:1,3"}}))),
            (std::vector<int>{1, 3}));
  EXPECT_EQ(ids_of(detect_ok(fixture("intel-4xmax1550", {{"ONEAPI_DEVICE_SELECTOR", "opencl:*"}}))).size(), 4u);
  EXPECT_EQ(ids_of(detect_ok(fixture("intel-4xmax1550", {{"ONEAPI_DEVICE_SELECTOR", "level_zero:2.1"}}))),
            (std::vector<int>{2}));
  EXPECT_FALSE(detect_host(fixture("intel-4xmax1550", {{"ONEAPI_DEVICE_SELECTOR", "level_zero"}})));
  EXPECT_EQ(ids_of(detect_ok(fixture("neuron-trn1", {{"NEURON_RT_VISIBLE_CORES", "2-5"}}))),
            (std::vector<int>{2, 3, 4, 5}));
  EXPECT_FALSE(detect_host(fixture("neuron-trn1", {{"NEURON_RT_VISIBLE_CORES", "5-2"}})));
  EXPECT_EQ(ids_of(detect_ok(fixture("tpu-v4", {{"TPU_VISIBLE_CHIPS", "0,1"}}))), (std::vector<int>{0, 1}));
  EXPECT_EQ(ids_of(detect_ok(fixture("gaudi2", {{"HABANA_VISIBLE_MODULES", "7,0"}}))), (std::vector<int>{0, 7}));
  EXPECT_EQ(ids_of(detect_ok(fixture("ascend-910b", {{"ASCEND_RT_VISIBLE_DEVICES", "4"}}))), (std::vector<int>{4}));
  EXPECT_FALSE(detect_host(fixture("ascend-910b", {{"ASCEND_RT_VISIBLE_DEVICES", "8"}})));
}

TEST(DetectOverrides, NumGpusOnAHostWithout) {
  DetectConfig c = fixture("decoys");
  c.num_gpus = 2;
  Inventory inv = detect_ok(c);
  ASSERT_EQ(inv.accelerators.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const auto& a = inv.accelerators[static_cast<size_t>(i)];
    EXPECT_EQ(a.resource, "GPU");
    EXPECT_EQ(a.vendor, "nvidia");
    EXPECT_EQ(a.id, i);
    EXPECT_TRUE(a.logical);
    EXPECT_FALSE(a.pci);
  }
}

TEST(DetectOverrides, MoreAndFewerThanPhysical) {
  // Without a mask, devices beyond the physical ones are logical.
  DetectConfig c = fixture("nvidia-8xh100");
  c.num_gpus = 10;
  Inventory inv = detect_ok(c);
  EXPECT_EQ(ids_of(inv), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_FALSE(inv.accelerators[7].logical);
  EXPECT_TRUE(inv.accelerators[8].logical);
  EXPECT_EQ(inv.accelerators[8].type, inv.accelerators[0].type) << "logical devices take the host's type";
  c = fixture("nvidia-8xh100");
  c.num_gpus = 3;
  EXPECT_EQ(ids_of(detect_ok(c)), (std::vector<int>{0, 1, 2}));
  // Under an inherited mask its devices are all there is: fewer is fine,
  // more would invent ids (4, 5 are hidden by the mask) and is refused.
  c = fixture("nvidia-8xh100", {{"CUDA_VISIBLE_DEVICES", "1,3"}});
  c.num_gpus = 1;
  EXPECT_EQ(ids_of(detect_ok(c)), (std::vector<int>{1}));
  c.num_gpus = 4;
  auto r = detect_host(c);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("--num-gpus 4: CUDA_VISIBLE_DEVICES=1,3 leaves 2 GPUs visible"),
            std::string::npos)
      << r.status().message();
  c = fixture("neuron-trn1", {{"NEURON_RT_VISIBLE_CORES", "0-1"}});
  c.resources = {{"neuron_cores", Quantity::whole(3)}};
  r = detect_host(c);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("--resources neuron_cores=3: NEURON_RT_VISIBLE_CORES=0-1 leaves 2"),
            std::string::npos)
      << r.status().message();
}

TEST(DetectVisible, NegativeIdHidesTheRest) {
  Inventory inv = detect_ok(fixture("nvidia-8xh100", {{"CUDA_VISIBLE_DEVICES", "-1"}}));
  EXPECT_TRUE(inv.accelerators.empty());
  EXPECT_EQ(inv.masks["GPU"], "CUDA_VISIBLE_DEVICES=-1");
  EXPECT_EQ(ids_of(detect_ok(fixture("nvidia-8xh100", {{"CUDA_VISIBLE_DEVICES", "4,-1,1"}}))),
            (std::vector<int>{4}));
  EXPECT_TRUE(detect_ok(fixture("nvidia-8xh100", {{"CUDA_VISIBLE_DEVICES", "NoDevFiles"}})).accelerators.empty());
  EXPECT_TRUE(detect_ok(fixture("gaudi2", {{"HABANA_VISIBLE_MODULES", "-1"}})).accelerators.empty());
  EXPECT_TRUE(detect_ok(fixture("nvidia-8xh100")).masks.empty());
  EXPECT_FALSE(detect_host(fixture("nvidia-8xh100", {{"CUDA_VISIBLE_DEVICES", "-x"}})));
}

TEST(DetectOverrides, ResourcesAndHostType) {
  DetectConfig c = fixture("decoys");
  c.resources = {{"TPU", Quantity::whole(4)}, {"neuron_cores", Quantity::whole(2)}};
  c.host_accelerator_type = "v5p";
  Inventory inv = detect_ok(c);
  EXPECT_EQ(ids_of(inv, "TPU"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(ids_of(inv, "neuron_cores"), (std::vector<int>{0, 1}));
  for (const auto& a : inv.accelerators) {
    if (a.resource == "TPU") {
      EXPECT_EQ(a.type, "TPU-V5P");
      EXPECT_EQ(a.vendor, "google");
    } else {
      EXPECT_EQ(a.type, "") << "the host type names a TPU, not neuron cores";
    }
  }
  c = fixture("decoys");
  c.num_gpus = 2;
  c.host_accelerator_type = "AMD-Instinct-MI300X-OAM";
  inv = detect_ok(c);
  ASSERT_EQ(inv.accelerators.size(), 2u);
  EXPECT_EQ(inv.accelerators[0].vendor, "amd") << "so ranks get ROCR_VISIBLE_DEVICES";
  EXPECT_EQ(inv.accelerators[0].type, "MI300X");
  c = fixture("nvidia-8xh100");
  c.host_accelerator_type = "A100";
  inv = detect_ok(c);
  EXPECT_EQ(inv.accelerators[0].type, "A100");
}

TEST(DetectOverrides, BadOverridesAreErrors) {
  DetectConfig c = fixture("decoys");
  c.resources = {{"FPGA", Quantity::whole(1)}};
  auto r = detect_host(c);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("known resources"), std::string::npos);
  c = fixture("decoys");
  c.resources = {{"GPU", Quantity::parse("1.5").value()}};
  EXPECT_FALSE(detect_host(c));
  c = fixture("decoys");
  c.num_gpus = 1;
  c.resources = {{"GPU", Quantity::whole(2)}};
  EXPECT_FALSE(detect_host(c));
  c = fixture("decoys");
  c.num_gpus = -1;
  EXPECT_FALSE(detect_host(c));
}

TEST(DetectLabels, TpuEnvironmentNamesThePod) {
  Inventory inv = detect_ok(fixture("tpu-v4", {{"TPU_NAME", "slice-a"}, {"TPU_WORKER_ID", "3"},
                                               {"TPU_ACCELERATOR_TYPE", "v5litepod-16"}}));
  EXPECT_EQ(inv.labels.pod, "slice-a");
  EXPECT_EQ(inv.pod_order, 3);
  EXPECT_EQ(inv.accelerators.front().type, "TPU-V5LITEPOD") << "the environment's type wins";
  EXPECT_FALSE(detect_host(fixture("tpu-v4", {{"TPU_WORKER_ID", "three"}})));
  // No TPU: the TPU environment labels nothing.
  Inventory none = detect_ok(fixture("nvidia-8xh100", {{"TPU_NAME", "slice-a"}}));
  EXPECT_FALSE(none.labels.pod);
}

// A TPU VM without TPU_NAME (GKE, queued resources): the slice is named by
// its worker list, the same on every host of it, and the host's place in it.
TEST(DetectLabels, TpuSliceFromTheWorkerList) {
  const std::string kWorkers = "t1v-n-0.internal,t1v-n-1.internal,t1v-n-2.internal,t1v-n-3.internal";
  Inventory inv = detect_ok(fixture("tpu-v4", {{"TPU_WORKER_HOSTNAMES", kWorkers}, {"TPU_WORKER_ID", "2"}}));
  EXPECT_EQ(inv.labels.pod, "tpu-slice-t1v-n-0.internal");
  EXPECT_EQ(inv.pod_order, 2);
  // Without an id, the host's own name in the list.
  DetectConfig c = fixture("tpu-v4", {{"TPU_WORKER_HOSTNAMES", kWorkers}});
  c.hostname = "t1v-n-3";
  inv = detect_ok(c);
  EXPECT_EQ(inv.labels.pod, "tpu-slice-t1v-n-0.internal");
  EXPECT_EQ(inv.pod_order, 3);
  // Multislice: each slice is a pod of its own.
  inv = detect_ok(fixture("tpu-v4", {{"TPU_NAME", "job"}, {"MEGASCALE_SLICE_ID", "1"},
                                     {"MEGASCALE_NUM_SLICES", "2"}, {"TPU_WORKER_ID", "0"}}));
  EXPECT_EQ(inv.labels.pod, "job-slice-1");
  // What accrun --detect shows.
  EXPECT_NE(format_table({inv}).find("pod=job-slice-1 worker=0"), std::string::npos) << format_table({inv});
  // Bad values are errors naming the variable.
  auto r = detect_host(fixture("tpu-v4", {{"TPU_WORKER_HOSTNAMES", kWorkers}, {"TPU_WORKER_ID", "4"}}));
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("TPU_WORKER_ID=4: TPU_WORKER_HOSTNAMES lists 4 workers"), std::string::npos)
      << r.status().message();
  r = detect_host(fixture("tpu-v4", {{"TPU_NAME", "job"}, {"MEGASCALE_SLICE_ID", "x"}}));
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("MEGASCALE_SLICE_ID=x"), std::string::npos);
  EXPECT_FALSE(detect_host(fixture("tpu-v4", {{"TPU_WORKER_HOSTNAMES", "a,,b"}})));
}

TEST(DetectXml, TopologyFileAloneYieldsItsGpus) {
  DetectConfig c = fixture("decoys");
  c.topology_xml = kXml + "nvidia-4xh100.xml";
  Inventory inv = detect_ok(c);
  EXPECT_TRUE(inv.topology_from_xml);
  EXPECT_EQ(inv.cpus, 8);
  EXPECT_EQ(inv.numa_nodes, 2);
  ASSERT_EQ(inv.cores.size(), 8u);
  EXPECT_EQ(inv.cores[5].numa, 1);
  EXPECT_EQ(inv.cores[5].pus, (std::vector<int>{5}));
  ASSERT_EQ(inv.accelerators.size(), 4u) << "the InfiniBand NICs are not GPUs";
  const char* pci[] = {"0000:18:00.0", "0000:2a:00.0", "0000:9a:00.0", "0000:ab:00.0"};
  for (int i = 0; i < 4; ++i) {
    const auto& a = inv.accelerators[static_cast<size_t>(i)];
    EXPECT_EQ(a.id, i);
    EXPECT_EQ(a.type, "H100-SXM");
    EXPECT_EQ(*a.pci, pci[i]);
    EXPECT_EQ(*a.numa, i < 2 ? 0 : 1);
    EXPECT_EQ(*a.cpus, i < 2 ? "0-3" : "4-7");
    EXPECT_TRUE(a.uuid);
  }
}

// An XML topology that cannot be used says why, and where it came from:
// before, a missing file or one hwloc refused read "hwloc 2.9 reads XML
// format 2.x, not 3.0", which was true of neither.
TEST(DetectXml, AnUnusableTopologyFileSaysWhy) {
  char dir[] = "/tmp/accrun-xml-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string d = dir;
  std::ofstream(d + "/empty.xml")
      << "<?xml version=\"1.0\"?>\n<topology version=\"2.0\">\n</topology>\n";
  std::ofstream(d + "/v3.xml")
      << "<?xml version=\"1.0\"?>\n<topology version=\"3.0\">\n</topology>\n";
  auto why = [&](const std::string& path, bool from_env) {
    DetectConfig c = fixture("decoys", from_env ? Env{{"HWLOC_XMLFILE", path}} : Env{});
    c.topology_xml = path;
    auto r = detect_host(c);
    EXPECT_FALSE(r.is_ok()) << path;
    return r.is_ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(why(d + "/none.xml", true).find("(HWLOC_XMLFILE): No such file or directory"),
            std::string::npos)
      << why(d + "/none.xml", true);
  EXPECT_NE(why(d, false).find("(--topology): it is a directory"), std::string::npos)
      << why(d, false);
  const std::string refused = why(d + "/empty.xml", false);
  EXPECT_NE(refused.find("hwloc refused what it describes"), std::string::npos) << refused;
  EXPECT_EQ(refused.find("3.0"), std::string::npos) << refused;
  EXPECT_NE(why(d + "/v3.xml", false).find("reads XML format 2.x, not 3.0"), std::string::npos);
  std::remove((d + "/empty.xml").c_str());
  std::remove((d + "/v3.xml").c_str());
  ::rmdir(dir);
}

TEST(DetectXml, RealMachineTopologies) {
  DetectConfig c = fixture("decoys");
  c.topology_xml = kXml + "power8gpudistances.xml";
  Inventory inv = detect_ok(c);
  ASSERT_EQ(inv.accelerators.size(), 4u);
  EXPECT_EQ(inv.accelerators[0].type, "P100");
  EXPECT_EQ(*inv.accelerators[0].uuid, "GPU-77bf6b9a-6906-5a93-d28b-b77d2c23d1d2");
  EXPECT_EQ(*inv.accelerators[3].numa, 1);
  c.topology_xml = kXml + "amd-2xmi300x.xml";
  inv = detect_ok(c);
  ASSERT_EQ(inv.accelerators.size(), 2u);
  EXPECT_EQ(inv.accelerators[1].vendor, "amd");
  EXPECT_EQ(inv.accelerators[1].type, "MI300X");
  EXPECT_EQ(*inv.accelerators[1].cpus, "4-7");
  // NVIDIA and AMD GPUs on one machine: one vendor per resource (NVIDIA first).
  c.topology_xml = kXml + "32em64t-2n8c2t-pci-normalio.xml";
  inv = detect_ok(c);
  for (const auto& a : inv.accelerators) EXPECT_EQ(a.vendor, "nvidia");
  EXPECT_EQ(inv.accelerators.size(), 3u);
}

TEST(DetectXml, SysfsGpusTakeLocalityFromTheXml) {
  // Both describe GPUs on bus 0x18: sysfs gives identity, the XML locality.
  DetectConfig c = fixture("nvidia-8xh100");
  c.topology_xml = kXml + "nvidia-4xh100.xml";
  Inventory inv = detect_ok(c);
  ASSERT_EQ(inv.accelerators.size(), 8u) << "sysfs GPUs win over the XML's";
  EXPECT_EQ(*inv.accelerators[0].cpus, "0-3");
  EXPECT_EQ(*inv.accelerators[1].cpus, "0-7") << "not in the XML: its own sysfs entries";
}

TEST(DetectXml, OneNumaNodeMakesEveryDeviceLocalToIt) {
  // A virtual machine's GPU whose sysfs entry gives numa_node -1: on a
  // machine of one NUMA node it is that node's, with no PCI discovery.
  DetectConfig c = fixture("nvidia-1xh100-vm");
  c.topology_xml = kXml + "vm-1node.xml";
  Inventory inv = detect_ok(c);
  EXPECT_EQ(inv.numa_nodes, 1);
  ASSERT_EQ(inv.accelerators.size(), 1u);
  const auto& a = inv.accelerators[0];
  EXPECT_EQ(a.type, "H100-SXM");
  ASSERT_TRUE(a.numa);
  EXPECT_EQ(*a.numa, 0);
  EXPECT_EQ(*a.cpus, "0-1");
  // On two NUMA nodes a device that says nothing stays without a node.
  c.topology_xml = kXml + "nvidia-4xh100.xml";
  inv = detect_ok(c);
  ASSERT_EQ(inv.accelerators.size(), 1u);
  EXPECT_FALSE(inv.accelerators[0].numa);
}

TEST(DetectXml, BadFileIsAClearError) {
  DetectConfig c = fixture("decoys");
  c.topology_xml = kXml + "no-such-file.xml";
  auto r = detect_host(c);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("no-such-file.xml"), std::string::npos);
}

namespace {

// Holds the fake NVML open so the test can configure it; detection's own
// dlopen then finds the same instance.
class FakeNvml {
 public:
  FakeNvml() : handle_(::dlopen(ACCRUN_FAKE_NVML, RTLD_NOW | RTLD_LOCAL)) {
    if (handle_ == nullptr) return;
    set_ = reinterpret_cast<int (*)(const char*)>(::dlsym(handle_, "fake_nvml_set"));
    reset_ = reinterpret_cast<void (*)()>(::dlsym(handle_, "fake_nvml_reset"));
    inits_ = reinterpret_cast<int (*)()>(::dlsym(handle_, "fake_nvml_init_calls"));
    shutdowns_ = reinterpret_cast<int (*)()>(::dlsym(handle_, "fake_nvml_shutdown_calls"));
    reset_();
  }
  ~FakeNvml() {
    if (handle_ != nullptr) ::dlclose(handle_);
  }
  bool ok() const { return handle_ != nullptr && set_ && reset_ && inits_ && shutdowns_; }
  void set(const char* spec) { set_(spec); }
  int inits() const { return inits_(); }
  int shutdowns() const { return shutdowns_(); }

 private:
  void* handle_;
  int (*set_)(const char*) = nullptr;
  void (*reset_)() = nullptr;
  int (*inits_)() = nullptr;
  int (*shutdowns_)() = nullptr;
};

constexpr const char* kCluster = "0123456789abcdef0123456789abcdef";

}  // namespace

TEST(DetectNvml, NamesUuidsAndTheNvlinkClique) {
  FakeNvml nvml;
  ASSERT_TRUE(nvml.ok()) << ::dlerror();
  const std::string spec = std::string("00000000:18:00.0|NVIDIA H200|GPU-aaaa-0|") + kCluster + "|7;" +
                           "00000000:34:00.0|NVIDIA H200|GPU-aaaa-1|" + kCluster + "|7";
  nvml.set(spec.c_str());
  DetectConfig c = fixture("nvidia-8xh100");
  c.nvml_library = ACCRUN_FAKE_NVML;
  Inventory inv = detect_ok(c);
  ASSERT_EQ(inv.accelerators.size(), 8u);
  EXPECT_EQ(inv.accelerators[0].type, "H200") << "NVML's name wins over /proc";
  EXPECT_EQ(*inv.accelerators[1].uuid, "GPU-aaaa-1");
  EXPECT_EQ(inv.accelerators[2].type, "H100-SXM") << "not reported by NVML: /proc's name (NVIDIA H100 80GB HBM3)";
  EXPECT_EQ(inv.labels.pod, "01234567-89ab-cdef-0123-456789abcdef.7");
  EXPECT_EQ(nvml.inits(), 1);
  EXPECT_EQ(nvml.shutdowns(), 1) << "NVML is shut down after use";
  // Restriction by an NVML UUID.
  c.environment = {{"CUDA_VISIBLE_DEVICES", "GPU-aaaa-1"}};
  EXPECT_EQ(ids_of(detect_ok(c)), (std::vector<int>{1}));
}

// The clique labels the host while any GPU of it stays visible.
// An NVML library named by path (ACCRUN_NVML_LIBRARY) that does not load
// is said, once, at the default log level; the driver's own soname
// missing (a host without NVIDIA's driver) is not.
TEST(DetectNvml, AChosenLibraryThatDoesNotLoadIsSaid) {
  DetectConfig c = fixture("nvidia-8xh100");
  c.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  ::testing::internal::CaptureStderr();
  Inventory inv = detect_ok(c);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("NVML library /nonexistent/libnvidia-ml.so.1 not loaded"), std::string::npos)
      << err;
  EXPECT_EQ(inv.accelerators.size(), 8u) << "sysfs still finds the GPUs";
  c.nvml_library = "libnvidia-ml-absent.so.1";
  ::testing::internal::CaptureStderr();
  detect_ok(c);
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("NVML library"), std::string::npos) << err;
}

TEST(DetectNvml, CliqueNeedsAVisibleGpu) {
  FakeNvml nvml;
  ASSERT_TRUE(nvml.ok()) << ::dlerror();
  nvml.set((std::string("00000000:18:00.0|NVIDIA GB200|GPU-c-0|") + kCluster + "|3").c_str());
  DetectConfig c = fixture("nvidia-8xh100");
  c.nvml_library = ACCRUN_FAKE_NVML;
  c.environment = {{"CUDA_VISIBLE_DEVICES", "5"}};
  Inventory inv = detect_ok(c);
  EXPECT_EQ(ids_of(inv), (std::vector<int>{5}));
  EXPECT_EQ(inv.labels.pod, "01234567-89ab-cdef-0123-456789abcdef.3") << "the host's GPUs share one domain";
  c.environment = {{"CUDA_VISIBLE_DEVICES", "-1"}};
  inv = detect_ok(c);
  EXPECT_TRUE(inv.accelerators.empty());
  EXPECT_FALSE(inv.labels.pod) << "no visible GPU: no NVLink domain to place ranks in";
}

TEST(DetectNvml, WithoutFabricNoPod) {
  FakeNvml nvml;
  ASSERT_TRUE(nvml.ok());
  nvml.set("00000000:18:00.0|NVIDIA A100-SXM4-40GB|GPU-bbbb|-|0");
  DetectConfig c = fixture("nvidia-8xh100");
  c.nvml_library = ACCRUN_FAKE_NVML;
  Inventory inv = detect_ok(c);
  EXPECT_EQ(inv.accelerators[0].type, "A100-40G") << "NVML's name carries the memory size";
  EXPECT_FALSE(inv.labels.pod);
}

TEST(DetectNvml, NvmlAloneWhenSysfsShowsNothing) {
  FakeNvml nvml;
  ASSERT_TRUE(nvml.ok());
  nvml.set("00000000:9A:00.0|NVIDIA H100 80GB HBM3|GPU-2;00000000:1B:00.0|NVIDIA H100 80GB HBM3|GPU-1");
  DetectConfig c = fixture("decoys");
  c.nvml_library = ACCRUN_FAKE_NVML;
  Inventory inv = detect_ok(c);
  ASSERT_EQ(inv.accelerators.size(), 2u);
  EXPECT_EQ(*inv.accelerators[0].pci, "0000:1b:00.0") << "ids follow PCI order";
  EXPECT_EQ(*inv.accelerators[0].uuid, "GPU-1");
}

TEST(DetectNvml, MissingLibraryIsNotAnError) {
  DetectConfig c = fixture("nvidia-8xh100");
  c.nvml_library = "libaccrun-no-such-nvml.so.1";
  EXPECT_EQ(detect_ok(c).accelerators.size(), 8u);
}

TEST(DetectConfigEnv, FromEnvironment) {
  std::string a = "ACCRUN_SYSFS_ROOT=/host", b = "HWLOC_XMLFILE=/t.xml", d = "ACCRUN_NVML_LIBRARY=/x.so",
              e = "CUDA_VISIBLE_DEVICES=1";
  char* envp[] = {a.data(), b.data(), d.data(), e.data(), nullptr};
  DetectConfig c = DetectConfig::from_environment(envp);
  EXPECT_EQ(c.sysfs_root, "/host");
  EXPECT_EQ(c.topology_xml, "/t.xml");
  EXPECT_EQ(c.nvml_library, "/x.so");
  EXPECT_EQ(c.environment.at("CUDA_VISIBLE_DEVICES"), "1");
  DetectConfig empty = DetectConfig::from_environment(nullptr);
  EXPECT_EQ(empty.sysfs_root, "/");
  EXPECT_FALSE(empty.topology_xml);
}
