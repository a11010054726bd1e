#include "proxy/agent_apis.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace kvroute::proxy {
namespace {

namespace json = boost::json;

TEST(AgentApisTest, DialectsAndHandoff) {
  EXPECT_EQ(DialectFor(Endpoint::kChat), ApiDialect::kOpenAi);
  EXPECT_EQ(DialectFor(Endpoint::kCompletions), ApiDialect::kOpenAi);
  EXPECT_EQ(DialectFor(Endpoint::kMessages), ApiDialect::kAnthropic);
  EXPECT_EQ(DialectFor(Endpoint::kResponses), ApiDialect::kResponses);
  for (std::string_view connector : {"nixl", "mooncake", "sglang"}) {
    EXPECT_TRUE(HandoffServes(Endpoint::kChat, connector));
    EXPECT_TRUE(HandoffServes(Endpoint::kCompletions, connector));
    EXPECT_FALSE(HandoffServes(Endpoint::kResponses, connector));
    EXPECT_EQ(HandoffServes(Endpoint::kMessages, connector), connector != "sglang");
  }
}

TEST(AgentApisTest, ErrorShapes) {
  const json::value anthropic = json::parse(ErrorBodyFor(Endpoint::kMessages, 429, "busy"));
  EXPECT_EQ(anthropic.at("type"), "error");
  EXPECT_EQ(anthropic.at("error").at("type"), "rate_limit_error");
  EXPECT_EQ(anthropic.at("error").at("message"), "busy");
  EXPECT_EQ(json::parse(ErrorBodyFor(Endpoint::kMessages, 503, "x")).at("error").at("type"),
            "overloaded_error");
  EXPECT_EQ(json::parse(ErrorBodyFor(Endpoint::kMessages, 400, "x")).at("error").at("type"),
            "invalid_request_error");
  EXPECT_EQ(json::parse(ErrorBodyFor(Endpoint::kMessages, 502, "x")).at("error").at("type"),
            "api_error");
  const json::value openai = json::parse(ErrorBodyFor(Endpoint::kResponses, 400, "bad"));
  EXPECT_EQ(openai.at("error").at("message"), "bad");
  EXPECT_EQ(openai.at("error").at("code"), 400);
  // vLLM's own 404 for a response it does not hold, byte for byte.
  EXPECT_EQ(ResponseNotFoundBody("resp_1"),
            R"({"error":{"message":"Response with id 'resp_1' not found.",)"
            R"("type":"invalid_request_error","param":null,"code":404}})");
}

TEST(AgentApisTest, MidStreamErrorEvents) {
  const std::string chat = MidStreamErrorEvent(Endpoint::kChat, "broke");
  EXPECT_EQ(chat.rfind("data: {\"error\":", 0), 0u);
  EXPECT_NE(chat.find("\n\ndata: [DONE]\n\n"), std::string::npos);
  const std::string messages = MidStreamErrorEvent(Endpoint::kMessages, "broke");
  EXPECT_EQ(messages.rfind("event: error\ndata: ", 0), 0u);
  EXPECT_EQ(json::parse(messages.substr(19)).at("error").at("type"), "api_error");
  EXPECT_EQ(messages.find("[DONE]"), std::string::npos);
  const std::string responses = MidStreamErrorEvent(Endpoint::kResponses, "broke");
  EXPECT_EQ(responses.rfind("event: error\ndata: ", 0), 0u);
  EXPECT_EQ(json::parse(responses.substr(19)).at("message"), "broke");
}

TEST(AgentApisTest, ResponseIdFromTarget) {
  EXPECT_EQ(ResponseIdFromTarget("/v1/responses/resp_1"), "resp_1");
  EXPECT_EQ(ResponseIdFromTarget("/v1/responses/resp_1?stream=false"), "resp_1");
  EXPECT_EQ(ResponseIdFromTarget("/v1/responses/"), "");
  EXPECT_EQ(ResponseIdFromTarget("/v1/responses"), "");
  EXPECT_EQ(ResponseIdFromTarget("/v1/responses/resp_1/cancel"), "");
  EXPECT_EQ(ResponseIdFromTarget("/v1/chat/completions"), "");
}

TEST(AgentApisTest, PinToHome) {
  std::vector<router::BackendSpec> backends(3);
  backends[0].name = "gpu0";
  backends[1].name = "gpu1";
  backends[2].name = "gpu2";
  ResponseHomes homes(8);
  homes.Learn("resp_a", "gpu1");
  homes.Learn("resp_b", "gpu9");
  homes.Learn("resp_c", "gpu2");

  EXPECT_EQ(PinToHome("", homes, backends).kind, ResponsePin::kNone);
  EXPECT_EQ(PinToHome("resp_unknown", homes, backends).kind, ResponsePin::kNone);
  const ResponsePin a = PinToHome("resp_a", homes, backends);
  EXPECT_EQ(a.kind, ResponsePin::kHome);
  EXPECT_EQ(a.home, 1);
  EXPECT_EQ(a.avoid, (std::vector<int>{0, 2}));
  EXPECT_EQ(PinToHome("resp_b", homes, backends).kind, ResponsePin::kGone);
  backends[2].retired = true;  // dropped from the list by a reload
  EXPECT_EQ(PinToHome("resp_c", homes, backends).kind, ResponsePin::kGone);
}

}  // namespace
}  // namespace kvroute::proxy
