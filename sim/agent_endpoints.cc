// Instance's handlers for the agent APIs vLLM serves on top of its chat server: POST
// /v1/messages (sim/anthropic_api.h) and POST /v1/responses (sim/responses_api.h). Each converts
// the body into a chat completion request and runs it through HandleCompletion with a
// ChatOutputFormat that writes the other API's shapes (GET /v1/responses/{id} is answered in
// instance_routes.cc from the store).
#include <absl/strings/str_format.h>

#include <chrono>

#include "sim/anthropic_api.h"
#include "sim/instance.h"
#include "sim/responses_api.h"

namespace sim {

namespace net = boost::asio;
namespace http = boost::beast::http;
using net::awaitable;

std::string Instance::RandomHex() { return absl::StrFormat("%016x%016x", rng_(), rng_()); }

awaitable<bool> Instance::HandleMessages(Stream& stream, Request& req) {
  AnthropicRequest converted;
  if (const std::optional<ApiError> error = ConvertAnthropicRequest(req.body(), &converted)) {
    // Schema errors come from vLLM's request validation handler (OpenAI shape); the Messages
    // handler's own errors are translated into the Anthropic shape.
    const std::string body =
        error->type == "Bad Request" ? ErrorJson(*error) : AnthropicErrorJson(*error);
    const std::string content_type = "application/json";
    co_return co_await Reply(stream, req, static_cast<http::status>(error->status), body,
                             content_type);
  }
  AnthropicOutput format(std::move(converted.forced_tool), "chatcmpl-tool-" + RandomHex());
  req.body() = std::move(converted.chat_body);
  co_return co_await HandleCompletion(stream, req, Endpoint::kChatCompletions, &format);
}

awaitable<bool> Instance::HandleResponses(Stream& stream, Request& req) {
  ResponsesRequest converted;
  if (const std::optional<ApiError> error =
          ConvertResponsesRequest(req.body(), responses_, &converted)) {
    co_return co_await ReplyError(stream, req, *error);
  }
  const std::string response_id = "resp_" + RandomHex();
  const std::string item_id = (converted.forced_tool ? "fc_" : "msg_") + RandomHex();
  const std::string call_id = "call_" + RandomHex();
  const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  std::string chat_body = std::move(converted.chat_body);
  ResponsesOutput format(std::move(converted), response_id, item_id, call_id, created, &responses_);
  req.body() = std::move(chat_body);
  co_return co_await HandleCompletion(stream, req, Endpoint::kChatCompletions, &format);
}

}  // namespace sim
