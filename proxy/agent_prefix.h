// The canonical prompt of the agent APIs' bodies, in the order the engine's
// chat template renders it (and the `tools` every API renders first):
// Anthropic Messages (tools, system as a string or
// blocks, then messages with every content block type) and OpenAI Responses
// (tools, instructions, then `input` as a string or items). The bytes stand
// in for the engine's tokens: a conversation's bytes are a prefix of its next
// turn's. Private to proxy/ (features.cc's DOM path calls them).
//
// Thread-safety: pure functions.
#pragma once

#include <boost/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proxy/features.h"

namespace kvroute::proxy {

// The body's `messages` (chat and Anthropic alike): a non-empty list of at
// most limits.max_messages entries, else InvalidArgument naming the field.
absl::StatusOr<const boost::json::array*> RequiredMessages(const boost::json::object& body,
                                                           const FeatureLimits& limits);

// Appends the request's `tools` (function definitions) as the chat template
// renders them, ahead of the conversation; nothing when absent or null.
absl::Status AppendTools(const boost::json::object& body, std::string* out);

// InvalidArgument naming the field when the body breaks the API's shape.
absl::Status RenderAnthropic(const boost::json::object& body, const FeatureLimits& limits,
                             std::string* out);
absl::Status RenderResponses(const boost::json::object& body, const FeatureLimits& limits,
                             std::string* out);

}  // namespace kvroute::proxy
