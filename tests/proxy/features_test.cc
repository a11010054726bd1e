#include "proxy/features.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

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
      {Endpoint::kChat,
       R"({"messages":[{"role":"user","content":"run ls"}],"model":"m","tools":[{"type":)"
       R"("function","function":{"name":"bash","parameters":{"type":"object","properties":)"
       R"({"cmd":{"type":"string","enum":["a\u00e9",1.5e3,null]}}}}}],"tool_choice":"auto"})"},
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

// ---------------------------------------------------------------------------
// Tools in the prefix, Anthropic Messages and OpenAI Responses.
// ---------------------------------------------------------------------------

constexpr char kBashTool[] =
    R"({"type":"function","function":{"name":"bash","parameters":{"type":"object"}}})";
constexpr char kEditTool[] =
    R"({"type":"function","function":{"name":"edit","parameters":{"type":"object"}}})";

std::string ChatWithTools(const std::string& tools_json) {
  return absl::StrCat(R"({"model":"m","messages":[{"role":"system","content":"sys"},)",
                      R"({"role":"user","content":"hi"}],"tools":)", tools_json, "}");
}

TEST(FeaturesToolsTest, ChatToolsComeFirstInThePrompt) {
  auto f = ExtractFeatures(Endpoint::kChat, ChatWithTools(absl::StrCat("[", kBashTool, "]")), "");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->prompt_bytes,
            absl::StrCat("<|tools|>[", kBashTool, "]\n<|system|>sys\n<|user|>hi\n"));
}

TEST(FeaturesToolsTest, RequestsDifferingOnlyInToolsDiffer) {
  auto none = ExtractFeatures(Endpoint::kChat, ChatWithTools("null"), "");
  auto empty = ExtractFeatures(Endpoint::kChat, ChatWithTools("[]"), "");
  auto bash = ExtractFeatures(Endpoint::kChat, ChatWithTools(absl::StrCat("[", kBashTool, "]")), "");
  auto both = ExtractFeatures(
      Endpoint::kChat, ChatWithTools(absl::StrCat("[", kBashTool, ",", kEditTool, "]")), "");
  ASSERT_TRUE(none.ok() && empty.ok() && bash.ok() && both.ok());
  EXPECT_EQ(none->prompt_bytes, empty->prompt_bytes);
  EXPECT_NE(bash->prompt_bytes, none->prompt_bytes);
  EXPECT_NE(bash->prompt_bytes, both->prompt_bytes);
  // They part before the system message: no chunk of the conversation is
  // shared between them.
  const std::string& a = bash->prompt_bytes;
  const std::string& b = both->prompt_bytes;
  const size_t split = static_cast<size_t>(
      std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
  EXPECT_LT(split, a.find("<|system|>"));
  EXPECT_LT(split, b.find("<|system|>"));
}

TEST(FeaturesToolsTest, SameToolsSpelledDifferentlyRenderTheSame) {
  auto compact = ExtractFeatures(Endpoint::kChat, ChatWithTools(R"([{"a":"\u00e9","b":[1,2]}])"), "");
  auto spaced = ExtractFeatures(Endpoint::kChat,
                                ChatWithTools("[ { \"a\" : \"\xc3\xa9\" , \"b\" : [ 1 , 2 ] } ]"), "");
  ASSERT_TRUE(compact.ok() && spaced.ok());
  EXPECT_EQ(compact->prompt_bytes, spaced->prompt_bytes);
}

TEST(FeaturesToolsTest, ToolsMustBeAList) {
  auto f = ExtractFeatures(Endpoint::kChat, ChatWithTools(R"({"name":"bash"})"), "");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(std::string(f.status().message()).find("'tools' must be a list"), std::string::npos);
}

TEST(FeaturesFastPathTest, AgreesWithDomWithTools) {
  const std::string cases[] = {
      ChatWithTools(absl::StrCat("[", kBashTool, "]")),
      ChatWithTools("[]"),
      ChatWithTools("null"),
      ChatWithTools("5"),
      ChatWithTools(R"([1,"x",{"deep":[[[[]]]]}])"),
      absl::StrCat(R"({"tools":[)", kBashTool, R"(],"messages":[{"role":"user","content":"a"}]})"),
      absl::StrCat(R"({"tools":[],"tools":[],"messages":[{"role":"user","content":"a"}]})"),
      absl::StrCat(R"({"messages":[{"content":"c","role":"user"}],"tools":[)", kEditTool, "]}"),
      absl::StrCat(R"({"messages":[{"role":"user","content":"a"}],"tools":[{"a":1e999}]})"),
  };
  for (const std::string& body : cases) ExpectSameAsDom(Endpoint::kChat, body);
  // A tools list nested close to the depth limit.
  for (int depth : {50, 60, 61, 62, 63, 64}) {
    ExpectSameAsDom(Endpoint::kChat,
                    ChatWithTools("[" + std::string(depth, '[') + std::string(depth, ']') + "]"));
  }
}

constexpr char kAnthropicTurn1[] = R"({
  "model": "claude", "max_tokens": 64, "stream": true,
  "metadata": {"user_id": "agent-7"},
  "tools": [{"name": "bash", "description": "Run a command",
             "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}},
             "cache_control": {"type": "ephemeral"}}],
  "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=1; cch=4f2a"},
             {"type": "text", "text": "You are a coding agent."}],
  "messages": [{"role": "user", "content": [
      {"type": "text", "text": "list files", "cache_control": {"type": "ephemeral"}}]}]
})";

