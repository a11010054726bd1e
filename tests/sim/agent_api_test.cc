// The agent APIs of the simulated vLLM: Anthropic Messages (POST /v1/messages) and OpenAI
// Responses (POST /v1/responses, GET /v1/responses/{id}). In-process fleets on port 0, time
// scale 0, HTTP over loopback.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "sim/anthropic_api.h"
#include "sim/fleet.h"
#include "tests/sim/http_client.h"

namespace sim {
namespace {

namespace json = boost::json;
using ::sim::testing::Get;
using ::sim::testing::HttpRequest;
using ::sim::testing::Post;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr const char* kModel = "kvroute/tiny-test";

Profile TinyProfile() {
  Profile p = DefaultProfile();
  p.model_name = kModel;
  p.max_model_len = 4096;
  p.block_size = 16;
  p.num_gpu_blocks_override = 256;
  p.max_num_batched_tokens = 512;
  p.max_num_seqs = 16;
  p.mean_output_tokens = 8;
  p.timing = TimingModel{.step_fixed_s = 0.01,
                         .prefill_s_per_token = 1e-4,
                         .decode_s_per_seq = 1e-3,
                         .kv_read_s_per_token = 0};
  return p;
}

std::string LongSystem() {
  std::string s;
  for (int i = 0; i < 20; ++i) {
    s += "Rule " + std::to_string(i) + ": read the file before editing it and run the tests. ";
  }
  return s;
}

struct SseEvent {
  std::string name;
  json::object data;
};

// "event: <name>\ndata: <json>\n\n" events, in order; fails the test on bad framing.
std::vector<SseEvent> NamedEvents(const std::string& body) {
  std::vector<SseEvent> out;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      ADD_FAILURE() << "unterminated event at " << pos;
      break;
    }
    const std::string event = body.substr(pos, end - pos);
    pos = end + 2;
    const size_t nl = event.find('\n');
    if (event.rfind("event: ", 0) != 0 || nl == std::string::npos ||
        event.compare(nl + 1, 6, "data: ") != 0) {
      ADD_FAILURE() << "bad event framing: " << event;
      continue;
    }
    out.push_back(SseEvent{.name = event.substr(7, nl - 7),
                           .data = json::parse(event.substr(nl + 7)).as_object()});
  }
  return out;
}

std::vector<std::string> Names(const std::vector<SseEvent>& events) {
  std::vector<std::string> names;
  for (const SseEvent& e : events) names.push_back(e.name);
  return names;
}

// Consecutive repeats of a name collapse into one, so sequences with a variable number of
// deltas compare exactly.
std::vector<std::string> Collapsed(const std::vector<SseEvent>& events) {
  std::vector<std::string> names;
  for (const SseEvent& e : events) {
    if (names.empty() || names.back() != e.name) names.push_back(e.name);
  }
  return names;
}

int64_t Int(const json::value& v, std::initializer_list<std::string_view> path) {
  const json::value* cur = &v;
  for (std::string_view key : path) cur = &cur->as_object().at(key);
  return cur->as_int64();
}

class AgentApiTest : public ::testing::Test {
 protected:
  void StartFleet(int instances, size_t store_capacity) {
    FleetOptions opts;
    opts.instances = instances;
    opts.time_scale = 0;
    opts.profile = TinyProfile();
    opts.seed = 11;
    opts.responses_store_capacity = store_capacity;
    fleet_ = std::make_unique<Fleet>(opts);
    absl::StatusOr<std::vector<uint16_t>> ports = fleet_->Start();
    ASSERT_TRUE(ports.ok()) << ports.status();
    ports_ = *ports;
  }
  void SetUp() override { StartFleet(2, 1024); }
  void TearDown() override { fleet_.reset(); }

  std::unique_ptr<Fleet> fleet_;
  std::vector<uint16_t> ports_;
};

