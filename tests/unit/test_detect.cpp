// Detection tables and providers: resource names, quantity rules, the type
// table, and what each provider sets for a rank (pure functions).
#include <gtest/gtest.h>

#include "accrun/detect.hpp"

using namespace accrun;
using namespace accrun::detect;

namespace {

Quantity q(const char* s) { return Quantity::parse(s).value(); }

Env set(std::string_view vendor, const std::vector<int>& ids, const Env& inherited = {}) {
  Env env;
  const Provider* p = provider_for_vendor(vendor);
  EXPECT_NE(p, nullptr) << vendor;
  if (p) p->set_visible(ids, inherited, env);
  return env;
}

}  // namespace

TEST(DetectResources, NamesAndCanonicalLookup) {
  EXPECT_EQ(resource_names(), (std::vector<std::string>{"GPU", "TPU", "HPU", "NPU", "neuron_cores"}));
  EXPECT_EQ(canonical_resource("gpu").value(), "GPU");
  EXPECT_EQ(canonical_resource("Neuron_Cores").value(), "neuron_cores");
  auto bad = canonical_resource("gpus");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("gpus"), std::string::npos);
  EXPECT_NE(bad.status().message().find("neuron_cores"), std::string::npos) << "names the known ones";
}

TEST(DetectResources, QuantityRules) {
  EXPECT_TRUE(validate_request("GPU", q("0.5")));
  EXPECT_TRUE(validate_request("GPU", q("0.3333")));
  EXPECT_TRUE(validate_request("GPU", q("1")));
  EXPECT_TRUE(validate_request("GPU", q("3")));
  EXPECT_FALSE(validate_request("GPU", q("1.5")));
  EXPECT_TRUE(validate_request("NPU", q("0.25")));
  EXPECT_FALSE(validate_request("NPU", q("2.5")));
  for (const char* ok : {"1", "2", "4", "8"}) EXPECT_TRUE(validate_request("TPU", q(ok))) << ok;
  for (const char* bad : {"3", "0.5", "16", "6"}) {
    Status st = validate_request("TPU", q(bad));
    EXPECT_FALSE(st) << bad;
    EXPECT_NE(st.message().find("1, 2, 4 or 8"), std::string::npos) << st.message();
  }
  EXPECT_TRUE(validate_request("HPU", q("2")));
  EXPECT_FALSE(validate_request("HPU", q("0.5")));
  EXPECT_TRUE(validate_request("neuron_cores", q("4")));
  Status nc = validate_request("neuron_cores", q("0.5"));
  EXPECT_FALSE(nc);
  EXPECT_NE(nc.message().find("whole"), std::string::npos);
  EXPECT_FALSE(validate_request("FPGA", q("1")));
}

TEST(DetectResources, ProvidersAgreeWithTheirResource) {
  ASSERT_EQ(providers().size(), 7u);
  for (const auto& p : providers()) {
    EXPECT_EQ(provider_for_vendor(p->vendor()), p.get());
    EXPECT_TRUE(canonical_resource(p->resource())) << p->vendor();
    EXPECT_EQ(p->fractional(), p->resource() == "GPU" || p->resource() == "NPU") << p->vendor();
    EXPECT_EQ(static_cast<bool>(p->validate_quantity(q("0.5"))), p->fractional()) << p->vendor();
    EXPECT_EQ(default_vendor(p->resource()).empty(), false);
  }
  EXPECT_EQ(provider_for_vendor("nobody"), nullptr);
  EXPECT_EQ(provider_for_vendor("nvidia")->visible_variable(), "CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(provider_for_vendor("amd")->visible_variable(), "ROCR_VISIBLE_DEVICES");
  EXPECT_EQ(provider_for_vendor("habana")->visible_variable(), "HABANA_VISIBLE_MODULES");
}

TEST(DetectResources, ParseResourceList) {
  auto r = parse_resource_list("gpu=4, TPU:8");
  ASSERT_TRUE(r) << r.status().message();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].first, "GPU");
  EXPECT_EQ((*r)[0].second, Quantity::whole(4));
  EXPECT_EQ((*r)[1].first, "TPU");
  EXPECT_FALSE(parse_resource_list("GPU=1.5"));
  EXPECT_FALSE(parse_resource_list("GPU"));
  EXPECT_FALSE(parse_resource_list("GPU=1,GPU=2"));
  EXPECT_FALSE(parse_resource_list("FPGA=1"));
}

