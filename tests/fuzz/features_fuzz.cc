// Fuzz target: request body feature extraction (proxy/features.h), the one
// parse of every untrusted completion request.
//
// Input: a header line, then the body.
//   <e><session header>\n<request body>
// `e` picks the endpoint and limits: 'c' chat, 'p' completions, 'm'
// Anthropic Messages, 'r' OpenAI Responses (default limits); 'C', 'P', 'M',
// 'R' the same with tight limits so the limit branches are reached by small
// inputs. Any other first byte: chat, default limits. No '\n' at all: the
// whole input is a chat body with no session header.
//
// Checks, beyond "no crash, no sanitizer report": the one-pass fast path and
// the DOM parse (ExtractFeaturesWithDomForTest) agree on every input (same
// features, or the same status and message); a non-empty session header is
// the session id; an accepted body respects the limits it was checked against;
// only a Responses body yields a previous_response_id.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "proxy/features.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    __builtin_printf("features_fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kvroute::proxy::Endpoint;
  using kvroute::proxy::ExtractFeatures;
  using kvroute::proxy::FeatureLimits;

  std::string_view input(reinterpret_cast<const char*>(data), size);
  Endpoint endpoint = Endpoint::kChat;
  FeatureLimits limits;
  std::string_view session_header;
  std::string_view body = input;
  if (const size_t eol = input.find('\n'); eol != std::string_view::npos && eol > 0) {
    const char e = input[0];
    if (e == 'p' || e == 'P') endpoint = Endpoint::kCompletions;
    if (e == 'm' || e == 'M') endpoint = Endpoint::kMessages;
    if (e == 'r' || e == 'R') endpoint = Endpoint::kResponses;
    if (e == 'C' || e == 'P' || e == 'M' || e == 'R') {
      limits.max_messages = 4;
      limits.max_json_depth = 6;
      limits.max_tokens_limit = 1000;
    }
    session_header = input.substr(1, eol - 1);
    body = input.substr(eol + 1);
  }

  absl::StatusOr<kvroute::router::RequestFeatures> f =
      ExtractFeatures(endpoint, body, session_header, limits);
  absl::StatusOr<kvroute::router::RequestFeatures> dom =
      kvroute::proxy::ExtractFeaturesWithDomForTest(endpoint, body, session_header, limits);
  Check(f.ok() == dom.ok(), "fast path and DOM accept the same bodies");
  if (!f.ok()) {
    Check(f.status() == dom.status(), "fast path and DOM give the same error");
  } else {
    Check(f->model == dom->model && f->session_id == dom->session_id &&
              f->stream == dom->stream && f->max_tokens == dom->max_tokens &&
              f->prompt_bytes == dom->prompt_bytes &&
              f->previous_response_id == dom->previous_response_id,
          "fast path and DOM extract the same features");
  }
  if (!f.ok()) {
    Check(f.status().code() == absl::StatusCode::kInvalidArgument, "errors are InvalidArgument");
    Check(!f.status().message().empty(), "errors carry a message");
    return 0;
  }
  if (!session_header.empty()) {
    Check(f->session_id == session_header, "the session header is the session id");
  }
  Check(f->max_tokens <= limits.max_tokens_limit, "max_tokens within its limit");
  Check(endpoint == Endpoint::kResponses || f->previous_response_id.empty(),
        "previous_response_id only from a Responses body");
  return 0;
}
