// accrun --detect [--json]: this host's inventory, or with --hostfile / -H
// every listed host's, each detected by an agent on its own host and
// labelled as a plan would label it, as a table or as docs/design.md §9's
// JSON (one entry per host).
#include <signal.h>

#include <cstdio>
#include <cstdlib>

#include "accrun/commands.hpp"
#include "accrun/hostfile.hpp"
#include "controller/agents.hpp"
#include "controller/slurm.hpp"

namespace accrun::launcher {

namespace {

int exit_for(const Status& s) { return s.code() == Code::kSystem || s.code() == Code::kRemote || s.code() == Code::kTimeout ? 1 : 2; }

// The detection overrides every agent applies on its own host.
std::map<std::string, std::string> detect_overrides(const Options& options) {
  std::map<std::string, std::string> out;
  if (options.num_gpus) out["num-gpus"] = std::to_string(*options.num_gpus);
  if (options.host_accelerator_type) out["host-accelerator-type"] = *options.host_accelerator_type;
  if (!options.resources.empty()) {
    std::string list;
    for (const auto& [name, q] : options.resources) list += (list.empty() ? "" : ",") + name + "=" + q.str();
    out["resources"] = list;
  }
  return out;
}

}  // namespace

detect::DetectConfig detect_config(const Options& options, char** envp) {
  detect::DetectConfig config = detect::DetectConfig::from_environment(envp);
  apply_slurm_gpu_mask(config.environment);
  if (options.topology) config.topology_xml = *options.topology;  // --topology wins over HWLOC_XMLFILE
  config.num_gpus = options.num_gpus;
  config.resources = options.resources;
  config.host_accelerator_type = options.host_accelerator_type;
  return config;
}

AgentsConfig agents_config(const Options& options, char** envp) {
  AgentsConfig config;
  config.launch_agent = options.launch_agent;
  config.daemon_path = options.daemon_path.value_or("");
  config.fanout = options.fanout;
  config.options = detect_overrides(options);
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "ACCRUN_AGENT_TIMEOUT=", 21) == 0) {
      double s = std::atof(*e + 21);
      if (s >= 0.001 && s < 86400) config.timeout = std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
    }
  }
  return config;
}

int detect_main(const Options& options, char** envp) {
  const detect::HwlocPluginHold hwloc_plugins;  // before any thread: it sets and unsets a variable
  const detect::DetectConfig config = detect_config(options, envp);
  std::vector<detect::Inventory> hosts;
  if (!options.hostfile && !options.host_list) {
    auto inv = detect::detect_host(config);
    if (!inv) {
      std::fprintf(stderr, "accrun: --detect: %s\n", inv.status().message().c_str());
      // Bad input (a malformed variable, an unreadable --topology, a bad
      // override) is exit status 2; a failing system call is 1.
      return inv.status().code() == Code::kSystem ? 1 : 2;
    }
    hosts.push_back(std::move(*inv));
  } else {
    // Every listed host: this one here, the others through their agents.
    auto entries = options.hostfile ? hostfiles::read_hostfile(*options.hostfile)
                                    : hostfiles::parse_host_list(*options.host_list);
    if (!entries) {
      std::fprintf(stderr, "accrun: %s\n", entries.status().message().c_str());
      return 2;
    }
    const std::string self = this_hostname(config);
    AgentsConfig agents = agents_config(options, envp);
    std::vector<int> remote_of(entries->size(), -1);
    for (size_t i = 0; i < entries->size(); ++i) {
      if (names_this_host((*entries)[i].name, self)) continue;
      remote_of[i] = static_cast<int>(agents.hosts.size());
      agents.hosts.push_back((*entries)[i].name);
    }
    std::unique_ptr<AgentSet> set;
    if (!agents.hosts.empty()) {
      signal(SIGPIPE, SIG_IGN);
      auto started = AgentSet::start(agents);
      if (!started) {
        std::fprintf(stderr, "accrun: --detect: %s\n", started.status().message().c_str());
        return exit_for(started.status());
      }
      set = std::move(*started);
      if (Status s = set->wait_for_hellos(); !s) {
        std::fprintf(stderr, "accrun: --detect: %s\n", s.message().c_str());
        set->shutdown();
        return exit_for(s);
      }
      set->shutdown();
    }
    for (size_t i = 0; i < entries->size(); ++i) {
      const auto& entry = (*entries)[i];
      if (remote_of[i] < 0) {
        auto inv = detect::detect_host(config);
        if (!inv) {
          std::fprintf(stderr, "accrun: --detect: %s: %s\n", entry.name.c_str(), inv.status().message().c_str());
          return inv.status().code() == Code::kSystem ? 1 : 2;
        }
        hosts.push_back(std::move(*inv));
      } else {
        const AgentHello& hello = set->hellos()[static_cast<size_t>(remote_of[i])];
        if (!hello.detected) {
          std::fprintf(stderr, "accrun: --detect: %s (%s): %s\n", entry.name.c_str(), entry.origin.c_str(),
                       hello.inventory_json.c_str());
          return 2;
        }
        auto parsed = detect::from_json(hello.inventory_json);
        if (!parsed || parsed->size() != 1) {
          std::fprintf(stderr, "accrun: --detect: %s: the agent's inventory is unreadable%s\n", entry.name.c_str(),
                       parsed ? "" : (": " + parsed.status().message()).c_str());
          return 1;
        }
        hosts.push_back(std::move(parsed->front()));
      }
      // The labels a plan would use: the entry's, else what detection found
      // (an NVLink clique, a TPU slice).
      hosts.back() = hostfiles::detected_inventory(entry, std::move(hosts.back()));
    }
  }
  const std::string text = options.json ? detect::to_json(hosts) : detect::format_table(hosts);
  return print_to_stdout(text, "the inventory");
}

}  // namespace accrun::launcher
