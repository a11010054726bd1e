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

// The pause before a session's request is taken once per ended request, and
// only when nothing of the session was routed since it ended.
TEST(SessionTableTest, APauseIsTakenOncePerEndedRequest) {
  SessionTable t(100, absl::Minutes(10));
  EXPECT_FALSE(t.TakePause("a", kT0).has_value()) << "unknown";
  t.Assign("a", 0, kT0);
  EXPECT_FALSE(t.TakePause("a", kT0 + absl::Seconds(1)).has_value()) << "nothing ended yet";
  t.Finish("a", kT0 + absl::Seconds(10));
  EXPECT_EQ(t.TakePause("a", kT0 + absl::Seconds(14)), absl::Seconds(4));
  EXPECT_FALSE(t.TakePause("a", kT0 + absl::Seconds(20)).has_value()) << "a retry";
  t.Assign("a", 1, kT0 + absl::Seconds(20));  // a new instance keeps the times
  EXPECT_FALSE(t.TakePause("a", kT0 + absl::Seconds(21)).has_value()) << "sent while one runs";
  t.Assign("a", 1, kT0 + absl::Seconds(21));
  t.Finish("a", kT0 + absl::Seconds(40));
  EXPECT_EQ(t.TakePause("a", kT0 + absl::Seconds(45)), absl::Seconds(5));
  EXPECT_FALSE(t.TakePause("", kT0).has_value());
  // A record taken over from another replica, whose turn ended at 50 s:
  // this request continues it.
  t.Assign("a", 2, kT0 + absl::Seconds(60), /*routed=*/false);
  t.Finish("a", kT0 + absl::Seconds(50));
  EXPECT_EQ(t.TakePause("a", kT0 + absl::Seconds(60)), absl::Seconds(10));
}

TEST(SessionTableTest, ZeroCapacityStoresNothing) {
  SessionTable t(0, absl::Minutes(1));
  t.Assign("a", 1, kT0);
  EXPECT_EQ(t.Lookup("a", kT0), -1);
}

}  // namespace
}  // namespace kvroute::router