json::object MessagesBody(bool stream, int max_tokens = 8) {
  return json::object{
      {"model", kModel},
      {"max_tokens", max_tokens},
      {"stream", stream},
      {"system", json::array{json::object{{"type", "text"}, {"text", LongSystem()}}}},
      {"messages", json::array{json::object{{"role", "user"}, {"content", "list the files"}}}}};
}

json::object BashTool() {
  return json::object{
      {"name", "bash"},
      {"description", "Run a shell command"},
      {"input_schema",
       json::object{{"type", "object"},
                    {"properties", json::object{{"cmd", json::object{{"type", "string"}}},
                                                {"timeout", json::object{{"type", "integer"}}}}},
                    {"required", json::array{"cmd"}}}}};
}

TEST_F(AgentApiTest, MessagesNonStreamingHasVllmShapeAndUsage) {
  auto r = Post(ports_[0], "/v1/messages", json::serialize(MessagesBody(false)));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.headers["content-type"], StartsWith("application/json"));
  const json::object m = r.Json().as_object();
  EXPECT_THAT(std::string(m.at("id").as_string()), StartsWith("chatcmpl-"));
  EXPECT_EQ(m.at("type"), "message");
  EXPECT_EQ(m.at("role"), "assistant");
  EXPECT_EQ(m.at("model"), kModel);
  const json::array& content = m.at("content").as_array();
  ASSERT_EQ(content.size(), 1u);
  EXPECT_EQ(content[0].at("type"), "text");
  EXPECT_FALSE(content[0].at("text").as_string().empty());
  EXPECT_THAT(std::string(m.at("stop_reason").as_string()),
              ::testing::AnyOf("end_turn", "max_tokens"));
  // vLLM dumps with exclude_none: no stop_sequence, no kv_transfer_params, and usage has only
  // the two counts (no cache fields).
  EXPECT_FALSE(m.contains("stop_sequence"));
  EXPECT_FALSE(m.contains("kv_transfer_params"));
  const json::object& usage = m.at("usage").as_object();
  EXPECT_EQ(usage.size(), 2u);
  EXPECT_GT(usage.at("input_tokens").as_int64(), 100);
  EXPECT_GE(usage.at("output_tokens").as_int64(), 1);
  EXPECT_LE(usage.at("output_tokens").as_int64(), 8);

  // The same conversation through chat completions counts the same prompt tokens: the request
  // is served as that chat request.
  json::object chat{
      {"model", kModel},
      {"max_tokens", 1},
      {"messages", json::array{json::object{{"role", "system"}, {"content", LongSystem()}},
                               json::object{{"role", "user"}, {"content", "list the files"}}}}};
  auto c = Post(ports_[1], "/v1/chat/completions", json::serialize(chat));
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(Int(c.Json(), {"usage", "prompt_tokens"}), usage.at("input_tokens").as_int64());
}

TEST_F(AgentApiTest, MessagesStreamingEventSequence) {
  auto r = Post(ports_[0], "/v1/messages", json::serialize(MessagesBody(true, 6)));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.headers["content-type"], StartsWith("text/event-stream"));
  const std::vector<SseEvent> events = NamedEvents(r.body);
  EXPECT_THAT(Collapsed(events),
              ElementsAre("message_start", "content_block_start", "content_block_delta",
                          "content_block_stop", "message_delta", "message_stop"));
  for (const SseEvent& e : events) EXPECT_EQ(std::string(e.data.at("type").as_string()), e.name);
  // message_start is dumped with exclude_unset: the message has no "type" or "role".
  const json::object& start = events.front().data.at("message").as_object();
  EXPECT_FALSE(start.contains("type"));
  EXPECT_FALSE(start.contains("role"));
  EXPECT_TRUE(start.at("stop_reason").is_null());
  EXPECT_EQ(start.at("content").as_array().size(), 0u);
  const int64_t input_tokens = Int(start, {"usage", "input_tokens"});
  EXPECT_GT(input_tokens, 100);
  EXPECT_EQ(Int(start, {"usage", "output_tokens"}), 0);
  EXPECT_EQ(events[1].data.at("content_block").at("type"), "text");
  EXPECT_EQ(events[1].data.at("content_block").at("text"), "");
  int deltas = 0;
  for (const SseEvent& e : events) {
    if (e.name != "content_block_delta") continue;
    ++deltas;
    EXPECT_EQ(e.data.at("index"), 0);
    EXPECT_EQ(e.data.at("delta").at("type"), "text_delta");
  }
  const SseEvent& delta = events[events.size() - 2];
  EXPECT_EQ(Int(delta.data, {"usage", "input_tokens"}), input_tokens);
  EXPECT_EQ(Int(delta.data, {"usage", "output_tokens"}), deltas);
  EXPECT_FALSE(delta.data.at("usage").as_object().contains("cache_read_input_tokens"));
  EXPECT_EQ(events.back().data.size(), 1u);  // {"type":"message_stop"}
}

