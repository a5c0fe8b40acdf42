// Private helpers of the detection stage: reads under the sysfs root, the
// PCI scan, id-list parsing, and the base class every provider derives from.
#pragma once

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "accrun/detect.hpp"

namespace accrun::detect::internal {

// Every read of /sys, /proc and /dev goes through one root prefix.
class SysRoot {
 public:
  explicit SysRoot(std::string root);
  // root + abs ("/sys/bus/pci" under "/tmp/x" → "/tmp/x/sys/bus/pci").
  std::string path(std::string_view abs) const;
  // The file's content with surrounding whitespace trimmed, or nullopt.
  std::optional<std::string> read(std::string_view abs) const;
  // Entry names of a directory, sorted; empty when it does not exist.
  std::vector<std::string> list(std::string_view abs) const;
  bool exists(std::string_view abs) const;
  // The last component of a symbolic link's target ("…/drivers/nvidia" → "nvidia").
  std::optional<std::string> link_name(std::string_view abs) const;

 private:
  std::string root_;  // without a trailing slash; "" for "/"
};

// One PCI function as sysfs shows it.
struct PciDevice {
  std::string bdf;            // "0000:3b:00.0" (lower case)
  unsigned vendor = 0;        // 0x10de
  unsigned device = 0;        // 0x2330
  unsigned class_code = 0;    // 24 bits: 0x030200
  std::string driver;         // bound driver name, "" if none
  std::optional<int> numa;    // numa_node, absent when -1 or missing
  std::optional<std::string> cpus;  // local_cpulist, normalised
  std::string dir;            // "/sys/bus/pci/devices/<bdf>" (relative to the root)

  unsigned base_class() const { return class_code >> 16; }
  unsigned class_id() const { return class_code >> 8; }  // 0x0302
};

// Everything providers share from one look at the host.
struct HostScan {
  const DetectConfig* config = nullptr;
  SysRoot root{"/"};
  std::vector<PciDevice> pci;  // sorted by bdf
};

HostScan scan_host(const DetectConfig& config);
std::vector<PciDevice> scan_pci(const SysRoot& root);

// Parses a non-negative decimal integer; nullopt when not one.
std::optional<int> parse_int(std::string_view text);
// Parses "0x10de" / "10de".
std::optional<unsigned> parse_hex(std::string_view text);
std::string trim(std::string_view s);
std::string lower(std::string_view s);
std::string upper(std::string_view s);
std::vector<std::string> split(std::string_view s, char sep);

// An accelerator for a PCI device, with its locality from sysfs.
Accelerator accelerator_from_pci(const PciDevice& dev, std::string_view resource,
                                 std::string_view vendor, int id, std::string type);

// What a provider found: devices and, where the vendor says, the pod label
// (an NVLink clique).
struct Found {
  std::vector<Accelerator> accelerators;
  std::optional<std::string> pod;
};

// Shared implementation of every provider.
class ProviderBase : public Provider {
 public:
  Result<std::vector<Accelerator>> detect(const DetectConfig& config) const final {
    auto found = detect_scan(scan_host(config));
    if (!found) return found.status();
    return std::move(found->accelerators);
  }
  // Detection from an existing scan (detect_host scans once for all).
  virtual Result<Found> detect_scan(const HostScan& scan) const = 0;
  // Keeps the devices an inherited visible-devices variable allows (ids or
  // UUIDs, or a unique UUID prefix), with their original ids.  Malformed
  // values are errors naming the variable.  `accs` are this provider's
  // devices; with none, variables are not looked at.
  virtual Result<std::vector<Accelerator>> restrict_visible(std::vector<Accelerator> accs,
                                                            const Env& env) const;
  // The inherited variables restrict_visible reads, as "VAR=value" joined by
  // " and "; empty when none is set.
  virtual std::string mask_in(const Env& env) const;
};

// "VAR=value" for each of `vars` set in `env`, joined by " and ".
std::string set_variables(const Env& env, std::initializer_list<std::string_view> vars);

// Keeps the devices named by a comma list of ids/UUIDs in `value` of `var`.
Result<std::vector<Accelerator>> restrict_by_list(std::vector<Accelerator> accs,
                                                  std::string_view var, std::string_view value,
                                                  std::string_view noun);

// Factories, one per provider file.
std::unique_ptr<ProviderBase> make_nvidia_provider();
std::unique_ptr<ProviderBase> make_amd_provider();
std::unique_ptr<ProviderBase> make_intel_provider();
std::unique_ptr<ProviderBase> make_neuron_provider();
std::unique_ptr<ProviderBase> make_tpu_provider();
std::unique_ptr<ProviderBase> make_gaudi_provider();
std::unique_ptr<ProviderBase> make_ascend_provider();

// NVML facts about one GPU (nvml.cpp).
struct NvmlGpu {
  std::string pci;                   // normalised "0000:3b:00.0"
  std::string name;
  std::string uuid;
  std::optional<std::string> clique;  // NVLink fabric "<cluster uuid>.<clique id>"
};
// Loads `library` with dlopen and lists its GPUs; nullopt when it does not
// load or fails to initialise (NVML is optional).
std::optional<std::vector<NvmlGpu>> query_nvml(const std::string& library);

// hwloc topology (topology.cpp).
struct PciLocality {
  unsigned vendor = 0;
  unsigned device = 0;
  unsigned class_id = 0;            // 16 bits: 0x0302
  std::optional<int> numa;
  std::optional<std::string> cpus;
  std::string model;                // GPUModel of an OS device, else PCIDevice info
  std::optional<std::string> uuid;  // NVIDIAUUID / AMDUUID
};
struct Topology {
  int cpus = 0;
  int numa_nodes = 0;
  std::vector<Core> cores;
  bool from_xml = false;
  std::vector<std::pair<std::string, PciLocality>> pci;  // sorted by bus id
  const PciLocality* find(std::string_view bdf) const;
};
// Loads the host's topology: the XML file if one is configured, else this
// machine's.  On the real host, PCI locality (I/O discovery, the slow part of
// hwloc's load) is read only with `with_io`, for devices whose own sysfs
// entries lack it.
Result<Topology> load_topology(const DetectConfig& config, bool with_io = false);

}  // namespace accrun::detect::internal
