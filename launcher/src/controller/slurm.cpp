// slurm.cpp — the Slurm allocation as accrun's hosts (slurm.hpp).
#include "controller/slurm.hpp"

#include <charconv>
#include <cstring>
#include <optional>
#include <set>
#include <string>

#include "accrun/commands.hpp"
#include "accrun/hostfile.hpp"
#include "accrun/strings.hpp"
#include "controller/launch_agent.hpp"

namespace accrun::launcher {

namespace {

const char* lookup(char** envp, const char* name) {
  size_t n = std::strlen(name);
  for (char** e = envp; e != nullptr && *e != nullptr; ++e)
    if (std::strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  return nullptr;
}

// Where this host is looked for among the allocation's nodes: by its first
// label (its own name may be the full one).  The nodes a user names are
// compared whole: srun's --nodelist takes Slurm's spelling only.
std::string short_name(const std::string& s) { return s.substr(0, s.find('.')); }

// A task count of 1 or more, the whole string.
std::optional<int> task_count(const char* s) {
  int n = 0;
  const char* end = s + std::strlen(s);
  auto [at, ec] = std::from_chars(s, end, n);
  if (ec != std::errc() || at != end || n < 1) return std::nullopt;
  return n;
}

}  // namespace

void apply_slurm_gpu_mask(Env& env) {
  if (env.count("SLURM_JOB_ID") == 0) return;
  std::string ids;
  for (const char* name : {"SLURM_STEP_GPUS", "GPU_DEVICE_ORDINAL", "SLURM_JOB_GPUS"}) {
    auto it = env.find(name);
    if (it != env.end() && !it->second.empty()) {
      ids = it->second;
      break;
    }
  }
  if (ids.empty()) return;
  for (const char* mask : {"CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"}) env.emplace(mask, ids);
}

std::string srun_step_command(const std::vector<std::string>& hosts, const std::string& agent_command) {
  std::string list;
  for (const auto& h : hosts) list += (list.empty() ? "" : ",") + h;
  std::string n = std::to_string(hosts.size());
  return "srun --quiet --overlap --nodes=" + n + " --ntasks=" + n +
         " --ntasks-per-node=1 --cpu-bind=none --kill-on-bad-exit=1 --input=all --nodelist=" + shell_quote(list) +
         " " + agent_command;
}

Status apply_slurm_allocation(Options& options, char** envp) {
  const char* job = lookup(envp, "SLURM_JOB_ID");
  const char* list = lookup(envp, "SLURM_JOB_NODELIST");
  if (job == nullptr || list == nullptr || *list == '\0') return Status();
  auto nodes = hostfiles::expand_node_list(list);
  if (!nodes) return nodes.status().with_context("SLURM_JOB_NODELIST");
  // Inside a step (accrun run by srun), SLURM_NTASKS and
  // SLURM_TASKS_PER_NODE describe the step, not the job's nodes.
  const bool in_step = lookup(envp, "SLURM_STEP_ID") != nullptr;
  if (options.hostfile || options.host_list) {
    // Only what Slurm gave this job ("localhost" only where accrun runs on
    // an allocated node: a login node is not one).
    const std::set<std::string> allocated(nodes->begin(), nodes->end());
    std::set<std::string> allocated_short;
    for (const auto& n : *nodes) allocated_short.insert(short_name(n));
    auto entries = options.hostfile ? hostfiles::read_hostfile(*options.hostfile)
                                    : hostfiles::parse_host_list(*options.host_list);
    if (!entries) return Status();  // the planner reports it
    const bool here_allocated =
        allocated_short.count(short_name(this_hostname(detect_config(options, envp)))) > 0;
    std::string others;
    for (const auto& e : *entries) {
      if ((here_allocated && names_this_host(e.name, "localhost")) || allocated.count(e.name))
        continue;
      others += (others.empty() ? "" : ", ") + e.name + " (" + e.origin + ")";
      for (const auto& n : allocated)
        if (ascii_lower(short_name(n)) == ascii_lower(short_name(e.name)))
          others += " (Slurm spells it " + n + ", and srun takes only that)";
    }
    if (!others.empty())
      return invalid_argument("inside Slurm job " + std::string(job) + ", these hosts are not allocated to it: " +
                              others + "; the allocation has " + list);
    // Its nodes are reached as the allocation's are: by an srun step.
    if (options.launch_agent == kDefaultLaunchAgent) options.launch_agent = kSrunLaunchAgent;
    return Status();
  }
  // Slots: the tasks Slurm laid out when the allocation asked for a task
  // count (salloc -n), else the CPUs each node gave the job (salloc -N 4
  // then accrun -n 8 fills them, as srun -n 8 would).
  const char* per_node_var = !in_step && lookup(envp, "SLURM_NTASKS") != nullptr ? "SLURM_TASKS_PER_NODE" : nullptr;
  if (per_node_var == nullptr || lookup(envp, per_node_var) == nullptr) per_node_var = "SLURM_JOB_CPUS_PER_NODE";
  if (lookup(envp, per_node_var) == nullptr && !in_step) per_node_var = "SLURM_TASKS_PER_NODE";
  const char* per_node = lookup(envp, per_node_var);
  std::vector<int> slots(nodes->size(), 1);
  if (per_node != nullptr) {
    auto counts = hostfiles::parse_counts_per_node(per_node);
    if (!counts) return counts.status().with_context(per_node_var);
    if (counts->size() != nodes->size())
      return invalid_argument(std::string(per_node_var) + " '" + per_node + "' gives " +
                              std::to_string(counts->size()) + " counts for the " + std::to_string(nodes->size()) +
                              " nodes of SLURM_JOB_NODELIST '" + list + "'");
    slots = *counts;
  }
  std::string hosts;
  for (size_t i = 0; i < nodes->size(); ++i)
    hosts += (i ? "," : "") + (*nodes)[i] + ":" + std::to_string(slots[i]);
  options.host_list = hosts;
  if (!options.np && !in_step) {
    if (const char* n = lookup(envp, "SLURM_NTASKS"); n != nullptr) {
      std::optional<int> count = task_count(n);
      if (!count)
        return invalid_argument(
            std::string("SLURM_NTASKS '") + n +
            "' is not a task count (a whole number, 1 or more); give -n to override it");
      options.np = *count;
    }
  }
  if (options.launch_agent == kDefaultLaunchAgent) options.launch_agent = kSrunLaunchAgent;
  return Status();
}

}  // namespace accrun::launcher
