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
#include <deque>

#include "accrun/accept_pause.hpp"
#include "accrun/log.hpp"
#include "accrun/object_wire.hpp"
#include "accrun/tcp_congestion.hpp"
#include "wire/connection.hpp"

namespace accrun::launcher {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kStall = std::chrono::seconds(30);        // a reader that takes nothing
constexpr std::size_t kChunk = 4 << 20;

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

// The reply header, from the acceptor: a connection's first 16 bytes out
// always fit its socket's buffer, so this never waits.
bool reply(int fd, objects::Reply code, std::uint64_t len) {
  unsigned char h[objects::kReplyHeader] = {};
  h[0] = static_cast<unsigned char>(code);
  objects::put_u64(h + 8, len);
  return ::send(fd, h, sizeof h, MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(sizeof h);
}

// Deletes an object file and gives its bytes back to the host's store
// accounting, the counter libaccrun keeps in "store.accounting" in the same
// directory, under the host's lock as libaccrun takes it (object_wire.hpp),
// so a count of the host's files never sees one without the other.  A rank
// stopped while it holds the lock holds this server up kAccountingLockWaitMs
// at most: past that it unlinks without it and, instead of subtracting,
// asks libaccrun's next put to count the host's bytes again.  errno as
// unlinkat's on failure.
bool delete_object(int dir_fd, const std::string& name, std::uint64_t len) {
  int fd = ::openat(dir_fd, "store.accounting", O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ::unlinkat(dir_fd, name.c_str(), 0) == 0;  // no rank here opened the store
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(objects::kAccountingLockAt);
  fl.l_len = 1;
  bool locked = false;
  for (int i = 0; i < objects::kAccountingLockWaitMs * 4 && !(locked = ::fcntl(fd, F_OFD_SETLK, &fl) == 0); ++i)
    ::usleep(250);
  const bool ok = ::unlinkat(dir_fd, name.c_str(), 0) == 0;
  const int err = errno;
  if (ok) {
    void* seg = ::mmap(nullptr, objects::kAccountingAgentBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (seg != MAP_FAILED) {
      auto word = [&](std::size_t at) {
        return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(static_cast<char*>(seg) + at));
      };
      if (locked) word(0).fetch_sub(len);
      else word(objects::kAccountingRecountAt).store(1);
      ::munmap(seg, objects::kAccountingAgentBytes);
    }
  }
  ::close(fd);  // and the lock
  errno = err;
  return ok;
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

std::size_t ObjectServer::reap(bool all) {
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
  return requests_.size();
}

struct ObjectServer::Reading {
  int fd = -1;
  Clock::time_point since;
  std::size_t got = 0;
  unsigned char buf[objects::kRequestHeader + objects::kMaxName] = {};

  // Reads what has arrived: 1 once the request is whole, 0 while more is to
  // come, -1 for a connection that closed or sent something else.
  int advance() {
    for (;;) {
      const std::size_t want = got < objects::kRequestHeader ? objects::kRequestHeader
                                                              : objects::kRequestHeader + objects::get_u16(buf + 6);
      if (got >= objects::kRequestHeader &&
          (std::memcmp(buf, objects::kMagic.data(), objects::kMagic.size()) != 0 ||
           objects::get_u16(buf + 6) > objects::kMaxName))
        return -1;
      if (got >= objects::kRequestHeader && got == want) return 1;
      const ssize_t n = ::recv(fd, buf + got, want - got, MSG_DONTWAIT);
      if (n > 0) {
        got += static_cast<std::size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return 0;
      } else if (!(n < 0 && errno == EINTR)) {
        return -1;
      }
    }
  }
};

void ObjectServer::refused(int fd, const char* why) {
  const std::string line = refusals_.next("a connection from " + peer_of(fd) + " " + why + ": closed");
  if (!line.empty()) log(LogLevel::kWarn, "object server: %s", line.c_str());
}

void ObjectServer::accept_loop() {
  std::vector<pollfd> fds;
  std::vector<Reading> reading;       // oldest first
  struct Queued {
    int fd;
    int file;
    std::uint64_t size;
  };
  std::deque<Queued> ready;  // answered gets whose bytes wait for a thread, in order
  AcceptPause accept_pause;  // listeners left out of poll a while
  const auto wait = std::chrono::milliseconds(kRequestWaitMs);
  const char* const kInvalid = "sent no valid request";
  auto drop = [&](std::size_t i, const char* why) {
    refused(reading[i].fd, why);
    if (why == kInvalid) (void)reply(reading[i].fd, objects::Reply::kBadRequest, 0);
    ::close(reading[i].fd);
    reading.erase(reading.begin() + static_cast<long>(i));
  };
  // A connection's request is whole: it is answered at once (a delete
  // done, a get's size sent), so a rank hears from a busy agent within its
  // wait; a get's bytes then wait for a thread.
  auto take = [&](std::size_t i) {
    Reading& r = reading[i];
    const std::size_t len = objects::get_u16(r.buf + 6);
    const std::string name(reinterpret_cast<const char*>(r.buf + objects::kRequestHeader), len);
    const auto op = static_cast<objects::Op>(r.buf[4]);
    if (!objects::is_object_file(name) || (op != objects::Op::kGet && op != objects::Op::kDelete)) {
      drop(i, kInvalid);
      return;
    }
    const int fd = r.fd;
    reading.erase(reading.begin() + static_cast<long>(i));
    int file = ::openat(dir_fd_, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st {};
    if (file < 0 || ::fstat(file, &st) != 0 || !S_ISREG(st.st_mode)) {
      reply(fd, file < 0 && errno == ENOENT ? objects::Reply::kNotFound : objects::Reply::kFailed, 0);
      if (file >= 0) ::close(file);
      ::close(fd);
      return;
    }
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (op == objects::Op::kDelete) {
      // unlink is the atomic step: of two racing deletes, one frees the bytes.
      if (!delete_object(dir_fd_, name, size)) {
        reply(fd, errno == ENOENT ? objects::Reply::kNotFound : objects::Reply::kFailed, 0);
      } else {
        reply(fd, objects::Reply::kOk, size);
      }
      ::close(file);
      ::close(fd);
      return;
    }
    if (!reply(fd, objects::Reply::kOk, size)) {
      ::close(file);
      ::close(fd);
      return;
    }
    ready.push_back(Queued{fd, file, size});
  };
  for (;;) {
    // Requests whose turn has come get a thread.
    std::size_t busy = reap(false);
    for (; busy < kMaxRequests && !ready.empty(); ++busy) {
      std::lock_guard<std::mutex> lock(mu_);
      Request& r = requests_.emplace_back();
      r.fd = ready.front().fd;
      r.file = ready.front().file;
      r.size = ready.front().size;
      ready.pop_front();
      r.thread = std::thread([this, p = &r] { serve(p); });
    }
    // Connections that took too long for their request go, once what they
    // sent while the acceptor was busy (a delete waiting on the host's
    // lock) has been read.
    const auto now = Clock::now();
    while (!reading.empty() && now - reading.front().since >= wait) {
      const int got = reading.front().advance();
      if (got > 0)
        take(0);
      else
        drop(0, got < 0 ? kInvalid : "sent no whole request in time");
    }
    fds.assign(1, pollfd{wake_[0], POLLIN, 0});
    if (accept_pause.listening(now))
      for (int l : listeners_) fds.push_back({l, POLLIN, 0});
    const std::size_t first_reading = fds.size();
    for (const Reading& r : reading) fds.push_back({r.fd, POLLIN, 0});
    int timeout = 1000;
    if (!reading.empty())
      timeout = static_cast<int>(std::clamp<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(reading.front().since + wait - now).count() + 1, 1,
          1000));
    if (!ready.empty()) timeout = std::min(timeout, 10);  // a transfer ending frees a thread
    timeout = accept_pause.bound(timeout, now);
    int rc = ::poll(fds.data(), fds.size(), timeout);
    const bool failed = rc < 0 && errno != EINTR;
    if (failed)
      log(LogLevel::kError, "object server: poll: %s; it serves no more", std::strerror(errno));
    if (failed || fds[0].revents != 0 || stopping_) {
      for (const Reading& r : reading) ::close(r.fd);
      for (const Queued& q : ready) {
        ::close(q.fd);
        ::close(q.file);
      }
      return;
    }
    if (rc <= 0) continue;
    // The requests arriving first, from the newest connection back, so a
    // connection that has sent its request is never the one let go below.
    for (std::size_t i = fds.size(); i-- > first_reading;) {
      if (fds[i].revents == 0) continue;
      const std::size_t k = i - first_reading;
      const int got = reading[k].advance();
      if (got > 0) take(k);
      else if (got < 0) drop(k, kInvalid);
    }
    for (std::size_t i = 1; i < first_reading; ++i) {
      if ((fds[i].revents & POLLIN) == 0) continue;
      for (int n = 0; n < wire::kAcceptsPerRound; ++n) {
        auto fd = wire::accept_tcp(fds[i].fd);
        if (!fd) {
          // Out of descriptors, or another failure that leaves the
          // listener readable: it is left alone a while, not spun on.
          accept_pause.pause(errno, "object server");
          break;
        }
        if (*fd < 0) break;
        // Refused (not on this host): the host's own; the ranks' groups say so.
        (void)set_tcp_congestion(*fd, congestion_);
        reading.push_back(Reading{*fd, Clock::now()});
        const int got = reading.back().advance();  // a rank's request is usually here already
        if (got > 0) take(reading.size() - 1);
        else if (got < 0) drop(reading.size() - 1, kInvalid);
        if (reading.size() > kMaxReading) {
          // (A rank sends its request with its connect.)
          auto gone = wire::stranger_to_drop(reading.begin(), reading.end(), [](const Reading& r) {
            return r.got == 0 && wire::silent(r.fd);
          });
          drop(static_cast<std::size_t>(gone - reading.begin()), "sent no whole request while many others waited");
        }
      }
    }
  }
}

void ObjectServer::serve(Request* req) {
  const int fd = req->fd;
  off_t off = 0;
  auto last_progress = Clock::now();
  while (static_cast<std::uint64_t>(off) < req->size && !stopping_) {
    ssize_t n = ::sendfile(fd, req->file, &off, std::min<std::uint64_t>(kChunk, req->size - static_cast<std::uint64_t>(off)));
    if (n > 0) {
      last_progress = Clock::now();
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(fd, POLLOUT, last_progress + kStall)) break;
    } else if (!(n < 0 && errno == EINTR)) {
      break;  // the reader went away, or the file is shorter: it notices
    }
  }
  ::close(req->file);
  req->done = true;
}

}  // namespace accrun::launcher
