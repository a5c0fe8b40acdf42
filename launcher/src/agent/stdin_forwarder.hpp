// stdin_forwarder.hpp — accrun's standard input to the ranks that take it
// (--stdin, accrun(1) INPUT).  One chunk at a time: the source is read again
// only once every rank's pipe has taken the last chunk, so a rank that reads
// slowly holds the source back (backpressure) and nothing is lost; a rank
// that closed its stdin drops out and costs nothing.  A source that cannot
// be polled (a regular file, /dev/null) is handed to the ranks directly.
// In a job across hosts the source is the job controller instead, which
// reads accrun's stdin on the launching host and pushes it here (push()),
// within a window the consumed() callback reopens.  Driven by the node
// daemon's epoll loop; not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace accrun::launcher {

class StdinForwarder {
 public:
  // Events on `source_fd` come to the daemon's epoll set `epfd` tagged
  // `source_tag`; on the pipe of target i, `target_tag | i`.
  StdinForwarder(int epfd, int source_fd, uint64_t source_tag, uint64_t target_tag)
      : epfd_(epfd), source_(source_fd), source_tag_(source_tag), target_tag_(target_tag) {}
  ~StdinForwarder();
  StdinForwarder(const StdinForwarder&) = delete;
  StdinForwarder& operator=(const StdinForwarder&) = delete;

  // How the ranks that take stdin get it.
  enum class Mode {
    kNone,    // the source is closed: they get /dev/null
    kPolled,  // through pipes this forwarder fills (add_target)
    kDirect,  // the source itself (it cannot be polled)
  };
  Mode attach();
  // The source is the controller: data arrives through push() and
  // push_end(); `consumed(n)` runs each time n pushed bytes have reached
  // every rank that takes them (or were dropped because none does).
  void attach_pushed(std::function<void(size_t)> consumed);
  void push(std::string data);
  void push_end();
  // kPolled: a new pipe to one rank; returns the rank's end, which the
  // caller closes after the fork, or -1 (errno set).
  int add_target();
  // Once the ranks have started: watches their pipes and the source.
  void start();
  void on_source();
  void on_target(size_t index, uint32_t events);

 private:
  struct Target {
    int fd = -1;
    size_t offset = 0;
    bool want_out = false;
  };
  void writable(size_t index);
  void close_target(Target& t);
  void update_interest();
  bool drained() const;
  void next_chunk();

  int epfd_;
  int source_;
  uint64_t source_tag_;
  uint64_t target_tag_;
  std::vector<Target> targets_;
  std::string chunk_;
  bool eof_ = false;
  bool polled_ = false;
  bool in_epoll_ = false;
  bool pushed_ = false;
  std::deque<std::string> pending_;  // pushed, not yet the chunk
  bool pushed_end_ = false;
  std::function<void(size_t)> consumed_;
};

}  // namespace accrun::launcher