TEST_F(AgentApiTest, MessagesToolsArePromptTokens) {
  json::object without = MessagesBody(false, 1);
  json::object with = without;
  with["tools"] = json::array{BashTool()};
  auto a = Post(ports_[0], "/v1/messages", json::serialize(without));
  auto b = Post(ports_[0], "/v1/messages", json::serialize(with));
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_GT(Int(b.Json(), {"usage", "input_tokens"}),
            Int(a.Json(), {"usage", "input_tokens"}) + 20);
}

TEST_F(AgentApiTest, MessagesForcedToolUseAndToolResultTurn) {
  json::object body = MessagesBody(false);
  body["tools"] = json::array{BashTool()};
  body["tool_choice"] = json::object{{"type", "any"}};
  auto r = Post(ports_[0], "/v1/messages", json::serialize(body));
  ASSERT_EQ(r.status, 200) << r.body;
  const json::object m = r.Json().as_object();
  const json::object& block = m.at("content").as_array().at(0).as_object();
  EXPECT_EQ(block.at("type"), "tool_use");
  EXPECT_EQ(block.at("name"), "bash");
  EXPECT_THAT(std::string(block.at("id").as_string()), StartsWith("chatcmpl-tool-"));
  EXPECT_EQ(block.at("input").at("cmd"), "sim");
  EXPECT_EQ(block.at("input").at("timeout"), 0);
  EXPECT_EQ(m.at("stop_reason"), "tool_use");

  // The client runs the tool and sends the result: a valid next turn.
  json::object next = MessagesBody(true);
  next["tools"] = json::array{BashTool()};
  json::array& messages = next["messages"].as_array();
  messages.push_back(json::object{{"role", "assistant"}, {"content", json::array{block}}});
  messages.push_back(
      json::object{{"role", "user"},
                   {"content", json::array{json::object{{"type", "tool_result"},
                                                        {"tool_use_id", block.at("id")},
                                                        {"content", "a.txt\nb.txt"}}}}});
  auto r2 = Post(ports_[0], "/v1/messages", json::serialize(next));
  ASSERT_EQ(r2.status, 200) << r2.body;
  const std::vector<SseEvent> events = NamedEvents(r2.body);
  ASSERT_FALSE(events.empty());
  EXPECT_GT(Int(events.front().data.at("message"), {"usage", "input_tokens"}),
            Int(m, {"usage", "input_tokens"}));

  // Streamed, the forced call is one tool_use block whose input arrives as JSON deltas.
  body["stream"] = true;
  body["tool_choice"] = json::object{{"type", "tool"}, {"name", "bash"}};
  auto s = Post(ports_[0], "/v1/messages", json::serialize(body));
  const std::vector<SseEvent> tool_events = NamedEvents(s.body);
  EXPECT_THAT(Collapsed(tool_events),
              ElementsAre("message_start", "content_block_start", "content_block_delta",
                          "content_block_stop", "message_delta", "message_stop"));
  EXPECT_EQ(tool_events[1].data.at("content_block").at("type"), "tool_use");
  EXPECT_EQ(tool_events[1].data.at("content_block").at("input").as_object().size(), 0u);
  EXPECT_EQ(tool_events[2].data.at("delta").at("type"), "input_json_delta");
  EXPECT_EQ(json::parse(tool_events[2].data.at("delta").at("partial_json").as_string()).at("cmd"),
            "sim");
}

