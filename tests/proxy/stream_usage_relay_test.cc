// Usage on every stream, through kvroute's server in front of a fake engine
// that answers streamed requests the way vLLM's serving code does
// (chat_completion_stream_generator / completion_stream_generator): the
// client must receive byte for byte what the engine sends for the client's
// own request, and the request log must still carry the engine's usage.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "proxy/server.h"
#include "tests/proxy/fake_upstream.h"
#include "tests/proxy/proxy_harness.h"

namespace kvroute::proxy {
namespace {
namespace json = boost::json;
using harness::StartServer;
using harness::TestConfig;
using kvroute::testing::FakeUpstream;
using kvroute::testing::RequestOnce;

// What one request asks of the stream, read as vLLM reads it: StreamOptions
// defaults include_usage to true; continuous_usage_stats acts only with it.
struct StreamAsk {
  bool include_usage = false;
  bool continuous = false;
};

StreamAsk AskOf(const json::object& body) {
  StreamAsk a;
  const json::value* so = body.if_contains("stream_options");
  if (so == nullptr || !so->is_object()) return a;
  const json::value* iu = so->as_object().if_contains("include_usage");
  a.include_usage = iu == nullptr || (iu->is_bool() && iu->as_bool());
  const json::value* cu = so->as_object().if_contains("continuous_usage_stats");
  a.continuous = a.include_usage && cu != nullptr && cu->is_bool() && cu->as_bool();
  return a;
}

constexpr int64_t kPromptTokens = 12;

// The events a vLLM server with --enable-prompt-tokens-details sends for a
// two-token answer; `cached` 0 omits prompt_tokens_details, as vLLM does.
std::vector<std::string> EngineEvents(bool chat, const StreamAsk& ask, int64_t cached) {
  std::vector<std::string> out;
  const std::string head =
      chat ? R"({"id":"chatcmpl-9","object":"chat.completion.chunk","created":1700000000,"model":"m",)"
           : R"({"id":"cmpl-9","object":"text_completion","created":1700000000,"model":"m",)";
  auto usage = [&](int64_t completion, bool details) {
    std::string u = R"({"prompt_tokens":)" + std::to_string(kPromptTokens) +
                    R"(,"total_tokens":)" + std::to_string(kPromptTokens + completion) +
                    R"(,"completion_tokens":)" + std::to_string(completion);
    if (details && cached > 0) {
      u += R"(,"prompt_tokens_details":{"cached_tokens":)" + std::to_string(cached) + "}";
    }
    return u + "}";
  };
  const char* pieces[] = {"Hi", "!"};
  if (chat) {
    std::string first = head + R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},)"
                               R"("logprobs":null,"finish_reason":null}])";
    if (ask.continuous) first += R"(,"usage":)" + usage(0, false);
    out.push_back("data: " + first + "}\n\n");
  }
  for (int i = 0; i < 2; ++i) {
    const bool last = i == 1;
    std::string c = head;
    if (chat) {
      c += R"("choices":[{"index":0,"delta":{"content":")" + std::string(pieces[i]) +
           R"("},"logprobs":null,"finish_reason":)" + (last ? R"("stop","stop_reason":null)" : "null") +
           "}]";
    } else {
      c += R"("choices":[{"index":0,"text":")" + std::string(pieces[i]) +
           R"(","logprobs":null,"finish_reason":)" + (last ? R"("length")" : "null") +
           R"(,"stop_reason":null}])";
    }
    if (ask.continuous) {
      c += R"(,"usage":)" + usage(i + 1, false);
    } else if (!chat) {
      c += R"(,"usage":null)";  // older completions chunks: exclude_unset=False
    }
    out.push_back("data: " + c + "}\n\n");
  }
  if (ask.include_usage) {
    out.push_back("data: " + head + R"("choices":[],"usage":)" + usage(2, true) + "}\n\n");
  }
  out.push_back("data: [DONE]\n\n");
  return out;
}

std::string Join(const std::vector<std::string>& events) {
  std::string s;
  for (const auto& e : events) s += e;
  return s;
}

// A fake vLLM: streams EngineEvents for what each request asks, one HTTP
// chunk per event (one more split in the middle of the usage event, as a
// read boundary can fall anywhere), with `cached` tokens cached.
class FakeVllm {
 public:
  explicit FakeVllm(int64_t cached)
      : cached_(cached), up_([this](const auto& req, auto& s) { return Serve(req, s); }) {}
  uint16_t port() const { return up_.port(); }
  std::vector<http::request<http::string_body>> received() { return up_.received(); }

