#include "object_fetch.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "accrun/object_wire.hpp"

namespace accrun::runtime {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kConnectWait = std::chrono::seconds(5);

// One open connection, closed on every path.
struct Socket {
  int fd = -1;
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

int wait_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1000));
}

// Connects to "address:port" or "[v6]:port" within kConnectWait.
Result<int> connect_to(const std::string& addr) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos) return invalid_argument("malformed object server address '" + addr + "'");
  std::string host = addr.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  int port = std::atoi(addr.c_str() + colon + 1);
  sockaddr_storage ss{};
  socklen_t sl = 0;
  if (auto* a4 = reinterpret_cast<sockaddr_in*>(&ss); inet_pton(AF_INET, host.c_str(), &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons(static_cast<uint16_t>(port));
    sl = sizeof *a4;
  } else if (auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss); inet_pton(AF_INET6, host.c_str(), &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<uint16_t>(port));
    sl = sizeof *a6;
  } else {
    return invalid_argument("malformed object server address '" + addr + "'");
  }
  int fd = ::socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return system_error("socket");
  Socket s{fd};
  if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), sl) != 0 && errno != EINPROGRESS)
    return system_error("connect " + addr);
  auto deadline = Clock::now() + kConnectWait;
  for (;;) {
    pollfd p{fd, POLLOUT, 0};
    int rc = ::poll(&p, 1, wait_ms(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return system_error("poll");
    if (rc > 0) break;
    if (Clock::now() >= deadline) return timeout_error("connect " + addr + ": no answer within 5 s");
  }
  int err = 0;
  socklen_t el = sizeof err;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
  if (err != 0) return system_error("connect " + addr, err);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  s.fd = -1;
  return fd;
}

// Moves n bytes; false with *why set when the peer closed, failed or made
// no progress for `stall`.
bool transfer(int fd, bool out, unsigned char* p, std::uint64_t n, std::string* why,
              std::chrono::seconds stall) {
  auto last = Clock::now();
  while (n > 0) {
    std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(n, 1 << 30));
    ssize_t r = out ? ::send(fd, p, chunk, MSG_NOSIGNAL) : ::recv(fd, p, chunk, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<std::uint64_t>(r);
      last = Clock::now();
      continue;
    }
    if (r == 0) {
      *why = "the agent closed the connection";
      return false;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      *why = std::strerror(errno);
      return false;
    }
    pollfd pf{fd, static_cast<short>(out ? POLLOUT : POLLIN), 0};
    int rc = ::poll(&pf, 1, wait_ms(last + stall));
    if (rc == 0 && Clock::now() >= last + stall) {
      *why = (stall == kConnectWait ? "no answer within " : "nothing moved for ") +
             std::to_string(stall.count()) + " s";
      return false;
    }
  }
  return true;
}

// Sends one request and reads its reply header; on kOk returns the size
// the agent announced, with the connection in *fd for the bytes.
Result<std::uint64_t> request(const std::string& server, const std::string& host, objects::Op op,
                              const std::string& file, int* fd_out) {
  if (!objects::is_object_file(file)) return Status(Code::kSystem, "malformed object file name '" + file + "'");
  std::string errors;
  size_t pos = 0;
  while (pos <= server.size()) {
    size_t comma = std::min(server.find(',', pos), server.size());
    std::string addr = server.substr(pos, comma - pos);
    pos = comma + 1;
    if (addr.empty()) continue;
    auto fd = connect_to(addr);
    if (!fd) {
      errors += (errors.empty() ? "" : "; ") + fd.status().message();
      continue;
    }
    Socket s{*fd};
    std::vector<unsigned char> req(objects::kRequestHeader + file.size());
    std::memcpy(req.data(), objects::kMagic.data(), objects::kMagic.size());
    req[4] = static_cast<unsigned char>(op);
    objects::put_u16(req.data() + 6, static_cast<std::uint16_t>(file.size()));
    std::memcpy(req.data() + objects::kRequestHeader, file.data(), file.size());
    unsigned char h[objects::kReplyHeader];
    std::string why;
    // The agent answers a request at once (its bytes may then wait for a
    // free thread): one that does not within 5 s is stopped or lost.
    if (!transfer(s.fd, true, req.data(), req.size(), &why, kConnectWait) ||
        !transfer(s.fd, false, h, sizeof h, &why, kConnectWait))
      return remote_error("host " + host + "'s agent (" + addr + "): " + why);
    switch (static_cast<objects::Reply>(h[0])) {
      case objects::Reply::kOk:
        *fd_out = s.fd;
        s.fd = -1;
        return objects::get_u64(h + 8);
      case objects::Reply::kNotFound: return not_found("deleted");
      case objects::Reply::kBadRequest: return Status(Code::kSystem, "host " + host + "'s agent refused the request");
      default: return remote_error("host " + host + "'s agent could not open the object's file");
    }
  }
  return remote_error("cannot reach host " + host + "'s agent at " + server + ": " + errors);
}

// The agent answers a get at once, but its bytes may then wait their turn
// behind the transfers the agent is serving (ObjectServer::kMaxRequests at
// once), however long those take: the wait for the first byte is not bounded
// by the stall.  The connection's keepalive finds a host that is gone (in
// about 10 s), an agent that ends closes the connection, and an agent that
// stops answering accrun is found by accrun, which ends the job.
void await_turn(int fd) {
  const int on = 1, idle = 5, every = 1, count = 5;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &every, sizeof every);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, -1) < 0 && errno == EINTR) {
  }
  // Readable, closed or failed: the transfer that follows says which.
}

}  // namespace

Status fetch_remote_object(const std::string& server, const std::string& host,
                           const std::string& file, void* buf, std::uint64_t len,
                           std::chrono::seconds stall) {
  int fd = -1;
  auto size = request(server, host, objects::Op::kGet, file, &fd);
  if (!size) return size.status();
  Socket s{fd};
  if (*size != len)
    return remote_error("host " + host + "'s agent holds " + std::to_string(*size) + " bytes, not the " +
                        std::to_string(len) + " the metadata says");
  std::string why;
  if (len > 0) await_turn(s.fd);
  if (!transfer(s.fd, false, static_cast<unsigned char*>(buf), len, &why, stall))
    return remote_error("reading from host " + host + "'s agent: " + why);
  return Status::ok();
}

Status delete_remote_object(const std::string& server, const std::string& host, const std::string& file) {
  int fd = -1;
  auto size = request(server, host, objects::Op::kDelete, file, &fd);
  if (!size) return size.status();
  ::close(fd);
  return Status::ok();
}

}  // namespace accrun::runtime
