// The placement planner (docs/design.md §3–4, accrun(7) PLACEMENT): a pure
// function from a JobSpec and the hosts to a Plan.  No I/O, no getenv.
//
// Work is linear in hosts + ranks (+ groups × blocks for --pod-blocks), so
// 80,000 ranks on 10,000 hosts plan in well under a second.
#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string_view>
#include <unordered_map>

#include "accrun/detect.hpp"
#include "accrun/plan.hpp"
#include "accrun/strings.hpp"

namespace accrun::launcher {
namespace {

using detect::Quantity;

constexpr long long kUnlimited = std::numeric_limits<long long>::max() / 4;
// The most ranks one plan may have (each costs a few KiB with its environment).
constexpr int kMaxRanks = 1 << 22;
// The TPU runtime's default mesh controller port; processes sharing a host's
// chips each need their own.
constexpr int kTpuMeshControllerPort = 8476;

using accrun::ascii_lower;
using accrun::ascii_upper;
std::string lower(std::string_view s) { return ascii_lower(s); }
std::string upper(std::string_view s) { return ascii_upper(s); }

// "0-3,8" from a set of CPU numbers, in any order.
std::string cpu_list(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return detect::format_cpulist(cpus);
}

// "ranks 2-3" / "rank 2" for messages.
std::string rank_range(int first, int last) {
  return first == last ? "rank " + std::to_string(first)
                       : "ranks " + std::to_string(first) + "-" + std::to_string(last);
}

// One requested resource with the devices of it on one host.
struct ResourceSlot {
  std::string name;
  Quantity q;
  std::vector<const detect::Accelerator*> devices;  // in inventory order
  long long ranks_fit = 0;                          // how many ranks the devices hold
};

// A host as the planner works on it.
struct Candidate {
  int input = 0;                        // index into the hosts argument
  std::vector<ResourceSlot> resources;  // one per requested resource
  long long device_cap = kUnlimited;    // ranks the devices hold
  long long slot_cap = kUnlimited;      // slots (unless --oversubscribe), --npernode
  long long first_pass_cap = kUnlimited;  // slots even under --oversubscribe: filled first
  long long cap() const { return std::min(device_cap, slot_cap); }
  long long used = 0;
  std::vector<int> ranks;               // global ranks placed here, ascending once sorted
};

std::string host_label(const HostSlots& h) {
  std::string s = "'" + h.inventory.host + "'";
  if (!h.origin.empty() && h.origin != "local") s += " (" + h.origin + ")";
  return s;
}

// The group label of a host at a level, or nothing.
const std::optional<std::string>& label_at(const detect::Inventory& inv, PodLevel level) {
  switch (level) {
    case PodLevel::kZone: return inv.labels.zone;
    case PodLevel::kRegion: return inv.labels.region;
    case PodLevel::kPod: break;
  }
  return inv.labels.pod;
}

const char* level_name(PodLevel level) {
  switch (level) {
    case PodLevel::kZone: return "zone";
    case PodLevel::kRegion: return "region";
    case PodLevel::kPod: break;
  }
  return "pod";
}

// How many ranks of `q` the devices hold, packing fractions one device
// before the next and giving whole requests whole devices.
long long ranks_on_devices(std::size_t devices, Quantity q) {
  if (q.is_zero()) return kUnlimited;
  if (q.units() < Quantity::kScale) {
    return static_cast<long long>(devices) * (Quantity::kScale / q.units());
  }
  return static_cast<long long>(devices) / q.whole_part();
}

Status validate_spec(const JobSpec& spec) {
  if (spec.np < 1) return invalid_argument("-n must be at least 1");
  if (spec.np > kMaxRanks) {
    // Refused before allocating a plan that would exhaust memory.
    return invalid_argument("-n " + std::to_string(spec.np) + " is more ranks than accrun plans (at most " +
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

// "; CUDA_VISIBLE_DEVICES=-1 (inherited) leaves 'h' 0 GPUs" for the hosts
// whose devices of a requested resource an inherited mask restricted.
std::string mask_note(const std::vector<HostSlots>& hosts, const std::vector<Candidate>& cands) {
  std::string note;
  int shown = 0;
  for (const auto& c : cands) {
    const HostSlots& h = hosts[static_cast<std::size_t>(c.input)];
    for (const auto& r : c.resources) {
      auto m = h.inventory.masks.find(r.name);
      if (m == h.inventory.masks.end()) continue;
      if (++shown > 2) return note + ", ...";
      note += (note.empty() ? "; " : ", ") + m->second + " (inherited) leaves " + host_label(h) + " " +
              std::to_string(r.devices.size()) + " " + r.name + (r.devices.size() == 1 ? "" : "s");
    }
  }
  return note;
}

// Explains why rank `rank` found no room: the host and device that ran out.
Status explain_full(const JobSpec& spec, const std::vector<HostSlots>& hosts,
                    const std::vector<Candidate>& cands, int rank, const std::string& where) {
  std::string msg = "cannot place rank " + std::to_string(rank) + " of -n " + std::to_string(spec.np) +
                    where + ": ";
  // Which limit stops it: the devices of a requested resource, or slots.
  const Candidate* last_dev = nullptr;
  const ResourceSlot* tight = nullptr;
  for (const auto& c : cands) {
    for (const auto& r : c.resources) {
      if (r.ranks_fit == c.device_cap && !r.devices.empty()) {
        last_dev = &c;
        tight = &r;
      }
    }
  }
  long long device_total = 0;
  long long slot_total = 0;
  for (const auto& c : cands) {
    device_total += std::min(c.device_cap, kUnlimited / 2);
    slot_total += std::min(c.slot_cap, kUnlimited / 2);
  }
  if (!spec.per_rank.empty() && device_total <= slot_total) {
    if (tight == nullptr) {
      std::string names;
      for (const auto& [n, q] : spec.per_rank) names += (names.empty() ? "" : ", ") + n + "=" + q.str();
      return invalid_argument(msg + "no host has the devices asked for (" + names + " per rank)" +
                              mask_note(hosts, cands) +
                              "; declare them with gpus=N/resources=NAME:N in the hostfile, "
                              "or --num-gpus/--resources for this host");
    }
    const auto* dev = tight->devices.back();
    msg += "every " + tight->name + " is taken — the hosts hold " + std::to_string(device_total) +
           " ranks of " + tight->name + "=" + tight->q.str() + "; the last host, " +
           host_label(hosts[static_cast<std::size_t>(last_dev->input)]) + ", ran out at " + tight->name +
           " " + std::to_string(dev->id) + " (its " + std::to_string(tight->devices.size()) + " " +
           tight->name + (tight->devices.size() == 1 ? "" : "s") + " hold " +
           std::to_string(tight->ranks_fit) + " such ranks)" + mask_note(hosts, cands);
    return invalid_argument(msg + "; ask for fewer ranks or less per rank, or add hosts");
  }
  msg += "the hosts have " + std::to_string(slot_total) + " slots";
  if (spec.npernode > 0) msg += " under --npernode " + std::to_string(spec.npernode);
  std::string detail;
  int shown = 0;
  for (const auto& c : cands) {
    if (shown == 4) {
      detail += ", ...";
      break;
    }
    const auto& h = hosts[static_cast<std::size_t>(c.input)];
    detail += (detail.empty() ? "" : ", ") + h.inventory.host + ": " + std::to_string(c.cap());
    ++shown;
  }
  if (!detail.empty()) msg += " (" + detail + ")";
  return invalid_argument(msg + "; add hosts or slots, or give --oversubscribe");
}

}  // namespace

Result<Plan> plan(const JobSpec& spec, const std::vector<HostSlots>& hosts) {
  ACCRUN_RETURN_IF_ERROR(validate_spec(spec));
  if (hosts.empty()) return invalid_argument("no hosts to place ranks on");

  // --accelerator-type: a constraint on hosts, never a preference.
  std::vector<int> eligible;
  eligible.reserve(hosts.size());
  if (spec.accelerator_type) {
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
          if (!a.type.empty() && !verdict->second && lower(a.type) == lower(detect::type_family(want))) {
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
    if (eligible.empty()) {
      std::string msg = "--accelerator-type " + *spec.accelerator_type + ": no host has accelerators of type " + want;
      if (types.empty()) {
        msg += "; the hosts have no accelerators of a known type (declare accelerator_type= in the hostfile "
               "or --host-accelerator-type for this host)";
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
  } else {
    eligible.resize(hosts.size());
    std::iota(eligible.begin(), eligible.end(), 0);
  }

  // What each host can hold.
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

  // Placement: each candidate gets a count; ranks are numbered afterwards.
  const int np = spec.np;
  std::vector<int> order;       // candidate indices in the order ranks fill them
  std::vector<std::pair<int, int>> runs;  // (candidate, count) in rank order
  if (spec.pod_blocks > 0) {
    // Groups at the level, in order of first appearance; a host without a
    // label is a group of its own.
    std::vector<std::vector<int>> groups;
    std::vector<std::string> group_names;
    std::unordered_map<std::string, std::size_t> by_label;
    for (std::size_t ci = 0; ci < cands.size(); ++ci) {
      const auto& inv = hosts[static_cast<std::size_t>(cands[ci].input)].inventory;
      const auto& label = label_at(inv, spec.pod_level);
      if (!label) {
        groups.push_back({static_cast<int>(ci)});
        group_names.push_back("host " + inv.host);
        continue;
      }
      auto [it, inserted] = by_label.emplace(*label, groups.size());
      if (inserted) {
        groups.emplace_back();
        group_names.push_back(std::string(level_name(spec.pod_level)) + " '" + *label + "'");
      }
      groups[it->second].push_back(static_cast<int>(ci));
    }
    // Inside a slice hosts follow the worker order (the TPU worker id), as
    // JAX's process index does; hosts without one keep file order after them.
    if (spec.pod_level == PodLevel::kPod) {
      for (auto& g : groups) {
        std::stable_sort(g.begin(), g.end(), [&](int a, int b) {
          const auto& ia = hosts[static_cast<std::size_t>(cands[static_cast<std::size_t>(a)].input)].inventory;
          const auto& ib = hosts[static_cast<std::size_t>(cands[static_cast<std::size_t>(b)].input)].inventory;
          const long long oa = ia.pod_order ? *ia.pod_order : kUnlimited;
          const long long ob = ib.pod_order ? *ib.pod_order : kUnlimited;
          return oa < ob;
        });
      }
    }
    std::vector<long long> room(groups.size(), 0);
    for (std::size_t g = 0; g < groups.size(); ++g) {
      for (int ci : groups[g]) {
        room[g] = std::min(kUnlimited, room[g] + cands[static_cast<std::size_t>(ci)].first_pass_cap);
      }
    }
    std::vector<std::size_t> next_host(groups.size(), 0);
    std::size_t first_open = 0;  // groups before it have no room left
    const int k = spec.pod_blocks;
    for (int start = 0; start < np; start += k) {
      const int size = std::min(k, np - start);
      while (first_open < groups.size() && room[first_open] == 0) ++first_open;
      std::size_t g = first_open;
      while (g < groups.size() && room[g] < size) ++g;
      if (g == groups.size() && spec.oversubscribe) {
        // Slots are full: under --oversubscribe a block may exceed them, in
        // the first group whose devices still hold it, spread round-robin.
        for (std::size_t i = 0; i < groups.size(); ++i) {
          long long free = 0;
          for (int ci : groups[i]) {
            const Candidate& c = cands[static_cast<std::size_t>(ci)];
            free = std::min(kUnlimited, free + (c.cap() - c.used));
          }
          if (free < size) continue;
          // Counts round-robin, then runs host by host so each host's
          // ranks of the block stay contiguous.
          std::vector<int> add(groups[i].size(), 0);
          int left = size;
          while (left > 0) {
            for (std::size_t h = 0; h < groups[i].size() && left > 0; ++h) {
              Candidate& c = cands[static_cast<std::size_t>(groups[i][h])];
              if (c.used >= c.cap()) continue;
              ++c.used;
              ++add[h];
              --left;
            }
          }
          for (std::size_t h = 0; h < groups[i].size(); ++h) {
            if (add[h] > 0) runs.emplace_back(groups[i][h], add[h]);
          }
          room[i] = 0;
          for (int ci : groups[i]) {
            const Candidate& c = cands[static_cast<std::size_t>(ci)];
            room[i] += std::max<long long>(0, c.first_pass_cap - c.used);
          }
          g = groups.size() + 1;  // placed
          break;
        }
        if (g == groups.size() + 1) continue;
      }
      if (g == groups.size()) {
        // The largest group: what the block would need.
        std::size_t best = 0;
        long long best_cap = -1;
        long long best_room = -1;
        std::size_t best_room_g = 0;
        for (std::size_t i = 0; i < groups.size(); ++i) {
          long long cap = 0;
          for (int ci : groups[i]) cap = std::min(kUnlimited, cap + cands[static_cast<std::size_t>(ci)].cap());
          if (cap > best_cap) {
            best_cap = cap;
            best = i;
          }
          if (room[i] > best_room) {
            best_room = room[i];
            best_room_g = i;
          }
        }
        std::string msg = "--pod-blocks " + std::to_string(k) + ": block of " + rank_range(start, start + size - 1) +
                          " fits in no " + level_name(spec.pod_level) + " group: ";
        if (best_cap < size) {
          msg += "the largest, " + group_names[best] + " (" + std::to_string(groups[best].size()) + " host" +
                 (groups[best].size() == 1 ? "" : "s") + "), holds " + std::to_string(best_cap) +
                 " ranks and the block needs " + std::to_string(size) + " in one group; use --pod-blocks " +
                 std::to_string(std::max<long long>(1, best_cap)) + " or less, or put more hosts in a " +
                 level_name(spec.pod_level);
        } else {
          msg += "earlier blocks filled the groups; the most room left is " + std::to_string(best_room) +
                 " ranks in " + group_names[best_room_g] + " and the block needs " + std::to_string(size) +
                 "; ask for fewer ranks or add hosts";
        }
        return invalid_argument(msg);
      }
      int left = size;
      room[g] -= size;
      auto& hosts_of_g = groups[g];
      while (left > 0) {
        int ci = hosts_of_g[next_host[g]];
        Candidate& c = cands[static_cast<std::size_t>(ci)];
        long long free = c.first_pass_cap - c.used;
        if (free <= 0) {
          ++next_host[g];
          continue;
        }
        int take = static_cast<int>(std::min<long long>(free, left));
        c.used += take;
        left -= take;
        if (!runs.empty() && runs.back().first == ci) runs.back().second += take;
        else runs.emplace_back(ci, take);
      }
    }
  } else {
    // Fill hosts in order (mpirun's default) up to their slots.
    int left = np;
    for (std::size_t ci = 0; ci < cands.size() && left > 0; ++ci) {
      Candidate& c = cands[ci];
      long long fit = std::min(c.first_pass_cap, static_cast<long long>(left));
      c.used = fit;
      left -= static_cast<int>(fit);
    }
    if (left > 0 && spec.oversubscribe) {
      // Slots full under --oversubscribe: spread the rest round-robin within
      // the device and --npernode limits.  Hosts without room leave the
      // round, so the work is linear in ranks + hosts.
      std::vector<std::size_t> open;
      for (std::size_t ci = 0; ci < cands.size(); ++ci) {
        if (cands[ci].used < cands[ci].cap()) open.push_back(ci);
      }
      while (left > 0 && !open.empty()) {
        std::size_t kept = 0;
        for (std::size_t ci : open) {
          if (left == 0) break;
          Candidate& c = cands[ci];
          ++c.used;
          --left;
          if (c.used < c.cap()) open[kept++] = ci;
        }
        open.resize(kept);
      }
    }
    if (left > 0) return explain_full(spec, hosts, cands, np - left, "");
    for (std::size_t ci = 0; ci < cands.size(); ++ci) {
      if (cands[ci].used > 0) runs.emplace_back(static_cast<int>(ci), static_cast<int>(cands[ci].used));
    }
  }

  // Ranks in run order; hosts numbered by their first rank.
  Plan out;
  out.ranks.resize(static_cast<std::size_t>(np));
  std::vector<int> node_of_cand(cands.size(), -1);
  {
    int r = 0;
    for (const auto& [ci, count] : runs) {
      Candidate& c = cands[static_cast<std::size_t>(ci)];
      if (node_of_cand[static_cast<std::size_t>(ci)] < 0) {
        node_of_cand[static_cast<std::size_t>(ci)] = static_cast<int>(out.hosts.size());
        out.hosts.push_back(hosts[static_cast<std::size_t>(c.input)]);
        order.push_back(ci);
      }
      for (int i = 0; i < count; ++i, ++r) c.ranks.push_back(r);
    }
  }

  const std::string master_addr = out.hosts[static_cast<std::size_t>(node_of_cand[static_cast<std::size_t>(runs.front().first)])].inventory.host;
  const bool user_omp = spec.inherited.count("OMP_NUM_THREADS") != 0 ||
                        std::any_of(spec.exports.begin(), spec.exports.end(),
                                    [](const auto& e) { return e.first == "OMP_NUM_THREADS"; });
  const std::string size_s = std::to_string(np);

  for (int ci : order) {
    Candidate& c = cands[static_cast<std::size_t>(ci)];
    const HostSlots& h = hosts[static_cast<std::size_t>(c.input)];
    const detect::Inventory& inv = h.inventory;
    const int node = node_of_cand[static_cast<std::size_t>(ci)];
    const int local_size = static_cast<int>(c.ranks.size());
    bool host_over = false;
    if (h.slots) host_over = local_size > *h.slots;
    else if (inv.cpus > 0) host_over = local_size > inv.cpus;
    if (spec.cpus_per_rank > 0 && !inv.cores.empty() &&
        static_cast<long long>(local_size) * spec.cpus_per_rank > static_cast<long long>(inv.cores.size())) {
      host_over = true;
    }
    out.oversubscribed = out.oversubscribed || host_over;

    // Devices: fractions pack one device before the next; whole requests
    // take whole devices in order.  Capacity was computed the same way, so
    // this never runs out.
    for (auto& r : c.resources) {
      std::size_t dev = 0;
      Quantity used_on_dev;
      const bool fractional = r.q.units() < Quantity::kScale;
      for (int rank : c.ranks) {
        RankPlan& rp = out.ranks[static_cast<std::size_t>(rank)];
        if (fractional) {
          if (Quantity::whole(1) - used_on_dev < r.q) {
            ++dev;
            used_on_dev = Quantity();
          }
          used_on_dev = used_on_dev + r.q;
          rp.devices.push_back({r.name, r.devices[dev]->id, r.q});
        } else {
          for (std::int64_t i = 0; i < r.q.whole_part(); ++i) {
            rp.devices.push_back({r.name, r.devices[dev++]->id, Quantity::whole(1)});
          }
        }
      }
    }

    // CPUs.
    std::vector<std::string> cpus(static_cast<std::size_t>(local_size));
    std::vector<int> ncores(static_cast<std::size_t>(local_size), 0);
    if (!inv.cores.empty()) {
      auto policy = spec.bind_to;
      if (policy == BindTo::kDefault) {
        policy = !spec.per_rank.empty() ? BindTo::kAccelerator
                 : spec.cpus_per_rank > 0 ? BindTo::kCore
                                          : BindTo::kNone;
      }
      std::vector<int> numa_ids;
      for (const auto& core : inv.cores) numa_ids.push_back(core.numa);
      std::sort(numa_ids.begin(), numa_ids.end());
      numa_ids.erase(std::unique(numa_ids.begin(), numa_ids.end()), numa_ids.end());
      auto cores_of_numa = [&](const std::set<int>& nodes) {
        std::vector<int> v;
        for (std::size_t i = 0; i < inv.cores.size(); ++i) {
          if (nodes.count(inv.cores[i].numa)) v.push_back(static_cast<int>(i));
        }
        return v;
      };
      auto device_of = [&](const AssignedDevice& d) -> const detect::Accelerator* {
        for (const auto& a : inv.accelerators) {
          if (a.resource == d.resource && a.id == d.id) return &a;
        }
        return nullptr;
      };
      // The cores a rank may use, keyed so ranks with the same locality share.
      std::map<std::vector<int>, std::vector<int>> shares;  // cores → local indices
      std::vector<std::vector<int>> whole_sets(static_cast<std::size_t>(local_size));
      for (int li = 0; li < local_size; ++li) {
        const RankPlan& rp = out.ranks[static_cast<std::size_t>(c.ranks[static_cast<std::size_t>(li)])];
        std::vector<int> pool;
        if (policy == BindTo::kNone) continue;
        if (policy == BindTo::kCore || (policy == BindTo::kAccelerator && rp.devices.empty())) {
          pool.resize(inv.cores.size());
          std::iota(pool.begin(), pool.end(), 0);
        } else {
          std::set<int> nodes;
          std::vector<int> near_cpus;
          bool unknown = false;
          for (const auto& d : rp.devices) {
            const detect::Accelerator* a = device_of(d);
            if (a && a->numa) nodes.insert(*a->numa);
            else if (a && a->cpus) {
              auto v = detect::parse_cpulist(*a->cpus).value_or(std::vector<int>{});
              near_cpus.insert(near_cpus.end(), v.begin(), v.end());
            } else unknown = true;
          }
          if (policy == BindTo::kNuma && nodes.empty()) {
            nodes.insert(numa_ids[static_cast<std::size_t>(li) % numa_ids.size()]);
          }
          if (!unknown && !near_cpus.empty()) {
            std::set<int> near(near_cpus.begin(), near_cpus.end());
            for (std::size_t i = 0; i < inv.cores.size(); ++i) {
              for (int pu : inv.cores[i].pus) {
                if (near.count(pu)) {
                  nodes.insert(inv.cores[i].numa);
                  break;
                }
              }
            }
          }
          if (!unknown && !nodes.empty()) pool = cores_of_numa(nodes);
          if (pool.empty()) {
            pool.resize(inv.cores.size());
            std::iota(pool.begin(), pool.end(), 0);
          }
          if (policy == BindTo::kNuma) {
            whole_sets[static_cast<std::size_t>(li)] = pool;
            continue;
          }
        }
        shares[pool].push_back(li);
      }
      for (int li = 0; li < local_size; ++li) {
        const auto& ws = whole_sets[static_cast<std::size_t>(li)];
        if (ws.empty()) continue;
        std::vector<int> pus;
        for (int core : ws) pus.insert(pus.end(), inv.cores[static_cast<std::size_t>(core)].pus.begin(),
                                       inv.cores[static_cast<std::size_t>(core)].pus.end());
        cpus[static_cast<std::size_t>(li)] = cpu_list(std::move(pus));
        ncores[static_cast<std::size_t>(li)] = static_cast<int>(ws.size());
      }
      for (const auto& [pool, members] : shares) {
        // Ranks sharing a pool split it, so they do not share cores while
        // there are enough; -c fixes each rank's share.
        const std::size_t m = members.size();
        std::size_t per = spec.cpus_per_rank > 0 ? static_cast<std::size_t>(spec.cpus_per_rank)
                          : policy == BindTo::kCore ? 1
                                                    : std::max<std::size_t>(1, pool.size() / m);
        per = std::min(per, pool.size());
        for (std::size_t j = 0; j < m; ++j) {
          std::vector<int> pus;
          for (std::size_t k = 0; k < per; ++k) {
            const auto& core = inv.cores[static_cast<std::size_t>(pool[(j * per + k) % pool.size()])];
            pus.insert(pus.end(), core.pus.begin(), core.pus.end());
          }
          cpus[static_cast<std::size_t>(members[j])] = cpu_list(std::move(pus));
          ncores[static_cast<std::size_t>(members[j])] = static_cast<int>(per);
        }
      }
    }

    // Visibility: the union of the host's job devices per resource, for
    // --visible-devices node.
    std::map<std::string, std::vector<int>> host_ids;
    if (spec.visible_devices == Visibility::kNode) {
      for (int rank : c.ranks) {
        for (const auto& d : out.ranks[static_cast<std::size_t>(rank)].devices) host_ids[d.resource].push_back(d.id);
      }
      for (auto& [_, v] : host_ids) {
        std::sort(v.begin(), v.end());
        v.erase(std::unique(v.begin(), v.end()), v.end());
      }
    }
    // Ranks sharing a host's TPU chips each need their own mesh controller port.
    bool tpu_split = false;
    for (const auto& r : c.resources) {
      if (r.name == "TPU" && local_size > 0 &&
          static_cast<std::size_t>(r.q.whole_part()) < r.devices.size()) {
        tpu_split = true;
      }
    }

    // Names and values shared by the host's ranks, built once.
    std::vector<std::pair<std::string, std::string>> res_vars;  // ACCRUN_<R>_IDS, ACCRUN_<R>_FRACTION
    for (const auto& r : c.resources) {
      const std::string var = "ACCRUN_" + upper(r.name);
      res_vars.emplace_back(var + "_IDS", var + "_FRACTION");
    }
    // A MASTER_PORT the user set is kept (as torchrun keeps it); else the
    // port the launcher chose.
    const auto user_port = spec.inherited.find("MASTER_PORT");
    const bool keep_port = user_port != spec.inherited.end() && !user_port->second.empty();
    const std::string master_port_s = keep_port ? user_port->second : std::to_string(spec.master_port);
    const std::string local_size_s = std::to_string(local_size);
    const std::string node_s = std::to_string(node);
    std::string type;  // the ranks' device type, else the host's
    for (const auto& r : c.resources) {
      if (type.empty() && !r.devices.empty()) type = r.devices.front()->type;
    }
    for (const auto& a : inv.accelerators) {
      if (!type.empty()) break;
      type = a.type;
    }
    std::vector<const detect::Provider*> provider_of;
    for (const auto& r : c.resources) {
      provider_of.push_back(r.devices.empty() ? nullptr : detect::provider_for_vendor(r.devices.front()->vendor));
    }

    // What every rank on the host shares, built once and copied: a map copy
    // clones nodes without comparing keys, which matters at 80,000 ranks.
    Env common;
    common.emplace("ACCRUN_SIZE", size_s);
    common.emplace("ACCRUN_LOCAL_SIZE", local_size_s);
    common.emplace("ACCRUN_NODE_RANK", node_s);
    common.emplace("ACCRUN_HOST", inv.host);
    common.emplace("ACCRUN_OVERSUBSCRIBED", host_over ? "1" : "0");
    if (!type.empty()) common.emplace("ACCRUN_ACCELERATOR_TYPE", type);
    if (inv.labels.pod) common.emplace("ACCRUN_POD", *inv.labels.pod);
    if (inv.labels.zone) common.emplace("ACCRUN_ZONE", *inv.labels.zone);
    if (inv.labels.region) common.emplace("ACCRUN_REGION", *inv.labels.region);
    for (std::size_t ri = 0; ri < c.resources.size(); ++ri) {
      const ResourceSlot& r = c.resources[ri];
      if (r.q.units() < Quantity::kScale) common.emplace(res_vars[ri].second, r.q.str());
    }
    common.emplace("WORLD_SIZE", size_s);
    common.emplace("LOCAL_WORLD_SIZE", local_size_s);
    common.emplace("MASTER_ADDR", master_addr);
    if (keep_port || spec.master_port > 0) common.emplace("MASTER_PORT", master_port_s);
    common.emplace("OMPI_COMM_WORLD_SIZE", size_s);
    common.emplace("OMPI_COMM_WORLD_LOCAL_SIZE", local_size_s);

    for (int li = 0; li < local_size; ++li) {
      const int rank = c.ranks[static_cast<std::size_t>(li)];
      RankPlan& rp = out.ranks[static_cast<std::size_t>(rank)];
      rp.rank = rank;
      rp.host = node;
      rp.local_rank = li;
      rp.cpus = std::move(cpus[static_cast<std::size_t>(li)]);
      rp.env = common;
      Env& env = rp.env;
      const std::string rank_s = std::to_string(rank);
      const std::string local_s = std::to_string(li);
      env.emplace("ACCRUN_RANK", rank_s);
      env.emplace("ACCRUN_LOCAL_RANK", local_s);
      env.emplace("RANK", rank_s);
      env.emplace("LOCAL_RANK", local_s);
      env.emplace("OMPI_COMM_WORLD_RANK", rank_s);
      env.emplace("OMPI_COMM_WORLD_LOCAL_RANK", local_s);

      for (std::size_t ri = 0; ri < c.resources.size(); ++ri) {
        const ResourceSlot& r = c.resources[ri];
        std::vector<int> ids;
        for (const auto& d : rp.devices) {
          if (d.resource == r.name) ids.push_back(d.id);
        }
        env.emplace(res_vars[ri].first, detect::join_ids(ids));
        if (const detect::Provider* p = provider_of[ri]) {
          std::vector<int> visible = ids;
          if (spec.visible_devices == Visibility::kNode) {
            for (int id : host_ids[r.name]) {
              if (std::find(ids.begin(), ids.end(), id) == ids.end()) visible.push_back(id);
            }
          }
          p->set_visible(visible, static_cast<int>(r.devices.size()), spec.inherited, env);
        }
      }
      if (tpu_split) env["TPU_MESH_CONTROLLER_PORT"] = std::to_string(kTpuMeshControllerPort + li);
      if (!user_omp) {
        const int n = spec.cpus_per_rank > 0 ? spec.cpus_per_rank : ncores[static_cast<std::size_t>(li)];
        if (n > 0) env.emplace("OMP_NUM_THREADS", std::to_string(n));
      }
      for (const auto& [name, value] : spec.exports) {
        if (value) {
          env[name] = *value;
        } else if (auto it = spec.inherited.find(name); it != spec.inherited.end()) {
          env[name] = it->second;
        }
      }
    }
  }
  return out;
}

}  // namespace accrun::launcher
