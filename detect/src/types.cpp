// The accelerator type table: canonical names, aliases (Ray's
// ray.util.accelerators strings among them), model-name patterns and PCI
// device ids.  accrun(7) lists the same table; keep them together.
#include <algorithm>
#include <cctype>

#include "internal.hpp"

namespace accrun::detect {
namespace {

struct TypeRow {
  std::string_view name;
  std::string_view family;  // the type a request without the variant names ("A100" for "A100-80G"), or ""
  std::string_view vendor;
  std::string_view resource;
  std::vector<std::string_view> aliases;  // matched whole, case-insensitively
  // Model-name patterns: a model matches when its words (split at anything
  // not a letter or digit) contain one pattern's words consecutively.
  std::vector<std::vector<std::string_view>> models;
  unsigned pci_vendor = 0;
  std::vector<unsigned> pci_devices;
};

const std::vector<TypeRow>& table() {
  // PCI device ids, checked against public sources so they can be checked
  // again: NVIDIA from NVIDIA/gpu-admin-tools (gpu/devid_names.py) and
  // pci.ids; AMD from libdrm's data/amdgpu.ids and pci.ids; Intel from
  // intel/compute-runtime's device list and pci.ids; Gaudi from the
  // habanalabs driver's PCI id table; TPU from tpu-info (tpu_info/device.py)
  // and gVisor (pkg/abi/tpu); Neuron from aws-neuron-driver
  // (neuron_device.h); Ascend from Huawei's CANN log-collection script and
  // OpenStack cyborg's Ascend driver.
  static const std::vector<TypeRow> kTable = {
      // NVIDIA (by model name first: NVML, /proc/driver/nvidia, hwloc).
      // Where a model is sold in several memory sizes or forms, the variant
      // is its own type and the family a request without the variant names.
      {types::kV100, "", "nvidia", "GPU", {"NVIDIA-TESLA-V100", "TESLA-V100"}, {{"v100"}}, 0x10de, {0x1db1, 0x1db4, 0x1db5, 0x1db6, 0x1db8, 0x1df6}},
      {"P100", "", "nvidia", "GPU", {"NVIDIA-TESLA-P100", "TESLA-P100"}, {{"p100"}}, 0x10de, {0x15f7, 0x15f8, 0x15f9}},
      {"P4", "", "nvidia", "GPU", {"NVIDIA-TESLA-P4", "TESLA-P4"}, {{"p4"}}, 0x10de, {0x1bb3}},
      {"K80", "", "nvidia", "GPU", {"NVIDIA-TESLA-K80", "TESLA-K80"}, {{"k80"}}, 0x10de, {0x102d}},
      {types::kT4, "", "nvidia", "GPU", {"NVIDIA-TESLA-T4", "TESLA-T4"}, {{"t4"}}, 0x10de, {0x1eb8}},
      {types::kA10G, "", "nvidia", "GPU", {"NVIDIA-A10G", "NVIDIA-TESLA-A10G"}, {{"a10g"}}, 0x10de, {0x2237}},
      // 0x20b3 (SXM 64GB) is an A100 of neither common size.
      {types::kA100, "", "nvidia", "GPU", {"NVIDIA-A100", "NVIDIA-TESLA-A100"}, {{"a100"}}, 0x10de, {0x20b3}},
      {types::kA100_40G, types::kA100, "nvidia", "GPU", {"NVIDIA-A100-40G", "A100-40GB"}, {{"a100", "40gb"}}, 0x10de, {0x20b0, 0x20b1, 0x20f1}},
      {types::kA100_80G, types::kA100, "nvidia", "GPU", {"NVIDIA-A100-80G", "A100-80GB"}, {{"a100", "80gb"}}, 0x10de, {0x20b2, 0x20b5}},
      {types::kL4, "", "nvidia", "GPU", {"NVIDIA-L4"}, {{"l4"}}, 0x10de, {0x27b8}},
      {types::kL40S, "", "nvidia", "GPU", {"NVIDIA-L40S"}, {{"l40s"}}, 0x10de, {0x26b9}},
      // NVML names: "NVIDIA H100 80GB HBM3" (SXM5), "NVIDIA H100 PCIe",
      // "NVIDIA H100 NVL"; 0x2313, 0x2336 and 0x233d do not say their form.
      {types::kH100, "", "nvidia", "GPU", {"NVIDIA-H100"}, {{"h100"}}, 0x10de, {0x2313, 0x2336, 0x233d}},
      {types::kH100Sxm, types::kH100, "nvidia", "GPU", {"NVIDIA-H100-SXM", "H100-SXM5"}, {{"h100", "sxm"}, {"h100", "sxm5"}, {"h100", "hbm3"}}, 0x10de, {0x2330, 0x2337, 0x2338, 0x2339}},
      {types::kH100Pcie, types::kH100, "nvidia", "GPU", {"NVIDIA-H100-PCIE"}, {{"h100", "pcie"}}, 0x10de, {0x2331}},
      {types::kH100Nvl, types::kH100, "nvidia", "GPU", {"NVIDIA-H100-NVL"}, {{"h100", "nvl"}}, 0x10de, {0x2321}},
      {"H800", "", "nvidia", "GPU", {"NVIDIA-H800"}, {{"h800"}}, 0x10de, {0x2322, 0x2324, 0x233a}},
      {types::kH200, "", "nvidia", "GPU", {"NVIDIA-H200"}, {{"h200"}}, 0x10de, {}},
      {"H200-SXM", types::kH200, "nvidia", "GPU", {"NVIDIA-H200-SXM"}, {{"h200", "sxm"}}, 0x10de, {0x2335}},
      {"H200-NVL", types::kH200, "nvidia", "GPU", {"NVIDIA-H200-NVL"}, {{"h200", "nvl"}}, 0x10de, {0x233b}},
      {types::kGH200, "", "nvidia", "GPU", {"NVIDIA-GH200"}, {{"gh200"}}, 0x10de, {0x2342, 0x2343, 0x2345, 0x2348}},
      {"H20", "", "nvidia", "GPU", {"NVIDIA-H20"}, {{"h20"}}, 0x10de, {0x2309, 0x230c, 0x230e, 0x2328, 0x2329}},
      {types::kB200, "", "nvidia", "GPU", {"NVIDIA-B200"}, {{"b200"}}, 0x10de, {0x2901}},
      // AMD (by PCI device id first; the marketing name second).  0x7408 is
      // the MI250X, 0x740c the MI250 (Ray names it AMD-Instinct-MI250X-MI250).
      {"MI100", "", "amd", "GPU", {"AMD-INSTINCT-MI100"}, {{"mi100"}}, 0x1002, {0x738c, 0x738e}},
      {"MI210", "", "amd", "GPU", {"AMD-INSTINCT-MI210"}, {{"mi210"}}, 0x1002, {0x740f}},
      {types::kMI250X, "", "amd", "GPU", {"AMD-INSTINCT-MI250X"}, {{"mi250x"}}, 0x1002, {0x7408}},
      {"MI250", "", "amd", "GPU", {"AMD-INSTINCT-MI250X-MI250", "AMD-INSTINCT-MI250"}, {{"mi250"}}, 0x1002, {0x740c}},
      {"MI300A", "", "amd", "GPU", {"AMD-INSTINCT-MI300A"}, {{"mi300a"}}, 0x1002, {0x74a0}},
      // 0x74b5 is the SR-IOV virtual function, 0x74a9/0x74bd the HF parts.
      {types::kMI300X, "", "amd", "GPU", {"AMD-INSTINCT-MI300X-OAM", "AMD-INSTINCT-MI300X", "AMD-INSTINCT-MI300X-HF"}, {{"mi300x"}}, 0x1002, {0x74a1, 0x74a9, 0x74b5, 0x74bd}},
      {"MI308X", "", "amd", "GPU", {"AMD-INSTINCT-MI308X", "AMD-INSTINCT-MI308X-OAM"}, {{"mi308x"}}, 0x1002, {0x74a2, 0x74a8, 0x74b6}},
      {types::kMI325X, "", "amd", "GPU", {"AMD-INSTINCT-MI325X-OAM", "AMD-INSTINCT-MI325X"}, {{"mi325x"}}, 0x1002, {0x74a5}},
      {"MI350X", "", "amd", "GPU", {"AMD-INSTINCT-MI350X"}, {{"mi350x"}}, 0x1002, {0x75a0, 0x75b0}},
      {"MI355X", "", "amd", "GPU", {"AMD-INSTINCT-MI355X-OAM", "AMD-INSTINCT-MI355X"}, {{"mi355x"}}, 0x1002, {0x75a3, 0x75b3}},
      {"RADEON-R9-200-HD-7900", "", "amd", "GPU", {"AMD-RADEON-R9-200-HD-7900"}, {}, 0x1002, {0x6798}},
      {"RADEON-HD-7900", "", "amd", "GPU", {"AMD-RADEON-HD-7900"}, {}, 0x1002, {0x6799, 0x679a, 0x679b}},
      // Intel data-centre GPUs.
      {types::kMax1550, "", "intel", "GPU", {"INTEL-GPU-MAX-1550", "MAX1550"}, {{"max", "1550"}}, 0x8086, {0x0bd5, 0x0bd6}},
      {"MAX-1450", "", "intel", "GPU", {"INTEL-GPU-MAX-1450", "MAX1450"}, {{"max", "1450"}}, 0x8086, {0x0b69}},
      {"MAX-1350", "", "intel", "GPU", {"INTEL-GPU-MAX-1350", "MAX1350"}, {{"max", "1350"}}, 0x8086, {0x0bd7, 0x0bd8}},
      {types::kMax1100, "", "intel", "GPU", {"INTEL-GPU-MAX-1100", "MAX1100"}, {{"max", "1100"}}, 0x8086, {0x0bd9, 0x0bda, 0x0bdb}},
      {"FLEX-170", "", "intel", "GPU", {"INTEL-GPU-FLEX-170"}, {{"flex", "170"}}, 0x8086, {0x56c0}},
      {"FLEX-140", "", "intel", "GPU", {"INTEL-GPU-FLEX-140"}, {{"flex", "140"}}, 0x8086, {0x56c1}},
      // Intel Gaudi: secured (0x1010, 0x1011) and HL-2000M parts are Gaudi;
      // HL-288 (0x1021) a Gaudi2 and HL-338 (0x1063) a Gaudi3 PCIe card.
      {types::kGaudi, "", "habana", "HPU", {"INTEL-GAUDI", "GAUDI1", "HL-205"}, {{"gaudi"}}, 0x1da3, {0x1000, 0x1001, 0x1010, 0x1011}},
      {types::kGaudi2, "", "habana", "HPU", {"INTEL-GAUDI2", "HL-225"}, {{"gaudi2"}}, 0x1da3, {0x1020, 0x1021}},
      {types::kGaudi3, "", "habana", "HPU", {"INTEL-GAUDI3"}, {{"gaudi3"}}, 0x1da3, {0x1060, 0x1062, 0x1063}},
      // Google TPU.  v2 and v3 share device id 0x0027 and differ by the
      // subsystem device id (0x004e, 0x004f): tpu.cpp tells them apart.
      {"TPU-V2", "", "google", "TPU", {"V2"}, {}, 0x1ae0, {}},
      {"TPU-V3", "", "google", "TPU", {"V3"}, {}, 0x1ae0, {}},
      {types::kTpuV4, "", "google", "TPU", {"V4"}, {}, 0x1ae0, {0x005e}},
      {types::kTpuV5P, "", "google", "TPU", {"V5P"}, {}, 0x1ae0, {0x0062}},
      {types::kTpuV5LitePod, "", "google", "TPU", {"V5LITEPOD", "V5E", "TPU-V5E", "V5LITE"}, {}, 0x1ae0, {0x0063}},
      {types::kTpuV6E, "", "google", "TPU", {"V6E"}, {}, 0x1ae0, {0x006f}},
      // AWS Neuron.  Ray gives every Neuron host the one type
      // "aws-neuron-core": here it is the family of every Neuron chip, so a
      // request for it is met by Inferentia and Trainium hosts alike.
      {types::kAwsNeuronCore, "", "aws", "neuron_cores", {"NEURON", "NEURON-CORE", "AWS-NEURON"}, {}, 0x1d0f, {}},
      {"INFERENTIA1", types::kAwsNeuronCore, "aws", "neuron_cores", {"AWS-INFERENTIA1", "INF1", "INFERENTIA"}, {{"inferentia1"}, {"inferentia"}}, 0x1d0f, {0x7064, 0x7065, 0x7066, 0x7067}},
      {types::kTrainium1, types::kAwsNeuronCore, "aws", "neuron_cores", {"AWS-TRAINIUM1", "TRN1", "TRAINIUM"}, {{"trainium1"}, {"trainium"}}, 0x1d0f, {0x7164}},
      {types::kInferentia2, types::kAwsNeuronCore, "aws", "neuron_cores", {"AWS-INFERENTIA2", "INF2"}, {{"inferentia2"}}, 0x1d0f, {0x7264}},
      {types::kTrainium2, types::kAwsNeuronCore, "aws", "neuron_cores", {"AWS-TRAINIUM2", "TRN2"}, {{"trainium2"}}, 0x1d0f, {0x7364}},
      // Huawei Ascend (0xd803 is the Atlas A3 part, "910_93", sold as 910C).
      // The 910B is sold as 910B1 to 910B4 (the B4 with half the memory);
      // the PCI id does not tell them apart.
      {"ASCEND310", "", "huawei", "NPU", {"ASCEND-310"}, {{"ascend310"}, {"ascend", "310"}}, 0x19e5, {0xd100}},
      {"ASCEND910", "", "huawei", "NPU", {"ASCEND-910"}, {{"ascend910"}, {"ascend", "910"}}, 0x19e5, {0xd801}},
      {types::kAscend910B, "", "huawei", "NPU", {"ASCEND-910B"}, {{"ascend910b"}, {"ascend", "910b"}}, 0x19e5, {0xd802}},
      {"ASCEND910B1", types::kAscend910B, "huawei", "NPU", {"ASCEND-910B1"}, {{"ascend910b1"}, {"ascend", "910b1"}}, 0x19e5, {}},
      {"ASCEND910B2", types::kAscend910B, "huawei", "NPU", {"ASCEND-910B2"}, {{"ascend910b2"}, {"ascend", "910b2"}}, 0x19e5, {}},
      {"ASCEND910B3", types::kAscend910B, "huawei", "NPU", {"ASCEND-910B3"}, {{"ascend910b3"}, {"ascend", "910b3"}}, 0x19e5, {}},
      {"ASCEND910B4", types::kAscend910B, "huawei", "NPU", {"ASCEND-910B4"}, {{"ascend910b4"}, {"ascend", "910b4"}}, 0x19e5, {}},
      {"ASCEND910C", "", "huawei", "NPU", {"ASCEND-910C"}, {{"ascend910c"}, {"ascend", "910c"}}, 0x19e5, {0xd803}},
      {"ASCEND310P", "", "huawei", "NPU", {"ASCEND-310P"}, {{"ascend310p"}, {"ascend", "310p"}}, 0x19e5, {0xd500}},
  };
  return kTable;
}

std::vector<std::string> words(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      cur += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!cur.empty()) {
      out.push_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

// Whether the pattern's words appear among `hay` in order (not necessarily
// next to each other: "A100-SXM4-80GB" and "A100 80GB PCIe" both hold
// "a100" then "80gb").
bool contains_words(const std::vector<std::string>& hay, const std::vector<std::string_view>& pat) {
  if (pat.empty() || pat.size() > hay.size()) return false;
  size_t j = 0;
  for (size_t i = 0; i < hay.size() && j < pat.size(); ++i) {
    if (hay[i] == pat[j]) ++j;
  }
  return j == pat.size();
}

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

const TypeRow* find_row(std::string_view name) {
  for (const auto& r : table()) {
    if (iequal(r.name, name)) return &r;
    for (auto a : r.aliases) {
      if (iequal(a, name)) return &r;
    }
  }
  return nullptr;
}

// The row whose model patterns a model string matches; the longest
// matching pattern wins, so "GH200" is not H200, "Ascend910B" is not
// Ascend910 and "A100-SXM4-80GB" is the 80 GB variant, not just an A100.
const TypeRow* find_model(std::string_view model) {
  const std::vector<std::string> w = words(model);
  const TypeRow* best = nullptr;
  size_t best_len = 0;
  for (const auto& r : table()) {
    for (const auto& pat : r.models) {
      size_t len = 0;
      for (auto p : pat) len += p.size();
      if (len > best_len && contains_words(w, pat)) {
        best = &r;
        best_len = len;
      }
    }
  }
  return best;
}

}  // namespace

const std::vector<AcceleratorType>& accelerator_types() {
  static const std::vector<AcceleratorType> kTypes = [] {
    std::vector<AcceleratorType> out;
    for (const auto& r : table()) {
      AcceleratorType t{std::string(r.name), std::string(r.vendor), std::string(r.resource), {}, std::string(r.family)};
      for (auto a : r.aliases) t.aliases.emplace_back(a);
      out.push_back(std::move(t));
    }
    return out;
  }();
  return kTypes;
}

namespace {
// The canonical name of a name, alias or model string the table knows; "".
std::string known_type(std::string_view t) {
  if (const TypeRow* r = find_row(t)) return std::string(r->name);
  if (const TypeRow* r = find_model(t)) return std::string(r->name);
  return {};
}
}  // namespace

std::string canonical_type(std::string_view name) {
  std::string t = internal::trim(name);
  std::string known = known_type(t);
  // Unknown: kept as written, so distinct names stay distinct
  // ("a3-highgpu-8g" is not "A3"); matching is case-insensitive.
  return known.empty() ? t : known;
}

std::string type_from_model(std::string_view model) {
  std::string t = internal::trim(model);
  if (t.empty()) return t;
  if (std::string known = known_type(t); !known.empty()) return known;
  // Unknown: keep it readable ("NVIDIA GeForce RTX 4090" → "GEFORCE-RTX-4090").
  std::vector<std::string> parts = words(t);
  static constexpr std::string_view kDrop[] = {"nvidia", "amd", "intel", "r", "tm", "corporation"};
  std::string out;
  for (const auto& p : parts) {
    if (std::find(std::begin(kDrop), std::end(kDrop), p) != std::end(kDrop) && parts.size() > 1) continue;
    if (!out.empty()) out += '-';
    out += internal::upper(p);
    // The model number ends the name; what follows is packaging ("Dual-Slot ...").
    if (std::any_of(p.begin(), p.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) break;
  }
  return out.empty() ? internal::upper(t) : out;
}

std::string refine_type(std::string_view known, std::string_view model) {
  std::string m = type_from_model(model);
  if (m.empty()) return std::string(known);
  // "NVIDIA H200" names the family; the PCI id already said which variant.
  if (!known.empty() && iequal(type_family(known), m)) return std::string(known);
  return m;
}

std::string type_family(std::string_view type) {
  const TypeRow* r = find_row(type);
  if (r == nullptr) return std::string(type);
  return std::string(r->family.empty() ? r->name : r->family);
}

bool type_matches(std::string_view host_type, std::string_view requested) {
  if (internal::trim(host_type).empty()) return false;
  const std::string want = canonical_type(requested);
  const std::string have = canonical_type(host_type);
  if (iequal(have, want)) return true;
  // A request without the variant ("A100", "aws-neuron-core") is met by
  // every variant; a variant is met only by itself.
  const TypeRow* h = find_row(have);
  return h != nullptr && !h->family.empty() && iequal(h->family, want);
}

std::string vendor_of_type(std::string_view type) {
  const TypeRow* r = find_row(type);
  return r ? std::string(r->vendor) : std::string();
}

std::string resource_of_type(std::string_view type) {
  const TypeRow* r = find_row(type);
  return r ? std::string(r->resource) : std::string();
}

std::string type_from_pci(unsigned vendor_id, unsigned device_id) {
  for (const auto& r : table()) {
    if (r.pci_vendor != vendor_id) continue;
    if (std::find(r.pci_devices.begin(), r.pci_devices.end(), device_id) != r.pci_devices.end()) {
      return std::string(r.name);
    }
  }
  return {};
}

}  // namespace accrun::detect