 private:
  bool Serve(const http::request<http::string_body>& req, tcp::socket& s) {
    const json::object body = json::parse(req.body()).as_object();
    const bool chat = req.target() == "/v1/chat/completions";
    const StreamAsk ask = AskOf(body);
    const auto events = EngineEvents(chat, ask, cached_);
    if (!body.contains("stream") || !body.at("stream").as_bool()) {
      // Non-streaming: the whole response with its usage.
      std::string u = R"({"prompt_tokens":12,"total_tokens":14,"completion_tokens":2)";
      if (cached_ > 0) u += R"(,"prompt_tokens_details":{"cached_tokens":)" + std::to_string(cached_) + "}";
      FakeUpstream::WriteJson(s, R"({"id":"cmpl-9","object":"text_completion","choices":[{"index":0,)"
                                 R"("text":"Hi!","finish_reason":"length"}],"usage":)" + u + "}}");
      return true;
    }
    FakeUpstream::WriteSseHeader(s);
    for (const std::string& e : events) {
      if (e.find(R"("choices":[])") != std::string::npos) {
        const size_t half = e.size() / 2;
        FakeUpstream::WriteChunk(s, e.substr(0, half));
        FakeUpstream::WriteChunk(s, e.substr(half));
      } else {
        FakeUpstream::WriteChunk(s, e);
      }
    }
    FakeUpstream::WriteLastChunk(s);
    return true;
  }

  int64_t cached_;
  FakeUpstream up_;
};

std::string LogPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("kvroute_stream_usage_" + name + "_" + std::to_string(getpid()) + ".jsonl"))
      .string();
}

// The request log's lines, after the server has stopped.
std::vector<json::object> LogLines(const std::string& path) {
  std::vector<json::object> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line).as_object());
  return out;
}

struct Served {
  std::vector<std::string> client_bodies;
  std::vector<std::string> upstream_bodies;
  std::vector<json::object> log;
};

// Sends `bodies` in turn through kvroute to a FakeVllm with `cached` tokens.
Served Serve(const std::vector<std::pair<std::string, std::string>>& requests, int64_t cached,
             AbsentCachedTokens absent, const std::string& name,
             bool priority_scheduling = false) {
  FakeVllm engine(cached);
  Config c = TestConfig({engine.port()});
  c.backends[0].cached_tokens_absent = absent;
  c.backends[0].spec.priority_scheduling = priority_scheduling;
  c.request_log = LogPath(name);
  std::filesystem::remove(c.request_log);
  auto server = StartServer(c);
  Served out;
  for (const auto& [target, body] : requests) {
    auto res = RequestOnce(server->port(), http::verb::post, target, body);
    EXPECT_EQ(res.result_int(), 200) << res.body();
    out.client_bodies.push_back(res.body());
  }
  server->Shutdown();
  server->Wait();
  for (const auto& r : engine.received()) out.upstream_bodies.push_back(r.body());
  out.log = LogLines(c.request_log);
  std::filesystem::remove(c.request_log);
  return out;
}

const std::string kChat = "/v1/chat/completions";
const std::string kCmpl = "/v1/completions";
const std::string kChatBody =
    R"({"model":"m","messages":[{"role":"user","content":"hello"}],"stream":true,"max_tokens":2})";
const std::string kCmplBody = R"({"model":"m","prompt":"hello","stream":true,"max_tokens":2})";

TEST(StreamUsageRelayTest, ClientWithoutIncludeUsageGetsNoUsageAndTheLogHasIt) {
  const Served s = Serve({{kChat, kChatBody}, {kCmpl, kCmplBody}}, 8,
                         AbsentCachedTokens::kAuto, "no_usage");
  ASSERT_EQ(s.client_bodies.size(), 2u);
  EXPECT_EQ(s.client_bodies[0], Join(EngineEvents(true, {}, 8)));
  EXPECT_EQ(s.client_bodies[1], Join(EngineEvents(false, {}, 8)));
  EXPECT_EQ(s.client_bodies[0].find("usage"), std::string::npos);
  // kvroute asked the engine for the usage.
  ASSERT_EQ(s.upstream_bodies.size(), 2u);
  for (const auto& b : s.upstream_bodies) {
    EXPECT_EQ(AskOf(json::parse(b).as_object()).include_usage, true) << b;
    EXPECT_EQ(AskOf(json::parse(b).as_object()).continuous, false) << b;
  }
  ASSERT_EQ(s.log.size(), 2u);
  for (const auto& line : s.log) {
    EXPECT_EQ(line.at("prompt_tokens"), kPromptTokens);
    EXPECT_EQ(line.at("cached_tokens"), 8);
    EXPECT_EQ(line.at("completion_tokens"), 2);
  }
}

TEST(StreamUsageRelayTest, ClientWithIncludeUsageGetsExactlyWhatTheEngineSent) {
  const std::string chat =
      R"({"model":"m","messages":[{"role":"user","content":"hello"}],"stream":true,)"
      R"("stream_options":{"include_usage":true}})";
  const std::string continuous =
      R"({"model":"m","prompt":"hello","stream":true,"stream_options":{"continuous_usage_stats":true}})";
  const Served s = Serve({{kChat, chat}, {kCmpl, continuous}}, 8, AbsentCachedTokens::kAuto,
                         "with_usage");
  ASSERT_EQ(s.client_bodies.size(), 2u);
  EXPECT_EQ(s.client_bodies[0], Join(EngineEvents(true, {true, false}, 8)));
  // vLLM's include_usage defaults to true: continuous stats and the final usage.
  EXPECT_EQ(s.client_bodies[1], Join(EngineEvents(false, {true, true}, 8)));
  ASSERT_EQ(s.upstream_bodies.size(), 2u);
  EXPECT_EQ(s.upstream_bodies[0], chat);  // untouched
  EXPECT_EQ(s.upstream_bodies[1], continuous);
  ASSERT_EQ(s.log.size(), 2u);
  EXPECT_EQ(s.log[0].at("cached_tokens"), 8);
  EXPECT_EQ(s.log[1].at("cached_tokens"), 8);
}

