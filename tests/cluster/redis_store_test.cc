// RedisStore against a real redis-server on loopback. Every store runs with
// its timer off (ClusterOptions::periodic = false): each step that needs a
// write or a pull calls SyncNow(), so nothing happens between the steps and
// no test waits for time to pass.
#include "cluster/redis_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/cluster/redis_server.h"

namespace kvroute::cluster {
namespace {

using testing::RedisServer;

class RedisStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const absl::Status st = server_.Start();
    ASSERT_TRUE(st.ok()) << st.message();
  }
  void TearDown() override { server_.Kill(); }

  ClusterOptions Options(const std::string& replica_id) const {
    ClusterOptions o;
    o.store = server_.url();
    o.replica_id = replica_id;
    o.periodic = false;
    // Generous: a loaded CI machine must not turn a slow reply into a failure.
    o.lease_s = 60;
    o.op_timeout_s = 5;
    return o;
  }

  std::unique_ptr<RedisStore> Store(const ClusterOptions& o) {
    absl::StatusOr<std::unique_ptr<RedisStore>> s = RedisStore::Create(o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }
  std::unique_ptr<RedisStore> Store(const std::string& replica_id) {
    return Store(Options(replica_id));
  }

  // The tokens the instance's reservation hash holds, summed.
  int64_t HeldTokens(const std::string& instance) const {
    const std::string all = server_.Query({"HVALS", "kvroute:resv:" + instance});
    int64_t sum = 0;
    // Each value: "owner:tokens:serial:reserved at:turns".
    for (absl::string_view v : absl::StrSplit(all, ',', absl::SkipEmpty())) {
      std::vector<absl::string_view> f = absl::StrSplit(v, ':');
      int64_t tokens = 0;
      EXPECT_TRUE(f.size() == 5 && absl::SimpleAtoi(f[1], &tokens)) << v;
      sum += tokens;
    }
    return sum;
  }

  RedisServer server_;
};

TEST_F(RedisStoreTest, ReplicasSeeEachOthersLoadSummedAndRatesMerged) {
  auto a = Store("a");
  auto b = Store("b");
  auto c = Store("c");
  a->PublishLoad(
      {{"gpu0", {.requests = 1, .prefill_tokens = 100, .tokens = 1000, .decoding_requests = 1}}});
  b->PublishLoad({{"gpu0", {.requests = 2, .prefill_tokens = 200, .tokens = 2000}},
                  {"gpu1", {.requests = 5, .prefill_tokens = 0, .tokens = 700, .waiting = 2}}});
  c->PublishLoad({{"gpu1", {.requests = 1, .prefill_tokens = 10, .tokens = 30, .waiting = 1}}});
  a->PublishRates({{"gpu0", 1.0}});
  b->PublishRates({{"gpu0", 2.0}, {"gpu1", 0.5}});
  for (auto* s : {a.get(), b.get(), c.get()}) ASSERT_TRUE(s->SyncNow().ok());
  ASSERT_TRUE(c->SyncNow().ok());  // a and b have written by now

  std::shared_ptr<const PeerView> seen_by_c = c->View();
  EXPECT_FALSE(seen_by_c->stale);
  EXPECT_EQ(seen_by_c->live_replicas, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(
      seen_by_c->load.at("gpu0"),
      (InstanceLoad{.requests = 3, .prefill_tokens = 300, .tokens = 3000, .decoding_requests = 1}));
  EXPECT_EQ(seen_by_c->load.at("gpu1"),
            (InstanceLoad{
                .requests = 5, .prefill_tokens = 0, .tokens = 700, .waiting = 2}));  // not c's own
  EXPECT_DOUBLE_EQ(seen_by_c->rate_factors.at("gpu0"), 1.5);
  EXPECT_DOUBLE_EQ(seen_by_c->rate_factors.at("gpu1"), 0.5);

  ASSERT_TRUE(a->SyncNow().ok());
  std::shared_ptr<const PeerView> seen_by_a = a->View();
  EXPECT_EQ(seen_by_a->load.at("gpu0"),
            (InstanceLoad{.requests = 2, .prefill_tokens = 200, .tokens = 2000}));
  EXPECT_EQ(seen_by_a->load.at("gpu1"),
            (InstanceLoad{.requests = 6, .prefill_tokens = 10, .tokens = 730, .waiting = 3}));
  EXPECT_EQ(a->stats().syncs, 2u);

  // A new load replaces the old one whole: gpu0 goes from b's figures.
  b->PublishLoad({{"gpu1", {.requests = 1, .prefill_tokens = 0, .tokens = 1}}});
  ASSERT_TRUE(b->SyncNow().ok());
  ASSERT_TRUE(a->SyncNow().ok());
  EXPECT_FALSE(a->View()->load.contains("gpu0"));
  EXPECT_EQ(a->View()->load.at("gpu1").tokens, 31);
}

// The residency gates' residents travel with the load: per instance, the
// other replicas' sessions, a session several hold at its largest footprint,
// and the load figures unchanged by them.
TEST_F(RedisStoreTest, ReplicasSeeEachOthersResidentSessions) {
  auto a = Store("a");
  auto b = Store("b");
  auto c = Store("c");
  a->PublishLoad({{"gpu0", {.requests = 1, .residents = {{"s1", 100}, {"s 2", 50}}}}});
  b->PublishLoad({{"gpu0", {.requests = 2, .residents = {{"s1", 120}, {"bad\nid", 9}}}},
                  {"gpu1", {.requests = 1, .residents = {{"s3", 70}}}}});
  c->PublishLoad({{"gpu0", {.requests = 1, .residents = {{"mine", 10}}}}});
  for (auto* s : {a.get(), b.get(), c.get()}) ASSERT_TRUE(s->SyncNow().ok());
  ASSERT_TRUE(c->SyncNow().ok());
  std::shared_ptr<const PeerView> v = c->View();
  EXPECT_EQ(v->residents.at("gpu0"),
            (absl::flat_hash_map<std::string, int64_t>{{"s1", 120}, {"s 2", 50}}));
  EXPECT_EQ(v->residents.at("gpu1"), (absl::flat_hash_map<std::string, int64_t>{{"s3", 70}}));
  EXPECT_EQ(v->load.at("gpu0").requests, 3);
  EXPECT_TRUE(v->load.at("gpu0").residents.empty());
  EXPECT_FALSE(v->load.contains("\x1eresidents:gpu0"));
}

TEST_F(RedisStoreTest, PerReplicaKeysExpireWithTheLease) {
  auto a = Store("a");
  a->PublishLoad({{"gpu0", {.requests = 1}}});
  a->PublishRates({{"gpu0", 1.2}});
  ASSERT_TRUE(a->SyncNow().ok());
  for (const char* key : {"kvroute:replica:a", "kvroute:load:a", "kvroute:rates:a"}) {
    int64_t pttl = 0;
    ASSERT_TRUE(absl::SimpleAtoi(server_.Query({"PTTL", key}), &pttl)) << key;
    EXPECT_GT(pttl, 0) << key;
    EXPECT_LE(pttl, 60000) << key;
  }
}

TEST_F(RedisStoreTest, AReplicaWhoseLeaseIsGoneDisappearsWithItsReservations) {
  auto a = Store("a");
  auto b = Store("b");
  a->PublishLoad({{"gpu0", {.requests = 4, .prefill_tokens = 0, .tokens = 400}}});
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(b->SyncNow().ok());
  ASSERT_EQ(b->View()->live_replicas, (std::vector<std::string>{"a", "b"}));
  absl::StatusOr<Reservation> held = a->Reserve("gpu0", "session-a", 60, 100, /*force=*/false);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_TRUE(held->admitted);
  absl::StatusOr<Reservation> refused = b->Reserve("gpu0", "session-b", 60, 100, /*force=*/false);
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_FALSE(refused->admitted);

  // The lease expiring, without the wait.
  ASSERT_EQ(server_.Query({"DEL", "kvroute:replica:a"}), "1");
  ASSERT_TRUE(b->SyncNow().ok());
  EXPECT_EQ(b->View()->live_replicas, (std::vector<std::string>{"b"}));
  EXPECT_FALSE(b->View()->load.contains("gpu0"));
  absl::StatusOr<Reservation> admitted = b->Reserve("gpu0", "session-b", 60, 100, /*force=*/false);
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_TRUE(admitted->admitted);
  EXPECT_EQ(server_.Query({"HKEYS", "kvroute:resv:gpu0"}), "session-b");

  // Without its lease in the store a replica does not reserve (its entry
  // would not count for the others); it fails open until it renews.
  absl::StatusOr<Reservation> leaseless = a->Reserve("gpu0", "session-c", 1, 100, /*force=*/false);
  EXPECT_EQ(leaseless.status().code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(b->SyncNow().ok());
  EXPECT_EQ(b->View()->live_replicas, (std::vector<std::string>{"a", "b"}));
}

TEST_F(RedisStoreTest, ConcurrentReservationsNeverAdmitBeyondFill) {
  auto a = Store("a");
  auto b = Store("b");
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(b->SyncNow().ok());
  constexpr int64_t kFill = 1000;
  constexpr int kThreadsPerStore = 2;
  constexpr int kPerThread = 50;  // 200 racing reservations in all
  std::atomic<int64_t> admitted_tokens{0};
  std::atomic<int> admitted{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (RedisStore* store : {a.get(), b.get()}) {
    for (int t = 0; t < kThreadsPerStore; ++t) {
      threads.emplace_back([&, store, t] {
        for (int i = 0; i < kPerThread; ++i) {
          const int64_t tokens = 10 + (i * 7 + t * 13) % 40;
          const std::string id = absl::StrCat(store == a.get() ? "a" : "b", "-", t, "-", i);
          absl::StatusOr<Reservation> r =
              store->Reserve("gpu0", id, tokens, kFill, /*force=*/false);
          if (!r.ok()) {
            ++errors;
          } else if (r->admitted) {
            ++admitted;
            admitted_tokens += tokens;
          }
        }
      });
    }
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(admitted.load(), 0);
  EXPECT_LE(admitted_tokens.load(), kFill);
  EXPECT_EQ(HeldTokens("gpu0"), admitted_tokens.load());
  const ClusterStoreStats sa = a->stats(), sb = b->stats();
  EXPECT_EQ(sa.reserve_admitted + sb.reserve_admitted, static_cast<uint64_t>(admitted.load()));
  EXPECT_EQ(sa.reserve_admitted + sa.reserve_refused + sb.reserve_admitted + sb.reserve_refused,
            200u);
}

TEST_F(RedisStoreTest, ReleaseFreesAndReservingAgainReplaces) {
  auto a = Store("a");
  auto b = Store("b");
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(b->SyncNow().ok());
  ASSERT_TRUE(a->Reserve("gpu0", "s1", 70, 100, false)->admitted);
  EXPECT_FALSE(b->Reserve("gpu0", "s2", 40, 100, false)->admitted);
  // The same id again replaces its entry rather than counting twice.
  EXPECT_TRUE(a->Reserve("gpu0", "s1", 90, 100, false)->admitted);
  EXPECT_EQ(HeldTokens("gpu0"), 90);
  // b's session, admitted beside it, grows past the fill: its next turn is a
  // resident's, admitted whatever the others hold, and no new admission
  // beyond the fill.
  a->Release("gpu0", "s1");
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(a->Reserve("gpu0", "s1", 60, 100, false)->admitted);
  ASSERT_TRUE(b->Reserve("gpu0", "s2", 40, 100, false)->admitted);
  absl::StatusOr<Reservation> grown = b->Reserve("gpu0", "s2", 55, 100, /*force=*/false);
  ASSERT_TRUE(grown.ok()) << grown.status();
  EXPECT_TRUE(grown->admitted);
  EXPECT_TRUE(grown->continued);
  EXPECT_EQ(grown->reserved_tokens, 115);
  EXPECT_EQ(b->stats().reserve_over_fill, 0u);
  // The session's next turn through another replica is its too.
  absl::StatusOr<Reservation> moved = a->Reserve("gpu0", "s2", 56, 100, /*force=*/false);
  EXPECT_TRUE(moved->admitted && moved->continued);
  EXPECT_EQ(HeldTokens("gpu0"), 116);
  a->Release("gpu0", "s1");
  a->Release("gpu0", "s2");
  ASSERT_TRUE(a->SyncNow().ok());
  EXPECT_EQ(HeldTokens("gpu0"), 0);
  ASSERT_TRUE(a->Reserve("gpu0", "s1", 90, 100, false)->admitted);

  // Only the owner's release deletes an entry.
  b->Release("gpu0", "s1");
  ASSERT_TRUE(b->SyncNow().ok());
  EXPECT_EQ(HeldTokens("gpu0"), 90);
  a->Release("gpu0", "s1");
  EXPECT_EQ(HeldTokens("gpu0"), 90);  // queued, not yet written
  ASSERT_TRUE(a->SyncNow().ok());
  EXPECT_EQ(HeldTokens("gpu0"), 0);
  EXPECT_TRUE(b->Reserve("gpu0", "s2", 40, 100, false)->admitted);

  // Nothing held: a reservation above the fill still gets its turn.
  b->Release("gpu0", "s2");
  ASSERT_TRUE(b->SyncNow().ok());
  EXPECT_TRUE(a->Reserve("gpu0", "huge", 500, 100, false)->admitted);
  EXPECT_FALSE(b->Reserve("gpu0", "small", 1, 100, false)->admitted);
}

TEST_F(RedisStoreTest, AForcedReservationMakesTheLeastRecentlyReservedYield) {
  auto a = Store("a");
  auto b = Store("b");
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(b->SyncNow().ok());
  // Reserved in this order: "old" the least recently. Distinct milliseconds
  // are set in the store rather than waited for.
  ASSERT_TRUE(a->Reserve("gpu0", "old", 40, 100, false)->admitted);
  ASSERT_TRUE(b->Reserve("gpu0", "mid", 30, 100, false)->admitted);
  ASSERT_TRUE(a->Reserve("gpu0", "new", 20, 100, false)->admitted);
  for (const auto& [id, at] : {std::pair{"old", "1000"}, {"mid", "2000"}, {"new", "3000"}}) {
    const std::string v = server_.Query({"HGET", "kvroute:resv:gpu0", id});
    const std::vector<std::string> f = absl::StrSplit(v, ':');
    ASSERT_EQ(f.size(), 5u) << v;
    ASSERT_EQ(server_.Query({"HSET", "kvroute:resv:gpu0", id,
                             absl::StrCat(f[0], ":", f[1], ":", f[2], ":", at, ":", f[4])}),
              "0");
  }

  absl::StatusOr<Reservation> refused = b->Reserve("gpu0", "late", 50, 100, /*force=*/false);
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_FALSE(refused->admitted);
  EXPECT_EQ(refused->reserved_tokens, 90);

  // 50 more needs 40 back: "old" alone yields.
  absl::StatusOr<Reservation> forced = b->Reserve("gpu0", "late", 50, 100, /*force=*/true);
  ASSERT_TRUE(forced.ok()) << forced.status();
  EXPECT_TRUE(forced->admitted);
  EXPECT_EQ(forced->evicted, 1);
  EXPECT_EQ(forced->reserved_tokens, 100);
  EXPECT_EQ(server_.Query({"HEXISTS", "kvroute:resv:gpu0", "old"}), "0");
  EXPECT_EQ(HeldTokens("gpu0"), 100);
  const ClusterStoreStats s = b->stats();
  EXPECT_EQ(s.reserve_forced, 1u);
  EXPECT_EQ(s.reserve_evicted, 1u);
  EXPECT_EQ(s.reserve_refused, 1u);
  EXPECT_EQ(s.reserve_over_fill, 0u);

  // Forced past everything: only a reservation larger than the fill on its
  // own goes beyond it, alone, which is no admission beyond the fill.
  absl::StatusOr<Reservation> huge = a->Reserve("gpu0", "huge", 150, 100, /*force=*/true);
  ASSERT_TRUE(huge.ok()) << huge.status();
  EXPECT_TRUE(huge->admitted);
  EXPECT_EQ(huge->reserved_tokens, 150);
  EXPECT_EQ(huge->evicted, 3);  // mid, new and late
  EXPECT_EQ(a->stats().reserve_over_fill, 0u);
}

// Refused turns keep their place, first come first served across replicas:
// a later one that would fit alone waits while it does not fit beside those
// ahead of it, and goes as soon as it does.
TEST_F(RedisStoreTest, RefusedTurnsGoInTheOrderTheyFirstAsked) {
  auto a = Store("a");
  auto b = Store("b");
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(b->SyncNow().ok());
  ASSERT_TRUE(a->Reserve("gpu0", "resident", 80, 100, false)->admitted);
  absl::StatusOr<Reservation> first = b->Reserve("gpu0", "first", 60, 100, false);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->admitted);
  EXPECT_EQ(first->waiting_ahead_tokens, 0);
  absl::StatusOr<Reservation> second = a->Reserve("gpu0", "second", 30, 100, false);
  EXPECT_FALSE(second->admitted);
  EXPECT_EQ(second->waiting_ahead_tokens, 60);

  // The resident's footprint shrinks to 30: "second" would fit alone (60)
  // but not beside "first" (120), which fits (90) and goes.
  ASSERT_TRUE(a->Reserve("gpu0", "resident", 30, 100, false)->continued);
  second = a->Reserve("gpu0", "second", 30, 100, false);
  EXPECT_FALSE(second->admitted);
  EXPECT_EQ(second->waiting_ahead_tokens, 60);
  first = b->Reserve("gpu0", "first", 60, 100, false);
  EXPECT_TRUE(first->admitted);
  EXPECT_EQ(first->reserved_tokens, 90);
  // A newcomer queues behind "second", which asks again and has its place.
  EXPECT_FALSE(b->Reserve("gpu0", "third", 5, 100, false)->admitted);
  a->Release("gpu0", "resident");
  ASSERT_TRUE(a->SyncNow().ok());
  EXPECT_EQ(b->Reserve("gpu0", "third", 5, 100, false)->admitted, true)
      << "room for 'second' (30) and 'third' (5) beside 60";
  second = a->Reserve("gpu0", "second", 30, 100, false);
  EXPECT_TRUE(second->admitted);
  EXPECT_EQ(second->waiting_ahead_tokens, 0);
  EXPECT_EQ(HeldTokens("gpu0"), 95);
  EXPECT_EQ(server_.Query({"HLEN", "kvroute:wait:gpu0"}), "0");
}

// A waiting turn keeps its place only while it asks again (or while its
// replica lives): one whose client left stops blocking the others.
TEST_F(RedisStoreTest, AWaitingTurnThatStopsAskingLosesItsPlace) {
  auto a = Store("a");
  auto b = Store("b");
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(b->SyncNow().ok());
  ASSERT_TRUE(a->Reserve("gpu0", "resident", 80, 100, false)->admitted);
  EXPECT_FALSE(b->Reserve("gpu0", "left", 90, 100, false)->admitted);
  EXPECT_FALSE(a->Reserve("gpu0", "dead", 50, 100, false)->admitted);
  a->Release("gpu0", "resident");
  ASSERT_TRUE(a->SyncNow().ok());
  EXPECT_FALSE(b->Reserve("gpu0", "next", 40, 100, false)->admitted) << "90 + 50 wait ahead";
  // "left" last asked long ago (set in the store rather than waited for).
  const std::string v = server_.Query({"HGET", "kvroute:wait:gpu0", "left"});
  const std::vector<std::string> f = absl::StrSplit(v, ':');
  ASSERT_EQ(f.size(), 4u) << v;
  ASSERT_EQ(server_.Query({"HSET", "kvroute:wait:gpu0", "left",
                           absl::StrCat(f[0], ":", f[1], ":", f[2], ":1000")}),
            "0");
  absl::StatusOr<Reservation> next = b->Reserve("gpu0", "next", 40, 100, false);
  EXPECT_TRUE(next->admitted) << "50 waits ahead now: room for both";
  EXPECT_EQ(next->waiting_ahead_tokens, 50);
  // "dead"'s replica loses its lease: its waiting turn goes with it.
  ASSERT_EQ(server_.Query({"DEL", "kvroute:replica:a"}), "1");
  next = b->Reserve("gpu0", "after", 60, 100, false);
  EXPECT_TRUE(next->admitted);
  EXPECT_EQ(next->waiting_ahead_tokens, 0);
  EXPECT_EQ(server_.Query({"HLEN", "kvroute:wait:gpu0"}), "0");
}

TEST_F(RedisStoreTest, AReleaseQueuedBeforeReservingAgainLeavesTheNewReservation) {
  auto a = Store("a");
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(a->Reserve("gpu0", "s1", 30, 100, false)->admitted);
  a->Release("gpu0", "s1");                                         // queued
  ASSERT_TRUE(a->Reserve("gpu0", "s1", 40, 100, false)->admitted);  // the session is back
  ASSERT_TRUE(a->SyncNow().ok());                                   // the release is written
  EXPECT_EQ(HeldTokens("gpu0"), 40);
  // Released after the second reservation, it goes.
  a->Release("gpu0", "s1");
  ASSERT_TRUE(a->SyncNow().ok());
  EXPECT_EQ(HeldTokens("gpu0"), 0);
}

TEST_F(RedisStoreTest, AResidentsTurnsAreCountedAcrossReplicasUntilItLeaves) {
  auto a = Store("a");
  auto b = Store("b");
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(b->SyncNow().ok());
  absl::StatusOr<Reservation> first = a->Reserve("gpu0", "s", 30, 100, false);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->continued);
  EXPECT_EQ(first->turns_before, 0);
  // Its next turns through either replica count on.
  EXPECT_EQ(b->Reserve("gpu0", "s", 32, 100, false)->turns_before, 1);
  EXPECT_EQ(a->Reserve("gpu0", "s", 34, 100, false)->turns_before, 2);
  absl::StatusOr<Reservation> third = b->Reserve("gpu0", "s", 36, 100, false);
  EXPECT_TRUE(third->continued);
  EXPECT_EQ(third->turns_before, 3);
  // Released (it yielded), its next reservation is new again.
  b->Release("gpu0", "s");
  ASSERT_TRUE(b->SyncNow().ok());
  absl::StatusOr<Reservation> again = a->Reserve("gpu0", "s", 38, 100, false);
  EXPECT_FALSE(again->continued);
  EXPECT_EQ(again->turns_before, 0);
  // A refused turn has run none there.
  absl::StatusOr<Reservation> refused = b->Reserve("gpu0", "other", 90, 100, false);
  EXPECT_FALSE(refused->admitted);
  EXPECT_EQ(refused->turns_before, 0);
}

TEST_F(RedisStoreTest, AReservationFirstAppliesTheReleasesQueuedForItsInstance) {
  auto a = Store("a");
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(a->Reserve("gpu0", "gone", 80, 100, false)->admitted);
  ASSERT_TRUE(a->Reserve("gpu1", "other", 80, 100, false)->admitted);
  a->Release("gpu0", "gone");
  a->Release("gpu1", "other");
  // No flush in between: the queued release of gpu0 makes the room.
  ASSERT_TRUE(a->Reserve("gpu0", "next", 60, 100, false)->admitted);
  EXPECT_EQ(HeldTokens("gpu0"), 60);
  EXPECT_EQ(HeldTokens("gpu1"), 80);  // still queued
  ASSERT_TRUE(a->SyncNow().ok());
  EXPECT_EQ(HeldTokens("gpu1"), 0);
}

TEST_F(RedisStoreTest, SessionHomesAreWrittenWithTheirTtlAndReadInABatch) {
  ClusterOptions o = Options("a");
  o.session_ttl_s = 30;
  auto a = Store(o);
  auto b = Store("b");
  a->PublishHome("s1", "gpu0");
  a->PublishHome("s1", "gpu3");  // coalesced: the latest wins
  a->PublishHome("s2", "gpu1");
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(b->SyncNow().ok());
  absl::StatusOr<absl::flat_hash_map<std::string, std::string>> homes =
      b->ReadHomes({"s1", "s2", "unknown"});
  ASSERT_TRUE(homes.ok()) << homes.status();
  EXPECT_EQ(*homes,
            (absl::flat_hash_map<std::string, std::string>{{"s1", "gpu3"}, {"s2", "gpu1"}}));
  int64_t pttl = 0;
  ASSERT_TRUE(absl::SimpleAtoi(server_.Query({"PTTL", "kvroute:home:s1"}), &pttl));
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, 30000);
}

TEST_F(RedisStoreTest, AStoreThatLeavesIsGoneAtThePeersNextPull) {
  auto a = Store("a");
  auto b = Store("b");
  a->PublishLoad({{"gpu0", {.requests = 1}}});
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(a->Reserve("gpu0", "s1", 10, 100, false)->admitted);
  a.reset();
  ASSERT_TRUE(b->SyncNow().ok());
  EXPECT_EQ(b->View()->live_replicas, (std::vector<std::string>{"b"}));
  EXPECT_TRUE(b->View()->load.empty());
  EXPECT_TRUE(b->Reserve("gpu0", "s2", 100, 100, false)->admitted);  // a's entry dropped
}

TEST_F(RedisStoreTest, AnUnreachableStoreBlocksNothing) {
  ClusterOptions o = Options("a");
  o.max_pending_writes = 4;
  auto a = Store(o);
  auto b = Store("b");
  b->PublishLoad({{"gpu0", {.requests = 2}}});
  ASSERT_TRUE(b->SyncNow().ok());
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(a->connected());
  ASSERT_EQ(a->View()->load.at("gpu0").requests, 2);
  ASSERT_TRUE(a->Reserve("gpu0", "s9", 10, 100, false)->admitted);

  server_.Kill();
  EXPECT_FALSE(a->SyncNow().ok());
  EXPECT_FALSE(a->connected());
  // The last view stays, marked stale.
  std::shared_ptr<const PeerView> view = a->View();
  EXPECT_TRUE(view->stale);
  EXPECT_EQ(view->load.at("gpu0").requests, 2);
  // Admission and home reads fail open at once.
  absl::StatusOr<Reservation> r = a->Reserve("gpu0", "s1", 10, 100, /*force=*/false);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(a->ReadHomes({"s1"}).status().code(), absl::StatusCode::kUnavailable);
  // Writes queue up to the bound, then are dropped and counted.
  a->PublishLoad({{"gpu0", {.requests = 9}}});
  for (int i = 0; i < 6; ++i) a->PublishHome(absl::StrCat("s", i), "gpu0");
  a->Release("gpu0", "s9");
  EXPECT_FALSE(a->SyncNow().ok());  // the queued writes survive a failed cycle
  const ClusterStoreStats s = a->stats();
  EXPECT_FALSE(s.connected);
  EXPECT_EQ(s.reserve_unavailable, 1u);
  EXPECT_EQ(s.reserve_admitted, 1u);
  EXPECT_EQ(s.writes_dropped, 3u);  // s4, s5 and the release
  EXPECT_GE(s.sync_failures, 2u);
}

TEST_F(RedisStoreTest, AReplicaRejoinsARestartedStoreAndRepublishes) {
  auto a = Store("a");
  auto b = Store("b");
  a->PublishLoad({{"gpu0", {.requests = 3, .prefill_tokens = 30, .tokens = 300}}});
  a->PublishRates({{"gpu0", 2.0}});
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(b->SyncNow().ok());

  server_.Kill();
  EXPECT_FALSE(a->SyncNow().ok());
  EXPECT_FALSE(b->SyncNow().ok());
  a->PublishHome("s1", "gpu0");  // written once the store is back
  ASSERT_TRUE(server_.Start(server_.port()).ok());
  ASSERT_EQ(server_.Query({"DBSIZE"}), "0");

  ASSERT_TRUE(a->SyncNow().ok());
  EXPECT_TRUE(a->connected());
  EXPECT_EQ(a->stats().reconnects, 1u);
  EXPECT_EQ(server_.Query({"GET", "kvroute:replica:a"}), "1");
  EXPECT_EQ(server_.Query({"GET", "kvroute:home:s1"}), "gpu0");
  ASSERT_TRUE(b->SyncNow().ok());
  EXPECT_TRUE(b->connected());
  std::shared_ptr<const PeerView> view = b->View();
  EXPECT_FALSE(view->stale);
  EXPECT_EQ(view->live_replicas, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(view->load.at("gpu0"),
            (InstanceLoad{.requests = 3, .prefill_tokens = 30, .tokens = 300}));
  EXPECT_DOUBLE_EQ(view->rate_factors.at("gpu0"), 2.0);
  // Admission works again on fresh connections (the old ones were closed).
  absl::StatusOr<Reservation> r = b->Reserve("gpu0", "s2", 10, 100, /*force=*/false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->admitted);
}

TEST_F(RedisStoreTest, PeersReadEachOthersPinsInOrderAndNotTheirOwn) {
  auto a = Store("a");
  auto b = Store("b");
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(b->SyncNow().ok());
  // Connecting is a reset: nothing from before is replayed.
  EXPECT_TRUE(b->TakePeerPins().reset);

  const RequestPin first{.instance = "gpu0", .id = 2, .footprint_chunks = 40, .chain = {7, 8, 9}};
  const RequestPin second{.instance = "gpu1", .id = 4, .footprint_chunks = 5, .chain = {}};
  a->PublishLoad({{"gpu0", {.requests = 1}}, {"gpu1", {.requests = 1}}});
  a->PublishPins({first, second}, {});
  ASSERT_TRUE(a->SyncNow().ok());
  EXPECT_TRUE(a->TakePeerPins().pinned.empty());  // its own are not its peers'
  ASSERT_TRUE(b->SyncNow().ok());
  PeerPinChanges got = b->TakePeerPins();
  EXPECT_FALSE(got.reset);
  ASSERT_EQ(got.pinned.size(), 2u);
  EXPECT_EQ(got.pinned[0], (std::pair<std::string, RequestPin>{"a", first}));
  EXPECT_EQ(got.pinned[1], (std::pair<std::string, RequestPin>{"a", second}));
  // The view that comes with them read the load written with them.
  EXPECT_EQ(got.view->load.at("gpu0").requests, 1);
  EXPECT_TRUE(b->TakePeerPins().pinned.empty());  // taken once

  // A pin given back before it was written is never written.
  a->PublishPins({{.instance = "gpu0", .id = 6, .footprint_chunks = 1, .chain = {1}}}, {});
  a->PublishPins({}, {6, 2});
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(b->SyncNow().ok());
  got = b->TakePeerPins();
  EXPECT_TRUE(got.pinned.empty());
  EXPECT_EQ(got.unpinned, (std::vector<std::pair<std::string, uint64_t>>{{"a", 2}}));
}

TEST_F(RedisStoreTest, PinsWrittenWhileTheStoreWasAwayAreWrittenOnItsReturn) {
  auto a = Store("a");
  auto b = Store("b");
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(b->SyncNow().ok());
  b->TakePeerPins();
  server_.Kill();
  a->PublishPins({{.instance = "gpu0", .id = 2, .footprint_chunks = 3, .chain = {5}}}, {});
  EXPECT_FALSE(a->SyncNow().ok());
  EXPECT_FALSE(b->SyncNow().ok());
  ASSERT_TRUE(server_.Start(server_.port()).ok());
  ASSERT_TRUE(b->SyncNow().ok());  // b rejoins first: a's pin is not written yet
  EXPECT_TRUE(b->TakePeerPins().reset);
  ASSERT_TRUE(a->SyncNow().ok());
  ASSERT_TRUE(b->SyncNow().ok());
  PeerPinChanges got = b->TakePeerPins();
  EXPECT_FALSE(got.reset);
  ASSERT_EQ(got.pinned.size(), 1u);
  EXPECT_EQ(got.pinned[0].second.chain, (std::vector<uint64_t>{5}));
}

// The one test with the timer on: the I/O thread connects, writes and
// pulls by itself. It waits for a condition, not for a time (the bound only
// stops a broken build from hanging).
TEST_F(RedisStoreTest, WithItsTimerOnTheStoreSyncsByItself) {
  ClusterOptions o = Options("a");
  o.periodic = true;
  o.sync_interval_s = 0.01;
  auto a = Store(o);
  auto b = Store("b");
  b->PublishLoad({{"gpu0", {.requests = 7}}});
  ASSERT_TRUE(b->SyncNow().ok());
  const absl::Time bound = absl::Now() + absl::Seconds(60);
  while (!a->View()->load.contains("gpu0") && absl::Now() < bound) std::this_thread::yield();
  ASSERT_TRUE(a->View()->load.contains("gpu0"));
  EXPECT_EQ(a->View()->load.at("gpu0").requests, 7);
  EXPECT_TRUE(a->connected());
  // Its own publication reaches b without a SyncNow on a.
  a->PublishLoad({{"gpu1", {.requests = 2}}});
  while (absl::Now() < bound) {
    ASSERT_TRUE(b->SyncNow().ok());
    if (b->View()->load.contains("gpu1")) break;
    std::this_thread::yield();
  }
  ASSERT_TRUE(b->View()->load.contains("gpu1"));
  EXPECT_EQ(b->View()->load.at("gpu1").requests, 2);
}

TEST_F(RedisStoreTest, ABadOptionIsRefusedAtCreate) {
  ClusterOptions o = Options("a");
  o.store = "none";
  EXPECT_EQ(RedisStore::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options("");
  EXPECT_EQ(RedisStore::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvroute::cluster
