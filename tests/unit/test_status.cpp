#include "accrun/status.hpp"

#include <gtest/gtest.h>

namespace accrun {
namespace {

TEST(Status, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.is_ok());
  EXPECT_EQ(s.code(), Code::kOk);
}

TEST(Status, CodesMatchTheCApi) {
  // docs/design.md §9 pins these values; accrun.h mirrors them.
  EXPECT_EQ(static_cast<int>(Code::kInvalidArgument), 1);
  EXPECT_EQ(static_cast<int>(Code::kInvalidUsage), 2);
  EXPECT_EQ(static_cast<int>(Code::kNotSupported), 3);
  EXPECT_EQ(static_cast<int>(Code::kNotFound), 4);
  EXPECT_EQ(static_cast<int>(Code::kSystem), 5);
  EXPECT_EQ(static_cast<int>(Code::kRemote), 6);
  EXPECT_EQ(static_cast<int>(Code::kTimeout), 7);
  EXPECT_EQ(static_cast<int>(Code::kNoMemory), 8);
}

TEST(Status, ContextIsPrefixed) {
  Status s = not_found("no such key").with_context("group 'g'");
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(s.message(), "group 'g': no such key");
  EXPECT_TRUE(Status::ok().with_context("x").is_ok());
}

TEST(Status, SystemErrorNamesTheCallAndErrno) {
  Status s = system_error("open /nope", ENOENT);
  EXPECT_EQ(s.code(), Code::kSystem);
  EXPECT_EQ(s.message(), "open /nope: No such file or directory");
}

TEST(Result, HoldsValueOrStatus) {
  Result<int> good = 42;
  ASSERT_TRUE(good.is_ok());
  EXPECT_EQ(*good, 42);
  EXPECT_TRUE(good.status().is_ok());
  Result<int> bad = timeout_error("slow");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), Code::kTimeout);
}

}  // namespace
}  // namespace accrun
