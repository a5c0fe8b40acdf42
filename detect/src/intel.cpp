// Intel GPUs: PCI sysfs, vendor 0x8086, display class, driver i915 or xe
// (the chipset, NICs and other Intel functions are not GPUs).  Ids are Level
// Zero device indexes, which follow PCI order.
#include <algorithm>
#include <cstdio>

#include "internal.hpp"

namespace accrun::detect::internal {
namespace {

constexpr unsigned kIntel = 0x8086;
constexpr std::string_view kVar = "ONEAPI_DEVICE_SELECTOR";

class IntelProvider final : public ProviderBase {
 public:
  std::string_view vendor() const override { return "intel"; }
  std::string_view resource() const override { return "GPU"; }
  std::string_view visible_variable() const override { return kVar; }
  bool fractional() const override { return true; }
  Status validate_quantity(Quantity q) const override { return validate_request("GPU", q); }

  Result<Found> detect_scan(const HostScan& scan) const override {
    Found found;
    for (const PciDevice& d : scan.pci) {
      if (d.vendor != kIntel || d.base_class() != 0x03) continue;
      if (d.driver != "i915" && d.driver != "xe") continue;
      std::string type = type_from_pci(d.vendor, d.device);
      if (type.empty()) {
        char buf[24];
        std::snprintf(buf, sizeof buf, "INTEL-GPU-%04X", d.device);
        type = buf;
      }
      found.accelerators.push_back(
          accelerator_from_pci(d, "GPU", "intel", static_cast<int>(found.accelerators.size()), type));
    }
    return found;
  }

  // ONEAPI_DEVICE_SELECTOR is "backend:devices[;backend:devices]".  Terms for
  // level_zero or '*' restrict; other backends (opencl, cuda) do not touch
  // Level Zero GPUs.  Sub-devices ("0.1") count as their root device.
  Result<std::vector<Accelerator>> restrict_visible(std::vector<Accelerator> accs, const Env& env) const override {
    if (accs.empty()) return accs;
    auto it = env.find(std::string(kVar));
    if (it == env.end()) return accs;
    const std::string shown = it->first + "=" + it->second;
    std::vector<int> ids;
    bool any_term = false;
    bool all = false;
    for (const std::string& raw : split(it->second, ';')) {
      std::string term = lower(trim(raw));
      if (term.empty()) continue;
      if (term[0] == '!') {
        return not_supported(shown + ": negative selectors ('!') are not supported; list the devices to keep");
      }
      auto colon = term.find(':');
      if (colon == std::string::npos) {
        return invalid_argument(shown + ": '" + term + "' is not backend:devices (for example level_zero:0,1)");
      }
      std::string backend = term.substr(0, colon);
      if (backend != "level_zero" && backend != "*") continue;
      any_term = true;
      for (const std::string& dev_raw : split(term.substr(colon + 1), ',')) {
        std::string dev = trim(dev_raw);
        if (dev == "*" || dev == "gpu") { all = true; continue; }
        std::string root = dev.substr(0, dev.find('.'));
        auto id = parse_int(root);
        if (!id) return invalid_argument(shown + ": '" + dev + "' is not a device index, '*' or 'gpu'");
        ids.push_back(*id);
      }
    }
    if (!any_term || all) return accs;
    return restrict_by_list(std::move(accs), it->first, join_ids(ids), "GPU");
  }

  void set_visible(const std::vector<int>& ids, const Env&, Env& env) const override {
    env[std::string(kVar)] = "level_zero:" + join_ids(ids);
  }
};

}  // namespace

std::unique_ptr<ProviderBase> make_intel_provider() { return std::make_unique<IntelProvider>(); }

}  // namespace accrun::detect::internal
