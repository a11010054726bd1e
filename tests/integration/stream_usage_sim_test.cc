// Usage on every stream, end to end: clients that do not ask for
// stream_options.include_usage get no usage chunk from kvroute in front of
// the simulated fleet, while kvroute's request log still has each
// response's true cached_tokens, co-located and on the decode leg of an
// offload; a cold request logs cached_tokens 0.
#include <gtest/gtest.h>

#include "tests/integration/harness.h"

namespace kvroute::testing {
namespace {

// A streamed chat body as most clients send it: no stream_options.
std::string PlainStreamBody(const std::string& model, const json::array& messages) {
  json::object o;
  o["model"] = model;
  o["messages"] = messages;
  o["max_tokens"] = 8;
  o["stream"] = true;
  return json::serialize(o);
}

// The stream carries content and ends with [DONE], and no event of it is a
// usage chunk or mentions usage.
void ExpectNoUsageChunk(const std::string& body) {
  EXPECT_EQ(body.find("\"usage\""), std::string::npos) << body;
  EXPECT_EQ(body.find("\"choices\":[]"), std::string::npos) << body;
  EXPECT_NE(body.find("\"delta\""), std::string::npos) << body;
  ASSERT_GE(body.size(), 14u);
  EXPECT_EQ(body.substr(body.size() - 14), "data: [DONE]\n\n");
}

// A count of the request log; -1 for null (unknown).
int64_t Count(const json::object& line, const char* key) {
  const json::value& v = line.at(key);
  return v.is_null() ? -1 : v.to_number<int64_t>();
}

void ZeroWhenAbsent(proxy::Config& c) {
  for (auto& b : c.backends) b.cached_tokens_absent = proxy::AbsentCachedTokens::kZero;
}

TEST(StreamUsageSimTest, StreamsWithoutIncludeUsageStillTeachTheRouter) {
  FleetHarness h(2, "baseline", ZeroWhenAbsent);
  json::array messages;
  messages.push_back(Msg("system", Text(8000, 31)));
  messages.push_back(Msg("user", Text(4000, 32)));
  auto send = [&] {
    return RequestOnce(h.server().port(), http::verb::post, "/v1/chat/completions",
                       PlainStreamBody(h.model(), messages), {{"X-Session-Id", "s-9"}});
  };
  auto cold = send();
  ASSERT_EQ(cold.result_int(), 200) << cold.body();
  ExpectNoUsageChunk(cold.body());
  messages.push_back(Msg("assistant", "ok"));
  messages.push_back(Msg("user", Text(1000, 33)));
  auto warm = send();
  ASSERT_EQ(warm.result_int(), 200) << warm.body();
  ExpectNoUsageChunk(warm.body());
  // The same turn once more, now asking for usage: the engine's own figure.
  auto asked = RequestOnce(h.server().port(), http::verb::post, "/v1/chat/completions",
                           ChatBody(h.model(), messages, /*stream=*/true), {{"X-Session-Id", "s-9"}});
  ASSERT_EQ(asked.result_int(), 200);
  const Usage truth = UsageOf(asked.body());
  ASSERT_GT(truth.cached_tokens, 0);

  const auto log = h.StopAndReadLog();
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(Count(log[0], "cached_tokens"), 0) << "a cold request is a miss";
  EXPECT_GT(Count(log[0], "prompt_tokens"), 2000);
  const int64_t warm_cached = Count(log[1], "cached_tokens");
  EXPECT_GT(warm_cached, 2000) << "the second turn reuses the first turn's prefix";
  EXPECT_EQ(Count(log[2], "cached_tokens"), truth.cached_tokens);
  EXPECT_GE(truth.cached_tokens, warm_cached);
}

TEST(StreamUsageSimTest, OffloadedStreamWithoutIncludeUsage) {
  // offload_gate threshold: every HEAVY request is offloaded, the case under test.
  FleetHarness h(4, "v2", [](proxy::Config& c) {
    ZeroWhenAbsent(c);
    c.router.offload_gate = "threshold";
  });
  json::array messages;
  messages.push_back(Msg("user", Text(120000, 34)));  // ~30k tokens, cold: HEAVY
  auto res = RequestOnce(h.server().port(), http::verb::post, "/v1/chat/completions",
                         PlainStreamBody(h.model(), messages));
  ASSERT_EQ(res.result_int(), 200) << res.body();
  ASSERT_NE(std::string(res["X-Kvroute-Backend"]).find("->"), std::string::npos)
      << "expected an offload";
  ExpectNoUsageChunk(res.body());
  const auto log = h.StopAndReadLog();
  ASSERT_EQ(log.size(), 1u);
  // The decode instance counts the pulled KV as cached.
  EXPECT_GT(Count(log[0], "cached_tokens"), 20000);
}

}  // namespace
}  // namespace kvroute::testing
