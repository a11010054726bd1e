#include "router/bytes_per_token.h"

#include "gtest/gtest.h"

namespace kvroute::router {
namespace {

TEST(BytesPerTokenTest, StartsAtDefaultAndLearnsPerModel) {
  BytesPerTokenModel m(4.0, 0.1, 8);
  EXPECT_DOUBLE_EQ(m.For("llama"), 4.0);
  m.Observe("llama", 3000, 1000);  // first sample replaces the default
  EXPECT_DOUBLE_EQ(m.For("llama"), 3.0);
  EXPECT_DOUBLE_EQ(m.FleetWide(), 3.0);
  m.Observe("llama", 5000, 1000);  // second: running mean
  EXPECT_DOUBLE_EQ(m.For("llama"), 4.0);
  EXPECT_DOUBLE_EQ(m.For("qwen"), m.FleetWide());
  m.Observe("qwen", 2000, 1000);
  EXPECT_DOUBLE_EQ(m.For("qwen"), 2.0);
  EXPECT_DOUBLE_EQ(m.For("llama"), 4.0);
}

TEST(BytesPerTokenTest, ConvergesAsEwmaAndIgnoresGarbage) {
  BytesPerTokenModel m(4.0, 0.1, 8);
  for (int i = 0; i < 200; ++i) m.Observe("m", 3500, 1000);
  EXPECT_NEAR(m.For("m"), 3.5, 1e-9);
  for (int i = 0; i < 5; ++i) m.Observe("m", 4500, 1000);  // a drift moves it slowly
  EXPECT_GT(m.For("m"), 3.5);
  EXPECT_LT(m.For("m"), 4.0);
  const double before = m.For("m");
  m.Observe("m", 0, 1000);
  m.Observe("m", 1000, 0);
  m.Observe("m", 1000000, 10);  // 100000 bytes/token: garbage
  EXPECT_DOUBLE_EQ(m.For("m"), before);
}

TEST(BytesPerTokenTest, ModelTableIsBounded) {
  BytesPerTokenModel m(4.0, 0.1, 1);
  m.Observe("a", 3000, 1000);
  m.Observe("b", 2000, 1000);  // table full: only the fleet-wide ratio learns
  EXPECT_DOUBLE_EQ(m.For("a"), 3.0);
  EXPECT_DOUBLE_EQ(m.For("b"), m.FleetWide());
  EXPECT_DOUBLE_EQ(m.FleetWide(), 2.5);
}

}  // namespace
}  // namespace kvroute::router
