// Wire tests: in-process fleets on port 0, time scale 0 (no modelled delay), HTTP over loopback.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <future>
#include <string>
#include <thread>

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
using ::testing::StartsWith;

constexpr const char* kModel = "kvroute/tiny-test";

Profile TinyProfile() {
  Profile p = DefaultProfile();
  p.model_name = kModel;
  p.max_model_len = 2048;
  p.block_size = 16;
  p.num_gpu_blocks_override = 64;
  p.max_num_batched_tokens = 256;
  p.max_num_seqs = 16;
  p.mean_output_tokens = 16;
  p.pd_pair_timeout_s = 30;
  p.timing = TimingModel{.step_fixed_s = 0.01,
                         .prefill_s_per_token = 1e-4,
                         .decode_s_per_seq = 1e-3,
                         .kv_read_s_per_token = 0};
  return p;
}

std::string Prompt(int sentences, const std::string& topic = "routing") {
  std::string s;
  for (int i = 0; i < sentences; ++i) {
    s += "Sentence " + std::to_string(i) + " is about " + topic +
         " and the prefix cache of an inference engine. ";
  }
  return s;
}

std::string CompletionBody(const std::string& prompt, int max_tokens, bool stream = false,
                           const std::string& extra = "") {
  json::object o;
  o["model"] = kModel;
  o["prompt"] = prompt;
  o["max_tokens"] = max_tokens;
  o["ignore_eos"] = true;
  if (stream) {
    o["stream"] = true;
    o["stream_options"] = json::object{{"include_usage", true}};
  }
  std::string body = json::serialize(o);
  if (!extra.empty()) body = body.substr(0, body.size() - 1) + "," + extra + "}";
  return body;
}

int PromptTokens(const std::string& prompt) {
  return static_cast<int>(StandInTokenizer::Encode(prompt).size());
}

// SSE payloads ("data: X\n\n" -> X), in order; fails the test on bad framing.
std::vector<std::string> SsePayloads(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < body.size()) {
    EXPECT_EQ(body.compare(pos, 6, "data: "), 0) << "at " << pos << ": " << body.substr(pos, 40);
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      ADD_FAILURE() << "unterminated event";
      break;
    }
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return out;
}

class WireTest : public ::testing::Test {
 protected:
  void StartFleet(int instances, std::vector<Faults> faults = {}) {
    FleetOptions opts;
    opts.instances = instances;
    opts.time_scale = 0;
    opts.profile = TinyProfile();
    opts.seed = 7;
    opts.faults = std::move(faults);
    fleet_ = std::make_unique<Fleet>(opts);
    absl::StatusOr<std::vector<uint16_t>> ports = fleet_->Start();
    ASSERT_TRUE(ports.ok()) << ports.status();
    ports_ = *ports;
  }
  void SetUp() override { StartFleet(2); }
  void TearDown() override { fleet_.reset(); }

  std::string Metrics(int i) { return Get(ports_[i], "/metrics").body; }

  std::unique_ptr<Fleet> fleet_;
  std::vector<uint16_t> ports_;
};

TEST_F(WireTest, FleetBindsEphemeralPorts) {
  ASSERT_EQ(ports_.size(), 2u);
  EXPECT_NE(ports_[0], 0);
  EXPECT_NE(ports_[0], ports_[1]);
  EXPECT_EQ(fleet_->ports(), ports_);
}

