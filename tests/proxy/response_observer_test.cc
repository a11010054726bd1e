#include "proxy/response_observer.h"

#include <gtest/gtest.h>

#include "proxy/server.h"

namespace kvroute::proxy {
namespace {

const char kStream[] =
    "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"
    "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":120,\"completion_tokens\":2,"
    "\"total_tokens\":122,\"prompt_tokens_details\":{\"cached_tokens\":96}}}\n\n"
    "data: [DONE]\n\n";

TEST(ResponseObserverTest, SseUsageWholeFeed) {
  ResponseObserver obs(true, 1 << 20);
  obs.Feed(kStream);
  obs.Finish();
  EXPECT_EQ(obs.events(), 4);
  EXPECT_TRUE(obs.saw_done());
  EXPECT_EQ(obs.usage().prompt_tokens, 120);
  EXPECT_EQ(obs.usage().cached_tokens, 96);
  EXPECT_EQ(obs.usage().completion_tokens, 2);
}

TEST(ResponseObserverTest, SseUsageSplitAtEveryByte) {
  const std::string s = kStream;
  for (size_t cut = 1; cut < s.size(); cut += 7) {
    ResponseObserver obs(true, 1 << 20);
    for (size_t i = 0; i < s.size(); i += cut) obs.Feed(std::string_view(s).substr(i, cut));
    obs.Finish();
    EXPECT_EQ(obs.events(), 4) << cut;
    EXPECT_TRUE(obs.saw_done()) << cut;
    EXPECT_EQ(obs.usage().cached_tokens, 96) << cut;
  }
}

TEST(ResponseObserverTest, CrLfEvents) {
  ResponseObserver obs(true, 1 << 20);
  obs.Feed("data: {\"usage\":{\"prompt_tokens\":5}}\r\n\r\ndata: [DONE]\r\n\r\n");
  obs.Finish();
  EXPECT_EQ(obs.usage().prompt_tokens, 5);
  EXPECT_EQ(obs.usage().cached_tokens, -1);
  EXPECT_TRUE(obs.saw_done());
}

TEST(ResponseObserverTest, JsonBodyUsageAndTransferParams) {
  ResponseObserver obs(false, 1 << 20);
  obs.Feed("{\"id\":\"x\",\"kv_transfer_params\":{\"remote_engine_id\":\"e\"},");
  obs.Feed("\"usage\":{\"prompt_tokens\":9,\"prompt_tokens_details\":{\"cached_tokens\":4}}}");
  obs.Finish();
  EXPECT_EQ(obs.usage().prompt_tokens, 9);
  EXPECT_EQ(obs.usage().cached_tokens, 4);
  EXPECT_EQ(obs.kv_transfer_params(), "{\"remote_engine_id\":\"e\"}");
}

TEST(ResponseObserverTest, OversizedJsonBodyIsNotParsed) {
  ResponseObserver obs(false, 16);
  obs.Feed("{\"usage\":{\"prompt_tokens\":9}, \"pad\": \"xxxxxxxxxxxxxxxx\"}");
  obs.Finish();
  EXPECT_EQ(obs.usage().prompt_tokens, -1);
}

TEST(EngineMetricsTest, ParsesVllmGauges) {
  const char* text =
      "# HELP vllm:num_requests_running x\n"
      "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n"
      "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 2.0\n"
      "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.42\n"
      "vllm:cache_config_info{block_size=\"16\",enable_prefix_caching=\"True\","
      "num_gpu_blocks=\"1000\",engine=\"0\"} 1.0\n";
  router::EngineGauges g = ParseEngineMetrics(text);
  EXPECT_EQ(g.num_requests_running, 3);
  EXPECT_EQ(g.num_requests_waiting, 2);
  EXPECT_DOUBLE_EQ(g.kv_cache_usage_perc, 0.42);
  EXPECT_EQ(g.capacity_tokens, 16000);
}

TEST(EngineMetricsTest, OlderGaugeNameAndMissingInfo) {
  router::EngineGauges g = ParseEngineMetrics("vllm:gpu_cache_usage_perc{a=\"b\"} 0.5\n");
  EXPECT_DOUBLE_EQ(g.kv_cache_usage_perc, 0.5);
  EXPECT_EQ(g.capacity_tokens, 0);
  EXPECT_EQ(g.num_requests_running, -1);
}

}  // namespace
}  // namespace kvroute::proxy
