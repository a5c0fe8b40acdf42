// Output forwarding: see iof.hpp.
#include "iof.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace accrun::launcher {

bool write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, data, n);
    if (w > 0) {
      data += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, -1);
      continue;
    }
    if (w == 0) errno = EIO;
    return false;
  }
  return true;
}

LineAssembler::LineAssembler(std::string prefix, int out_fd)
    : prefix_(std::move(prefix)), writer_([out_fd](const char* data, size_t n) { return write_all(out_fd, data, n); }) {}

void LineAssembler::write_out(const char* data, size_t n) {
  if (broken_ || n == 0) return;
  if (!writer_(data, n)) {
    broken_ = true;
    error_ = errno != 0 ? errno : EIO;
  }
}

void LineAssembler::flush_batch() {
  write_out(out_.data(), out_.size());
  out_.clear();
}

// Writes the first kMaxPiece bytes of the current line while more than that
// is held, each as a piece of its own.
void LineAssembler::emit_long_pieces() {
  if (partial_.size() <= kMaxPiece) return;
  flush_batch();  // earlier lines of this stream go first
  size_t off = 0;
  while (partial_.size() - off > kMaxPiece) {
    if (prefix_.empty()) {
      write_out(partial_.data() + off, kMaxPiece);
    } else {
      out_ = prefix_;
      out_.append(partial_, off, kMaxPiece);
      out_ += '\n';
      flush_batch();
    }
    off += kMaxPiece;
  }
  partial_.erase(0, off);
}

void LineAssembler::feed(const char* data, size_t n) {
  size_t pos = 0;
  while (pos < n) {
    const char* nl = static_cast<const char*>(std::memchr(data + pos, '\n', n - pos));
    if (nl == nullptr) {
      partial_.append(data + pos, n - pos);
      emit_long_pieces();
      break;
    }
    size_t end = static_cast<size_t>(nl - data) + 1;
    size_t body = end - 1 - pos;  // this line's bytes here, without the newline
    if (partial_.size() + body > kMaxPiece) {
      // A long line ends here: its full pieces, then its rest with the newline.
      partial_.append(data + pos, body);
      emit_long_pieces();
      out_ += prefix_;
      out_ += partial_;
      out_ += '\n';
    } else {
      out_ += prefix_;
      out_ += partial_;
      out_.append(data + pos, end - pos);
    }
    partial_.clear();
    pos = end;
  }
  flush_batch();
}

void LineAssembler::finish() {
  flush_batch();
  if (partial_.empty()) return;
  out_ = prefix_;
  out_ += partial_;
  if (!prefix_.empty()) out_ += '\n';
  partial_.clear();
  flush_batch();
}

}  // namespace accrun::launcher
