// End to end: simulated instances with a host tier (--kv-offloading-size) tell kvroute their
// capacities through vllm:cache_config_info, and kvroute's /metrics carries the live sizing
// gauges over them (router/live_sizing.h, docs/operator-guide.md "Live sizing").
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tests/integration/harness.h"
#include "tests/prometheus_sample.h"

namespace kvroute::testing {
namespace {

constexpr double kKvBytesPerToken = 65536;

double Gauge(const std::string& metrics, const std::string& name, const std::string& tier = "") {
  if (tier.empty()) return SampleValue(metrics, name).value_or(NAN);
  return SampleValue(metrics, name, {{"tier", tier}}).value_or(NAN);
}

TEST(LiveSizingSim, GaugesFollowTheEnginesTiersAndSessions) {
  FleetHarness h(
      2, "baseline",
      [](proxy::Config& c) { c.router.offload_cost.kv_bytes_per_token = kKvBytesPerToken; },
      [](sim::Profile& p) {
        p.block_size = 16;
        p.num_gpu_blocks_override = 256;  // 4,096 tokens of HBM KV
        p.max_model_len = 2048;
        p.kv_offloading.size_gib = 0.5;
      });
  auto metrics = [&] {
    return RequestOnce(h.server().port(), http::verb::get, "/metrics", "").body();
  };
  std::string m = metrics();
  EXPECT_EQ(Gauge(m, "kvroute_kv_instances"), 2);
  EXPECT_EQ(Gauge(m, "kvroute_kv_capacity_tokens", "gpu"), 2 * 4096);
  // 0.5 GiB / 64 KiB per token = 8,192 tokens per instance.
  EXPECT_EQ(Gauge(m, "kvroute_kv_capacity_tokens", "host"), 2 * 8192);
  EXPECT_EQ(Gauge(m, "kvroute_kv_instance_capacity_tokens", "host"), 8192);
  EXPECT_EQ(Gauge(m, "kvroute_kv_bytes_per_token"), kKvBytesPerToken);
  EXPECT_EQ(Gauge(m, "kvroute_kv_working_set_tokens"), 0);

  // Two turns of one session: it is resident with its last turn's footprint.
  json::array messages{Msg("user", Text(600, 3))};
  auto first = h.Chat(messages, /*stream=*/true, "s1", 16);
  ASSERT_EQ(first.result_int(), 200);
  messages.push_back(Msg("assistant", "ok"));
  messages.push_back(Msg("user", Text(200, 4)));
  auto second = h.Chat(messages, /*stream=*/true, "s1", 16);
  ASSERT_EQ(second.result_int(), 200);
  const Usage u = UsageOf(second.body());
  m = metrics();
  // Prompt + output once the router has the turn's usage (prompt estimate + max_tokens until
  // then: the client may see the end first), the estimate within a few percent.
  const double working_set = Gauge(m, "kvroute_kv_working_set_tokens");
  EXPECT_NEAR(working_set, static_cast<double>(u.prompt_tokens) + 16,
              0.1 * static_cast<double>(u.prompt_tokens));
  EXPECT_GE(Gauge(m, "kvroute_kv_reuse_gap_seconds"), 0);
  // Retention: capacity over a measured rate, or +Inf before one is measured.
  const double retention = Gauge(m, "kvroute_kv_retention_seconds", "host");
  EXPECT_GT(retention, 0);
}

}  // namespace
}  // namespace kvroute::testing
