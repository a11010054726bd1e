// The fleet-shared KV pool seen from outside an in-process fleet of two instances (time scale
// 0): a prompt one instance computed is loaded by the other, and its usage, the oracle and
// /metrics say so (vLLM's connector-agnostic series plus kvroute_sim_pool_*).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <memory>
#include <string>
#include <vector>

#include "sim/fleet.h"
#include "sim/tokenizer.h"
#include "tests/prometheus_sample.h"
#include "tests/sim/http_client.h"

namespace sim {
namespace {

namespace json = boost::json;
using ::sim::testing::Get;
using ::sim::testing::MetricValue;
using ::sim::testing::Post;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kModel = "kvroute/tiny-test";

Profile TinyProfile(double kv_pool_gib) {
  Profile p = DefaultProfile();
  p.model_name = kModel;
  p.max_model_len = 2048;
  p.num_gpu_blocks_override = 64;
  p.max_num_batched_tokens = 256;
  p.max_num_seqs = 16;
  p.timing = TimingModel{.step_fixed_s = 0.01,
                         .prefill_s_per_token = 1e-4,
                         .decode_s_per_seq = 1e-3,
                         .kv_read_s_per_token = 0};
  p.kv_pool.size_gib = kv_pool_gib;
  return p;
}

std::string Body(const std::string& prompt) {
  json::object o;
  o["model"] = kModel;
  o["prompt"] = prompt;
  o["max_tokens"] = 2;
  o["ignore_eos"] = true;
  return json::serialize(o);
}

std::string Prompt() {
  std::string s;
  for (int i = 0; i < 20; ++i) {
    s += "Sentence " + std::to_string(i) + " is about the pool every instance of a fleet reads. ";
  }
  return s;
}

int64_t OracleCount(uint16_t port, const std::string& body, int instance) {
  const auto r = Post(port, "/sim/oracle/cached_tokens", body);
  EXPECT_EQ(r.status, 200) << r.body;
  return r.Json()
      .as_object()
      .at("instances")
      .as_array()[instance]
      .as_object()
      .at("cached_tokens")
      .as_int64();
}

std::unique_ptr<Fleet> StartFleet(double kv_pool_gib, std::vector<uint16_t>* ports) {
  FleetOptions opts;
  opts.instances = 2;
  opts.time_scale = 0;
  opts.profile = TinyProfile(kv_pool_gib);
  auto fleet = std::make_unique<Fleet>(opts);
  absl::StatusOr<std::vector<uint16_t>> p = fleet->Start();
  EXPECT_TRUE(p.ok()) << p.status();
  if (p.ok()) *ports = *p;
  return fleet;
}

TEST(KvPoolWireTest, APromptOneInstanceComputedIsLoadedByTheOther) {
  std::vector<uint16_t> ports;
  std::unique_ptr<Fleet> fleet = StartFleet(/*kv_pool_gib=*/1, &ports);
  ASSERT_EQ(ports.size(), 2u);
  const std::string body = Body(Prompt());
  const int64_t n = static_cast<int64_t>(StandInTokenizer::Encode(Prompt()).size());
  const int64_t expected = (n - 1) / 16 * 16;
  ASSERT_EQ(Post(ports[0], "/v1/completions", body).status, 200);
  // Instance 0's puts land on its own engine loop after the response: wait for the oracle to
  // see them on instance 1 (each probe is a round trip through both strands; no sleep).
  int64_t seen = 0;
  for (int i = 0; i < 1000 && seen != expected; ++i) seen = OracleCount(ports[0], body, 1);
  ASSERT_EQ(seen, expected);
  const auto again = Post(ports[1], "/v1/completions", body);
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(again.Json()
                .as_object()
                .at("usage")
                .as_object()
                .at("prompt_tokens_details")
                .as_object()
                .at("cached_tokens")
                .as_int64(),
            expected);
  const std::string m = Get(ports[1], "/metrics").body;
  EXPECT_EQ(MetricValue(m, "kvroute_sim_pool_prompt_tokens_loaded_total"), expected);
  EXPECT_EQ(MetricValue(m, "vllm:external_prefix_cache_hits_total"), expected);
  EXPECT_EQ(MetricValue(m, "vllm:prompt_tokens_cached_total"), expected);
  EXPECT_EQ(MetricValue(m, "kvroute_sim_pool_load_bytes_total"), expected * 98304.0);
  EXPECT_EQ(MetricValue(m, "kvroute_sim_pool_loads_total"), 1);
  EXPECT_EQ(MetricValue(m, "kvroute_sim_pool_block_size"), 16);
  // 1 GiB of 16-token blocks at 98,304 B per token.
  EXPECT_EQ(MetricValue(m, "kvroute_sim_pool_blocks"), 682);
  for (const char* family : {"# TYPE vllm:prompt_tokens_by_source_total counter",
                             "# TYPE kvroute_sim_pool_prompt_tokens_loaded_total counter",
                             "# TYPE kvroute_sim_pool_load_bytes_total counter",
                             "# TYPE kvroute_sim_pool_load_seconds_total counter",
                             "# TYPE kvroute_sim_pool_store_bytes_total counter",
                             "# TYPE kvroute_sim_pool_stores_total counter",
                             "# TYPE kvroute_sim_pool_used_blocks gauge",
                             "# TYPE kvroute_sim_pool_evictions_total counter"}) {
    EXPECT_THAT(m, HasSubstr(family));
  }
  EXPECT_EQ(kvroute::testing::SampleValue(m, "vllm:prompt_tokens_by_source_total",
                                          {{"source", "external_kv_transfer"}}),
            expected);
  // vLLM's MooncakeStoreConnector series for the same load (operation load_get).
  EXPECT_THAT(m, HasSubstr("# TYPE vllm:mooncake_store_operation_time_seconds histogram"));
  EXPECT_THAT(m, HasSubstr("operation=\"load_get\",status=\"ok\""));
  EXPECT_EQ(MetricValue(m, "vllm:mooncake_store_operation_bytes_total"), expected * 98304.0);
  EXPECT_EQ(MetricValue(m, "vllm:mooncake_store_operation_total"), 1);
  EXPECT_EQ(MetricValue(m, "vllm:mooncake_store_operation_time_seconds_count"), 1);
  EXPECT_EQ(MetricValue(m, "vllm:mooncake_store_operation_time_seconds_sum"),
            MetricValue(m, "kvroute_sim_pool_load_seconds_total"));
  EXPECT_THAT(m, Not(HasSubstr("kv_offload")));
  // Instance 0 put the prompt's blocks.
  const std::string m0 = Get(ports[0], "/metrics").body;
  EXPECT_EQ(MetricValue(m0, "kvroute_sim_pool_store_bytes_total"), n / 16 * 16 * 98304.0);
  EXPECT_THAT(m0, HasSubstr("operation=\"save_put\",status=\"ok\""));
  EXPECT_THAT(m0, Not(HasSubstr("load_get")));
  EXPECT_EQ(MetricValue(m0, "vllm:mooncake_store_operation_bytes_total"), n / 16 * 16 * 98304.0);
}

TEST(KvPoolWireTest, OffAddsNoSeries) {
  std::vector<uint16_t> ports;
  std::unique_ptr<Fleet> fleet = StartFleet(/*kv_pool_gib=*/0, &ports);
  ASSERT_EQ(Post(ports[0], "/v1/completions", Body(Prompt())).status, 200);
  EXPECT_EQ(OracleCount(ports[0], Body(Prompt()), 1), 0);
  const std::string m = Get(ports[1], "/metrics").body;
  EXPECT_THAT(m, Not(HasSubstr("kvroute_sim_pool")));
  EXPECT_THAT(m, Not(HasSubstr("prompt_tokens_by_source")));
  EXPECT_EQ(fleet->kv_pool(), nullptr);
}

}  // namespace
}  // namespace sim
