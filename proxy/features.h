// Request feature extraction: the one parse of a completion request body.
//
//   absl::StatusOr<router::RequestFeatures> f =
//       ExtractFeatures(Endpoint::kChat, body, session_header, limits);
//
// Produces the model, stream flag, max tokens, session id and the canonical
// prompt bytes that the router hashes. Never throws; malformed input yields
// InvalidArgument with a message fit for a 400 response.
//
// The canonical prompt follows the order in which the engine's chat template
// renders a request, so that what one turn shares with the next is a byte
// prefix: the tool definitions first (chat templates render `tools` before
// the system message), then the system prompt, then the conversation.
//   kChat       `tools`, then `messages`.
//   kMessages   Anthropic Messages: `tools`, `system` (a string or text
//               blocks), then `messages` with every content block type (text,
//               image as its opaque source bytes, tool_use, tool_result,
//               thinking). Session: the header, else `metadata.user_id`.
//   kResponses  OpenAI Responses: `tools`, `instructions`, then `input` (a
//               string or items: messages with content parts, function_call,
//               function_call_output, ...). `previous_response_id` is copied
//               out; a request that names one continues a conversation stored
//               by one engine, whose prompt is not in the body. Session: the
//               header, else `prompt_cache_key`.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "router/types.h"

namespace kvroute::proxy {

enum class Endpoint { kCompletions, kChat, kMessages, kResponses };

struct FeatureLimits {
  size_t max_messages = 100000;         // entries of `messages` (Responses: `input`)
  int max_json_depth = 64;              // nesting depth of the body
  int64_t max_tokens_limit = 10000000;  // larger `max_tokens` is absurd
};

absl::StatusOr<router::RequestFeatures> ExtractFeatures(Endpoint endpoint, std::string_view body,
                                                        std::string_view session_header,
                                                        const FeatureLimits& limits = {});

// The same through the general DOM parse only (ExtractFeatures takes a
// one-pass fast path for common completion and chat bodies); tests compare
// the two.
absl::StatusOr<router::RequestFeatures> ExtractFeaturesWithDomForTest(
    Endpoint endpoint, std::string_view body, std::string_view session_header,
    const FeatureLimits& limits = {});

}  // namespace kvroute::proxy
