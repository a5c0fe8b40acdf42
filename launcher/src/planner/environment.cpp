// Planner step 8 (steps.hpp): the variables accrun sets for each rank
// (docs/design.md §9, accrun(7) ENVIRONMENT).
#include <algorithm>

#include "accrun/detect.hpp"
#include "accrun/strings.hpp"
#include "planner/steps.hpp"

namespace accrun::launcher::planner {
namespace {

// The TPU runtime's default mesh controller port; processes sharing a host's
// chips each need their own.
constexpr int kTpuMeshControllerPort = 8476;

// The ranks' device type on the host: that of the first requested resource
// the host has devices of, else the host's first accelerator's.
std::string accelerator_type(const Candidate& c, const detect::Inventory& inv) {
  for (const auto& r : c.resources) {
    if (!r.devices.empty() && !r.devices.front()->type.empty()) return r.devices.front()->type;
  }
  for (const auto& a : inv.accelerators) {
    if (!a.type.empty()) return a.type;
  }
  return {};
}

}  // namespace

RankEnvironment::RankEnvironment(const JobSpec& spec, const HostSlots& h, const Candidate& c, int node,
                                 bool oversubscribed, const std::string& master_addr,
                                 const std::vector<RankPlan>& ranks)
    : spec_(spec) {
  const detect::Inventory& inv = h.inventory;
  const int local_size = static_cast<int>(c.ranks.size());
  for (const auto& r : c.resources) {
    Resource res{&r, "ACCRUN_" + ascii_upper(r.name) + "_IDS",
                 r.devices.empty() ? nullptr : detect::provider_for_vendor(r.devices.front()->vendor),
                 {}};
    if (spec.visible_devices == Visibility::kNode) {
      // The union of the host's job devices of the resource.
      for (int rank : c.ranks) {
        for (const auto& d : ranks[static_cast<std::size_t>(rank)].devices) {
          if (d.resource == r.name) res.host_ids.push_back(d.id);
        }
      }
      std::sort(res.host_ids.begin(), res.host_ids.end());
      res.host_ids.erase(std::unique(res.host_ids.begin(), res.host_ids.end()), res.host_ids.end());
    }
    // Ranks sharing a host's TPU chips each need their own mesh controller port.
    if (r.name == "TPU" && local_size > 0 && static_cast<std::size_t>(r.q.whole_part()) < r.devices.size()) {
      tpu_split_ = true;
    }
    resources_.push_back(std::move(res));
  }
  user_omp_ = spec.inherited.count("OMP_NUM_THREADS") != 0 ||
              std::any_of(spec.exports.begin(), spec.exports.end(),
                          [](const auto& e) { return e.first == "OMP_NUM_THREADS"; });

  // What every rank on the host shares, built once and copied: a map copy
  // clones nodes without comparing keys, which matters at 80,000 ranks.
  const std::string size_s = std::to_string(spec.np);
  const std::string local_size_s = std::to_string(local_size);
  common_.emplace("ACCRUN_SIZE", size_s);
  common_.emplace("ACCRUN_LOCAL_SIZE", local_size_s);
  common_.emplace("ACCRUN_NODE_RANK", std::to_string(node));
  common_.emplace("ACCRUN_HOST", inv.host);
  common_.emplace("ACCRUN_OVERSUBSCRIBED", oversubscribed ? "1" : "0");
  if (std::string type = accelerator_type(c, inv); !type.empty()) common_.emplace("ACCRUN_ACCELERATOR_TYPE", type);
  if (inv.labels.pod) common_.emplace("ACCRUN_POD", *inv.labels.pod);
  if (inv.labels.zone) common_.emplace("ACCRUN_ZONE", *inv.labels.zone);
  if (inv.labels.region) common_.emplace("ACCRUN_REGION", *inv.labels.region);
  for (const auto& r : c.resources) {
    if (r.q.units() < detect::Quantity::kScale) {
      common_.emplace("ACCRUN_" + ascii_upper(r.name) + "_FRACTION", r.q.str());
    }
  }
  common_.emplace("WORLD_SIZE", size_s);
  common_.emplace("LOCAL_WORLD_SIZE", local_size_s);
  common_.emplace("MASTER_ADDR", master_addr);
  // A MASTER_PORT the user set is kept (as torchrun keeps it); else the
  // port the launcher chose.
  const auto user_port = spec.inherited.find("MASTER_PORT");
  if (user_port != spec.inherited.end() && !user_port->second.empty()) {
    common_.emplace("MASTER_PORT", user_port->second);
  } else if (spec.master_port > 0) {
    common_.emplace("MASTER_PORT", std::to_string(spec.master_port));
  }
  common_.emplace("OMPI_COMM_WORLD_SIZE", size_s);
  common_.emplace("OMPI_COMM_WORLD_LOCAL_SIZE", local_size_s);
}

Result<Env> RankEnvironment::for_rank(int local_rank, const RankPlan& rank, int cores) const {
  Env env = common_;
  const std::string rank_s = std::to_string(rank.rank);
  const std::string local_s = std::to_string(local_rank);
  env.emplace("ACCRUN_RANK", rank_s);
  env.emplace("ACCRUN_LOCAL_RANK", local_s);
  env.emplace("RANK", rank_s);
  env.emplace("LOCAL_RANK", local_s);
  env.emplace("OMPI_COMM_WORLD_RANK", rank_s);
  env.emplace("OMPI_COMM_WORLD_LOCAL_RANK", local_s);

  for (const Resource& r : resources_) {
    std::vector<int> ids;
    for (const auto& d : rank.devices) {
      if (d.resource == r.slot->name) ids.push_back(d.id);
    }
    env.emplace(r.ids_var, detect::join_ids(ids));
    // A rank holding devices of several resources: each one's type, which
    // ACCRUN_ACCELERATOR_TYPE (one type) cannot say (accrun_init(3)).
    if (resources_.size() > 1 && !ids.empty()) {
      for (const auto* a : r.slot->devices) {
        if (a->id != ids.front() || a->type.empty()) continue;
        env.emplace("ACCRUN_" + ascii_upper(r.slot->name) + "_TYPE", a->type);
        break;
      }
    }
    if (r.provider == nullptr) continue;
    // --visible-devices node: the rank's own first, then the host's others.
    std::vector<int> visible = ids;
    for (int id : r.host_ids) {
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) visible.push_back(id);
    }
    r.provider->set_visible(visible, static_cast<int>(r.slot->devices.size()), spec_.inherited, env);
  }
  if (tpu_split_) env["TPU_MESH_CONTROLLER_PORT"] = std::to_string(kTpuMeshControllerPort + local_rank);
  if (!user_omp_) {
    const int n = spec_.cpus_per_rank > 0 ? spec_.cpus_per_rank : cores;
    if (n > 0) env.emplace("OMP_NUM_THREADS", std::to_string(n));
  }
  for (const auto& [name, value] : spec_.exports) {
    const std::string* given = value ? &*value : nullptr;
    if (auto it = spec_.inherited.find(name); !given && it != spec_.inherited.end())
      given = &it->second;
    if (given == nullptr) continue;  // -x NAME of a variable accrun does not have: nothing to pass
    auto mine = env.find(name);
    if (mine != env.end() && mine->second != *given && name != "MASTER_ADDR" &&
        name != "MASTER_PORT" && name != "OMP_NUM_THREADS") {
      return invalid_argument("option '-x': " + name +
                              " is set by accrun for each rank (here rank " +
                              std::to_string(rank.rank) + " gets " + name + "=" + mine->second +
                              ", not " + *given + "); -x would undo that, so remove -x " + name);
    }
    env[name] = *given;
  }
  return env;
}

}  // namespace accrun::launcher::planner
