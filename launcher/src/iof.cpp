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
    return false;
  }
  return true;
}

void LineAssembler::emit(const char* data, size_t n, bool add_newline) {
  if (broken_) return;
  out_.clear();
  out_.reserve(prefix_.size() + n + 1);
  out_ += prefix_;
  out_.append(data, n);
  if (add_newline) out_ += '\n';
  if (!write_all(out_fd_, out_.data(), out_.size())) broken_ = true;
}

void LineAssembler::feed(const char* data, size_t n) {
  if (prefix_.empty()) {
    // Untagged: everything up to the last newline goes out in one write.
    const char* last = static_cast<const char*>(memrchr(data, '\n', n));
    if (last == nullptr) {
      partial_.append(data, n);
      if (partial_.size() > kMaxPartial) {
        emit(partial_.data(), partial_.size(), false);
        partial_.clear();
      }
      return;
    }
    size_t upto = static_cast<size_t>(last - data) + 1;
    if (!broken_) {
      if (partial_.empty()) {
        if (!write_all(out_fd_, data, upto)) broken_ = true;
      } else {
        partial_.append(data, upto);
        if (!write_all(out_fd_, partial_.data(), partial_.size())) broken_ = true;
        partial_.clear();
      }
    }
    partial_.clear();
    partial_.append(data + upto, n - upto);
    return;
  }
  // Tagged: one buffer with a prefix before every line, written at once.
  out_.clear();
  size_t pos = 0;
  while (pos < n) {
    const char* nl = static_cast<const char*>(std::memchr(data + pos, '\n', n - pos));
    if (nl == nullptr) break;
    size_t end = static_cast<size_t>(nl - data) + 1;
    out_ += prefix_;
    if (!partial_.empty()) {
      out_ += partial_;
      partial_.clear();
    }
    out_.append(data + pos, end - pos);
    pos = end;
  }
  if (!out_.empty() && !broken_ && !write_all(out_fd_, out_.data(), out_.size())) broken_ = true;
  partial_.append(data + pos, n - pos);
  if (partial_.size() > kMaxPartial) {
    emit(partial_.data(), partial_.size(), true);
    partial_.clear();
  }
}

void LineAssembler::finish() {
  if (partial_.empty()) return;
  emit(partial_.data(), partial_.size(), !prefix_.empty());
  partial_.clear();
}

}  // namespace accrun::launcher
