#include "proxy/response_observer.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "proxy/backend_monitor.h"

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
  ResponseObserver obs(false, 1 << 20, 1 << 20, /*keep_transfer_params=*/true);
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

// The agent APIs, in the shapes vLLM (and kvroute-sim) send.
const char kAnthropicStream[] =
    "event: message_start\n"
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"chatcmpl-1\",\"content\":[],"
    "\"model\":\"m\",\"stop_reason\":null,\"stop_sequence\":null,"
    "\"usage\":{\"input_tokens\":1037,\"output_tokens\":0}}}\n\n"
    "event: content_block_start\n"
    "data: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"text\",\"text\":\"\"},"
    "\"index\":0}\n\n"
    "event: content_block_delta\n"
    "data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":"
    "\" usage\"},\"index\":0}\n\n"
    "event: content_block_stop\n"
    "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
    "event: message_delta\n"
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},"
    "\"usage\":{\"input_tokens\":1037,\"output_tokens\":3}}\n\n"
    "event: message_stop\n"
    "data: {\"type\":\"message_stop\"}\n\n";

TEST(ResponseObserverAgentTest, AnthropicStreamSplitAnywhere) {
  const std::string s = kAnthropicStream;
  for (size_t cut = 1; cut <= s.size(); cut += 5) {
    ResponseObserver obs(true, 1 << 20, 1 << 20, false, ApiDialect::kAnthropic);
    for (size_t i = 0; i < s.size(); i += cut) obs.Feed(std::string_view(s).substr(i, cut));
    obs.Finish();
    EXPECT_EQ(obs.events(), 6) << cut;
    EXPECT_TRUE(obs.saw_done()) << cut;
    EXPECT_EQ(obs.usage().prompt_tokens, 1037) << cut;
    EXPECT_EQ(obs.usage().completion_tokens, 3) << cut;
    EXPECT_EQ(obs.usage().cached_tokens, -1) << cut;  // vLLM reports none
    EXPECT_TRUE(obs.response_id().empty());
  }
}

TEST(ResponseObserverAgentTest, AnthropicStreamCutBeforeMessageStop) {
  const std::string s = kAnthropicStream;
  ResponseObserver obs(true, 1 << 20, 1 << 20, false, ApiDialect::kAnthropic);
  obs.Feed(std::string_view(s).substr(0, s.find("event: message_stop")));
  obs.Finish();
  EXPECT_FALSE(obs.saw_done());
  EXPECT_EQ(obs.usage().completion_tokens, 3);
}

TEST(ResponseObserverAgentTest, AnthropicJsonBodyAndCacheReadTokens) {
  ResponseObserver obs(false, 1 << 20, 1 << 20, false, ApiDialect::kAnthropic);
  obs.Feed("{\"id\":\"chatcmpl-2\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":"
           "\"text\",\"text\":\"hi\"}],\"model\":\"m\",\"stop_reason\":\"end_turn\",");
  obs.Feed("\"usage\":{\"input_tokens\":48,\"output_tokens\":2,\"cache_read_input_tokens\":32}}");
  obs.Finish();
  EXPECT_EQ(obs.usage().prompt_tokens, 48);
  EXPECT_EQ(obs.usage().completion_tokens, 2);
  EXPECT_EQ(obs.usage().cached_tokens, 32);
}

const char kResponsesStream[] =
    "event: response.created\n"
    "data: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_abc\",\"object\":"
    "\"response\",\"status\":\"in_progress\",\"output\":[],\"usage\":null},"
    "\"sequence_number\":0}\n\n"
    "event: response.output_text.delta\n"
    "data: {\"type\":\"response.output_text.delta\",\"content_index\":0,\"delta\":\" usage\","
    "\"item_id\":\"msg_1\",\"logprobs\":[],\"output_index\":0,\"sequence_number\":1}\n\n"
    "event: response.completed\n"
    "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_abc\",\"object\":"
    "\"response\",\"status\":\"completed\",\"output\":[],\"usage\":{\"input_tokens\":87,"
    "\"input_tokens_details\":{\"cached_tokens\":48},\"output_tokens\":3,"
    "\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":90}},"
    "\"sequence_number\":2}\n\n";