TEST(DetectTypes, ModelNamesAndAliases) {
  // Memory size and form are part of the type where a model is sold in several.
  EXPECT_EQ(type_from_model("NVIDIA H100 80GB HBM3"), types::kH100Sxm);
  EXPECT_EQ(type_from_model("NVIDIA H100 PCIe"), types::kH100Pcie);
  EXPECT_EQ(type_from_model("NVIDIA H100 NVL"), types::kH100Nvl);
  EXPECT_EQ(type_from_model("NVIDIA H100"), types::kH100);
  EXPECT_EQ(type_from_model("NVIDIA A100-SXM4-40GB"), types::kA100_40G);
  EXPECT_EQ(type_from_model("NVIDIA A100-PCIE-40GB"), types::kA100_40G);
  EXPECT_EQ(type_from_model("NVIDIA A100-SXM4-80GB"), types::kA100_80G);
  EXPECT_EQ(type_from_model("NVIDIA A100 80GB PCIe"), types::kA100_80G);
  EXPECT_EQ(type_from_model("Tesla V100-SXM2-16GB"), types::kV100);
  EXPECT_EQ(type_from_model("NVIDIA GH200 480GB"), types::kGH200);
  EXPECT_EQ(type_from_model("NVIDIA H200"), types::kH200);
  EXPECT_EQ(type_from_model("NVIDIA H200 NVL"), "H200-NVL");
  EXPECT_EQ(type_from_model("AMD Instinct MI300X"), types::kMI300X);
  EXPECT_EQ(type_from_model("Intel(R) Data Center GPU Max 1550"), types::kMax1550);
  // Unknown models stay readable.
  EXPECT_EQ(type_from_model("NVIDIA GeForce RTX 4090"), "GEFORCE-RTX-4090");
  EXPECT_EQ(type_from_model("Tesla M2075 Dual-Slot Computing Processor Module"), "TESLA-M2075");
  // A model that only names the family keeps the variant the PCI id gave.
  EXPECT_EQ(refine_type("H200-SXM", "NVIDIA H200"), "H200-SXM");
  EXPECT_EQ(refine_type("H100", "NVIDIA H100 80GB HBM3"), types::kH100Sxm);
  EXPECT_EQ(refine_type("H100-SXM", "NVIDIA A100-SXM4-40GB"), types::kA100_40G);

  // Typed names: canonical names, aliases and model strings.
  EXPECT_EQ(canonical_type("h100"), "H100");
  EXPECT_EQ(canonical_type("NVIDIA A100-SXM4-80GB"), types::kA100_80G);
  EXPECT_EQ(canonical_type("a100-80g"), types::kA100_80G);
  EXPECT_EQ(canonical_type("AMD-Instinct-MI300X-OAM"), types::kMI300X);
  EXPECT_EQ(canonical_type("Intel-GAUDI"), types::kGaudi);
  EXPECT_EQ(canonical_type("TPU-V5P"), types::kTpuV5P);
  EXPECT_EQ(canonical_type("tpu-v5litepod"), types::kTpuV5LitePod);
  EXPECT_EQ(canonical_type("Ascend910B"), types::kAscend910B);
  EXPECT_EQ(canonical_type("aws-neuron-core"), types::kAwsNeuronCore);
  // Unknown typed names are kept as written: distinct names never collide.
  EXPECT_EQ(canonical_type("a3-highgpu-8g"), "a3-highgpu-8g");
  EXPECT_EQ(canonical_type("a3-megagpu-8g"), "a3-megagpu-8g");
  EXPECT_EQ(canonical_type(" mystery "), "mystery");
  EXPECT_EQ(canonical_type("NVIDIA GeForce RTX 4090"), "NVIDIA GeForce RTX 4090");
}

