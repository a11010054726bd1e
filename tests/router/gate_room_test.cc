#include "router/gate_room.h"

#include <gtest/gtest.h>

namespace kvroute::router {
namespace {

GateRoom::Options Auto() {
  return {.mode = GateRoom::Mode::kAuto,
          .long_pause_s = 10,
          .gpu_below_share = 0.1,
          .tier_at_share = 0.3,
          .min_pauses = 4,
          .share_weight = 0.25};
}

// The fixed modes keep their room whatever the agents do, and learn nothing.
TEST(GateRoom, TheFixedModesKeepTheirRoom) {
  GateRoom tier({.mode = GateRoom::Mode::kTier});
  GateRoom gpu({.mode = GateRoom::Mode::kGpu});
  for (int i = 0; i < 100; ++i) {
    tier.LearnPause(absl::Seconds(1));
    gpu.LearnPause(absl::Seconds(60));
  }
  EXPECT_TRUE(tier.tier());
  EXPECT_FALSE(gpu.tier());
  EXPECT_EQ(tier.pauses(), 0);
  EXPECT_EQ(gpu.long_pause_share(), 0);
}

// Auto starts at the GPU pool and keeps it until min_pauses are learned,
// however long the first pauses are; the first pauses count evenly.
TEST(GateRoom, AutoWaitsForMinPauses) {
  GateRoom room(Auto());
  for (int i = 0; i < 3; ++i) room.LearnPause(absl::Seconds(20 + i));
  EXPECT_FALSE(room.tier());
  EXPECT_DOUBLE_EQ(room.long_pause_share(), 1);
  room.LearnPause(absl::Seconds(3));  // 0.75
  EXPECT_TRUE(room.tier());
  EXPECT_EQ(room.pauses(), 4);
}

// Agents that all come back within seconds keep the GPU pool; once some
// pause for long the room is the tier, and it goes back only below the
// lower share: a share between the two keeps whichever room it has.
TEST(GateRoom, AutoFollowsTheLongPausesWithHysteresis) {
  GateRoom room(Auto());
  for (int i = 0; i < 8; ++i) room.LearnPause(absl::Seconds(4));
  EXPECT_FALSE(room.tier());
  EXPECT_DOUBLE_EQ(room.long_pause_share(), 0);
  room.LearnPause(absl::Seconds(10));  // not longer than 10 s: 0
  room.LearnPause(absl::Seconds(11));  // 0.25: between the shares
  EXPECT_FALSE(room.tier());
  room.LearnPause(absl::Seconds(40));  // 0.4375
  EXPECT_TRUE(room.tier());
  room.LearnPause(absl::Seconds(1));  // 0.328125
  room.LearnPause(absl::Seconds(1));  // 0.24609375
  room.LearnPause(absl::Seconds(1));  // 0.1845703125
  room.LearnPause(absl::Seconds(1));  // 0.138427734375
  room.LearnPause(absl::Seconds(1));  // 0.10382080078125: not below 0.1
  EXPECT_TRUE(room.tier());
  room.LearnPause(absl::Seconds(1));  // 0.0778656005859375
  EXPECT_FALSE(room.tier());
}

// A negative pause (clocks out of order) teaches nothing.
TEST(GateRoom, ANegativePauseIsIgnored) {
  GateRoom room(Auto());
  room.LearnPause(absl::Seconds(-3));
  EXPECT_EQ(room.pauses(), 0);
}

}  // namespace
}  // namespace kvroute::router
