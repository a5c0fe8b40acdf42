// The placement planner (docs/design.md §3–4, accrun(7) PLACEMENT): a pure
// function from a JobSpec and the hosts to a Plan.  No I/O, no getenv.
// plan() runs the steps of planner/steps.hpp in order; each is tested on its
// own.
#include "accrun/plan.hpp"
#include "planner/steps.hpp"

namespace accrun::launcher {

std::vector<int> usable_hosts(const JobSpec& spec, const std::vector<HostSlots>& hosts) {
  auto eligible = planner::eligible_hosts(spec, hosts);
  if (eligible && !eligible->empty()) return *std::move(eligible);
  std::vector<int> all(hosts.size());
  for (std::size_t i = 0; i < hosts.size(); ++i) all[i] = static_cast<int>(i);
  return all;
}

Result<Plan> plan(const JobSpec& spec, const std::vector<HostSlots>& hosts) {
  using namespace planner;
  ACCRUN_RETURN_IF_ERROR(validate_spec(spec));
  if (hosts.empty()) return invalid_argument("no hosts to place ranks on");

  // Which hosts, holding how many ranks each.
  auto eligible = eligible_hosts(spec, hosts);
  if (!eligible) return eligible.status();
  std::vector<Candidate> cands = host_capacities(spec, hosts, *eligible);

  // How many ranks go where, then which ranks.
  auto runs = spec.pod_blocks > 0 ? place_pod_blocks(spec, hosts, cands) : place_in_order(spec, hosts, cands);
  if (!runs) return runs.status();
  Plan out;
  const std::vector<int> node_cands = number_ranks(*runs, hosts, cands, out);

  // Each host's share: devices, CPUs, environment.
  const std::string master_addr = out.hosts.front().inventory.host;
  for (std::size_t node = 0; node < node_cands.size(); ++node) {
    Candidate& c = cands[static_cast<std::size_t>(node_cands[node])];
    const HostSlots& h = hosts[static_cast<std::size_t>(c.input)];
    const bool over = host_oversubscribed(spec, h, static_cast<int>(c.ranks.size()));
    out.oversubscribed = out.oversubscribed || over;
    assign_devices(c, out.ranks);
    std::vector<CpuBinding> cpus = bind_cpus(spec, h.inventory, c.ranks, out.ranks);
    const RankEnvironment env(spec, h, c, static_cast<int>(node), over, master_addr, out.ranks);
    for (std::size_t li = 0; li < c.ranks.size(); ++li) {
      RankPlan& rp = out.ranks[static_cast<std::size_t>(c.ranks[li])];
      rp.cpus = std::move(cpus[li].cpus);
      auto rank_env = env.for_rank(static_cast<int>(li), rp, cpus[li].cores);
      if (!rank_env) return rank_env.status();
      rp.env = std::move(*rank_env);
    }
  }
  return out;
}

}  // namespace accrun::launcher