// A tool named in tool_choice becomes the chat request's named function choice, as vLLM's
// conversion makes it.
TEST(ConvertAnthropicRequestTest, ANamedToolChoiceNamesItsFunction) {
  json::object body = MessagesBody(false);
  body["tools"] = json::array{BashTool()};
  body["tool_choice"] = json::object{{"type", "tool"}, {"name", "bash"}};
  AnthropicRequest out;
  ASSERT_FALSE(ConvertAnthropicRequest(json::serialize(body), &out).has_value());
  const json::value chat = json::parse(out.chat_body);
  EXPECT_EQ(chat.at("tool_choice"),
            (json::object{{"type", "function"}, {"function", json::object{{"name", "bash"}}}}));
  ASSERT_TRUE(out.forced_tool.has_value());
  EXPECT_EQ(out.forced_tool->name, "bash");
  EXPECT_FALSE(out.forced_tool->required);

  body["tool_choice"] = json::object{{"type", "any"}};
  ASSERT_FALSE(ConvertAnthropicRequest(json::serialize(body), &out).has_value());
  EXPECT_EQ(json::parse(out.chat_body).at("tool_choice"), "required");
  EXPECT_TRUE(out.forced_tool->required);
}

TEST_F(AgentApiTest, MessagesErrorShapes) {
  // The Messages handler's own errors: Anthropic shape, the underlying status.
  json::object body = MessagesBody(false);
  body["model"] = "other";
  auto r = Post(ports_[0], "/v1/messages", json::serialize(body));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(
      r.body,
      R"({"type":"error","error":{"type":"NotFoundError","message":"The model `other` does not exist."}})");
  body = MessagesBody(false);
  body["messages"] = json::array{};
  r = Post(ports_[0], "/v1/messages", json::serialize(body));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.Json().at("type"), "error");
  EXPECT_EQ(r.Json().at("error").at("message"), "messages must contain at least one item");
  body = MessagesBody(false, 5000);
  r = Post(ports_[0], "/v1/messages", json::serialize(body));
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(std::string(r.Json().at("error").at("message").as_string()),
              HasSubstr("maximum context length"));
  // A body that fails the request model's validation: vLLM's validation handler answers in the
  // OpenAI shape on every route.
  body = MessagesBody(false);
  body.erase("max_tokens");
  r = Post(ports_[0], "/v1/messages", json::serialize(body));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.Json().at("error").at("type"), "Bad Request");
  EXPECT_EQ(r.Json().at("error").at("code"), 400);
  EXPECT_EQ(HttpRequest(ports_[0], boost::beast::http::verb::get, "/v1/messages").status, 405);
}

json::object ResponsesBody(const std::string& input, bool stream = false) {
  return json::object{{"model", kModel},
                      {"instructions", LongSystem()},
                      {"max_output_tokens", 6},
                      {"stream", stream},
                      {"input", input}};
}

