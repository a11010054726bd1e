#include "sim/anthropic_api.h"

#include <absl/strings/str_cat.h>

namespace sim {
namespace json = boost::json;

namespace {

// Request bodies that do not match vLLM's pydantic models fail before any handler runs: its
// validation handler answers 400 in the OpenAI error shape, type "Bad Request", on every
// route (/v1/messages included).
ApiError SchemaError(std::string message) {
  return MakeApiError(400, std::move(message), "Bad Request");
}

std::string SseNamedEvent(std::string_view event, const json::object& data) {
  std::string out = "event: ";
  out.append(event);
  out += "\ndata: ";
  out += json::serialize(data);
  out += "\n\n";
  return out;
}

// Claude Code's attribution block carries a per-request hash; vLLM drops it from the system
// prompt so that it does not defeat prefix caching.
bool IsBillingHeader(std::string_view text) {
  return text.substr(0, 26) == "x-anthropic-billing-header";
}

std::optional<ApiError> AppendSystemText(const json::value& content, std::string* system) {
  if (content.is_string()) {
    *system += content.as_string();
    return std::nullopt;
  }
  if (!content.is_array()) return SchemaError("system must be a string or a list of blocks");
  for (const json::value& b : content.as_array()) {
    const json::object* block = b.if_object();
    if (block == nullptr) return SchemaError("system blocks must be objects");
    const json::value* type = block->if_contains("type");
    const json::value* text = block->if_contains("text");
    if (type != nullptr && type->is_string() && type->as_string() == "text" && text != nullptr &&
        text->is_string() && !IsBillingHeader(text->as_string())) {
      *system += text->as_string();
    }
  }
  return std::nullopt;
}

std::string ImageUrl(const json::value* source) {
  const json::object* s = source != nullptr ? source->if_object() : nullptr;
  if (s == nullptr) return "";
  auto str = [&](const char* key, std::string_view fallback) {
    const json::value* v = s->if_contains(key);
    return std::string(v != nullptr && v->is_string() ? std::string_view(v->as_string())
                                                      : fallback);
  };
  if (str("type", "base64") == "url") return str("url", "");
  return absl::StrCat("data:", str("media_type", "image/jpeg"), ";base64,", str("data", ""));
}

constexpr std::string_view kBlockTypes[] = {
    "text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking", "tool_reference"};

// What the content blocks of one message become.
struct MessageParts {
  json::array parts;       // text and image parts of the message itself
  json::array tool_calls;  // from tool_use blocks
  std::string reasoning;   // from thinking blocks
};

json::object ToolCallOf(const json::object& tool_use) {
  const json::value* id = tool_use.if_contains("id");
  const json::value* name = tool_use.if_contains("name");
  const json::value* input = tool_use.if_contains("input");
  json::object call;
  call["id"] = id != nullptr && id->is_string() ? id->as_string() : json::string("call_0");
  call["type"] = "function";
  call["function"] = json::object{
      {"name", name != nullptr && name->is_string() ? name->as_string() : json::string()},
      {"arguments", input != nullptr && input->is_object() ? json::serialize(*input) : "{}"}};
  return call;
}

// A tool_result's content: a string, or the texts of its blocks one per line.
std::string ToolResultText(const json::value* result) {
  std::string text;
  if (result != nullptr && result->is_string()) {
    text = result->as_string();
  } else if (result != nullptr && result->is_array()) {
    for (const json::value& item : result->as_array()) {
      const json::object* it = item.if_object();
      const json::value* t = it != nullptr ? it->if_contains("text") : nullptr;
      if (t != nullptr && t->is_string()) {
        if (!text.empty()) text += '\n';
        text += t->as_string();
      }
    }
  }
  return text;
}

// One content block of a message in `role`. A user turn's tool_result goes to `chat` at once,
// as a tool message ahead of the turn's own message.
std::optional<ApiError> ConvertBlock(const json::value& b, const std::string& role,
                                     MessageParts* out, json::array* chat) {
  const json::object* block = b.if_object();
  const json::value* type_v = block != nullptr ? block->if_contains("type") : nullptr;
  if (type_v == nullptr || !type_v->is_string()) {
    return SchemaError("content blocks must be objects with a type");
  }
  const std::string_view type = type_v->as_string();
  bool known = false;
  for (std::string_view t : kBlockTypes) known = known || t == type;
  if (!known) return SchemaError("unknown content block type '" + std::string(type) + "'");
  if (type == "text") {
    const json::value* text = block->if_contains("text");
    if (text != nullptr && text->is_string() && !text->as_string().empty()) {
      out->parts.push_back(json::object{{"type", "text"}, {"text", text->as_string()}});
    }
  } else if (type == "image") {
    if (const json::value* source = block->if_contains("source"); source != nullptr) {
      out->parts.push_back(json::object{
          {"type", "image_url"}, {"image_url", json::object{{"url", ImageUrl(source)}}}});
    }
  } else if (type == "thinking") {
    if (const json::value* t = block->if_contains("thinking"); t != nullptr && t->is_string()) {
      out->reasoning += t->as_string();
    }
  } else if (type == "tool_use") {
    out->tool_calls.push_back(ToolCallOf(*block));
  } else if (type == "tool_result") {
    const json::value* id = block->if_contains("tool_use_id");
    const std::string text = ToolResultText(block->if_contains("content"));
    if (role == "user") {
      chat->push_back(json::object{
          {"role", "tool"},
          {"tool_call_id", id != nullptr && id->is_string() ? id->as_string() : json::string()},
          {"content", text}});
    } else {
      out->parts.push_back(json::object{{"type", "text"}, {"text", "Tool result: " + text}});
    }
  }
  // redacted_thinking and tool_reference blocks are accepted and dropped.
  return std::nullopt;
}

// One Anthropic message into chat messages, as vLLM's _convert_messages does: tool_result
// blocks of a user turn become tool messages (emitted before the turn's own message), a user
// turn left with no content is dropped.
std::optional<ApiError> ConvertMessage(const json::object& m, json::array* chat) {
  const json::value* role_v = m.if_contains("role");
  if (role_v == nullptr || !role_v->is_string()) {
    return SchemaError("messages: each message needs a role");
  }
  std::string role(role_v->as_string());
  if (role == "ctx" || role == "msg") role = "user";
  if (role != "user" && role != "assistant" && role != "system") {
    return SchemaError(absl::StrCat("messages: unknown role '", role, "'"));
  }
  const json::value* content = m.if_contains("content");
  if (content == nullptr) return SchemaError("messages: each message needs content");
  if (role == "system") return std::nullopt;  // folded into the system prompt
  json::object msg;
  msg["role"] = role;
  if (content->is_string()) {
    msg["content"] = content->as_string();
    chat->push_back(std::move(msg));
    return std::nullopt;
  }
  if (!content->is_array()) return SchemaError("message content must be a string or blocks");
  MessageParts blocks;
  for (const json::value& b : content->as_array()) {
    if (auto err = ConvertBlock(b, role, &blocks, chat)) return err;
  }
  json::array& parts = blocks.parts;
  if (!blocks.reasoning.empty()) msg["reasoning"] = blocks.reasoning;
  if (!blocks.tool_calls.empty()) msg["tool_calls"] = std::move(blocks.tool_calls);
  if (parts.size() == 1 && parts[0].as_object().at("type").as_string() == "text") {
    msg["content"] = parts[0].as_object().at("text");
  } else if (!parts.empty()) {
    msg["content"] = std::move(parts);
  }
  if (!(role == "user" && !msg.contains("content"))) chat->push_back(std::move(msg));
  return std::nullopt;
}

// model, max_tokens and messages: the fields vLLM's request model requires.
std::optional<ApiError> ReadRequiredFields(const json::object& o, json::object* chat,
                                           int64_t* max_tokens, const json::array** messages) {
  const json::value* model = o.if_contains("model");
  if (model == nullptr || !model->is_string() || model->as_string().empty()) {
    return SchemaError("model: Model is required");
  }
  (*chat)["model"] = model->as_string();
  const json::value* max = o.if_contains("max_tokens");
  if (max == nullptr || !max->is_int64()) {
    return SchemaError("max_tokens: Field required (an integer)");
  }
  if (max->as_int64() <= 0) return SchemaError("max_tokens: max_tokens must be positive");
  *max_tokens = max->as_int64();
  const json::value* m = o.if_contains("messages");
  if (m == nullptr || !m->is_array()) return SchemaError("messages: Field required (a list)");
  if (m->as_array().empty()) return MakeApiError(400, "messages must contain at least one item");
  *messages = &m->as_array();
  return std::nullopt;
}

// The chat messages: the system prompt (the top-level field, then system-role messages,
// joined) first, then each message converted.
std::optional<ApiError> ConvertConversation(const json::object& o, const json::array& messages,
                                            json::array* chat) {
  std::string system;
  if (const json::value* s = o.if_contains("system"); s != nullptr && !s->is_null()) {
    if (auto err = AppendSystemText(*s, &system)) return err;
  }
  for (const json::value& m : messages) {
    const json::object* msg = m.if_object();
    if (msg == nullptr) return SchemaError("messages: each message must be an object");
    const json::value* role = msg->if_contains("role");
    const json::value* content = msg->if_contains("content");
    if (role != nullptr && role->is_string() && role->as_string() == "system" &&
        content != nullptr) {
      if (auto err = AppendSystemText(*content, &system)) return err;
    }
  }
  if (!system.empty()) chat->push_back(json::object{{"role", "system"}, {"content", system}});
  for (const json::value& m : messages) {
    if (auto err = ConvertMessage(m.as_object(), chat)) return err;
  }
  return std::nullopt;
}

// A streamed request asks the chat path for usage on every chunk.
std::optional<ApiError> ReadStream(const json::object& o, json::object* chat,
                                   AnthropicRequest* out) {
  if (const json::value* stream = o.if_contains("stream"); stream != nullptr) {
    if (!stream->is_bool() && !stream->is_null()) return SchemaError("stream must be a boolean");
    out->stream = stream->is_bool() && stream->as_bool();
  }
  if (out->stream) {
    (*chat)["stream"] = true;
    (*chat)["stream_options"] =
        json::object{{"include_usage", true}, {"continuous_usage_stats", true}};
  }
  return std::nullopt;
}

// Anthropic tools become chat function tools, offered with tool_choice "auto".
std::optional<ApiError> ReadTools(const json::object& o, json::object* chat,
                                  const json::array** tools) {
  const json::value* t = o.if_contains("tools");
  if (t == nullptr || t->is_null()) return std::nullopt;
  if (!t->is_array()) return SchemaError("tools must be a list");
  *tools = &t->as_array();
  json::array chat_tools;
  for (const json::value& tool : **tools) {
    const json::object* to = tool.if_object();
    const json::value* name = to != nullptr ? to->if_contains("name") : nullptr;
    const json::value* schema = to != nullptr ? to->if_contains("input_schema") : nullptr;
    if (name == nullptr || !name->is_string()) return SchemaError("tools: name is required");
    if (schema == nullptr || !schema->is_object()) {
      return SchemaError("tools: input_schema must be a dictionary");
    }
    json::object fn{{"name", name->as_string()}, {"parameters", *schema}};
    if (const json::value* d = to->if_contains("description"); d != nullptr && d->is_string()) {
      fn["description"] = d->as_string();
    }
    chat_tools.push_back(json::object{{"type", "function"}, {"function", std::move(fn)}});
  }
  (*chat)["tools"] = std::move(chat_tools);
  (*chat)["tool_choice"] = "auto";
  return std::nullopt;
}

// tool_choice: "auto" and "none" pass through; "any" forces a call of the first tool, "tool"
// a call of the named one.
std::optional<ApiError> ReadToolChoice(const json::value& tc, const json::array* tools,
                                       json::object* chat, AnthropicRequest* out) {
  const json::object* choice = tc.if_object();
  const json::value* type = choice != nullptr ? choice->if_contains("type") : nullptr;
  if (type == nullptr || !type->is_string()) return SchemaError("tool_choice needs a type");
  const std::string_view t = type->as_string();
  const json::value* name = choice->if_contains("name");
  if (t == "tool" && (name == nullptr || !name->is_string() || name->as_string().empty())) {
    return SchemaError("tool_choice.name is required when type is 'tool'");
  }
  if (t == "auto" || t == "none") {
    (*chat)["tool_choice"] = t;
    return std::nullopt;
  }
  if (t != "any" && t != "tool") {
    return SchemaError("tool_choice: unknown type '" + std::string(t) + "'");
  }
  const json::object* chosen = nullptr;
  for (size_t i = 0; tools != nullptr && i < tools->size() && chosen == nullptr; ++i) {
    const json::object& to = (*tools)[i].as_object();
    if (t == "any" || to.at("name").as_string() == name->as_string()) chosen = &to;
  }
  if (chosen == nullptr) {
    return MakeApiError(400, "tool_choice names a tool that is not in tools", "BadRequestError",
                        "tool_choice");
  }
  ForcedToolCall call;
  call.name = chosen->at("name").as_string();
  call.arguments = ArgumentsForSchema(chosen->if_contains("input_schema"));
  call.required = t == "any";
  (*chat)["tool_choice"] =
      t == "any" ? json::value("required")
                 : json::value(json::object{{"type", "function"},
                                            {"function", json::object{{"name", call.name}}}});
  out->forced_tool = std::move(call);
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ConvertAnthropicRequest(std::string_view body, AnthropicRequest* out) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) return SchemaError(absl::StrCat("invalid JSON body: ", ec.message()));
  const json::object* o = v.if_object();
  if (o == nullptr) return SchemaError("the request body must be a JSON object");

