// tree_links.cpp — see tree_links.hpp.
#include "agent/tree_links.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "accrun/log.hpp"
#include "controller/protocol.hpp"
#include "peer_guard.hpp"
#include "wire/codec.hpp"
#include "wire/frame.hpp"
#include "wire/strangers.hpp"

namespace accrun::launcher {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kJoinTimeout = std::chrono::seconds(10);
// Connections still proving the secret or saying who they are; past this
// the oldest that has sent nothing goes (wire/strangers.hpp), so a flood of
// strangers costs nothing else and never pushes out a child mid-handshake.
constexpr size_t kMaxStrangers = 64;
// A round's answer holds every host's PMIx data: a child that reads slowly
// may hold several.
constexpr size_t kMaxPending = 8 * (wire::kMaxFrame + wire::kFrameHeaderSize);

}  // namespace

struct TreeLinks::Link {
  wire::Connection conn;
  std::optional<wire::Handshake> handshake;  // until the peer proved the secret
  int id = -1;                               // the child agent, once it joined (-1: not yet, or the parent)
  bool is_parent = false;
  bool writing = false;  // watched for EPOLLOUT
  bool heard = false;    // a stranger that has sent something
  std::string peer;
  Clock::time_point deadline;
};

TreeLinks::TreeLinks(const wire::Secret& secret, int self, std::string host, int err_fd)
    : secret_(secret), self_(self), host_(std::move(host)), err_fd_(err_fd), epfd_(epoll_create1(EPOLL_CLOEXEC)) {}

TreeLinks::~TreeLinks() {
  links_.clear();
  if (listener_ >= 0) close(listener_);
  if (epfd_ >= 0) close(epfd_);
}

void TreeLinks::say(const std::string& line) const {
  std::string s = "accrun: agent on " + host_ + ": " + line + "\n";
  [[maybe_unused]] ssize_t w = write(err_fd_, s.data(), s.size());
}

Result<std::string> TreeLinks::listen(const std::string& address, std::vector<int> children) {
  if (epfd_ < 0) return system_error("epoll_create1");
  auto fd = wire::listen_tcp(address, 0);
  if (!fd) return fd.status();
  auto port = wire::local_port(*fd);
  if (!port) {
    close(*fd);
    return port.status();
  }
  listener_ = *fd;
  expected_ = std::move(children);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;
  epoll_ctl(epfd_, EPOLL_CTL_ADD, listener_, &ev);
  bool v6 = address.find(':') != std::string::npos;
  return (v6 ? "[" + address + "]" : address) + ":" + std::to_string(*port);
}

Status TreeLinks::join(const std::string& parent, std::chrono::milliseconds timeout) {
  if (epfd_ < 0) return system_error("epoll_create1");
  size_t colon = parent.rfind(':');
  std::string host = parent.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  int port = std::atoi(parent.c_str() + colon + 1);
  auto fd = wire::connect_tcp(host, static_cast<uint16_t>(port), timeout);
  if (!fd) return fd.status().with_context("the agent that started this one (" + parent + ")");
  if (Status s = wire::handshake_blocking(*fd, wire::Role::kChild, secret_, timeout); !s) {
    close(*fd);
    return s.with_context("the agent that started this one (" + parent + ")");
  }
  auto link = std::make_unique<Link>();
  link->conn = wire::Connection(*fd, kMaxPending);
  link->is_parent = true;
  link->peer = parent;
  parent_ = link.get();
  links_.push_back(std::move(link));
  watch(*parent_);
  wire::Writer w;
  w.u32(static_cast<uint32_t>(self_));
  send(*parent_, msg::kTreeJoin, w.data());
  return Status::ok();
}

void TreeLinks::watch(Link& link) {
  epoll_event ev{};
  ev.events = EPOLLIN | (link.writing ? EPOLLOUT : 0u);
  ev.data.ptr = &link;
  if (epoll_ctl(epfd_, EPOLL_CTL_MOD, link.conn.fd(), &ev) != 0) epoll_ctl(epfd_, EPOLL_CTL_ADD, link.conn.fd(), &ev);
}

void TreeLinks::send(Link& link, uint16_t type, std::string_view payload) {
  if (!link.conn.is_open()) return;
  if (Status s = link.conn.send(type, payload); !s) return drop(link, "cannot send to it: " + s.message());
  auto more = link.conn.flush();
  if (!more) return drop(link, "its connection failed: " + more.status().message());
  if (*more != link.writing) {
    link.writing = *more;
    watch(link);
  }
}

