// NVIDIA GPUs: PCI sysfs (vendor 0x10de, display/3D class, driver nvidia),
// /proc/driver/nvidia/gpus/<bdf>/information for model and UUID, and NVML
// (dlopen, optional) for name, UUID and the NVLink fabric clique.
#include <algorithm>

#include "internal.hpp"

namespace accrun::detect::internal {
namespace {

constexpr unsigned kNvidia = 0x10de;

// "Model: \t NVIDIA H100 80GB HBM3" → "NVIDIA H100 80GB HBM3".
std::optional<std::string> field(const std::string& text, std::string_view key) {
  for (const std::string& line : split(text, '\n')) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (trim(line.substr(0, colon)) == key) return trim(line.substr(colon + 1));
  }
  return std::nullopt;
}

class NvidiaProvider final : public ProviderBase {
 public:
  std::string_view vendor() const override { return "nvidia"; }
  std::string_view resource() const override { return "GPU"; }
  std::string_view visible_variable() const override { return "CUDA_VISIBLE_DEVICES"; }
  bool fractional() const override { return true; }
  Status validate_quantity(Quantity q) const override { return validate_request("GPU", q); }

  Result<Found> detect_scan(const HostScan& scan) const override {
    Found found;
    auto& gpus = found.accelerators;
    for (const PciDevice& d : scan.pci) {
      if (d.vendor != kNvidia || (d.class_id() != 0x0300 && d.class_id() != 0x0302)) continue;
      if (d.driver != "nvidia") continue;
      // Ids follow PCI order: CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA agree.
      Accelerator a = accelerator_from_pci(d, "GPU", "nvidia", static_cast<int>(gpus.size()),
                                           type_from_pci(d.vendor, d.device));
      if (auto info = scan.root.read("/proc/driver/nvidia/gpus/" + d.bdf + "/information")) {
        if (auto model = field(*info, "Model")) a.type = refine_type(a.type, *model);
        if (auto uuid = field(*info, "GPU UUID"); uuid && !uuid->empty()) a.uuid = *uuid;
      }
      if (a.type.empty()) a.type = "NVIDIA-" + upper(hex(d.device));
      gpus.push_back(std::move(a));
    }
    auto nvml = query_nvml(scan.config->nvml_library);
    if (!nvml) return found;
    if (gpus.empty()) {
      // No sysfs view (a container without /sys/bus/pci): NVML's list, in PCI order.
      std::sort(nvml->begin(), nvml->end(), [](const NvmlGpu& a, const NvmlGpu& b) { return a.pci < b.pci; });
      for (const NvmlGpu& g : *nvml) {
        Accelerator a;
        a.resource = "GPU";
        a.vendor = "nvidia";
        a.id = static_cast<int>(gpus.size());
        a.pci = g.pci;
        gpus.push_back(std::move(a));
      }
    }
    for (Accelerator& a : gpus) {
      auto it = std::find_if(nvml->begin(), nvml->end(), [&](const NvmlGpu& g) { return a.pci && g.pci == *a.pci; });
      if (it == nvml->end()) continue;
      if (!it->name.empty()) a.type = refine_type(a.type, it->name);
      if (!it->uuid.empty()) a.uuid = it->uuid;
      // The host's GPUs share one NVLink domain; the first reported names it.
      if (it->clique && !found.pod) found.pod = *it->clique;
    }
    return found;
  }

  void set_visible(const std::vector<int>& ids, const Env&, Env& env) const override {
    env["CUDA_VISIBLE_DEVICES"] = join_ids(ids);
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
  }

 private:
  static std::string hex(unsigned v) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string s;
    for (int shift = 12; shift >= 0; shift -= 4) s += kDigits[(v >> shift) & 0xf];
    return s;
  }
};

}  // namespace

std::unique_ptr<ProviderBase> make_nvidia_provider() { return std::make_unique<NvidiaProvider>(); }

}  // namespace accrun::detect::internal
