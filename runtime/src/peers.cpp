#include "peers.hpp"

#include <signal.h>

#include <cerrno>

namespace accrun::runtime {

void PeerTable::report_failure(int job_rank, const std::string& how, const std::string& host) {
  std::lock_guard lock(mu_);
  Peer& p = peers_[job_rank];
  if (!host.empty() && p.host.empty()) p.host = host;
  if (!p.failed) p.failed = how;
}

void PeerTable::note_member(int job_rank, const std::string& host, long pid) {
  std::lock_guard lock(mu_);
  Peer& p = peers_[job_rank];
  if (p.host.empty()) p.host = host;
  if (host == my_host_) p.pid = pid;
}

std::optional<std::string> PeerTable::failure(int job_rank) const {
  std::lock_guard lock(mu_);
  auto it = peers_.find(job_rank);
  if (it == peers_.end()) return std::nullopt;
  Peer& p = it->second;
  // A peer on this host that no longer exists has failed even if no event
  // reached us (the launcher may be gone too).
  if (!p.failed && p.pid > 0 && ::kill(static_cast<pid_t>(p.pid), 0) != 0 && errno == ESRCH)
    p.failed = "is gone (process " + std::to_string(p.pid) + " no longer exists)";
  if (!p.failed) return std::nullopt;
  std::string where = p.host.empty() ? "" : " on host " + p.host;
  return "rank " + std::to_string(job_rank) + where + " " + *p.failed;
}

std::optional<std::string> PeerTable::reported_failure(int job_rank) const {
  {
    std::lock_guard lock(mu_);
    auto it = peers_.find(job_rank);
    if (it == peers_.end() || !it->second.failed) return std::nullopt;
  }
  return failure(job_rank);
}

std::map<int, std::string> PeerTable::failures() const {
  std::map<int, std::string> out;
  {
    std::lock_guard lock(mu_);
    for (const auto& [rank, p] : peers_)
      if (p.failed) out[rank] = "";
  }
  for (auto& [rank, text] : out) text = failure(rank).value_or("");
  return out;
}

}  // namespace accrun::runtime
