// stdin_forwarder.cpp — see stdin_forwarder.hpp.
#include "agent/stdin_forwarder.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>

namespace accrun::launcher {

StdinForwarder::~StdinForwarder() {
  for (auto& t : targets_)
    if (t.fd >= 0) close(t.fd);
}

StdinForwarder::Mode StdinForwarder::attach() {
  if (fcntl(source_, F_GETFD) < 0) return Mode::kNone;
  epoll_event ev{};
  ev.events = 0;
  ev.data.u64 = source_tag_;
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, source_, &ev) != 0) return Mode::kDirect;
  polled_ = true;
  return Mode::kPolled;
}

void StdinForwarder::attach_pushed(std::function<void(size_t)> consumed) {
  pushed_ = true;
  consumed_ = std::move(consumed);
}

void StdinForwarder::push(std::string data) {
  if (!pushed_ || eof_) return;
  pending_.push_back(std::move(data));
  if (drained()) next_chunk();
}

void StdinForwarder::push_end() {
  if (!pushed_) return;
  pushed_end_ = true;
  if (drained()) next_chunk();
}

bool StdinForwarder::drained() const {
  for (const auto& t : targets_)
    if (t.fd >= 0 && t.offset < chunk_.size()) return false;
  return true;
}

// Pushed data: the next chunk once every rank took the last one.
void StdinForwarder::next_chunk() {
  while (drained() && !eof_) {
    if (!chunk_.empty() && consumed_) consumed_(chunk_.size());
    chunk_.clear();
    if (pending_.empty()) {
      if (!pushed_end_) return;
      eof_ = true;
      for (auto& t : targets_) close_target(t);
      return;
    }
    chunk_ = std::move(pending_.front());
    pending_.pop_front();
    for (size_t i = 0; i < targets_.size(); ++i) {
      targets_[i].offset = 0;
      writable(i);
    }
  }
}

int StdinForwarder::add_target() {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  fcntl(p[1], F_SETFL, O_NONBLOCK);
  Target t;
  t.fd = p[1];
  targets_.push_back(t);
  return p[0];
}

void StdinForwarder::start() {
  if (pushed_ && drained()) next_chunk();
  for (size_t i = 0; i < targets_.size(); ++i) {
    if (targets_[i].fd < 0) continue;
    epoll_event ev{};
    ev.events = targets_[i].want_out ? static_cast<uint32_t>(EPOLLOUT) : 0U;
    ev.data.u64 = target_tag_ | i;
    epoll_ctl(epfd_, EPOLL_CTL_ADD, targets_[i].fd, &ev);
  }
  update_interest();
}

void StdinForwarder::update_interest() {
  if (!polled_ || eof_) return;
  bool all_drained = true;
  bool any_target = false;
  for (const auto& t : targets_) {
    if (t.fd >= 0 && t.offset < chunk_.size()) all_drained = false;
    any_target |= t.fd >= 0;
  }
  bool want = all_drained && any_target;
  if (want == in_epoll_) return;
  epoll_event ev{};
  ev.events = want ? static_cast<uint32_t>(EPOLLIN) : 0U;
  ev.data.u64 = source_tag_;
  epoll_ctl(epfd_, EPOLL_CTL_MOD, source_, &ev);
  in_epoll_ = want;
}

void StdinForwarder::close_target(Target& t) {
  if (t.fd < 0) return;
  epoll_ctl(epfd_, EPOLL_CTL_DEL, t.fd, nullptr);
  close(t.fd);
  t.fd = -1;
}

void StdinForwarder::writable(size_t index) {
  Target& t = targets_[index];
  while (t.fd >= 0 && t.offset < chunk_.size()) {
    ssize_t w = write(t.fd, chunk_.data() + t.offset, chunk_.size() - t.offset);
    if (w > 0) {
      t.offset += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) break;
    close_target(t);  // the rank closed its stdin or is gone
    return;
  }
  if (t.fd < 0) return;
  bool want_out = t.offset < chunk_.size();
  if (want_out != t.want_out) {
    epoll_event ev{};
    ev.events = want_out ? static_cast<uint32_t>(EPOLLOUT) : 0U;
    ev.data.u64 = target_tag_ | index;
    epoll_ctl(epfd_, EPOLL_CTL_MOD, t.fd, &ev);
    t.want_out = want_out;
  }
  if (eof_ && !want_out) close_target(t);
}

void StdinForwarder::on_target(size_t index, uint32_t events) {
  if (index >= targets_.size()) return;
  // A rank that closed its stdin shows as an error on our end, even with
  // no interest set: drop it, or the loop would spin on it.
  if (events & (EPOLLERR | EPOLLHUP)) {
    close_target(targets_[index]);
  } else {
    writable(index);
  }
  if (pushed_) {
    next_chunk();
  } else {
    update_interest();
  }
}

void StdinForwarder::on_source() {
  // A chunk some rank has not taken yet must not be overwritten: a readiness
  // already reported in this epoll round can arrive after the interest in
  // the source was dropped (that lost a whole chunk of forwarded input).
  for (const auto& t : targets_)
    if (t.fd >= 0 && t.offset < chunk_.size()) return;
  char buf[65536];
  ssize_t n = read(source_, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    eof_ = true;
    epoll_ctl(epfd_, EPOLL_CTL_DEL, source_, nullptr);
    in_epoll_ = false;
    for (auto& t : targets_)
      if (t.offset >= chunk_.size()) close_target(t);
    return;
  }
  chunk_.assign(buf, static_cast<size_t>(n));
  for (size_t i = 0; i < targets_.size(); ++i) {
    targets_[i].offset = 0;
    writable(i);
  }
  update_interest();
}

}  // namespace accrun::launcher