void TreeLinks::drop(Link& link, const std::string& why) {
  if (!link.conn.is_open()) return;
  // A lost agent ends the job through the controller, which hears of it
  // itself; a stranger is only reported.
  if (link.is_parent) {
    log(LogLevel::kDebug, "the link to the agent that started this one closed: %s", why.c_str());
  } else if (link.id >= 0) {
    log(LogLevel::kDebug, "the link from agent %d closed: %s", link.id, why.c_str());
  } else if (std::string line = refusals_.next("refused a connection from " + link.peer + ": " + why +
                                                  "; the job goes on");
             !line.empty()) {
    say(line);
  }
  epoll_ctl(epfd_, EPOLL_CTL_DEL, link.conn.fd(), nullptr);
  link.conn.close();
  if (&link == parent_) parent_ = nullptr;
}

void TreeLinks::stop_listening() {
  if (listener_ < 0) return;
  epoll_ctl(epfd_, EPOLL_CTL_DEL, listener_, nullptr);
  close(listener_);
  listener_ = -1;
}

void TreeLinks::accept_children() {
  for (int taken = 0; taken < wire::kAcceptsPerRound; ++taken) {
    auto fd = wire::accept_tcp(listener_);
    if (!fd) {
      // (EMFILE and the like: a listener left readable would wake the
      // loop on every turn.)
      say("cannot accept the agents it starts: " + fd.status().message() + "; no longer listening");
      return stop_listening();
    }
    if (*fd < 0) return;
    std::vector<Link*> strangers;  // oldest first
    for (auto& l : links_)
      if (l->conn.is_open() && !l->is_parent && l->id < 0) strangers.push_back(l.get());
    if (strangers.size() >= kMaxStrangers)
      drop(**wire::stranger_to_drop(strangers.begin(), strangers.end(),
                                    [](const Link* l) { return !l->heard && wire::silent(l->conn.fd()); }),
           "too many connections waiting to prove the job's secret");
    auto link = std::make_unique<Link>();
    link->peer = peer_owner(*fd).peer;
    link->conn = wire::Connection(*fd, kMaxPending);
    link->handshake.emplace(wire::Role::kParent, secret_);
    link->deadline = Clock::now() + kJoinTimeout;
    std::string hello = link->handshake->start();
    if (::send(link->conn.fd(), hello.data(), hello.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
        static_cast<ssize_t>(hello.size()))
      continue;  // a fresh socket takes 41 bytes, or its peer is gone
    watch(*link);
    links_.push_back(std::move(link));
  }
}

void TreeLinks::on_readable() {
  epoll_event events[32];
  int n = epoll_wait(epfd_, events, 32, 0);
  for (int i = 0; i < n; ++i) {
    if (events[i].data.ptr == nullptr) {
      accept_children();
    } else {
      serve(*static_cast<Link*>(events[i].data.ptr), events[i].events);
    }
  }
  // Strangers that stall, and links closed above, go.
  auto now = Clock::now();
  for (auto& l : links_)
    if (l->conn.is_open() && !l->is_parent && l->id < 0 && now > l->deadline)
      drop(*l, "it did not prove the job's secret and say which agent it is within 10 s");
  links_.erase(std::remove_if(links_.begin(), links_.end(), [](const auto& l) { return !l->conn.is_open(); }),
               links_.end());
}

void TreeLinks::serve(Link& link, uint32_t events) {
  if (!link.conn.is_open()) return;
  if (link.handshake) {
    char buf[512];
    ssize_t got = recv(link.conn.fd(), buf, std::min(sizeof buf, link.handshake->wanted()), MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (got <= 0) return drop(link, "it closed the connection during the handshake");
    link.heard = true;
    auto step = link.handshake->feed(buf, static_cast<size_t>(got));
    if (!step) return drop(link, step.status().message());
    if (!step->send.empty() && ::send(link.conn.fd(), step->send.data(), step->send.size(), MSG_NOSIGNAL) !=
                                   static_cast<ssize_t>(step->send.size()))
      return drop(link, "it closed the connection during the handshake");
    if (step->done) link.handshake.reset();
    return;
  }
  if (events & EPOLLOUT) {
    auto more = link.conn.flush();
    if (!more) return drop(link, more.status().message());
    if (*more != link.writing) {
      link.writing = *more;
      watch(link);
    }
  }
  if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR))) return;
  auto frames = link.conn.read_some();
  if (!frames) return drop(link, frames.status().message());
  for (auto& f : *frames) {
    if (!link.conn.is_open()) return;
    on_frame(link, f.type, f.payload);
  }
}

