#include "sim/responses_api.h"

#include <absl/strings/str_cat.h>

namespace sim {
namespace json = boost::json;

namespace {

// Bodies that do not match vLLM's pydantic request model: 400 "Bad Request" in the OpenAI
// error shape, from its validation handler.
ApiError SchemaError(std::string message, std::string param = "") {
  return MakeApiError(400, std::move(message), "Bad Request", std::move(param));
}

const json::value* Field(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && !v->is_null() ? v : nullptr;
}

std::string StringField(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

json::object ToolCall(std::string call_id, std::string name, std::string arguments) {
  return json::object{
      {"id", std::move(call_id)},
      {"type", "function"},
      {"function", json::object{{"name", std::move(name)}, {"arguments", std::move(arguments)}}}};
}

// The stored output of a previous response, as the assistant turns of the conversation.
void AppendPreviousOutput(const json::object& response, json::array* messages) {
  const json::value* output = response.if_contains("output");
  if (output == nullptr || !output->is_array()) return;
  for (const json::value& item_v : output->as_array()) {
    const json::object& item = item_v.as_object();
    const std::string type = StringField(item, "type");
    if (type == "message") {
      for (const json::value& part : item.at("content").as_array()) {
        messages->push_back(
            json::object{{"role", "assistant"}, {"content", part.as_object().at("text")}});
      }
    } else if (type == "function_call") {
      json::array calls{ToolCall(StringField(item, "call_id"), StringField(item, "name"),
                                 StringField(item, "arguments"))};
      messages->push_back(json::object{{"role", "assistant"}, {"tool_calls", std::move(calls)}});
    }
    // Reasoning items are not sent back to the model.
  }
}

std::optional<ApiError> AppendInputItem(const json::value& item_v, json::array* messages) {
  const json::object* item = item_v.if_object();
  if (item == nullptr) return SchemaError("input items must be objects", "input");
  const json::value* type_v = item->if_contains("type");
  const std::string type = type_v != nullptr && type_v->is_string()
                               ? std::string(type_v->as_string())
                               : std::string("message");
  if (type == "message") {
    const json::value* role = item->if_contains("role");
    if (role == nullptr || !role->is_string()) {
      return SchemaError("input messages need a role", "input");
    }
    json::object msg{{"role", role->as_string()}};
    const json::value* content = Field(*item, "content");
    if (content == nullptr || content->is_string()) {
      msg["content"] = content != nullptr ? content->as_string() : json::string();
    } else if (content->is_array()) {
      json::array parts;
      for (const json::value& p : content->as_array()) {
        const json::object* part = p.if_object();
        if (part == nullptr) return SchemaError("content parts must be objects", "input");
        const std::string ptype = StringField(*part, "type");
        if (ptype == "input_text" || ptype == "output_text" || ptype == "text") {
          parts.push_back(json::object{{"type", "text"}, {"text", StringField(*part, "text")}});
        } else if (ptype == "input_image") {
          parts.push_back(
              json::object{{"type", "image_url"},
                           {"image_url", json::object{{"url", StringField(*part, "image_url")}}}});
        }
      }
      msg["content"] = std::move(parts);
    } else {
      return SchemaError("message content must be a string or a list of parts", "input");
    }
    messages->push_back(std::move(msg));
  } else if (type == "function_call") {
    json::array calls{ToolCall(StringField(*item, "call_id"), StringField(*item, "name"),
                               StringField(*item, "arguments"))};
    messages->push_back(json::object{{"role", "assistant"}, {"tool_calls", std::move(calls)}});
  } else if (type == "function_call_output") {
    const json::value* output = item->if_contains("output");
    messages->push_back(json::object{
        {"role", "tool"},
        {"tool_call_id", StringField(*item, "call_id")},
        {"content", output != nullptr && output->is_string()
                        ? output->as_string()
                        : json::string(output != nullptr ? json::serialize(*output) : "")}});
  } else if (type == "reasoning" || type == "item_reference") {
    // Reasoning is not sent back to the model; references are resolved by the store only.
  } else {
    return SchemaError(absl::StrCat("input item type '", type, "' is not supported"), "input");
  }
  return std::nullopt;
}

json::object UsageObject(const Usage& usage) {
  return json::object{
      {"input_tokens", usage.prompt_tokens},
      {"input_tokens_details", json::object{{"cached_tokens", usage.cached_tokens}}},
      {"output_tokens", usage.completion_tokens},
      {"output_tokens_details", json::object{{"reasoning_tokens", 0}}},
      {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

json::object OutputText(std::string_view text, bool with_logprobs) {
  json::object part{{"annotations", json::array{}}, {"text", text}, {"type", "output_text"}};
  if (with_logprobs) part["logprobs"] = json::array{};
  return part;
}

// The request's own settings: model, instructions, stream, store, max_output_tokens, and the
// sampling fields the response object repeats.
std::optional<ApiError> ReadSettings(const json::object& o, json::object* chat,
                                     std::string* instructions, ResponsesRequest* out) {
  json::object& echo = out->echo;
  if (const json::value* model = Field(o, "model")) {
    if (!model->is_string()) return SchemaError("model must be a string", "model");
    (*chat)["model"] = model->as_string();
  }
  if (const json::value* instr = Field(o, "instructions")) {
    if (!instr->is_string()) return SchemaError("instructions must be a string", "instructions");
    *instructions = instr->as_string();
  }
  echo["instructions"] = instructions->empty() ? json::value(nullptr) : json::value(*instructions);
  if (const json::value* s = Field(o, "stream")) {
    if (!s->is_bool()) return SchemaError("stream must be a boolean", "stream");
    out->stream = s->as_bool();
  }
  if (const json::value* s = Field(o, "store")) {
    if (!s->is_bool()) return SchemaError("store must be a boolean", "store");
    out->store = s->as_bool();
  }
  echo["max_output_tokens"] = nullptr;
  if (const json::value* m = Field(o, "max_output_tokens")) {
    if (!m->is_int64() || m->as_int64() < 1) {
      return SchemaError("max_output_tokens must be a positive integer", "max_output_tokens");
    }
    (*chat)["max_tokens"] = m->as_int64();
    echo["max_output_tokens"] = m->as_int64();
  }
  for (const char* key : {"temperature", "top_p"}) {
    const json::value* x = Field(o, key);
    echo[key] = x != nullptr && x->is_number() ? *x : json::value(1.0);
  }
  return std::nullopt;
}

// Function tools go to the chat template (other tool types are ignored); the response object
// repeats the tools as given. `*tools` points at the request's list, if any.
std::optional<ApiError> ReadTools(const json::object& o, json::object* chat,
                                  const json::array** tools, json::object* echo) {
  json::array chat_tools;
  if (const json::value* t = Field(o, "tools")) {
    if (!t->is_array()) return SchemaError("tools must be a list", "tools");
    *tools = &t->as_array();
    for (const json::value& tool : **tools) {
      const json::object* to = tool.if_object();
      if (to == nullptr) return SchemaError("tools must be objects", "tools");
      if (StringField(*to, "type") != "function") continue;
      json::object fn{{"name", StringField(*to, "name")}};
      if (const json::value* d = Field(*to, "description")) fn["description"] = *d;
      if (const json::value* p = Field(*to, "parameters")) fn["parameters"] = *p;
      chat_tools.push_back(json::object{{"type", "function"}, {"function", std::move(fn)}});
    }
  }
  (*echo)["tools"] = *tools != nullptr ? json::value(**tools) : json::value(json::array{});
  (*echo)["tool_choice"] = "auto";
  if (!chat_tools.empty()) {
    (*chat)["tools"] = std::move(chat_tools);
    (*chat)["tool_choice"] = "auto";
  }
  return std::nullopt;
}

// The call a forcing tool_choice makes: the first function tool ("required") or the one named
// `forced`.
std::optional<ApiError> ForceToolCall(const json::array* tools, bool required,
                                      const std::string& forced, json::object* chat,
                                      ResponsesRequest* out) {
  const json::object* chosen = nullptr;
  for (size_t i = 0; tools != nullptr && i < tools->size() && chosen == nullptr; ++i) {
    const json::object& to = (*tools)[i].as_object();
    if (StringField(to, "type") != "function") continue;
    if (required || StringField(to, "name") == forced) chosen = &to;
  }
  if (chosen == nullptr) {
    return MakeApiError(400, "tool_choice names a function that is not in tools",
                        "invalid_request_error", "tool_choice");
  }
  ForcedToolCall call;
  call.name = StringField(*chosen, "name");
  call.arguments = ArgumentsForSchema(chosen->if_contains("parameters"));
  call.required = required;
  (*chat)["tool_choice"] =
      required ? json::value("required")
               : json::value(json::object{{"type", "function"},
                                          {"function", json::object{{"name", call.name}}}});
  out->forced_tool = std::move(call);
  return std::nullopt;
}

// tool_choice: "auto" and "none" pass through to the chat request when it has tools;
// "required" or a named function forces a call.
std::optional<ApiError> ReadToolChoice(const json::value& tc, const json::array* tools,
                                       json::object* chat, ResponsesRequest* out) {
  out->echo["tool_choice"] = tc;
  std::string forced;
  bool required = false;
  if (tc.is_string()) {
    const std::string_view c = tc.as_string();
    if (c == "required") {
      required = true;
    } else if (c != "auto" && c != "none") {
      return SchemaError("tool_choice '" + std::string(c) + "' is not supported", "tool_choice");
    }
    if (chat->contains("tools")) (*chat)["tool_choice"] = c;
  } else if (tc.is_object()) {
    forced = StringField(tc.as_object(), "name");
    if (forced.empty()) return SchemaError("tool_choice needs a name", "tool_choice");
  } else {
    return SchemaError("tool_choice must be a string or an object", "tool_choice");
  }
  if (!required && forced.empty()) return std::nullopt;
  return ForceToolCall(tools, required, forced, chat, out);
}

// The conversation: instructions, the stored one of previous_response_id, then the new input.
std::optional<ApiError> ReadConversation(const json::object& o, const std::string& instructions,
                                         const ResponseStore& store, ResponsesRequest* out) {
  json::array& messages = out->messages;
  if (!instructions.empty()) {
    messages.push_back(json::object{{"role", "system"}, {"content", instructions}});
  }
  out->echo["previous_response_id"] = nullptr;
  if (const json::value* prev = Field(o, "previous_response_id")) {
    if (!prev->is_string()) {
      return SchemaError("previous_response_id must be a string", "previous_response_id");
    }
    const StoredResponse* stored = store.Find(prev->as_string());
    if (stored == nullptr) return ResponseNotFound(prev->as_string());
    for (const json::value& m : stored->messages) messages.push_back(m);
    AppendPreviousOutput(stored->response, &messages);
    out->echo["previous_response_id"] = prev->as_string();
  }
  const json::value* input = o.if_contains("input");
  if (input == nullptr) return SchemaError("input: Field required", "input");
  if (input->is_string()) {
    messages.push_back(json::object{{"role", "user"}, {"content", input->as_string()}});
  } else if (input->is_array()) {
    for (const json::value& item : input->as_array()) {
      if (auto err = AppendInputItem(item, &messages)) return err;
    }
  } else {
    return SchemaError("input must be a string or a list of items", "input");
  }
  if (messages.empty()) return MakeApiError(400, "input must not be empty", "BadRequestError");
  return std::nullopt;
}

}  // namespace

const StoredResponse* ResponseStore::Find(std::string_view id) const {
  auto it = by_id_.find(std::string(id));
  return it == by_id_.end() ? nullptr : &it->second;
}

void ResponseStore::Put(const std::string& id, StoredResponse stored) {
  if (capacity_ == 0) return;
  auto [it, inserted] = by_id_.insert_or_assign(id, std::move(stored));
  if (inserted) order_.push_back(id);
  while (by_id_.size() > capacity_) {
    by_id_.erase(order_.front());
    order_.pop_front();
  }
}

ApiError ResponseNotFound(std::string_view id) {
  return MakeApiError(404, "Response with id '" + std::string(id) + "' not found.",
                      "invalid_request_error");
}

std::optional<ApiError> ConvertResponsesRequest(std::string_view body, const ResponseStore& store,
                                                ResponsesRequest* out) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) return SchemaError(absl::StrCat("invalid JSON body: ", ec.message()));
  const json::object* o = v.if_object();
  if (o == nullptr) return SchemaError("the request body must be a JSON object");

  json::object chat;
  std::string instructions;
  if (auto err = ReadSettings(*o, &chat, &instructions, out)) return err;
  const json::array* tools = nullptr;
  if (auto err = ReadTools(*o, &chat, &tools, &out->echo)) return err;
  if (const json::value* tc = Field(*o, "tool_choice")) {
    if (auto err = ReadToolChoice(*tc, tools, &chat, out)) return err;
  }
  if (auto err = ReadConversation(*o, instructions, store, out)) return err;

  chat["messages"] = out->messages;
  if (out->stream) {
    chat["stream"] = true;
    chat["stream_options"] = json::object{{"include_usage", true}};
  }
  out->chat_body = json::serialize(chat);
  return std::nullopt;
}

ResponsesOutput::ResponsesOutput(ResponsesRequest request, std::string response_id,
                                 std::string item_id, std::string call_id, int64_t created,
                                 ResponseStore* store)
    : request_(std::move(request)),
      response_id_(std::move(response_id)),
      item_id_(std::move(item_id)),
      call_id_(std::move(call_id)),
      created_(created),
      store_(store) {}

std::string ResponsesOutput::ErrorBody(const ApiError& error) const { return ErrorJson(error); }

json::array ResponsesOutput::Output(std::string_view text) const {
  json::array output;
  if (request_.forced_tool) {
    output.push_back(json::object{{"arguments", request_.forced_tool->arguments},
                                  {"call_id", call_id_},
                                  {"name", request_.forced_tool->name},
                                  {"type", "function_call"},
                                  {"id", item_id_},
                                  {"status", "completed"}});
  } else if (!text.empty()) {
    json::object part = OutputText(text, /*with_logprobs=*/false);
    part["logprobs"] = nullptr;
    output.push_back(json::object{{"id", item_id_},
                                  {"content", json::array{std::move(part)}},
                                  {"role", "assistant"},
                                  {"status", "completed"},
                                  {"type", "message"}});
  }
  return output;
}

json::object ResponsesOutput::Response(const std::string& model, std::string_view status,
                                       const json::array& output, const Usage* usage) const {
  const json::object& e = request_.echo;
  json::object r;
  r["id"] = response_id_;
  r["created_at"] = created_;
  r["incomplete_details"] = nullptr;
  r["instructions"] = e.at("instructions");
  r["metadata"] = nullptr;
  r["model"] = model;
  r["object"] = "response";
  r["output"] = output;
  r["parallel_tool_calls"] = true;
  r["temperature"] = e.at("temperature");
  r["tool_choice"] = e.at("tool_choice");
  r["tools"] = e.at("tools");
  r["top_p"] = e.at("top_p");
  r["background"] = false;
  r["max_output_tokens"] = e.at("max_output_tokens");
  r["max_tool_calls"] = nullptr;
  r["previous_response_id"] = e.at("previous_response_id");
  r["prompt"] = nullptr;
  r["reasoning"] = nullptr;
  r["service_tier"] = "auto";
  r["status"] = status;
  r["text"] = nullptr;
  r["top_logprobs"] = nullptr;
  r["truncation"] = "disabled";
  r["user"] = nullptr;
  r["usage"] = usage != nullptr ? json::value(UsageObject(*usage)) : json::value(nullptr);
  return r;
}

void ResponsesOutput::Store(const json::object& response) {
  if (!request_.store || store_ == nullptr || !store_->enabled()) return;
  store_->Put(response_id_, StoredResponse{.response = response, .messages = request_.messages});
}

std::string ResponsesOutput::FullBody(const ChatOutcome& outcome) {
  json::object r = Response(outcome.model, "completed", Output(outcome.text), &outcome.usage);
  Store(r);
  return json::serialize(r);
}

std::string ResponsesOutput::Event(json::object event) {
  event["sequence_number"] = sequence_number_++;
  const std::string type(event.at("type").as_string());
  return absl::StrCat("event: ", type, "\ndata: ", json::serialize(event), "\n\n");
}

std::string ResponsesOutput::StreamStart(const std::string& /*id*/, int64_t /*created*/,
                                         const std::string& model, int /*prompt_tokens*/) {
  model_ = model;
  const json::object initial = Response(model_, "in_progress", json::array{}, nullptr);
  std::string out = Event(json::object{{"type", "response.created"}, {"response", initial}});
  out += Event(json::object{{"type", "response.in_progress"}, {"response", initial}});
  return out;
}

std::string ResponsesOutput::StreamText(std::string_view piece) {
  std::string out;
  if (request_.forced_tool) {
    // The whole call goes out with the first token: the constrained output is the arguments.
    if (item_open_) return out;
    item_open_ = true;
    out += Event(json::object{{"type", "response.output_item.added"},
                              {"output_index", 0},
                              {"item", json::object{{"arguments", ""},
                                                    {"call_id", call_id_},
                                                    {"name", request_.forced_tool->name},
                                                    {"type", "function_call"},
                                                    {"id", item_id_},
                                                    {"status", "in_progress"}}}});
    out += Event(json::object{{"type", "response.function_call_arguments.delta"},
                              {"delta", request_.forced_tool->arguments},
                              {"item_id", item_id_},
                              {"output_index", 0}});
    return out;
  }
  if (piece.empty()) return out;
  if (!item_open_) {
    item_open_ = true;
    out += Event(json::object{{"type", "response.output_item.added"},
                              {"output_index", 0},
                              {"item", json::object{{"id", item_id_},
                                                    {"content", json::array{}},
                                                    {"role", "assistant"},
                                                    {"status", "in_progress"},
                                                    {"type", "message"}}}});
    out += Event(json::object{{"type", "response.content_part.added"},
                              {"content_index", 0},
                              {"item_id", item_id_},
                              {"output_index", 0},
                              {"part", OutputText("", /*with_logprobs=*/true)}});
  }
  text_ += piece;
  out += Event(json::object{{"type", "response.output_text.delta"},
                            {"content_index", 0},
                            {"delta", piece},
                            {"item_id", item_id_},
                            {"logprobs", json::array{}},
                            {"output_index", 0}});
  return out;
}

std::string ResponsesOutput::StreamEnd(std::string_view /*finish*/, const Usage& usage) {
  std::string out;
  const json::array output = Output(text_);
  if (item_open_ && request_.forced_tool) {
    out += Event(json::object{{"type", "response.function_call_arguments.done"},
                              {"arguments", request_.forced_tool->arguments},
                              {"item_id", item_id_},
                              {"name", request_.forced_tool->name},
                              {"output_index", 0}});
    out += Event(json::object{
        {"type", "response.output_item.done"}, {"output_index", 0}, {"item", output.at(0)}});
  } else if (item_open_) {
    out += Event(json::object{{"type", "response.output_text.done"},
                              {"content_index", 0},
                              {"item_id", item_id_},
                              {"logprobs", json::array{}},
                              {"output_index", 0},
                              {"text", text_}});
    out += Event(json::object{{"type", "response.content_part.done"},
                              {"content_index", 0},
                              {"item_id", item_id_},
                              {"output_index", 0},
                              {"part", OutputText(text_, /*with_logprobs=*/false)}});
    out += Event(json::object{
        {"type", "response.output_item.done"}, {"output_index", 0}, {"item", output.at(0)}});
  }
  json::object final_response = Response(model_, "completed", output, &usage);
  Store(final_response);
  out +=
      Event(json::object{{"type", "response.completed"}, {"response", std::move(final_response)}});
  return out;
}

}  // namespace sim
