// `accrun --detect` output: the table, and docs/design.md §9's JSON (written and
// read back: the job controller reads agents' inventories with from_json),
// through nlohmann-json.
#include <limits>

#include "accrun/json.hpp"
#include "internal.hpp"

namespace accrun::detect {
namespace {

// Nesting deeper than the inventory's own (4 levels) is refused while
// parsing, so hostile input cannot make the parser build deep trees.
constexpr int kMaxDepth = 16;

Json opt(const std::optional<std::string>& s) { return s ? Json(*s) : Json(nullptr); }
Json opt(const std::optional<int>& v) { return v ? Json(*v) : Json(nullptr); }

Status field_error(const std::string& where, const std::string& key, const std::string& want) {
  return invalid_argument("inventory JSON: " + where + "." + key + " must be " + want);
}

// Readers of one member of an object; a missing member reads as null.
const nlohmann::json* member(const nlohmann::json& o, const std::string& key) {
  auto it = o.find(key);
  return it == o.end() ? nullptr : &*it;
}

Result<std::optional<std::string>> get_opt_string(const nlohmann::json& o, const std::string& where,
                                                  const std::string& key) {
  const nlohmann::json* v = member(o, key);
  if (v == nullptr || v->is_null()) return std::optional<std::string>();
  if (!v->is_string()) return field_error(where, key, "a string or null");
  return std::optional<std::string>(v->get_ref<const std::string&>());
}
Result<std::string> get_string(const nlohmann::json& o, const std::string& where, const std::string& key) {
  auto v = get_opt_string(o, where, key);
  if (!v) return v.status();
  if (!*v) return field_error(where, key, "a string");
  return **v;
}
Result<std::optional<int>> get_opt_int(const nlohmann::json& o, const std::string& where, const std::string& key) {
  const nlohmann::json* v = member(o, key);
  if (v == nullptr || v->is_null()) return std::optional<int>();
  constexpr long long kLimit = 1'000'000'000;
  if (v->is_number_integer()) {
    // Both signed and unsigned integers; a float (1.5, even 2.0) is not one.
    if (v->is_number_unsigned()) {
      const auto u = v->get<std::uint64_t>();
      if (u <= static_cast<std::uint64_t>(kLimit)) return std::optional<int>(static_cast<int>(u));
    } else {
      const auto i = v->get<std::int64_t>();
      if (i >= -kLimit && i <= kLimit) return std::optional<int>(static_cast<int>(i));
    }
  }
  return field_error(where, key, "an integer or null");
}
Result<int> get_int(const nlohmann::json& o, const std::string& where, const std::string& key) {
  auto v = get_opt_int(o, where, key);
  if (!v) return v.status();
  if (!*v) return field_error(where, key, "an integer");
  return **v;
}

std::string cell(const std::optional<std::string>& s) { return s ? *s : "-"; }
std::string cell(const std::optional<int>& v) { return v ? std::to_string(*v) : "-"; }

Result<Inventory> read_host(const nlohmann::json& o, const std::string& where) {
  if (!o.is_object()) return invalid_argument("inventory JSON: " + where + " must be an object");
  Inventory inv;
  auto host = get_string(o, where, "host");
  if (!host) return host.status();
  inv.host = *host;
  auto cpus = get_int(o, where, "cpus");
  if (!cpus) return cpus.status();
  inv.cpus = *cpus;
  auto numa = get_int(o, where, "numa_nodes");
  if (!numa) return numa.status();
  inv.numa_nodes = *numa;
  if (const nlohmann::json* l = member(o, "labels"); l != nullptr && !l->is_null()) {
    if (!l->is_object()) return field_error(where, "labels", "an object");
    auto pod = get_opt_string(*l, where + ".labels", "pod");
    auto zone = get_opt_string(*l, where + ".labels", "zone");
    auto region = get_opt_string(*l, where + ".labels", "region");
    if (!pod) return pod.status();
    if (!zone) return zone.status();
    if (!region) return region.status();
    inv.labels = Labels{*pod, *zone, *region};
    // The host's place in its pod (the TPU worker id), as detected: the
    // controller plans with a remote host's from its agent's report.
    auto worker = get_opt_int(*l, where + ".labels", "worker");
    if (!worker) return worker.status();
    if (*worker && **worker < 0) return field_error(where + ".labels", "worker", "0 or more");
    inv.pod_order = *worker;
  }
  const nlohmann::json* accs = member(o, "accelerators");
  if (accs == nullptr) return inv;
  if (!accs->is_array()) return field_error(where, "accelerators", "an array");
  for (size_t i = 0; i < accs->size(); ++i) {
    const std::string w = where + ".accelerators[" + std::to_string(i) + "]";
    const nlohmann::json& ao = (*accs)[i];
    if (!ao.is_object()) return invalid_argument("inventory JSON: " + w + " must be an object");
    Accelerator a;
    auto res = get_string(ao, w, "resource");
    if (!res) return res.status();
    auto canon = canonical_resource(*res);
    if (!canon) return canon.status().with_context("inventory JSON: " + w);
    a.resource = *canon;
    auto id = get_int(ao, w, "id");
    if (!id) return id.status();
    if (*id < 0) return field_error(w, "id", "0 or more");
    a.id = *id;
    auto type = get_opt_string(ao, w, "type");
    auto pci = get_opt_string(ao, w, "pci");
    auto an = get_opt_int(ao, w, "numa");
    auto ac = get_opt_string(ao, w, "cpus");
    auto uuid = get_opt_string(ao, w, "uuid");
    if (!type) return type.status();
    if (!pci) return pci.status();
    if (!an) return an.status();
    if (!ac) return ac.status();
    if (!uuid) return uuid.status();
    a.type = type->value_or("");
    a.pci = *pci;
    a.numa = *an;
    a.cpus = *ac;
    a.uuid = *uuid;
    if (const nlohmann::json* l = member(ao, "logical"); l != nullptr) {
      if (!l->is_boolean()) return field_error(w, "logical", "true or false");
      a.logical = l->get<bool>();
    }
    // The vendor is not in the JSON: the type's maker, else the resource's default.
    a.vendor = vendor_of_type(a.type);
    if (a.vendor.empty() || resource_of_type(a.type) != a.resource) a.vendor = default_vendor(a.resource);
    inv.accelerators.push_back(std::move(a));
  }
  return inv;
}

}  // namespace

std::string to_json(const std::vector<Inventory>& hosts) {
  Json list = Json::array();
  for (const Inventory& inv : hosts) {
    Json accs = Json::array();
    for (const Accelerator& a : inv.accelerators) {
      accs.push_back(Json{{"resource", a.resource}, {"id", a.id},         {"type", a.type},
                          {"pci", opt(a.pci)},      {"numa", opt(a.numa)}, {"cpus", opt(a.cpus)},
                          {"uuid", opt(a.uuid)},    {"logical", a.logical}});
    }
    list.push_back(Json{{"host", inv.host},
                        {"cpus", inv.cpus},
                        {"numa_nodes", inv.numa_nodes},
                        {"labels", Json{{"pod", opt(inv.labels.pod)},
                                        {"zone", opt(inv.labels.zone)},
                                        {"region", opt(inv.labels.region)},
                                        {"worker", opt(inv.pod_order)}}},
                        {"accelerators", std::move(accs)}});
  }
  std::string out;
  append_json(out, Json{{"hosts", std::move(list)}});
  out += '\n';
  return out;
}

Result<std::vector<Inventory>> from_json(std::string_view json) {
  // Values nested deeper than the inventory's shape are dropped while
  // parsing (and then missing where a field is expected).
  const nlohmann::json::parser_callback_t depth_cap = [](int depth, nlohmann::json::parse_event_t,
                                                          nlohmann::json&) { return depth <= kMaxDepth; };
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(json.begin(), json.end(), depth_cap, /*allow_exceptions=*/false);
  } catch (const std::exception& e) {
    return invalid_argument(std::string("inventory JSON: ") + e.what());
  }
  if (root.is_discarded()) return invalid_argument("inventory JSON: not valid JSON");
  if (!root.is_object() || !root.contains("hosts") || !root["hosts"].is_array()) {
    return invalid_argument("inventory JSON: expected an object with a \"hosts\" array");
  }
  std::vector<Inventory> out;
  const nlohmann::json& hosts = root["hosts"];
  out.reserve(hosts.size());
  for (size_t h = 0; h < hosts.size(); ++h) {
    auto inv = read_host(hosts[h], "hosts[" + std::to_string(h) + "]");
    if (!inv) return inv.status();
    out.push_back(std::move(*inv));
  }
  return out;
}

