// tcp_stream — what one TCP stream moves between two hosts, the anchor for
// the store's large messages across hosts (benchmarks/README.md).
//
//   tcp_stream serve PORT [MIB]      accept one connection, read until EOF
//                                    into a buffer of MIB MiB (default 4),
//                                    from its start again when full, print
//                                    the bytes and GB/s
//   tcp_stream send HOST PORT MIB [CC [FROM]]
//                                    connect, write MIB MiB in 4 MiB writes,
//                                    print GB/s (from connect to the
//                                    receiver's close); CC: the sender's
//                                    congestion control (default: the
//                                    host's, also given as "system"; "reno"
//                                    is the store's default,
//                                    accrun/tcp_congestion.hpp); FROM: the
//                                    MiB the writes cycle through (default
//                                    4), as large as a message's buffer
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "accrun/tcp_congestion.hpp"

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int serve(int port, long mib) {
  const int l = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(l, 1) != 0) {
    std::perror("tcp_stream: listen");
    return 1;
  }
  const int fd = accept(l, nullptr, nullptr);
  std::vector<char> buf(static_cast<size_t>(mib) << 20, 1);  // touched: no page faults while timed
  long long total = 0;
  size_t at = 0;
  const double t0 = now();
  for (ssize_t n; (n = read(fd, buf.data() + at, std::min<size_t>(buf.size() - at, 4 << 20))) > 0;) {
    total += n;
    at = (at + static_cast<size_t>(n)) % buf.size();
  }
  const double t = now() - t0;
  std::printf("tcp_stream: received %lld bytes in %.3f s: %.3f GB/s\n", total, t, total / t / 1e9);
  close(fd);
  close(l);
  return 0;
}

int send_to(const char* host, int port, long mib, const std::string& cc, long from_mib) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host, std::to_string(port).c_str(), &hints, &res) != 0) {
    std::fprintf(stderr, "tcp_stream: cannot resolve %s\n", host);
    return 1;
  }
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (const int e = accrun::set_tcp_congestion(fd, cc); e != 0) {
    std::fprintf(stderr, "tcp_stream: congestion control %s: %s\n", cc.c_str(), std::strerror(e));
    return 1;
  }
  int rc = -1;
  for (int i = 0; i < 100 && rc != 0; ++i) {  // the server may still be starting
    rc = connect(fd, res->ai_addr, res->ai_addrlen);
    if (rc != 0) usleep(50000);
  }
  freeaddrinfo(res);
  if (rc != 0) {
    std::perror("tcp_stream: connect");
    return 1;
  }
  std::vector<char> buf(static_cast<size_t>(from_mib) << 20, 'x');  // touched: no page faults while timed
  constexpr size_t kWrite = 4 << 20;
  const double t0 = now();
  for (long i = 0; i < mib / 4; ++i) {
    const char* at = buf.data() + (static_cast<size_t>(i) * kWrite) % buf.size();
    for (size_t off = 0; off < kWrite;) {
      const ssize_t n = write(fd, at + off, kWrite - off);
      if (n <= 0) {
        std::perror("tcp_stream: write");
        return 1;
      }
      off += static_cast<size_t>(n);
    }
  }
  shutdown(fd, SHUT_WR);
  char c;
  while (read(fd, &c, 1) > 0) {
  }
  const double t = now() - t0;
  char used[16] = "?";
  socklen_t ul = sizeof used;
  getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, used, &ul);
  std::printf("tcp_stream: sent %ld MiB in %.3f s: %.3f GB/s (congestion control %.*s)\n", mib, t,
              mib * 1048576.0 / t / 1e9, static_cast<int>(strnlen(used, sizeof used)), used);
  close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if ((argc == 3 || argc == 4) && std::strcmp(argv[1], "serve") == 0)
    return serve(std::atoi(argv[2]), argc == 4 ? std::max(1L, std::atol(argv[3])) : 4);
  if (argc >= 5 && argc <= 7 && std::strcmp(argv[1], "send") == 0) {
    const long from = argc == 7 ? std::atol(argv[6]) : 4;
    if (from < 4 || from % 4 != 0) {
      std::fprintf(stderr, "tcp_stream: FROM must be a multiple of 4 MiB\n");
      return 2;
    }
    return send_to(argv[2], std::atoi(argv[3]), std::atol(argv[4]), argc >= 6 ? argv[5] : "", from);
  }
  std::fprintf(stderr, "usage: tcp_stream serve PORT [MIB] | tcp_stream send HOST PORT MIB [CONGESTION_CONTROL [FROM_MIB]]\n");
  return 2;
}
