// build_plan(): everything between the command line and a Plan — detection
// of this host, the hostfile or -H list, the JobSpec, and plan().
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>

#include "accrun/commands.hpp"
#include "accrun/hostfile.hpp"
#include "planner/steps.hpp"

namespace accrun::launcher {

bool names_this_host(const std::string& name, const std::string& self) {
  // Host names ignore case, as DNS does (accrun-hostfile(5)).
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string n = lower(name);
  const std::string me = lower(self);
  if (n == "localhost" || n == me) return true;
  if (is_this_hosts_address(n)) return true;
  // node01 and node01.cluster.example are the same host (not 10.0.0.5 and
  // 10.1.2.3).
  auto short_name = [](const std::string& s) { return s.substr(0, s.find('.')); };
  in_addr v4;
  if (inet_pton(AF_INET, n.c_str(), &v4) == 1 || inet_pton(AF_INET, me.c_str(), &v4) == 1)
    return false;
  return short_name(n) == short_name(me) && !short_name(me).empty();
}

bool is_this_hosts_address(const std::string& name) {
  in_addr v4;
  in6_addr v6;
  int family;
  if (inet_pton(AF_INET, name.c_str(), &v4) == 1) {
    family = AF_INET;
    if ((ntohl(v4.s_addr) >> 24) == 127) return true;
  } else if (inet_pton(AF_INET6, name.c_str(), &v6) == 1) {
    family = AF_INET6;
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  } else {
    return false;
  }
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return false;
  bool found = false;
  for (ifaddrs* i = all; i != nullptr && !found; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != family) continue;
    if (family == AF_INET)
      found = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == v4.s_addr;
    else
      found = std::memcmp(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr, &v6,
                          sizeof v6) == 0;
  }
  freeifaddrs(all);
  return found;
}

