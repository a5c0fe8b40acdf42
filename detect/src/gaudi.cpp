// Intel Gaudi HPUs: PCI vendor 0x1da3 (0x1000 Gaudi, 0x1020 Gaudi2, 0x1060
// Gaudi3, and their variants in the type table).  Ids are module ids, which
// is what HABANA_VISIBLE_MODULES names: the habanalabs driver's module_id
// attribute, which /sys/class/accel/accel<N>/device/module_id reaches and so
// lives in the PCI device's own directory (the PCI order where absent, as
// with drivers older than the attribute).
#include <algorithm>
#include <cstdio>

#include "internal.hpp"

namespace accrun::detect::internal {
namespace {

constexpr unsigned kHabana = 0x1da3;

class GaudiProvider final : public ProviderBase {
 public:
  std::string_view vendor() const override { return "habana"; }
  std::string_view resource() const override { return "HPU"; }
  std::string_view visible_variable() const override { return "HABANA_VISIBLE_MODULES"; }
  bool fractional() const override { return false; }
  Status validate_quantity(Quantity q) const override { return validate_request("HPU", q); }

  Result<Found> detect_scan(const HostScan& scan) const override {
    Found found;
    int index = 0;
    for (const PciDevice& d : scan.pci) {
      if (d.vendor != kHabana) continue;
      std::string type = type_from_pci(d.vendor, d.device);
      if (type.empty()) {
        // Another Habana processing accelerator: counted, with a readable
        // name rather than a Gaudi generation it may not be.
        if (d.base_class() != 0x12) continue;
        char buf[24];
        std::snprintf(buf, sizeof buf, "HABANA-%04X", d.device);
        type = buf;
      }
      int id = index++;
      if (auto m = scan.root.read(d.dir + "/module_id")) {
        if (auto v = parse_int(*m)) id = *v;
      }
      found.accelerators.push_back(accelerator_from_pci(d, "HPU", "habana", id, type));
    }
    std::sort(found.accelerators.begin(), found.accelerators.end(),
              [](const Accelerator& a, const Accelerator& b) { return a.id < b.id; });
    return found;
  }

  void set_visible(const std::vector<int>& ids, const Env&, Env& env) const override {
    env["HABANA_VISIBLE_MODULES"] = join_ids(ids);
  }
};

}  // namespace

std::unique_ptr<ProviderBase> make_gaudi_provider() { return std::make_unique<GaudiProvider>(); }

}  // namespace accrun::detect::internal
