// AgentUpstream: what the controller sent together with the launch (read
// by the agent's own loop in the same batch as kLaunch) reaches the job's
// daemon once its ranks have started, and what the daemon did not take
// goes back to the agent's loop.  And a host lost from the launch tree
// (kFencesFail) fails the whole-job fence rounds waiting here, but the
// last one the controller completed.
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <functional>
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

wire::Frame fence_done_frame(const std::string& sig, bool ok, const std::string& data) {
  wire::Writer w;
  w.str(sig);
  w.boolean(ok);
  w.bytes(data.data(), data.size());
  return {msg::kFenceDone, w.data()};
}

struct Answers {
  std::vector<std::pair<bool, std::string>> got;
  std::function<void(bool, std::string)> next() {
    return [this](bool ok, std::string data) { got.emplace_back(ok, std::move(data)); };
  }
};

TEST(AgentUpstream, AHostLostFromTheTreeFailsTheWholeJobRoundsWaitingHereButTheLastCompleted) {
  Pair p;
  AgentUpstream up(p.fd[0], 3);
  RecordingDaemon d;
  Answers star, pmi, some;
  // Round 1 of "*" is answered; round 2 waits (the controller completed
  // it, but the parent agent that was to pass it down is lost); "pmi:*"
  // round 1 waits (never completed); a fence of some ranks waits at the
  // controller, which fences it directly.
  up.fence("*", "a", star.next());
  up.defer({fence_done_frame("*", true, "r1")});
  ASSERT_TRUE(up.catch_up(d));
  up.fence("*", "b", star.next());
  up.fence("pmi:*", "c", pmi.next());
  up.fence("0,1", "d", some.next());
  wire::Writer w;
  w.u32(1);
  w.str("*");
  w.u64(2);
  const wire::Frame last = fence_done_frame("*", true, "r2");
  w.bytes(last.payload.data(), last.payload.size());
  w.str("host h2 was lost");
  up.defer({wire::Frame{msg::kFencesFail, w.data()}});
  ASSERT_TRUE(up.catch_up(d));
  ASSERT_EQ(star.got.size(), 2u);
  EXPECT_EQ(star.got[1], std::make_pair(true, std::string("r2")));
  // A failed round's data is why it failed, for the ranks' messages.
  EXPECT_EQ(pmi.got, (std::vector<std::pair<bool, std::string>>{{false, "host h2 was lost"}}));
  EXPECT_TRUE(some.got.empty());
  // Later whole-job rounds fail at once; others still go to the controller.
  up.fence("*", "e", star.next());
  ASSERT_EQ(star.got.size(), 3u);
  EXPECT_EQ(star.got[2], std::make_pair(false, std::string("host h2 was lost")));
  up.defer({fence_done_frame("0,1", true, "s1")});
  ASSERT_TRUE(up.catch_up(d));
  EXPECT_EQ(some.got, (std::vector<std::pair<bool, std::string>>{{true, "s1"}}));
  // What went up: the fences before the loss, then none of "*".
  char buf[4096];
  ssize_t n = read(p.fd[1], buf, sizeof buf);
  ASSERT_GT(n, 0);
  wire::FrameDecoder dec;
  std::vector<wire::Frame> sent;
  ASSERT_TRUE(dec.feed(buf, static_cast<size_t>(n), sent));
  std::vector<std::string> sigs;
  for (auto& f : sent)
    if (f.type == msg::kFence) sigs.push_back(msg::decode_fence(f.payload)->signature);
  EXPECT_EQ(sigs, (std::vector<std::string>{"*", "*", "pmi:*", "0,1"}));
}

// Once the job's servers are gone (its ranks ended), answers that come
// later (an agent of the tree still reads its links) reach nobody, and the
// rounds stay counted: the answer is taken, not a protocol error.
TEST(AgentUpstream, AnswersAfterTheServersAreForgottenReachNobody) {
  Pair p;
  AgentUpstream up(p.fd[0], 3);
  RecordingDaemon d;
  Answers star;
  up.fence("*", "a", star.next());
  up.forget_waiters();
  up.defer({fence_done_frame("*", true, "r1")});
  EXPECT_TRUE(up.catch_up(d));
  EXPECT_TRUE(star.got.empty());
  up.fence("*", "b", star.next());
  up.defer({fence_done_frame("*", true, "r2")});
  EXPECT_TRUE(up.catch_up(d));
  EXPECT_EQ(star.got, (std::vector<std::pair<bool, std::string>>{{true, "r2"}}));
}

}  // namespace
}  // namespace accrun::launcher
