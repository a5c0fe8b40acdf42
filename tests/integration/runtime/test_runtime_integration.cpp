// libaccrun in real processes under a real `accrun` (PMIx server, name
// directory, failure events): each test launches runtime_probe with a
// scenario and checks every rank reported OK.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

struct Run {
  int status = -1;
  std::string output;
};

// Runs `accrun <args>` with a hard limit, merging stdout and stderr.
Run accrun(const std::string& args, int limit_s = 60) {
  std::string cmd = "timeout -k 5 " + std::to_string(limit_s) + " " ACCRUN_BINARY_DIR "/launcher/accrun " + args +
                    " 2>&1";
  Run r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  while (std::fgets(buf.data(), buf.size(), p) != nullptr) r.output += buf.data();
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

int count(const std::string& hay, const std::string& needle) {
  int n = 0;
  for (auto pos = hay.find(needle); pos != std::string::npos; pos = hay.find(needle, pos + 1)) ++n;
  return n;
}

const std::string kProbe = RUNTIME_PROBE;

TEST(RuntimeIntegration, JobContextMatchesTheEnvironment) {
  auto r = accrun("-n 3 --num-gpus 6 --gpus-per-rank 2 " + kProbe + " context");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count(r.output, "OK context"), 3) << r.output;
  auto plain = accrun("-n 2 " + kProbe + " context");
  EXPECT_EQ(plain.status, 0) << plain.output;
  EXPECT_EQ(count(plain.output, "OK context"), 2) << plain.output;
}

TEST(RuntimeIntegration, GroupsOfEverySizeSubsetsRecreatedAndConcurrent) {
  auto r = accrun("-n 4 " + kProbe + " groups");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count(r.output, "OK groups"), 4) << r.output;
}

TEST(RuntimeIntegration, EightRanksOversubscribed) {
  auto r = accrun("-n 8 " + kProbe + " groups", 120);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count(r.output, "OK groups"), 8) << r.output;
}

TEST(RuntimeIntegration, ObjectStoreAcrossRanks) {
  auto r = accrun("-n 3 " + kProbe + " store");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count(r.output, "OK store"), 3) << r.output;
}

TEST(RuntimeIntegration, SendThenReceiveBothWays) {
  auto r = accrun("-n 2 " + kProbe + " sendrecv");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count(r.output, "OK sendrecv"), 2) << r.output;
}

TEST(RuntimeIntegration, PeerDeathIsARemoteErrorNamingThePeer) {
  auto r = accrun("-n 3 --on-failure continue " + kProbe + " death");
  EXPECT_EQ(r.status, 3) << r.output;  // the first failing rank's status
  EXPECT_EQ(count(r.output, "OK death"), 2) << r.output;
  EXPECT_EQ(count(r.output, "FAIL"), 0) << r.output;
}

TEST(RuntimeIntegration, WrongUseIsAnErrorNotAHang) {
  auto r = accrun("-n 2 -x ACCRUN_GROUP_INIT_TIMEOUT=1 " + kProbe + " badargs", 30);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count(r.output, "OK badargs"), 2) << r.output;
}

// Each run hung in 4 of 5 tries (until --timeout) before the agent gave
// its answers back on the PMIx library's own thread.
TEST(RuntimeIntegration, ManyThreadsOfOneRankGetEveryAnswer) {
  for (int run = 0; run < 3; ++run) {
    auto r = accrun("-n 2 --timeout 40 " + kProbe + " threads", 60);
    EXPECT_EQ(r.status, 0) << "run " << run << "\n" << r.output;
    EXPECT_EQ(count(r.output, "OK threads"), 2) << r.output;
  }
}

TEST(RuntimeIntegration, AChildForkedAfterInitLeavesItsParentWorking) {
  auto r = accrun("-n 2 " + kProbe + " forked", 30);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count(r.output, "OK forked"), 2) << r.output;
}

}  // namespace
