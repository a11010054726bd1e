#include "sim/api.h"

#include <absl/strings/str_cat.h>

namespace sim {
namespace json = boost::json;

namespace {

ApiError BadRequest(std::string message, std::string param = "") {
  return ApiError{.status = 400, .message = std::move(message), .param = std::move(param)};
}

std::optional<int64_t> AsInt(const json::value& v) {
  if (v.is_int64()) return v.as_int64();
  if (v.is_uint64() && v.as_uint64() <= static_cast<uint64_t>(INT64_MAX)) {
    return static_cast<int64_t>(v.as_uint64());
  }
  if (v.is_double() && v.as_double() == static_cast<double>(static_cast<int64_t>(v.as_double()))) {
    return static_cast<int64_t>(v.as_double());
  }
  return std::nullopt;
}

std::optional<ApiError> ParseTokenIds(const json::array& arr, std::vector<int32_t>* out) {
  out->reserve(arr.size());
  for (const json::value& t : arr) {
    const std::optional<int64_t> id = AsInt(t);
    if (!id || *id < 0 || *id >= StandInTokenizer::kVocabSize) {
      return BadRequest("prompt token ids must be integers within the vocabulary", "prompt");
    }
    out->push_back(static_cast<int32_t>(*id));
  }
  return std::nullopt;
}

std::optional<ApiError> ParsePrompt(const json::value& prompt, CompletionRequest* out) {
  if (prompt.is_string()) {
    out->prompt_text = std::string(prompt.as_string());
    return std::nullopt;
  }
  if (!prompt.is_array() || prompt.as_array().empty()) {
    return BadRequest("prompt must be a string, a list of strings or a list of token ids",
                      "prompt");
  }
  const json::array& arr = prompt.as_array();
  if (arr[0].is_string() || arr[0].is_array()) {
    if (arr.size() != 1) {
      return BadRequest(
          "kvroute-sim serves one prompt per request (batched prompts are not "
          "supported)",
          "prompt");
    }
    if (arr[0].is_string()) {
      out->prompt_text = std::string(arr[0].as_string());
      return std::nullopt;
    }
    out->prompt_is_ids = true;
    return ParseTokenIds(arr[0].as_array(), &out->prompt_ids);
  }
  out->prompt_is_ids = true;
  return ParseTokenIds(arr, &out->prompt_ids);
}

// Tools are rendered ahead of the conversation, as chat templates do, so that they count as
// prompt tokens and belong to the cached prefix; an assistant turn's tool calls follow its text.
std::optional<ApiError> ParseMessages(const json::value& messages, const json::value* tools,
                                      CompletionRequest* out) {
  if (!messages.is_array() || messages.as_array().empty()) {
    return BadRequest("messages must be a non-empty list", "messages");
  }
  std::vector<ChatMessage> rendered;
  if (tools != nullptr && !tools->is_null()) {
    if (!tools->is_array()) return BadRequest("tools must be a list", "tools");
    if (!tools->as_array().empty()) {
      rendered.push_back(ChatMessage{.role = "tools", .content = json::serialize(*tools)});
    }
  }
  for (const json::value& m : messages.as_array()) {
    if (!m.is_object()) return BadRequest("each message must be an object", "messages");
    const json::object& o = m.as_object();
    const json::value* role = o.if_contains("role");
    if (role == nullptr || !role->is_string()) {
      return BadRequest("each message needs a string role", "messages");
    }
    ChatMessage msg{.role = std::string(role->as_string()), .content = ""};
    const json::value* content = o.if_contains("content");
    if (content == nullptr || content->is_null()) {
      // Assistant tool-call turns may have no content.
    } else if (content->is_string()) {
      msg.content = std::string(content->as_string());
    } else if (content->is_array()) {
      for (const json::value& part : content->as_array()) {
        if (!part.is_object()) return BadRequest("content parts must be objects", "messages");
        const json::value* text = part.as_object().if_contains("text");
        if (text != nullptr && text->is_string()) msg.content += text->as_string();
      }
    } else {
      return BadRequest("message content must be a string or a list of parts", "messages");
    }
    if (const json::value* calls = o.if_contains("tool_calls"); calls != nullptr &&
                                                                 calls->is_array() &&
                                                                 !calls->as_array().empty()) {
      msg.content += json::serialize(*calls);
    }
    rendered.push_back(std::move(msg));
  }
  out->prompt_text = StandInTokenizer::RenderChat(rendered);
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseCompletionRequest(std::string_view body, Endpoint endpoint,
                                               CompletionRequest* out) {
  out->endpoint = endpoint;
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) return BadRequest(absl::StrCat("invalid JSON body: ", ec.message()));
  if (!v.is_object()) return BadRequest("the request body must be a JSON object");
  const json::object& o = v.as_object();

  if (const json::value* m = o.if_contains("model"); m != nullptr && !m->is_null()) {
    if (!m->is_string()) return BadRequest("model must be a string", "model");
    out->model = std::string(m->as_string());
  }
  if (endpoint == Endpoint::kCompletions) {
    const json::value* prompt = o.if_contains("prompt");
    if (prompt == nullptr) return BadRequest("prompt is required", "prompt");
    if (auto err = ParsePrompt(*prompt, out)) return err;
  } else {
    const json::value* messages = o.if_contains("messages");
    if (messages == nullptr) return BadRequest("messages is required", "messages");
    if (auto err = ParseMessages(*messages, o.if_contains("tools"), out)) return err;
  }
  if (const json::value* s = o.if_contains("stream"); s != nullptr && !s->is_null()) {
    if (!s->is_bool()) return BadRequest("stream must be a boolean", "stream");
    out->stream = s->as_bool();
  }
  if (const json::value* so = o.if_contains("stream_options"); so != nullptr && so->is_object()) {
    if (const json::value* iu = so->as_object().if_contains("include_usage");
        iu != nullptr && iu->is_bool()) {
      out->include_usage = iu->as_bool();
    }
  }
  for (const char* key : {"max_completion_tokens", "max_tokens"}) {
    const json::value* mt = o.if_contains(key);
    if (mt == nullptr || mt->is_null()) continue;
    const std::optional<int64_t> n = AsInt(*mt);
    if (!n || *n < 1) return BadRequest(absl::StrCat(key, " must be at least 1"), key);
    if (!out->max_tokens) out->max_tokens = *n;
  }
  if (const json::value* mt = o.if_contains("min_tokens"); mt != nullptr && !mt->is_null()) {
    const std::optional<int64_t> n = AsInt(*mt);
    if (!n || *n < 0) return BadRequest("min_tokens must be non-negative", "min_tokens");
    out->min_tokens = *n;
  }
  if (out->max_tokens && out->min_tokens > *out->max_tokens) {
    return BadRequest("min_tokens must be less than or equal to max_tokens", "min_tokens");
  }
  if (const json::value* ie = o.if_contains("ignore_eos"); ie != nullptr && !ie->is_null()) {
    if (!ie->is_bool()) return BadRequest("ignore_eos must be a boolean", "ignore_eos");
    out->ignore_eos = ie->as_bool();
  }
  if (const json::value* pr = o.if_contains("priority"); pr != nullptr && !pr->is_null()) {
    const std::optional<int64_t> n = AsInt(*pr);
    if (!n) return BadRequest("priority must be an integer", "priority");
    out->priority = *n;
  }
  if (const json::value* n = o.if_contains("n"); n != nullptr && !n->is_null()) {
    if (AsInt(*n) != 1) return BadRequest("kvroute-sim supports only n = 1", "n");
  }
  if (const json::value* kv = o.if_contains("kv_transfer_params");
      kv != nullptr && !kv->is_null()) {
    if (!kv->is_object()) {
      return BadRequest("kv_transfer_params must be an object", "kv_transfer_params");
    }
    out->kv_transfer_params = kv->as_object();
  }
  if (const json::value* h = o.if_contains("bootstrap_host"); h != nullptr && h->is_string()) {
    out->bootstrap_host = std::string(h->as_string());
  }
  if (const json::value* p = o.if_contains("bootstrap_port"); p != nullptr && !p->is_null()) {
    out->bootstrap_port = AsInt(*p);
    if (!out->bootstrap_port)
      return BadRequest("bootstrap_port must be an integer", "bootstrap_port");
  }
  if (const json::value* r = o.if_contains("bootstrap_room"); r != nullptr && !r->is_null()) {
    if (r->is_uint64()) {
      out->bootstrap_room = r->as_uint64();
    } else if (r->is_int64() && r->as_int64() >= 0) {
      out->bootstrap_room = static_cast<uint64_t>(r->as_int64());
    } else {
      return BadRequest("bootstrap_room must be a non-negative integer", "bootstrap_room");
    }
  }
  return std::nullopt;
}

std::string ErrorJson(const ApiError& error) {
  json::object inner;
  inner["message"] = error.message;
  inner["type"] = error.type;
  inner["param"] = error.param.empty() ? json::value(nullptr) : json::value(error.param);
  inner["code"] = error.status;
  json::object o;
  o["error"] = std::move(inner);
  return json::serialize(o);
}

json::object UsageJson(const Usage& usage) {
  json::object u;
  u["prompt_tokens"] = usage.prompt_tokens;
  u["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  u["completion_tokens"] = usage.completion_tokens;
  if (usage.cached_tokens > 0 || usage.always_report_cached_tokens) {
    json::object details;
    details["cached_tokens"] = usage.cached_tokens;
    u["prompt_tokens_details"] = std::move(details);
  }
  return u;
}

std::string ResponseId(Endpoint endpoint, std::string_view request_id) {
  return std::string(endpoint == Endpoint::kCompletions ? "cmpl-" : "chatcmpl-") +
         std::string(request_id);
}

namespace {

json::object Envelope(Endpoint endpoint, const std::string& id, int64_t created,
                      const std::string& model, bool chunk) {
  json::object o;
  o["id"] = id;
  if (endpoint == Endpoint::kCompletions) {
    o["object"] = "text_completion";
  } else {
    o["object"] = chunk ? "chat.completion.chunk" : "chat.completion";
  }
  o["created"] = created;
  o["model"] = model;
  return o;
}

json::value FinishValue(std::string_view finish) {
  return finish.empty() ? json::value(nullptr) : json::value(json::string(finish));
}

}  // namespace

std::string StreamChunkJson(Endpoint endpoint, const std::string& id, int64_t created,
                            const std::string& model, std::string_view text,
                            std::string_view finish, bool first) {
  json::object o = Envelope(endpoint, id, created, model, /*chunk=*/true);
  json::object choice;
  choice["index"] = 0;
  if (endpoint == Endpoint::kCompletions) {
    choice["text"] = text;
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = FinishValue(finish);
    choice["stop_reason"] = nullptr;
  } else {
    json::object delta;
    if (first) delta["role"] = "assistant";
    delta["content"] = text;
    choice["delta"] = std::move(delta);
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = FinishValue(finish);
    choice["stop_reason"] = nullptr;
  }
  o["choices"] = json::array{std::move(choice)};
  return json::serialize(o);
}

std::string UsageChunkJson(Endpoint endpoint, const std::string& id, int64_t created,
                           const std::string& model, const Usage& usage) {
  json::object o = Envelope(endpoint, id, created, model, /*chunk=*/true);
  o["choices"] = json::array{};
  o["usage"] = UsageJson(usage);
  return json::serialize(o);
}

std::string FullResponseJson(Endpoint endpoint, const std::string& id, int64_t created,
                             const std::string& model, std::string_view text,
                             std::string_view finish, const Usage& usage,
                             const std::optional<json::object>& kv_transfer_params) {
  json::object o = Envelope(endpoint, id, created, model, /*chunk=*/false);
  json::object choice;
  choice["index"] = 0;
  if (endpoint == Endpoint::kCompletions) {
    choice["text"] = text;
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = FinishValue(finish);
    choice["stop_reason"] = nullptr;
    choice["prompt_logprobs"] = nullptr;
  } else {
    json::object message;
    message["role"] = "assistant";
    message["content"] = text;
    message["reasoning_content"] = nullptr;
    message["tool_calls"] = json::array{};
    choice["message"] = std::move(message);
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = FinishValue(finish);
    choice["stop_reason"] = nullptr;
  }
  o["choices"] = json::array{std::move(choice)};
  o["service_tier"] = nullptr;
  o["system_fingerprint"] = nullptr;
  o["usage"] = UsageJson(usage);
  if (endpoint == Endpoint::kChatCompletions) o["prompt_logprobs"] = nullptr;
  o["kv_transfer_params"] =
      kv_transfer_params ? json::value(*kv_transfer_params) : json::value(nullptr);
  return json::serialize(o);
}

}  // namespace sim
