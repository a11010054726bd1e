// EvictionHistory: a prefix freed at F survives until the engine's removals
// since F pass what it cached beside it then, and goes tail first.
#include "router/eviction_history.h"

#include <vector>

#include "gtest/gtest.h"

namespace kvroute::router {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);
absl::Time At(double s) { return kT0 + absl::Seconds(s); }

EngineKvEvent Stored(int64_t tokens, double at_s) {
  return {EngineKvEvent::Kind::kStored, tokens, false, At(at_s)};
}
EngineKvEvent Removed(int64_t tokens, double at_s) {
  return {EngineKvEvent::Kind::kRemoved, tokens, false, At(at_s)};
}

TEST(EvictionHistoryTest, APrefixGoesOnceRemovalsPassWhatWasCachedBesideIt) {
  EvictionHistory h;
  h.Resize(2);
  EXPECT_EQ(h.Surviving(0, At(1), 1000), -1) << "no event yet";
  // 10,000 tokens cached, the session's 1,000 among them, freed at 1 s: the
  // other 9,000 are older and go first.
  h.Apply(0, std::vector{Stored(10000, 0)}, 0);
  EXPECT_EQ(h.Surviving(0, At(1), 1000), 1000);
  h.Apply(0, std::vector{Removed(5000, 2)}, 0);
  EXPECT_EQ(h.Surviving(0, At(1), 1000), 1000);
  h.Apply(0, std::vector{Removed(4500, 3)}, 0);
  EXPECT_EQ(h.Surviving(0, At(1), 1000), 500) << "its tail went";
  h.Apply(0, std::vector{Removed(2000, 4)}, 0);
  EXPECT_EQ(h.Surviving(0, At(1), 1000), 0);
  // A prefix freed after those removals has nothing removed since.
  EXPECT_EQ(h.Surviving(0, At(5), 300), 300);
  // Before the first sample: counted from it.
  EXPECT_EQ(h.Surviving(0, At(-10), 1000), 0);
  // Other backends know nothing; out of range neither.
  EXPECT_EQ(h.Surviving(1, At(1), 1000), -1);
  EXPECT_EQ(h.Surviving(7, At(1), 1000), -1);
}

// Blocks running requests hold are not in the free queue: freed later, they
// queue behind the prefix, so only the cached blocks free at F are ahead.
TEST(EvictionHistoryTest, BlocksInUseAreNotAheadOfAFreedPrefix) {
  EvictionHistory h;
  h.Resize(1);
  // 10,000 cached, 6,000 of them held by running requests: 4,000 free, the
  // session's 1,000 among them, so 3,000 ahead of it.
  h.Apply(0, std::vector{Stored(10000, 0)}, 6000);
  h.Apply(0, std::vector{Removed(3500, 2)}, 6000);
  EXPECT_EQ(h.Surviving(0, At(1), 1000), 500);
  // More in use than cached (the gauge is a scrape behind): nothing ahead.
  h.Apply(0, std::vector{Stored(100, 3)}, 20000);
  h.Apply(0, std::vector{Removed(50, 4)}, 20000);
  EXPECT_EQ(h.Surviving(0, At(3.5), 100), 50);
}

TEST(EvictionHistoryTest, UntimedAndHostEventsAreNotRecordedAndAClearTakesAll) {
  EvictionHistory h;
  h.Resize(1);
  h.Apply(0, std::vector{EngineKvEvent{EngineKvEvent::Kind::kStored, 500, false}}, 0);
  EXPECT_EQ(h.Surviving(0, At(0), 100), -1);
  EngineKvEvent host = Removed(100000, 0);
  host.host = true;
  h.Apply(0, std::vector{Stored(1000, 0), host}, 0);
  EXPECT_EQ(h.Surviving(0, At(0), 200), 200);
  h.Apply(0, std::vector{EngineKvEvent{EngineKvEvent::Kind::kCleared, 0, false, At(5)}}, 0);
  EXPECT_EQ(h.Surviving(0, At(1), 200), 0);
}

TEST(EvictionHistoryTest, BatchesWithinTheSpacingShareASample) {
  EvictionHistory h;
  h.Resize(1);
  h.Apply(0, std::vector{Stored(1000, 0)}, 0);
  // 10 ms later: counted, not sampled, so a prefix freed between the two
  // batches is aged from the first, by the second one's removal too.
  h.Apply(0, std::vector{Removed(950, 0.01)}, 0);
  EXPECT_EQ(h.Surviving(0, At(0.005), 100), 50);
  // A batch past the spacing is a sample of its own.
  h.Apply(0, std::vector{Stored(100, 1)}, 0);
  h.Apply(0, std::vector{Removed(100, 2)}, 0);
  EXPECT_EQ(h.Surviving(0, At(1.5), 100), 50);
}

}  // namespace
}  // namespace kvroute::router