std::string this_hostname(const detect::DetectConfig& config) {
  if (config.hostname) return *config.hostname;
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

namespace {

// Slots of a host that does not state them: its processing units where
// known, else its largest whole count of accelerators, at least 1.
int default_slots(const detect::Inventory& inv) {
  if (inv.cpus > 0) return inv.cpus;
  std::map<std::string, int> per_resource;
  int most = 1;
  for (const auto& a : inv.accelerators) most = std::max(most, ++per_resource[a.resource]);
  return most;
}

// A hostfile entry that declares more devices of a resource than the host
// was found to have (gpus=, resources=, NAME=; not instance_type='s table,
// which only stands in until detection) is an error naming the line
// (--num-gpus and --resources make logical devices instead).
Status claims_no_more_devices(const hostfiles::HostEntry& e, const detect::Inventory& found,
                              const Options& options, const char* found_how) {
  for (const auto& declared : e.resources) {
    // (Named, not a structured binding: clang 14 cannot capture one.)
    const std::string& resource = declared.first;
    const detect::Quantity& q = declared.second;
    const bool logical = resource == "GPU"
                             ? options.num_gpus.has_value()
                             : std::any_of(options.resources.begin(), options.resources.end(),
                                           [&](const auto& r) { return r.first == resource; });
    if (e.instance_resource == resource || logical) continue;
    std::int64_t have = 0;
    for (const auto& a : found.accelerators) have += a.resource == resource ? 1 : 0;
    if (q.whole_part() <= have) continue;
    const bool gpus = resource == "GPU" && e.gpus;
    const std::string said = gpus ? "gpus=" + std::to_string(*e.gpus) : resource + "=" + q.str();
    return invalid_argument(e.origin + ": '" + e.name + "' declares " + said + " but " + found_how +
                            " " + std::to_string(have) + " (remove " + (gpus ? "gpus=" : "it") +
                            (resource == "GPU"
                                 ? ", or give --num-gpus for logical GPUs)"
                                 : ", or give --resources " + resource + "=N for logical ones)"));
  }
  return Status();
}

}  // namespace

Result<Plan> build_plan(const Options& options, char** envp, int master_port,
                        const std::map<std::string, detect::Inventory>* detected) {
  const detect::DetectConfig config = detect_config(options, envp);

  std::vector<HostSlots> hosts;
  if (options.hostfile || options.host_list) {
    auto entries = options.hostfile ? hostfiles::read_hostfile(*options.hostfile)
                                    : hostfiles::parse_host_list(*options.host_list);
    if (!entries) {
      const Status& s = entries.status();
      return Status(s.code() == Code::kNotFound ? Code::kInvalidArgument : s.code(), s.message());
    }
    if (entries->empty()) {
      return invalid_argument((options.hostfile ? "hostfile '" + *options.hostfile + "'" : std::string("-H")) +
                              " lists no hosts");
    }
    const std::string self = this_hostname(config);
    std::optional<detect::Inventory> local;
    hosts.reserve(entries->size());
    for (const auto& e : *entries) {
      HostSlots h;
      h.origin = e.origin;
      if (names_this_host(e.name, self)) {
        // Two entries for this host would hand its devices out twice.
        if (local) {
          for (const auto& prev : hosts) {
            if (names_this_host(prev.inventory.host, self)) {
              return invalid_argument(e.origin + ": '" + e.name + "' and '" + prev.inventory.host + "' (" +
                                      prev.origin + ") both name this host; list it once");
            }
          }
        }
        if (!local) {
          auto inv = detect::detect_host(config);
          if (!inv) return inv.status().with_context("detecting this host");
          local = std::move(*inv);
        }
        // Detected hardware wins over what the entry declares, which may
        // not claim devices the host lacks.
        h.inventory = hostfiles::detected_inventory(e, *local);
        if (Status s = claims_no_more_devices(e, h.inventory, options, "detection found"); !s)
          return s;
      } else if (detected != nullptr && detected->count(e.name) != 0) {
        // What the host's own agent found; the hostfile still gives slots
        // and labels, and may not claim devices the host lacks.
        h.inventory = hostfiles::detected_inventory(e, detected->at(e.name));
        if (Status s = claims_no_more_devices(e, h.inventory, options, "its agent detected"); !s)
          return s;
      } else {
        h.inventory = hostfiles::declared_inventory(e);
      }
      h.slots = e.slots ? *e.slots : default_slots(h.inventory);
      hosts.push_back(std::move(h));
    }
  } else {
    auto inv = detect::detect_host(config);
    if (!inv) return inv.status().with_context("detecting this host");
    HostSlots h;
    h.inventory = std::move(*inv);
    h.origin = "local";
    hosts.push_back(std::move(h));
  }

  JobSpec spec;
  spec.accelerator_type = options.accelerator_type;
  if (options.np) {
    spec.np = *options.np;
  } else {
    // Counted over the hosts --accelerator-type leaves.
    const std::vector<int> usable = usable_hosts(spec, hosts);
    if (options.npernode > 0) {
      spec.np = options.npernode * static_cast<int>(usable.size());
      spec.np_from = "--npernode " + std::to_string(options.npernode) + " on " +
                     std::to_string(usable.size()) + (usable.size() == 1 ? " host" : " hosts");
    } else if (options.hostfile || options.host_list) {
      long long total = 0;
      for (int i : usable) total += hosts[static_cast<std::size_t>(i)].slots.value_or(1);
      spec.np = static_cast<int>(std::min<long long>(total, 100'000'000));
      spec.np_from = "the hosts' slots";
    } else {
      spec.np = 1;
    }
  }
  spec.per_rank = options.per_rank;
  spec.cpus_per_rank = options.cpus_per_rank;
  spec.npernode = options.npernode;
  spec.pod_blocks = options.pod_blocks;
  spec.pod_level = options.pod_level;
  spec.bind_to = options.bind_to;
  spec.visible_devices = options.visible_devices;
  spec.oversubscribe = options.oversubscribe;
  spec.exports = options.exports;
  spec.inherited = config.environment;
  spec.master_port = master_port;
  if (Status s = plan_fits_in_memory(spec, available_memory()); !s) return s;
  // (Checked when parsing where -n is given; here for a count from slots,
  // --npernode or SLURM_NTASKS.)
  if (options.stdin_mode == StdinMode::kRank && options.stdin_rank >= spec.np && spec.np >= 1) {
    return invalid_argument("option '--stdin': rank " + std::to_string(options.stdin_rank) +
                            " does not exist with " + planner::ranks_asked(spec) +
                            " (ranks are 0.." + std::to_string(spec.np - 1) + ")");
  }
  return plan(spec, hosts);
}

std::optional<unsigned long long> available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  unsigned long long kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return std::nullopt;
}

Status plan_fits_in_memory(const JobSpec& spec, std::optional<unsigned long long> available) {
  const unsigned long long need = static_cast<unsigned long long>(spec.np) * kPlanBytesPerRank;
  if (!available || need <= *available) return Status();
  auto gib = [](unsigned long long b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(b) / (1ULL << 30));
    return std::string(buf);
  };
  return invalid_argument(planner::ranks_asked(spec) + " would take about " + gib(need) +
                          " to plan (about " + std::to_string(kPlanBytesPerRank >> 10) +
                          " KiB a rank), more than the " + gib(*available) +
                          " this host has available; ask for fewer ranks");
}

}  // namespace accrun::launcher
