// Fuzz target: the engine-response observer (proxy/response_observer.h), SSE
// event splitting and usage parsing in both streaming and JSON modes.
//
// Input: a header line, then the response bytes.
//   <m><chunk lengths>\n<response bytes>
// `m` picks the mode: 's' SSE, 'j' JSON body (default bounds); 'S', 'J' the
// same with tiny bounds so the overflow paths are reached; 'a'/'A' Anthropic
// SSE, 'b'/'B' Anthropic JSON, 'r'/'R' Responses SSE, 'q'/'Q' Responses JSON
// (ApiDialect), lower case with the default bounds. Each further header
// byte is the length (1..256) of the next piece passed to Feed(), cycling; an
// empty list feeds everything at once. No '\n': SSE, the whole input fed at
// once.
//
// Checks, beyond "no crash, no sanitizer report": with the default bounds,
// where no event or body is cut short, feeding the bytes in pieces gives the
// same events, [DONE] flag, usage and kv_transfer_params as one Feed(); and a
// JSON body that is valid JSON gives the same usage whether it is read whole
// (keeping kv_transfer_params) or from its usage member alone.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <boost/json.hpp>

#include "proxy/response_observer.h"

namespace {

using kvroute::proxy::ResponseObserver;

void Check(bool ok, const char* what) {
  if (!ok) {
    __builtin_printf("response_observer_fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

bool SameObservation(const ResponseObserver& a, const ResponseObserver& b) {
  return a.events() == b.events() && a.saw_done() == b.saw_done() &&
         a.response_id() == b.response_id() &&
         a.usage().prompt_tokens == b.usage().prompt_tokens &&
         a.usage().cached_tokens == b.usage().cached_tokens &&
         a.usage().completion_tokens == b.usage().completion_tokens &&
         a.kv_transfer_params() == b.kv_transfer_params();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  bool sse = true;
  bool tiny_bounds = false;
  kvroute::proxy::ApiDialect dialect = kvroute::proxy::ApiDialect::kOpenAi;
  std::string_view chunks;
  std::string_view response = input;
  if (const size_t eol = input.find('\n'); eol != std::string_view::npos && eol > 0) {
    const char m = input[0];
    const char lower = static_cast<char>(m | 0x20);
    sse = !(lower == 'j' || lower == 'b' || lower == 'q');
    tiny_bounds = m >= 'A' && m <= 'Z';
    if (lower == 'a' || lower == 'b') dialect = kvroute::proxy::ApiDialect::kAnthropic;
    if (lower == 'r' || lower == 'q') dialect = kvroute::proxy::ApiDialect::kResponses;
    chunks = input.substr(1, eol - 1);
    response = input.substr(eol + 1);
  }
  const size_t max_json_body = tiny_bounds ? 64 : 1 << 20;
  const size_t max_event_bytes = tiny_bounds ? 32 : 1 << 20;

  ResponseObserver pieces(sse, max_json_body, max_event_bytes, /*keep_transfer_params=*/true,
                          dialect);
  size_t pos = 0;
  for (size_t i = 0; pos < response.size(); ++i) {
    size_t len = response.size() - pos;
    if (!chunks.empty()) len = static_cast<uint8_t>(chunks[i % chunks.size()]) + 1;
    std::string_view piece = response.substr(pos, len);
    pieces.Feed(piece);
    pos += piece.size();
  }
  pieces.Finish();

  ResponseObserver whole(sse, max_json_body, max_event_bytes, /*keep_transfer_params=*/true,
                         dialect);
  whole.Feed(response);
  whole.Finish();
  if (!tiny_bounds && response.size() <= max_json_body) {
    Check(SameObservation(pieces, whole), "pieces and one Feed() observe the same");
  }
  if (!sse && !tiny_bounds && dialect == kvroute::proxy::ApiDialect::kOpenAi) {
    ResponseObserver fast(sse, max_json_body, max_event_bytes);
    fast.Feed(response);
    fast.Finish();
    boost::system::error_code ec;
    (void)boost::json::parse(boost::json::string_view(response.data(), response.size()), ec);
    if (!ec) {
      Check(fast.usage().prompt_tokens == whole.usage().prompt_tokens &&
                fast.usage().cached_tokens == whole.usage().cached_tokens &&
                fast.usage().completion_tokens == whole.usage().completion_tokens,
            "usage from the usage member equals usage from the whole body");
    }
  }
  Check(pieces.events() >= 0, "event count is not negative");
  return 0;
}
