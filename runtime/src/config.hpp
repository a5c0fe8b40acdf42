// config.hpp — everything libaccrun reads from the environment, read once at
// accrun_init into a RuntimeConfig that is passed down (no getenv elsewhere).
// The variables are the launcher's contract with its ranks (accrun(7)).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "accrun/backend.hpp"
#include "accrun/status.hpp"

namespace accrun::runtime {

struct RuntimeConfig {
  bool pmix_server = false;               // PMIX_NAMESPACE is set: a PMIx server launched us
  // Fallbacks for what PMIx also reports (ACCRUN_RANK, ...); -1 when unset.
  int rank = -1, size = -1, local_rank = -1, local_size = -1, node_rank = -1;
  std::string host;                       // ACCRUN_HOST ("" when unset)
  std::string accelerator_type;           // ACCRUN_ACCELERATOR_TYPE
  // ACCRUN_<RESOURCE>_IDS by upper-case resource name ("GPU", "NEURON_CORES").
  std::map<std::string, std::vector<int>> accelerator_ids;
  std::map<std::string, std::string> accelerator_types;   // ACCRUN_<RESOURCE>_TYPE, if given
  std::map<std::string, std::string> fractions;           // ACCRUN_<RESOURCE>_FRACTION
  std::optional<std::string> pod, zone, region;           // ACCRUN_POD/ZONE/REGION
  bool oversubscribed = false;            // ACCRUN_OVERSUBSCRIBED=1
  std::string store_transport = "tcp";    // ACCRUN_STORE_TRANSPORT: tcp or libfabric
  std::string store_tcp_congestion;       // ACCRUN_STORE_TCP_CONGESTION ("" = accrun's default)
  std::string shm_dir;                    // ACCRUN_SHM_DIR ("" outside accrun)
  std::string job_id;                     // ACCRUN_JOB_ID
  std::string store_size;                 // ACCRUN_STORE_SIZE, raw ("" = default)
  std::string object_server;              // ACCRUN_OBJECT_SERVER: this host's agent serves objects there
  int group_init_timeout_ms = 60000;      // ACCRUN_GROUP_INIT_TIMEOUT (seconds)
  // ACCRUN_GROUP_TIMEOUT (seconds, 0: none): data calls' default timeout.
  int group_timeout_ms = collectives::kDefaultGroupTimeoutMs;
};

// Builds the config from "NAME=VALUE" strings (environ).  Malformed numbers
// are kInvalidArgument naming the variable.
Result<RuntimeConfig> read_config(const std::vector<std::string>& environment);
// The process environment as "NAME=VALUE" strings.
std::vector<std::string> process_environment();

// Parses a comma list of non-negative ints ("0,1,3"); "" is empty.
Result<std::vector<int>> parse_id_list(const std::string& s);
// Parses ACCRUN_STORE_SIZE: bytes with an optional K/M/G/T suffix (powers of
// 1024, "KiB"/"MiB"/... and "KB"/"MB" spellings accepted), or "P%" of the
// filesystem size `fs_bytes`.  "" is the default, 50%.
Result<std::uint64_t> parse_store_size(const std::string& s, std::uint64_t fs_bytes);

}  // namespace accrun::runtime
