// The agent APIs through kvroute in front of an in-process simulated fleet: the
// previous_response_id pin (every follow-up on the instance storing the conversation, vLLM's
// 404 once that instance is gone), GET /v1/responses/{id}, the Anthropic error shape of
// kvroute's own errors on /v1/messages, and Messages usage in the request log.
#include <gtest/gtest.h>

#include "sim/faults.h"
#include "tests/integration/harness.h"

namespace kvroute::testing {
namespace {

std::string ResponsesBody(const std::string& model, const std::string& input,
                          const std::string& previous = "") {
  json::object o{{"model", model}, {"input", input}, {"max_output_tokens", 4}};
  if (!previous.empty()) o["previous_response_id"] = previous;
  return json::serialize(o);
}

TEST(AgentApiSimTest, FollowUpsStayWithTheirConversationAndGetVllms404WhenItIsGone) {
  FleetHarness h(3, "v1");
  const uint16_t port = h.server().port();
  auto first =
      RequestOnce(port, http::verb::post, "/v1/responses", ResponsesBody(h.model(), Text(3000, 1)));
  ASSERT_EQ(first.result_int(), 200) << first.body();
  const std::string id(json::parse(first.body()).at("id").as_string());
  const std::string home(first["X-Kvroute-Backend"]);
  ASSERT_FALSE(home.empty());

  // A chain of follow-ups, each naming the previous one: all on the home instance, although
  // the others are idle and a fresh request would be spread.
  std::string previous = id;
  for (int turn = 0; turn < 4; ++turn) {
    auto r = RequestOnce(port, http::verb::post, "/v1/responses",
                         ResponsesBody(h.model(), "and then?", previous));
    ASSERT_EQ(r.result_int(), 200) << r.body();
    EXPECT_EQ(std::string(r["X-Kvroute-Backend"]), home) << turn;
    const json::value v = json::parse(r.body());
    EXPECT_GT(v.at("usage").at("input_tokens_details").at("cached_tokens").as_int64(), 500);
    previous = std::string(v.at("id").as_string());
  }

  // GET by id is relayed from the home instance, byte for byte.
  auto got = RequestOnce(port, http::verb::get, "/v1/responses/" + id);
  EXPECT_EQ(got.result_int(), 200);
  EXPECT_EQ(got.body(), first.body());
  EXPECT_EQ(std::string(got["X-Kvroute-Backend"]), home);
  auto unknown = RequestOnce(port, http::verb::get, "/v1/responses/resp_nope");
  EXPECT_EQ(unknown.result_int(), 404);
  EXPECT_EQ(unknown.body(), R"({"error":{"message":"Response with id 'resp_nope' not found.",)"
                            R"("type":"invalid_request_error","param":null,"code":404}})");
  EXPECT_EQ(RequestOnce(port, http::verb::post, "/v1/responses/" + id, "{}").result_int(), 405);

  // The home instance goes unhealthy: its conversations are unreachable, and the client gets
  // vLLM's own 404 rather than an answer from an instance that never saw them.
  const int home_index = home.back() - '0';
  sim::Faults faults;
  faults.unhealthy = true;
  h.fleet().SetFaults(home_index, faults);
  for (int i = 0; i < h.server().config().monitor.unhealthy_after; ++i) {
    h.server().CheckBackendsNow();
  }
  auto gone = RequestOnce(port, http::verb::post, "/v1/responses",
                          ResponsesBody(h.model(), "still there?", previous));
  EXPECT_EQ(gone.result_int(), 404);
  EXPECT_EQ(gone.body(), "{\"error\":{\"message\":\"Response with id '" + previous +
                             "' not found.\",\"type\":\"invalid_request_error\",\"param\":null,"
                             "\"code\":404}}");
  // A new conversation is served elsewhere.
  auto fresh =
      RequestOnce(port, http::verb::post, "/v1/responses", ResponsesBody(h.model(), Text(500, 2)));
  EXPECT_EQ(fresh.result_int(), 200);
  EXPECT_NE(std::string(fresh["X-Kvroute-Backend"]), home);

  const std::vector<json::object> log = h.StopAndReadLog();
  int responses = 0;
  for (const json::object& r : log) {
    if (r.at("route") == "/v1/responses") ++responses;
  }
  EXPECT_EQ(responses, 7);  // first, four follow-ups, the 404, the fresh one
}

TEST(AgentApiSimTest, MessagesErrorsAreAnthropicShapedAndUsageIsLogged) {
  FleetHarness h(2, "v1");
  const uint16_t port = h.server().port();
  auto bad = RequestOnce(port, http::verb::post, "/v1/messages", R"({"messages": "hi"})");
  EXPECT_EQ(bad.result_int(), 400);
  const json::value b = json::parse(bad.body());
  EXPECT_EQ(b.at("type"), "error");
  EXPECT_EQ(b.at("error").at("type"), "invalid_request_error");
  EXPECT_EQ(b.at("error").at("message"), "'messages' must be a list");

  const json::object body{
      {"model", h.model()},
      {"max_tokens", 6},
      {"stream", true},
      {"system", "You are terse."},
      {"metadata", json::object{{"user_id", "agent-1"}}},
      {"messages", json::array{json::object{{"role", "user"}, {"content", Text(2000, 3)}}}}};
  auto ok = RequestOnce(port, http::verb::post, "/v1/messages", json::serialize(body));
  ASSERT_EQ(ok.result_int(), 200) << ok.body();
  EXPECT_NE(ok.body().find("event: message_stop"), std::string::npos);

  const std::vector<json::object> log = h.StopAndReadLog();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].at("status"), 400);
  EXPECT_EQ(log[1].at("route"), "/v1/messages");
  EXPECT_EQ(log[1].at("session"), "agent-1");
  EXPECT_GT(log[1].at("prompt_tokens").as_int64(), 400);
  EXPECT_GE(log[1].at("completion_tokens").as_int64(), 1);
  EXPECT_TRUE(log[1].at("cached_tokens").is_null());  // vLLM's Messages usage has none
}

}  // namespace
}  // namespace kvroute::testing