TEST_F(WireTest, HealthModelsAndUnknownRoutes) {
  auto health = Get(ports_[0], "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, "");
  auto models = Get(ports_[0], "/v1/models").Json().as_object();
  EXPECT_EQ(models.at("object"), "list");
  const json::object& m = models.at("data").as_array()[0].as_object();
  EXPECT_EQ(m.at("id"), kModel);
  EXPECT_EQ(m.at("object"), "model");
  EXPECT_EQ(m.at("max_model_len").as_int64(), 2048);
  EXPECT_EQ(Get(ports_[0], "/nope").status, 404);
  EXPECT_EQ(Get(ports_[0], "/v1/completions").status, 405);
}

TEST_F(WireTest, TokenizeCountsLikeTheEngine) {
  const std::string prompt = Prompt(3);
  auto r = Post(ports_[0], "/tokenize", json::serialize(json::object{{"prompt", prompt}}));
  ASSERT_EQ(r.status, 200);
  const json::object o = r.Json().as_object();
  EXPECT_EQ(o.at("count").as_int64(), PromptTokens(prompt));
  EXPECT_EQ(o.at("tokens").as_array().size(), static_cast<size_t>(PromptTokens(prompt)));
  EXPECT_EQ(o.at("max_model_len").as_int64(), 2048);
}

TEST_F(WireTest, NonStreamingCompletionHasUsageAndHonoursRequestId) {
  const std::string prompt = Prompt(4);
  auto r =
      Post(ports_[0], "/v1/completions", CompletionBody(prompt, 5), {{"X-Request-Id", "req-42"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["x-request-id"], "req-42");
  EXPECT_THAT(r.headers["content-type"], HasSubstr("application/json"));
  const json::object o = r.Json().as_object();
  EXPECT_EQ(o.at("id"), "cmpl-req-42");
  EXPECT_EQ(o.at("object"), "text_completion");
  EXPECT_EQ(o.at("model"), kModel);
  const json::object& choice = o.at("choices").as_array()[0].as_object();
  EXPECT_EQ(choice.at("finish_reason"), "length");
  EXPECT_EQ(StandInTokenizer::Encode(choice.at("text").as_string()).size(), 5u);
  const json::object& usage = o.at("usage").as_object();
  EXPECT_EQ(usage.at("prompt_tokens").as_int64(), PromptTokens(prompt));
  EXPECT_EQ(usage.at("completion_tokens").as_int64(), 5);
  EXPECT_EQ(usage.at("total_tokens").as_int64(), PromptTokens(prompt) + 5);
  // Nothing cached: vLLM leaves prompt_tokens_details out.
  EXPECT_FALSE(usage.contains("prompt_tokens_details"));
  EXPECT_TRUE(o.at("kv_transfer_params").is_null());
}

TEST_F(WireTest, RepeatedPromptReportsCachedTokens) {
  const std::string prompt = Prompt(6);
  const int n = PromptTokens(prompt);
  ASSERT_GT(n, 40);
  Post(ports_[0], "/v1/completions", CompletionBody(prompt, 2));
  auto again = Post(ports_[0], "/v1/completions", CompletionBody(prompt, 2));
  const json::object usage = again.Json().as_object().at("usage").as_object();
  EXPECT_EQ(usage.at("prompt_tokens_details").as_object().at("cached_tokens").as_int64(),
            (n - 1) / 16 * 16);
  // The other instance has never seen it: no details, as vLLM does for a miss.
  auto other = Post(ports_[1], "/v1/completions", CompletionBody(prompt, 2));
  EXPECT_FALSE(other.Json().as_object().at("usage").as_object().contains("prompt_tokens_details"));
}

TEST(WireProfileTest, AlwaysReportCachedTokensKeepsZeroDetails) {
  FleetOptions opts;
  opts.instances = 1;
  opts.time_scale = 0;
  opts.profile = TinyProfile();
  opts.profile.always_report_cached_tokens = true;
  Fleet fleet(opts);
  absl::StatusOr<std::vector<uint16_t>> ports = fleet.Start();
  ASSERT_TRUE(ports.ok()) << ports.status();
  auto r = Post((*ports)[0], "/v1/completions", CompletionBody(Prompt(2), 2));
  ASSERT_EQ(r.status, 200);
  const json::object usage = r.Json().as_object().at("usage").as_object();
  EXPECT_EQ(usage.at("prompt_tokens_details").as_object().at("cached_tokens").as_int64(), 0);
  fleet.Stop();
}

// vLLM's processor: a priority other than 0 needs --scheduling-policy priority.
TEST_F(WireTest, PriorityNeedsThePrioritySchedulingPolicy) {
  auto zero = Post(ports_[0], "/v1/completions", R"({"prompt": "hi", "max_tokens": 1, "priority": 0})");
  EXPECT_EQ(zero.status, 200);
  auto five = Post(ports_[0], "/v1/completions", R"({"prompt": "hi", "max_tokens": 1, "priority": 5})");
  EXPECT_EQ(five.status, 400);
  EXPECT_THAT(five.body, HasSubstr("Got priority 5 but Priority scheduling is not enabled."));
  auto text = Post(ports_[0], "/v1/completions", R"({"prompt": "hi", "priority": "high"})");
  EXPECT_EQ(text.status, 400);
}

TEST(WireProfileTest, PrioritySchedulingAcceptsAnyIntegerPriority) {
  FleetOptions opts;
  opts.instances = 1;
  opts.time_scale = 0;
  opts.profile = TinyProfile();
  opts.profile.scheduling_policy = SchedulingPolicy::kPriority;
  Fleet fleet(opts);
  absl::StatusOr<std::vector<uint16_t>> ports = fleet.Start();
  ASSERT_TRUE(ports.ok()) << ports.status();
  auto r = Post((*ports)[0], "/v1/chat/completions",
                R"({"priority": 1795617966500, "messages": [{"role": "user", "content": "hi"}],)"
                R"( "max_tokens": 1})");
  EXPECT_EQ(r.status, 200) << r.body;
  fleet.Stop();
}

TEST_F(WireTest, OracleAnswersWhatEveryInstanceHolds) {
  const std::string prompt = Prompt(6);
  const int n = PromptTokens(prompt);
  auto before = Post(ports_[0], "/sim/oracle/cached_tokens", CompletionBody(prompt, 2));
  ASSERT_EQ(before.status, 200) << before.body;
  EXPECT_EQ(before.Json().as_object().at("prompt_tokens").as_int64(), n);
  // Instance 1 serves it; instance 0 answers for the whole fleet.
  Post(ports_[1], "/v1/completions", CompletionBody(prompt, 2));
  auto after = Post(ports_[0], "/sim/oracle/cached_tokens", CompletionBody(prompt, 2));
  ASSERT_EQ(after.status, 200) << after.body;
  const json::value answer = after.Json();
  const json::array& instances = answer.as_object().at("instances").as_array();
  ASSERT_EQ(instances.size(), 2u);
  EXPECT_EQ(instances[0].as_object().at("instance").as_int64(), 0);
  EXPECT_EQ(instances[0].as_object().at("cached_tokens").as_int64(), 0);
  // What the engine would reuse: whole blocks, never the last token.
  const int64_t held = (n - 1) / 16 * 16;
  EXPECT_EQ(instances[1].as_object().at("cached_tokens").as_int64(), held);
  // And the engine agrees when the prompt comes back.
  auto again = Post(ports_[1], "/v1/completions", CompletionBody(prompt, 2));
  EXPECT_EQ(again.Json()
                .as_object()
                .at("usage")
                .as_object()
                .at("prompt_tokens_details")
                .as_object()
                .at("cached_tokens")
                .as_int64(),
            held);
  // Chat bodies are rendered like /v1/chat/completions; bad bodies get vLLM's error shape.
  auto chat = Post(ports_[1], "/sim/oracle/cached_tokens",
                   R"({"model":"kvroute/tiny-test","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(chat.status, 200) << chat.body;
  auto bad = Post(ports_[0], "/sim/oracle/cached_tokens", "{not json");
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.body, HasSubstr("\"error\""));
  EXPECT_EQ(Get(ports_[0], "/sim/oracle/cached_tokens").status, 405);
  // Concurrent questions, each visiting every instance's strand.
  std::vector<std::future<testing::HttpResult>> asks;
  for (int i = 0; i < 8; ++i) {
    asks.push_back(std::async(std::launch::async, [&, i] {
      return Post(ports_[i % 2], "/sim/oracle/cached_tokens", CompletionBody(Prompt(40), 2));
    }));
  }
  for (auto& a : asks) EXPECT_EQ(a.get().status, 200);
}

TEST_F(WireTest, StreamingCompletionFraming) {
  const std::string prompt = Prompt(2);
  auto r = Post(ports_[0], "/v1/completions", CompletionBody(prompt, 4, /*stream=*/true),
                {{"X-Request-Id", "s1"}});
  ASSERT_EQ(r.status, 200);
  EXPECT_THAT(r.headers["content-type"], StartsWith("text/event-stream"));
  EXPECT_EQ(r.headers["transfer-encoding"], "chunked");
  const std::vector<std::string> events = SsePayloads(r.body);
  ASSERT_EQ(events.size(), 4u + 2u);  // one per decode step, usage, [DONE]
  EXPECT_EQ(events.back(), "[DONE]");
  for (int i = 0; i < 4; ++i) {
    const json::object c = json::parse(events[i]).as_object();
    EXPECT_EQ(c.at("id"), "cmpl-s1");
    EXPECT_EQ(c.at("object"), "text_completion");
    const json::object& choice = c.at("choices").as_array()[0].as_object();
    EXPECT_EQ(StandInTokenizer::Encode(choice.at("text").as_string()).size(), 1u);
    if (i < 3) {
      EXPECT_TRUE(choice.at("finish_reason").is_null());
    } else {
      EXPECT_EQ(choice.at("finish_reason"), "length");
    }
  }
  const json::object usage_chunk = json::parse(events[4]).as_object();
  EXPECT_TRUE(usage_chunk.at("choices").as_array().empty());
  EXPECT_EQ(usage_chunk.at("usage").as_object().at("completion_tokens").as_int64(), 4);
  EXPECT_EQ(usage_chunk.at("usage").as_object().at("prompt_tokens").as_int64(),
            PromptTokens(prompt));
}

TEST_F(WireTest, StreamingWithoutIncludeUsageHasNoUsageChunk) {
  auto r =
      Post(ports_[0], "/v1/completions",
           R"({"prompt": "hello world", "max_tokens": 3, "ignore_eos": true, "stream": true})");
  const std::vector<std::string> events = SsePayloads(r.body);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
}

TEST_F(WireTest, ChatStreamingStartsWithTheRoleAndUsesChatIds) {
  const std::string body = R"({"model": "kvroute/tiny-test", "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "hello there"}]}],
      "max_completion_tokens": 3, "ignore_eos": true, "stream": true,
      "stream_options": {"include_usage": true}})";
  auto r = Post(ports_[0], "/v1/chat/completions", body, {{"X-Request-Id", "c1"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::vector<std::string> events = SsePayloads(r.body);
  ASSERT_EQ(events.size(), 1u + 3u + 2u);
  const json::object first = json::parse(events[0]).as_object();
  EXPECT_EQ(first.at("id"), "chatcmpl-c1");
  EXPECT_EQ(first.at("object"), "chat.completion.chunk");
  const json::object& delta = first.at("choices").as_array()[0].as_object().at("delta").as_object();
  EXPECT_EQ(delta.at("role"), "assistant");
  const json::object usage = json::parse(events[4]).as_object();
  const int expected_prompt =
      PromptTokens(StandInTokenizer::RenderChat({{"system", "be brief"}, {"user", "hello there"}}));
  EXPECT_EQ(usage.at("usage").as_object().at("prompt_tokens").as_int64(), expected_prompt);
  // A cold prompt: the streamed usage chunk has no details either.
  EXPECT_FALSE(usage.at("usage").as_object().contains("prompt_tokens_details"));
}

TEST_F(WireTest, ChatNonStreaming) {
  auto r = Post(ports_[0], "/v1/chat/completions",
                R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                    "ignore_eos": true})");
  ASSERT_EQ(r.status, 200);
  const json::object o = r.Json().as_object();
  EXPECT_EQ(o.at("object"), "chat.completion");
  EXPECT_THAT(std::string(o.at("id").as_string()), StartsWith("chatcmpl-"));
  const json::object& msg = o.at("choices").as_array()[0].as_object().at("message").as_object();
  EXPECT_EQ(msg.at("role"), "assistant");
  EXPECT_EQ(StandInTokenizer::Encode(msg.at("content").as_string()).size(), 2u);
  EXPECT_FALSE(o.at("usage").as_object().contains("prompt_tokens_details"));  // a miss
}

TEST_F(WireTest, MinTokensAndNaturalStop) {
  // Without ignore_eos the output length is drawn (mean 16) but bounded by min/max tokens.
  for (int i = 0; i < 5; ++i) {
    auto r = Post(ports_[0], "/v1/completions",
                  R"({"prompt": "x y z", "max_tokens": 12, "min_tokens": 10})",
                  {{"X-Request-Id", "n" + std::to_string(i)}});
    const int64_t n =
        r.Json().as_object().at("usage").as_object().at("completion_tokens").as_int64();
    EXPECT_GE(n, 10);
    EXPECT_LE(n, 12);
  }
}

TEST_F(WireTest, ErrorsAreShapedLikeVllm) {
  auto bad_json = Post(ports_[0], "/v1/completions", "{not json");
  EXPECT_EQ(bad_json.status, 400);
  const json::object err = bad_json.Json().as_object().at("error").as_object();
  EXPECT_EQ(err.at("type"), "BadRequestError");
  EXPECT_EQ(err.at("code").as_int64(), 400);
  EXPECT_TRUE(err.contains("message"));
  EXPECT_TRUE(err.contains("param"));

  auto model = Post(ports_[0], "/v1/completions", R"({"model": "gpt-9", "prompt": "hi"})");
  EXPECT_EQ(model.status, 404);
  EXPECT_THAT(model.body, HasSubstr("The model `gpt-9` does not exist."));

  auto too_long = Post(ports_[0], "/v1/completions", CompletionBody(Prompt(10), 2000));
  EXPECT_EQ(too_long.status, 400);
  EXPECT_THAT(too_long.body, HasSubstr("maximum context length is 2048 tokens"));

  auto min_max =
      Post(ports_[0], "/v1/completions", R"({"prompt": "hi", "max_tokens": 2, "min_tokens": 5})");
  EXPECT_EQ(min_max.status, 400);
  auto no_prompt = Post(ports_[0], "/v1/completions", R"({"max_tokens": 2})");
  EXPECT_EQ(no_prompt.status, 400);
  // More KV than the instance has (64 blocks x 16 tokens) but within the context window.
  auto kv = Post(ports_[0], "/v1/completions", CompletionBody(Prompt(60), 1));
  ASSERT_GT(PromptTokens(Prompt(60)), 1024);
  ASSERT_LT(PromptTokens(Prompt(60)), 2048);
  EXPECT_EQ(kv.status, 400);
}

TEST_F(WireTest, MetricsNamesLabelsAndValues) {
  const std::string prompt = Prompt(5);
  const int n = PromptTokens(prompt);
  Post(ports_[0], "/v1/completions", CompletionBody(prompt, 3));
  Post(ports_[0], "/v1/completions", CompletionBody(prompt, 3));
  const std::string m = Metrics(0);
  const std::string labels = "{engine=\"0\",model_name=\"kvroute/tiny-test\"}";
  for (const char* name :
       {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
        "vllm:external_prefix_cache_queries_total", "vllm:external_prefix_cache_hits_total",
        "vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
        "kvroute_sim_gpu_busy_fraction", "kvroute_sim_scheduler_lag_seconds"}) {
    EXPECT_THAT(m, HasSubstr(std::string(name) + labels)) << name;
  }
  for (const char* hist : {"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                           "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
                           "vllm:request_prefill_time_seconds"}) {
    EXPECT_THAT(m, HasSubstr(std::string("# TYPE ") + hist + " histogram")) << hist;
    // Per request, except inter-token latency: per token after the first (2 x 2).
    const double expected = std::string(hist) == "vllm:inter_token_latency_seconds" ? 4 : 2;
    EXPECT_EQ(MetricValue(m, std::string(hist) + "_count"), expected) << hist;
  }
  EXPECT_THAT(m, HasSubstr("vllm:cache_config_info{block_size=\"16\""));
  EXPECT_THAT(m, HasSubstr("num_gpu_blocks=\"64\""));
  EXPECT_EQ(MetricValue(m, "vllm:prompt_tokens_total"), 2 * n);
  EXPECT_EQ(MetricValue(m, "vllm:prefix_cache_queries_total"), 2 * n);
  EXPECT_EQ(MetricValue(m, "vllm:prefix_cache_hits_total"), (n - 1) / 16 * 16);
  EXPECT_EQ(MetricValue(m, "vllm:generation_tokens_total"), 6);
  EXPECT_EQ(MetricValue(m, "vllm:num_requests_running"), 0);
  EXPECT_GT(MetricValue(m, "kvroute_sim_gpu_busy_fraction"), 0);
  EXPECT_EQ(MetricValue(m, "kvroute_sim_scheduler_lag_seconds"), 0);
}

// --- P/D handoff -------------------------------------------------------------------------

TEST_F(WireTest, NixlStylePrefillThenDecode) {
  const std::string prompt = Prompt(6, "nixl");
  const int n = PromptTokens(prompt);
  const std::string prefill_extra =
      R"("kv_transfer_params": {"do_remote_decode": true, "do_remote_prefill": false,
          "remote_engine_id": null, "remote_block_ids": null, "remote_host": null,
          "remote_port": null})";
  auto p = Post(ports_[0], "/v1/completions", CompletionBody(prompt, 1, false, prefill_extra),
                {{"X-Request-Id", "pd1"}});
  ASSERT_EQ(p.status, 200) << p.body;
  const json::object po = p.Json().as_object();
  ASSERT_TRUE(po.at("kv_transfer_params").is_object()) << p.body;
  const json::object& kv = po.at("kv_transfer_params").as_object();
  EXPECT_EQ(kv.at("do_remote_prefill"), true);
  EXPECT_EQ(kv.at("do_remote_decode"), false);
  EXPECT_EQ(kv.at("remote_block_ids").as_array().size(), static_cast<size_t>((n + 15) / 16));
  EXPECT_EQ(kv.at("remote_engine_id"), json::value(fleet_->instance(0).engine_id()));
  EXPECT_TRUE(kv.at("remote_request_id").is_string());
  EXPECT_EQ(kv.at("remote_host"), "127.0.0.1");
  EXPECT_EQ(kv.at("remote_port").as_int64(), ports_[0]);
  EXPECT_EQ(kv.at("tp_size").as_int64(), 1);
  EXPECT_EQ(MetricValue(Metrics(0), "kvroute_sim_kv_holds"), 1);

  const std::string decode_extra = std::string(R"("kv_transfer_params": )") + json::serialize(kv);
  auto d = Post(ports_[1], "/v1/completions", CompletionBody(prompt, 4, true, decode_extra),
                {{"X-Request-Id", "pd1"}});
  ASSERT_EQ(d.status, 200);
  const std::vector<std::string> events = SsePayloads(d.body);
  ASSERT_EQ(events.size(), 4u + 2u);
  const json::object usage = json::parse(events[4]).as_object().at("usage").as_object();
  EXPECT_EQ(usage.at("prompt_tokens_details").as_object().at("cached_tokens").as_int64(), n - 1);
  const std::string m1 = Metrics(1);
  EXPECT_EQ(MetricValue(m1, "vllm:external_prefix_cache_hits_total"), n - 1);
  EXPECT_EQ(MetricValue(m1, "vllm:prefix_cache_hits_total"), 0);
  EXPECT_EQ(MetricValue(Metrics(0), "kvroute_sim_kv_holds"), 0) << "pulled blocks are released";
  // The pulled KV is now in instance 1's prefix cache.
  auto again = Post(ports_[1], "/v1/completions", CompletionBody(prompt, 1));
  EXPECT_EQ(again.Json()
                .as_object()
                .at("usage")
                .as_object()
                .at("prompt_tokens_details")
                .as_object()
                .at("cached_tokens")
                .as_int64(),
            (n - 1) / 16 * 16);
}

