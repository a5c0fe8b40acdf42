#include "agent/object_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "accrun/log.hpp"
#include "accrun/object_wire.hpp"
#include "accrun/tcp_congestion.hpp"
#include "wire/connection.hpp"

namespace accrun::launcher {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kRequestWait = std::chrono::seconds(10);  // for the request's bytes
constexpr auto kStall = std::chrono::seconds(30);        // a reader that takes nothing
constexpr std::size_t kChunk = 4 << 20;
constexpr std::size_t kAccountingSize = 4096;  // runtime/src/object_store.cpp

// Waits for `events` on fd until `deadline`; false on timeout or when the
// server is stopping (the destructor shuts the socket down, which wakes us).
bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (rc < 0 && errno != EINTR) return false;
    if (rc > 0) return (p.revents & (events | POLLHUP | POLLERR)) != 0;
  }
}

bool read_exact(int fd, unsigned char* p, std::size_t n, Clock::time_point deadline) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<std::size_t>(r);
    } else if (r == 0) {
      return false;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(fd, POLLIN, deadline)) return false;
    } else if (errno != EINTR) {
      return false;
    }
  }
  return true;
}

bool write_exact(int fd, const unsigned char* p, std::size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= static_cast<std::size_t>(w);
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd, POLLOUT, Clock::now() + kStall)) return false;
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else {
      return false;
    }
  }
  return true;
}

bool reply(int fd, objects::Reply code, std::uint64_t len) {
  unsigned char h[objects::kReplyHeader] = {};
  h[0] = static_cast<unsigned char>(code);
  objects::put_u64(h + 8, len);
  return write_exact(fd, h, sizeof h);
}

// Gives a deleted object's bytes back to the host's store accounting, the
// counter libaccrun keeps in "store.accounting" in the same directory.
void release_bytes(int dir_fd, std::uint64_t len) {
  int fd = ::openat(dir_fd, "store.accounting", O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return;  // no rank here ever opened the store: nothing counted
  void* seg = ::mmap(nullptr, kAccountingSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (seg == MAP_FAILED) return;
  std::atomic_ref<std::uint64_t>(*static_cast<std::uint64_t*>(seg)).fetch_sub(len);
  ::munmap(seg, kAccountingSize);
}

std::string peer_of(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  char host[64] = "?";
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
    if (ss.ss_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, host, sizeof host);
    else if (ss.ss_family == AF_INET6)
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, host, sizeof host);
  }
  return host;
}

}  // namespace

Result<std::unique_ptr<ObjectServer>> ObjectServer::start(const std::vector<std::string>& addresses, std::string dir,
                                                          std::string congestion) {
  std::unique_ptr<ObjectServer> s(new ObjectServer(std::move(dir)));
  s->congestion_ = congestion.empty() ? kDefaultTcpCongestion : std::move(congestion);
  s->dir_fd_ = ::open(s->dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (s->dir_fd_ < 0) return system_error("object server: open " + s->dir_);
  std::string errors;
  for (const std::string& addr : addresses) {
    auto fd = wire::listen_tcp(addr, 0);
    if (!fd) {
      errors += (errors.empty() ? "" : "; ") + fd.status().message();
      continue;
    }
    auto port = wire::local_port(*fd);
    if (!port) {
      ::close(*fd);
      continue;
    }
    s->listeners_.push_back(*fd);
    if (!s->addresses_.empty()) s->addresses_ += ",";
    s->addresses_ += (addr.find(':') != std::string::npos ? "[" + addr + "]" : addr) + ":" + std::to_string(*port);
  }
  if (s->listeners_.empty())
    return Status(Code::kSystem, "object server: cannot listen on any of this host's addresses" +
                                     (errors.empty() ? std::string() : ": " + errors));
  if (::pipe2(s->wake_, O_CLOEXEC) != 0) return system_error("object server: pipe");
  s->acceptor_ = std::thread([p = s.get()] { p->accept_loop(); });
  log(LogLevel::kDebug, "object server for %s on %s", s->dir_.c_str(), s->addresses_.c_str());
  return s;
}

ObjectServer::~ObjectServer() {
  stopping_ = true;
  if (wake_[1] >= 0) ::close(wake_[1]);
  if (acceptor_.joinable()) acceptor_.join();
  {
    // A request's fd stays open until it is reaped, so this never touches
    // another file that took its number.
    std::lock_guard<std::mutex> lock(mu_);
    for (Request& r : requests_)
      if (!r.done) ::shutdown(r.fd, SHUT_RDWR);
  }
  reap(true);
  for (int l : listeners_) ::close(l);
  if (wake_[0] >= 0) ::close(wake_[0]);
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

void ObjectServer::reap(bool all) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = requests_.begin(); it != requests_.end();) {
    if (all || it->done) {
      it->thread.join();
      ::close(it->fd);
      it = requests_.erase(it);
    } else {
      ++it;
    }
  }
}

