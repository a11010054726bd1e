// The cache-aware router end to end: kvroute in front of 4 simulated vLLM
// instances (time scale 0), judged against the engines' own cached_tokens.
#include <gtest/gtest.h>

#include "tests/integration/harness.h"

namespace kvroute::testing {
namespace {

TEST(RouterSimTest, SessionTurnsAreWarmOnTheSameInstanceAndEstimatesMatchTheEngine) {
  FleetHarness h(4, "baseline");
  json::array messages;
  messages.push_back(Msg("system", Text(8000, 1)));
  messages.push_back(Msg("user", Text(24000, 2)));  // ~8k tokens: a cold MEDIUM turn
  std::string first_backend;
  for (int turn = 1; turn <= 3; ++turn) {
    auto res = h.Chat(messages, false, "job-1");
    ASSERT_EQ(res.result_int(), 200) << res.body();
    const std::string backend(res["X-Kvroute-Backend"]);
    if (turn == 1) {
      first_backend = backend;
      EXPECT_EQ(res["X-Kvroute-Class"], "MEDIUM");
    } else {
      EXPECT_EQ(res["X-Kvroute-Class"], "WARM") << "turn " << turn;
      EXPECT_EQ(backend, first_backend) << "turn " << turn;
    }
    messages.push_back(Msg("assistant", AssistantText(res.body())));
    messages.push_back(Msg("user", Text(3000, 10 + turn)));
  }
  const auto log = h.StopAndReadLog();
  ASSERT_EQ(log.size(), 3u);
  for (size_t i = 1; i < log.size(); ++i) {
    const double est = log[i].at("cached_tokens_est").to_number<double>();
    const double actual = log[i].at("cached_tokens").to_number<double>();
    ASSERT_GT(actual, 0) << "turn " << i + 1;
    EXPECT_NEAR(est, actual, 0.05 * actual)
        << "turn " << i + 1 << ": estimate " << est << " vs engine " << actual;
  }
}

TEST(RouterSimTest, ColdThirtyThousandTokenPromptIsHeavyAtDefaultThreshold) {
  json::array messages;
  messages.push_back(Msg("user", Text(120000, 3)));  // ~30k tokens at 4 bytes/token
  {
    FleetHarness h(4, "v1");
    auto res = h.Chat(messages, false);
    ASSERT_EQ(res.result_int(), 200) << res.body();
    EXPECT_EQ(res["X-Kvroute-Class"], "HEAVY");
  }
  {
    FleetHarness h(4, "v1", [](proxy::Config& c) {
      c.router.thresholds.heavy_threshold = 40000;
    });
    auto res = h.Chat(messages, false);
    ASSERT_EQ(res.result_int(), 200) << res.body();
    EXPECT_EQ(res["X-Kvroute-Class"], "MEDIUM");
  }
}

TEST(RouterSimTest, ShadowFollowsTheEnginesEvictions) {
  // One instance with 2,048 blocks x 16 = 32,768 tokens of KV; kvroute learns
  // the capacity from vllm:cache_config_info.
  // The engines report cached_tokens even when it is 0, so the evicted prompt's log line has
  // the engine's figure rather than "unknown".
  FleetHarness h(1, "baseline", {}, [](sim::Profile& p) {
    p.num_gpu_blocks_override = 2048;
    p.always_report_cached_tokens = true;
  });
  std::vector<json::array> prompts;
  for (int i = 0; i < 4; ++i) {
    json::array m;
    m.push_back(Msg("user", Text(48000, 100 + i)));  // ~12k tokens each
    prompts.push_back(m);
  }
  // Fill past capacity: prompt 0 is the least recently used and gets evicted.
  for (const auto& p : prompts) ASSERT_EQ(h.Chat(p, false).result_int(), 200);
  // Prompt 3 is still cached; prompt 0 is not.
  ASSERT_EQ(h.Chat(prompts[3], false).result_int(), 200);
  ASSERT_EQ(h.Chat(prompts[0], false).result_int(), 200);
  const auto log = h.StopAndReadLog();
  ASSERT_EQ(log.size(), 6u);
  std::string trace;
  for (const auto& l : log) trace += json::serialize(l) + "\n";
  SCOPED_TRACE(trace);
  const auto& hot = log[4];
  const auto& evicted = log[5];
  const double hot_actual = hot.at("cached_tokens").to_number<double>();
  EXPECT_GT(hot_actual, 0.9 * hot.at("prompt_tokens").to_number<double>());
  EXPECT_NEAR(hot.at("cached_tokens_est").to_number<double>(), hot_actual, 0.05 * hot_actual);
  EXPECT_LT(evicted.at("cached_tokens").to_number<double>(),
            0.05 * evicted.at("prompt_tokens").to_number<double>())
      << "the engine should have evicted prompt 0";
  EXPECT_LT(evicted.at("cached_tokens_est").to_number<double>(),
            0.05 * evicted.at("prompt_tokens").to_number<double>())
      << "the shadow index still believes prompt 0 is cached";
}

}  // namespace
}  // namespace kvroute::testing
