// AWS Neuron (Inferentia, Trainium): one accelerator per NeuronCore.
//
// What the aws-neuron driver shows (aws-neuron-driver: neuron_pci.c,
// neuron_cdev.c; the Neuron sysfs user guide):
//  - its PCI functions, vendor 0x1d0f, bound to the driver named
//    "neuron-driver" (EFA and ENA NICs share the vendor id: they are told
//    apart by device id and driver);
//  - one class device per Neuron device, /sys/devices/virtual/neuron_device/
//    neuron<N>, with no link to its PCI function, holding core_count (the
//    physical NeuronCores per device; mode 0400, so only root reads it).
// Device numbers follow the PCI probe order on Inferentia1 only; later
// devices take theirs from the hardware routing id, so neuron<N> cannot be
// joined to a PCI function by position.  Cores therefore carry a PCI address
// only when the pairing is certain (Inferentia1, or a single device), and a
// NUMA node and CPUs when every Neuron function shares them.
//
// Core ids are global, device 0's cores first, as NEURON_RT_VISIBLE_CORES
// counts them.  On Trainium2 the runtime groups physical cores into logical
// ones (NEURON_LOGICAL_NC_CONFIG, 2 by default there: neuron-ls reports 4
// cores per device), and the visible-cores ids count logical cores.
#include <algorithm>

#include "internal.hpp"

namespace accrun::detect::internal {
namespace {

constexpr unsigned kAmazon = 0x1d0f;
constexpr std::string_view kLncVar = "NEURON_LOGICAL_NC_CONFIG";

// Physical NeuronCores per device when core_count cannot be read.
int default_physical_cores(const std::string& type) {
  if (type == "INFERENTIA1") return 4;
  if (type == "TRAINIUM2") return 8;
  return 2;  // Trainium1, Inferentia2
}

bool is_neuron_function(const PciDevice& d) {
  if (d.vendor != kAmazon) return false;
  return d.driver == "neuron-driver" || resource_of_type(type_from_pci(d.vendor, d.device)) == "neuron_cores";
}

class NeuronProvider final : public ProviderBase {
 public:
  std::string_view vendor() const override { return "aws"; }
  std::string_view resource() const override { return "neuron_cores"; }
  std::string_view visible_variable() const override { return "NEURON_RT_VISIBLE_CORES"; }
  bool fractional() const override { return false; }
  Status validate_quantity(Quantity q) const override { return validate_request("neuron_cores", q); }

  Result<Found> detect_scan(const HostScan& scan) const override {
    std::vector<const PciDevice*> pci;
    for (const PciDevice& d : scan.pci) {
      if (is_neuron_function(d)) pci.push_back(&d);
    }
    const std::string kDevices = "/sys/devices/virtual/neuron_device";
    std::vector<int> devs;
    for (const std::string& n : scan.root.list(kDevices)) {
      if (n.rfind("neuron", 0) == 0) {
        if (auto v = parse_int(std::string_view(n).substr(6))) devs.push_back(*v);
      }
    }
    std::sort(devs.begin(), devs.end());
    Found found;
    const size_t count = devs.empty() ? pci.size() : devs.size();
    if (count == 0) return found;

    // A host is homogeneous: its type is its Neuron functions' type.
    std::string type = pci.empty() ? std::string() : type_from_pci(pci.front()->vendor, pci.front()->device);
    if (type.empty()) type = types::kAwsNeuronCore;

    int lnc = 1;
    if (type == "TRAINIUM2") {
      lnc = 2;
      const Env& env = scan.config->environment;
      if (auto it = env.find(std::string(kLncVar)); it != env.end()) {
        std::string v = trim(it->second);
        if (v != "1" && v != "2") {
          return invalid_argument(it->first + "=" + it->second +
                                  ": expected 1 or 2 (physical NeuronCores per logical core)");
        }
        lnc = v == "1" ? 1 : 2;
      }
    }

    // The pairing of device numbers with PCI functions, where it is certain.
    const bool paired = pci.size() == count && (count == 1 || type == "INFERENTIA1");
    // Locality every Neuron function shares, when they all agree.
    std::optional<int> common_numa;
    std::optional<std::string> common_cpus;
    if (!pci.empty() && std::all_of(pci.begin(), pci.end(), [&](const PciDevice* p) {
          return p->numa == pci.front()->numa && p->cpus == pci.front()->cpus;
        })) {
      common_numa = pci.front()->numa;
      common_cpus = pci.front()->cpus;
    }

    int core = 0;
    for (size_t i = 0; i < count; ++i) {
      int physical = default_physical_cores(type);
      if (!devs.empty()) {
        std::string file = kDevices + "/neuron" + std::to_string(devs[i]) + "/core_count";
        if (auto c = scan.root.read(file)) {
          if (auto v = parse_int(*c); v && *v > 0) physical = *v;
        }
      }
      const int cores = std::max(1, physical / lnc);
      for (int k = 0; k < cores; ++k) {
        Accelerator a;
        if (paired) {
          a = accelerator_from_pci(*pci[i], "neuron_cores", "aws", core, type);
        } else {
          a.numa = common_numa;
          a.cpus = common_cpus;
        }
        a.resource = "neuron_cores";
        a.vendor = "aws";
        a.id = core;
        a.type = type;
        found.accelerators.push_back(std::move(a));
        ++core;
      }
    }
    return found;
  }

  // NEURON_RT_VISIBLE_CORES takes ranges ("0-3") as well as lists.
  Result<std::vector<Accelerator>> restrict_visible(std::vector<Accelerator> accs, const Env& env) const override {
    if (accs.empty()) return accs;
    auto it = env.find("NEURON_RT_VISIBLE_CORES");
    if (it == env.end()) return accs;
    auto ids = parse_cpulist(it->second);
    if (!ids) {
      return invalid_argument(it->first + "=" + it->second +
                              ": expected core ids and ranges such as 0-3 or 0,2,4");
    }
    return restrict_by_list(std::move(accs), it->first, join_ids(*ids), "neuron core");
  }

  void set_visible(const std::vector<int>& ids, const Env&, Env& env) const override {
    env["NEURON_RT_VISIBLE_CORES"] = join_ids(ids);
  }
};

}  // namespace

std::unique_ptr<ProviderBase> make_neuron_provider() { return std::make_unique<NeuronProvider>(); }

}  // namespace accrun::detect::internal
