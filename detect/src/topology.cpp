// CPU/NUMA topology and PCI locality from hwloc: the real host, or an XML
// file (--topology, HWLOC_XMLFILE).  The Debian hwloc has no CUDA/NVML/RSMI
// plugins, so PCI devices carry locality only; names come from the XML's OS
// devices where it has them.
#include <hwloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "internal.hpp"

namespace accrun::detect::internal {
namespace {

// Where the XML topology came from, for messages.
std::string xml_source(const DetectConfig& config) {
  auto it = config.environment.find("HWLOC_XMLFILE");
  return it != config.environment.end() && it->second == *config.topology_xml ? "HWLOC_XMLFILE"
                                                                              : "--topology";
}

// The XML topology's file exists and is a readable file; else what it is.
Status readable_xml(const DetectConfig& config) {
  const std::string& path = *config.topology_xml;
  struct stat st;
  std::string why;
  if (::stat(path.c_str(), &st) != 0) {
    why = std::strerror(errno);
  } else if (S_ISDIR(st.st_mode)) {
    why = "it is a directory";
  } else if (::access(path.c_str(), R_OK) != 0) {
    why = std::strerror(errno);
  }
  if (why.empty()) return Status();
  return invalid_argument("cannot read the hwloc XML topology '" + path + "' (" +
                          xml_source(config) + "): " + why);
}

struct TopologyDeleter {
  void operator()(hwloc_topology_t t) const { hwloc_topology_destroy(t); }
};
using TopologyPtr = std::unique_ptr<std::remove_pointer_t<hwloc_topology_t>, TopologyDeleter>;

struct BitmapDeleter {
  void operator()(hwloc_bitmap_t b) const { hwloc_bitmap_free(b); }
};

std::vector<int> bitmap_ids(hwloc_const_bitmap_t b) {
  std::vector<int> out;
  if (b == nullptr || hwloc_bitmap_iszero(b)) return out;
  for (int i = hwloc_bitmap_first(b); i != -1; i = hwloc_bitmap_next(b, i)) out.push_back(i);
  return out;
}

const char* info(hwloc_obj_t obj, const char* name) { return hwloc_obj_get_info_by_name(obj, name); }

}  // namespace

const PciLocality* Topology::find(std::string_view bdf) const {
  auto it = std::lower_bound(pci.begin(), pci.end(), bdf,
                             [](const auto& e, std::string_view k) { return e.first < k; });
  return it != pci.end() && it->first == bdf ? &it->second : nullptr;
}

Result<Topology> load_topology(const DetectConfig& config, bool with_io) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return system_error("hwloc_topology_init");
  TopologyPtr topo(raw);
  Topology out;
  // Caches and Misc objects are never used: not building them saves time.
  hwloc_topology_set_cache_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_NONE);
  hwloc_topology_set_icache_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_NONE);
  hwloc_topology_set_type_filter(raw, HWLOC_OBJ_MISC, HWLOC_TYPE_FILTER_KEEP_NONE);
  leave_out_cpuid_discovery(raw);
  if (config.topology_xml) {
    if (Status s = readable_xml(config); !s) return s;
    if (hwloc_topology_set_xml(raw, config.topology_xml->c_str()) != 0) {
      return invalid_argument("cannot read the hwloc XML topology '" + *config.topology_xml +
                              "' (" + xml_source(config) +
                              "; hwloc 2.x XML expected; export it with lstopo --of xml)");
    }
    out.from_xml = true;
    // Every PCI device of the file: its GPUs are the accelerators it describes.
    hwloc_topology_set_type_filter(raw, HWLOC_OBJ_PCI_DEVICE, HWLOC_TYPE_FILTER_KEEP_ALL);
    hwloc_topology_set_type_filter(raw, HWLOC_OBJ_OS_DEVICE, HWLOC_TYPE_FILTER_KEEP_ALL);
    hwloc_topology_set_type_filter(raw, HWLOC_OBJ_BRIDGE, HWLOC_TYPE_FILTER_KEEP_NONE);
  } else if (with_io && SysRoot(config.sysfs_root).path("").empty()) {
    // The real host: PCI locality is a fallback for devices whose sysfs
    // entries lack it.  Under another root (a container's view of the host,
    // the tests) hwloc's PCI devices would be this machine's, not the
    // root's, so I/O discovery is skipped (it is also the slow part).
    hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  }
  if (hwloc_topology_load(raw) != 0) {
    if (config.topology_xml) {
      // hwloc says only that it failed: a 3.0 file is the one cause known
      // by its look; else the file describes no machine hwloc accepts.
      std::ifstream in(*config.topology_xml);
      std::string head(4096, '\0');
      in.read(head.data(), static_cast<std::streamsize>(head.size()));
      head.resize(static_cast<std::size_t>(in.gcount()));
      const bool v3 = head.find("version=\"3.") != std::string::npos;
      return invalid_argument(
          "cannot load the hwloc XML topology '" + *config.topology_xml + "' (" +
          xml_source(config) + "): " +
          (v3 ? std::string("hwloc 2.9 reads XML format 2.x, not 3.0")
              : std::string("hwloc refused what it describes (a machine needs its "
                            "processing units and NUMA nodes, with valid cpusets); "
                            "export it again with lstopo --of xml")));
    }
    return system_error("hwloc_topology_load");
  }
  out.cpus = hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_PU);
  out.numa_nodes = std::max(1, hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_NUMANODE));

  // Cores with their PUs' OS indexes and their NUMA node's OS index.
  const int ncores = hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_CORE);
  const hwloc_obj_type_t unit = ncores > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
  const int nunits = hwloc_get_nbobjs_by_type(raw, unit);
  const int nnuma = hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < nunits; ++i) {
    hwloc_obj_t c = hwloc_get_obj_by_type(raw, unit, static_cast<unsigned>(i));
    Core core;
    core.pus = bitmap_ids(c->cpuset);
    if (core.pus.empty()) continue;
    for (int n = 0; n < nnuma; ++n) {
      hwloc_obj_t node = hwloc_get_obj_by_type(raw, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(n));
      if (hwloc_bitmap_intersects(node->cpuset, c->cpuset)) {
        core.numa = static_cast<int>(node->os_index);
        break;
      }
    }
    out.cores.push_back(std::move(core));
  }

  for (hwloc_obj_t d = hwloc_get_next_pcidev(raw, nullptr); d != nullptr; d = hwloc_get_next_pcidev(raw, d)) {
    const auto& p = d->attr->pcidev;
    char bdf[32];
    std::snprintf(bdf, sizeof bdf, "%04x:%02x:%02x.%x", static_cast<unsigned>(p.domain), p.bus, p.dev, p.func);
    PciLocality loc;
    loc.vendor = p.vendor_id;
    loc.device = p.device_id;
    loc.class_id = p.class_id;
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(raw, d);
    if (anc != nullptr && anc->cpuset != nullptr && !hwloc_bitmap_iszero(anc->cpuset)) {
      loc.cpus = format_cpulist(bitmap_ids(anc->cpuset));
    }
    if (anc != nullptr && anc->nodeset != nullptr) {
      std::vector<int> nodes = bitmap_ids(anc->nodeset);
      if (nodes.size() == 1) loc.numa = nodes[0];
    }
    if (const char* m = info(d, "PCIDevice")) loc.model = m;
    for (hwloc_obj_t os = d->io_first_child; os != nullptr; os = os->next_sibling) {
      if (os->type != HWLOC_OBJ_OS_DEVICE) continue;
      const char* model = info(os, "GPUModel");
      // OpenCL reports AMD's architecture ("gfx942:...") as the model: prefer
      // the management library's (NVML, RSMI) or CUDA's name.
      const char* backend = info(os, "Backend");
      bool opencl = backend != nullptr && std::string_view(backend) == "OpenCL";
      if (model != nullptr && (loc.model.empty() || !opencl)) loc.model = model;
      if (const char* u = info(os, "NVIDIAUUID")) loc.uuid = u;
      if (const char* u = info(os, "AMDUUID"); u && !loc.uuid) loc.uuid = u;
    }
    out.pci.emplace_back(bdf, std::move(loc));
  }
  std::sort(out.pci.begin(), out.pci.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

}  // namespace accrun::detect::internal