// Every constant of Ray's ray.util.accelerators module, with the type Ray's
// documentation gives it: the GPU model, Ray's AMD/Intel/TPU/Ascend names,
// and aws-neuron-core for every Neuron host.
TEST(DetectTypes, RayAcceleratorConstants) {
  const std::pair<const char*, const char*> kRay[] = {
      {"V100", "V100"}, {"P100", "P100"}, {"T4", "T4"}, {"P4", "P4"}, {"K80", "K80"}, {"A10G", "A10G"},
      {"L4", "L4"}, {"L40S", "L40S"}, {"A100", "A100"}, {"H100", "H100"}, {"H200", "H200"}, {"H20", "H20"},
      {"B200", "B200"}, {"Intel-GPU-Max-1550", "MAX-1550"}, {"Intel-GPU-Max-1100", "MAX-1100"},
      {"Intel-GAUDI", "GAUDI"}, {"AMD-Instinct-MI100", "MI100"}, {"AMD-Instinct-MI250X", "MI250X"},
      {"AMD-Instinct-MI250X-MI250", "MI250"}, {"AMD-Instinct-MI210", "MI210"}, {"AMD-Instinct-MI300A", "MI300A"},
      {"AMD-Instinct-MI300X-OAM", "MI300X"}, {"AMD-Instinct-MI300X-HF", "MI300X"},
      {"AMD-Instinct-MI308X", "MI308X"}, {"AMD-Instinct-MI325X-OAM", "MI325X"},
      {"AMD-Radeon-R9-200-HD-7900", "RADEON-R9-200-HD-7900"}, {"AMD-Radeon-HD-7900", "RADEON-HD-7900"},
      {"aws-neuron-core", "AWS-NEURON-CORE"}, {"TPU-V2", "TPU-V2"}, {"TPU-V3", "TPU-V3"}, {"TPU-V4", "TPU-V4"},
      {"TPU-V5P", "TPU-V5P"}, {"TPU-V5LITEPOD", "TPU-V5LITEPOD"}, {"TPU-V6E", "TPU-V6E"},
      {"Ascend910B", "ASCEND910B"}, {"Ascend910B4", "ASCEND910B4"}, {"A100-40G", "A100-40G"},
      {"A100-80G", "A100-80G"},
  };
  for (const auto& [ray, ours] : kRay) {
    EXPECT_EQ(canonical_type(ray), ours) << ray;
    EXPECT_NE(vendor_of_type(canonical_type(ray)), "") << ray << " is in the table";
  }
  // Ray's PCI-id mapping for AMD: 0x7408 MI250X, 0x740c MI250X-MI250.
  EXPECT_EQ(type_from_pci(0x1002, 0x7408), "MI250X");
  EXPECT_EQ(type_from_pci(0x1002, 0x740c), canonical_type("AMD-Instinct-MI250X-MI250"));
  EXPECT_EQ(type_from_pci(0x1002, 0x6799), canonical_type("AMD-Radeon-HD-7900"));
}

TEST(DetectTypes, RequestsMatchVariantsAndFamilies) {
  // A request without the variant is met by every variant...
  EXPECT_TRUE(type_matches("A100-40G", "A100"));
  EXPECT_TRUE(type_matches("A100-80G", "a100"));
  EXPECT_TRUE(type_matches("A100", "A100"));
  EXPECT_TRUE(type_matches("H100-NVL", "H100"));
  EXPECT_TRUE(type_matches("H100-SXM", "NVIDIA-H100"));
  // ...a variant only by itself.
  EXPECT_TRUE(type_matches("A100-80G", "A100-80G"));
  EXPECT_FALSE(type_matches("A100-40G", "A100-80G"));
  EXPECT_FALSE(type_matches("A100", "A100-80G")) << "an A100 of unknown size is not proven 80G";
  EXPECT_FALSE(type_matches("H100-PCIE", "H100-SXM"));
  EXPECT_FALSE(type_matches("H100-SXM", "A100"));
  // Ray's aws-neuron-core is every Neuron host, Trainium2 and Inferentia2 included.
  for (const char* t : {"TRAINIUM1", "TRAINIUM2", "INFERENTIA1", "INFERENTIA2", "AWS-NEURON-CORE"}) {
    EXPECT_TRUE(type_matches(t, "aws-neuron-core")) << t;
  }
  EXPECT_FALSE(type_matches("TRAINIUM2", "TRAINIUM1"));
  EXPECT_FALSE(type_matches("H100", "aws-neuron-core"));
  EXPECT_TRUE(type_matches("ASCEND910B4", "Ascend910B"));
  EXPECT_FALSE(type_matches("ASCEND910B", "Ascend910B4"));
  // Unknown names match as written, case-insensitively, and only themselves.
  EXPECT_TRUE(type_matches("a3-highgpu-8g", "A3-HIGHGPU-8G"));
  EXPECT_FALSE(type_matches("a3-highgpu-8g", "a3-megagpu-8g"));
  EXPECT_FALSE(type_matches("", "H100"));
  EXPECT_EQ(type_family("A100-80G"), "A100");
  EXPECT_EQ(type_family("TRAINIUM2"), "AWS-NEURON-CORE");
  EXPECT_EQ(type_family("L4"), "L4");
}