TEST(ResponseObserverAgentTest, ResponsesStreamIdUsageAndEnd) {
  const std::string s = kResponsesStream;
  for (size_t cut = 1; cut <= s.size(); cut += 5) {
    ResponseObserver obs(true, 1 << 20, 1 << 20, false, ApiDialect::kResponses);
    for (size_t i = 0; i < s.size(); i += cut) obs.Feed(std::string_view(s).substr(i, cut));
    obs.Finish();
    EXPECT_EQ(obs.events(), 3) << cut;
    EXPECT_TRUE(obs.saw_done()) << cut;
    EXPECT_EQ(obs.response_id(), "resp_abc") << cut;
    EXPECT_EQ(obs.usage().prompt_tokens, 87) << cut;
    EXPECT_EQ(obs.usage().cached_tokens, 48) << cut;
    EXPECT_EQ(obs.usage().completion_tokens, 3) << cut;
  }
  // Cut before the end: the id is known from response.created, the stream did not finish.
  ResponseObserver cut(true, 1 << 20, 1 << 20, false, ApiDialect::kResponses);
  cut.Feed(std::string_view(s).substr(0, s.find("event: response.completed")));
  cut.Finish();
  EXPECT_EQ(cut.response_id(), "resp_abc");
  EXPECT_FALSE(cut.saw_done());
  EXPECT_EQ(cut.usage().prompt_tokens, -1);
}

TEST(ResponseObserverAgentTest, ResponsesJsonBody) {
  ResponseObserver obs(false, 1 << 20, 1 << 20, false, ApiDialect::kResponses);
  obs.Feed("{\"id\":\"resp_9\",\"created_at\":1,\"output\":[{\"type\":\"message\",\"content\":"
           "[{\"type\":\"output_text\",\"text\":\"\\\"usage\\\": no\"}]}],\"usage\":{\"input_tokens\":"
           "911,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":12,"
           "\"total_tokens\":923},\"user\":null}");
  obs.Finish();
  EXPECT_EQ(obs.response_id(), "resp_9");
  EXPECT_EQ(obs.usage().prompt_tokens, 911);
  EXPECT_EQ(obs.usage().cached_tokens, 0);
  EXPECT_EQ(obs.usage().completion_tokens, 12);
}

TEST(ResponseObserverAgentTest, ChatDialectIgnoresAgentShapes) {
  ResponseObserver obs(true, 1 << 20);
  obs.Feed(kResponsesStream);
  obs.Finish();
  EXPECT_TRUE(obs.response_id().empty());
  EXPECT_FALSE(obs.saw_done());
}

// vLLM omits prompt_tokens_details when nothing was cached.
const char kColdBody[] =
    "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,"
    "\"text\":\"x\",\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":30,"
    "\"total_tokens\":31,\"completion_tokens\":1}}";
const char kWarmBody[] =
    "{\"id\":\"cmpl-2\",\"choices\":[],\"usage\":{\"prompt_tokens\":30,\"total_tokens\":31,"
    "\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":16}}}";

Usage ObserveJson(const char* body, CachedTokensRule* rule) {
  ResponseObserver obs(false, 1 << 20, 1 << 20, false, ApiDialect::kOpenAi, rule);
  obs.Feed(body);
  obs.Finish();
  obs.Finish();  // the relay finishes twice (before its last write, and at the end)
  return obs.usage();
}

TEST(CachedTokensRuleTest, UsageWithoutDetailsPerRule) {
  EXPECT_EQ(ObserveJson(kColdBody, nullptr).cached_tokens, -1);
  CachedTokensRule zero(AbsentCachedTokens::kZero);
  const Usage cold = ObserveJson(kColdBody, &zero);
  EXPECT_TRUE(cold.reported);
  EXPECT_FALSE(cold.has_details);
  EXPECT_EQ(cold.prompt_tokens, 30);
  EXPECT_EQ(cold.cached_tokens, 0);
  CachedTokensRule unknown(AbsentCachedTokens::kUnknown);
  EXPECT_EQ(ObserveJson(kColdBody, &unknown).cached_tokens, -1);
  EXPECT_EQ(ObserveJson(kWarmBody, &unknown).cached_tokens, 16);
  EXPECT_EQ(ObserveJson(kColdBody, &unknown).cached_tokens, -1);  // never learns
}

TEST(CachedTokensRuleTest, AutoLearnsFromTheFirstDetails) {
  CachedTokensRule rule;  // auto
  EXPECT_EQ(ObserveJson(kColdBody, &rule).cached_tokens, -1);
  EXPECT_FALSE(rule.details_seen());
  EXPECT_EQ(ObserveJson(kWarmBody, &rule).cached_tokens, 16);
  EXPECT_TRUE(rule.details_seen());
  EXPECT_EQ(ObserveJson(kColdBody, &rule).cached_tokens, 0);
  // A reload that says `unknown` stops the inference; what was seen stays.
  rule.Configure(AbsentCachedTokens::kUnknown);
  EXPECT_EQ(ObserveJson(kColdBody, &rule).cached_tokens, -1);
  rule.Configure(AbsentCachedTokens::kAuto);
  EXPECT_EQ(ObserveJson(kColdBody, &rule).cached_tokens, 0);
}