TEST_F(WireTest, NixlDecodeWithoutHeldKvPrefillsLocally) {
  const std::string prompt = Prompt(3);
  const std::string extra = R"("kv_transfer_params": {"do_remote_prefill": true,
      "do_remote_decode": false, "remote_engine_id": "nobody", "remote_request_id": "gone",
      "remote_block_ids": [1, 2], "remote_host": "127.0.0.1", "remote_port": 1})";
  auto d = Post(ports_[1], "/v1/completions", CompletionBody(prompt, 2, false, extra));
  ASSERT_EQ(d.status, 200);
  EXPECT_FALSE(d.Json().as_object().at("usage").as_object().contains("prompt_tokens_details"));
}

TEST_F(WireTest, MooncakeBootstrapQuery) {
  const json::object q = Get(ports_[0], "/query").Json().as_object();
  const json::object& rank0 = q.at("0").as_object();
  EXPECT_EQ(rank0.at("engine_id"), json::value(fleet_->instance(0).engine_id()));
  EXPECT_EQ(rank0.at("worker_addr"), json::value("127.0.0.1:" + std::to_string(ports_[0])));
}

json::object DecodeUsage(const testing::HttpResult& r) {
  return r.Json().as_object().at("usage").as_object();
}

TEST_F(WireTest, MooncakeStylePrefillFirst) {
  const std::string prompt = Prompt(5, "mooncake");
  const int n = PromptTokens(prompt);
  auto p = Post(ports_[0], "/v1/completions",
                CompletionBody(prompt, 1, false,
                               R"("kv_transfer_params": {"do_remote_decode": true,
                                   "do_remote_prefill": false, "transfer_id": "xfer-1"})"));
  ASSERT_EQ(p.status, 200);
  const std::string decode_extra =
      R"("kv_transfer_params": {"do_remote_decode": false, "do_remote_prefill": true,
          "remote_bootstrap_addr": "http://127.0.0.1:)" +
      std::to_string(ports_[0]) + R"(", "remote_engine_id": ")" + fleet_->instance(0).engine_id() +
      R"(", "transfer_id": "xfer-1"})";
  auto d = Post(ports_[1], "/v1/completions", CompletionBody(prompt, 3, false, decode_extra));
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(DecodeUsage(d).at("prompt_tokens_details").as_object().at("cached_tokens").as_int64(),
            n - 1);
}

