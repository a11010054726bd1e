// The wire format of a chat completion's output, for the APIs vLLM serves on top of its chat
// server. vLLM answers POST /v1/messages (vllm/entrypoints/anthropic/serving.py) and POST
// /v1/responses (vllm/entrypoints/openai/responses/serving.py) by turning the request into a
// chat completion request, running it through the chat path, and converting the chat output
// (the full response, or the stream chunk by chunk) into the other API's shapes. The simulator
// does the same: Instance::HandleCompletion runs the converted chat request and hands its
// output to a ChatOutputFormat instead of writing chat completion chunks.
//
//   AnthropicOutput format(...);           // sim/anthropic_api.h
//   HandleCompletion(stream, req, Endpoint::kChatCompletions, &format);
//
// One object serves one request, on that request's session coroutine (the instance's strand);
// not thread-safe.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "sim/api.h"

namespace sim {

// What the chat path produced for a request that is not streamed.
struct ChatOutcome {
  std::string id;  // the chat completion id ("chatcmpl-...")
  int64_t created = 0;
  std::string model;
  std::string text;    // the generated text
  std::string finish;  // the chat finish reason: "stop", "length"
  Usage usage;
  std::optional<boost::json::object> kv_transfer_params;
};

class ChatOutputFormat {
 public:
  virtual ~ChatOutputFormat() = default;

  // The body of an error response in this API's shape (status is error.status).
  virtual std::string ErrorBody(const ApiError& error) const = 0;
  // The body of a response that is not streamed (application/json).
  virtual std::string FullBody(const ChatOutcome& outcome) = 0;

  // Streamed responses: the SSE bytes before the first token, for each generated piece of
  // text, and after the last one (the chat finish reason and the final usage). Each returns
  // whole events, possibly none.
  virtual std::string StreamStart(const std::string& id, int64_t created, const std::string& model,
                                  int prompt_tokens) = 0;
  virtual std::string StreamText(std::string_view piece) = 0;
  virtual std::string StreamEnd(std::string_view finish, const Usage& usage) = 0;
};

// A tool call the request forces (tool_choice naming a tool, or requiring one): vLLM then
// constrains decoding to the tool's arguments, so the output is that call. Any other request
// with tools gets plain text from the simulator (its stand-in model never chooses a tool).
struct ForcedToolCall {
  std::string name;
  // Arguments that satisfy the tool's JSON schema: every declared property with a value of
  // its declared type.
  std::string arguments;
  // tool_choice "required"/"any": the chat finish reason becomes "tool_calls". A named tool
  // keeps the engine's finish reason, as vLLM's chat server does.
  bool required = false;
};

// Arguments for a tool whose parameters are described by `schema` (a JSON schema object, or
// null): {"<property>": <a value of its type>, ...}.
std::string ArgumentsForSchema(const boost::json::value* schema);

}  // namespace sim