TEST(CachedTokensRuleTest, NoUsageStaysUnknown) {
  CachedTokensRule zero(AbsentCachedTokens::kZero);
  const Usage none = ObserveJson("{\"id\":\"x\",\"choices\":[]}", &zero);
  EXPECT_FALSE(none.reported);
  EXPECT_EQ(none.cached_tokens, -1);
  // A body cut short parses to nothing.
  EXPECT_EQ(ObserveJson("{\"usage\":{\"prompt_tokens\":30", &zero).cached_tokens, -1);
  // A stream without [DONE] was cut short: its usage is not read as a miss.
  ResponseObserver sse(true, 1 << 20, 1 << 20, false, ApiDialect::kOpenAi, &zero);
  sse.Feed("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":30}}\n\n");
  sse.Finish();
  EXPECT_EQ(sse.usage().cached_tokens, -1);
  ResponseObserver done(true, 1 << 20, 1 << 20, false, ApiDialect::kOpenAi, &zero);
  done.Feed("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":30}}\n\ndata: [DONE]\n\n");
  done.Finish();
  EXPECT_EQ(done.usage().cached_tokens, 0);
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
  EXPECT_EQ(g.host_capacity_bytes, 0);
}

// vLLM's CacheConfig fields are the info gauge's labels: --kv-offloading-size
// appears as kv_offloading_size in GiB ("None" without it).
TEST(EngineMetricsTest, HostTierSizeFromCacheConfigInfo) {
  router::EngineGauges g = ParseEngineMetrics(
      "vllm:cache_config_info{block_size=\"16\",kv_offloading_backend=\"native\","
      "kv_offloading_size=\"64.5\",num_gpu_blocks=\"1000\",engine=\"0\"} 1.0\n");
  EXPECT_EQ(g.capacity_tokens, 16000);
  EXPECT_DOUBLE_EQ(g.host_capacity_bytes, 64.5 * 1024 * 1024 * 1024);
  g = ParseEngineMetrics(
      "vllm:cache_config_info{block_size=\"16\",kv_offloading_size=\"None\","
      "num_gpu_blocks=\"1000\"} 1.0\n");
  EXPECT_EQ(g.host_capacity_bytes, 0);
}

// vLLM's OffloadingConnector counters: only the loads into the GPU count,
// summed over ranks; without them the gauges say "not published".
TEST(EngineMetricsTest, ParsesHostTierLoadCounters) {
  const char* text =
      "vllm:kv_offload_total_bytes_total{engine=\"0\",transfer_type=\"CPU_to_GPU\"} 1e9\n"
      "vllm:kv_offload_total_bytes_total{engine=\"1\",transfer_type=\"CPU_to_GPU\"} 5e8\n"
      "vllm:kv_offload_total_bytes_total{engine=\"0\",transfer_type=\"GPU_to_CPU\"} 7e9\n"
      "vllm:kv_offload_total_time_total{engine=\"0\",transfer_type=\"CPU_to_GPU\"} 0.02\n"
      "vllm:kv_offload_total_time_total{engine=\"1\",transfer_type=\"CPU_to_GPU\"} 0.01\n"
      "vllm:kv_offload_total_time_total{engine=\"0\",transfer_type=\"GPU_to_CPU\"} 0.5\n";
  router::EngineGauges g = ParseEngineMetrics(text);
  EXPECT_DOUBLE_EQ(g.host_load_bytes_total, 1.5e9);
  EXPECT_DOUBLE_EQ(g.host_load_seconds_total, 0.03);
  router::EngineGauges none = ParseEngineMetrics("vllm:num_requests_running 1\n");
  EXPECT_EQ(none.host_load_bytes_total, -1);
  EXPECT_EQ(none.host_load_seconds_total, -1);
}

