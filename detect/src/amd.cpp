// AMD GPUs: PCI sysfs (vendor 0x1002, driver amdgpu) and the KFD topology
// (/sys/class/kfd/kfd/topology/nodes/*: GPU nodes have a non-zero gpu_id).
// Ids are ROCr's: GPU nodes in KFD node order (PCI order without KFD).
#include <algorithm>
#include <map>

#include "internal.hpp"

namespace accrun::detect::internal {
namespace {

constexpr unsigned kAmd = 0x1002;

std::map<std::string, std::string> properties(const std::string& text) {
  std::map<std::string, std::string> out;
  for (const std::string& line : split(text, '\n')) {
    auto sp = line.find(' ');
    if (sp == std::string::npos) continue;
    out[line.substr(0, sp)] = trim(line.substr(sp + 1));
  }
  return out;
}

std::optional<unsigned long long> to_u64(const std::string& s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  unsigned long long v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  return v;
}

std::string hex16(unsigned long long v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (int shift = 60; shift >= 0; shift -= 4) s += kDigits[(v >> shift) & 0xf];
  return s;
}

class AmdProvider final : public ProviderBase {
 public:
  std::string_view vendor() const override { return "amd"; }
  std::string_view resource() const override { return "GPU"; }
  std::string_view visible_variable() const override { return "ROCR_VISIBLE_DEVICES"; }
  bool fractional() const override { return true; }
  Status validate_quantity(Quantity q) const override { return validate_request("GPU", q); }

  Result<Found> detect_scan(const HostScan& scan) const override {
    std::vector<const PciDevice*> pci;
    for (const PciDevice& d : scan.pci) {
      if (d.vendor != kAmd || d.driver != "amdgpu") continue;
      unsigned c = d.class_id();
      if (c != 0x0300 && c != 0x0302 && c != 0x0380 && d.base_class() != 0x12) continue;
      pci.push_back(&d);
    }
    Found found;
    if (pci.empty()) return found;
    // KFD nodes in numeric order; GPU nodes name their PCI function by
    // domain and location_id (bus << 8 | device << 3 | function).
    const std::string kTopo = "/sys/class/kfd/kfd/topology/nodes";
    std::vector<int> nodes;
    for (const std::string& n : scan.root.list(kTopo)) {
      if (auto v = parse_int(n)) nodes.push_back(*v);
    }
    std::sort(nodes.begin(), nodes.end());
    std::vector<std::pair<const PciDevice*, std::optional<std::string>>> ordered;
    for (int n : nodes) {
      std::string dir = kTopo + "/" + std::to_string(n);
      auto gpu_id = scan.root.read(dir + "/gpu_id");
      auto props_text = scan.root.read(dir + "/properties");
      if (!props_text) continue;
      auto props = properties(*props_text);
      if (!gpu_id || gpu_id == "0" || gpu_id->empty()) {
        // Older kernels keep gpu_id only in the properties.
        auto it = props.find("gpu_id");
        if (it == props.end() || it->second == "0") continue;
      }
      auto loc = to_u64(props["location_id"]);
      auto dom = to_u64(props.count("domain") ? props["domain"] : "0");
      if (!loc || !dom) continue;
      char bdf[32];
      std::snprintf(bdf, sizeof bdf, "%04llx:%02llx:%02llx.%llx", *dom, (*loc >> 8) & 0xff,
                    (*loc >> 3) & 0x1f, *loc & 0x7);
      auto it = std::find_if(pci.begin(), pci.end(), [&](const PciDevice* d) { return d->bdf == bdf; });
      if (it == pci.end()) continue;
      std::optional<std::string> uuid;
      if (auto u = to_u64(props["unique_id"]); u && *u != 0) uuid = "GPU-" + hex16(*u);
      ordered.emplace_back(*it, uuid);
    }
    if (ordered.empty()) {
      for (const PciDevice* d : pci) ordered.emplace_back(d, std::nullopt);
    }
    for (const auto& [d, uuid] : ordered) {
      std::string type = type_from_pci(d->vendor, d->device);
      if (type.empty()) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "AMD-%04X", d->device);
        type = buf;
      }
      Accelerator a = accelerator_from_pci(*d, "GPU", "amd", static_cast<int>(found.accelerators.size()), type);
      a.uuid = uuid;
      found.accelerators.push_back(std::move(a));
    }
    return found;
  }

