// accrun/hostfile.hpp — hostfiles and host lists (accrun-hostfile(5)).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "accrun/inventory.hpp"
#include "accrun/quantity.hpp"
#include "accrun/status.hpp"

namespace accrun::hostfiles {

// Limits on what a hostfile, -H or a logical override may declare
// (accrun-hostfile(5) LIMITS, accrun(1) LIMITS).  They keep a typo such as
// gpus=100000000 or node[0-99999999] from exhausting memory: past a limit
// the input is refused with a message naming the limit, never truncated.
inline constexpr int kMaxDevicesPerResource = 4096;        // devices of one resource on one host
inline constexpr std::size_t kMaxHosts = 100'000;          // hosts in one job (one file or -H)
inline constexpr std::size_t kMaxHostfileBytes = 16u << 20;  // bytes read from one hostfile
inline constexpr std::size_t kMaxHostNameLength = 253;      // RFC 1123, dots included
inline constexpr std::size_t kMaxHostLabelLength = 63;      // one dot-separated part

// One host as a hostfile or -H declares it.
struct HostEntry {
  std::string name;
  std::optional<int> slots;                              // slots=N / host:N
  std::optional<int> gpus;                               // gpus=N
  std::vector<std::pair<std::string, detect::Quantity>> resources;  // resources=TPU:4,...
  std::optional<std::string> accelerator_type;           // accelerator_type=H100
  std::optional<std::string> instance_type;              // instance_type=p4d.24xlarge (its devices and
                                                         // type are in resources/accelerator_type)
  std::optional<std::string> instance_resource;  // the resource instance_type= added (a stand-in
                                                 // until detection, not a claim)
  detect::Labels labels;                                 // pod= zone= region=
  std::optional<int> pod_order;                          // worker= (order inside the pod)
  std::string origin;                                    // "FILE:LINE" or "-H" for messages
};

// Parses hostfile text; `filename` is used in messages ("hosts:3: ...").
// A UTF-8 byte-order mark at the start is skipped.  Invalid-argument errors
// name FILE:LINE: control bytes (NUL included) or bytes that are not UTF-8
// on a line, a host name that is not a valid host name, a range or a file
// that declares more than kMaxHosts hosts, a resource count over
// kMaxDevicesPerResource, a host or a worker id of one pod given twice (the
// message names both lines).  Pure; thread-safe.
Result<std::vector<HostEntry>> parse_hostfile(std::string_view text, const std::string& filename);
// Reads and parses the hostfile at `path`.  Reads at most kMaxHostfileBytes
// (so /dev/zero is refused, while a FIFO or /dev/stdin still work); blocks
// until the writer of a FIFO closes it.  Errors: not-found when it cannot be
// opened, invalid-argument for a directory, a file over the limit and
// everything parse_hostfile refuses.  Thread-safe.
Result<std::vector<HostEntry>> read_hostfile(const std::string& path);
// Parses -H host[:slots][,host[:slots]...] (ranges allowed); at most
// kMaxHosts hosts.  Errors start "-H: ".  Pure; thread-safe.
Result<std::vector<HostEntry>> parse_host_list(std::string_view list);
// Expands a Slurm-style host expression ("node[01-04,07]", "rack[1-2]-gpu[1-3]").
// The size is computed before anything is expanded: more than kMaxHosts
// names, or a name longer than kMaxHostNameLength, is refused.  Every name
// must be a host name: letters, digits, '-', '_' and '.', dot-separated parts
// of 1 to kMaxHostLabelLength characters that neither start nor end with '-'.
// Pure; thread-safe.
Result<std::vector<std::string>> expand_hostnames(std::string_view expr);
// Expands a Slurm node list: expressions separated by commas outside
// brackets ("gpu[01-04,07],cpu-a,rack[1-2]-n[1-3]"), in order.  A bad
// expression is an invalid-argument Status naming it.  Pure; thread-safe.
Result<std::vector<std::string>> expand_node_list(std::string_view list);
// Parses Slurm's per-node counts (SLURM_TASKS_PER_NODE,
// SLURM_JOB_CPUS_PER_NODE): "2(x3),1" is 2, 2, 2, 1.  Counts are whole
// numbers of at least 1; repeats at least 1; the total is bounded by
// kMaxHosts entries.  Pure; thread-safe.
Result<std::vector<int>> parse_counts_per_node(std::string_view text);
// `text` made safe to print inside a message: control bytes, DEL and bytes
// that are not part of valid UTF-8 are written \xNN, characters that show
// as a space or as nothing (U+00A0, U+200B, ...) \uNNNN, a backslash \\.
// Pure; thread-safe.
std::string printable(std::string_view text);
// The Inventory a declared host has before anyone has looked at it.
detect::Inventory declared_inventory(const HostEntry& entry);
// The Inventory of a host whose own detection (this host's, or its agent's)
// found `detected`: detected hardware wins over what the entry declares
// (gpus=, resources=, accelerator_type=, instance_type=); the entry's name,
// group labels and worker order are put on top.  Pure; thread-safe.
detect::Inventory detected_inventory(const HostEntry& entry, detect::Inventory detected);

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

// The largest count (slots, ranks, hosts, ...) a hostfile or option takes.
inline constexpr long long kMaxCount = 100'000'000;
// A whole number from `text` within [min, max], or what is wrong with it,
// as the rest of a message ("'-1' must be at least 1 (e.g. 4)", "'2e9' is
// not a whole number (e.g. 4)", "'99999999999999999999' is too large (at
// most 100000000)").
Result<long long> whole_number(std::string_view text, long long min, const char* example,
                               long long max = kMaxCount);

}  // namespace accrun::hostfiles
