// spawns.cpp — see spawns.hpp.
#include "controller/spawns.hpp"

#include <pmix_common.h>

#include <algorithm>
#include <climits>

namespace accrun::launcher {

int SpawnBook::universe() const {
  long n = 0;
  for (const Host& h : hosts_) n += h.slots ? *h.slots : std::max(h.ranks, h.cpus);
  return static_cast<int>(std::min<long>(n, INT32_MAX));
}

int SpawnBook::free_slots(size_t h) const {
  if (!hosts_[h].slots) return INT_MAX;
  return std::max(*hosts_[h].slots - hosts_[h].ranks - live_[h], 0);
}

Result<SpawnBook::Placement> SpawnBook::place(const SpawnRequest& request, int near,
                                              const std::vector<bool>& live) const {
  Placement out;
  std::vector<int> used(hosts_.size(), 0);
  std::vector<size_t> order;
  if (near >= 0 && static_cast<size_t>(near) < hosts_.size()) order.push_back(static_cast<size_t>(near));
  for (size_t h = 0; h < hosts_.size(); ++h)
    if (static_cast<int>(h) != near) order.push_back(h);
  std::erase_if(order, [&](size_t h) { return h >= live.size() || !live[h]; });
  auto named = [&](const SpawnApp& a) -> std::optional<std::string> {
    if (auto it = a.info.find(PMIX_HOST); it != a.info.end()) return it->second;
    if (auto it = request.info.find(PMIX_HOST); it != request.info.end()) return it->second;
    return std::nullopt;
  };
  size_t turn = 0;
  for (size_t ai = 0; ai < request.apps.size(); ++ai) {
    const SpawnApp& a = request.apps[ai];
    std::vector<size_t> candidates = order;
    if (auto want = named(a)) {
      auto short_name = [](const std::string& s) { return s.substr(0, s.find('.')); };
      candidates.clear();
      for (size_t h : order)
        if (hosts_[h].name == *want || short_name(hosts_[h].name) == short_name(*want) ||
            (*want == "localhost" && static_cast<int>(h) == near))
          candidates.push_back(h);
      if (candidates.empty()) {
        std::string names;
        for (size_t h : order) names += (names.empty() ? "" : ", ") + hosts_[h].name;
        return invalid_argument("it asks for host '" + *want + "', which is not one of the job's hosts still running (" +
                                names + ")");
      }
    }
    if (candidates.empty()) return invalid_argument("no host of the job is still running");
    for (int i = 0; i < a.maxprocs; ++i) {
      std::optional<size_t> pick;
      for (size_t h : candidates) {
        if (free_slots(h) - used[h] > 0) {
          pick = h;
          break;
        }
      }
      if (!pick && oversubscribe_) pick = candidates[turn++ % candidates.size()];
      if (!pick) {
        long free = 0;
        std::string each;
        for (size_t h : candidates) {
          free += free_slots(h);
          each += (each.empty() ? "" : ", ") + hosts_[h].name + " " + std::to_string(free_slots(h)) + " of " +
                  std::to_string(*hosts_[h].slots);
        }
        return invalid_argument("the job's hosts have " + std::to_string(free) + " free slot(s) (" + each +
                                "); give them more slots (slots=N in the hostfile) or pass --oversubscribe");
      }
      ++used[*pick];
      out.host_of.push_back(static_cast<int>(*pick));
      out.app_of.push_back(static_cast<int>(ai));
    }
  }
  if (out.host_of.empty()) return invalid_argument("it asks for no processes");
  if (out.host_of.size() > static_cast<size_t>(INT32_MAX - next_id_))
    return invalid_argument("the job has spawned too many processes");
  return out;
}

void SpawnBook::add(const std::string& jobid, const Placement& placement, SpawnLaunch* launch) {
  Range r;
  r.base = next_id_;
  r.host_of = placement.host_of;
  r.ended.assign(placement.host_of.size(), false);
  next_id_ += static_cast<int>(placement.host_of.size());
  for (int h : placement.host_of) ++live_[static_cast<size_t>(h)];
  spawns_.push_back(std::move(r));
  launch->k = static_cast<int>(spawns_.size());
  launch->nspace = "accrun." + jobid + "." + std::to_string(launch->k);
  launch->base = spawns_.back().base;
  launch->host_of = placement.host_of;
  launch->app_of = placement.app_of;
}

int SpawnBook::host_of(int id) const {
  for (const Range& r : spawns_)
    if (id >= r.base && id - r.base < static_cast<int>(r.host_of.size())) return r.host_of[static_cast<size_t>(id - r.base)];
  return -1;
}

void SpawnBook::ended(int id) {
  for (Range& r : spawns_) {
    if (id < r.base || id - r.base >= static_cast<int>(r.host_of.size())) continue;
    size_t i = static_cast<size_t>(id - r.base);
    if (r.ended[i]) return;
    r.ended[i] = true;
    --live_[static_cast<size_t>(r.host_of[i])];
    return;
  }
}

}  // namespace accrun::launcher
