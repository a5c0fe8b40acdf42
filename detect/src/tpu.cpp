// Google TPU chips: PCI vendor 0x1ae0 with a TPU device id or the
// processing-accelerator class (gVNIC shares the vendor id and is a NIC),
// or — with no PCI view — the chips' device files when the TPU environment
// says this is a TPU VM: /dev/accel<N> (v2 to v4) or /dev/vfio/<group>
// (v5e, v5p, v6e, which are bound to vfio-pci).  Type from
// TPU_ACCELERATOR_TYPE ("v5p-16" → TPU-V5P) or the PCI device id; v2 and v3
// share device id 0x0027 and differ by the subsystem device id.
#include <algorithm>

#include "internal.hpp"

namespace accrun::detect::internal {
namespace {

constexpr unsigned kGoogle = 0x1ae0;
constexpr unsigned kTpuV2V3 = 0x0027;

// The chip's type from its PCI ids; "" when they are not a known TPU.
std::string tpu_type(const HostScan& scan, const PciDevice& d) {
  if (d.device != kTpuV2V3) return type_from_pci(d.vendor, d.device);
  auto sub = scan.root.read(d.dir + "/subsystem_device");
  auto id = sub ? parse_hex(*sub) : std::nullopt;
  if (id == 0x004eu) return "TPU-V2";
  if (id == 0x004fu) return "TPU-V3";
  return "TPU";  // a v2/v3 chip whose generation the subsystem id does not say
}

class TpuProvider final : public ProviderBase {
 public:
  std::string_view vendor() const override { return "google"; }
  std::string_view resource() const override { return "TPU"; }
  std::string_view visible_variable() const override { return "TPU_VISIBLE_CHIPS"; }
  bool fractional() const override { return false; }
  Status validate_quantity(Quantity q) const override { return validate_request("TPU", q); }

  Result<Found> detect_scan(const HostScan& scan) const override {
    const Env& env = scan.config->environment;
    std::string env_type;
    if (auto it = env.find("TPU_ACCELERATOR_TYPE"); it != env.end() && !trim(it->second).empty()) {
      std::string gen = trim(it->second);
      gen = gen.substr(0, gen.find('-'));  // "v5litepod-16" → "v5litepod"
      env_type = canonical_type(gen);
      if (resource_of_type(env_type) != "TPU") env_type = "TPU-" + upper(gen);
    }
    Found found;
    for (const PciDevice& d : scan.pci) {
      if (d.vendor != kGoogle) continue;
      std::string pci_type = tpu_type(scan, d);
      if (pci_type.empty() && d.base_class() != 0x12) continue;
      std::string type = !env_type.empty() ? env_type : !pci_type.empty() ? pci_type : "TPU";
      found.accelerators.push_back(
          accelerator_from_pci(d, "TPU", "google", static_cast<int>(found.accelerators.size()), type));
    }
    if (!found.accelerators.empty() || env_type.empty()) return found;
    // No PCI view (a container): count the chips' device files.
    std::vector<int> chips;
    for (const std::string& n : scan.root.list("/dev")) {
      if (n.rfind("accel", 0) == 0 && n.size() > 5) {
        if (auto v = parse_int(std::string_view(n).substr(5))) chips.push_back(*v);
      }
    }
    if (chips.empty()) {
      for (const std::string& n : scan.root.list("/dev/vfio")) {
        if (auto v = parse_int(n)) chips.push_back(*v);
      }
    }
    std::sort(chips.begin(), chips.end());
    for (size_t i = 0; i < chips.size(); ++i) {
      Accelerator a;
      a.resource = "TPU";
      a.vendor = "google";
      a.id = static_cast<int>(i);
      a.type = env_type;
      found.accelerators.push_back(std::move(a));
    }
    return found;
  }

  // Without the host's chip count: one or two chips are always a split host
  // (TPU hosts have 4 or 8 chips).
  void set_visible(const std::vector<int>& ids, const Env& inherited, Env& env) const override {
    set_visible(ids, ids.size() <= 2 ? 8 : static_cast<int>(ids.size()), inherited, env);
  }

  // A rank holding part of a host's chips runs as a one-host slice of its
  // own: the bounds say so.  TPU_MESH_CONTROLLER_PORT, distinct per process,
  // is set by the planner, which knows the ports it hands out.
  void set_visible(const std::vector<int>& ids, int host_count, const Env&, Env& env) const override {
    env["TPU_VISIBLE_CHIPS"] = join_ids(ids);
    if (static_cast<int>(ids.size()) >= host_count) return;
    const char* bounds = ids.size() == 1 ? "1,1,1" : ids.size() == 2 ? "1,2,1" : "2,2,1";
    env["TPU_CHIPS_PER_HOST_BOUNDS"] = bounds;
    env["TPU_HOST_BOUNDS"] = "1,1,1";
  }
};

}  // namespace

std::unique_ptr<ProviderBase> make_tpu_provider() { return std::make_unique<TpuProvider>(); }

}  // namespace accrun::detect::internal