TEST_F(AgentApiTest, ResponsesStoreGetAndFollowUpOnTheSameInstance) {
  auto r = Post(ports_[0], "/v1/responses", json::serialize(ResponsesBody("list the files")));
  ASSERT_EQ(r.status, 200) << r.body;
  const json::object first = r.Json().as_object();
  const std::string id(first.at("id").as_string());
  EXPECT_THAT(id, StartsWith("resp_"));
  EXPECT_EQ(first.at("object"), "response");
  EXPECT_EQ(first.at("status"), "completed");
  EXPECT_EQ(std::string(first.at("instructions").as_string()), LongSystem());
  const json::object& item = first.at("output").as_array().at(0).as_object();
  EXPECT_EQ(item.at("type"), "message");
  EXPECT_THAT(std::string(item.at("id").as_string()), StartsWith("msg_"));
  EXPECT_EQ(item.at("content").at(0).at("type"), "output_text");
  const int64_t input1 = Int(first, {"usage", "input_tokens"});
  const int64_t output1 = Int(first, {"usage", "output_tokens"});
  EXPECT_EQ(Int(first, {"usage", "total_tokens"}), input1 + output1);
  EXPECT_EQ(Int(first, {"usage", "input_tokens_details", "cached_tokens"}), 0);
  EXPECT_EQ(Int(first, {"usage", "output_tokens_details", "reasoning_tokens"}), 0);

  // GET returns the stored response, byte for byte.
  auto got = Get(ports_[0], "/v1/responses/" + id);
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(got.body, r.body);

  // The follow-up sees the stored conversation (instructions, the first input and output) and
  // finds it in the prefix cache.
  json::object follow{{"model", kModel},
                      {"max_output_tokens", 4},
                      {"previous_response_id", id},
                      {"input", "now read a.txt"}};
  auto r2 = Post(ports_[0], "/v1/responses", json::serialize(follow));
  ASSERT_EQ(r2.status, 200) << r2.body;
  const json::object second = r2.Json().as_object();
  EXPECT_EQ(std::string(second.at("previous_response_id").as_string()), id);
  EXPECT_GT(Int(second, {"usage", "input_tokens"}), input1 + output1);
  EXPECT_GE(Int(second, {"usage", "input_tokens_details", "cached_tokens"}), input1 - 16);

  // Another instance has never seen it: vLLM's 404.
  const std::string not_found = "{\"error\":{\"message\":\"Response with id '" + id +
                                "' not found.\",\"type\":\"invalid_request_error\",\"param\":null,"
                                "\"code\":404}}";
  auto elsewhere = Post(ports_[1], "/v1/responses", json::serialize(follow));
  EXPECT_EQ(elsewhere.status, 404);
  EXPECT_EQ(elsewhere.body, not_found);
  auto get_elsewhere = Get(ports_[1], "/v1/responses/" + id);
  EXPECT_EQ(get_elsewhere.status, 404);
  EXPECT_EQ(get_elsewhere.body, not_found);
}

TEST_F(AgentApiTest, ResponsesStreamingEventSequence) {
  auto r = Post(ports_[0], "/v1/responses", json::serialize(ResponsesBody("hello", true)));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.headers["content-type"], StartsWith("text/event-stream"));
  EXPECT_EQ(r.body.find("[DONE]"), std::string::npos);
  const std::vector<SseEvent> events = NamedEvents(r.body);
  EXPECT_THAT(Collapsed(events),
              ElementsAre("response.created", "response.in_progress", "response.output_item.added",
                          "response.content_part.added", "response.output_text.delta",
                          "response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"));
  std::string text;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(std::string(events[i].data.at("type").as_string()), events[i].name);
    EXPECT_EQ(events[i].data.at("sequence_number").as_int64(), static_cast<int64_t>(i));
    if (events[i].name == "response.output_text.delta") {
      EXPECT_EQ(events[i].data.at("content_index"), 0);
      text += events[i].data.at("delta").as_string();
    }
  }
  EXPECT_EQ(events[0].data.at("response").at("status"), "in_progress");
  EXPECT_TRUE(events[0].data.at("response").at("usage").is_null());
  const json::object& done = events[events.size() - 4].data;
  EXPECT_EQ(std::string(done.at("text").as_string()), text);
  const json::object& completed = events.back().data.at("response").as_object();
  EXPECT_EQ(completed.at("status"), "completed");
  EXPECT_EQ(std::string(completed.at("output").at(0).at("content").at(0).at("text").as_string()),
            text);
  // Stored like a response that is not streamed.
  const std::string id(completed.at("id").as_string());
  auto got = Get(ports_[0], "/v1/responses/" + id);
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(got.Json().as_object(), completed);
}

