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


// ExtractFeatures takes a one-pass fast path for common bodies and falls
// back to the DOM parse for everything else; both must agree on every body,
// valid or not (same features, same status and message).
void ExpectSameAsDom(Endpoint endpoint, const std::string& body, std::string_view session = "") {
  auto fast = ExtractFeatures(endpoint, body, session);
  auto dom = ExtractFeaturesWithDomForTest(endpoint, body, session);
  ASSERT_EQ(fast.ok(), dom.ok()) << body;
  if (!fast.ok()) {
    EXPECT_EQ(fast.status(), dom.status()) << body;
    return;
  }
  EXPECT_EQ(fast->model, dom->model) << body;
  EXPECT_EQ(fast->session_id, dom->session_id) << body;
  EXPECT_EQ(fast->stream, dom->stream) << body;
  EXPECT_EQ(fast->max_tokens, dom->max_tokens) << body;
  EXPECT_EQ(fast->prompt_bytes, dom->prompt_bytes) << body;
}

TEST(FeaturesFastPathTest, AgreesWithDomOnCatalogue) {
  const std::pair<Endpoint, std::string> cases[] = {
      {Endpoint::kCompletions, R"({"model":"m","prompt":"Once upon a time","max_tokens":16})"},
      {Endpoint::kCompletions, R"( { "prompt" : "a\nb\t\"q\"\\ \/ \u00e9\u4e2d\u0001" } )"},
      {Endpoint::kCompletions, "{\"prompt\":\"caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80\"}"},
      {Endpoint::kCompletions, R"({"prompt":"\ud83d\ude00 pair"})"},
      {Endpoint::kCompletions, R"({"prompt":"\ud83d lone"})"},
      {Endpoint::kCompletions, R"({"prompt":"x","max_tokens":null,"max_completion_tokens":5})"},
      {Endpoint::kCompletions, R"({"prompt":"x","max_completion_tokens":null,"max_tokens":0})"},
      {Endpoint::kCompletions, R"({"prompt":"x","max_completion_tokens":3,"max_tokens":"z"})"},
      {Endpoint::kCompletions, R"({"prompt":"x","max_tokens":10000001})"},
      {Endpoint::kCompletions, R"({"prompt":"x","max_tokens":10000000})"},
      {Endpoint::kCompletions, R"({"prompt":"x","max_tokens":-0})"},
      {Endpoint::kCompletions, R"({"prompt":"x","max_tokens":1e2})"},
      {Endpoint::kCompletions, R"({"prompt":"x","max_tokens":18446744073709551615})"},
      {Endpoint::kCompletions, R"({"prompt":"x","max_tokens":01})"},
      {Endpoint::kCompletions, R"({"prompt":"x","t":[1,-2.5e-3,0.0,1E+9,true,false,null,{}]})"},
      {Endpoint::kCompletions, R"({"prompt":"x","t":1e999})"},
      {Endpoint::kCompletions, R"({"prompt":"x","t":-})"},
      {Endpoint::kCompletions, R"({"prompt":"x","t":1.})"},
      {Endpoint::kCompletions, R"({"prompt":"x","t":.5})"},
      {Endpoint::kCompletions, R"({"prompt":"x","t":tru})"},
      {Endpoint::kCompletions, R"({"prompt":"x",})"},
      {Endpoint::kCompletions, R"({"prompt":"x"} x)"},
      {Endpoint::kCompletions, R"({"prompt":"x"}   )"},
      {Endpoint::kCompletions, R"({"prompt":"a","prompt":"b"})"},
      {Endpoint::kCompletions, R"({"prompt":"x","stream":true,"stream":false})"},
      {Endpoint::kCompletions, R"({"prompt":"x","stream":null,"session_id":null})"},
      {Endpoint::kCompletions, R"({"prompt":"x","session_id":"s\u0041"})"},
      {Endpoint::kCompletions, R"({"pr\u006fmpt":"x"})"},
      {Endpoint::kCompletions, R"({"prompt":"bad \x escape"})"},
      {Endpoint::kCompletions, "{\"prompt\":\"ctl \x01 char\"}"},
      {Endpoint::kCompletions, "{\"prompt\":\"overlong \xc0\xaf\"}"},
      {Endpoint::kCompletions, "{\"prompt\":\"surrogate \xed\xa0\x80\"}"},
      {Endpoint::kCompletions, "{\"prompt\":\"too big \xf4\x90\x80\x80\"}"},
      {Endpoint::kCompletions, "{\"prompt\":\"cut \xe4\xb8\"}"},
      {Endpoint::kCompletions, R"({"prompt":"x","messages":[1]})"},
      {Endpoint::kCompletions, R"({"prompt":[1,2,3]})"},
      {Endpoint::kCompletions, R"({"prompt":"\u0000"})"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"hi"}],"prompt":5})"},
      {Endpoint::kChat, R"({"messages":[{"content":"c first","role":"user","name":"n"}]})"},
      {Endpoint::kChat, R"({"messages":[{"role":"assistant","content":null},{"role":"user"}]})"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a","content":"b"}]})"},
      {Endpoint::kChat, R"({"messages":[{"role":"assistant","content":null,"tool_calls":[]}]})"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":[{"type":"text","text":"t"}]}]})"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"},]})"},
      {Endpoint::kChat, R"({"messages":[{"role":1,"content":"a"}]})"},
      {Endpoint::kChat, R"({"messages":[{}]})"},
      {Endpoint::kChat, R"({"messages":[]})"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"messages":[]})"},
      {Endpoint::kChat, R"({"model":null,"messages":[{"role":"user","content":"a"}]})"},
      {Endpoint::kChat, R"({"model":"m\"q","messages":[{"role":"r\n","content":"a\\b"}]})"},
  };
  for (const auto& [endpoint, body] : cases) ExpectSameAsDom(endpoint, body);
  ExpectSameAsDom(Endpoint::kCompletions, R"({"prompt":"x","session_id":"b"})", "hdr");
  ExpectSameAsDom(Endpoint::kCompletions, R"({"prompt":"x","session_id":7})", "hdr");
}