// vLLM's MooncakeStoreConnector series: only successful load_get operations
// count, summed over ranks.
TEST(EngineMetricsTest, ParsesPoolLoadCounters) {
  const char* text =
      "vllm:mooncake_store_operation_bytes_total{engine=\"0\",operation=\"load_get\","
      "status=\"ok\"} 2e9\n"
      "vllm:mooncake_store_operation_bytes_total{engine=\"1\",operation=\"load_get\","
      "status=\"ok\"} 1e9\n"
      "vllm:mooncake_store_operation_bytes_total{engine=\"0\",operation=\"load_get\","
      "status=\"error\"} 5e9\n"
      "vllm:mooncake_store_operation_bytes_total{engine=\"0\",operation=\"save_put\","
      "status=\"ok\"} 9e9\n"
      "vllm:mooncake_store_operation_time_seconds_sum{engine=\"0\",operation=\"load_get\","
      "status=\"ok\"} 0.1\n"
      "vllm:mooncake_store_operation_time_seconds_sum{engine=\"1\",operation=\"load_get\","
      "status=\"ok\"} 0.05\n"
      "vllm:mooncake_store_operation_time_seconds_count{engine=\"0\",operation=\"load_get\","
      "status=\"ok\"} 4\n";
  router::EngineGauges g = ParseEngineMetrics(text);
  EXPECT_DOUBLE_EQ(g.pool_load_bytes_total, 3e9);
  EXPECT_DOUBLE_EQ(g.pool_load_seconds_total, 0.15);
  EXPECT_EQ(g.host_load_bytes_total, -1);
  router::EngineGauges none = ParseEngineMetrics("vllm:num_requests_running 1\n");
  EXPECT_EQ(none.pool_load_bytes_total, -1);
  EXPECT_EQ(none.pool_load_seconds_total, -1);
}

TEST(EngineMetricsTest, OlderGaugeNameAndMissingInfo) {
  router::EngineGauges g = ParseEngineMetrics("vllm:gpu_cache_usage_perc{a=\"b\"} 0.5\n");
  EXPECT_DOUBLE_EQ(g.kv_cache_usage_perc, 0.5);
  EXPECT_EQ(g.capacity_tokens, 0);
  EXPECT_EQ(g.num_requests_running, -1);
}

// The whole-body reading of a body's usage, written independently of the
// fast path (which reads only a final "usage" member).
std::optional<Usage> OracleUsage(std::string_view text) {
  boost::system::error_code ec;
  boost::json::value root = boost::json::parse(text, ec);
  if (ec || !root.is_object()) return std::nullopt;
  const boost::json::value* u = root.get_object().if_contains("usage");
  if (u == nullptr || !u->is_object()) return std::nullopt;
  auto num = [](const boost::json::object& o, std::string_view k) -> int64_t {
    const boost::json::value* v = o.if_contains(k);
    if (v == nullptr) return -1;
    if (v->is_int64()) return v->get_int64();
    if (v->is_uint64()) return static_cast<int64_t>(v->get_uint64());
    return -1;
  };
  Usage out;
  out.prompt_tokens = num(u->get_object(), "prompt_tokens");
  out.completion_tokens = num(u->get_object(), "completion_tokens");
  if (const auto* d = u->get_object().if_contains("prompt_tokens_details"); d && d->is_object()) {
    out.cached_tokens = num(d->get_object(), "cached_tokens");
  }
  return out;
}

void ExpectSameAsOracle(std::string_view text) {
  SCOPED_TRACE(std::string(text));
  Usage got;
  const bool found = ParseUsageFromJson(text, &got, nullptr);
  const std::optional<Usage> want = OracleUsage(text);
  ASSERT_EQ(found, want.has_value());
  if (!found) return;
  EXPECT_EQ(got.prompt_tokens, want->prompt_tokens);
  EXPECT_EQ(got.cached_tokens, want->cached_tokens);
  EXPECT_EQ(got.completion_tokens, want->completion_tokens);
}

const char kVllmBody[] =
    "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\","
    "\"choices\":[{\"index\":0,\"text\":\"the \\\"usage\\\": {} of \\u00e9 words\\n\","
    "\"logprobs\":null,\"finish_reason\":\"length\"}],"
    "\"usage\":{\"prompt_tokens\":1024,\"total_tokens\":1040,\"completion_tokens\":16,"
    "\"prompt_tokens_details\":{\"cached_tokens\":1008}},\"kv_transfer_params\":null}";

