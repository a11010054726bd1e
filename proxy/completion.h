// Serving one completion request: read its features, route it, relay it
// (co-located, or as a prefill/decode handoff), retry elsewhere with a
// jittered backoff while nothing has reached the client and the failure was
// the instance's, then report the outcome to the router, the metrics and
// the request log.
//
//   co_return co_await ServeCompletion(session, req, Endpoint::kChat, "/v1/chat/completions");
//
// Runs on the session's worker thread.
#pragma once

#include <string>
#include <string_view>

#include "absl/random/bit_gen_ref.h"
#include "absl/time/time.h"
#include "proxy/client_request.h"
#include "proxy/config.h"
#include "proxy/features.h"
#include "proxy/http_common.h"

namespace kvroute::proxy {

class Session;

// Serves `req`; returns whether the connection may be kept alive.
net::awaitable<bool> ServeCompletion(Session& s, ClientRequest& req, Endpoint endpoint,
                                     std::string_view route);

// A request id for a request that brings none: "kvr-" and 32 random hex
// digits (two zero-padded 64-bit numbers).
std::string NewRequestId(absl::BitGenRef random);

// The pause before attempt `attempt + 1`, full jitter: uniform in
// [0, min(retry_backoff_max, retry_backoff x 2^(attempt-1))].
absl::Duration RetryBackoff(const UpstreamOptions& options, int attempt, absl::BitGenRef random);

}  // namespace kvroute::proxy
