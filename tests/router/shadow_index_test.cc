#include "router/shadow_index.h"

#include <vector>

#include "gtest/gtest.h"

namespace kvroute::router {
namespace {

// A chain is any sequence of distinct values for the index; `base` keeps
// chains apart, shared prefixes share leading values.
std::vector<uint64_t> Chain(uint64_t base, int len) {
  std::vector<uint64_t> c;
  for (int i = 0; i < len; ++i) c.push_back(base * 1000003 + static_cast<uint64_t>(i) + 1);
  return c;
}

std::vector<int32_t> MatchAll(const ShadowIndex& index, const std::vector<uint64_t>& chain) {
  std::vector<int32_t> m(index.num_instances());
  index.Match(chain, absl::MakeSpan(m));
  return m;
}

TEST(ShadowIndexTest, MatchGivesEveryInstancesPrefixInOnePass) {
  ShadowIndex index(4);
  for (int i = 0; i < 4; ++i) index.SetCapacity(i, 100);
  const auto chain = Chain(1, 10);
  index.Insert(0, chain);
  index.Insert(1, std::vector<uint64_t>(chain.begin(), chain.begin() + 4));
  index.Insert(3, std::vector<uint64_t>(chain.begin(), chain.begin() + 7));
  EXPECT_EQ(MatchAll(index, chain), (std::vector<int32_t>{10, 4, 0, 7}));
  // A longer request matches only what is held.
  auto longer = chain;
  longer.push_back(42);
  EXPECT_EQ(MatchAll(index, longer), (std::vector<int32_t>{10, 4, 0, 7}));
  // A diverging chain matches nothing.
  EXPECT_EQ(MatchAll(index, Chain(2, 5)), (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_EQ(MatchAll(index, {}), (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_EQ(index.distinct_chunks(), 10);
  EXPECT_EQ(index.replicas(), 10 + 4 + 7);
}

TEST(ShadowIndexTest, LruBoundKeepsPrefixAndEvictsTailsFirst) {
  ShadowIndex index(1);
  index.SetCapacity(0, 4);
  const auto a = Chain(1, 3);
  const auto b = Chain(2, 2);
  index.Insert(0, a);
  index.Insert(0, b);  // needs one slot: a's tail (its oldest entry) goes
  EXPECT_EQ(index.size(0), 4);
  EXPECT_EQ(MatchAll(index, a)[0], 2);
  EXPECT_EQ(MatchAll(index, b)[0], 2);
  // A chain longer than the capacity keeps its prefix.
  index.Insert(0, Chain(3, 10));
  EXPECT_EQ(index.size(0), 4);
  EXPECT_EQ(MatchAll(index, Chain(3, 10))[0], 4);
  EXPECT_EQ(MatchAll(index, a)[0], 0);
  EXPECT_EQ(index.distinct_chunks(), 4);  // evicted chunks left the map
}

TEST(ShadowIndexTest, TouchRefreshesRecency) {
  ShadowIndex index(1);
  index.SetCapacity(0, 4);
  const auto a = Chain(1, 2);
  const auto b = Chain(2, 2);
  index.Insert(0, a);
  index.Insert(0, b);
  index.Insert(0, a);            // a is now the most recent
  index.Insert(0, Chain(3, 2));  // evicts b
  EXPECT_EQ(MatchAll(index, a)[0], 2);
  EXPECT_EQ(MatchAll(index, b)[0], 0);
}

TEST(ShadowIndexTest, ShrinkingCapacityEvictsOldest) {
  ShadowIndex index(2);
  index.SetCapacity(0, 10);
  index.SetCapacity(1, 10);
  const auto a = Chain(1, 4);
  const auto b = Chain(2, 4);
  index.Insert(0, a);
  index.Insert(0, b);
  index.Insert(1, a);
  index.SetCapacity(0, 4);
  EXPECT_EQ(index.size(0), 4);
  EXPECT_EQ(MatchAll(index, a), (std::vector<int32_t>{0, 4}));  // instance 1 untouched
  EXPECT_EQ(MatchAll(index, b), (std::vector<int32_t>{4, 0}));
  index.SetCapacity(0, 0);  // floors at one entry
  EXPECT_EQ(index.capacity(0), 1);
  EXPECT_EQ(index.size(0), 1);
}

TEST(ShadowIndexTest, TicksDecreaseAlongAChainAndEvictThroughDropsOlder) {
  ShadowIndex index(1);
  index.SetCapacity(0, 100);
  const auto a = Chain(1, 3);
  const auto b = Chain(2, 3);
  const auto c = Chain(3, 3);
  index.Insert(0, b);
  index.Insert(0, a);
  index.Insert(0, c);
  EXPECT_GT(index.TickOf(0, a[0]), index.TickOf(0, a[1]));
  EXPECT_GT(index.TickOf(0, a[1]), index.TickOf(0, a[2]));
  EXPECT_EQ(index.TickOf(0, 999), 0u);
  // The engine lost a[1]: a[1], a[2] and everything older (all of b) go.
  EXPECT_EQ(index.EvictThrough(0, index.TickOf(0, a[1])), 5);
  EXPECT_EQ(MatchAll(index, a)[0], 1);
  EXPECT_EQ(MatchAll(index, b)[0], 0);
  EXPECT_EQ(MatchAll(index, c)[0], 3);
}

TEST(ShadowIndexTest, ScalesTo256Instances) {
  ShadowIndex index(256);
  const auto chain = Chain(7, 20);
  for (int i = 0; i < 256; ++i) {
    index.SetCapacity(i, 100);
    if (i % 3 == 0) index.Insert(i, std::vector<uint64_t>(chain.begin(), chain.begin() + (i % 21)));
  }
  const auto m = MatchAll(index, chain);
  for (int i = 0; i < 256; ++i) {
    EXPECT_EQ(m[i], i % 3 == 0 ? i % 21 : 0) << i;
  }
  index.Clear(255);
  EXPECT_EQ(index.size(255), 0);
  EXPECT_EQ(MatchAll(index, chain)[255], 0);
  EXPECT_GT(index.MemoryBytes(), 0u);
}

TEST(ShadowIndexTest, ClearRemovesHolders) {
  ShadowIndex index(2);
  index.SetCapacity(0, 10);
  index.SetCapacity(1, 10);
  index.Insert(0, Chain(1, 5));
  index.Insert(1, Chain(1, 5));
  index.Clear(0);
  EXPECT_EQ(index.distinct_chunks(), 5);
  index.Clear(1);
  EXPECT_EQ(index.distinct_chunks(), 0);
  EXPECT_EQ(index.replicas(), 0);
}

}  // namespace
}  // namespace kvroute::router

namespace kvroute::router {
namespace {

std::vector<uint64_t> PoolChain(uint64_t base, int len) {
  std::vector<uint64_t> c;
  for (int i = 0; i < len; ++i) c.push_back(base * 7000003 + static_cast<uint64_t>(i) + 1);
  return c;
}

int32_t Held(const ShadowIndex& index, const std::vector<uint64_t>& chain) {
  std::vector<int32_t> m(index.num_instances());
  index.Match(chain, absl::MakeSpan(m));
  return m[0];
}

TEST(ShadowIndexPoolTest, RequestsInFlightLeaveLessRoomForCachedPrefixes) {
  ShadowIndex index(1);
  index.SetCapacity(0, 10);
  const auto a = PoolChain(1, 4);
  const auto b = PoolChain(2, 4);
  index.Insert(0, a);
  index.Insert(0, b);
  EXPECT_EQ(index.size(0), 8);
  // A request reusing a's 4 chunks that needs 5 more (its new prompt and output): the pool
  // has 10, so 1 chunk is left for free entries and b, the least recently freed, goes first.
  ShadowIndex::Pin pin = index.PinRequest(0, a, 4, 9);
  EXPECT_EQ(pin.chunks, 4);
  EXPECT_EQ(index.pinned(0), 4);
  EXPECT_EQ(index.reserved(0), 5);
  EXPECT_EQ(Held(index, a), 4);  // pinned chunks still match
  EXPECT_EQ(Held(index, b), 1);  // b's head only (tails are evicted first)
  // Pinned chunks are never evicted, whatever comes in.
  index.Insert(0, PoolChain(3, 6));
  EXPECT_EQ(Held(index, a), 4);
  // The request ends: its reservation is released, a becomes the most recently freed.
  index.Unpin(pin, a);
  EXPECT_EQ(index.pinned(0), 0);
  EXPECT_EQ(index.reserved(0), 0);
  index.Insert(0, PoolChain(4, 6));  // needs 6 of 10: a (newest) survives, chain 3 goes
  EXPECT_EQ(Held(index, a), 4);
  EXPECT_EQ(Held(index, PoolChain(3, 6)), 0);
  EXPECT_LE(index.size(0), index.capacity(0));
}

TEST(ShadowIndexPoolTest, SharedPrefixPinnedTwiceIsFreedOnce) {
  ShadowIndex index(1);
  index.SetCapacity(0, 8);
  const auto shared = PoolChain(1, 3);
  index.Insert(0, shared);
  ShadowIndex::Pin p1 = index.PinRequest(0, shared, 3, 3);
  ShadowIndex::Pin p2 = index.PinRequest(0, shared, 3, 3);
  EXPECT_EQ(index.pinned(0), 3);
  index.Unpin(p1, shared);
  EXPECT_EQ(index.pinned(0), 3);  // still reused by the second request
  index.Insert(0, PoolChain(2, 8));
  EXPECT_EQ(Held(index, shared), 3);
  index.Unpin(p2, shared);
  EXPECT_EQ(index.pinned(0), 0);
  index.Insert(0, PoolChain(3, 8));  // now evictable
  EXPECT_EQ(Held(index, shared), 0);
}

TEST(ShadowIndexPoolTest, PinStopsAtTheFirstMissingChunk) {
  ShadowIndex index(1);
  index.SetCapacity(0, 8);
  const auto a = PoolChain(1, 5);
  index.Insert(0, std::vector<uint64_t>(a.begin(), a.begin() + 2));
  ShadowIndex::Pin pin = index.PinRequest(0, a, 5, 5);
  EXPECT_EQ(pin.chunks, 2);
  EXPECT_EQ(pin.reserved, 3);  // the chunks it must compute
  index.Unpin(pin, a);
  EXPECT_EQ(index.pinned(0), 0);
}

// Three cold requests sharing a 2-chunk prefix are routed to a pool of 8
// while it holds nothing: their footprints (6 each) overcommit it.
TEST(ShadowIndexPoolTest, AStoredPrefixIsPinnedForRequestsRoutedBeforeIt) {
  ShadowIndex index(1);
  index.SetCapacity(0, 8);
  const auto shared = PoolChain(1, 2);
  auto with_tail = [&](uint64_t base) {
    auto c = shared;
    for (uint64_t v : PoolChain(base, 4)) c.push_back(v);
    return c;
  };
  const auto a = with_tail(2), b = with_tail(3), c = with_tail(4);
  ShadowIndex::Pin pa = index.PinRequest(0, a, 0, 6);
  ShadowIndex::Pin pb = index.PinRequest(0, b, 0, 6);
  ShadowIndex::Pin pc = index.PinRequest(0, c, 0, 6);
  EXPECT_EQ(index.reserved(0), 18);

  // `a` completes. Insert alone keeps nothing: 12 chunks reserved beside 8.
  index.Unpin(pa, a);
  index.Store(0, a);
  EXPECT_TRUE(index.Overfull(0));
  EXPECT_EQ(index.ExtendPin(pb, b), 2);
  EXPECT_EQ(index.ExtendPin(pc, c), 2);
  EXPECT_EQ(index.ExtendPin(pc, c), 0);  // nothing more is held
  index.Fit(0);
  EXPECT_EQ(pb.chunks, 2);
  EXPECT_EQ(pb.reserved, 4);  // the footprint stays 6
  EXPECT_EQ(index.pinned(0), 2);
  EXPECT_EQ(index.reserved(0), 8);
  EXPECT_EQ(Held(index, shared), 2);  // the shared prefix, pinned by both
  EXPECT_EQ(Held(index, a), 2);       // a's own tail did not fit
  EXPECT_FALSE(index.Overfull(0));

  // Freed once by each: the prefix is then the most recently freed.
  index.Unpin(pb, b);
  EXPECT_EQ(index.pinned(0), 2);
  index.Unpin(pc, c);
  EXPECT_EQ(index.pinned(0), 0);
  EXPECT_EQ(index.reserved(0), 0);
  EXPECT_EQ(Held(index, shared), 2);
}

// A request of 6 chunks, 2 of them held when it was routed, footprint 8
// (6 of prompt, 2 of output), first-tokens: the instance now holds its whole
// prompt, pinned, out of the reservation, and a request extending it
// matches all of it while the first still runs. The chunks the pin held at
// routing keep their ticks; the prompt's tail is touched now.
TEST(ShadowIndexPoolTest, AComputedPromptIsHeldBeforeItsRequestEnds) {
  ShadowIndex index(2);
  index.SetCapacity(0, 10);
  index.SetCapacity(1, 10);
  const auto prompt = PoolChain(1, 6);
  index.Insert(0, std::vector<uint64_t>(prompt.begin(), prompt.begin() + 2));
  const uint64_t held_tick = index.TickOf(0, prompt[0]);
  ShadowIndex::Pin pin = index.PinRequest(0, prompt, 2, 8);
  EXPECT_EQ(pin.chunks, 2);
  EXPECT_EQ(pin.reserved, 6);
  auto next = prompt;
  next.push_back(99);
  EXPECT_EQ(MatchAll(index, next), (std::vector<int32_t>{2, 0}));

  EXPECT_EQ(index.HoldComputed(pin, prompt), 4);
  EXPECT_EQ(pin.chunks, 6);
  EXPECT_EQ(pin.reserved, 2);  // the footprint stays 8
  EXPECT_EQ(index.pinned(0), 6);
  EXPECT_EQ(index.reserved(0), 2);
  EXPECT_EQ(index.size(0), 6);
  EXPECT_EQ(MatchAll(index, next), (std::vector<int32_t>{6, 0}));
  EXPECT_EQ(index.TickOf(0, prompt[0]), held_tick);
  EXPECT_GT(index.TickOf(0, prompt[5]), held_tick);
  EXPECT_EQ(index.HoldComputed(pin, prompt), 0);  // nothing more to hold

  // The request ends: its whole prompt is the most recently freed.
  index.Unpin(pin, prompt);
  EXPECT_EQ(index.pinned(0), 0);
  EXPECT_EQ(index.reserved(0), 0);
  EXPECT_EQ(Held(index, prompt), 6);
}

// A footprint estimated smaller than the prompt bounds what is held: the
// reservation is all a pin may turn into entries. A pin from before a
// Clear() holds nothing.
TEST(ShadowIndexPoolTest, HoldComputedStaysWithinTheFootprint) {
  ShadowIndex index(1);
  index.SetCapacity(0, 10);
  const auto prompt = PoolChain(1, 6);
  ShadowIndex::Pin pin = index.PinRequest(0, prompt, 0, 4);
  EXPECT_EQ(index.HoldComputed(pin, prompt), 4);
  EXPECT_EQ(pin.reserved, 0);
  EXPECT_EQ(index.size(0), 4);
  ShadowIndex::Pin stale = index.PinRequest(0, PoolChain(2, 3), 0, 3);
  index.Clear(0);
  EXPECT_EQ(index.HoldComputed(stale, PoolChain(2, 3)), 0);
  EXPECT_EQ(index.size(0), 0);
}

TEST(ShadowIndexPoolTest, ClearVoidsEarlierPins) {
  ShadowIndex index(2);
  index.SetCapacity(0, 8);
  index.SetCapacity(1, 8);
  const auto a = PoolChain(1, 3);
  index.Insert(0, a);
  ShadowIndex::Pin pin = index.PinRequest(0, a, 3, 5);
  index.Clear(0);
  EXPECT_EQ(index.size(0), 0);
  EXPECT_EQ(index.reserved(0), 0);
  index.Insert(0, a);
  index.Unpin(pin, a);  // from before the Clear: ignored
  EXPECT_EQ(index.pinned(0), 0);
  EXPECT_EQ(index.reserved(0), 0);
  EXPECT_EQ(Held(index, a), 3);
}

TEST(ShadowIndexPoolTest, EvictLeastRecentlyFreedDropsFreeEntriesOldestFirst) {
  ShadowIndex index(1);
  index.SetCapacity(0, 10);
  const auto a = PoolChain(1, 3);
  const auto b = PoolChain(2, 3);
  index.Insert(0, a);
  index.Insert(0, b);
  ShadowIndex::Pin pin = index.PinRequest(0, b, 3, 3);
  // The engine evicted 2 blocks: a's tail, then the chunk before it.
  EXPECT_EQ(index.EvictLeastRecentlyFreed(0, 2), 2);
  EXPECT_EQ(Held(index, a), 1);
  // Pinned entries are not in the free queue.
  EXPECT_EQ(index.EvictLeastRecentlyFreed(0, 10), 1);
  EXPECT_EQ(Held(index, b), 3);
  index.Unpin(pin, b);
}

TEST(ShadowIndexPoolTest, EngineReportsPayOffWhatReservationsEvictedFirst) {
  ShadowIndex index(1);
  index.SetCapacity(0, 10);
  const auto a = PoolChain(1, 4);
  const auto b = PoolChain(2, 4);
  const auto c = PoolChain(3, 2);
  index.Insert(0, c);
  index.Insert(0, a);
  index.Insert(0, b);
  index.SetEngineEvicts(0, true);
  // As in RequestsInFlightLeaveLessRoomForCachedPrefixes, with c (oldest) beside: the routed
  // request's reservation of 5 leaves room for 1 free entry, so c and 3 of b go ahead of the
  // engine.
  ShadowIndex::Pin pin = index.PinRequest(0, a, 4, 9);
  EXPECT_EQ(Held(index, b), 1);
  EXPECT_EQ(Held(index, c), 0);
  EXPECT_EQ(index.evicted_ahead(0), 5);
  // The engine admits the request and reports those 5 evictions: already done, nothing more.
  EXPECT_EQ(index.EvictLeastRecentlyFreed(0, 5), 0);
  EXPECT_EQ(Held(index, b), 1);
  // An eviction the shadow did not foresee (another client's request) evicts.
  EXPECT_EQ(index.EvictLeastRecentlyFreed(0, 1), 1);
  EXPECT_EQ(Held(index, b), 0);
  EXPECT_EQ(Held(index, a), 4);  // pinned
  index.Unpin(pin, a);
  EXPECT_EQ(index.evicted_ahead(0), 0);
}

TEST(ShadowIndexPoolTest, CreditNeverExceedsWhatIsReserved) {
  ShadowIndex index(1);
  index.SetCapacity(0, 8);
  index.SetEngineEvicts(0, true);
  const auto a = PoolChain(1, 8);
  index.Insert(0, a);
  ShadowIndex::Pin pin = index.PinRequest(0, PoolChain(2, 3), 0, 3);
  EXPECT_EQ(index.evicted_ahead(0), 3);
  // The request ended before the engine evicted for it (it needed less): the credit goes
  // with its reservation, and the engine's next report evicts in full.
  index.Unpin(pin, PoolChain(2, 3));
  EXPECT_EQ(index.evicted_ahead(0), 0);
  EXPECT_EQ(index.EvictLeastRecentlyFreed(0, 2), 2);
  EXPECT_EQ(Held(index, a), 3);
}

}  // namespace
}  // namespace kvroute::router
