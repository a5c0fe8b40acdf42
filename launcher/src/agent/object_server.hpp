// object_server.hpp — a node agent serves its job's object files to ranks on
// other hosts (accrun(7) THE OBJECT STORE; the protocol is
// accrun/object_wire.hpp).  A get streams the file from tmpfs with
// sendfile, straight from this host to the asking rank: objects never pass
// through the job controller.  A delete unlinks the file and gives its bytes
// back to the host's store accounting.
//
// The server runs on its own thread (one more per request in flight, at most
// kMaxRequests), so a 256 MiB transfer never holds up the agent's event loop.
// Only files named like objects, directly in the job's directory, are served;
// their 128-bit random names are the capability.
//
// Anyone who reaches the port may connect, so connections cost the server
// little until they have sent a whole request: the acceptor reads every
// request itself, without a thread, and closes a connection that has not
// sent one within kRequestWaitMs, or the oldest such connection when more
// than kMaxReading wait.  It answers each whole request at once (a delete
// done, a get's size sent), so a rank hears from a busy agent within its 5 s;
// a get's bytes then wait for a free thread, in order.
// A flood of idle connections therefore never keeps a rank's get waiting in
// the kernel's backlog (accrun(7) SECURITY).
#pragma once

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "accrun/status.hpp"
#include "wire/strangers.hpp"

namespace accrun::launcher {

class ObjectServer {
 public:
  static constexpr int kMaxRequests = 64;          // transfers at once
  static constexpr std::size_t kMaxReading = 512;  // connections yet to send a whole request
  static constexpr int kRequestWaitMs = 2000;      // for a connection's request

  // Listens on each of `addresses` (numeric IPv4/IPv6, port chosen by the
  // kernel) and serves the object files in `dir`.  Addresses that cannot be
  // bound are skipped; none bound is Code::kSystem.  `congestion`: the TCP
  // congestion control objects leave with, as the ranks' store transport
  // ("" = accrun's default, accrun/tcp_congestion.hpp).
  static Result<std::unique_ptr<ObjectServer>> start(const std::vector<std::string>& addresses, std::string dir,
                                                     std::string congestion = "");
  // Stops accepting, cuts the transfers in flight and joins every thread.
  ~ObjectServer();
  ObjectServer(const ObjectServer&) = delete;
  ObjectServer& operator=(const ObjectServer&) = delete;

  // "address:port[,address:port...]": what ranks find in ACCRUN_OBJECT_SERVER.
  const std::string& addresses() const { return addresses_; }

 private:
  struct Request {  // a get's bytes going out
    std::thread thread;
    int fd = -1;
    int file = -1;  // the object's file, closed by serve()
    std::uint64_t size = 0;
    std::atomic<bool> done{false};
  };
  // A connection whose request is still arriving (the acceptor's own).
  struct Reading;
  explicit ObjectServer(std::string dir) : dir_(std::move(dir)) {}
  void accept_loop();
  void serve(Request* req);
  std::size_t reap(bool all);  // returns the requests still in flight
  void refused(int fd, const char* why);

  std::string dir_;
  std::string congestion_;  // of every accepted connection
  int dir_fd_ = -1;
  std::vector<int> listeners_;
  std::string addresses_;
  int wake_[2] = {-1, -1};  // closing wake_[1] stops the accept loop
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mu_;             // requests_
  std::list<Request> requests_;
  wire::RefusalLog refusals_;  // acceptor thread only
};

}  // namespace accrun::launcher