std::string format_table(const std::vector<Inventory>& hosts) {
  std::string out;
  for (const Inventory& inv : hosts) {
    out += inv.host + ": " + std::to_string(inv.cpus) + " CPUs, " + std::to_string(inv.numa_nodes) +
           (inv.numa_nodes == 1 ? " NUMA node" : " NUMA nodes");
    std::string labels;
    if (inv.labels.pod) labels += " pod=" + *inv.labels.pod;
    if (inv.labels.zone) labels += " zone=" + *inv.labels.zone;
    if (inv.labels.region) labels += " region=" + *inv.labels.region;
    if (inv.pod_order) labels += " worker=" + std::to_string(*inv.pod_order);
    if (!labels.empty()) out += ", labels:" + labels;
    if (inv.topology_from_xml) out += " (topology from an XML file)";
    out += "\n";
    if (inv.accelerators.empty()) {
      out += "  no accelerators detected\n";
      continue;
    }
    std::vector<std::vector<std::string>> rows = {{"RESOURCE", "ID", "TYPE", "PCI", "NUMA", "CPUS", "UUID", ""}};
    for (const Accelerator& a : inv.accelerators) {
      rows.push_back({a.resource, std::to_string(a.id), a.type.empty() ? "-" : a.type, cell(a.pci), cell(a.numa),
                      cell(a.cpus), cell(a.uuid), a.logical ? "logical" : ""});
    }
    std::vector<size_t> width(rows[0].size(), 0);
    for (const auto& r : rows)
      for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
    for (const auto& r : rows) {
      std::string line = " ";
      for (size_t c = 0; c < r.size(); ++c) {
        line += ' ' + r[c];
        if (c + 1 < r.size()) line += std::string(width[c] - r[c].size() + 1, ' ');
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
  }
  return out;
}

std::string cores_to_text(const std::vector<Core>& cores) {
  std::string out;
  for (const Core& c : cores) {
    if (!out.empty()) out += ';';
    out += std::to_string(c.numa) + ':';
    for (size_t i = 0; i < c.pus.size(); ++i) out += (i ? "," : "") + std::to_string(c.pus[i]);
  }
  return out;
}

Result<std::vector<Core>> cores_from_text(std::string_view text) {
  std::vector<Core> out;
  auto number = [](std::string_view s, int* v) {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string_view::npos) return false;
    *v = std::stoi(std::string(s));
    return true;
  };
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find(';', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view core = text.substr(pos, end - pos);
    const std::string which = "core " + std::to_string(out.size());
    size_t colon = core.find(':');
    Core c;
    if (colon == std::string_view::npos || !number(core.substr(0, colon), &c.numa))
      return invalid_argument(which + ": expected NUMA:PU[,PU...], got '" + std::string(core) + "'");
    std::string_view pus = core.substr(colon + 1);
    for (size_t p = 0; p <= pus.size();) {
      size_t comma = pus.find(',', p);
      if (comma == std::string_view::npos) comma = pus.size();
      int pu = 0;
      if (!number(pus.substr(p, comma - p), &pu))
        return invalid_argument(which + ": bad processing unit in '" + std::string(core) + "'");
      c.pus.push_back(pu);
      p = comma + 1;
    }
    out.push_back(std::move(c));
    pos = end + 1;
  }
  return out;
}

}  // namespace accrun::detect