constexpr char kAnthropicTurn2[] = R"({
  "model": "claude", "max_tokens": 64, "stream": true,
  "metadata": {"user_id": "agent-7"},
  "tools": [{"name": "bash", "description": "Run a command",
             "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}},
             "cache_control": {"type": "ephemeral"}}],
  "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=1; cch=9b11"},
             {"type": "text", "text": "You are a coding agent."}],
  "messages": [
    {"role": "user", "content": [{"type": "text", "text": "list files"}]},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "use ls", "signature": "sig"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "ls"}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1",
         "content": [{"type": "text", "text": "a.txt"},
                     {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                  "data": "iVBORw0KGgo="}}],
         "cache_control": {"type": "ephemeral"}}]}]
})";

TEST(FeaturesMessagesTest, RendersToolsSystemAndEveryBlockType) {
  auto f = ExtractFeatures(Endpoint::kMessages, kAnthropicTurn2, "");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->model, "claude");
  EXPECT_TRUE(f->stream);
  EXPECT_EQ(f->max_tokens, 64);
  EXPECT_EQ(f->session_id, "agent-7");
  const std::string& p = f->prompt_bytes;
  EXPECT_EQ(p.rfind("<|tools|><|tool|>bash\x1fRun a command\x1f{\"type\":\"object\"", 0), 0u) << p;
  EXPECT_LT(p.find("<|tools|>"), p.find("<|system|>You are a coding agent.\n"));
  EXPECT_LT(p.find("<|system|>"), p.find("<|user|>list files\n"));
  EXPECT_NE(p.find("<|thinking|>use ls"), std::string::npos);
  EXPECT_NE(p.find("<|tool_use|>bash{\"cmd\":\"ls\"}"), std::string::npos);
  EXPECT_NE(p.find("<|tool_result|>toolu_1\x1f" "a.txt<|image|>"), std::string::npos);
  EXPECT_NE(p.find("iVBORw0KGgo="), std::string::npos);
  EXPECT_EQ(p.find("billing"), std::string::npos);
  EXPECT_EQ(p.find("opaque"), std::string::npos);
  EXPECT_EQ(p.find("ephemeral"), std::string::npos);
  EXPECT_EQ(p.find("sig"), std::string::npos);
}

