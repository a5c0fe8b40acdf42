// pmix_client.hpp — libaccrun as a PMIx client of the launcher's server:
// job facts, the name directory (publish/lookup/unpublish) and failure
// events.  Only this file and pmix_client.cpp see PMIx's headers.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "directory.hpp"
#include "peers.hpp"

namespace accrun::runtime {

struct PmixJobFacts {
  int rank = -1, size = -1, local_rank = -1, local_size = -1, node_id = -1;
  std::string host;
};

class PmixClient {
 public:
  // PMIx_Init, reads the job facts, and registers a handler that feeds
  // failure events into `peers` (not owned; must outlive the client).
  // Blocking (one round-trip to the server).  kSystem when PMIx fails.
  static Result<std::unique_ptr<PmixClient>> init(PeerTable* peers);
  ~PmixClient();  // deregisters the handler, PMIx_Finalize
  PmixClient(const PmixClient&) = delete;
  PmixClient& operator=(const PmixClient&) = delete;

  const PmixJobFacts& facts() const { return facts_; }
  // The job's name directory over PMIx publish/lookup.  Thread-safe.
  Directory& directory() { return *directory_; }

 private:
  PmixClient() = default;
  PmixJobFacts facts_;
  std::unique_ptr<Directory> directory_;
};

}  // namespace accrun::runtime
