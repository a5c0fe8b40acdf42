// output_queue.cpp — see output_queue.hpp.
#include "controller/output_queue.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>


namespace accrun::launcher {

namespace {
bool g_closed_at_start[3] = {false, false, false};
}  // namespace

void OutputQueue::closed_at_start(int fd) {
  if (fd >= 0 && fd <= 2) g_closed_at_start[fd] = true;
}

bool OutputQueue::was_closed_at_start(int fd) {
  return fd >= 0 && fd <= 2 && g_closed_at_start[fd];
}

void OutputQueue::push(std::string_view data) {
  if (error_ != 0 || data.empty()) return;
  // Small pieces join the last one: fewer, larger writes.
  if (!q_.empty() && q_.back().size() < 65536) {
    q_.back().append(data);
  } else {
    q_.emplace_back(data);
  }
  bytes_ += data.size();
}

size_t OutputQueue::room() const {
  struct stat st;
  if (fstat(fd_, &st) != 0) return SIZE_MAX;  // the write says what is wrong
  if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode) || S_ISSOCK(st.st_mode)) return SIZE_MAX;  // sockets: MSG_DONTWAIT
  pollfd p{fd_, POLLOUT, 0};
  if (poll(&p, 1, 0) != 1) return 0;
  // A reader that went away: the write fails at once (EPIPE), full or not.
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return SIZE_MAX;
  if (!(p.revents & POLLOUT)) return 0;
  if (S_ISFIFO(st.st_mode)) {
    int cap = fcntl(fd_, F_GETPIPE_SZ);
    int used = 0;
    if (cap <= 0 || ioctl(fd_, FIONREAD, &used) != 0) return 4096;
    return used < cap ? static_cast<size_t>(cap - used) : 0;
  }
  return 4096;  // a terminal or another device: a page once it polls writable
}

bool OutputQueue::write_some(size_t limit) {
  struct stat st;
  bool sock = fstat(fd_, &st) == 0 && S_ISSOCK(st.st_mode);
  while (!q_.empty() && limit > 0) {
    const std::string& front = q_.front();
    size_t n = std::min(front.size() - front_off_, limit);
    ssize_t w = sock ? send(fd_, front.data() + front_off_, n, MSG_DONTWAIT | MSG_NOSIGNAL)
                     : write(fd_, front.data() + front_off_, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) return true;
    if (w <= 0) {
      error_ = w < 0 ? errno : EIO;
      q_.clear();
      bytes_ = 0;
      front_off_ = 0;
      return false;
    }
    front_off_ += static_cast<size_t>(w);
    bytes_ -= static_cast<size_t>(w);
    limit -= static_cast<size_t>(w);
    if (front_off_ == front.size()) {
      q_.pop_front();
      front_off_ = 0;
    }
  }
  return true;
}

bool OutputQueue::flush() {
  if (error_ != 0) return false;
  if (!q_.empty() && was_closed_at_start(fd_)) {
    error_ = EBADF;
    q_.clear();
    bytes_ = 0;
    front_off_ = 0;
    return false;
  }
  while (!q_.empty()) {
    size_t r = room();
    if (r == 0) return true;
    size_t before = bytes_;
    if (!write_some(r)) return false;
    if (bytes_ == before) return true;  // took nothing after all
  }
  return true;
}

}  // namespace accrun::launcher
