// accrun/hostfile.hpp — hostfiles and host lists (accrun-hostfile(5)).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "accrun/inventory.hpp"
#include "accrun/quantity.hpp"
#include "accrun/status.hpp"

namespace accrun::hostfiles {

// One host as a hostfile or -H declares it.
struct HostEntry {
  std::string name;
  std::optional<int> slots;                              // slots=N / host:N
  std::optional<int> gpus;                               // gpus=N
  std::vector<std::pair<std::string, detect::Quantity>> resources;  // resources=TPU:4,...
  std::optional<std::string> accelerator_type;           // accelerator_type=H100
  detect::Labels labels;                                 // pod= zone= region=
  std::optional<int> pod_order;                          // worker= (order inside the pod)
  std::string origin;                                    // "FILE:LINE" or "-H" for messages
};

// Parses hostfile text; `filename` is used in messages ("hosts:3: ...").
Result<std::vector<HostEntry>> parse_hostfile(std::string_view text, const std::string& filename);
Result<std::vector<HostEntry>> read_hostfile(const std::string& path);
// Parses -H host[:slots][,host[:slots]...] (ranges allowed).
Result<std::vector<HostEntry>> parse_host_list(std::string_view list);
// Expands a Slurm-style host expression ("node[01-04,07]", "rack[1-2]-gpu[1-3]").
Result<std::vector<std::string>> expand_hostnames(std::string_view expr);
// The Inventory a declared host has before anyone has looked at it.
detect::Inventory declared_inventory(const HostEntry& entry);

// Parses a resource list "NAME=Q[,NAME:Q...]" (both separators accepted, as
// everywhere a quantity is written).  Names come back canonical ("gpu" →
// "GPU"); an unknown name, a bad quantity or a name given twice is an
// invalid-argument Status whose message says which and lists the known names.
// Pure, thread-safe.
Result<std::vector<std::pair<std::string, detect::Quantity>>> parse_resource_list(std::string_view text);

// The candidate closest to `word` by edit distance (case-insensitive), for
// "did you mean" hints; nothing when no candidate is close enough to help.
// Pure, thread-safe.
std::optional<std::string> closest_match(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace accrun::hostfiles