TEST_F(WireTest, MooncakeStyleDecodeArrivesFirst) {
  const std::string prompt = Prompt(5, "either order");
  const int n = PromptTokens(prompt);
  const std::string decode_extra =
      R"("kv_transfer_params": {"do_remote_decode": false, "do_remote_prefill": true,
          "remote_bootstrap_addr": "http://127.0.0.1:)" +
      std::to_string(ports_[0]) + R"(", "remote_engine_id": ")" + fleet_->instance(0).engine_id() +
      R"(", "transfer_id": "xfer-2"})";
  // The decode leg blocks until the prefill leg publishes: it cannot finish first.
  auto decode = std::async(std::launch::async, [&] {
    return Post(ports_[1], "/v1/completions", CompletionBody(prompt, 3, false, decode_extra));
  });
  auto p = Post(ports_[0], "/v1/completions",
                CompletionBody(prompt, 1, false,
                               R"("kv_transfer_params": {"do_remote_decode": true,
                                   "do_remote_prefill": false, "transfer_id": "xfer-2"})"));
  ASSERT_EQ(p.status, 200);
  auto d = decode.get();
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(DecodeUsage(d).at("prompt_tokens_details").as_object().at("cached_tokens").as_int64(),
            n - 1);
  EXPECT_EQ(MetricValue(Metrics(1), "vllm:external_prefix_cache_hits_total"), n - 1);
}