namespace accrun::detect {

void leave_out_cpuid_discovery(void* topology) {
#ifdef __linux__
  if (topology == nullptr || std::getenv("HWLOC_COMPONENTS") != nullptr) return;
  hwloc_topology_set_components(static_cast<hwloc_topology_t>(topology), HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                "x86");
#else
  (void)topology;
#endif
}

// hwloc's plugins that accrun leaves out: GL looks for X displays (pulling
// in libX11 and xcb), and the vendor plugins load and start the vendors'
// runtimes to describe GPUs that detection describes itself (sysfs, /proc,
// NVML).  On an H100 host with hwloc's OpenCL plugin installed, that plugin
// started the GPU driver in every detection that read PCI locality: ~280 ms
// of `accrun -n 1 /bin/true`, against ~15 ms without it.  The PCI plugin
// (locality) and the XML reader stay.
constexpr const char* kQuietPlugins = "hwloc_gl,hwloc_opencl,hwloc_cuda,hwloc_nvml,hwloc_rsmi,hwloc_levelzero";

HwlocPluginHold::HwlocPluginHold() {
  // The plugins above stay out while the hold loads the plugins, unless
  // the user chose hwloc's plugins (HWLOC_PLUGINS_BLACKLIST,
  // HWLOC_COMPONENTS); the variable is gone again before anything could
  // inherit it.
  bool quiet = std::getenv("HWLOC_PLUGINS_BLACKLIST") == nullptr && std::getenv("HWLOC_COMPONENTS") == nullptr;
  if (quiet) setenv("HWLOC_PLUGINS_BLACKLIST", kQuietPlugins, 1);
  hwloc_topology_t t = nullptr;
  if (hwloc_topology_init(&t) == 0) topology_ = t;
  if (quiet) unsetenv("HWLOC_PLUGINS_BLACKLIST");
}

HwlocPluginHold::~HwlocPluginHold() {
  if (topology_ != nullptr) hwloc_topology_destroy(static_cast<hwloc_topology_t>(topology_));
}

}  // namespace accrun::detect