void TreeLinks::on_frame(Link& link, uint16_t type, const std::string& payload) {
  wire::Reader r(payload);
  if (link.is_parent) {
    if (stopped_ && type == msg::kFenceDone) return;
    if (type != msg::kFenceDone || !from_parent_) return drop(link, "an unexpected frame from the parent agent");
    return from_parent_(payload);
  }
  if (link.id < 0) {
    auto id = r.u32("tree join: agent");
    if (type != msg::kTreeJoin || !id) return drop(link, "it did not say which agent it is");
    int who = static_cast<int>(*id);
    if (std::find(expected_.begin(), expected_.end(), who) == expected_.end())
      return drop(link, "agent " + std::to_string(who) + " is not one this agent started");
    for (auto& l : links_)
      if (l->id == who && l->conn.is_open()) return drop(link, "agent " + std::to_string(who) + " joined already");
    link.id = who;
    log(LogLevel::kDebug, "agent %d joined the launch tree below this one", who);
    // Once every child has joined, nobody else is due: stop listening.
    size_t joined = 0;
    for (auto& l : links_) joined += l->conn.is_open() && !l->is_parent && l->id >= 0;
    if (joined == expected_.size()) stop_listening();
    return;
  }
  if (stopped_ && type == msg::kFence) return;
  if (type != msg::kFence) return drop(link, "an unexpected frame (type " + std::to_string(type) + ")");
  auto fence = msg::decode_fence(payload);
  if (!fence) return drop(link, fence.status().message());
  if (!carries(fence->signature) ||
      std::find(fence_children_.begin(), fence_children_.end(), link.id) == fence_children_.end())
    return drop(link, "a fence this agent does not carry (" + fence->signature + ")");
  round_of(link.id, fence->signature).from[link.id] = std::move(fence->parts);
  complete_rounds(fence->signature);
}

void TreeLinks::carry_fences(std::vector<int> children, std::function<void(std::string)> to_controller,
                             std::function<void(std::string_view)> from_parent) {
  carrying_ = true;
  fence_children_ = std::move(children);
  to_controller_ = std::move(to_controller);
  from_parent_ = std::move(from_parent);
  log(LogLevel::kDebug, "whole-job fences go along the launch tree: %zu child(ren) here, up to %s",
      fence_children_.size(), parent_ ? parent_->peer.c_str() : "the controller");
}

void TreeLinks::stop_carrying() {
  if (!carrying_) return;
  carrying_ = false;
  stopped_ = true;
  rounds_.clear();
  log(LogLevel::kDebug, "whole-job fences no longer travel the launch tree");
}

bool TreeLinks::carries(std::string_view signature) const {
  return carrying_ && msg::whole_job(signature);
}

TreeLinks::Round& TreeLinks::round_of(int source, const std::string& signature) {
  size_t k = given_[{source, signature}]++;
  auto& q = rounds_[signature];
  size_t base = sent_[signature];
  while (q.size() <= k - base) q.emplace_back();
  return q[k - base];
}

void TreeLinks::contribute(const std::string& signature, std::string blob) {
  round_of(self_, signature).own = std::move(blob);
  complete_rounds(signature);
}

void TreeLinks::complete_rounds(const std::string& signature) {
  auto& q = rounds_[signature];
  while (!q.empty() && q.front().own && q.front().from.size() == fence_children_.size()) {
    std::vector<std::pair<int, std::string>> parts;
    parts.emplace_back(self_, std::move(*q.front().own));
    for (auto& [child, theirs] : q.front().from)
      for (auto& p : theirs) parts.push_back(std::move(p));
    std::string payload = msg::encode_fence(signature, parts);
    log(LogLevel::kDebug, "fence %s: %zu host(s) from here and below go up", signature.c_str(), parts.size());
    q.pop_front();
    ++sent_[signature];
    if (parent_) {
      send(*parent_, msg::kFence, payload);
    } else if (to_controller_) {
      to_controller_(std::move(payload));
    }
  }
}

void TreeLinks::pass_down(std::string_view payload) {
  for (auto& l : links_)
    if (l->conn.is_open() && !l->is_parent &&
        std::find(fence_children_.begin(), fence_children_.end(), l->id) != fence_children_.end())
      send(*l, msg::kFenceDone, payload);
}

}  // namespace accrun::launcher
