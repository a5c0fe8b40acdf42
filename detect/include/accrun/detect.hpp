// accrun/detect.hpp — the detection stage: accelerator providers, the
// resource and type tables, and the host Inventory (docs/design.md §3–4).
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
  std::string nvml_library = "libnvidia-ml.so.1";  // the NVML soname to dlopen (tests point it at a fake); "" disables NVML

  // Reads ACCRUN_SYSFS_ROOT, HWLOC_XMLFILE, ACCRUN_NVML_LIBRARY (a path or
  // soname replacing nvml_library) and the whole environment.  Never fails;
  // `envp` may be null (an empty environment).  Thread-safe.
  static DetectConfig from_environment(char** envp);
};

// An accelerator vendor, shaped like Ray's AcceleratorManager.  Providers
// are immutable singletons owned by providers(): every method is thread-safe.
// detect() blocks on reads under the sysfs root (and NVML start-up for
// NVIDIA); the others are pure.
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

  // As above, knowing that the host has `host_count` devices of this
  // resource, so a provider can tell a split host from a whole one (TPU:
  // TPU_CHIPS_PER_HOST_BOUNDS/TPU_HOST_BOUNDS are set only when a rank holds
  // fewer chips than the host has).  The default ignores host_count.
  // Never fails; thread-safe (providers are immutable).
  virtual void set_visible(const std::vector<int>& ids, int host_count, const Env& inherited,
                           Env& env) const {
    (void)host_count;
    set_visible(ids, inherited, env);
  }
};

// Providers in priority order (the first vendor with devices for a resource
// wins): nvidia, amd, intel (GPU), google (TPU), habana (HPU), huawei (NPU),
// aws (neuron_cores).  Built once; the pointers live for the program.
const std::vector<std::unique_ptr<Provider>>& providers();
// The provider of a vendor name (Accelerator::vendor), or null.  Not owned.
const Provider* provider_for_vendor(std::string_view vendor);

// The resource names: "GPU", "TPU", "HPU", "NPU", "neuron_cores".
const std::vector<std::string>& resource_names();
// Case-insensitive lookup of a resource name; the error names the known ones.
Result<std::string> canonical_resource(std::string_view name);
// Checks a per-rank quantity of a resource (fractions, whole, TPU 1/2/4/8).
Status validate_request(std::string_view resource, Quantity q);
// Canonical accelerator type of a name a user typed (--accelerator-type,
// --host-accelerator-type, accelerator_type= in a hostfile): a canonical
// name or alias, case-insensitively ("aws-neuron-core" → "AWS-NEURON-CORE",
// "AMD-Instinct-MI300X-OAM" → "MI300X"), or a vendor model string ("NVIDIA
// A100-SXM4-80GB" → "A100-80G").  Unknown names come back as written
// (trimmed), so distinct names never collide.  Pure; thread-safe.
std::string canonical_type(std::string_view name);
// Canonical type of a model string a device reports (NVML, /proc, hwloc):
// as canonical_type, but an unknown model is reduced to a readable name, its
// words upper-cased and joined by '-' up to its model number, without the
// vendor ("NVIDIA GeForce RTX 4090" → "GEFORCE-RTX-4090").  Pure.
std::string type_from_model(std::string_view model);
// `known` (from the PCI id, say "H200-SXM") refined by a reported model
// string: the model's type, unless it only names `known`'s family ("NVIDIA
// H200"), which would lose the variant.  Pure.
std::string refine_type(std::string_view known, std::string_view model);
// The family of a type: "A100" for "A100-80G", "AWS-NEURON-CORE" for
// "TRAINIUM2"; a type without variants (or unknown) is its own family.
std::string type_family(std::string_view type);
// Whether a host whose devices are of `host_type` meets a request for
// `requested` (both canonicalised): the same type, or a request that names
// the host type's family.  "A100" is met by A100-40G and A100-80G hosts;
// "A100-80G" only by A100-80G hosts (not by A100-40G, nor by an A100 of
// unknown size); "aws-neuron-core" by every Inferentia and Trainium host.
// Case-insensitive.  Pure; thread-safe.
bool type_matches(std::string_view host_type, std::string_view requested);
// The vendor that makes a canonical type, or empty if unknown.
std::string vendor_of_type(std::string_view type);

