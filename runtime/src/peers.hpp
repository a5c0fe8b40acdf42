// peers.hpp — what this process knows about failed ranks of the job.
// Fed by PMIx failure events (pmix_client.cpp) and, for ranks on this host
// whose pid a group told us, by a liveness check (kill(pid, 0)).
#pragma once

#include <sys/types.h>

#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "accrun/backend.hpp"

namespace accrun::runtime {

class PeerTable final : public collectives::PeerMonitor {
 public:
  explicit PeerTable(std::string my_host) : my_host_(std::move(my_host)) {}
  // Records that job_rank failed; `how` describes it ("exited with status 1").
  // The first report of a rank wins.  Thread-safe; callable from PMIx's
  // progress thread (it only takes a mutex).
  void report_failure(int job_rank, const std::string& how, const std::string& host = "");
  // Remembers where a group member lives, for messages and the pid check.
  void note_member(int job_rank, const std::string& host, long pid);
  // PeerMonitor: "rank 3 on host n1 exited with status 1", or nothing.
  std::optional<std::string> failure(int job_rank) const override;
  std::optional<std::string> reported_failure(int job_rank) const override;
  // Every rank reported failed, with failure()'s text.
  std::map<int, std::string> failures() const;

 private:
  struct Peer {
    std::string host;
    long pid = 0;
    std::optional<std::string> failed;
  };
  std::string my_host_;
  mutable std::mutex mu_;
  mutable std::map<int, Peer> peers_;
};

}  // namespace accrun::runtime
