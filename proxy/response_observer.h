// ResponseObserver watches the bytes of an engine's response as they are
// relayed, without changing them, and pulls out what the router learns from:
// `usage.prompt_tokens`, `usage.prompt_tokens_details.cached_tokens`,
// `usage.completion_tokens`, and whether an SSE stream reached `[DONE]`.
//
//   ResponseObserver obs(/*sse=*/true, /*max_json_body=*/1 << 20);
//   obs.Feed(bytes);  ...  obs.Finish();
//   if (obs.usage().prompt_tokens >= 0) ...
//
// SSE: events are split on blank lines; only events that carry
// "prompt_tokens" are parsed (the usage chunk), so relaying costs a scan, not
// a JSON parse, per event. Non-streaming JSON: the body is kept up to a bound
// and parsed once at the end. Not thread-safe; one per response.
//
// The agent APIs vLLM serves report usage in their own shapes (ApiDialect):
//   kAnthropic  /v1/messages: usage {input_tokens, output_tokens} in the
//               message, in message_start and message_delta events; a stream
//               ends with message_stop. vLLM sends no cache counts, so
//               cached_tokens stays -1 (unknown) unless a
//               cache_read_input_tokens arrives.
//   kResponses  /v1/responses: usage {input_tokens, input_tokens_details
//               {cached_tokens}, output_tokens} in the response object (the
//               body, or the response.completed event, which ends the stream
//               as response.incomplete and response.failed do); its `id` is
//               the stored response's id (response_id()).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvroute::proxy {

enum class ApiDialect { kOpenAi, kAnthropic, kResponses };

struct Usage {
  int64_t prompt_tokens = -1;
  int64_t cached_tokens = -1;
  int64_t completion_tokens = -1;
};

class ResponseObserver {
 public:
  // `keep_transfer_params`: also keep a JSON body's kv_transfer_params
  // (then the whole body is parsed; without it, only its usage member).
  ResponseObserver(bool sse, size_t max_json_body, size_t max_event_bytes = 1 << 20,
                   bool keep_transfer_params = false, ApiDialect dialect = ApiDialect::kOpenAi);

  void Feed(std::string_view bytes);
  void Finish();

  const Usage& usage() const { return usage_; }
  bool saw_done() const { return saw_done_; }
  int64_t events() const { return events_; }
  // The parsed non-streaming body's `kv_transfer_params`, serialised; empty
  // when absent or not kept.
  const std::string& kv_transfer_params() const { return kv_transfer_params_; }
  // kResponses: the response's id ("resp_..."); empty until seen.
  const std::string& response_id() const { return response_id_; }

 private:
  void OnEvent(std::string_view event);
  void OnAgentEvent(std::string_view payload);
  void ParseAgentJson(std::string_view text);
  void ParseJson(std::string_view text);

  bool sse_;
  size_t max_json_body_;
  size_t max_event_bytes_;
  bool keep_transfer_params_;
  ApiDialect dialect_;
  std::string pending_;  // SSE: the incomplete event; JSON: the body so far
  bool overflow_ = false;
  Usage usage_;
  bool saw_done_ = false;
  int64_t events_ = 0;
  std::string kv_transfer_params_;
  std::string response_id_;
};

// Parses one `usage` JSON object into `out`. Returns false when the text
// holds no usage.
bool ParseUsageFromJson(std::string_view json_text, Usage* out, std::string* kv_transfer_params);

}  // namespace kvroute::proxy
