// iof.hpp — forwarding of ranks' output: whole lines only, optionally tagged.
#pragma once

#include <cstddef>
#include <string>

namespace accrun::launcher {

// Writes all of `data` to `fd`, waiting while a non-blocking fd is full.
// Returns false once the reader is gone (EPIPE) or on another error.
bool write_all(int fd, const char* data, size_t n);

// Assembles one stream of one rank into lines and writes each complete line,
// prefixed with `prefix`, to `out_fd` in one piece, so lines from different
// ranks never interleave (one writer, the event loop).  Not thread-safe.
class LineAssembler {
 public:
  // A partial line longer than this is written out as it stands (so a rank
  // that never writes a newline cannot exhaust memory).
  static constexpr size_t kMaxPartial = 1 << 20;

  LineAssembler(std::string prefix, int out_fd) : prefix_(std::move(prefix)), out_fd_(out_fd) {}

  // Consumes `n` bytes; writes every line they complete.
  void feed(const char* data, size_t n);
  // End of the stream: writes a last line that has no newline (ending it
  // with one when lines are tagged, so the next tag starts a line).
  void finish();
  // Bytes held while waiting for the end of a line.
  size_t pending() const { return partial_.size(); }

 private:
  void emit(const char* data, size_t n, bool add_newline);

  std::string prefix_;
  int out_fd_;
  std::string partial_;
  std::string out_;  // reused output buffer
  bool broken_ = false;
};

}  // namespace accrun::launcher
