// A small async HTTP/1.1 client for load generation (Boost.Beast, C++20 coroutines).
//
// StreamChat sends one OpenAI chat (or completions) request on a fresh loopback connection,
// reads the SSE stream as it arrives and measures time to first token, time per output
// token and end-to-end latency; it also reads `usage` (prompt and cached tokens) and the
// kvroute response headers (X-Request-Id, X-Kvroute-Class, X-Kvroute-Backend).
// Errors never throw: they come back in ChatOutcome::error / HttpResponse::error.
//
// Usage (inside a coroutine on an io_context):
//   Endpoint ep = *ParseHttpUrl("http://127.0.0.1:8000");
//   ChatOutcome out = co_await StreamChat({.endpoint = ep, .body = BuildChatBody(...)});
//
// Thread-safety: each call owns its socket; run calls on any executor.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "absl/status/statusor.h"

namespace kvroute::bench {

struct Endpoint {
  std::string host;
  uint16_t port = 80;
  std::string base_path;  // without a trailing slash, e.g. "" or "/prefix"
  std::string Url() const;
};

// Accepts "http://host:port[/path]" or "host:port"; https is not supported.
absl::StatusOr<Endpoint> ParseHttpUrl(std::string_view url);

struct HttpResponse {
  int status = 0;  // 0: transport error
  std::string body;
  std::string error;
};

// GET base_path + target; the whole body is read (bounded by body_limit).
boost::asio::awaitable<HttpResponse> HttpGet(Endpoint endpoint, std::string target,
                                             std::chrono::milliseconds timeout,
                                             uint64_t body_limit = 16 << 20);

// POST base_path + target with a JSON body; the whole response body is read.
boost::asio::awaitable<HttpResponse> HttpPostJson(Endpoint endpoint, std::string target,
                                                  std::string body,
                                                  std::chrono::milliseconds timeout,
                                                  uint64_t body_limit = 16 << 20);

struct ChatMessage {
  std::string role;
  std::string content;
};

// A streaming chat-completions body with include_usage, fixed completion length
// (max_tokens = min_tokens = completion_tokens, ignore_eos) and an optional session id.
std::string BuildChatBody(std::string_view model, const std::vector<ChatMessage>& messages,
                          int64_t completion_tokens);

// The API a request speaks: OpenAI chat completions, or the Anthropic Messages API that
// coding agents use (vLLM serves both; kvroute routes both).
enum class ChatApi { kChatCompletions, kMessages };
absl::StatusOr<ChatApi> ParseChatApi(std::string_view name);  // "chat" | "messages"
std::string_view ChatApiPath(ChatApi api);

// A streaming /v1/messages body as a coding agent sends it: the system messages as the
// top-level `system` text block, the agent's tool definitions (bash, read_file, edit_file),
// the conversation, `max_tokens` = completion_tokens and the session as metadata.user_id.
// The Messages API has no min_tokens/ignore_eos: the engine decides where each turn ends.
std::string BuildMessagesBody(std::string_view model, const std::vector<ChatMessage>& messages,
                              int64_t completion_tokens, std::string_view session_id);

struct ChatCall {
  Endpoint endpoint;
  std::string path = "/v1/chat/completions";
  std::string body;
  std::string session_id;  // X-Session-Id when not empty
  std::string request_id;  // X-Request-Id when not empty
  // The whole request, from connecting to the stream's end; when it fires the client closes
  // the connection and ChatOutcome::timed_out is set.
  std::chrono::milliseconds timeout{600000};
  uint64_t body_limit = 64 << 20;             // bytes of response body
  // Called once when the first generated text arrives (on the calling executor).
  std::function<void()> on_first_token;
};

struct ChatOutcome {
  int http_status = 0;
  std::string error;  // empty on success
  bool timed_out = false;     // ChatCall::timeout fired: the client gave up
  // The target refused the connection, or reset or closed it before any response header: it
  // never took the request, and a client SDK sends it again (to the next replica).
  bool connection_failed = false;
  // The advised wait when the target sent one: retry-after-ms, else Retry-After (delta
  // seconds).
  double retry_after_s = -1;
  std::string request_id, klass, backend;
  std::string content;  // concatenated generated text
  int64_t prompt_tokens = -1, cached_tokens = -1, completion_tokens = -1;
  double ttft = -1, tpot = -1, e2e = -1;  // seconds from sending the request
  int64_t content_events = 0;
  // Seconds between consecutive SSE events carrying generated text (content_events - 1 of
  // them on a stream; none for a JSON response).
  std::vector<double> content_gaps;
};

boost::asio::awaitable<ChatOutcome> StreamChat(ChatCall call);

}  // namespace kvroute::bench