TEST_F(AgentApiTest, ResponsesForcedFunctionCallAndItsOutput) {
  json::object body = ResponsesBody("weather in Paris?");
  body["tools"] = json::array{json::object{
      {"type", "function"},
      {"name", "get_weather"},
      {"parameters",
       json::object{{"type", "object"},
                    {"properties", json::object{{"city", json::object{{"type", "string"}}}}}}}}};
  body["tool_choice"] = "required";
  auto r = Post(ports_[0], "/v1/responses", json::serialize(body));
  ASSERT_EQ(r.status, 200) << r.body;
  const json::object call = r.Json().at("output").at(0).as_object();
  EXPECT_EQ(call.at("type"), "function_call");
  EXPECT_EQ(call.at("name"), "get_weather");
  EXPECT_EQ(json::parse(call.at("arguments").as_string()).at("city"), "sim");
  EXPECT_THAT(std::string(call.at("call_id").as_string()), StartsWith("call_"));

  // The function's output, as a follow-up on the stored response.
  json::object follow{{"model", kModel},
                      {"previous_response_id", r.Json().at("id")},
                      {"max_output_tokens", 4},
                      {"input", json::array{json::object{{"type", "function_call_output"},
                                                         {"call_id", call.at("call_id")},
                                                         {"output", "{\"temperature\":21}"}}}}};
  auto r2 = Post(ports_[0], "/v1/responses", json::serialize(follow));
  ASSERT_EQ(r2.status, 200) << r2.body;
  EXPECT_EQ(r2.Json().at("output").at(0).at("type"), "message");

  body["stream"] = true;
  auto s = Post(ports_[0], "/v1/responses", json::serialize(body));
  EXPECT_THAT(
      Names(NamedEvents(s.body)),
      ElementsAre("response.created", "response.in_progress", "response.output_item.added",
                  "response.function_call_arguments.delta", "response.function_call_arguments.done",
                  "response.output_item.done", "response.completed"));
}

TEST_F(AgentApiTest, ResponsesNotStoredWhenAskedNot) {
  json::object body = ResponsesBody("hello");
  body["store"] = false;
  auto r = Post(ports_[0], "/v1/responses", json::serialize(body));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Get(ports_[0], "/v1/responses/" + std::string(r.Json().at("id").as_string())).status,
            404);
}

TEST_F(AgentApiTest, ResponsesErrors) {
  auto r = Post(ports_[0], "/v1/responses", R"({"model":"kvroute/tiny-test"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.Json().at("error").at("type"), "Bad Request");
  r = Post(ports_[0], "/v1/responses", R"({"model":"other","input":"x"})");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.Json().at("error").at("type"), "NotFoundError");
  EXPECT_EQ(Post(ports_[0], "/v1/responses/resp_x", "{}").status, 405);
}

TEST(AgentApiStoreTest, BoundedStoreForgetsTheOldestAndZeroStoresNothing) {
  for (size_t capacity : {size_t{0}, size_t{2}}) {
    FleetOptions opts;
    opts.time_scale = 0;
    opts.profile = TinyProfile();
    opts.responses_store_capacity = capacity;
    Fleet fleet(opts);
    absl::StatusOr<std::vector<uint16_t>> ports = fleet.Start();
    ASSERT_TRUE(ports.ok()) << ports.status();
    std::vector<std::string> ids;
    for (int i = 0; i < 3; ++i) {
      auto r = Post((*ports)[0], "/v1/responses",
                    json::serialize(ResponsesBody("turn " + std::to_string(i))));
      ASSERT_EQ(r.status, 200) << r.body;
      ids.push_back(std::string(r.Json().at("id").as_string()));
    }
    EXPECT_EQ(Get((*ports)[0], "/v1/responses/" + ids[0]).status, 404) << capacity;
    EXPECT_EQ(Get((*ports)[0], "/v1/responses/" + ids[1]).status, capacity == 0 ? 404 : 200);
    EXPECT_EQ(Get((*ports)[0], "/v1/responses/" + ids[2]).status, capacity == 0 ? 404 : 200);
  }
}

}  // namespace
}  // namespace sim