TEST(FeaturesFastPathTest, AgreesWithDomOnNesting) {
  for (int depth : {1, 5, 30, 60, 61, 62, 63, 64, 65, 200}) {
    std::string body = "{\"prompt\":\"x\",\"a\":" + std::string(depth, '[') +
                       std::string(depth, ']') + "}";
    ExpectSameAsDom(Endpoint::kCompletions, body);
    std::string objs = "{\"prompt\":\"x\",\"a\":";
    for (int i = 0; i < depth; ++i) objs.append("{\"k\":");
    objs.append("1");
    objs.append(static_cast<size_t>(depth) + 1, '}');
    ExpectSameAsDom(Endpoint::kCompletions, objs);
  }
}

// Strings longer than the scanner's 16- and 64-byte blocks, with an escape,
// a multi-byte character, an early quote or a control byte at every offset:
// the fast path decodes as it scans, and must stop, decode and give up
// exactly where the DOM path does.
TEST(FeaturesFastPathTest, AgreesWithDomOnLongStrings) {
  const std::string specials[] = {"\\n", "\\u00e9", "\\\"", "\\\\", "\xc3\xa9",
                                  "\xe4\xb8\xad", "\"", "\x01", "\xc3", "\\x"};
  for (size_t len : {15u, 16u, 17u, 63u, 64u, 65u, 130u}) {
    for (size_t pos = 0; pos <= len; ++pos) {
      for (const std::string& sp : specials) {
        const std::string text = std::string(pos, 'a') + sp + std::string(len - pos, 'b');
        ExpectSameAsDom(Endpoint::kCompletions, "{\"model\":\"m\",\"prompt\":\"" + text + "\"}");
        ExpectSameAsDom(Endpoint::kChat, "{\"messages\":[{\"role\":\"user\",\"content\":\"" +
                                             text + "\"}]}");
      }
    }
  }
}

// Chat messages rendered during the scan (role before content) and after it
// (a content before its role anywhere in the list) give the same prompt.
TEST(FeaturesFastPathTest, AgreesWithDomOnMessageKeyOrders) {
  const std::string long_text(100, 'x');
  const std::string msgs[] = {
      R"({"role":"system","content":"sys\n)" + long_text + R"("})",
      R"({"content":"first\t)" + long_text + R"(","role":"user"})",
      R"({"role":"assistant","content":null})",
      R"({"role":"assistant"})",
      R"({"name":"n","role":"user","content":"c"})",
      R"({"content":null,"role":"tool"})",
  };
  const size_t n = std::size(msgs);
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      for (size_t c = 0; c < n; ++c) {
        ExpectSameAsDom(Endpoint::kChat,
                        "{\"messages\":[" + msgs[a] + "," + msgs[b] + "," + msgs[c] + "]}");
      }
    }
  }
  // The header wins over the body's session id, which is still checked.
  ExpectSameAsDom(Endpoint::kCompletions, R"({"prompt":"x","session_id":"s\u00e9"})", "hdr");
  ExpectSameAsDom(Endpoint::kCompletions, R"({"prompt":"x","session_id":"s\x"})", "hdr");
  ExpectSameAsDom(Endpoint::kCompletions, R"({"session_id":"s\n1","prompt":"x"})");
}

// Every truncation and many single-byte corruptions of realistic bodies.
TEST(FeaturesFastPathTest, AgreesWithDomOnMutations) {
  const std::pair<Endpoint, std::string> seeds[] = {
      {Endpoint::kCompletions,
       R"({"model":"Qwen/Qwen3","prompt":"line one\nline \"two\" caf\u00e9 )"
       "\xe4\xb8\xad"
       R"(","max_tokens":128,"temperature":0.7,"stream":false,"stop":["\n\n"]})"},
      {Endpoint::kChat,
       R"({"model":"m","stream":true,"stream_options":{"include_usage":true},)"
       R"("messages":[{"role":"system","content":"You are\thelpful."},)"
       R"({"role":"user","content":"Write \"code\"\\n","name":"u"}],"max_completion_tokens":9,)"
       R"("session_id":"s-1"})"},
  };
  const char replacements[] = {'"', '\\', '{', '}', '[', ']', ',', ':', ' ', 'a', '0', '-',
                               'e', 'n', 'u', '\x01', '\x7f', '\x80', '\xc3', '\xff'};
  for (const auto& [endpoint, seed] : seeds) {
    ExpectSameAsDom(endpoint, seed);
    for (size_t n = 0; n < seed.size(); ++n) ExpectSameAsDom(endpoint, seed.substr(0, n));
    for (size_t i = 0; i < seed.size(); ++i) {
      for (char r : replacements) {
        std::string m = seed;
        m[i] = r;
        ExpectSameAsDom(endpoint, m);
      }
      ExpectSameAsDom(endpoint, seed.substr(0, i) + seed.substr(i + 1));
    }
  }
}

}  // namespace
}  // namespace kvroute::proxy
