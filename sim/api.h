// The OpenAI-compatible request/response shapes of a vLLM server, as the simulator speaks
// them: parsing of /v1/completions and /v1/chat/completions bodies, and rendering of
// responses, SSE chunks and errors byte-compatible with vLLM's OpenAI server.
// Pure functions; thread-safe.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/tokenizer.h"

namespace sim {

enum class Endpoint { kCompletions, kChatCompletions };

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "BadRequestError";
  std::string param;
};

inline ApiError MakeApiError(int status, std::string message, std::string type = "BadRequestError",
                             std::string param = "") {
  return ApiError{.status = status,
                  .message = std::move(message),
                  .type = std::move(type),
                  .param = std::move(param)};
}

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::optional<std::string> model;
  // Exactly one of prompt_text / prompt_ids is used (chat: the rendered template).
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;
  bool stream = false;
  bool include_usage = false;
  std::optional<int64_t> max_tokens;
  int64_t min_tokens = 0;
  bool ignore_eos = false;
  // vLLM's `priority` (lower is served first; an integer of any size in vLLM, int64 here).
  int64_t priority = 0;
  // P/D handoff fields, kept verbatim.
  std::optional<boost::json::object> kv_transfer_params;
  std::optional<std::string> bootstrap_host;
  std::optional<int64_t> bootstrap_port;
  std::optional<uint64_t> bootstrap_room;
};

// Parses and validates a request body; on failure returns the error to send.
std::optional<ApiError> ParseCompletionRequest(std::string_view body, Endpoint endpoint,
                                               CompletionRequest* out);

// {"error": {"message", "type", "param", "code"}}
std::string ErrorJson(const ApiError& error);

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
  // vLLM sends prompt_tokens_details only when cached_tokens > 0 (every serving path checks
  // `enable_prompt_tokens_details and num_cached_tokens`); true sends it always.
  bool always_report_cached_tokens = false;
};

boost::json::object UsageJson(const Usage& usage);

// "cmpl-<id>" / "chatcmpl-<id>".
std::string ResponseId(Endpoint endpoint, std::string_view request_id);

// One SSE event payload (without the "data: " framing) for one decode step's text.
// `first` adds the chat role delta; finish_reason is null unless `finish` is non-empty.
std::string StreamChunkJson(Endpoint endpoint, const std::string& id, int64_t created,
                            const std::string& model, std::string_view text,
                            std::string_view finish, bool first);
// The final usage chunk (`choices: []`).
std::string UsageChunkJson(Endpoint endpoint, const std::string& id, int64_t created,
                           const std::string& model, const Usage& usage);
// A non-streaming response; kv_transfer_params is null when absent.
std::string FullResponseJson(Endpoint endpoint, const std::string& id, int64_t created,
                             const std::string& model, std::string_view text,
                             std::string_view finish, const Usage& usage,
                             const std::optional<boost::json::object>& kv_transfer_params);

}  // namespace sim
