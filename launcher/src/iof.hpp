// iof.hpp — forwarding of ranks' output: whole lines only, optionally tagged.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace accrun::launcher {

// Writes all of `data` to `fd`, waiting while a non-blocking fd is full.
// Returns false once the reader is gone (EPIPE) or on another error, with
// errno saying which.
bool write_all(int fd, const char* data, size_t n);

// Assembles one stream of one rank into lines and writes them, prefixed with
// `prefix`, through one writer shared by every rank (the event loop), so
// lines from different ranks never interleave.  Not thread-safe.
//
// The unit of output is a piece: a complete line (with its prefix and
// newline), or, for a line longer than kMaxPiece bytes before its newline,
// each kMaxPiece bytes of it in turn and then its rest.  Every piece goes to
// the writer inside one call of its own or with other whole pieces of the
// same stream, never split across calls and never with another stream's
// bytes.  A piece of a long line gets the prefix and, when tagged, a newline
// of its own; untagged, the pieces' bytes are the line's bytes.
class LineAssembler {
 public:
  // Called with bytes to write in one piece; returns false once writing
  // failed (errno says why).  After a failure nothing more is written.
  using Writer = std::function<bool(const char* data, size_t n)>;

  // Lines longer than this are written in pieces of exactly this size (so a
  // rank that never writes a newline cannot exhaust memory).
  static constexpr size_t kMaxPiece = size_t{1} << 20;

  LineAssembler(std::string prefix, int out_fd);
  LineAssembler(std::string prefix, Writer writer) : prefix_(std::move(prefix)), writer_(std::move(writer)) {}

  // Consumes `n` bytes; writes every line (or long-line piece) they complete.
  void feed(const char* data, size_t n);
  // End of the stream: writes a last line that has no newline (ending it
  // with one when lines are tagged, so the next tag starts a line).
  void finish();
  // Bytes held while waiting for the end of a line (at most kMaxPiece).
  size_t pending() const { return partial_.size(); }
  // Whether a write failed; then error() is its errno and output is dropped.
  bool broken() const { return broken_; }
  int error() const { return error_; }

 private:
  void write_out(const char* data, size_t n);
  void flush_batch();
  void emit_long_pieces();

  std::string prefix_;
  Writer writer_;
  std::string partial_;  // the current line's bytes so far (no prefix)
  std::string out_;      // complete lines batched for one write
  bool broken_ = false;
  int error_ = 0;
};

}  // namespace accrun::launcher