// One row of the accelerator type table (accrun(7) lists it).
struct AcceleratorType {
  std::string name;                  // canonical: "H100"
  std::string vendor;                // provider vendor: "nvidia"
  std::string resource;              // "GPU"
  std::vector<std::string> aliases;  // accepted spellings, Ray's strings among them
  std::string family;                // the type without the variant ("A100" for "A100-80G"); "" if none
};
// The whole table, in display order.  Immutable; thread-safe.
const std::vector<AcceleratorType>& accelerator_types();
// The canonical type of a device from its PCI vendor and device ids, or
// empty when the table does not know it.
std::string type_from_pci(unsigned vendor_id, unsigned device_id);
// The resource a canonical type belongs to ("H100" → "GPU"), or empty.
std::string resource_of_type(std::string_view type);

// Canonical type names as constants (the table in types.cpp uses the same).
namespace types {
inline constexpr std::string_view kV100 = "V100";
inline constexpr std::string_view kA100 = "A100";
inline constexpr std::string_view kA100_40G = "A100-40G";
inline constexpr std::string_view kA100_80G = "A100-80G";
inline constexpr std::string_view kH100 = "H100";
inline constexpr std::string_view kH100Sxm = "H100-SXM";
inline constexpr std::string_view kH100Pcie = "H100-PCIE";
inline constexpr std::string_view kH100Nvl = "H100-NVL";
inline constexpr std::string_view kH200 = "H200";
inline constexpr std::string_view kB200 = "B200";
inline constexpr std::string_view kGH200 = "GH200";
inline constexpr std::string_view kL4 = "L4";
inline constexpr std::string_view kL40S = "L40S";
inline constexpr std::string_view kA10G = "A10G";
inline constexpr std::string_view kT4 = "T4";
inline constexpr std::string_view kMI250X = "MI250X";
inline constexpr std::string_view kMI300X = "MI300X";
inline constexpr std::string_view kMI325X = "MI325X";
inline constexpr std::string_view kMax1550 = "MAX-1550";
inline constexpr std::string_view kMax1100 = "MAX-1100";
inline constexpr std::string_view kGaudi = "GAUDI";
inline constexpr std::string_view kGaudi2 = "GAUDI2";
inline constexpr std::string_view kGaudi3 = "GAUDI3";
inline constexpr std::string_view kTpuV4 = "TPU-V4";
inline constexpr std::string_view kTpuV5P = "TPU-V5P";
inline constexpr std::string_view kTpuV5LitePod = "TPU-V5LITEPOD";
inline constexpr std::string_view kTpuV6E = "TPU-V6E";
inline constexpr std::string_view kAscend910B = "ASCEND910B";
inline constexpr std::string_view kAwsNeuronCore = "AWS-NEURON-CORE";
inline constexpr std::string_view kTrainium1 = "TRAINIUM1";
inline constexpr std::string_view kTrainium2 = "TRAINIUM2";
inline constexpr std::string_view kInferentia2 = "INFERENTIA2";
}  // namespace types

// One cloud instance type (a hostfile's instance_type=): what it carries.
// accrun-hostfile(5) lists the table with its sources.
struct InstanceType {
  std::string name;      // "p4d.24xlarge", "a3-highgpu-8g", "ct5lp-hightpu-4t"
  std::string cloud;     // "aws", "gcp"
  std::string resource;  // "GPU", "TPU", "HPU", "neuron_cores"
  int count = 0;         // accelerators of `resource` (NeuronCores for Neuron: 32 on trn1.32xlarge)
  int chips = 0;         // physical devices (16 Trainium chips on trn1.32xlarge); = count elsewhere
  std::string type;      // canonical accelerator type ("A100-40G")
};
// The whole table, cloud by cloud.  Immutable; thread-safe.
const std::vector<InstanceType>& instance_types();
// The row of an instance type (case-insensitive), or null.  Not owned.
const InstanceType* find_instance_type(std::string_view name);

// The default vendor of a resource's logical devices ("GPU" → "nvidia").
std::string default_vendor(std::string_view resource);

// Parses an overrides list "NAME=Q[,NAME=Q...]" (NAME:Q also accepted);
// names are canonicalised, quantities must be whole (a host has unit-instance
// devices).  Errors name the bad entry.  Pure; thread-safe.
Result<std::vector<std::pair<std::string, Quantity>>> parse_resource_list(std::string_view text);