TEST(UsageFastPathTest, AgreesWithWholeBodyParseOnACatalogue) {
  const std::vector<std::string> bodies = {
      kVllmBody,
      // SGLang-style spacing and a usage without details.
      "{ \"id\" : \"x\" , \"usage\" : { \"prompt_tokens\" : 7 , \"completion_tokens\" : 1 } }\n",
      // usage followed by other members (vLLM ends with kv_transfer_params).
      "{\"usage\":{\"prompt_tokens\":3},\"id\":\"x\"}",
      "{\"usage\":{\"prompt_tokens\":3},\"kv_transfer_params\":null}",
      "{\"usage\":{\"prompt_tokens\":3} , \"a\":[1,{\"b\":2}], \"c\":\"}\"} ",
      "{\"usage\":{\"prompt_tokens\":3},\"a\":1,}",
      "{\"usage\":{\"prompt_tokens\":3},\"a\":1}}",
      "{\"usage\":{\"prompt_tokens\":3},}",
      "{\"usage\":{\"prompt_tokens\":3},\"a\"}",
      // usage null, a number, an array.
      "{\"id\":\"x\",\"usage\":null}",
      "{\"id\":\"x\",\"usage\":5}",
      "{\"id\":\"x\",\"usage\":[1,2]}",
      // a nested "usage" key only.
      "{\"choices\":[{\"usage\":{\"prompt_tokens\":5}}]}",
      "{\"a\":{\"usage\":{\"prompt_tokens\":5}}}",
      // a key "usage" inside the usage object.
      "{\"usage\":{\"usage\":{\"prompt_tokens\":5},\"prompt_tokens\":2}}",
      // two top-level usage members (the last one counts), a nested usage
      // after the top-level one, a missing comma before usage.
      "{\"usage\":{\"prompt_tokens\":1},\"usage\":{\"prompt_tokens\":2}}",
      "{\"usage\":{\"prompt_tokens\":1},\"b\":{\"usage\":{\"prompt_tokens\":5}}}",
      "{\"a\":1 \"usage\":{\"prompt_tokens\":2}}",
      "{\"usage\":{\"prompt_tokens\":1}}}",
      // "usage" as a string value, and in escaped text.
      "{\"object\":\"usage\",\"x\":{\"prompt_tokens\":1}}",
      "{\"t\":\"\\\"usage\\\":{\\\"prompt_tokens\\\":9}\"}",
      // Repeated, escaped, long and nested keys inside the usage object
      // (the fast path reads it with a SAX handler, the oracle from a DOM).
      "{\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":4},\"prompt_tokens_details\":5}}",
      "{\"usage\":{\"prompt_tokens_details\":7,\"prompt_tokens_details\":{\"x\":1}}}",
      "{\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":4,\"cached_tokens\":6}}}",
      "{\"usage\":{\"\\u0070rompt_tokens\":8,\"completion_tokens\":[1],"
      "\"prompt_tokens_details\":{\"x\":{\"cached_tokens\":3},\"cached_tokens\":true}}}",
      "{\"usage\":{\"prompt_tokens_details\":{\"x\":[{\"cached_tokens\":3}]}}}",
      "{\"usage\":{\"prompt_tokens_and_more_than_24_chars\":1,\"prompt_tokens\":2}}",
      "{\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":{\"prompt_tokens\":9}},"
      "\"prompt_tokens\":4}",
      "{\"usage\":{\"prompt_tokens\":1},\"usage\":{\"completion_tokens\":2}}",
      "{\"usage\":{\"prompt_tokens\":1},\"usage\":[{\"prompt_tokens\":3}]}",
      // huge and negative numbers, floats.
      "{\"usage\":{\"prompt_tokens\":18446744073709551615,\"completion_tokens\":-3}}",
      "{\"usage\":{\"prompt_tokens\":1.5,\"completion_tokens\":1e3}}",
      // trailing garbage, a second document, a bare array.
      "{\"usage\":{\"prompt_tokens\":1}} x",
      "{\"usage\":{\"prompt_tokens\":1}}{}",
      "[{\"usage\":{\"prompt_tokens\":1}}]",
      "",
      "{}",
  };
  for (const std::string& b : bodies) ExpectSameAsOracle(b);
}

TEST(UsageFastPathTest, AgreesOnEveryTruncationAndOnValidCorruptions) {
  const std::string body = kVllmBody;
  for (size_t n = 0; n <= body.size(); ++n) ExpectSameAsOracle(body.substr(0, n));
  // Single-byte changes: wherever the result is still valid JSON the two
  // readings agree; in the usage member and after it they agree always.
  const size_t usage_at = body.rfind("\"usage\"");
  for (size_t i = 0; i < body.size(); ++i) {
    for (char c : std::string("{}[]\",:0 a\\")) {
      std::string b = body;
      b[i] = c;
      boost::system::error_code ec;
      (void)boost::json::parse(b, ec);
      if (!ec || i >= usage_at) ExpectSameAsOracle(b);
    }
  }
}

TEST(UsageFastPathTest, TransferParamsStillComeFromTheWholeBody) {
  Usage u;
  std::string params;
  ASSERT_TRUE(ParseUsageFromJson(
      "{\"kv_transfer_params\":{\"a\":1},\"usage\":{\"prompt_tokens\":4}}", &u, &params));
  EXPECT_EQ(u.prompt_tokens, 4);
  EXPECT_EQ(params, "{\"a\":1}");
}

}  // namespace
}  // namespace kvroute::proxy
