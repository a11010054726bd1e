// The Anthropic Messages API (POST /v1/messages) as vLLM serves it
// (vllm/entrypoints/anthropic/{protocol,serving,api_router}.py): the request becomes a chat
// completion request (the system prompt first, tool_use blocks as tool calls, tool_result
// blocks as tool messages, tools as chat tools, a streamed request with continuous usage), and
// the chat output becomes an Anthropic message or its SSE events:
//
//   event: message_start        {"type":"message_start","message":{"id","content":[],"model",
//                                 "stop_reason":null,"stop_sequence":null,
//                                 "usage":{"input_tokens":N,"output_tokens":0}}}
//   event: content_block_start  {"type":"content_block_start","content_block":{"type":"text",
//                                 "text":""},"index":0}      (tool_use: id, name, input {})
//   event: content_block_delta  {"type":"content_block_delta","delta":{"type":"text_delta",
//                                 "text":...},"index":0}     (tool_use: input_json_delta)
//   event: content_block_stop   {"type":"content_block_stop","index":0}
//   event: message_delta        {"type":"message_delta","delta":{"stop_reason":"end_turn"},
//                                 "usage":{"input_tokens":N,"output_tokens":M}}
//   event: message_stop         {"type":"message_stop"}
//
// vLLM dumps stream events with exclude_unset (so message_start's message has no "type" or
// "role") and full responses with exclude_none. Usage carries input_tokens and output_tokens
// only: vLLM does not fill cache_read_input_tokens, so a client of /v1/messages learns nothing
// about prefix-cache hits. Errors: {"type":"error","error":{"type","message"}} with the status
// of the underlying error. Pure functions and a per-request formatter; see output_format.h.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "sim/api.h"
#include "sim/output_format.h"

namespace sim {

struct AnthropicRequest {
  std::string chat_body;  // the equivalent /v1/chat/completions request, serialised
  bool stream = false;
  std::optional<ForcedToolCall> forced_tool;
};

// Validates a /v1/messages body and converts it; on failure returns the error to send.
std::optional<ApiError> ConvertAnthropicRequest(std::string_view body, AnthropicRequest* out);

// {"type":"error","error":{"type","message"}}
std::string AnthropicErrorJson(const ApiError& error);

class AnthropicOutput final : public ChatOutputFormat {
 public:
  // `tool_use_id` names the tool_use block of a forced tool call.
  AnthropicOutput(std::optional<ForcedToolCall> forced_tool, std::string tool_use_id);

  std::string ErrorBody(const ApiError& error) const override;
  std::string FullBody(const ChatOutcome& outcome) override;
  std::string StreamStart(const std::string& id, int64_t created, const std::string& model,
                          int prompt_tokens) override;
  std::string StreamText(std::string_view piece) override;
  std::string StreamEnd(std::string_view finish, const Usage& usage) override;

 private:
  std::string StopReason(std::string_view finish) const;

  std::optional<ForcedToolCall> forced_tool_;
  std::string tool_use_id_;
  bool block_open_ = false;
};

}  // namespace sim
