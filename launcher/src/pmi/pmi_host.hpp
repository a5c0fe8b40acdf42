// pmi_host.hpp — the node agent's PMI service: one socket per local rank
// (PMI_FD), a PmiConnection on each, and the job's PMI key-value space,
// whose fences go through the same router as the PMIx server's
// (PmixServer::FenceRouter: the job controller across hosts, this host
// alone otherwise).  Runs on the agent's event loop thread only.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "accrun/status.hpp"
#include "agent/node_daemon.hpp"
#include "pmi/pmi_server.hpp"

namespace accrun::launcher::pmi {

// The fence signature of PMI fences: the whole job, kept apart from PMIx
// fences ("*") so that rounds of the two protocols never mix.
inline constexpr const char* kFenceSignature = "pmi:*";

// Where the service reports to the agent.  Every member may be empty.
struct PmiEvents {
  // Same contract as PmixServer::FenceRouter: this host's blob out, every
  // host's (concatenated) back.  Empty: this host is the whole job.
  std::function<void(const std::string& signature, std::string blob, std::function<void(bool, std::string)> done)>
      fence_router;
  std::function<void(int rank)> connected;   // the rank sent init
  std::function<void(int rank)> finalized;
  std::function<void(int rank, int status, const std::string& message)> aborted;
  // The rank used PMI wrongly; `how` completes "rank R on host H ...".
  std::function<void(int rank, const std::string& how)> misused;
};

// PmiHost over the job's fence path: puts since the last fence are this
// host's contribution; a fence completes when every local rank arrived and
// the router brought back every host's; then their puts are visible.
class PmiJobSpace final : public PmiHost {
 public:
  static constexpr std::size_t kMaxHostBytes = std::size_t{16} << 20;

  // `host` names this host in the reasons its fences fail with ("rank 3
  // on host h2 finalized"); empty on one host.
  PmiJobSpace(int local_ranks, PmiEvents* events, std::string host = "")
      : local_ranks_(local_ranks), events_(events), host_(std::move(host)) {}

  std::optional<std::string> put(int rank, const std::string& key, const std::string& value) override;
  void fence(int rank, std::function<void(bool ok, const std::string& why)> done) override;
  std::optional<std::string> get(const std::string& key) const override;
  std::optional<std::string> put_node(const std::string& key, const std::string& value) override;
  std::optional<std::string> get_node(const std::string& key) const override;
  void abort(int rank, int code, const std::string& message) override;
  void misuse(int rank, const std::string& message) override;
  void finalized(int rank) override;

  // No fence can complete any more: `rank` of this host failed, or left
  // (`what` completes "rank R on host H ...").  Every waiting and later
  // fence fails with that reason, here and, across hosts, on every host:
  // this host sends the reason as its part of the next round (a key-value
  // pair with the empty key, which no put can write), and a host whose
  // round brings such a part back fails that round and every later one.
  void poison(int rank, const std::string& what);

  // The blob format, exposed for tests: (u32 key length, key, u32 value
  // length, value)*, little-endian; blobs concatenate.
  static std::string encode(const std::map<std::string, std::string>& kv);
  static bool decode(const std::string& blob, std::map<std::string, std::string>* out);

 private:
  // The router's answer to this host's round: every host's parts, or why it failed.
  void answered(bool ok, const std::string& all);
  void complete(bool ok, const std::string& why);
  void poison_with(const std::string& why);
  // Sends this host's failure as its part of the next round (after a round
  // with the router, if one is), unless the hosts know of a failure already.
  void tell_other_hosts();

  int local_ranks_;
  PmiEvents* events_;
  std::map<std::string, std::string> committed_;
  std::map<std::string, std::pair<int, std::string>> pending_;  // key -> (rank, value)
  std::map<std::string, std::string> node_;
  std::vector<std::function<void(bool, const std::string&)>> waiting_;
  bool routed_ = false;                    // this round's blob went to the router
  std::optional<std::string> poisoned_;
  bool told_ = false;  // every host learns (or learnt) of a failure: nothing more to send
  std::string host_;
  // The bytes of the keys and values this host's ranks put (job and node),
  // at most kMaxHostBytes: past that a put is wrong use, not memory without
  // bound nor a fence answer too large to travel.
  std::optional<std::string> hold(const std::string& key, std::size_t old_bytes,
                                  std::size_t new_bytes);
  std::size_t held_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // expires with this space
};

// The sockets.  prepare() before spawning a rank, adopt its end after.
class PmiService {
 public:
  // `job` describes the whole job; `local_ranks` are this host's.
  PmiService(PmiJobInfo job, int local_ranks, PmiEvents events);
  ~PmiService();  // closes every socket
  PmiService(const PmiService&) = delete;
  PmiService& operator=(const PmiService&) = delete;

  // A socket pair for `rank`: returns the child's end (close-on-exec; the
  // child clears that flag after fork) and sets the PMI variables in `env`.
  Result<int> prepare(int rank, Env& env);
  // The parent's end of each prepared rank, for the event loop to watch:
  // (index for on_readable, fd).
  std::vector<std::pair<size_t, int>> fds() const;
  // Reads what is there on socket `index`; closes it at EOF or when the
  // connection ended.
  void on_readable(size_t index);

  PmiJobSpace& space() { return space_; }

 private:
  struct Socket {
    int rank = 0;
    int fd = -1;
    bool unread = false;  // ended for replies it left unread
    std::unique_ptr<PmiConnection> conn;
  };
  void close_socket(Socket& s);

  PmiJobInfo job_;
  PmiEvents events_;
  PmiJobSpace space_;
  std::vector<std::unique_ptr<Socket>> sockets_;
};

}  // namespace accrun::launcher::pmi