TEST(DetectTypes, VendorsResourcesAndPciIds) {
  EXPECT_EQ(vendor_of_type("H100"), "nvidia");
  EXPECT_EQ(vendor_of_type("mi300x"), "amd");
  EXPECT_EQ(vendor_of_type("GAUDI2"), "habana");
  EXPECT_EQ(vendor_of_type("TPU-V4"), "google");
  EXPECT_EQ(vendor_of_type("ASCEND910B"), "huawei");
  EXPECT_EQ(vendor_of_type("TRAINIUM2"), "aws");
  EXPECT_EQ(vendor_of_type("GEFORCE-RTX-4090"), "");
  EXPECT_EQ(resource_of_type("TPU-V6E"), "TPU");
  EXPECT_EQ(resource_of_type("INFERENTIA2"), "neuron_cores");
  EXPECT_EQ(type_from_pci(0x1002, 0x74a1), "MI300X");
  EXPECT_EQ(type_from_pci(0x1da3, 0x1020), "GAUDI2");
  EXPECT_EQ(type_from_pci(0x1ae0, 0x0062), "TPU-V5P");
  EXPECT_EQ(type_from_pci(0x1ae0, 0x0042), "") << "gVNIC is not a TPU";
  // Ids checked against public sources (see types.cpp); each line is a
  // mistake the table once made or a variant it once missed.
  EXPECT_EQ(type_from_pci(0x10de, 0x2324), "H800") << "0x2324 is an H800, not an H100";
  EXPECT_EQ(type_from_pci(0x10de, 0x2322), "H800");
  EXPECT_EQ(type_from_pci(0x10de, 0x2339), "H100-SXM") << "H100 SXM5 94GB";
  EXPECT_EQ(type_from_pci(0x10de, 0x2330), "H100-SXM");
  EXPECT_EQ(type_from_pci(0x10de, 0x2331), "H100-PCIE");
  EXPECT_EQ(type_from_pci(0x10de, 0x2321), "H100-NVL") << "H100L 94GB";
  EXPECT_EQ(type_from_pci(0x10de, 0x2336), "H100") << "form not known";
  EXPECT_EQ(type_from_pci(0x10de, 0x20b0), "A100-40G");
  EXPECT_EQ(type_from_pci(0x10de, 0x20b5), "A100-80G");
  EXPECT_EQ(type_from_pci(0x10de, 0x2335), "H200-SXM");
  EXPECT_EQ(type_from_pci(0x10de, 0x2342), "GH200");
  EXPECT_EQ(type_from_pci(0x10de, 0x2329), "H20");
  EXPECT_EQ(type_from_pci(0x1002, 0x738e), "MI100");
  EXPECT_EQ(type_from_pci(0x1002, 0x74b5), "MI300X") << "the MI300X virtual function";
  EXPECT_EQ(type_from_pci(0x1002, 0x74a5), "MI325X");
  EXPECT_EQ(type_from_pci(0x1002, 0x75a0), "MI350X");
  EXPECT_EQ(type_from_pci(0x1002, 0x75a3), "MI355X");
  EXPECT_EQ(type_from_pci(0x8086, 0x0bd6), "MAX-1550");
  EXPECT_EQ(type_from_pci(0x8086, 0x0bd9), "MAX-1100");
  EXPECT_EQ(type_from_pci(0x8086, 0x0bd7), "MAX-1350");
  EXPECT_EQ(type_from_pci(0x1da3, 0x1010), "GAUDI") << "Gaudi, secured";
  EXPECT_EQ(type_from_pci(0x1da3, 0x1021), "GAUDI2") << "HL-288";
  EXPECT_EQ(type_from_pci(0x1da3, 0x1063), "GAUDI3") << "HL-338";
  EXPECT_EQ(type_from_pci(0x1ae0, 0x0027), "") << "v2 or v3: the subsystem id decides";
  EXPECT_EQ(type_from_pci(0x1ae0, 0x0063), "TPU-V5LITEPOD");
  EXPECT_EQ(type_from_pci(0x1ae0, 0x006f), "TPU-V6E");
  EXPECT_EQ(type_from_pci(0x1d0f, 0x7364), "TRAINIUM2");
  EXPECT_EQ(type_from_pci(0x1d0f, 0xefa1), "") << "EFA is a NIC";
  EXPECT_EQ(type_from_pci(0x19e5, 0xd100), "ASCEND310");
  EXPECT_EQ(type_from_pci(0x19e5, 0xd500), "ASCEND310P");
  EXPECT_EQ(type_from_pci(0x19e5, 0xd803), "ASCEND910C");
  EXPECT_EQ(canonical_type("AMD-Instinct-MI300X-HF"), "MI300X") << "Ray's string";
  EXPECT_EQ(canonical_type("NVIDIA H800"), "H800");
  // Every canonical name and alias resolves to its own row.
  for (const auto& t : accelerator_types()) {
    EXPECT_EQ(canonical_type(t.name), t.name);
    for (const auto& a : t.aliases) EXPECT_EQ(canonical_type(a), t.name) << a;
    EXPECT_EQ(provider_for_vendor(t.vendor)->resource(), t.resource) << t.name;
  }
}

