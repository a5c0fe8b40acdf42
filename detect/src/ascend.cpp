// Huawei Ascend NPUs: PCI vendor 0x19e5 with the processing-accelerator
// class 0x1200 (Huawei NICs share the vendor id), numbered by their
// /dev/davinci<N> nodes (not davinci_manager).  Device ids: 0xd100 Ascend
// 310, 0xd500 310P, 0xd801 910, 0xd802 910B, 0xd803 the A3 part (910C).
// Devices and nodes are joined in order, on the assumption that the driver
// numbers NPUs in PCI order (no public source says otherwise or confirms it).
#include <algorithm>
#include <cstdio>

#include "internal.hpp"

namespace accrun::detect::internal {
namespace {

constexpr unsigned kHuawei = 0x19e5;

class AscendProvider final : public ProviderBase {
 public:
  std::string_view vendor() const override { return "huawei"; }
  std::string_view resource() const override { return "NPU"; }
  std::string_view visible_variable() const override { return "ASCEND_RT_VISIBLE_DEVICES"; }
  bool fractional() const override { return true; }
  Status validate_quantity(Quantity q) const override { return validate_request("NPU", q); }

  Result<Found> detect_scan(const HostScan& scan) const override {
    std::vector<const PciDevice*> pci;
    for (const PciDevice& d : scan.pci) {
      if (d.vendor == kHuawei && d.class_id() == 0x1200) pci.push_back(&d);
    }
    std::vector<int> nodes;
    for (const std::string& n : scan.root.list("/dev")) {
      if (n.rfind("davinci", 0) == 0 && n.size() > 7) {
        if (auto v = parse_int(std::string_view(n).substr(7))) nodes.push_back(*v);
      }
    }
    std::sort(nodes.begin(), nodes.end());
    Found found;
    if (pci.empty()) return found;  // device nodes alone may be stale; PCI says what is there
    for (size_t i = 0; i < pci.size(); ++i) {
      const PciDevice& d = *pci[i];
      int id = nodes.size() == pci.size() ? nodes[i] : static_cast<int>(i);
      std::string type = type_from_pci(d.vendor, d.device);
      if (type.empty()) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "ASCEND-%04X", d.device);
        type = buf;
      }
      found.accelerators.push_back(accelerator_from_pci(d, "NPU", "huawei", id, type));
    }
    return found;
  }

  void set_visible(const std::vector<int>& ids, const Env&, Env& env) const override {
    env["ASCEND_RT_VISIBLE_DEVICES"] = join_ids(ids);
  }
};

}  // namespace

std::unique_ptr<ProviderBase> make_ascend_provider() { return std::make_unique<AscendProvider>(); }

}  // namespace accrun::detect::internal
