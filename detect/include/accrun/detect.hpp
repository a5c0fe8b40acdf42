// accrun/detect.hpp — the detection stage: accelerator providers, the
// resource and type tables, and the host Inventory (DESIGN.md §3–4).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "accrun/inventory.hpp"
#include "accrun/quantity.hpp"
#include "accrun/status.hpp"

namespace accrun::detect {

// An environment as a sorted map of variable → value.
using Env = std::map<std::string, std::string>;

// What detection reads.  Built once from the process environment and the
// command line; nothing below reads getenv() itself.
struct DetectConfig {
  std::string sysfs_root = "/";       // ACCRUN_SYSFS_ROOT: prefix for /sys, /proc and /dev
  std::optional<std::string> topology_xml;  // --topology or HWLOC_XMLFILE
  Env environment;                    // the environment accrun started with
  // Logical overrides (`ray start` style).
  std::optional<int> num_gpus;        // --num-gpus N
  std::vector<std::pair<std::string, Quantity>> resources;  // --resources NAME=Q,...
  std::optional<std::string> host_accelerator_type;         // --host-accelerator-type T
  std::optional<std::string> hostname;  // defaults to gethostname()
  std::string nvml_library = "libnvidia-ml.so.1";  // the NVML soname to dlopen (tests point it at a fake)

  // Reads ACCRUN_SYSFS_ROOT, HWLOC_XMLFILE and the whole environment.
  static DetectConfig from_environment(char** envp);
};

// An accelerator vendor, shaped like Ray's AcceleratorManager.
class Provider {
 public:
  virtual ~Provider() = default;
  virtual std::string_view vendor() const = 0;            // "nvidia"
  virtual std::string_view resource() const = 0;          // "GPU"
  virtual std::string_view visible_variable() const = 0;  // "CUDA_VISIBLE_DEVICES"
  virtual bool fractional() const = 0;                    // whether 0 < q < 1 is allowed
  // Checks one rank's request of this resource; the message states the rule.
  virtual Status validate_quantity(Quantity q) const = 0;
  // Finds this vendor's devices on the host described by `config`; an
  // empty vector when the vendor is absent.
  virtual Result<std::vector<Accelerator>> detect(const DetectConfig& config) const = 0;
  // Sets in `env` what a rank that holds `ids` (original ids, in the order
  // given) needs, composing with `inherited` where the vendor requires it.
  virtual void set_visible(const std::vector<int>& ids, const Env& inherited, Env& env) const = 0;
};

// Providers in priority order (the first vendor with devices for a resource wins).
const std::vector<std::unique_ptr<Provider>>& providers();
// The provider of a vendor name, or null.
const Provider* provider_for_vendor(std::string_view vendor);

// The resource names: "GPU", "TPU", "HPU", "NPU", "neuron_cores".
const std::vector<std::string>& resource_names();
// Case-insensitive lookup of a resource name; the error names the known ones.
Result<std::string> canonical_resource(std::string_view name);
// Checks a per-rank quantity of a resource (fractions, whole, TPU 1/2/4/8).
Status validate_request(std::string_view resource, Quantity q);
// Canonical accelerator type for a model string or alias ("NVIDIA H100 80GB
// HBM3" → "H100", "AMD-Instinct-MI300X-OAM" → "MI300X"); unknown names come
// back upper-cased and readable rather than failing.
std::string canonical_type(std::string_view name);
// The vendor that makes a canonical type, or empty if unknown.
std::string vendor_of_type(std::string_view type);

// Detects this host: topology, every provider, visible-device restrictions,
// overrides, labels.  Fails on malformed input (a bad visible-devices value,
// an unknown resource name in an override).
Result<Inventory> detect_host(const DetectConfig& config);

// `accrun --detect` output: a readable table, and DESIGN.md §9's JSON.
std::string format_table(const std::vector<Inventory>& hosts);
std::string to_json(const std::vector<Inventory>& hosts);
Result<std::vector<Inventory>> from_json(std::string_view json);

}  // namespace accrun::detect
