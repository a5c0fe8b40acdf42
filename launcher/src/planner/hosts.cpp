// Planner steps 1–3 (steps.hpp): the request on its own, the hosts
// --accelerator-type allows, and how many ranks each of them holds.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include "accrun/detect.hpp"
#include "accrun/strings.hpp"
#include "planner/steps.hpp"

namespace accrun::launcher::planner {
namespace {

using detect::Quantity;

// The most ranks one plan may have (each costs a few KiB with its environment).
constexpr int kMaxRanks = 1 << 22;

// The error for --accelerator-type when no host has the type: the types the
// hosts do have, each with its first host and how many more.
Status no_host_of_type(const JobSpec& spec, const std::string& want,
                       const std::map<std::string, std::vector<std::string>>& types, bool family_only) {
  std::string msg = "--accelerator-type " + *spec.accelerator_type + ": no host has accelerators of type " + want;
  if (types.empty()) {
    // (A type alone names no devices: a host declaring accelerator_type=
    // without any, or this host given --host-accelerator-type without
    // --num-gpus and without GPUs, still has none.)
    msg +=
        "; the hosts have no accelerators of a known type (a type names devices a host has: "
        "declare "
        "gpus=N with accelerator_type= in the hostfile, or give this host --num-gpus N with "
        "--host-accelerator-type)";
  } else {
    msg += "; types here: ";
    bool first = true;
    for (const auto& [t, hs] : types) {
      msg += (first ? "" : ", ") + t + " (" + hs.front() +
             (hs.size() > 1 ? " and " + std::to_string(hs.size() - 1) + " more" : "") + ")";
      first = false;
    }
  }
  if (family_only) {
    msg += " (" + detect::type_family(want) + " does not say its variant: declare accelerator_type=" + want +
           " for hosts that have it)";
  }
  return invalid_argument(msg);
}

}  // namespace

std::string ranks_asked(const JobSpec& spec) {
  if (spec.np_from.empty()) return "-n " + std::to_string(spec.np);
  return std::to_string(spec.np) + " ranks (" + spec.np_from + ", as -n was not given)";
}

Status validate_spec(const JobSpec& spec) {
  if (spec.np < 1) return invalid_argument("-n must be at least 1");
  if (spec.np > kMaxRanks) {
    // Refused before allocating a plan that would exhaust memory.
    return invalid_argument(ranks_asked(spec) + " is more ranks than accrun plans (at most " +
                            std::to_string(kMaxRanks) + ")");
  }
  std::set<std::string> seen;
  for (const auto& [name, q] : spec.per_rank) {
    auto canon = detect::canonical_resource(name);
    if (!canon) return canon.status();
    if (*canon != name) {
      return invalid_argument("resource '" + name + "' must be given by its canonical name '" + *canon + "'");
    }
    if (!seen.insert(name).second) return invalid_argument(name + " is requested twice");
    ACCRUN_RETURN_IF_ERROR(detect::validate_request(name, q));
  }
  if (spec.pod_blocks < 0) return invalid_argument("--pod-blocks must be at least 1");
  if (spec.cpus_per_rank < 0) return invalid_argument("-c must be at least 1");
  if (spec.npernode < 0) return invalid_argument("--npernode must be at least 1");
  return Status::ok();
}

long long ranks_on_devices(std::size_t devices, Quantity q) {
  if (q.is_zero()) return kUnlimited;
  if (q.units() < Quantity::kScale) {
    return static_cast<long long>(devices) * (Quantity::kScale / q.units());
  }
  return static_cast<long long>(devices) / q.whole_part();
}

Result<std::vector<int>> eligible_hosts(const JobSpec& spec, const std::vector<HostSlots>& hosts) {
  std::vector<int> eligible;
  eligible.reserve(hosts.size());
  if (!spec.accelerator_type) {
    eligible.resize(hosts.size());
    std::iota(eligible.begin(), eligible.end(), 0);
    return eligible;
  }
  // A constraint on hosts, never a preference.
  const std::string want = detect::canonical_type(*spec.accelerator_type);
  std::map<std::string, std::vector<std::string>> types;  // type → hosts having it
  bool family_only = false;  // a host whose type is the family of `want` (its variant unknown)
  std::unordered_map<std::string, bool> verdicts;  // type → whether it meets `want`
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    bool match = false;
    for (const auto& a : hosts[i].inventory.accelerators) {
      // A request without the variant ("A100") is met by every variant.
      // Hosts share a few types: each is judged once.
      auto verdict = verdicts.find(a.type);
      if (verdict == verdicts.end()) {
        verdict = verdicts.emplace(a.type, detect::type_matches(a.type, want)).first;
        if (!a.type.empty() && !verdict->second &&
            ascii_lower(a.type) == ascii_lower(detect::type_family(want))) {
          family_only = true;
        }
      }
      if (verdict->second) match = true;
      if (!a.type.empty()) {
        auto& v = types[a.type];
        if (v.empty() || v.back() != hosts[i].inventory.host) v.push_back(hosts[i].inventory.host);
      }
    }
    if (match) eligible.push_back(static_cast<int>(i));
  }
  if (eligible.empty()) return no_host_of_type(spec, want, types, family_only);
  return eligible;
}

std::vector<Candidate> host_capacities(const JobSpec& spec, const std::vector<HostSlots>& hosts,
                                       const std::vector<int>& eligible) {
  std::vector<Candidate> cands;
  cands.reserve(eligible.size());
  for (int idx : eligible) {
    const HostSlots& h = hosts[static_cast<std::size_t>(idx)];
    Candidate c;
    c.input = idx;
    for (const auto& [name, q] : spec.per_rank) {
      ResourceSlot r;
      r.name = name;
      r.q = q;
      for (const auto& a : h.inventory.accelerators) {
        if (a.resource == name) r.devices.push_back(&a);
      }
      r.ranks_fit = ranks_on_devices(r.devices.size(), q);
      c.device_cap = std::min(c.device_cap, r.ranks_fit);
      c.resources.push_back(std::move(r));
    }
    if (h.slots && !spec.oversubscribe) c.slot_cap = *h.slots;
    if (spec.npernode > 0) c.slot_cap = std::min<long long>(c.slot_cap, spec.npernode);
    c.first_pass_cap = h.slots ? std::min<long long>(c.cap(), *h.slots) : c.cap();
    cands.push_back(std::move(c));
  }
  return cands;
}

}  // namespace accrun::launcher::planner
