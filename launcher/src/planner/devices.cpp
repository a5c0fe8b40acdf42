// Planner steps 6–7 (steps.hpp): each rank's devices on its host, and a
// cpuset close to them.
#include <algorithm>
#include <numeric>
#include <set>

#include "accrun/detect.hpp"
#include "planner/steps.hpp"

namespace accrun::launcher::planner {
namespace {

using detect::Quantity;

// "0-3,8" from a set of CPU numbers, in any order.
std::string cpu_list(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return detect::format_cpulist(cpus);
}

// The processing units of `cores` (indexes into inv.cores) as a list string.
std::string pus_of(const detect::Inventory& inv, const std::vector<int>& cores) {
  std::vector<int> pus;
  for (int core : cores) {
    const auto& c = inv.cores[static_cast<std::size_t>(core)];
    pus.insert(pus.end(), c.pus.begin(), c.pus.end());
  }
  return cpu_list(std::move(pus));
}

std::vector<int> all_cores(const detect::Inventory& inv) {
  std::vector<int> v(inv.cores.size());
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// The cores near a rank's devices: those of the devices' NUMA nodes, or of
// the nodes holding the devices' local CPUs.  Every core when a device's
// locality is unknown.  Under numa, a rank without devices gets the
// `local_rank`-th node, round-robin.
std::vector<int> cores_near(const detect::Inventory& inv, const RankPlan& rank, BindTo policy, int local_rank,
                            const std::vector<int>& numa_ids) {
  std::set<int> nodes;
  std::vector<int> near_cpus;
  bool unknown = false;
  for (const auto& d : rank.devices) {
    auto a = std::find_if(inv.accelerators.begin(), inv.accelerators.end(), [&](const detect::Accelerator& x) {
      return x.resource == d.resource && x.id == d.id;
    });
    if (a == inv.accelerators.end()) {
      unknown = true;
    } else if (a->numa) {
      nodes.insert(*a->numa);
    } else if (a->cpus) {
      auto v = detect::parse_cpulist(*a->cpus).value_or(std::vector<int>{});
      near_cpus.insert(near_cpus.end(), v.begin(), v.end());
    } else {
      unknown = true;
    }
  }
  if (policy == BindTo::kNuma && nodes.empty()) {
    nodes.insert(numa_ids[static_cast<std::size_t>(local_rank) % numa_ids.size()]);
  }
  if (!unknown && !near_cpus.empty()) {
    const std::set<int> near(near_cpus.begin(), near_cpus.end());
    for (const auto& core : inv.cores) {
      if (std::any_of(core.pus.begin(), core.pus.end(), [&](int pu) { return near.count(pu) != 0; })) {
        nodes.insert(core.numa);
      }
    }
  }
  std::vector<int> pool;
  if (!unknown && !nodes.empty()) {
    for (std::size_t i = 0; i < inv.cores.size(); ++i) {
      if (nodes.count(inv.cores[i].numa)) pool.push_back(static_cast<int>(i));
    }
  }
  return pool.empty() ? all_cores(inv) : pool;
}

}  // namespace

void assign_devices(const Candidate& c, std::vector<RankPlan>& ranks) {
  for (const auto& r : c.resources) {
    std::size_t dev = 0;
    Quantity used_on_dev;
    const bool fractional = r.q.units() < Quantity::kScale;
    for (int rank : c.ranks) {
      RankPlan& rp = ranks[static_cast<std::size_t>(rank)];
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
}

BindTo binding_policy(const JobSpec& spec) {
  if (spec.bind_to != BindTo::kDefault) return spec.bind_to;
  return !spec.per_rank.empty() ? BindTo::kAccelerator : spec.cpus_per_rank > 0 ? BindTo::kCore : BindTo::kNone;
}

std::vector<CpuBinding> bind_cpus(const JobSpec& spec, const detect::Inventory& inv, const std::vector<int>& local,
                                  const std::vector<RankPlan>& ranks) {
  std::vector<CpuBinding> out(local.size());
  const BindTo policy = binding_policy(spec);
  if (inv.cores.empty() || policy == BindTo::kNone) return out;
  std::vector<int> numa_ids;
  for (const auto& core : inv.cores) numa_ids.push_back(core.numa);
  std::sort(numa_ids.begin(), numa_ids.end());
  numa_ids.erase(std::unique(numa_ids.begin(), numa_ids.end()), numa_ids.end());

  // The cores each rank may use, keyed so ranks with the same locality share.
  std::map<std::vector<int>, std::vector<int>> shares;  // cores → local ranks
  for (std::size_t li = 0; li < local.size(); ++li) {
    const RankPlan& rp = ranks[static_cast<std::size_t>(local[li])];
    if (policy == BindTo::kCore || (policy == BindTo::kAccelerator && rp.devices.empty())) {
      shares[all_cores(inv)].push_back(static_cast<int>(li));
      continue;
    }
    std::vector<int> pool = cores_near(inv, rp, policy, static_cast<int>(li), numa_ids);
    if (policy == BindTo::kNuma) {
      // Whole NUMA nodes, not split.
      out[li] = {pus_of(inv, pool), static_cast<int>(pool.size())};
      continue;
    }
    shares[std::move(pool)].push_back(static_cast<int>(li));
  }
  for (const auto& [pool, members] : shares) {
    // Ranks sharing a pool split it, so they do not share cores while there
    // are enough; -c fixes each rank's share.
    const std::size_t m = members.size();
    std::size_t per = spec.cpus_per_rank > 0 ? static_cast<std::size_t>(spec.cpus_per_rank)
                      : policy == BindTo::kCore ? 1
                                                : std::max<std::size_t>(1, pool.size() / m);
    per = std::min(per, pool.size());
    for (std::size_t j = 0; j < m; ++j) {
      std::vector<int> cores;
      for (std::size_t k = 0; k < per; ++k) cores.push_back(pool[(j * per + k) % pool.size()]);
      out[static_cast<std::size_t>(members[j])] = {pus_of(inv, cores), static_cast<int>(per)};
    }
  }
  return out;
}

}  // namespace accrun::launcher::planner
