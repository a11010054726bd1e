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

// The default is auto as shipped: the GPU pool until 8 pauses are learned,
// the tier once 5 % of them run past 10 s (one long pause in the first
// eight is 1/8), the GPU pool again below 1 %.
TEST(GateRoom, TheDefaultIsAutoFromTheGpuPool) {
  GateRoom room(GateRoom::Options{});
  EXPECT_EQ(room.options().mode, GateRoom::Mode::kAuto);
  EXPECT_FALSE(room.tier());
  room.LearnPause(absl::Seconds(30));
  for (int i = 0; i < 6; ++i) room.LearnPause(absl::Seconds(4));
  EXPECT_FALSE(room.tier()) << "7 pauses";
  room.LearnPause(absl::Seconds(4));
  EXPECT_DOUBLE_EQ(room.long_pause_share(), 0.125);
  EXPECT_TRUE(room.tier());
  // Short pauses weigh 0.02 each once past 50: the share falls below 1 %
  // only after many of them.
  int short_pauses = 0;
  while (room.tier() && short_pauses < 1000) {
    room.LearnPause(absl::Seconds(4));
    ++short_pauses;
  }
  EXPECT_FALSE(room.tier());
  EXPECT_LT(room.long_pause_share(), 0.01);
  EXPECT_GT(short_pauses, 50);
}

// A negative pause (clocks out of order) teaches nothing.
TEST(GateRoom, ANegativePauseIsIgnored) {
  GateRoom room(Auto());
  room.LearnPause(absl::Seconds(-3));
  EXPECT_EQ(room.pauses(), 0);
}

}  // namespace
}  // namespace kvroute::router
