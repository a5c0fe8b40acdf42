// MPICH programs under accrun through the PMI-1 wire protocol (accrun(7),
// "MPI LIBRARIES"): results, the host's ranks in split_type SHARED, the
// universe size, MPI_Abort's code as accrun's exit status, and wrong use of
// the PMI socket ending the job with a message instead of a hang.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <regex>
#include <string>

namespace {

struct Outcome {
  int status = -1;
  std::string output;  // stdout and stderr
  double seconds = 0;
};

// accrun ARGS, bounded by `timeout` (exit 124 means it hung).
Outcome accrun(const std::string& args, int limit_s = 60) {
  std::string cmd = "timeout -k 5 " + std::to_string(limit_s) + " " ACCRUN_EXE " " + args + " 2>&1";
  auto t0 = std::chrono::steady_clock::now();
  Outcome r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

int count(const std::string& text, const std::string& re) {
  std::regex r(re);
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), r), std::sregex_iterator()));
}

#define NEED_MPICH()                                                                            \
  do {                                                                                          \
    if (std::string(MPICH_PROGRAM_EXE).empty())                                                 \
      GTEST_SKIP() << "mpicc.mpich is absent (Debian's libmpich-dev; scripts/install-deps.sh)"; \
  } while (0)

TEST(PmiMpich, FourRanksInitAllreduceSharedUniverseFinalize) {
  NEED_MPICH();
  Outcome r = accrun("-n 4 " MPICH_PROGRAM_EXE);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count(r.output, "rank [0-3] ok size=4 sum=10 shared=4 local=4 universe=4\n"), 4) << r.output;
}

// Two agents on this machine under other host names: PMI fences and the
// process mapping across agents, through the job controller.
TEST(PmiMpich, TwoAgentsFenceThroughTheController) {
  NEED_MPICH();
  Outcome r = accrun("-n 4 -H pmi-a:2,pmi-b:2 --launch-agent '{cmd}' " MPICH_PROGRAM_EXE, 20);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count(r.output, "rank [0-3] ok size=4 sum=10 shared=2 local=2 universe=4\n"), 4) << r.output;
  r = accrun("-n 4 -H pmi-a:2,pmi-b:2 --launch-agent '{cmd}' " MPICH_PROGRAM_EXE " abort 3 9", 20);
  EXPECT_EQ(r.status, 9) << r.output;
  EXPECT_NE(r.output.find("rank 3 on host pmi-b called abort with status 9"), std::string::npos) << r.output;
}

// Four agents started as a chain (--fanout 1): PMI barriers are whole-job
// fences, which travel the launch tree.
TEST(PmiMpich, BarriersAlongTheLaunchTree) {
  NEED_MPICH();
  Outcome r = accrun("-n 8 -H pmi-a:2,pmi-b:2,pmi-c:2,pmi-d:2 --fanout 1 --launch-agent '{cmd}' " MPICH_PROGRAM_EXE, 30);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count(r.output, "rank [0-7] ok size=8 sum=36 shared=2 local=2 universe=8\n"), 8) << r.output;
}

TEST(PmiMpich, OnlyPmiServedStillRuns) {
  NEED_MPICH();
  Outcome r = accrun("--mpi pmi -n 2 " MPICH_PROGRAM_EXE);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count(r.output, "rank [01] ok size=2 "), 2) << r.output;
}

TEST(PmiMpich, AbortCodeIsTheExitStatus) {
  NEED_MPICH();
  Outcome r = accrun("-n 4 " MPICH_PROGRAM_EXE " abort 2 7");
  EXPECT_EQ(r.status, 7) << r.output;
  EXPECT_NE(r.output.find("accrun: rank 2 on host "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("called abort with status 7"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("readline failed"), std::string::npos) << r.output;
}

// No MPICH needed: a hand-written PMI-1 client.  Under --on-failure kill
// the job ends at once, although the rank that misused PMI lingers.
TEST(PmiWrongUse, BarrierTwiceEndsTheJobWithAMessage) {
  Outcome r = accrun("-n 2 " PMI_MISUSE_EXE " 1 linger", 20);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_LT(r.seconds, 15) << r.output;
  EXPECT_NE(r.output.find("accrun: rank 1 on host "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("used PMI wrongly: the rank entered a fence (barrier_in) twice"), std::string::npos)
      << r.output;
}

// Under --on-failure continue: the rank is told, and the other rank's
// barrier is answered with an error instead of waiting for ever.
TEST(PmiWrongUse, BarrierTwiceAnswersBothRanks) {
  Outcome r = accrun("--on-failure continue -n 2 " PMI_MISUSE_EXE " 1", 20);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("rank 1: cmd=barrier_out rc=-1 msg=the_rank_entered_a_fence_(barrier_in)_twice"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("rank 0: cmd=barrier_out rc=-1 msg=rank_1_used_PMI_wrongly"), std::string::npos)
      << r.output;
}

// Across hosts under --on-failure continue: a rank that left without
// finalize on one host fails the barrier the other hosts' ranks wait in,
// naming it and its host.  Before, they waited until --timeout.  Through
// the controller (two agents) and along the launch tree (four, a chain).
TEST(PmiWrongUse, ARankThatLeftOnAnotherHostFailsTheBarrierThere) {
  const std::string why =
      "cmd=barrier_out rc=-1 msg=rank_1_on_host_pmi-b_closed_its_PMI_connection_without_finalize";
  Outcome r =
      accrun("--on-failure continue -n 2 -H pmi-a:1,pmi-b:1 --launch-agent '{cmd}' " PMI_MISUSE_EXE
             " 1 leave",
             20);
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_LT(r.seconds, 15) << r.output;
  EXPECT_NE(r.output.find("rank 0: " + why), std::string::npos) << r.output;
  r = accrun(
      "--on-failure continue -n 4 -H pmi-a:1,pmi-b:1,pmi-c:1,pmi-d:1 --fanout 1 --launch-agent "
      "'{cmd}' " PMI_MISUSE_EXE " 1 leave",
      20);
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_LT(r.seconds, 15) << r.output;
  // Along the tree the controller may fail the round first: that host's
  // part will not come up the tree.
  EXPECT_EQ(
      count(r.output,
            "rank [023]: cmd=barrier_out rc=-1 msg=(rank_1_on_host_pmi-b_closed_its_PMI_connection_"
            "without_finalize|the_job's_PMI_fence_failed:_host_pmi-b_has_no_rank_left_in_the_job)"),
      3)
      << r.output;
}

TEST(PmiWrongUse, NoPmiSocketUnderMpiPmix) {
  Outcome r = accrun("--mpi pmix -n 1 " PMI_MISUSE_EXE " 1", 20);
  EXPECT_EQ(r.status, 2) << r.output;  // the client's own "no PMI_FD"
}

}  // namespace