TEST(FeaturesMessagesTest, TurnIsPrefixOfNextTurnDespiteMovingCacheControl) {
  auto t1 = ExtractFeatures(Endpoint::kMessages, kAnthropicTurn1, "");
  auto t2 = ExtractFeatures(Endpoint::kMessages, kAnthropicTurn2, "");
  ASSERT_TRUE(t1.ok() && t2.ok()) << t1.status() << t2.status();
  EXPECT_EQ(t2->prompt_bytes.rfind(t1->prompt_bytes, 0), 0u)
      << t1->prompt_bytes << "\n---\n" << t2->prompt_bytes;
}

TEST(FeaturesMessagesTest, StringSystemAndContent) {
  auto f = ExtractFeatures(Endpoint::kMessages,
                           R"({"system":"be brief","messages":[{"role":"user","content":"hi"}],
                               "max_tokens":5})",
                           "");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->prompt_bytes, "<|system|>be brief\n<|user|>hi\n");
  EXPECT_TRUE(f->session_id.empty());
  EXPECT_TRUE(f->previous_response_id.empty());
}

TEST(FeaturesMessagesTest, HeaderWinsOverMetadataUserId) {
  auto f = ExtractFeatures(Endpoint::kMessages, kAnthropicTurn1, "hdr-s");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->session_id, "hdr-s");
}

TEST(FeaturesMessagesTest, ToolsChangeThePrefix) {
  const std::string base = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":5)";
  auto a = ExtractFeatures(Endpoint::kMessages,
                           base + R"(,"tools":[{"name":"a","input_schema":{}}]})", "");
  auto b = ExtractFeatures(Endpoint::kMessages,
                           base + R"(,"tools":[{"name":"b","input_schema":{}}]})", "");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->prompt_bytes, b->prompt_bytes);
}

constexpr char kResponsesBody[] = R"({
  "model": "m", "instructions": "You are terse.", "max_output_tokens": 32, "stream": false,
  "previous_response_id": "resp_abc", "prompt_cache_key": "conv-9",
  "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
  "input": [
    {"role": "user", "content": [{"type": "input_text", "text": "weather?"},
                                 {"type": "input_image", "image_url": "data:image/png;base64,AA"}]},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sunny."}]},
    {"type": "reasoning", "id": "rs_1", "summary": []}]
})";

TEST(FeaturesResponsesTest, RendersToolsInstructionsAndItems) {
  auto f = ExtractFeatures(Endpoint::kResponses, kResponsesBody, "");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->max_tokens, 32);
  EXPECT_EQ(f->previous_response_id, "resp_abc");
  EXPECT_EQ(f->session_id, "conv-9");
  const std::string& p = f->prompt_bytes;
  EXPECT_EQ(p.rfind("<|tools|>[{\"type\":\"function\",\"name\":\"get_weather\"", 0), 0u) << p;
  EXPECT_LT(p.find("<|tools|>"), p.find("<|system|>You are terse.\n"));
  EXPECT_LT(p.find("<|system|>"), p.find("<|user|>weather?"));
  EXPECT_NE(p.find("data:image/png;base64,AA"), std::string::npos);
  EXPECT_NE(p.find("<|function_call|>call_1\x1fget_weather\x1f{}\x1f\n"), std::string::npos);
  EXPECT_NE(p.find("<|function_call_output|>call_1\x1fsunny\n"), std::string::npos);
  EXPECT_NE(p.find("<|assistant|>Sunny.\n"), std::string::npos);
  EXPECT_NE(p.find("<|reasoning|>"), std::string::npos);
}

TEST(FeaturesResponsesTest, StringInputAndHeaderSession) {
  auto f = ExtractFeatures(Endpoint::kResponses, R"({"input":"hello","prompt_cache_key":"k"})",
                           "hdr");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->prompt_bytes, "<|user|>hello\n");
  EXPECT_EQ(f->session_id, "hdr");
}

TEST(FeaturesResponsesTest, ToolsChangeThePrefix) {
  auto a = ExtractFeatures(Endpoint::kResponses,
                           R"({"input":"hi","tools":[{"type":"function","name":"a"}]})", "");
  auto b = ExtractFeatures(Endpoint::kResponses,
                           R"({"input":"hi","tools":[{"type":"function","name":"b"}]})", "");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->prompt_bytes, b->prompt_bytes);
}

