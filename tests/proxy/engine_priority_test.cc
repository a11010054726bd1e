// The deadline kvroute gives an engine that schedules by priority, and where
// it goes in a request body.
#include "proxy/engine_priority.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <string>

namespace kvroute::proxy {
namespace {
namespace json = boost::json;

router::Decision Colocated(int64_t prompt, int64_t cached_on_prefill) {
  router::Decision d;
  d.prompt_tokens_est = prompt;
  d.prefill_cached_tokens_est = cached_on_prefill;
  d.cached_tokens_est = cached_on_prefill;
  return d;
}

TEST(DeadlinePriorityTest, ArrivalPlusTheSloOfTheClassOnThePrefillInstance) {
  router::Options o;
  o.slo.ttft_warm_s = 2;
  o.slo.ttft_medium_s = 10;
  o.slo.ttft_heavy_s = 30;
  const double arrival = 1'795'617'936.5;
  const int64_t arrival_ms = 1'795'617'936'500;
  // 60k prompt, 58k cached: WARM.
  EXPECT_EQ(DeadlinePriority(Colocated(60000, 58000), o, arrival), arrival_ms + 2000);
  // 12k new tokens: MEDIUM.
  EXPECT_EQ(DeadlinePriority(Colocated(12000, 0), o, arrival), arrival_ms + 10000);
  // 60k cold: HEAVY.
  EXPECT_EQ(DeadlinePriority(Colocated(60000, 0), o, arrival), arrival_ms + 30000);
}

TEST(DeadlinePriorityTest, AColdPrefillAwayFromTheCacheIsNotWarm) {
  router::Options o;
  router::Decision d = Colocated(60000, 0);
  d.best_cached_tokens_est = 58000;  // another instance holds the prefix
  d.request_class = router::RequestClass::kWarm;
  EXPECT_EQ(DeadlinePriority(d, o, 100.0), 100'000 + 30'000);
}

TEST(DeadlinePriorityTest, ALaterWarmTurnGoesBeforeAnEarlierColdOne) {
  router::Options o;
  const int64_t cold = DeadlinePriority(Colocated(60000, 0), o, 1000.0);
  const int64_t warm_soon = DeadlinePriority(Colocated(60000, 59000), o, 1020.0);
  const int64_t warm_late = DeadlinePriority(Colocated(60000, 59000), o, 1029.0);
  EXPECT_LT(warm_soon, cold);
  // Waiting bounded: a WARM turn more than (heavy - warm) SLO later goes after.
  EXPECT_GT(warm_late, cold);
}

std::string Apply(const std::string& body, const BodyInsert& e) {
  std::string out = body;
  out.insert(e.at, e.text);
  return out;
}

TEST(PlanPriorityTest, FirstMemberOfTheObject) {
  const std::string body = R"({"model":"m","stream":true})";
  const auto e = PlanPriority(body, 42);
  ASSERT_TRUE(e.has_value());
  const std::string out = Apply(body, *e);
  EXPECT_EQ(out, R"({"priority":42,"model":"m","stream":true})");
  EXPECT_EQ(json::parse(out).as_object().at("priority").as_int64(), 42);
}

TEST(PlanPriorityTest, WhitespaceAndEmptyObjects) {
  const std::string spaced = " \n{ \"a\": 1 }";
  const auto e1 = PlanPriority(spaced, -7);
  ASSERT_TRUE(e1.has_value());
  EXPECT_EQ(json::parse(Apply(spaced, *e1)).as_object().at("priority").as_int64(), -7);
  const std::string empty = "{ }";
  const auto e2 = PlanPriority(empty, 1'795'617'966'500);
  ASSERT_TRUE(e2.has_value());
  EXPECT_EQ(Apply(empty, *e2), R"({"priority":1795617966500 })");
  EXPECT_EQ(json::parse(Apply(empty, *e2)).as_object().size(), 1u);
}

TEST(PlanPriorityTest, NotAnObject) {
  EXPECT_FALSE(PlanPriority("[1,2]", 1).has_value());
  EXPECT_FALSE(PlanPriority("", 1).has_value());
  EXPECT_FALSE(PlanPriority("  \"x\"", 1).has_value());
}

TEST(PlanPriorityTest, AClientsOwnPriorityIsTheOneALastWinsReaderKeeps) {
  const std::string body = R"({"priority":-5,"model":"m"})";
  const auto e = PlanPriority(body, 99);
  ASSERT_TRUE(e.has_value());
  // Boost.JSON, like Python's json (vLLM), keeps the last of duplicate keys.
  EXPECT_EQ(json::parse(Apply(body, *e)).as_object().at("priority").as_int64(), -5);
}

}  // namespace
}  // namespace kvroute::proxy
