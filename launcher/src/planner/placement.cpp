// Planner steps 4–5 (steps.hpp): how many ranks go to each host, in rank
// order — hosts in order (mpirun's default) or blocks inside pod groups —
// and the numbering of ranks and hosts that follows from it.
#include <algorithm>
#include <unordered_map>

#include "planner/steps.hpp"

namespace accrun::launcher::planner {
namespace {

// "ranks 2-3" / "rank 2" for messages.
std::string rank_range(int first, int last) {
  return first == last ? "rank " + std::to_string(first)
                       : "ranks " + std::to_string(first) + "-" + std::to_string(last);
}

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

void append_run(std::vector<Run>& runs, int candidate, int count) {
  if (!runs.empty() && runs.back().candidate == candidate) runs.back().count += count;
  else runs.push_back({candidate, count});
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

// Explains why rank `rank` found no room: the host and device that ran out,
// or the slots.
Status explain_full(const JobSpec& spec, const std::vector<HostSlots>& hosts,
                    const std::vector<Candidate>& cands, int rank) {
  std::string msg = "cannot place rank " + std::to_string(rank) + " of " + ranks_asked(spec) + ": ";
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
    // No host has as many as one rank asks for: say so, not "taken".
    std::size_t most = 0;
    const Candidate* biggest = nullptr;
    for (const auto& c : cands)
      for (const auto& r : c.resources)
        if (r.name == tight->name && (biggest == nullptr || r.devices.size() > most)) {
          most = r.devices.size();
          biggest = &c;
        }
    if (device_total == 0 && biggest != nullptr &&
        static_cast<long long>(most) < tight->q.whole_part()) {
      return invalid_argument(msg + "a rank asks for " + tight->name + "=" + tight->q.str() +
                              ", and no host has " + "that many: the most on one host is " +
                              std::to_string(most) + " (" +
                              host_label(hosts[static_cast<std::size_t>(biggest->input)]) + ")" +
                              mask_note(hosts, cands) + "; ask for at most " +
                              std::to_string(most) + " per rank, or add hosts with more");
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
  // What would help: --oversubscribe lifts the slots, never --npernode.
  if (spec.oversubscribe) return invalid_argument(msg + "; add hosts or raise --npernode");
  if (spec.npernode > 0)
    return invalid_argument(msg + "; add hosts, raise --npernode, or add slots or give --oversubscribe where the "
                                  "slots are fewer");
  return invalid_argument(msg + "; add hosts or slots, or give --oversubscribe");
}

// The sum over a group's hosts of `per_host(candidate)`, capped at kUnlimited.
template <class F>
long long group_sum(const PodGroup& g, const std::vector<Candidate>& cands, F per_host) {
  long long sum = 0;
  for (int ci : g.members) sum = std::min(kUnlimited, sum + per_host(cands[static_cast<std::size_t>(ci)]));
  return sum;
}

// Ranks a group still holds within its hosts' slots (the first pass).
long long slot_room(const PodGroup& g, const std::vector<Candidate>& cands) {
  return group_sum(g, cands, [](const Candidate& c) { return std::max<long long>(0, c.first_pass_cap - c.used); });
}

// Puts `size` ranks on group `g` beyond its slots (--oversubscribe): counts
// round-robin within each host's cap, then one run per host so each host's
// ranks of the block stay contiguous.  The group's devices must hold them.
void spread_over_group(const PodGroup& g, int size, std::vector<Candidate>& cands, std::vector<Run>& runs) {
  std::vector<int> add(g.members.size(), 0);
  int left = size;
  while (left > 0) {
    for (std::size_t h = 0; h < g.members.size() && left > 0; ++h) {
      Candidate& c = cands[static_cast<std::size_t>(g.members[h])];
      if (c.used >= c.cap()) continue;
      ++c.used;
      ++add[h];
      --left;
    }
  }
  for (std::size_t h = 0; h < g.members.size(); ++h) {
    if (add[h] > 0) runs.push_back({g.members[h], add[h]});
  }
}

// Puts `size` ranks on group `g` within its slots, its hosts in order from
// `next_host` (advanced past hosts that are full).
void fill_group(const PodGroup& g, int size, std::size_t& next_host, std::vector<Candidate>& cands,
                std::vector<Run>& runs) {
  int left = size;
  while (left > 0) {
    const int ci = g.members[next_host];
    Candidate& c = cands[static_cast<std::size_t>(ci)];
    const long long free = c.first_pass_cap - c.used;
    if (free <= 0) {
      ++next_host;
      continue;
    }
    const int take = static_cast<int>(std::min<long long>(free, left));
    c.used += take;
    left -= take;
    append_run(runs, ci, take);
  }
}

// The error for a block of ranks [start, start+size) that fits in no group:
// the largest group when even it is too small, else the most room left.
Status block_fits_nowhere(const JobSpec& spec, const std::vector<PodGroup>& groups,
                          const std::vector<Candidate>& cands, const std::vector<long long>& room, int start,
                          int size) {
  std::size_t best = 0;
  long long best_cap = -1;
  long long best_room = -1;
  std::size_t best_room_g = 0;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const long long cap = group_sum(groups[i], cands, [](const Candidate& c) { return c.cap(); });
    if (cap > best_cap) {
      best_cap = cap;
      best = i;
    }
    if (room[i] > best_room) {
      best_room = room[i];
      best_room_g = i;
    }
  }
  const int k = spec.pod_blocks;
  std::string msg = "--pod-blocks " + std::to_string(k) + ": block of " + rank_range(start, start + size - 1) +
                    " fits in no " + level_name(spec.pod_level) + " group: ";
  if (best_cap < size) {
    const std::size_t n = groups[best].members.size();
    msg += "the largest, " + groups[best].name + " (" + std::to_string(n) + " host" + (n == 1 ? "" : "s") +
           "), holds " + std::to_string(best_cap) + " ranks and the block needs " + std::to_string(size) +
           " in one group; use --pod-blocks " + std::to_string(std::max<long long>(1, best_cap)) +
           " or less, or put more hosts in a " + level_name(spec.pod_level);
  } else {
    msg += "earlier blocks filled the groups; the most room left is " + std::to_string(best_room) + " ranks in " +
           groups[best_room_g].name + " and the block needs " + std::to_string(size) +
           "; ask for fewer ranks or add hosts";
  }
  return invalid_argument(msg);
}

}  // namespace

Result<std::vector<Run>> place_in_order(const JobSpec& spec, const std::vector<HostSlots>& hosts,
                                        std::vector<Candidate>& cands) {
  int left = spec.np;
  for (std::size_t ci = 0; ci < cands.size() && left > 0; ++ci) {
    Candidate& c = cands[ci];
    const long long fit = std::min(c.first_pass_cap, static_cast<long long>(left));
    c.used = fit;
    left -= static_cast<int>(fit);
  }
  if (left > 0 && spec.oversubscribe) {
    // Slots full under --oversubscribe: the rest round-robin.  Hosts without
    // room leave the round, so the work is linear in ranks + hosts.
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
  if (left > 0) return explain_full(spec, hosts, cands, spec.np - left);
  std::vector<Run> runs;
  for (std::size_t ci = 0; ci < cands.size(); ++ci) {
    if (cands[ci].used > 0) runs.push_back({static_cast<int>(ci), static_cast<int>(cands[ci].used)});
  }
  return runs;
}

std::vector<PodGroup> pod_groups(const JobSpec& spec, const std::vector<HostSlots>& hosts,
                                 const std::vector<Candidate>& cands) {
  std::vector<PodGroup> groups;
  std::unordered_map<std::string, std::size_t> by_label;
  for (std::size_t ci = 0; ci < cands.size(); ++ci) {
    const auto& inv = hosts[static_cast<std::size_t>(cands[ci].input)].inventory;
    const auto& label = label_at(inv, spec.pod_level);
    if (!label) {
      groups.push_back({"host " + inv.host, {static_cast<int>(ci)}});
      continue;
    }
    auto [it, inserted] = by_label.emplace(*label, groups.size());
    if (inserted) groups.push_back({std::string(level_name(spec.pod_level)) + " '" + *label + "'", {}});
    groups[it->second].members.push_back(static_cast<int>(ci));
  }
  // Inside a slice hosts follow the worker order (the TPU worker id), as
  // JAX's process index does; hosts without one keep input order after them.
  if (spec.pod_level == PodLevel::kPod) {
    auto order_of = [&](int ci) -> long long {
      const auto& inv = hosts[static_cast<std::size_t>(cands[static_cast<std::size_t>(ci)].input)].inventory;
      return inv.pod_order ? *inv.pod_order : kUnlimited;
    };
    for (auto& g : groups) {
      std::stable_sort(g.members.begin(), g.members.end(),
                       [&](int a, int b) { return order_of(a) < order_of(b); });
    }
  }
  return groups;
}

Result<std::vector<Run>> place_pod_blocks(const JobSpec& spec, const std::vector<HostSlots>& hosts,
                                          std::vector<Candidate>& cands) {
  const std::vector<PodGroup> groups = pod_groups(spec, hosts, cands);
  std::vector<long long> room(groups.size(), 0);  // ranks each group still holds within slots
  for (std::size_t g = 0; g < groups.size(); ++g) room[g] = slot_room(groups[g], cands);
  std::vector<std::size_t> next_host(groups.size(), 0);
  std::size_t first_open = 0;  // groups before it have no room left
  std::vector<Run> runs;
  const int k = spec.pod_blocks;
  for (int start = 0; start < spec.np; start += k) {
    const int size = std::min(k, spec.np - start);
    while (first_open < groups.size() && room[first_open] == 0) ++first_open;
    std::size_t g = first_open;
    while (g < groups.size() && room[g] < size) ++g;
    if (g < groups.size()) {
      room[g] -= size;
      fill_group(groups[g], size, next_host[g], cands, runs);
      continue;
    }
    if (spec.oversubscribe) {
      // Slots are full: under --oversubscribe a block may exceed them, in
      // the first group whose devices still hold it.
      auto holds = std::find_if(groups.begin(), groups.end(), [&](const PodGroup& group) {
        return group_sum(group, cands, [](const Candidate& c) { return c.cap() - c.used; }) >= size;
      });
      if (holds != groups.end()) {
        spread_over_group(*holds, size, cands, runs);
        const auto i = static_cast<std::size_t>(holds - groups.begin());
        room[i] = slot_room(*holds, cands);
        continue;
      }
    }
    return block_fits_nowhere(spec, groups, cands, room, start, size);
  }
  return runs;
}

std::vector<int> number_ranks(const std::vector<Run>& runs, const std::vector<HostSlots>& hosts,
                              std::vector<Candidate>& cands, Plan& out) {
  int total = 0;
  for (const Run& run : runs) total += run.count;
  out.ranks.resize(static_cast<std::size_t>(total));
  std::vector<int> order;  // candidate of each node
  std::vector<int> node_of_cand(cands.size(), -1);
  int r = 0;
  for (const Run& run : runs) {
    const auto ci = static_cast<std::size_t>(run.candidate);
    Candidate& c = cands[ci];
    if (node_of_cand[ci] < 0) {
      node_of_cand[ci] = static_cast<int>(out.hosts.size());
      out.hosts.push_back(hosts[static_cast<std::size_t>(c.input)]);
      order.push_back(run.candidate);
    }
    for (int i = 0; i < run.count; ++i, ++r) {
      RankPlan& rp = out.ranks[static_cast<std::size_t>(r)];
      rp.rank = r;
      rp.host = node_of_cand[ci];
      rp.local_rank = static_cast<int>(c.ranks.size());
      c.ranks.push_back(r);
    }
  }
  return order;
}

bool host_oversubscribed(const JobSpec& spec, const HostSlots& h, int local_size) {
  const detect::Inventory& inv = h.inventory;
  if (spec.cpus_per_rank > 0 && !inv.cores.empty() &&
      static_cast<long long>(local_size) * spec.cpus_per_rank > static_cast<long long>(inv.cores.size())) {
    return true;
  }
  if (h.slots) return local_size > *h.slots;
  return inv.cpus > 0 && local_size > inv.cpus;
}

}  // namespace accrun::launcher::planner
