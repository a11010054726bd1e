// The host tier's bookkeeping (sim/host_tier.h), as vLLM's LRUOffloadingManager keeps it:
// blocks loadable only once stored, LRU eviction of idle blocks only, stores refused when too
// few blocks can be evicted, and the events each change records.
#include "sim/host_tier.h"

#include <gtest/gtest.h>

#include <vector>

namespace sim {
namespace {

using Keys = std::vector<BlockHash>;

// Stores `keys` and lands the copy.
void Store(HostTier& tier, const Keys& keys) {
  std::optional<Keys> fresh = tier.PrepareStore(keys);
  ASSERT_TRUE(fresh.has_value());
  tier.CompleteStore(*fresh);
}

TEST(HostTierTest, BlocksAreLoadableOnlyOnceTheirStoreLands) {
  HostTier tier(/*num_blocks=*/4, /*block_size=*/16);
  std::optional<Keys> fresh = tier.PrepareStore(Keys{1, 2, 3});
  ASSERT_TRUE(fresh.has_value());
  EXPECT_EQ(*fresh, (Keys{1, 2, 3}));
  EXPECT_TRUE(tier.Contains(1));
  EXPECT_FALSE(tier.IsReady(1));
  EXPECT_EQ(tier.Lookup(Keys{1, 2, 3}), 0);
  tier.CompleteStore(Keys{1, 2});
  EXPECT_EQ(tier.Lookup(Keys{1, 2, 3}), 2);
  tier.CompleteStore(Keys{3});
  EXPECT_EQ(tier.Lookup(Keys{1, 2, 3}), 3);
  // The run stops at the first block host memory lacks.
  EXPECT_EQ(tier.Lookup(Keys{1, 9, 3}), 1);
  // Keys already present are not copied again.
  std::optional<Keys> again = tier.PrepareStore(Keys{2, 3, 4});
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, (Keys{4}));
  EXPECT_EQ(tier.num_used(), 4);
}

TEST(HostTierTest, EvictsTheLeastRecentlyUsedIdleBlocks) {
  HostTier tier(/*num_blocks=*/4, /*block_size=*/16);
  Store(tier, Keys{1, 2});
  Store(tier, Keys{3, 4});
  // Touch gives the first key the most recency: order now 2 ... 1, then 4 and 3 before them.
  tier.Touch(Keys{1, 2});
  Store(tier, Keys{5});
  EXPECT_FALSE(tier.Contains(3));  // 3 and 4 were older than the touched 1 and 2
  EXPECT_TRUE(tier.Contains(4));
  Store(tier, Keys{6});
  EXPECT_FALSE(tier.Contains(4));
  Store(tier, Keys{7});
  EXPECT_FALSE(tier.Contains(2));  // of the touched pair the tail goes first
  EXPECT_TRUE(tier.Contains(1));
  EXPECT_EQ(tier.num_evictions(), 3);
}

// A repeated Touch of the same keys is skipped only while nothing has moved since; any
// Touch of other keys or any store in between makes the repeat count again.
TEST(HostTierTest, RepeatedTouchRestoresRecencyAfterAnyOtherChange) {
  HostTier tier(/*num_blocks=*/5, /*block_size=*/16);
  Store(tier, Keys{1, 2});
  Store(tier, Keys{3, 4});
  tier.Touch(Keys{1, 2});
  tier.Touch(Keys{1, 2});  // nothing moved: 3 and 4 stay the oldest
  tier.Touch(Keys{3, 4});
  tier.Touch(Keys{1, 2});  // 1 and 2 are the most recent again
  Store(tier, Keys{5});
  tier.Touch(Keys{1, 2});  // after 5 was stored: 5 is now older than 1 and 2
  Store(tier, Keys{6});    // evicts 4, the tail of the oldest pair
  EXPECT_FALSE(tier.Contains(4));
  Store(tier, Keys{7});
  EXPECT_FALSE(tier.Contains(3));
  Store(tier, Keys{8});
  EXPECT_FALSE(tier.Contains(5));
  EXPECT_TRUE(tier.Contains(1));
  EXPECT_TRUE(tier.Contains(2));
  // Part of the last keys is a different Touch: 2 alone becomes the most recent.
  tier.Touch(Keys{1, 2});
  tier.Touch(Keys{2});
  Store(tier, Keys{9});
  EXPECT_FALSE(tier.Contains(6));
  Store(tier, Keys{10});
  EXPECT_FALSE(tier.Contains(7));
  Store(tier, Keys{11});
  EXPECT_FALSE(tier.Contains(8));
  Store(tier, Keys{12});
  EXPECT_FALSE(tier.Contains(1));  // touched before 2, so older
  EXPECT_TRUE(tier.Contains(2));
}

TEST(HostTierTest, BlocksBeingStoredOrLoadedAreNeverEvicted) {
  HostTier tier(/*num_blocks=*/3, /*block_size=*/16);
  Store(tier, Keys{1});
  ASSERT_TRUE(tier.PrepareStore(Keys{2}).has_value());  // in flight: not evictable
  tier.PrepareLoad(Keys{1});                            // pinned by a load
  EXPECT_TRUE(tier.AnyLoading(Keys{1}));
  Store(tier, Keys{3});
  // Nothing idle to evict: the store is refused and nothing changes.
  EXPECT_FALSE(tier.PrepareStore(Keys{4, 5}).has_value());
  EXPECT_EQ(tier.num_used(), 3);
  tier.CompleteLoad(Keys{1});
  EXPECT_FALSE(tier.AnyLoading(Keys{1}));
  tier.CompleteStore(Keys{2});
  // Now 1 (the oldest idle block) goes first.
  std::optional<Keys> fresh = tier.PrepareStore(Keys{5});
  ASSERT_TRUE(fresh.has_value());
  EXPECT_FALSE(tier.Contains(1));
  EXPECT_TRUE(tier.Contains(2));
}

TEST(HostTierTest, EventsNameBlocksByWhatTheyHold) {
  HostTier tier(/*num_blocks=*/2, /*block_size=*/8);
  Store(tier, Keys{1});
  EXPECT_TRUE(tier.TakeKvEvents().empty());  // off unless enabled
  tier.EnableKvEvents(true);
  std::optional<Keys> fresh = tier.PrepareStore(Keys{20, 21});
  ASSERT_TRUE(fresh.has_value());
  // An offloaded block of two GPU blocks (hashes 10, 20) after the block hashed 5.
  tier.Describe(20, 5, Keys{10, 20}, std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}, 4);
  tier.CompleteStore(*fresh);
  std::vector<KvCacheEvent> events = tier.TakeKvEvents();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].kind, KvCacheEvent::Kind::kBlockRemoved);  // 1 made room
  EXPECT_EQ(events[0].medium, KvCacheEvent::Medium::kCpu);
  EXPECT_EQ(events[0].block_hashes, (Keys{1}));
  EXPECT_EQ(events[1].kind, KvCacheEvent::Kind::kBlockStored);
  EXPECT_EQ(events[1].medium, KvCacheEvent::Medium::kCpu);
  EXPECT_EQ(events[1].block_hashes, (Keys{10, 20}));
  EXPECT_EQ(events[1].parent_block_hash, std::optional<BlockHash>(5));
  EXPECT_EQ(events[1].token_ids.size(), 8u);
  EXPECT_EQ(events[1].block_size, 4);
  EXPECT_EQ(events[2].block_hashes, (Keys{21}));  // never described: named by its key
  EXPECT_EQ(events[2].block_size, 8);
  // Evicting a described block removes every GPU block hash it announced.
  Store(tier, Keys{30, 31});
  events = tier.TakeKvEvents();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].kind, KvCacheEvent::Kind::kBlockRemoved);
  EXPECT_EQ(events[0].block_hashes, (Keys{10, 20, 21}));
}

}  // namespace
}  // namespace sim
