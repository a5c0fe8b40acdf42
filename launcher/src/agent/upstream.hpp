// upstream.hpp — a node agent's link to its job controller while its
// host's ranks run: the Upstream the node daemon reports to (output, a
// rank's failure, fences, heartbeats) and the job-wide name directory,
// over one framed connection (controller/protocol.hpp).  The same for the
// agent forked on the launching host (a socketpair) as for an agent on
// another host (TCP, after the handshake).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "agent/node_daemon.hpp"
#include "wire/connection.hpp"
#include "wire/frame.hpp"

namespace accrun::launcher {

// Sends one frame whole; waits while the socket is full (backpressure from
// the controller reaches the ranks through their output pipes).
bool send_frame(int fd, uint16_t type, std::string_view payload);

// The controller beats every second.  Silent past this while its host
// acknowledges none of this agent's beats for kControllerUnacked, at two
// beats in a row (wire::UnackedWatch), it is lost: that host or the network
// between is down.  Before its launch an agent judges only the
// acknowledgements (the controller may be waiting for other hosts' agents).
constexpr auto kControllerSilence = std::chrono::seconds(4);
constexpr auto kControllerUnacked = std::chrono::seconds(5);

class TreeLinks;

class AgentUpstream final : public Upstream, public JobDirectory {
 public:
  // `self`: this agent's id; `tree`: its links along the launch tree (none
  // for the agent forked on the launching host).
  AgentUpstream(int fd, int self, TreeLinks* tree = nullptr) : fd_(fd), self_(self), tree_(tree) {}
  int fd() const override { return fd_; }
  int links_fd() const override;
  bool on_links() override;
  JobDirectory* directory() override { return this; }

  void publish(int rank, std::vector<std::pair<std::string, std::string>> packed,
               std::function<void(int)> done) override;
  void lookup(int rank, std::vector<std::string> keys, bool wait, size_t wait_count, double timeout_s,
              std::function<void(int, std::vector<DirectoryEntry>)> done) override;
  void unpublish(int rank, std::vector<std::string> keys, std::function<void(int)> done) override;
  bool on_readable(DaemonControl& daemon) override;
  bool catch_up(DaemonControl& daemon) override;
  void output(int stream, const char* data, size_t n) override;
  void rank_failed(int rank, int status, const std::string& kind, const std::string& text) override;
  void initialised(int rank) override;
  void ended_uninitialised(int rank) override;
  void fence(const std::string& signature, std::string blob,
             std::function<void(bool, std::string)> done) override;
  bool tick() override;
  void phase(int p) override;
  void stdin_consumed(size_t n) override;
  void modex(int rank, std::function<void(int, std::string)> done) override;
  void spawn(const SpawnRequest& request, std::function<void(int, std::string)> done) override;
  void spawned_ended(int id) override;
  void signal_procs(int sig, bool stop, const std::vector<int>& ids) override;
  void forget_waiters() override;
  void heard() { last_heard_ = std::chrono::steady_clock::now(); }
  // Sends one frame; a send that had to wait ended because the controller
  // read, which is word from it too.
  void post(uint16_t type, std::string_view payload);
  // A frame whose payload is one u32 rank.
  void post_rank(uint16_t type, int rank);
  void beat_now();
  // wire::UnackedWatch with kControllerUnacked (tick() looks before each beat).
  bool controller_unreachable() const { return unreachable_; }
  wire::FrameDecoder& decoder() { return decoder_; }
  // Frames read in the same batch as the launch, after it: the daemon
  // handles them once its ranks have started (catch_up), and what it did
  // not take goes back to the agent's own loop (take_deferred).
  void defer(std::vector<wire::Frame> frames) { deferred_ = std::move(frames); }
  std::vector<wire::Frame> take_deferred() {
    std::vector<wire::Frame> rest;
    rest.swap(deferred_);
    return rest;
  }
  // kFenceTree from the controller: whole-job fences go along the tree.
  bool carry_fences(std::string_view payload);
  // kFencesFail from the controller: a host was lost from the tree, so
  // whole-job rounds not answered yet fail (but the last one the controller
  // completed, which the lost agent may not have passed down), and later
  // ones fail at once.
  bool fences_fail(std::string_view payload);

 private:
  // A round's answer (kFenceDone), from the controller or the parent agent.
  bool fence_done(std::string_view payload);
  // Handles frames from the controller; false once it is to be taken for
  // gone (kShutdown, a malformed frame).
  bool dispatch(std::vector<wire::Frame>& frames, DaemonControl& daemon);

  int fd_;
  int self_;
  TreeLinks* tree_;
  wire::FrameDecoder decoder_;
  std::vector<wire::Frame> deferred_;
  std::map<std::string, std::deque<std::function<void(bool, std::string)>>> fences_;
  std::map<std::string, uint64_t> answered_;  // signature -> rounds answered here
  bool whole_fences_fail_ = false;
  std::string fences_fail_why_;  // the controller's words, handed to each failed round
  std::chrono::steady_clock::time_point last_beat_{};
  wire::UnackedWatch unacked_;
  bool unreachable_ = false;
  std::chrono::steady_clock::time_point last_heard_ = std::chrono::steady_clock::now();
  uint64_t next_id_ = 0;
  std::map<uint64_t, std::function<void(int)>> status_waiters_;
  std::map<uint64_t, std::function<void(int, std::vector<DirectoryEntry>)>> lookup_waiters_;
  std::map<uint64_t, std::function<void(int, std::string)>> modex_waiters_;
  std::map<uint64_t, std::function<void(int, std::string)>> spawn_waiters_;
};

}  // namespace accrun::launcher