void ObjectServer::accept_loop() {
  std::vector<pollfd> fds;
  for (;;) {
    reap(false);
    std::size_t busy;
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy = requests_.size();
    }
    fds.assign(1, pollfd{wake_[0], POLLIN, 0});
    // At the limit, connections wait in the backlog until a request ends.
    if (busy < kMaxRequests)
      for (int l : listeners_) fds.push_back({l, POLLIN, 0});
    int rc = ::poll(fds.data(), fds.size(), busy < kMaxRequests ? 1000 : 10);
    if (rc < 0 && errno != EINTR) return;
    if (fds[0].revents != 0 || stopping_) return;
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if ((fds[i].revents & POLLIN) == 0) continue;
      auto fd = wire::accept_tcp(fds[i].fd);
      if (!fd || *fd < 0) continue;
      // Refused (not on this host): the host's own; the ranks' groups say so.
      (void)set_tcp_congestion(*fd, congestion_);
      std::lock_guard<std::mutex> lock(mu_);
      Request& r = requests_.emplace_back();
      r.fd = *fd;
      r.thread = std::thread([this, p = &r] { serve(p); });
    }
  }
}

void ObjectServer::serve(Request* req) {
  const int fd = req->fd;
  unsigned char h[objects::kRequestHeader];
  char name[objects::kMaxName + 1] = {};
  auto deadline = Clock::now() + kRequestWait;
  bool ok = read_exact(fd, h, sizeof h, deadline) &&
            std::memcmp(h, objects::kMagic.data(), objects::kMagic.size()) == 0;
  std::size_t name_len = ok ? objects::get_u16(h + 6) : 0;
  ok = ok && name_len <= objects::kMaxName &&
       read_exact(fd, reinterpret_cast<unsigned char*>(name), name_len, deadline) &&
       objects::is_object_file(std::string_view(name, name_len));
  auto op = static_cast<objects::Op>(h[4]);
  if (!ok || (op != objects::Op::kGet && op != objects::Op::kDelete)) {
    log(LogLevel::kWarn, "object server: a connection from %s sent no valid request: closed", peer_of(fd).c_str());
    reply(fd, objects::Reply::kBadRequest, 0);
    req->done = true;
    return;
  }
  int file = ::openat(dir_fd_, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  struct stat st {};
  if (file < 0 || ::fstat(file, &st) != 0 || !S_ISREG(st.st_mode)) {
    reply(fd, file < 0 && errno == ENOENT ? objects::Reply::kNotFound : objects::Reply::kFailed, 0);
    if (file >= 0) ::close(file);
    req->done = true;
    return;
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (op == objects::Op::kDelete) {
    // unlink is the atomic step: of two racing deletes, one frees the bytes.
    if (::unlinkat(dir_fd_, name, 0) != 0) {
      reply(fd, errno == ENOENT ? objects::Reply::kNotFound : objects::Reply::kFailed, 0);
    } else {
      release_bytes(dir_fd_, size);
      reply(fd, objects::Reply::kOk, size);
    }
    ::close(file);
    req->done = true;
    return;
  }
  if (reply(fd, objects::Reply::kOk, size)) {
    off_t off = 0;
    auto last_progress = Clock::now();
    while (static_cast<std::uint64_t>(off) < size && !stopping_) {
      ssize_t n = ::sendfile(fd, file, &off, std::min<std::uint64_t>(kChunk, size - static_cast<std::uint64_t>(off)));
      if (n > 0) {
        last_progress = Clock::now();
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!wait_for(fd, POLLOUT, last_progress + kStall)) break;
      } else if (!(n < 0 && errno == EINTR)) {
        break;  // the reader went away, or the file is shorter: it notices
      }
    }
  }
  ::close(file);
  req->done = true;
}

}  // namespace accrun::launcher
