#include "router/session_table.h"

#include "gtest/gtest.h"

namespace kvroute::router {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

TEST(SessionTableTest, AssignLookupAndTtl) {
  SessionTable t(10, absl::Minutes(30));
  EXPECT_EQ(t.Lookup("s", kT0), -1);
  t.Assign("s", 3, kT0);
  EXPECT_EQ(t.Lookup("s", kT0 + absl::Minutes(29)), 3);
  t.Assign("s", 5, kT0 + absl::Minutes(20));  // refreshes
  EXPECT_EQ(t.Lookup("s", kT0 + absl::Minutes(49)), 5);
  EXPECT_EQ(t.Lookup("s", kT0 + absl::Minutes(50)), -1);  // expired
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.Lookup("", kT0), -1);
  t.Assign("", 1, kT0);  // no session: nothing stored
  EXPECT_EQ(t.size(), 0u);
}

TEST(SessionTableTest, LruBound) {
  SessionTable t(3, absl::Hours(1));
  t.Assign("a", 0, kT0);
  t.Assign("b", 1, kT0 + absl::Seconds(1));
  t.Assign("c", 2, kT0 + absl::Seconds(2));
  t.Assign("a", 0, kT0 + absl::Seconds(3));  // a is the most recent again
  t.Assign("d", 3, kT0 + absl::Seconds(4));  // evicts b
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.Lookup("b", kT0 + absl::Seconds(5)), -1);
  EXPECT_EQ(t.Lookup("a", kT0 + absl::Seconds(5)), 0);
  EXPECT_EQ(t.Lookup("c", kT0 + absl::Seconds(5)), 2);
  EXPECT_EQ(t.Lookup("d", kT0 + absl::Seconds(5)), 3);
}

TEST(SessionTableTest, ExpiredTailIsPurgedOnAssign) {
  SessionTable t(100, absl::Minutes(1));
  for (int i = 0; i < 50; ++i) t.Assign("s" + std::to_string(i), i % 4, kT0);
  EXPECT_EQ(t.size(), 50u);
  t.Assign("late", 1, kT0 + absl::Minutes(2));
  EXPECT_EQ(t.size(), 1u);
}

TEST(SessionTableTest, ZeroCapacityStoresNothing) {
  SessionTable t(0, absl::Minutes(1));
  t.Assign("a", 1, kT0);
  EXPECT_EQ(t.Lookup("a", kT0), -1);
}


TEST(SessionTableTest, ResidentFootprintsPerInstance) {
  SessionTable t(10, absl::Minutes(30), absl::Seconds(60));
  t.Assign("a", 0, kT0, 1000);
  t.Assign("b", 0, kT0 + absl::Seconds(10), 2000);
  t.Assign("c", 1, kT0 + absl::Seconds(20), 500);
  t.AgeResident(kT0 + absl::Seconds(20));
  EXPECT_EQ(t.ResidentTokens(0), 3000);
  EXPECT_EQ(t.ResidentTokens(1), 500);
  EXPECT_EQ(t.ResidentTokens(7), 0);  // no session there yet

  // A new request replaces the session's footprint; a move takes it along.
  t.Assign("a", 0, kT0 + absl::Seconds(30), 1500);
  t.Assign("b", 1, kT0 + absl::Seconds(40), 2500);
  t.AgeResident(kT0 + absl::Seconds(40));
  EXPECT_EQ(t.ResidentTokens(0), 1500);
  EXPECT_EQ(t.ResidentTokens(1), 3000);

  // What the engine held after the request becomes the footprint.
  t.RecordCompletion("a", 0, /*last_chunk_hash=*/7, /*prompt_chunks=*/3, /*held_tokens=*/1700);
  t.RecordCompletion("a", 1, 7, 3, 9999);  // not its instance: ignored
  EXPECT_EQ(t.ResidentTokens(0), 1700);

  // A session counts while its request is in flight, and for the window after the last one
  // ends; then it is gone from the demand, but still homed for affinity.
  t.Finish("c", kT0 + absl::Seconds(41));
  for (int i = 0; i < 2; ++i) {
    t.Finish("a", kT0 + absl::Seconds(45));
    t.Finish("b", kT0 + absl::Seconds(45));
  }
  t.Assign("d", 2, kT0 + absl::Seconds(50), 700);  // in flight from here on
  t.AgeResident(kT0 + absl::Seconds(100));
  EXPECT_EQ(t.ResidentTokens(1), 3000);
  t.AgeResident(kT0 + absl::Seconds(101));  // c has been idle 60 s
  EXPECT_EQ(t.ResidentTokens(1), 2500);
  EXPECT_EQ(t.Lookup("c", kT0 + absl::Seconds(101)), 1);
  t.AgeResident(kT0 + absl::Seconds(200));
  EXPECT_EQ(t.ResidentTokens(0), 0);
  EXPECT_EQ(t.ResidentTokens(1), 0);
  EXPECT_EQ(t.ResidentTokens(2), 700);  // its request is still running
  t.Finish("d", kT0 + absl::Seconds(210));
  t.AgeResident(kT0 + absl::Seconds(269));
  EXPECT_EQ(t.ResidentTokens(2), 700);
  t.AgeResident(kT0 + absl::Seconds(270));
  EXPECT_EQ(t.ResidentTokens(2), 0);

  // Back again: counted again.
  t.Assign("c", 1, kT0 + absl::Seconds(280), 800);
  t.AgeResident(kT0 + absl::Seconds(280));
  EXPECT_EQ(t.ResidentTokens(1), 800);
}

TEST(SessionTableTest, ResidentFootprintsSurviveEvictionAndExpiry) {
  SessionTable t(2, absl::Seconds(100), absl::Seconds(60));
  t.Assign("a", 0, kT0, 1000);
  t.Assign("b", 0, kT0 + absl::Seconds(1), 2000);
  t.Assign("c", 0, kT0 + absl::Seconds(2), 4000);  // evicts a (LRU bound)
  t.Finish("b", kT0 + absl::Seconds(1));
  t.Finish("c", kT0 + absl::Seconds(2));
  t.AgeResident(kT0 + absl::Seconds(2));
  EXPECT_EQ(t.ResidentTokens(0), 6000);
  // b expires on lookup (TTL) after it left the demand.
  t.AgeResident(kT0 + absl::Seconds(61));
  EXPECT_EQ(t.ResidentTokens(0), 4000);
  EXPECT_EQ(t.Lookup("b", kT0 + absl::Seconds(101)), -1);
  EXPECT_EQ(t.ResidentTokens(0), 4000);
  // c expires while still counted (a TTL shorter than the window is the operator's choice).
  SessionTable short_ttl(10, absl::Seconds(5), absl::Seconds(60));
  short_ttl.Assign("c", 2, kT0, 4000);
  short_ttl.Finish("c", kT0);
  EXPECT_EQ(short_ttl.Lookup("c", kT0 + absl::Seconds(6)), -1);
  short_ttl.AgeResident(kT0 + absl::Seconds(6));
  EXPECT_EQ(short_ttl.ResidentTokens(2), 0);
  // No window: nothing is counted.
  SessionTable off(10, absl::Minutes(30));
  off.Assign("a", 0, kT0, 1000);
  off.AgeResident(kT0);
  EXPECT_EQ(off.ResidentTokens(0), 0);
}

}  // namespace
}  // namespace kvroute::router
