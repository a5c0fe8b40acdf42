// detect_host: topology, providers, locality, visible-device restriction,
// logical overrides and labels, in that order.
#include "accrun/detect.hpp"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <map>

#include "internal.hpp"

namespace accrun::detect {

using internal::ProviderBase;

DetectConfig DetectConfig::from_environment(char** envp) {
  DetectConfig c;
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv = *e;
    auto eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    c.environment.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  if (auto it = c.environment.find("ACCRUN_SYSFS_ROOT"); it != c.environment.end() && !it->second.empty()) {
    c.sysfs_root = it->second;
  }
  if (auto it = c.environment.find("HWLOC_XMLFILE"); it != c.environment.end() && !it->second.empty()) {
    c.topology_xml = it->second;
  }
  if (auto it = c.environment.find("ACCRUN_NVML_LIBRARY"); it != c.environment.end()) {
    c.nvml_library = it->second;
  }
  return c;
}

namespace {

std::string host_name(const DetectConfig& config) {
  if (config.hostname) return *config.hostname;
  char buf[HOST_NAME_MAX + 1] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

// GPUs that exist only in an XML topology (it describes another machine).
std::vector<Accelerator> xml_gpus(const internal::Topology& topo) {
  std::vector<Accelerator> out;
  for (const auto& [bdf, loc] : topo.pci) {
    const unsigned base = loc.class_id >> 8;
    std::string vendor;
    if (loc.vendor == 0x10de && (loc.class_id == 0x0300 || loc.class_id == 0x0302)) vendor = "nvidia";
    else if (loc.vendor == 0x1002 && (base == 0x03 || base == 0x12)) vendor = "amd";
    else if (loc.vendor == 0x8086 && base == 0x03) vendor = "intel";
    else continue;
    Accelerator a;
    a.resource = "GPU";
    a.vendor = vendor;
    a.pci = bdf;
    a.numa = loc.numa;
    a.cpus = loc.cpus;
    a.uuid = loc.uuid;
    a.type = type_from_pci(loc.vendor, loc.device);
    if (a.type.empty() && !loc.model.empty()) a.type = type_from_model(loc.model);
    if (a.type.empty()) {
      char buf[24];
      std::snprintf(buf, sizeof buf, "%s-%04X", internal::upper(vendor).c_str(), loc.device);
      a.type = buf;
    }
    out.push_back(std::move(a));
  }
  // One vendor per resource on a host: the first vendor in priority order.
  for (const auto& p : providers()) {
    if (p->resource() != "GPU") continue;
    if (std::any_of(out.begin(), out.end(), [&](const Accelerator& a) { return a.vendor == p->vendor(); })) {
      std::erase_if(out, [&](const Accelerator& a) { return a.vendor != p->vendor(); });
      break;
    }
  }
  for (size_t i = 0; i < out.size(); ++i) out[i].id = static_cast<int>(i);  // PCI order
  return out;
}

// Sets the count of `resource` on the host to `want` (`option` names the
// override for messages).  Under an inherited visible-devices mask
// (`masks`), the devices it leaves are the only ones there are: a count
// beyond them is refused (as Ray's `ray start --num-gpus` refuses), since
// the ids a rank gets must be devices the mask shows.
Status apply_count(std::vector<Accelerator>& accs, const std::string& resource, std::int64_t want,
                   const std::string& vendor_hint, const std::optional<std::string>& type_hint,
                   const std::map<std::string, std::string>& masks, const std::string& option) {
  std::vector<Accelerator> mine, rest;
  for (auto& a : accs) (a.resource == resource ? mine : rest).push_back(std::move(a));
  std::sort(mine.begin(), mine.end(), [](const Accelerator& a, const Accelerator& b) { return a.id < b.id; });
  if (auto m = masks.find(resource); m != masks.end() && want > static_cast<std::int64_t>(mine.size())) {
    return invalid_argument(option + ": " + m->second + " leaves " + std::to_string(mine.size()) + " " + resource +
                            (mine.size() == 1 ? "" : "s") + " visible on this host; give at most " +
                            std::to_string(mine.size()) + ", or change the mask (ids handed to ranks must be "
                            "devices it shows)");
  }
  if (static_cast<std::int64_t>(mine.size()) > want) mine.resize(static_cast<size_t>(want));
  std::string vendor = !mine.empty() ? mine.front().vendor : vendor_hint;
  std::string type = !mine.empty() ? mine.front().type : type_hint.value_or("");
  int next = mine.empty() ? 0 : mine.back().id + 1;
  while (static_cast<std::int64_t>(mine.size()) < want) {
    Accelerator a;
    a.resource = resource;
    a.vendor = vendor;
    a.id = next++;
    a.type = type;
    a.logical = true;
    mine.push_back(std::move(a));
  }
  accs = std::move(rest);
  accs.insert(accs.end(), std::make_move_iterator(mine.begin()), std::make_move_iterator(mine.end()));
  return Status::ok();
}

bool has_tpu_chips(const Inventory& inv) {
  return std::any_of(inv.accelerators.begin(), inv.accelerators.end(),
                     [](const Accelerator& a) { return a.resource == "TPU"; });
}

// Labels from a TPU VM's environment: the slice is the pod and the worker id
// the host's place in it (JAX's process index follows it).  The slice is
// named by TPU_NAME, else by its worker 0 (the first of
// TPU_WORKER_HOSTNAMES, the same list on every host of the slice); in a
// multislice job (MEGASCALE_SLICE_ID) each slice is a pod of its own.
Status apply_tpu_labels(const Env& env, Inventory& inv) {
  auto get = [&](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    std::string v = internal::trim(it->second);
    if (v.empty()) return std::nullopt;
    return v;
  };
  std::vector<std::string> workers;
  if (auto list = get("TPU_WORKER_HOSTNAMES")) {
    for (const std::string& w : internal::split(*list, ',')) {
      std::string name = internal::trim(w);
      if (name.empty()) return invalid_argument("TPU_WORKER_HOSTNAMES=" + *list + ": empty entry");
      workers.push_back(std::move(name));
    }
  }
  std::optional<std::string> pod = get("TPU_NAME");
  if (!pod && !workers.empty()) pod = "tpu-slice-" + workers.front();
  if (pod) {
    if (auto slice = get("MEGASCALE_SLICE_ID")) {
      if (!internal::parse_int(*slice)) {
        return invalid_argument("MEGASCALE_SLICE_ID=" + *slice + ": expected a slice number (0, 1, ...)");
      }
      *pod += "-slice-" + *slice;
    }
    inv.labels.pod = *pod;
  }
  if (auto id = get("TPU_WORKER_ID")) {
    auto w = internal::parse_int(*id);
    if (!w) return invalid_argument("TPU_WORKER_ID=" + *id + ": expected a worker number (0, 1, ...)");
    if (!workers.empty() && *w >= static_cast<int>(workers.size())) {
      return invalid_argument("TPU_WORKER_ID=" + *id + ": TPU_WORKER_HOSTNAMES lists " +
                              std::to_string(workers.size()) + " workers (ids 0-" +
                              std::to_string(workers.size() - 1) + ")");
    }
    inv.pod_order = *w;
  } else if (!workers.empty()) {
    // No id: this host's place in the list, by its name.
    for (size_t i = 0; i < workers.size(); ++i) {
      if (workers[i] == inv.host || workers[i].substr(0, workers[i].find('.')) == inv.host) {
        inv.pod_order = static_cast<int>(i);
      }
    }
  }
  return Status::ok();
}

}  // namespace

Result<Inventory> detect_host(const DetectConfig& config) {
  Inventory inv;
  inv.host = host_name(config);

  auto topo = internal::load_topology(config);
  if (!topo) return topo.status();
  inv.cpus = topo->cpus;
  inv.numa_nodes = topo->numa_nodes;
  inv.cores = topo->cores;
  inv.topology_from_xml = topo->from_xml;

  // Providers, one scan for all.  The first vendor with devices of a
  // resource wins it (a host is homogeneous per resource).
  internal::HostScan scan = internal::scan_host(config);
  std::vector<std::string> claimed;
  for (const auto& p : providers()) {
    const auto* base = static_cast<const ProviderBase*>(p.get());
    if (std::find(claimed.begin(), claimed.end(), p->resource()) != claimed.end()) continue;
    auto found = base->detect_scan(scan);
    if (!found) return found.status().with_context(std::string(p->vendor()));
    if (found->accelerators.empty()) continue;
    auto kept = base->restrict_visible(std::move(found->accelerators), config.environment);
    if (!kept) return kept.status();
    if (std::string mask = base->mask_in(config.environment); !mask.empty()) {
      inv.masks[std::string(p->resource())] = std::move(mask);
    }
    claimed.emplace_back(p->resource());
    // The vendor's pod (an NVLink domain) is the host's only while a mask
    // leaves it a device in that domain.
    if (found->pod && !kept->empty() && !inv.labels.pod) inv.labels.pod = found->pod;
    for (auto& a : *kept) inv.accelerators.push_back(std::move(a));
  }

  // Locality, model and UUID from hwloc where sysfs had none.  Only an XML
  // file or the real root describe the same devices as the scan.
  const bool same_machine = topo->from_xml || internal::SysRoot(config.sysfs_root).path("").empty();
  // With one NUMA node every device is local to it, whatever its sysfs
  // entry says (virtual machines give numa_node -1): hwloc's PCI discovery,
  // the slow part of detection, is not needed to say so.
  if (same_machine && topo->numa_nodes == 1 && !topo->cores.empty()) {
    for (auto& a : inv.accelerators)
      if (a.pci && !a.numa) a.numa = topo->cores.front().numa;
  }
  const bool lacks_locality = std::any_of(inv.accelerators.begin(), inv.accelerators.end(),
                                          [](const Accelerator& a) { return a.pci && (!a.numa || !a.cpus); });
  if (same_machine && !topo->from_xml && lacks_locality) {
    // Only now pay for hwloc's PCI discovery on the real host.
    auto with_io = internal::load_topology(config, /*with_io=*/true);
    if (!with_io) return with_io.status();
    topo = std::move(with_io);
  }
  if (same_machine) {
    for (auto& a : inv.accelerators) {
      if (!a.pci) continue;
      const internal::PciLocality* loc = topo->find(*a.pci);
      if (loc == nullptr) continue;
      if (!a.numa || topo->from_xml) a.numa = loc->numa ? loc->numa : a.numa;
      if (!a.cpus || topo->from_xml) a.cpus = loc->cpus ? loc->cpus : a.cpus;
      if (!a.uuid && loc->uuid) a.uuid = loc->uuid;
    }
  }
  // An XML file alone (no GPU found in sysfs) still yields its GPUs.
  if (topo->from_xml && std::find(claimed.begin(), claimed.end(), "GPU") == claimed.end()) {
    auto gpus = xml_gpus(*topo);
    if (!gpus.empty()) {
      const Provider* p = provider_for_vendor(gpus.front().vendor);
      const auto* base = static_cast<const ProviderBase*>(p);
      auto kept = base->restrict_visible(std::move(gpus), config.environment);
      if (!kept) return kept.status();
      if (std::string mask = base->mask_in(config.environment); !mask.empty()) inv.masks["GPU"] = std::move(mask);
      for (auto& a : *kept) inv.accelerators.push_back(std::move(a));
    }
  }

  // Logical overrides.
  std::optional<std::string> host_type;
  if (config.host_accelerator_type) {
    std::string t = internal::trim(*config.host_accelerator_type);
    if (t.empty()) return invalid_argument("--host-accelerator-type: empty type name");
    host_type = canonical_type(t);
  }
  const std::string host_type_resource = host_type ? resource_of_type(*host_type) : std::string();
  auto type_hint_for = [&](const std::string& resource) -> std::optional<std::string> {
    if (host_type && (host_type_resource.empty() || host_type_resource == resource)) return host_type;
    return std::nullopt;
  };
  auto vendor_hint_for = [&](const std::string& resource) {
    if (host_type && host_type_resource == resource) {
      std::string v = vendor_of_type(*host_type);
      if (!v.empty()) return v;
    }
    return default_vendor(resource);
  };
  if (config.num_gpus) {
    if (*config.num_gpus < 0) return invalid_argument("--num-gpus " + std::to_string(*config.num_gpus) + ": must be 0 or more");
    for (const auto& [name, q] : config.resources) {
      if (internal::lower(name) == "gpu") {
        return invalid_argument("--num-gpus and --resources GPU=" + q.str() + " both set the GPU count; give one");
      }
    }
    ACCRUN_RETURN_IF_ERROR(apply_count(inv.accelerators, "GPU", *config.num_gpus, vendor_hint_for("GPU"),
                                       type_hint_for("GPU"), inv.masks,
                                       "--num-gpus " + std::to_string(*config.num_gpus)));
  }
  for (const auto& [name, q] : config.resources) {
    auto r = canonical_resource(name);
    if (!r) return r.status().with_context("--resources");
    if (!q.is_whole()) {
      return invalid_argument("--resources " + *r + "=" + q.str() + ": a host has whole devices; give a whole count");
    }
    ACCRUN_RETURN_IF_ERROR(apply_count(inv.accelerators, *r, q.whole_part(), vendor_hint_for(*r), type_hint_for(*r),
                                       inv.masks, "--resources " + *r + "=" + q.str()));
  }
  if (host_type) {
    for (auto& a : inv.accelerators) {
      if (host_type_resource.empty() || host_type_resource == a.resource) a.type = *host_type;
    }
  }
  // Resources in a stable order (the table's), ids ascending.
  auto rank = [](const std::string& r) {
    const auto& names = resource_names();
    return std::find(names.begin(), names.end(), r) - names.begin();
  };
  std::stable_sort(inv.accelerators.begin(), inv.accelerators.end(), [&](const Accelerator& a, const Accelerator& b) {
    return rank(a.resource) != rank(b.resource) ? rank(a.resource) < rank(b.resource) : a.id < b.id;
  });

  if (has_tpu_chips(inv)) ACCRUN_RETURN_IF_ERROR(apply_tpu_labels(config.environment, inv));
  return inv;
}

}  // namespace accrun::detect