TEST(DetectVisible, NvidiaSetsPciOrder) {
  Env env = set("nvidia", {1, 3});
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "1,3");
  EXPECT_EQ(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
  EXPECT_EQ(env.size(), 2u);
}

TEST(DetectVisible, AmdSetsExactlyOneMask) {
  // Nothing inherited: ROCR.
  Env env = set("amd", {2, 5});
  EXPECT_EQ(env, (Env{{"ROCR_VISIBLE_DEVICES", "2,5"}}));
  // Only ROCR inherited: ROCR replaced with physical ids.
  env = set("amd", {2}, {{"ROCR_VISIBLE_DEVICES", "2,3"}});
  EXPECT_EQ(env, (Env{{"ROCR_VISIBLE_DEVICES", "2"}}));
  // Only HIP inherited: HIP indexes physical devices, so HIP gets the ids.
  env = set("amd", {3}, {{"HIP_VISIBLE_DEVICES", "1,3"}});
  EXPECT_EQ(env, (Env{{"HIP_VISIBLE_DEVICES", "3"}}));
  // Both: ROCR stays, HIP gets positions in the ROCR list.
  env = set("amd", {6, 4}, {{"ROCR_VISIBLE_DEVICES", "4,5,6,7"}, {"HIP_VISIBLE_DEVICES", "0,2"}});
  EXPECT_EQ(env, (Env{{"HIP_VISIBLE_DEVICES", "2,0"}}));
  // Both, ROCR by UUID: ROCR replaced and HIP made to select all of it.
  env = set("amd", {1}, {{"ROCR_VISIBLE_DEVICES", "GPU-aa,GPU-bb"}, {"HIP_VISIBLE_DEVICES", "1"}});
  EXPECT_EQ(env, (Env{{"HIP_VISIBLE_DEVICES", "0"}, {"ROCR_VISIBLE_DEVICES", "1"}}));
}

TEST(DetectVisible, OtherVendors) {
  EXPECT_EQ(set("intel", {0, 2}), (Env{{"ONEAPI_DEVICE_SELECTOR", "level_zero:0,2"}}));
  EXPECT_EQ(set("aws", {4, 5, 6}), (Env{{"NEURON_RT_VISIBLE_CORES", "4,5,6"}}));
  EXPECT_EQ(set("habana", {3}), (Env{{"HABANA_VISIBLE_MODULES", "3"}}));
  EXPECT_EQ(set("huawei", {0, 1}), (Env{{"ASCEND_RT_VISIBLE_DEVICES", "0,1"}}));
}

TEST(DetectVisible, TpuBoundsOnlyWhenSplit) {
  const Provider* tpu = provider_for_vendor("google");
  Env env;
  tpu->set_visible({0, 1, 2, 3}, 4, {}, env);
  EXPECT_EQ(env, (Env{{"TPU_VISIBLE_CHIPS", "0,1,2,3"}})) << "a whole host keeps the slice's bounds";
  env.clear();
  tpu->set_visible({2}, 4, {}, env);
  EXPECT_EQ(env["TPU_VISIBLE_CHIPS"], "2");
  EXPECT_EQ(env["TPU_CHIPS_PER_HOST_BOUNDS"], "1,1,1");
  EXPECT_EQ(env["TPU_HOST_BOUNDS"], "1,1,1");
  env.clear();
  tpu->set_visible({2, 3}, 4, {}, env);
  EXPECT_EQ(env["TPU_CHIPS_PER_HOST_BOUNDS"], "1,2,1");
  env.clear();
  tpu->set_visible({4, 5, 6, 7}, 8, {}, env);
  EXPECT_EQ(env["TPU_CHIPS_PER_HOST_BOUNDS"], "2,2,1");
  EXPECT_EQ(env.count("TPU_MESH_CONTROLLER_PORT"), 0u) << "the planner sets the per-process port";
  // Without the host count, one or two chips are a split host.
  env.clear();
  tpu->set_visible({1}, {}, env);
  EXPECT_EQ(env["TPU_CHIPS_PER_HOST_BOUNDS"], "1,1,1");
  env.clear();
  tpu->set_visible({0, 1, 2, 3}, {}, env);
  EXPECT_EQ(env.count("TPU_HOST_BOUNDS"), 0u);
}