  // ROCR_VISIBLE_DEVICES picks physical devices; HIP_VISIBLE_DEVICES then
  // picks positions among those.  Both inherited: the effective set.
  std::string mask_in(const Env& env) const override {
    return set_variables(env, {"ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"});
  }

  Result<std::vector<Accelerator>> restrict_visible(std::vector<Accelerator> accs, const Env& env) const override {
    if (accs.empty()) return accs;
    if (auto it = env.find("ROCR_VISIBLE_DEVICES"); it != env.end()) {
      auto r = restrict_by_list(std::move(accs), it->first, it->second, "GPU");
      if (!r) return r.status();
      // HIP positions follow the ROCR list's order, not the id order.
      std::vector<Accelerator> in_order;
      for (const std::string& tok : split(trim(it->second), ',')) {
        std::string t = trim(tok);
        for (const Accelerator& a : *r) {
          bool hit = parse_int(t) ? *parse_int(t) == a.id : (a.uuid && a.uuid->rfind(t, 0) == 0);
          if (hit && std::none_of(in_order.begin(), in_order.end(), [&](const Accelerator& b) { return b.id == a.id; }))
            in_order.push_back(a);
        }
      }
      accs = std::move(in_order);
    }
    if (auto it = env.find("HIP_VISIBLE_DEVICES"); it != env.end()) {
      std::vector<Accelerator> positional = accs;
      for (size_t i = 0; i < positional.size(); ++i) positional[i].id = static_cast<int>(i);
      auto r = restrict_by_list(positional, it->first, it->second, "GPU");
      if (!r) return r.status();
      std::vector<Accelerator> out;
      for (const Accelerator& p : *r) out.push_back(accs[static_cast<size_t>(p.id)]);
      accs = std::move(out);
    }
    std::sort(accs.begin(), accs.end(), [](const Accelerator& a, const Accelerator& b) { return a.id < b.id; });
    return accs;
  }

  // Exactly one AMD mask changes: the innermost one inherited (HIP over
  // ROCR), or ROCR_VISIBLE_DEVICES when none is.  Ids are physical.
  void set_visible(const std::vector<int>& ids, const Env& inherited, Env& env) const override {
    auto rocr = inherited.find("ROCR_VISIBLE_DEVICES");
    auto hip = inherited.find("HIP_VISIBLE_DEVICES");
    if (hip == inherited.end()) {
      env["ROCR_VISIBLE_DEVICES"] = join_ids(ids);
      return;
    }
    if (rocr == inherited.end()) {
      env["HIP_VISIBLE_DEVICES"] = join_ids(ids);  // HIP alone indexes physical devices
      return;
    }
    // Both inherited: HIP indexes the ROCR list, so give positions in it.
    std::vector<int> rocr_ids;
    for (const std::string& tok : split(trim(rocr->second), ',')) {
      auto v = parse_int(trim(tok));
      if (!v) { rocr_ids.clear(); break; }
      rocr_ids.push_back(*v);
    }
    std::vector<int> positions;
    for (int id : ids) {
      auto it = std::find(rocr_ids.begin(), rocr_ids.end(), id);
      if (it == rocr_ids.end()) { positions.clear(); break; }
      positions.push_back(static_cast<int>(it - rocr_ids.begin()));
    }
    if (positions.size() == ids.size() && !ids.empty()) {
      env["HIP_VISIBLE_DEVICES"] = join_ids(positions);
      return;
    }
    // The ROCR list names UUIDs (or not these ids): replace it, and make the
    // HIP mask select everything it leaves.
    env["ROCR_VISIBLE_DEVICES"] = join_ids(ids);
    std::vector<int> all;
    for (size_t i = 0; i < ids.size(); ++i) all.push_back(static_cast<int>(i));
    env["HIP_VISIBLE_DEVICES"] = join_ids(all);
  }
};

}  // namespace

std::unique_ptr<ProviderBase> make_amd_provider() { return std::make_unique<AmdProvider>(); }

}  // namespace accrun::detect::internal
