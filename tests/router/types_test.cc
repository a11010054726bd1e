#include "router/types.h"

#include "gtest/gtest.h"

namespace kvroute::router {
namespace {

TEST(TypesTest, ToString) {
  EXPECT_EQ(ToString(RequestClass::kWarm), "WARM");
  EXPECT_EQ(ToString(RequestClass::kMedium), "MEDIUM");
  EXPECT_EQ(ToString(RequestClass::kHeavy), "HEAVY");
  EXPECT_EQ(ToString(DecisionMode::kColocated), "COLOCATED");
  EXPECT_EQ(ToString(DecisionMode::kOffload), "OFFLOAD");
  EXPECT_EQ(ToString(BackendRole::kBoth), "both");
  EXPECT_EQ(ToString(BackendRole::kPrefill), "prefill");
  EXPECT_EQ(ToString(BackendRole::kDecode), "decode");
}

}  // namespace
}  // namespace kvroute::router
