// vLLM's CPU offloading seen from outside an in-process fleet (time scale 0): a prompt the GPU
// has evicted is served from host memory, and the usage, the oracle and /metrics say so in
// vLLM's terms; with offloading off none of it appears.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <boost/json.hpp>
#include <memory>
#include <string>
#include <vector>

#include "sim/fleet.h"
#include "sim/tokenizer.h"
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
constexpr const char* kLabels = "engine=\"0\",model_name=\"kvroute/tiny-test\"";

// 64 GPU blocks of 16 tokens (Qwen3-30B-A3B's 98,304 B of KV per token), so three ~500-token
// prompts do not fit at once.
Profile TinyProfile(double kv_offloading_gib) {
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
  p.kv_offloading.size_gib = kv_offloading_gib;
  return p;
}

std::string Prompt(int sentences, const std::string& topic) {
  std::string s;
  for (int i = 0; i < sentences; ++i) {
    s += "Sentence " + std::to_string(i) + " is about " + topic +
         " and the prefix cache of an inference engine. ";
  }
  return s;
}

std::string Body(const std::string& prompt) {
  json::object o;
  o["model"] = kModel;
  o["prompt"] = prompt;
  o["max_tokens"] = 2;
  o["ignore_eos"] = true;
  return json::serialize(o);
}

int64_t CachedTokens(const testing::HttpResult& r) {
  const json::value body = r.Json();
  const json::object& usage = body.as_object().at("usage").as_object();
  const json::value* details = usage.if_contains("prompt_tokens_details");
  return details == nullptr ? 0 : details->as_object().at("cached_tokens").as_int64();
}

// The value of the sample of `name` whose labels end with `last_label`.
double Sample(const std::string& text, const std::string& name, const std::string& last_label) {
  const std::string head = name + "{" + kLabels + "," + last_label + "} ";
  const size_t at = text.find(head);
  if (at == std::string::npos) return -1;
  const size_t eol = text.find('\n', at);
  return std::stod(text.substr(at + head.size(), eol - at - head.size()));
}

std::unique_ptr<Fleet> StartFleet(double kv_offloading_gib, uint16_t* port,
                                  KvOffloadingBackend backend = KvOffloadingBackend::kNative) {
  FleetOptions opts;
  opts.instances = 1;
  opts.time_scale = 0;
  opts.profile = TinyProfile(kv_offloading_gib);
  opts.profile.kv_offloading.backend = backend;
  auto fleet = std::make_unique<Fleet>(opts);
  absl::StatusOr<std::vector<uint16_t>> ports = fleet->Start();
  EXPECT_TRUE(ports.ok()) << ports.status();
  *port = ports.ok() ? (*ports)[0] : 0;
  return fleet;
}

