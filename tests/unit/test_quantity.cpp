#include "accrun/quantity.hpp"

#include <gtest/gtest.h>

namespace accrun::detect {
namespace {

Quantity q(const char* s) {
  auto r = Quantity::parse(s);
  EXPECT_TRUE(r.is_ok()) << s << ": " << r.status().message();
  return r.is_ok() ? *r : Quantity();
}

TEST(Quantity, ParsesWholeAndFractions) {
  EXPECT_EQ(q("2").units(), 20000);
  EXPECT_EQ(q("0.5").units(), 5000);
  EXPECT_EQ(q(".25").units(), 2500);
  EXPECT_EQ(q("0.0001").units(), 1);
  EXPECT_EQ(q("1.0").units(), 10000);
  EXPECT_TRUE(q("3").is_whole());
  EXPECT_FALSE(q("1.5").is_whole());
}

TEST(Quantity, ThreeThirdsNeverDrift) {
  Quantity third = q("0.3333");
  Quantity sum = third + third + third;
  EXPECT_LT(sum, Quantity::whole(1));
  EXPECT_EQ((q("0.3") + q("0.3") + q("0.4")), Quantity::whole(1));
}

TEST(Quantity, RejectsBadInputWithTheRule) {
  for (const char* bad : {"", "-1", "abc", "1e3", "0.00001", "1..2", ".", "1,5"}) {
    auto r = Quantity::parse(bad);
    EXPECT_FALSE(r.is_ok()) << bad;
    if (!r.is_ok()) {
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
    }
  }
  EXPECT_NE(Quantity::parse("0.00001").status().message().find("0.0001"), std::string::npos);
}

TEST(Quantity, PrintsShortestForm) {
  EXPECT_EQ(q("2").str(), "2");
  EXPECT_EQ(q("0.5").str(), "0.5");
  EXPECT_EQ(q("0.3333").str(), "0.3333");
  EXPECT_EQ(q("1.05").str(), "1.05");
}

}  // namespace
}  // namespace accrun::detect
