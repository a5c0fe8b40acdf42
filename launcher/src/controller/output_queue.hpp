// output_queue.hpp — the ranks' output on its way to accrun's standard
// output or error, written only as fast as the reader takes it, so that the
// job controller's event loop never waits on a slow reader (a paused pager,
// a full pipe).  What the reader does not take yet waits here; the
// controller pauses the agents' reading of their ranks' pipes past a high
// mark and resumes it below a low one, so the backpressure reaches the
// ranks and nothing is lost.  accrun's own descriptors stay as they are (no
// O_NONBLOCK on a file description the shell shares): a write is sized to
// what the descriptor can take now.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <string_view>

namespace accrun::launcher {

class OutputQueue {
 public:
  explicit OutputQueue(int fd) : fd_(fd) {}
  int fd() const { return fd_; }
  void push(std::string_view data);
  size_t queued() const { return bytes_; }
  bool empty() const { return bytes_ == 0; }
  // Writes what the descriptor takes now without blocking; false once a
  // write failed (error() says why; the queue is dropped).
  bool flush();
  int error() const { return error_; }
  // accrun started with `fd` (1 or 2) closed: main put /dev/null there, so
  // that no other descriptor takes its number, but output for it cannot be
  // written, as a write to a closed descriptor could not (EBADF).
  static void closed_at_start(int fd);
  static bool was_closed_at_start(int fd);

 private:
  // Bytes the descriptor takes now without blocking (a pipe's free space;
  // unlimited for a regular file; one page for a terminal that polled
  // writable).
  size_t room() const;
  bool write_some(size_t limit);

  int fd_;
  std::deque<std::string> q_;
  size_t front_off_ = 0;
  size_t bytes_ = 0;
  int error_ = 0;
};

}  // namespace accrun::launcher
