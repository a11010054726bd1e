// Request feature extraction: the one parse of a completion request body.
//
//   absl::StatusOr<router::RequestFeatures> f =
//       ExtractFeatures(Endpoint::kChat, body, session_header, limits);
//
// Produces the model, stream flag, max tokens, session id and the canonical
// prompt bytes that the router hashes. Never throws; malformed input yields
// InvalidArgument with a message fit for a 400 response.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "router/types.h"

namespace kvroute::proxy {

enum class Endpoint { kCompletions, kChat };

struct FeatureLimits {
  size_t max_messages = 100000;         // entries of `messages`
  int max_json_depth = 64;              // nesting depth of the body
  int64_t max_tokens_limit = 10000000;  // larger `max_tokens` is absurd
};

absl::StatusOr<router::RequestFeatures> ExtractFeatures(Endpoint endpoint, std::string_view body,
                                                        std::string_view session_header,
                                                        const FeatureLimits& limits = {});

// The same through the general DOM parse only (ExtractFeatures takes a
// one-pass fast path for common bodies); tests compare the two.
absl::StatusOr<router::RequestFeatures> ExtractFeaturesWithDomForTest(
    Endpoint endpoint, std::string_view body, std::string_view session_header,
    const FeatureLimits& limits = {});

}  // namespace kvroute::proxy
