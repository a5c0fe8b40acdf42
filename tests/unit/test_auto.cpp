// AUTO backend selection: resolve_auto over the facts every member shares.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "accrun/backend.hpp"

namespace ac = accrun::collectives;
using ac::BackendKind;
using ac::MemberFacts;

namespace {

MemberFacts gpu_member(const std::string& host, int gpu, bool mpi = true) {
  MemberFacts f;
  f.host = host;
  f.gpu_ids = {gpu};
  f.gpus_whole = true;
  f.nccl_loadable = true;
  f.mpi_initialized = mpi;
  return f;
}

MemberFacts cpu_member(const std::string& host, bool mpi) {
  MemberFacts f;
  f.host = host;
  f.mpi_initialized = mpi;
  return f;
}

BackendKind resolve(const std::vector<MemberFacts>& facts, std::string* why = nullptr) {
  std::string w;
  BackendKind k = ac::resolve_auto(facts, &w);
  EXPECT_FALSE(w.empty()) << "every choice comes with a reason";
  if (why != nullptr) *why = w;
  return k;
}

TEST(ResolveAuto, NcclWhenEveryMemberHoldsOneWholeDistinctGpu) {
  std::string why;
  EXPECT_EQ(resolve({gpu_member("a", 0), gpu_member("a", 1), gpu_member("b", 0), gpu_member("b", 1)}, &why),
            BackendKind::kNccl);
  EXPECT_NE(why.find("nccl"), std::string::npos) << why;
}

TEST(ResolveAuto, SameGpuIdOnDifferentHostsIsDistinct) {
  EXPECT_EQ(resolve({gpu_member("a", 0), gpu_member("b", 0)}), BackendKind::kNccl);
}

TEST(ResolveAuto, SharedGpuOnOneHostFallsBackToMpi) {
  std::string why;
  EXPECT_EQ(resolve({gpu_member("a", 0), gpu_member("a", 0)}, &why), BackendKind::kMpi);
  EXPECT_NE(why.find("group rank 0 on a and group rank 1 share GPU 0"), std::string::npos) << why;
}

TEST(ResolveAuto, FractionalGpuIsNotNccl) {
  MemberFacts half = gpu_member("a", 1);
  half.gpus_whole = false;
  std::string why;
  EXPECT_EQ(resolve({gpu_member("a", 0), half}, &why), BackendKind::kMpi);
  EXPECT_NE(why.find("fraction"), std::string::npos) << why;
}

TEST(ResolveAuto, TwoGpusPerMemberIsNotNccl) {
  MemberFacts two = gpu_member("a", 0);
  two.gpu_ids = {0, 1};
  std::string why;
  EXPECT_EQ(resolve({two, gpu_member("b", 0)}, &why), BackendKind::kMpi);
  EXPECT_NE(why.find("2 GPUs"), std::string::npos) << why;
}

TEST(ResolveAuto, NcclMustLoadOnEveryMember) {
  MemberFacts no_nccl = gpu_member("b", 0);
  no_nccl.nccl_loadable = false;
  std::string why;
  EXPECT_EQ(resolve({gpu_member("a", 0), no_nccl}, &why), BackendKind::kMpi);
  EXPECT_NE(why.find("NCCL does not load on group rank 1"), std::string::npos) << why;
}

TEST(ResolveAuto, MemberWithoutGpuMeansNoNccl) {
  EXPECT_EQ(resolve({gpu_member("a", 0), cpu_member("a", true)}), BackendKind::kMpi);
}

TEST(ResolveAuto, MpiWhenEveryMemberInitialisedIt) {
  std::string why;
  EXPECT_EQ(resolve({cpu_member("a", true), cpu_member("b", true), cpu_member("b", true)}, &why),
            BackendKind::kMpi);
  EXPECT_NE(why.find("mpi"), std::string::npos) << why;
}

TEST(ResolveAuto, StoreWhenAnyMemberLacksMpi) {
  std::string why;
  EXPECT_EQ(resolve({cpu_member("a", true), cpu_member("b", false)}, &why), BackendKind::kStore);
  EXPECT_NE(why.find("group rank 1 on b has not initialised MPI"), std::string::npos) << why;
}

TEST(ResolveAuto, GpusWithoutNcclOrMpiIsStore) {
  MemberFacts a = gpu_member("a", 0, false);
  MemberFacts b = gpu_member("a", 1, false);
  a.nccl_loadable = b.nccl_loadable = false;
  EXPECT_EQ(resolve({a, b}), BackendKind::kStore);
}

TEST(ResolveAuto, EmptyFactsIsStore) { EXPECT_EQ(resolve({}), BackendKind::kStore); }

TEST(ResolveAuto, SingleMemberFollowsTheSameRules) {
  EXPECT_EQ(resolve({gpu_member("a", 3)}), BackendKind::kNccl);
  EXPECT_EQ(resolve({cpu_member("a", true)}), BackendKind::kMpi);
  EXPECT_EQ(resolve({cpu_member("a", false)}), BackendKind::kStore);
}

// Every member evaluates the same facts: the answer cannot depend on anything
// else (it is a pure function), so repeated and reordered-irrelevant calls agree.
TEST(ResolveAuto, DeterministicAndNullWhyAllowed) {
  std::vector<MemberFacts> facts = {gpu_member("a", 0), gpu_member("a", 0)};
  const BackendKind first = ac::resolve_auto(facts, nullptr);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(ac::resolve_auto(facts, nullptr), first);
}

}  // namespace