TEST_F(WireTest, SglangStyleSameBodyToBoth) {
  const std::string prompt = Prompt(5, "sglang");
  const int n = PromptTokens(prompt);
  const std::string extra = R"("bootstrap_host": "127.0.0.1", "bootstrap_port": )" +
                            std::to_string(ports_[0]) +
                            R"(, "bootstrap_room": 7234567890123456789)";
  const std::string body = CompletionBody(prompt, 4, true, extra);
  auto decode =
      std::async(std::launch::async, [&] { return Post(ports_[1], "/v1/completions", body); });
  auto p = Post(ports_[0], "/v1/completions", body);
  ASSERT_EQ(p.status, 200);
  // The prefill server generates one token only.
  EXPECT_EQ(SsePayloads(p.body).size(), 1u + 2u);
  auto d = decode.get();
  ASSERT_EQ(d.status, 200);
  const std::vector<std::string> events = SsePayloads(d.body);
  ASSERT_EQ(events.size(), 4u + 2u);
  const json::object usage = json::parse(events[4]).as_object().at("usage").as_object();
  EXPECT_EQ(usage.at("prompt_tokens_details").as_object().at("cached_tokens").as_int64(), n - 1);
  EXPECT_EQ(MetricValue(Metrics(0), "kvroute_sim_kv_holds"), 0);
}

