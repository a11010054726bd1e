#include "proxy/features.h"

#include <gtest/gtest.h>

#include <string>

namespace kvroute::proxy {
namespace {

TEST(FeaturesTest, ChatMessagesRenderInOrderWithRoles) {
  auto f = ExtractFeatures(Endpoint::kChat, R"({"model":"m","stream":true,"max_tokens":7,
    "messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]})",
                           "");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->model, "m");
  EXPECT_TRUE(f->stream);
  EXPECT_EQ(f->max_tokens, 7);
  EXPECT_EQ(f->prompt_bytes, "<|system|>be brief\n<|user|>hi\n");
}

TEST(FeaturesTest, ChatTurnIsPrefixOfNextTurn) {
  auto t1 = ExtractFeatures(Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}]})", "");
  auto t2 = ExtractFeatures(Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"},
    {"role":"assistant","content":"b"},{"role":"user","content":"c"}]})",
                            "");
  ASSERT_TRUE(t1.ok() && t2.ok());
  EXPECT_EQ(t2->prompt_bytes.rfind(t1->prompt_bytes, 0), 0u);
}

TEST(FeaturesTest, ChatContentParts) {
  auto f = ExtractFeatures(Endpoint::kChat, R"({"messages":[{"role":"user","content":[
    {"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"http://x/i.png"}}]}]})",
                           "");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_NE(f->prompt_bytes.find("look"), std::string::npos);
  EXPECT_NE(f->prompt_bytes.find("http://x/i.png"), std::string::npos);
}

TEST(FeaturesTest, CompletionPromptString) {
  auto f = ExtractFeatures(Endpoint::kCompletions,
                           R"({"prompt":"Once upon","max_completion_tokens":3})", "");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->prompt_bytes, "Once upon");
  EXPECT_EQ(f->max_tokens, 3);
  EXPECT_FALSE(f->stream);
}

TEST(FeaturesTest, CompletionTokenIds) {
  auto f = ExtractFeatures(Endpoint::kCompletions, R"({"prompt":[1,22,333]})", "");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->prompt_bytes, "1 22 333 ");
  auto batch = ExtractFeatures(Endpoint::kCompletions, R"({"prompt":[[1,2],[3]]})", "");
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->prompt_bytes, "1 2 \x1e" "3 \x1e");
  auto strings = ExtractFeatures(Endpoint::kCompletions, R"({"prompt":["a","b"]})", "");
  ASSERT_TRUE(strings.ok());
  EXPECT_EQ(strings->prompt_bytes, "a\x1e" "b\x1e");
}

TEST(FeaturesTest, SessionHeaderWinsOverBody) {
  const char* body = R"({"session_id":"body-s","prompt":"x"})";
  auto from_body = ExtractFeatures(Endpoint::kCompletions, body, "");
  auto from_header = ExtractFeatures(Endpoint::kCompletions, body, "hdr-s");
  ASSERT_TRUE(from_body.ok() && from_header.ok());
  EXPECT_EQ(from_body->session_id, "body-s");
  EXPECT_EQ(from_header->session_id, "hdr-s");
}

struct Bad {
  const char* name;
  Endpoint endpoint;
  std::string body;
  const char* expect;
};

class BadBodyTest : public ::testing::TestWithParam<Bad> {};

TEST_P(BadBodyTest, InvalidArgumentWithMessage) {
  auto f = ExtractFeatures(GetParam().endpoint, GetParam().body, "");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(f.status().message()).find(GetParam().expect), std::string::npos)
      << f.status().message();
}

std::string Nested(int depth) {
  return std::string("{\"prompt\":\"x\",\"a\":") + std::string(depth, '[') + std::string(depth, ']') + "}";
}

INSTANTIATE_TEST_SUITE_P(
    Catalogue, BadBodyTest,
    ::testing::Values(
        Bad{"empty", Endpoint::kChat, "", "empty"},
        Bad{"malformed", Endpoint::kChat, "{\"messages\": [", "not valid JSON"},
        Bad{"truncated", Endpoint::kCompletions, "{\"prompt\": \"abc", "not valid JSON"},
        Bad{"not_object", Endpoint::kChat, "[1,2]", "must be a JSON object"},
        Bad{"missing_messages", Endpoint::kChat, "{\"model\":\"m\"}", "'messages' is a required"},
        Bad{"messages_not_list", Endpoint::kChat, "{\"messages\":\"hi\"}", "must be a list"},
        Bad{"messages_empty", Endpoint::kChat, "{\"messages\":[]}", "must not be empty"},
        Bad{"message_not_object", Endpoint::kChat, "{\"messages\":[3]}", "messages[0] must be"},
        Bad{"role_missing", Endpoint::kChat, "{\"messages\":[{\"content\":\"x\"}]}",
            "messages[0].role"},
        Bad{"content_wrong_type", Endpoint::kChat,
            "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages[0].content"},
        Bad{"missing_prompt", Endpoint::kCompletions, "{\"model\":\"m\"}", "'prompt' is a required"},
        Bad{"prompt_wrong_type", Endpoint::kCompletions, "{\"prompt\":{}}", "'prompt' must be"},
        Bad{"token_not_int", Endpoint::kCompletions, "{\"prompt\":[1,\"a\"]}", "token ids"},
        Bad{"model_wrong_type", Endpoint::kCompletions, "{\"prompt\":\"x\",\"model\":1}",
            "'model' must be a string"},
        Bad{"stream_wrong_type", Endpoint::kCompletions, "{\"prompt\":\"x\",\"stream\":\"yes\"}",
            "'stream' must be a boolean"},
        Bad{"max_tokens_negative", Endpoint::kCompletions, "{\"prompt\":\"x\",\"max_tokens\":-1}",
            "at least 0"},
        Bad{"max_tokens_absurd", Endpoint::kCompletions,
            "{\"prompt\":\"x\",\"max_tokens\":99999999999}", "exceeds the limit"},
        Bad{"max_tokens_float", Endpoint::kCompletions, "{\"prompt\":\"x\",\"max_tokens\":1.5}",
            "must be an integer"},
        Bad{"session_wrong_type", Endpoint::kCompletions,
            "{\"prompt\":\"x\",\"session_id\":7}", "'session_id' must be a string"},
        Bad{"invalid_utf8", Endpoint::kCompletions, "{\"prompt\":\"\xff\xfe\"}", "not valid JSON"},
        Bad{"deeply_nested", Endpoint::kCompletions, Nested(1000), "nests deeper"}),
    [](const ::testing::TestParamInfo<Bad>& info) { return info.param.name; });

TEST(FeaturesTest, HugeMessagesArrayRefused) {
  std::string body = "{\"messages\":[";
  for (int i = 0; i < 20; ++i) body += std::string(i ? "," : "") + "{\"role\":\"user\",\"content\":\"x\"}";
  body += "]}";
  FeatureLimits limits;
  limits.max_messages = 10;
  auto f = ExtractFeatures(Endpoint::kChat, body, "", limits);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(std::string(f.status().message()).find("at most 10"), std::string::npos);
}

}  // namespace
}  // namespace kvroute::proxy
