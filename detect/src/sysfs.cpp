// Reads under the sysfs root, the PCI scan and small parsing helpers.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include "internal.hpp"
#include "accrun/strings.hpp"

namespace accrun::detect::internal {

SysRoot::SysRoot(std::string root) : root_(std::move(root)) {
  while (!root_.empty() && root_.back() == '/') root_.pop_back();
}

std::string SysRoot::path(std::string_view abs) const { return root_ + std::string(abs); }

std::optional<std::string> SysRoot::read(std::string_view abs) const {
  std::ifstream in(path(abs));
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return trim(ss.str());
}

std::vector<std::string> SysRoot::list(std::string_view abs) const {
  std::vector<std::string> out;
  DIR* d = ::opendir(path(abs).c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n == "." || n == "..") continue;
    out.emplace_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

bool SysRoot::exists(std::string_view abs) const {
  struct stat st;
  return ::stat(path(abs).c_str(), &st) == 0;
}

std::optional<std::string> SysRoot::link_name(std::string_view abs) const {
  char buf[4096];
  ssize_t n = ::readlink(path(abs).c_str(), buf, sizeof buf - 1);
  if (n <= 0) return std::nullopt;
  std::string_view target(buf, static_cast<size_t>(n));
  auto slash = target.rfind('/');
  return std::string(slash == std::string_view::npos ? target : target.substr(slash + 1));
}

std::vector<PciDevice> scan_pci(const SysRoot& root) {
  std::vector<PciDevice> out;
  for (const std::string& bdf : root.list("/sys/bus/pci/devices")) {
    PciDevice d;
    d.bdf = lower(bdf);
    d.dir = "/sys/bus/pci/devices/" + bdf;
    auto vendor = root.read(d.dir + "/vendor");
    auto device = root.read(d.dir + "/device");
    auto cls = root.read(d.dir + "/class");
    if (!vendor || !device || !cls) continue;
    auto v = parse_hex(*vendor), dv = parse_hex(*device), c = parse_hex(*cls);
    if (!v || !dv || !c) continue;
    d.vendor = *v;
    d.device = *dv;
    d.class_code = *c;
    // Only devices some provider could claim need the rest (saves reads on
    // hosts with hundreds of PCI functions).
    static constexpr unsigned kVendors[] = {0x10de, 0x1002, 0x8086, 0x1d0f, 0x1ae0, 0x1da3, 0x19e5};
    if (std::find(std::begin(kVendors), std::end(kVendors), d.vendor) == std::end(kVendors)) continue;
    d.driver = root.link_name(d.dir + "/driver").value_or("");
    if (auto numa = root.read(d.dir + "/numa_node")) {
      if (auto n = parse_int(*numa)) d.numa = *n;  // "-1" does not parse: unknown
    }
    if (auto cpus = root.read(d.dir + "/local_cpulist")) {
      if (auto ids = parse_cpulist(*cpus); ids && !ids->empty()) d.cpus = format_cpulist(*ids);
    }
    out.push_back(std::move(d));
  }
  std::sort(out.begin(), out.end(), [](const PciDevice& a, const PciDevice& b) { return a.bdf < b.bdf; });
  return out;
}

HostScan scan_host(const DetectConfig& config) {
  HostScan s;
  s.config = &config;
  s.root = SysRoot(config.sysfs_root);
  s.pci = scan_pci(s.root);
  return s;
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

std::string lower(std::string_view s) { return ascii_lower(s); }

std::string upper(std::string_view s) { return ascii_upper(s); }

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    out.emplace_back(s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

std::optional<int> parse_int(std::string_view text) {
  if (text.empty() || text.size() > 9) return std::nullopt;
  int v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

std::optional<unsigned> parse_hex(std::string_view text) {
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) text.remove_prefix(2);
  if (text.empty() || text.size() > 8) return std::nullopt;
  unsigned v = 0;
  for (char c : text) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return std::nullopt;
    v = v * 16 + static_cast<unsigned>(d);
  }
  return v;
}


Accelerator accelerator_from_pci(const PciDevice& dev, std::string_view resource,
                                 std::string_view vendor, int id, std::string type) {
  Accelerator a;
  a.resource = std::string(resource);
  a.vendor = std::string(vendor);
  a.id = id;
  a.type = std::move(type);
  a.pci = dev.bdf;
  a.numa = dev.numa;
  a.cpus = dev.cpus;
  return a;
}

Result<std::vector<Accelerator>> restrict_by_list(std::vector<Accelerator> accs,
                                                  std::string_view var, std::string_view value,
                                                  std::string_view noun) {
  const std::string shown = std::string(var) + "=" + std::string(value);
  std::string available;
  for (const auto& a : accs) available += (available.empty() ? "" : ",") + std::to_string(a.id);
  std::set<size_t> keep;
  std::string t = trim(value);
  // "NoDevFiles" is what Slurm and Ray write when a job may see no device.
  if (!t.empty() && t != "NoDevFiles") {
    for (const std::string& raw : split(t, ',')) {
      std::string tok = trim(raw);
      // A negative id ends the list, as the CUDA runtime reads it: "-1" is
      // the usual way to hide every device, and "0,-1,1" shows only 0.
      if (tok.size() > 1 && tok[0] == '-' && parse_int(std::string_view(tok).substr(1))) break;
      if (tok.empty()) {
        return invalid_argument(shown + ": empty entry (expected a comma-separated list of " +
                                std::string(noun) + " ids or UUIDs)");
      }
      if (std::isdigit(static_cast<unsigned char>(tok[0]))) {
        auto id = parse_int(tok);
        if (!id) {
          return invalid_argument(shown + ": '" + tok + "' is not a " + std::string(noun) +
                                  " id or UUID");
        }
        auto it = std::find_if(accs.begin(), accs.end(), [&](const Accelerator& a) { return a.id == *id; });
        if (it == accs.end()) {
          return invalid_argument(shown + ": no " + std::string(noun) + " " + tok +
                                  " on this host (it has " + (available.empty() ? "none" : available) + ")");
        }
        keep.insert(static_cast<size_t>(it - accs.begin()));
        continue;
      }
      if (tok.rfind("MIG-", 0) == 0) {
        return not_supported(shown + ": MIG instances are not supported; name whole GPUs");
      }
      // A UUID, or a unique prefix of one (as the CUDA runtime accepts).
      std::optional<size_t> match;
      for (size_t i = 0; i < accs.size(); ++i) {
        if (!accs[i].uuid || accs[i].uuid->rfind(tok, 0) != 0) continue;
        if (match) {
          return invalid_argument(shown + ": '" + tok + "' matches more than one " + std::string(noun) +
                                  " UUID; give more of it");
        }
        match = i;
      }
      if (!match) {
        return invalid_argument(shown + ": '" + tok + "' is neither a " + std::string(noun) +
                                " id nor the UUID of one on this host");
      }
      keep.insert(*match);
    }
  }
  std::vector<Accelerator> out;
  for (size_t i : keep) out.push_back(std::move(accs[i]));
  std::sort(out.begin(), out.end(), [](const Accelerator& a, const Accelerator& b) { return a.id < b.id; });
  return out;
}

Result<std::vector<Accelerator>> ProviderBase::restrict_visible(std::vector<Accelerator> accs,
                                                                const Env& env) const {
  if (accs.empty()) return accs;
  auto it = env.find(std::string(visible_variable()));
  if (it == env.end()) return accs;
  return restrict_by_list(std::move(accs), it->first, it->second, resource());
}

std::string ProviderBase::mask_in(const Env& env) const { return set_variables(env, {visible_variable()}); }

std::string set_variables(const Env& env, std::initializer_list<std::string_view> vars) {
  std::string out;
  for (std::string_view v : vars) {
    auto it = env.find(std::string(v));
    if (it == env.end()) continue;
    out += (out.empty() ? "" : " and ") + it->first + "=" + it->second;
  }
  return out;
}

}  // namespace accrun::detect::internal

namespace accrun::detect {

using internal::parse_int;
using internal::split;
using internal::trim;

std::optional<std::vector<int>> parse_cpulist(std::string_view text) {
  std::set<int> ids;
  std::string t = trim(text);
  if (t.empty()) return std::vector<int>{};
  for (const std::string& part : split(t, ',')) {
    auto dash = part.find('-');
    if (dash == std::string::npos) {
      auto v = parse_int(part);
      if (!v) return std::nullopt;
      ids.insert(*v);
    } else {
      auto a = parse_int(std::string_view(part).substr(0, dash));
      auto b = parse_int(std::string_view(part).substr(dash + 1));
      if (!a || !b || *a > *b || *b - *a > 1'000'000) return std::nullopt;
      for (int i = *a; i <= *b; ++i) ids.insert(i);
    }
  }
  return std::vector<int>(ids.begin(), ids.end());
}

std::string format_cpulist(const std::vector<int>& ids) {
  std::string out;
  size_t i = 0;
  while (i < ids.size()) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(ids[i]);
    if (j > i) out += '-' + std::to_string(ids[j]);
    i = j + 1;
  }
  return out;
}

std::string join_ids(const std::vector<int>& ids) {
  std::string out;
  for (int id : ids) {
    if (!out.empty()) out += ',';
    out += std::to_string(id);
  }
  return out;
}

}  // namespace accrun::detect