// Detects this host: topology, every provider, visible-device restrictions,
// overrides, labels.  Fails on malformed input (a bad visible-devices value,
// an unknown resource name in an override).
//
// Order of work: hwloc topology (the real host, or the XML file of
// config.topology_xml); each provider's sysfs scan under config.sysfs_root
// (plus NVML through dlopen); locality joined from hwloc on the PCI bus id
// where sysfs gave none; with an XML topology and no GPU found in sysfs, the
// XML's own GPUs (PCI vendor NVIDIA/AMD/Intel with a display, 3D or
// processing-accelerator class); then visible-device restriction (the
// inherited variables of config.environment; a negative id such as
// CUDA_VISIBLE_DEVICES=-1 ends the list, so it hides every device, and the
// variable is recorded in Inventory::masks), then the logical overrides (a
// count beyond what an inherited mask shows is an invalid-argument error),
// then labels on TPU hosts (TPU_NAME, else the first of TPU_WORKER_HOSTNAMES,
// → pod, split per slice by MEGASCALE_SLICE_ID; TPU_WORKER_ID, else this
// host's place in TPU_WORKER_HOSTNAMES, → pod_order) and the NVLink clique.
//
// XML topologies: Inventory::cores is filled from the XML so the planner can
// plan with it, and Inventory::topology_from_xml is set: such cores describe
// another machine and must never be used to bind real processes.
//
// Blocks on file reads (and NVML start-up when present); no global state;
// safe to call from several threads with distinct configs.
Result<Inventory> detect_host(const DetectConfig& config);

// Keeps hwloc's discovery plugins loaded while it lives.  hwloc loads its
// plugins (and what they pull in: libOpenCL, X11, libxml2, ICU) when a
// process's first topology is created and unloads them when its last one is
// destroyed; the launcher's detection and then its PMIx server each load a
// topology, so without a hold the plugins are loaded twice per launch.
// The hold leaves out hwloc's GL plugin (X displays) and its GPU vendors'
// plugins (OpenCL, CUDA, NVML, RSMI, Level Zero: they start the vendors'
// runtimes) unless the user chose the plugins; it sets and unsets an
// environment variable to do so, so make it before other threads exist.
class HwlocPluginHold {
 public:
  HwlocPluginHold();
  ~HwlocPluginHold();
  HwlocPluginHold(const HwlocPluginHold&) = delete;
  HwlocPluginHold& operator=(const HwlocPluginHold&) = delete;

 private:
  void* topology_ = nullptr;  // an hwloc topology initialised, never loaded
};

// Leaves hwloc's x86 component out of `topology` (an hwloc_topology_t,
// initialised, not yet loaded), unless the user chose hwloc's components
// (HWLOC_COMPONENTS).  On Linux it only re-reads, with the cpuid
// instruction on every processing unit, what the kernel already told hwloc's
// Linux component; in a virtual machine every cpuid traps to the
// hypervisor, about 0.7 ms of each topology load here.
void leave_out_cpuid_discovery(void* topology);

// hwloc list strings, as sysfs and accrun's JSON write CPU sets.  Pure.
// "0-3,8" → {0,1,2,3,8}, sorted and unique; nullopt when malformed.
std::optional<std::vector<int>> parse_cpulist(std::string_view text);
// Sorted ids {0,1,2,3,8} → "0-3,8".
std::string format_cpulist(const std::vector<int>& ids);
// {0,1,3} → "0,1,3" (the form of the visible-devices variables).
std::string join_ids(const std::vector<int>& ids);

// `accrun --detect` output: a readable table, and docs/design.md §9's JSON (one
// line, newline-terminated).  Pure; thread-safe.
std::string format_table(const std::vector<Inventory>& hosts);
std::string to_json(const std::vector<Inventory>& hosts);
// Reads that JSON back (the multi-host head reads daemons' inventories).
// Accelerator::vendor, not in the JSON, is the maker of the type, else the
// resource's default vendor; pod_order is labels.worker; cores are not in
// the JSON.  Errors (invalid argument) name the offending field
// ("hosts[0].cpus").  Pure.
Result<std::vector<Inventory>> from_json(std::string_view json);

// An inventory's cores, which its JSON leaves out, as text: each core
// "NUMA:PU,PU" (its NUMA node, its processing units' OS indexes), cores
// separated by ';' ("0:0,4;0:1,5").  The node agents' hellos carry them, so
// that the controller binds ranks on other hosts as on this one.  Pure.
std::string cores_to_text(const std::vector<Core>& cores);
// Reads that text back ("" gives none); malformed text is an invalid
// argument naming the core.  Pure.
Result<std::vector<Core>> cores_from_text(std::string_view text);

}  // namespace accrun::detect