TEST(OffloadWireTest, APromptTheGpuEvictedIsLoadedFromHostMemory) {
  uint16_t port = 0;
  std::unique_ptr<Fleet> fleet = StartFleet(/*kv_offloading_gib=*/1, &port);
  const std::string first = Prompt(20, "routing");
  const int64_t n = static_cast<int64_t>(StandInTokenizer::Encode(first).size());
  ASSERT_EQ(Post(port, "/v1/completions", Body(first)).status, 200);
  // Two longer prompts push every block of the first out of the GPU's 64.
  ASSERT_EQ(Post(port, "/v1/completions", Body(Prompt(30, "eviction"))).status, 200);
  ASSERT_EQ(Post(port, "/v1/completions", Body(Prompt(30, "pressure"))).status, 200);
  // Host memory still holds every whole block: the oracle counts them, capped at n - 1.
  const int64_t expected = std::min(n / 16 * 16, n - 1);
  auto oracle = Post(port, "/sim/oracle/cached_tokens", Body(first));
  ASSERT_EQ(oracle.status, 200) << oracle.body;
  EXPECT_EQ(oracle.Json()
                .as_object()
                .at("instances")
                .as_array()[0]
                .as_object()
                .at("cached_tokens")
                .as_int64(),
            expected);
  // And the engine reports exactly that when the prompt comes back, all of it loaded.
  auto again = Post(port, "/v1/completions", Body(first));
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(CachedTokens(again), expected);

  const std::string m = Get(port, "/metrics").body;
  const double loaded = MetricValue(m, "vllm:external_prefix_cache_hits_total");
  EXPECT_EQ(loaded, n / 16 * 16);
  EXPECT_EQ(Sample(m, "vllm:prompt_tokens_by_source_total", "source=\"external_kv_transfer\""),
            loaded);
  EXPECT_GT(Sample(m, "vllm:prompt_tokens_by_source_total", "source=\"local_compute\""), 0);
  EXPECT_GE(Sample(m, "vllm:prompt_tokens_by_source_total", "source=\"local_cache_hit\""), 0);
  EXPECT_EQ(MetricValue(m, "vllm:prompt_tokens_cached_total"), expected);
  // Every request queries the connector with its whole prompt.
  EXPECT_EQ(MetricValue(m, "vllm:external_prefix_cache_queries_total"),
            MetricValue(m, "vllm:prompt_tokens_total"));
  // The copies, by direction, with vLLM's names and label values.
  EXPECT_EQ(Sample(m, "vllm:kv_offload_total_bytes_total", "transfer_type=\"CPU_to_GPU\""),
            loaded * 98304);
  EXPECT_GT(Sample(m, "vllm:kv_offload_total_bytes_total", "transfer_type=\"GPU_to_CPU\""), 0);
  EXPECT_GT(Sample(m, "vllm:kv_offload_total_time_total", "transfer_type=\"CPU_to_GPU\""), 0);
  EXPECT_EQ(Sample(m, "vllm:kv_offload_size_count", "transfer_type=\"CPU_to_GPU\""), 1);
  for (const char* family : {"# TYPE vllm:prompt_tokens_by_source_total counter",
                             "# TYPE vllm:prompt_tokens_cached_total counter",
                             "# TYPE vllm:kv_offload_total_bytes_total counter",
                             "# TYPE vllm:kv_offload_total_time_total counter",
                             "# TYPE vllm:kv_offload_size histogram"}) {
    EXPECT_THAT(m, HasSubstr(family));
  }
  EXPECT_THAT(m, HasSubstr("kv_offloading_backend=\"native\",kv_offloading_size=\"1\","));
}

TEST(OffloadWireTest, OffAddsNoSeries) {
  uint16_t port = 0;
  std::unique_ptr<Fleet> fleet = StartFleet(/*kv_offloading_gib=*/0, &port);
  const std::string prompt = Prompt(20, "routing");
  Post(port, "/v1/completions", Body(prompt));
  auto again = Post(port, "/v1/completions", Body(prompt));
  const int64_t n = static_cast<int64_t>(StandInTokenizer::Encode(prompt).size());
  EXPECT_EQ(CachedTokens(again), (n - 1) / 16 * 16);
  const std::string m = Get(port, "/metrics").body;
  EXPECT_THAT(m, Not(HasSubstr("kv_offload")));
  EXPECT_THAT(m, Not(HasSubstr("prompt_tokens_by_source")));
  EXPECT_THAT(m, Not(HasSubstr("prompt_tokens_cached")));
  EXPECT_EQ(MetricValue(m, "vllm:external_prefix_cache_queries_total"), 0);
}

TEST(OffloadWireTest, TheLmcacheBackendLoadsChunksAndServesNoCopySeries) {
  uint16_t port = 0;
  std::unique_ptr<Fleet> fleet =
      StartFleet(/*kv_offloading_gib=*/1, &port, KvOffloadingBackend::kLmcache);
  const std::string first = Prompt(20, "routing");
  const int64_t n = static_cast<int64_t>(StandInTokenizer::Encode(first).size());
  ASSERT_GT(n, 256);
  ASSERT_EQ(Post(port, "/v1/completions", Body(first)).status, 200);
  ASSERT_EQ(Post(port, "/v1/completions", Body(Prompt(30, "eviction"))).status, 200);
  ASSERT_EQ(Post(port, "/v1/completions", Body(Prompt(30, "pressure"))).status, 200);
  // LMCache holds the prompt's whole 256-token chunks; the engine reports them cached.
  auto again = Post(port, "/v1/completions", Body(first));
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(CachedTokens(again), n / 256 * 256);
  const std::string m = Get(port, "/metrics").body;
  EXPECT_EQ(MetricValue(m, "vllm:external_prefix_cache_hits_total"), n / 256 * 256);
  EXPECT_EQ(Sample(m, "vllm:prompt_tokens_by_source_total", "source=\"external_kv_transfer\""),
            n / 256 * 256);
  EXPECT_THAT(m, Not(HasSubstr("vllm:kv_offload")));
  EXPECT_THAT(m, HasSubstr("kv_offloading_backend=\"lmcache\",kv_offloading_size=\"1\","));
}

}  // namespace
}  // namespace sim