// --- Faults ------------------------------------------------------------------------------

TEST_F(WireTest, FaultUnhealthy) {
  auto set = Post(ports_[0], "/sim/faults", R"({"unhealthy": true})");
  ASSERT_EQ(set.status, 200) << set.body;
  EXPECT_EQ(set.Json().as_object().at("unhealthy"), true);
  EXPECT_EQ(Get(ports_[0], "/health").status, 503);
  EXPECT_EQ(Get(ports_[1], "/health").status, 200);
  Post(ports_[0], "/sim/faults", R"({"clear": true})");
  EXPECT_EQ(Get(ports_[0], "/health").status, 200);
}

TEST_F(WireTest, FaultErrorRate) {
  Post(ports_[0], "/sim/faults", R"({"error_rate": 1.0})");
  auto r = Post(ports_[0], "/v1/completions", CompletionBody("hello", 2));
  EXPECT_EQ(r.status, 500);
  EXPECT_EQ(r.Json().as_object().at("error").as_object().at("code").as_int64(), 500);
  EXPECT_EQ(Get(ports_[0], "/health").status, 200) << "only completions fail";
  Post(ports_[0], "/sim/faults", R"({"error_rate": 0})");
  EXPECT_EQ(Post(ports_[0], "/v1/completions", CompletionBody("hello", 2)).status, 200);
}

TEST_F(WireTest, FaultRefuseConnectionsAndRecoverThroughAPeer) {
  auto set = Post(ports_[1], "/sim/faults", R"({"instance": 0, "refuse_connections": true})");
  ASSERT_EQ(set.status, 200) << set.body;
  // Applied on instance 0's strand before the next request there can be accepted; a connect
  // may still race the close, so retry until refused (bounded, no sleeping).
  boost::system::error_code ec;
  for (int i = 0; i < 1000 && ec != boost::asio::error::connection_refused; ++i) {
    ec = Get(ports_[0], "/health").ec;
  }
  EXPECT_EQ(ec, boost::asio::error::connection_refused);
  auto clear = Post(ports_[1], "/sim/faults", R"({"instance": 0, "clear": true})");
  ASSERT_EQ(clear.status, 200);
  testing::HttpResult ok;
  for (int i = 0; i < 1000 && ok.status != 200; ++i) ok = Get(ports_[0], "/health");
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(Post(ports_[1], "/sim/faults", R"({"instance": 9, "hang": true})").status, 404);
}

TEST_F(WireTest, FaultDieMidStream) {
  Post(ports_[0], "/sim/faults", R"({"die_after_events": 2})");
  const std::string body = CompletionBody("hello world", 6, /*stream=*/true);
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
      "application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  auto [ec, raw] = testing::RawExchange(ports_[0], request);
  EXPECT_THAT(raw, StartsWith("HTTP/1.1 200 OK"));
  size_t events = 0;
  for (size_t pos = 0; (pos = raw.find("data: ", pos)) != std::string::npos; pos += 6) ++events;
  EXPECT_EQ(events, 2u);
  EXPECT_EQ(raw.find("[DONE]"), std::string::npos);
  EXPECT_EQ(raw.find("\r\n0\r\n\r\n"), std::string::npos) << "no terminating chunk";
  // Non-streaming requests are cut before any response.
  auto r = Post(ports_[0], "/v1/completions", CompletionBody("hello world", 3));
  EXPECT_TRUE(r.ec);
  EXPECT_EQ(r.status, 0);
  Post(ports_[0], "/sim/faults", R"({"die_after_events": null})");
  EXPECT_EQ(Post(ports_[0], "/v1/completions", CompletionBody("hello world", 3)).status, 200);
}