TEST(StreamUsageRelayTest, ContinuousStatsWithUsageOffStaysOff) {
  // include_usage false turns continuous_usage_stats off too: the client
  // would get no usage at all, and gets none.
  const std::string body =
      R"({"model":"m","messages":[{"role":"user","content":"hello"}],"stream":true,)"
      R"("stream_options":{"include_usage":false,"continuous_usage_stats":true}})";
  const Served s = Serve({{kChat, body}}, 8, AbsentCachedTokens::kAuto, "continuous_off");
  ASSERT_EQ(s.client_bodies.size(), 1u);
  EXPECT_EQ(s.client_bodies[0], Join(EngineEvents(true, {}, 8)));
  ASSERT_EQ(s.upstream_bodies.size(), 1u);
  const StreamAsk sent = AskOf(json::parse(s.upstream_bodies[0]).as_object());
  EXPECT_TRUE(sent.include_usage);
  EXPECT_FALSE(sent.continuous);  // else the engine would add usage to every chunk
  ASSERT_EQ(s.log.size(), 1u);
  EXPECT_EQ(s.log[0].at("cached_tokens"), 8);
}

TEST(StreamUsageRelayTest, ColdRequestLogsZeroCachedTokens) {
  // The engine omits prompt_tokens_details: with cached_tokens_absent: zero
  // that is a miss, streamed or not.
  const std::string plain = R"({"model":"m","prompt":"hello","max_tokens":2})";
  const Served zero = Serve({{kChat, kChatBody}, {kCmpl, plain}}, 0, AbsentCachedTokens::kZero,
                            "cold_zero");
  EXPECT_EQ(zero.client_bodies[0], Join(EngineEvents(true, {}, 0)));
  ASSERT_EQ(zero.log.size(), 2u);
  EXPECT_EQ(zero.log[0].at("cached_tokens"), 0);
  EXPECT_EQ(zero.log[1].at("cached_tokens"), 0);
  // unknown: never inferred (null in the log).
  const Served unknown =
      Serve({{kChat, kChatBody}}, 0, AbsentCachedTokens::kUnknown, "cold_unknown");
  ASSERT_EQ(unknown.log.size(), 1u);
  EXPECT_TRUE(unknown.log[0].at("cached_tokens").is_null());
}

// An engine started with --scheduling-policy priority gets each request's
// deadline as `priority`, next to kvroute's own usage edit; an FCFS engine
// (which refuses any priority but 0) never does.
TEST(StreamUsageRelayTest, APriorityEngineGetsTheDeadlineBesideTheUsageEdit) {
  const std::string usage_off =
      R"({"model":"m","messages":[{"role":"user","content":"hello"}],"stream":true,)"
      R"("stream_options":{"include_usage":false},"max_tokens":2})";
  const auto before = std::chrono::system_clock::now();
  const Served s = Serve({{kChat, kChatBody}, {kChat, usage_off}, {kCmpl, kCmplBody}}, 8,
                         AbsentCachedTokens::kAuto, "priority", /*priority_scheduling=*/true);
  const auto after = std::chrono::system_clock::now();
  auto ms = [](std::chrono::system_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  };
  ASSERT_EQ(s.upstream_bodies.size(), 3u);
  const router::Options defaults;
  for (size_t i = 0; i < s.upstream_bodies.size(); ++i) {
    const json::object sent = json::parse(s.upstream_bodies[i]).as_object();
    ASSERT_TRUE(sent.contains("priority")) << s.upstream_bodies[i];
    const int64_t p = sent.at("priority").as_int64();
    // "hello" has fewer new tokens than warm_new_tokens: WARM, so its
    // deadline is its arrival plus ttft_warm_s.
    EXPECT_GE(p, ms(before) + static_cast<int64_t>(defaults.slo.ttft_warm_s * 1000) - 1);
    EXPECT_LE(p, ms(after) + static_cast<int64_t>(defaults.slo.ttft_warm_s * 1000) + 1);
    EXPECT_TRUE(AskOf(sent).include_usage) << s.upstream_bodies[i];
    EXPECT_EQ(s.client_bodies[i], Join(EngineEvents(i < 2, {}, 8)));
  }
}

TEST(StreamUsageRelayTest, AnFcfsEngineGetsNoPriority) {
  const Served s = Serve({{kChat, kChatBody}}, 8, AbsentCachedTokens::kAuto, "fcfs");
  ASSERT_EQ(s.upstream_bodies.size(), 1u);
  EXPECT_FALSE(json::parse(s.upstream_bodies[0]).as_object().contains("priority"));
}

}  // namespace
}  // namespace kvroute::proxy