INSTANTIATE_TEST_SUITE_P(
    AgentApis, BadBodyTest,
    ::testing::Values(
        Bad{"messages_missing", Endpoint::kMessages, R"({"max_tokens":5})",
            "'messages' is a required"},
        Bad{"messages_empty", Endpoint::kMessages, R"({"messages":[]})", "must not be empty"},
        Bad{"messages_content_missing", Endpoint::kMessages, R"({"messages":[{"role":"user"}]})",
            "messages[0].content is required"},
        Bad{"messages_block_not_object", Endpoint::kMessages,
            R"({"messages":[{"role":"user","content":[7]}]})", "messages[0].content[0] must be"},
        Bad{"messages_block_type", Endpoint::kMessages,
            R"({"messages":[{"role":"user","content":[{"text":"x"}]}]})", "needs a string 'type'"},
        Bad{"messages_text_not_string", Endpoint::kMessages,
            R"({"messages":[{"role":"user","content":[{"type":"text","text":1}]}]})",
            "messages[0].content[0].text must be a string"},
        Bad{"messages_tool_result_content", Endpoint::kMessages,
            R"({"messages":[{"role":"user","content":[{"type":"tool_result","content":3}]}]})",
            "must be a string or a list of blocks"},
        Bad{"messages_system_type", Endpoint::kMessages,
            R"({"system":5,"messages":[{"role":"user","content":"x"}]})", "'system' must be"},
        Bad{"messages_tool_name", Endpoint::kMessages,
            R"({"tools":[{"input_schema":{}}],"messages":[{"role":"user","content":"x"}]})",
            "tools[0].name must be a string"},
        Bad{"messages_metadata_type", Endpoint::kMessages,
            R"({"metadata":[],"messages":[{"role":"user","content":"x"}]})",
            "'metadata' must be an object"},
        Bad{"messages_user_id_type", Endpoint::kMessages,
            R"({"metadata":{"user_id":1},"messages":[{"role":"user","content":"x"}]})",
            "'metadata.user_id' must be a string"},
        Bad{"messages_max_tokens_float", Endpoint::kMessages,
            R"({"max_tokens":1.5,"messages":[{"role":"user","content":"x"}]})",
            "'max_tokens' must be an integer"},
        Bad{"responses_input_missing", Endpoint::kResponses, R"({"model":"m"})",
            "'input' is a required"},
        Bad{"responses_input_type", Endpoint::kResponses, R"({"input":5})",
            "'input' must be a string or a list"},
        Bad{"responses_item_type", Endpoint::kResponses, R"({"input":[3]})",
            "input[0] must be an object"},
        Bad{"responses_role", Endpoint::kResponses, R"({"input":[{"content":"x"}]})",
            "input[0].role must be a string"},
        Bad{"responses_instructions", Endpoint::kResponses, R"({"input":"x","instructions":1})",
            "'instructions' must be a string"},
        Bad{"responses_previous_id", Endpoint::kResponses,
            R"({"input":"x","previous_response_id":1})", "'previous_response_id' must be"},
        Bad{"responses_max_output", Endpoint::kResponses,
            R"({"input":"x","max_output_tokens":-2})", "'max_output_tokens' must be at least 0"},
        Bad{"responses_tools", Endpoint::kResponses, R"({"input":"x","tools":{}})",
            "'tools' must be a list"}),
    [](const ::testing::TestParamInfo<Bad>& info) { return info.param.name; });

TEST(FeaturesResponsesTest, ItemLimit) {
  FeatureLimits limits;
  limits.max_messages = 2;
  auto f = ExtractFeatures(Endpoint::kResponses,
                           R"({"input":[{"role":"user","content":"a"},{"role":"user","content":"b"},
                                        {"role":"user","content":"c"}]})",
                           "", limits);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(std::string(f.status().message()).find("at most 2"), std::string::npos);
}

}  // namespace
}  // namespace kvroute::proxy