TEST_F(WireTest, FaultSlowdownStretchesModelledTime) {
  const std::string prompt = Prompt(2);
  Post(ports_[0], "/v1/completions", CompletionBody(prompt, 8));
  const double base = MetricValue(Metrics(0), "vllm:e2e_request_latency_seconds_sum");
  Post(ports_[1], "/sim/faults", R"({"slowdown": 4})");
  Post(ports_[1], "/v1/completions", CompletionBody(prompt, 8));
  const double slow = MetricValue(Metrics(1), "vllm:e2e_request_latency_seconds_sum");
  EXPECT_NEAR(slow, 4 * base, 1e-6 * base);
  EXPECT_GT(base, 0);
}

TEST_F(WireTest, FaultHangNeverAnswersUntilCleared) {
  Post(ports_[0], "/sim/faults", R"({"hang": true})");
  namespace net = boost::asio;
  net::io_context io;
  net::ip::tcp::socket socket(io);
  socket.connect({net::ip::make_address("127.0.0.1"), ports_[0]});
  const std::string request = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  net::write(socket, net::buffer(request));
  // The request is parked (bounded polling, no sleeping).
  int hung = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (hung != 1 && std::chrono::steady_clock::now() < deadline) {
    hung = fleet_->gauges(0).num_hung;
    std::this_thread::yield();
  }
  EXPECT_EQ(hung, 1);
  // Nothing may arrive while the fault is on. (A broken hang answers at once; a slow machine
  // can only make this check weaker, never fail it.)
  std::string got;
  char buf[256];
  socket.non_blocking(true);
  boost::system::error_code ec;
  socket.read_some(net::buffer(buf), ec);
  EXPECT_EQ(ec, net::error::would_block);
  EXPECT_EQ(Get(ports_[1], "/health").status, 200) << "other instances are unaffected";
  // /sim/faults itself never hangs, so the fault can be cleared; the hung request is dropped.
  ASSERT_EQ(Post(ports_[0], "/sim/faults", R"({"hang": false})").status, 200);
  socket.non_blocking(false);
  for (;;) {
    const size_t n = socket.read_some(net::buffer(buf), ec);
    got.append(buf, n);
    if (ec) break;
  }
  EXPECT_EQ(ec, net::error::eof);
  EXPECT_EQ(got, "");
  EXPECT_EQ(Get(ports_[0], "/health").status, 200);
}

TEST_F(WireTest, StopAbortsDecodeLegsWaitingForTheirPrefill) {
  const std::string extra = R"("kv_transfer_params": {"do_remote_decode": false,
      "do_remote_prefill": true, "remote_engine_id": "x", "transfer_id": "never"})";
  auto decode = std::async(std::launch::async, [&] {
    return Post(ports_[1], "/v1/completions", CompletionBody("hello", 2, false, extra));
  });
  // The waiting leg shows as waiting (bounded polling, no sleeping).
  double waiting = 0;
  for (int i = 0; i < 100000 && waiting != 1; ++i) {
    waiting = MetricValue(Metrics(1), "vllm:num_requests_waiting");
  }
  ASSERT_EQ(waiting, 1);
  fleet_->Stop();  // must not wait out the 30 s pairing timeout
  const testing::HttpResult r = decode.get();
  EXPECT_TRUE(r.ec);
  EXPECT_EQ(r.status, 0);
}

TEST(FleetRealTimeTest, RealTimeDriverReleasesStepsAndExportsItsScale) {
  FleetOptions opts;
  opts.instances = 1;
  opts.time_scale = 0.01;  // 100x faster than modelled: a few milliseconds of wall time
  opts.profile = TinyProfile();
  Fleet fleet(opts);
  auto ports = fleet.Start();
  ASSERT_TRUE(ports.ok());
  const std::string prompt = Prompt(2);
  const int n = PromptTokens(prompt);
  auto r = Post((*ports)[0], "/v1/completions", CompletionBody(prompt, 5, /*stream=*/true));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(SsePayloads(r.body).size(), 5u + 2u);
  const std::string m = Get((*ports)[0], "/metrics").body;
  EXPECT_EQ(MetricValue(m, "kvroute_sim_time_scale"), 0.01);
  // Modelled (virtual) latencies are at least the modelled step times, however fast the
  // machine: one prefill step, then four decode steps.
  const double prefill_step = 0.01 + 1e-4 * n;
  EXPECT_GE(MetricValue(m, "vllm:time_to_first_token_seconds_sum"), prefill_step - 1e-9);
  EXPECT_GE(MetricValue(m, "vllm:e2e_request_latency_seconds_sum"),
            prefill_step + 4 * (0.01 + 1e-3) - 1e-9);
  EXPECT_GE(MetricValue(m, "kvroute_sim_scheduler_lag_seconds"), 0);
  EXPECT_GE(fleet.gauges(0).steps, 5u);
}

