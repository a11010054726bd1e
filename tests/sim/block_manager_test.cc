#include "sim/block_manager.h"

#include <gtest/gtest.h>

#include <numeric>

namespace sim {
namespace {

std::vector<int32_t> Tokens(int n, int32_t start = 0) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

// Allocates and commits the blocks of `tokens` as a finished request would.
std::vector<BlockId> Fill(BlockManager& bm, const std::vector<BlockHash>& hashes) {
  std::vector<BlockId> ids = *bm.Allocate(static_cast<int64_t>(hashes.size()));
  for (size_t i = 0; i < hashes.size(); ++i) bm.Commit(ids[i], hashes[i]);
  return ids;
}

TEST(BlockHashTest, ChainedSoAHitIsAlwaysAPrefix) {
  const std::vector<BlockHash> a = HashFullBlocks(Tokens(64), 16);
  std::vector<int32_t> other = Tokens(64);
  other[3] = 999;  // differs in block 0: every later hash differs too
  const std::vector<BlockHash> b = HashFullBlocks(other, 16);
  ASSERT_EQ(a.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_NE(a[i], b[i]);
  EXPECT_EQ(HashFullBlocks(Tokens(70), 16), a) << "partial trailing block has no hash";
}

TEST(BlockManagerTest, FinishedBlocksStayCachedAndHit) {
  BlockManager bm(8, 16);
  const auto hashes = HashFullBlocks(Tokens(64), 16);
  bm.Release(Fill(bm, hashes));
  EXPECT_EQ(bm.num_free(), 8);
  EXPECT_EQ(bm.CountCachedPrefix(hashes), 4);
  const auto longer = HashFullBlocks(Tokens(96), 16);
  EXPECT_EQ(bm.CountCachedPrefix(longer), 4);
  std::vector<int32_t> diverged = Tokens(64);
  diverged[40] = -1;  // block 2
  EXPECT_EQ(bm.CountCachedPrefix(HashFullBlocks(diverged, 16)), 2);
}

TEST(BlockManagerTest, EvictsLeastRecentlyFreedAndTailFirst) {
  BlockManager bm(4, 16);
  const auto a = HashFullBlocks(Tokens(32, 0), 16);
  const auto b = HashFullBlocks(Tokens(32, 1000), 16);
  bm.Release(Fill(bm, a));  // freed first: evicted first
  bm.Release(Fill(bm, b));
  ASSERT_TRUE(bm.Allocate(1).has_value());
  // The tail block of `a` goes first, so `a` keeps its first block as a prefix hit.
  EXPECT_EQ(bm.CountCachedPrefix(a), 1);
  EXPECT_EQ(bm.CountCachedPrefix(b), 2);
  ASSERT_TRUE(bm.Allocate(1).has_value());
  EXPECT_EQ(bm.CountCachedPrefix(a), 0);
  EXPECT_EQ(bm.CountCachedPrefix(b), 2);
  EXPECT_EQ(bm.num_evictions(), 2);
}

TEST(BlockManagerTest, PinnedBlocksAreNeverEvicted) {
  BlockManager bm(4, 16);
  const auto a = HashFullBlocks(Tokens(32), 16);
  const std::vector<BlockId> pinned = Fill(bm, a);  // still referenced
  EXPECT_EQ(bm.num_free(), 2);
  EXPECT_FALSE(bm.Allocate(3).has_value());
  ASSERT_TRUE(bm.Allocate(2).has_value());
  EXPECT_EQ(bm.CountCachedPrefix(a), 2);
  EXPECT_DOUBLE_EQ(bm.Usage(), 1.0);
}

TEST(BlockManagerTest, AcquiringAHitPinsSharedBlocks) {
  BlockManager bm(4, 16);
  const auto a = HashFullBlocks(Tokens(32), 16);
  bm.Release(Fill(bm, a));
  const std::vector<BlockId> shared = bm.AcquireCached(a, 2);
  EXPECT_EQ(bm.RefCount(shared[0]), 1);
  EXPECT_EQ(bm.num_free(), 2);
  // Two fresh blocks fit besides the hit; three do not.
  EXPECT_TRUE(bm.CanAllocate(a, 0, 2));
  EXPECT_FALSE(bm.CanAllocate(a, 0, 3));
  bm.Retain(shared);
  bm.Release(shared);
  EXPECT_EQ(bm.RefCount(shared[0]), 1);
  bm.Release(shared);
  EXPECT_EQ(bm.num_free(), 4);
}

TEST(BlockManagerTest, CanAllocateCountsFreeHitsAsUsed) {
  BlockManager bm(4, 16);
  const auto a = HashFullBlocks(Tokens(32), 16);
  bm.Release(Fill(bm, a));
  // Taking both cached blocks of `a` leaves 2 free blocks for fresh allocation.
  EXPECT_TRUE(bm.CanAllocate(a, 2, 2));
  EXPECT_FALSE(bm.CanAllocate(a, 2, 3));
}

TEST(BlockManagerTest, DuplicateContentStaysAnonymous) {
  BlockManager bm(4, 16);
  const auto a = HashFullBlocks(Tokens(16), 16);
  const std::vector<BlockId> first = *bm.Allocate(1);
  const std::vector<BlockId> second = *bm.Allocate(1);
  bm.Commit(first[0], a[0]);
  bm.Commit(second[0], a[0]);
  EXPECT_EQ(bm.num_cached(), 1);
  bm.Release(second);
  bm.Release(first);
  // The anonymous block is reused before the cached one is evicted.
  ASSERT_TRUE(bm.Allocate(3).has_value());
  EXPECT_TRUE(bm.IsCached(a[0]));
}

}  // namespace
}  // namespace sim