  json::object chat;
  int64_t max_tokens = 0;
  const json::array* messages = nullptr;
  if (auto err = ReadRequiredFields(*o, &chat, &max_tokens, &messages)) return err;
  json::array chat_messages;
  if (auto err = ConvertConversation(*o, *messages, &chat_messages)) return err;
  chat["messages"] = std::move(chat_messages);
  chat["max_tokens"] = max_tokens;
  chat["max_completion_tokens"] = max_tokens;
  if (auto err = ReadStream(*o, &chat, out)) return err;
  const json::array* tools = nullptr;
  if (auto err = ReadTools(*o, &chat, &tools)) return err;
  if (const json::value* tc = o->if_contains("tool_choice"); tc != nullptr && !tc->is_null()) {
    if (auto err = ReadToolChoice(*tc, tools, &chat, out)) return err;
  }
  if (const json::value* kv = o->if_contains("kv_transfer_params"); kv != nullptr) {
    chat["kv_transfer_params"] = *kv;
  }
  out->chat_body = json::serialize(chat);
  return std::nullopt;
}

std::string AnthropicErrorJson(const ApiError& error) {
  json::object o;
  o["type"] = "error";
  o["error"] = json::object{{"type", error.type}, {"message", error.message}};
  return json::serialize(o);
}

AnthropicOutput::AnthropicOutput(std::optional<ForcedToolCall> forced_tool, std::string tool_use_id)
    : forced_tool_(std::move(forced_tool)), tool_use_id_(std::move(tool_use_id)) {}

std::string AnthropicOutput::ErrorBody(const ApiError& error) const {
  return AnthropicErrorJson(error);
}

std::string AnthropicOutput::StopReason(std::string_view finish) const {
  // The simulator's forced call is always complete (its arguments do not depend on the
  // number of tokens generated), so a required call ends as a tool call.
  if (forced_tool_ && forced_tool_->required) return "tool_use";
  if (finish == "length") return "max_tokens";
  return "end_turn";
}

std::string AnthropicOutput::FullBody(const ChatOutcome& outcome) {
  json::object o;
  o["id"] = outcome.id;
  o["type"] = "message";
  o["role"] = "assistant";
  json::array content;
  if (forced_tool_) {
    boost::system::error_code ec;
    json::value input = json::parse(forced_tool_->arguments, ec);
    content.push_back(json::object{{"type", "tool_use"},
                                   {"id", tool_use_id_},
                                   {"name", forced_tool_->name},
                                   {"input", std::move(input)}});
  } else if (!outcome.text.empty()) {
    content.push_back(json::object{{"type", "text"}, {"text", outcome.text}});
  }
  o["content"] = std::move(content);
  o["model"] = outcome.model;
  o["stop_reason"] = StopReason(outcome.finish);
  o["usage"] = json::object{{"input_tokens", outcome.usage.prompt_tokens},
                            {"output_tokens", outcome.usage.completion_tokens}};
  if (outcome.kv_transfer_params) o["kv_transfer_params"] = *outcome.kv_transfer_params;
  return json::serialize(o);
}

std::string AnthropicOutput::StreamStart(const std::string& id, int64_t /*created*/,
                                         const std::string& model, int prompt_tokens) {
  json::object message;
  message["id"] = id;
  message["content"] = json::array{};
  message["model"] = model;
  message["stop_reason"] = nullptr;
  message["stop_sequence"] = nullptr;
  message["usage"] = json::object{{"input_tokens", prompt_tokens}, {"output_tokens", 0}};
  return SseNamedEvent("message_start",
                       json::object{{"type", "message_start"}, {"message", std::move(message)}});
}

std::string AnthropicOutput::StreamText(std::string_view piece) {
  std::string out;
  if (forced_tool_) {
    // The whole call goes out with the first token: the constrained output is the arguments.
    if (block_open_) return out;
    block_open_ = true;
    out += SseNamedEvent("content_block_start",
                         json::object{{"type", "content_block_start"},
                                      {"content_block", json::object{{"type", "tool_use"},
                                                                     {"id", tool_use_id_},
                                                                     {"name", forced_tool_->name},
                                                                     {"input", json::object{}}}},
                                      {"index", 0}});
    out += SseNamedEvent(
        "content_block_delta",
        json::object{{"type", "content_block_delta"},
                     {"delta", json::object{{"type", "input_json_delta"},
                                            {"partial_json", forced_tool_->arguments}}},
                     {"index", 0}});
    return out;
  }
  if (piece.empty()) return out;
  if (!block_open_) {
    block_open_ = true;
    out +=
        SseNamedEvent("content_block_start",
                      json::object{{"type", "content_block_start"},
                                   {"content_block", json::object{{"type", "text"}, {"text", ""}}},
                                   {"index", 0}});
  }
  out +=
      SseNamedEvent("content_block_delta",
                    json::object{{"type", "content_block_delta"},
                                 {"delta", json::object{{"type", "text_delta"}, {"text", piece}}},
                                 {"index", 0}});
  return out;
}

std::string AnthropicOutput::StreamEnd(std::string_view finish, const Usage& usage) {
  std::string out;
  if (block_open_) {
    out += SseNamedEvent("content_block_stop",
                         json::object{{"type", "content_block_stop"}, {"index", 0}});
    block_open_ = false;
  }
  out += SseNamedEvent(
      "message_delta",
      json::object{{"type", "message_delta"},
                   {"delta", json::object{{"stop_reason", StopReason(finish)}}},
                   {"usage", json::object{{"input_tokens", usage.prompt_tokens},
                                          {"output_tokens", usage.completion_tokens}}}});
  out += SseNamedEvent("message_stop", json::object{{"type", "message_stop"}});
  return out;
}

}  // namespace sim