TEST(FleetKillTest, KillResetsOpenConnectionsDropsRequestsAndRestartsOnThePort) {
  namespace net = boost::asio;
  FleetOptions opts;
  opts.instances = 2;
  opts.time_scale = 1;  // a 1,000-token stream lasts seconds: it is surely in flight
  opts.profile = TinyProfile();
  Fleet fleet(opts);
  auto started = fleet.Start();
  ASSERT_TRUE(started.ok());
  const std::vector<uint16_t> ports = *started;

  // An idle keep-alive connection, and a stream that has delivered its first event.
  net::io_context io;
  net::ip::tcp::socket idle(io);
  idle.connect({net::ip::make_address("127.0.0.1"), ports[0]});
  const std::string health = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  net::write(idle, net::buffer(health));
  char buf[4096];
  ASSERT_GT(idle.read_some(net::buffer(buf)), 0u);  // "HTTP/1.1 200 OK ..."
  net::ip::tcp::socket streaming(io);
  streaming.connect({net::ip::make_address("127.0.0.1"), ports[0]});
  const std::string body = CompletionBody("hello world", 1000, /*stream=*/true);
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  net::write(streaming, net::buffer(request));
  std::string got;
  boost::system::error_code ec;
  while (got.find("data: ") == std::string::npos && !ec) {
    got.append(buf, streaming.read_some(net::buffer(buf), ec));
  }
  ASSERT_FALSE(ec) << ec.message();

  Faults killed;
  killed.killed = true;
  fleet.SetFaults(0, killed);
  // Both connections are reset (RST), never ended in order; the stream gets no [DONE].
  while (!ec) got.append(buf, streaming.read_some(net::buffer(buf), ec));
  EXPECT_EQ(ec, net::error::connection_reset) << ec.message();
  EXPECT_EQ(got.find("[DONE]"), std::string::npos);
  ec = {};
  idle.read_some(net::buffer(buf), ec);
  EXPECT_EQ(ec, net::error::connection_reset) << ec.message();
  EXPECT_EQ(Get(ports[0], "/health").ec, net::error::connection_refused);
  EXPECT_EQ(Get(ports[1], "/health").status, 200) << "the peer is unaffected";
  EXPECT_EQ(Get(ports[1], "/sim/faults").Json().as_object().at("killed"), false);
  // The dropped request left the engine (the gauges follow at the engine's next loop turn;
  // bounded polling, no sleeping).
  int running = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (running != 0 && std::chrono::steady_clock::now() < deadline) {
    running = fleet.gauges(0).num_running;
    std::this_thread::yield();
  }
  EXPECT_EQ(running, 0);

  // Clearing the fault restarts the instance on the same port.
  ASSERT_EQ(Post(ports[1], "/sim/faults", R"({"instance": 0, "killed": false})").status, 200);
  testing::HttpResult ok;
  for (int i = 0; i < 1000 && ok.status != 200; ++i) ok = Get(ports[0], "/health");
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(Post(ports[0], "/v1/completions", CompletionBody("hello world", 2)).status, 200);
}

TEST(FleetThreadsTest, ConcurrentHandoffsAcrossThreads) {
  FleetOptions opts;
  opts.instances = 4;
  opts.time_scale = 0;
  opts.io_threads = 2;  // instances on different threads: the fabric crosses strands
  opts.profile = TinyProfile();
  opts.profile.num_gpu_blocks_override = 512;
  Fleet fleet(opts);
  auto started = fleet.Start();
  ASSERT_TRUE(started.ok());
  const std::vector<uint16_t> ports = *started;
  std::vector<std::future<int64_t>> decodes;
  std::vector<std::future<int>> prefills;
  std::vector<int> expected;
  for (int i = 0; i < 16; ++i) {
    const std::string prompt = Prompt(3, "pair " + std::to_string(i));
    expected.push_back(PromptTokens(prompt) - 1);
    const int a = i % 4;
    const int b = (i + 1) % 4;
    const std::string body = CompletionBody(
        prompt, 3, false,
        R"("bootstrap_host": "127.0.0.1", "bootstrap_port": )" + std::to_string(ports[a]) +
            R"(, "bootstrap_room": )" + std::to_string(1000 + i));
    decodes.push_back(std::async(std::launch::async, [&ports, b, body] {
      auto r = Post(ports[b], "/v1/completions", body);
      if (r.status != 200) return int64_t{-1};
      return r.Json()
          .as_object()
          .at("usage")
          .as_object()
          .at("prompt_tokens_details")
          .as_object()
          .at("cached_tokens")
          .as_int64();
    }));
    prefills.push_back(std::async(std::launch::async, [&ports, a, body] {
      return Post(ports[a], "/v1/completions", body).status;
    }));
  }
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(prefills[i].get(), 200) << i;
    EXPECT_EQ(decodes[i].get(), expected[i]) << i;
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(MetricValue(Get(ports[i], "/metrics").body, "kvroute_sim_kv_holds"), 0) << i;
  }
}

TEST(FleetStartTest, FaultsAtStartAndBadFaultJson) {
  FleetOptions opts;
  opts.instances = 2;
  opts.time_scale = 0;
  opts.profile = TinyProfile();
  Faults unhealthy;
  unhealthy.unhealthy = true;
  opts.faults = {Faults{}, unhealthy};
  Fleet fleet(opts);
  auto ports = fleet.Start();
  ASSERT_TRUE(ports.ok());
  EXPECT_EQ(Get((*ports)[0], "/health").status, 200);
  EXPECT_EQ(Get((*ports)[1], "/health").status, 503);
  EXPECT_EQ(Post((*ports)[0], "/sim/faults", R"({"slowdown": -1})").status, 400);
  EXPECT_EQ(Post((*ports)[0], "/sim/faults", R"({"bogus": 1})").status, 400);
  EXPECT_EQ(Get((*ports)[0], "/sim/faults").Json().as_object().at("slowdown").as_double(), 1.0);
}

}  // namespace
}  // namespace sim
