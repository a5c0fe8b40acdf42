// tree_links.hpp — a node agent's links along the launch tree
// (docs/design.md §4 "One job-wide PMIx"): to the agent that started it and
// from the agents it started, each proving the job's secret like a
// connection to the controller.  Whole-job fences travel them: an agent
// gathers its own host's contribution and its children's, sends them up in
// one message (to its parent, or to the controller at the top of the
// tree), and passes the answer down to the children it heard from.  So the
// controller handles one message per agent it started, whatever the host
// count, and no agent more than `fanout` + 1.  Fences among some ranks
// only, and everything else, go to the controller directly (upstream.hpp).
//
// Not thread-safe: the agent's event loop (or its serve loop before the
// launch) calls on_readable() when fd() is readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "accrun/status.hpp"
#include "wire/auth.hpp"
#include "wire/connection.hpp"
#include "wire/strangers.hpp"

namespace accrun::launcher {

class TreeLinks {
 public:
  // `self`: this agent's id (what its hello says); `host` names it in
  // messages, which go to `err_fd`.
  TreeLinks(const wire::Secret& secret, int self, std::string host, int err_fd = 2);
  ~TreeLinks();
  TreeLinks(const TreeLinks&) = delete;
  TreeLinks& operator=(const TreeLinks&) = delete;

  // The agents this one starts: listens on `address` (numeric; the port is
  // the kernel's) for them and returns "address:port" for their launch
  // descriptions.  A connection that fails the secret, names an agent that
  // is not a child, or says nothing in 10 s is closed and reported; the job
  // goes on.  Once every child has joined, it stops listening.
  Result<std::string> listen(const std::string& address, std::vector<int> children);
  // The agent that started this one: connects to "address:port", proves
  // the secret and says which agent this is.  Blocks up to `timeout`.
  Status join(const std::string& parent, std::chrono::milliseconds timeout);

  // Readable when a link has something to read or room to write (an epoll
  // set of them); -1 while there are none.
  int fd() const { return links_.empty() && listener_ < 0 ? -1 : epfd_; }
  // Accepts and proves children, reads their frames and the parent's,
  // writes what waits.  Never blocks.
  void on_readable();

  // From the controller (kFenceTree, before the launch): whole-job fences
  // go along the tree from now on, and each round waits for the
  // contributions of `children` (agent ids; those with ranks).  A round
  // that is complete goes to the parent, or through `to_controller` (a
  // kFence payload) at the top of the tree; an answer from the parent
  // (a kFenceDone payload) goes to `from_parent`.
  void carry_fences(std::vector<int> children, std::function<void(std::string)> to_controller,
                    std::function<void(std::string_view)> from_parent);
  // Whether fences with this signature travel the tree: whole-job ones,
  // once carry_fences() was called.
  bool carries(std::string_view signature) const;
  // A host was lost from the tree (kFencesFail): whole-job fences travel it
  // no more; what waits here is dropped, and rounds or answers that still
  // come along its links are ignored.
  void stop_carrying();
  // This host's contribution to the next round of `signature`.
  void contribute(const std::string& signature, std::string blob);
  // A round's answer (a kFenceDone payload), from above: sent on to the
  // children the round waited for.
  void pass_down(std::string_view payload);

 private:
  struct Link;
  // One round of a signature: this host's part, and each child's parts
  // (its own and its subtree's), by child id.
  struct Round {
    std::optional<std::string> own;
    std::map<int, std::vector<std::pair<int, std::string>>> from;
  };
  void accept_children();
  void stop_listening();
  void serve(Link& link, uint32_t events);
  void on_frame(Link& link, uint16_t type, const std::string& payload);
  void drop(Link& link, const std::string& why);
  void watch(Link& link);
  void send(Link& link, uint16_t type, std::string_view payload);
  Round& round_of(int source, const std::string& signature);
  void complete_rounds(const std::string& signature);
  void say(const std::string& line) const;

  wire::Secret secret_;
  int self_;
  std::string host_;
  int err_fd_;
  wire::RefusalLog refusals_;  // strangers refused
  int epfd_ = -1;
  int listener_ = -1;
  std::vector<int> expected_;  // the agents this one started
  std::vector<std::unique_ptr<Link>> links_;
  Link* parent_ = nullptr;
  bool carrying_ = false;
  bool stopped_ = false;
  std::vector<int> fence_children_;
  std::function<void(std::string)> to_controller_;
  std::function<void(std::string_view)> from_parent_;
  std::map<std::string, std::deque<Round>> rounds_;
  std::map<std::pair<int, std::string>, size_t> given_;  // (source, signature) -> rounds it contributed to
  std::map<std::string, size_t> sent_;                   // signature -> rounds sent up
};

}  // namespace accrun::launcher
