// accrun/inventory.hpp — what one host has: CPUs, NUMA nodes, accelerators
// and group labels.  Built by detection on a real host, or from a hostfile's
// declared resources for hosts the launcher has not reached yet.  The JSON
// form is pinned by docs/design.md §9 (`accrun --detect --json`).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace accrun::detect {

// One unit-instance accelerator.
struct Accelerator {
  std::string resource;               // "GPU", "TPU", "HPU", "NPU", "neuron_cores"
  std::string vendor;                 // provider name: "nvidia", "amd", "intel", "google",
                                      // "aws", "habana", "huawei"; not part of the JSON
  int id = 0;                         // the id the vendor's visible-devices variable uses
  std::string type;                   // canonical type name ("H100", "TPU-V5P", ...)
  std::optional<std::string> pci;     // "0000:3b:00.0"
  std::optional<int> numa;            // NUMA node, if known
  std::optional<std::string> cpus;    // hwloc list string of nearby CPUs ("0-3,8")
  std::optional<std::string> uuid;    // vendor UUID ("GPU-...")
  bool logical = false;               // true for devices that exist only by override
};

// Group labels at levels of increasing reach (docs/design.md §3).
struct Labels {
  std::optional<std::string> pod;
  std::optional<std::string> zone;
  std::optional<std::string> region;
};

// One core: its NUMA node and the OS indexes of its processing units.
struct Core {
  int numa = 0;
  std::vector<int> pus;
};

struct Inventory {
  std::string host;
  int cpus = 0;                       // processing units (hardware threads)
  int numa_nodes = 0;
  Labels labels;
  std::optional<int> pod_order;       // order inside the pod (the TPU worker id); JSON labels.worker
  std::vector<Accelerator> accelerators;
  std::vector<Core> cores;            // empty where the host's topology is unknown
  // True when `cores` come from an hwloc XML file (--topology/HWLOC_XMLFILE)
  // rather than this machine: plan with them, never bind real processes to
  // them.  Not in the JSON.
  bool topology_from_xml = false;
  // Resource → the inherited visible-devices variables that restricted this
  // host's devices of it, as "VAR=value" ("GPU" → "CUDA_VISIBLE_DEVICES=-1"),
  // so messages about missing devices can name the mask.  Set by detection
  // only; not in the JSON.
  std::map<std::string, std::string> masks;
};

}  // namespace accrun::detect
