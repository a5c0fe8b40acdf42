// accrun --detect [--json]: this host's inventory, as a table or as
// DESIGN.md §9's JSON.
#include <cstdio>

#include "accrun/commands.hpp"

namespace accrun::launcher {

detect::DetectConfig detect_config(const Options& options, char** envp) {
  detect::DetectConfig config = detect::DetectConfig::from_environment(envp);
  if (options.topology) config.topology_xml = *options.topology;  // --topology wins over HWLOC_XMLFILE
  config.num_gpus = options.num_gpus;
  config.resources = options.resources;
  config.host_accelerator_type = options.host_accelerator_type;
  return config;
}

int detect_main(const Options& options, char** envp) {
  const detect::DetectConfig config = detect_config(options, envp);
  auto inv = detect::detect_host(config);
  if (!inv) {
    std::fprintf(stderr, "accrun: --detect: %s\n", inv.status().message().c_str());
    // Bad input (a malformed variable, an unreadable --topology, a bad
    // override) is exit status 2; a failing system call is 1.
    return inv.status().code() == Code::kSystem ? 1 : 2;
  }
  const std::vector<detect::Inventory> hosts{std::move(*inv)};
  const std::string text = options.json ? detect::to_json(hosts) : detect::format_table(hosts);
  std::fputs(text.c_str(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace accrun::launcher
