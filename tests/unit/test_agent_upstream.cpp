// AgentUpstream: what the controller sent together with the launch (read
// by the agent's own loop in the same batch as kLaunch) reaches the job's
// daemon once its ranks have started, and what the daemon did not take
// goes back to the agent's loop.
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "agent/upstream.hpp"
#include "controller/protocol.hpp"
#include "wire/codec.hpp"

namespace accrun::launcher {
namespace {

struct RecordingDaemon final : DaemonControl {
  std::vector<int> signals;
  std::string stdin_bytes;
  bool stdin_ended = false;
  void terminate(int sig) override { signals.push_back(sig); }
  void output_closed(int, int) override {}
  void stdin_data(std::string data) override { stdin_bytes += data; }
  void stdin_end() override { stdin_ended = true; }
  void pause_output(bool) override {}
  void modex_request(int, std::function<void(int, std::string)>) override {}
  void peer_failed(int, int, const std::string&, const std::string&, const std::string&) override {}
  void spawn_launch(const SpawnLaunch&, std::function<void(int, std::string)>) override {}
  void signal_procs(int, bool, const std::vector<int>&) override {}
};

wire::Frame signal_frame(int sig) {
  wire::Writer w;
  w.i32(sig);
  return {msg::kSignal, w.data()};
}

wire::Frame stdin_frame(const std::string& data, bool end) {
  wire::Writer w;
  w.boolean(end);
  w.bytes(data.data(), data.size());
  return {msg::kStdin, w.data()};
}

struct Pair {
  int fd[2] = {-1, -1};
  Pair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd), 0); }
  ~Pair() {
    for (int f : fd)
      if (f >= 0) close(f);
  }
};

TEST(AgentUpstream, FramesReadWithTheLaunchReachTheDaemonOnceItsRanksStarted) {
  Pair p;
  AgentUpstream up(p.fd[0], 0);
  up.defer({signal_frame(SIGTERM), stdin_frame("abc", true)});
  RecordingDaemon d;
  ASSERT_TRUE(up.catch_up(d));
  EXPECT_EQ(d.signals, std::vector<int>{SIGTERM});
  EXPECT_EQ(d.stdin_bytes, "abc");
  EXPECT_TRUE(d.stdin_ended);
  // Handled once: nothing is left for the agent's loop, and a second
  // catch-up does nothing.
  EXPECT_TRUE(up.take_deferred().empty());
  ASSERT_TRUE(up.catch_up(d));
  EXPECT_EQ(d.signals.size(), 1u);
}

TEST(AgentUpstream, DeferredFramesComeFirstWhenTheSocketIsReadable) {
  Pair p;
  AgentUpstream up(p.fd[0], 0);
  up.defer({stdin_frame("first ", false)});
  wire::Frame later = stdin_frame("second", true);
  std::string bytes = wire::encode_frame(later.type, later.payload);
  ASSERT_EQ(write(p.fd[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  RecordingDaemon d;
  ASSERT_TRUE(up.on_readable(d));
  EXPECT_EQ(d.stdin_bytes, "first second");
  EXPECT_TRUE(d.stdin_ended);
}

TEST(AgentUpstream, WhatTheDaemonNeverTookGoesBackToTheAgent) {
  Pair p;
  AgentUpstream up(p.fd[0], 0);
  wire::Frame shutdown{msg::kShutdown, ""};
  up.defer({signal_frame(SIGINT), shutdown});
  std::vector<wire::Frame> back = up.take_deferred();
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].type, msg::kSignal);
  EXPECT_EQ(back[1].type, msg::kShutdown);
  // A kShutdown among them ends the daemon's part like one read later.
  up.defer({shutdown});
  RecordingDaemon d;
  EXPECT_FALSE(up.catch_up(d));
}

}  // namespace
}  // namespace accrun::launcher
