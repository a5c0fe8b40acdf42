// accept_pause.hpp — a listener whose accept() fails for want of
// descriptors or memory keeps the connection in its backlog and stays
// readable: polled again at once, its owner would spin.  The owner leaves
// it out of poll for kPauseMs instead, says why once, and takes the
// connection when it can (the store's TCP transport, the agents' object
// servers: accrun(7)).
#pragma once

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "accrun/log.hpp"

namespace accrun {

class AcceptPause {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kPauseMs = 100;

  // Whether accept() failing with `err` leaves the connection waiting (out
  // of descriptors or memory) rather than gone.
  static bool out_of_resources(int err) {
    return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
  }

  // accept() failed with `err`: the listener is left alone kPauseMs; the
  // first time, `who` says so.
  void pause(int err, const std::string& who) {
    until_ = Clock::now() + std::chrono::milliseconds(kPauseMs);
    if (!told_)
      log(LogLevel::kWarn,
          "%s: cannot accept a connection (%s); it waits until the process has a descriptor to "
          "spare "
          "(raise ulimit -n?)",
          who.c_str(), std::strerror(err));
    told_ = true;
  }
  // Whether the listener is polled now.
  bool listening(Clock::time_point now = Clock::now()) const { return now >= until_; }
  // `timeout_ms`, or less so that a poll ends with the pause.
  int bound(int timeout_ms, Clock::time_point now = Clock::now()) const {
    if (now >= until_) return timeout_ms;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until_ - now).count() + 1;
    return timeout_ms < 0 || left < timeout_ms ? static_cast<int>(left) : timeout_ms;
  }

 private:
  Clock::time_point until_{};
  bool told_ = false;
};

}  // namespace accrun
