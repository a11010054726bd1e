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
// On chat and completions (the OpenAI dialect) a usage without `prompt_tokens_details` is read through the backend's
// CachedTokensRule (below), given at construction.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvroute::proxy {

enum class ApiDialect { kOpenAi, kAnthropic, kResponses };

struct Usage {
  int64_t prompt_tokens = -1;
  int64_t cached_tokens = -1;  // -1: unknown
  int64_t completion_tokens = -1;
  bool reported = false;     // the response carried a `usage` object
  bool has_details = false;  // ... with a `prompt_tokens_details` object
};

// How a backend's `usage` without `prompt_tokens_details` is read
// (`backends[].cached_tokens_absent`).
enum class AbsentCachedTokens {
  kAuto,     // 0 once the backend has been seen writing details, else unknown
  kZero,     // always 0: the engine runs with --enable-prompt-tokens-details
  kUnknown,  // never inferred
};

// One backend's reading of a usage without details. vLLM writes
// `prompt_tokens_details` only when started with
// --enable-prompt-tokens-details, and then only when the cached count is not
// 0 (`if self.enable_prompt_tokens_details and num_cached_tokens:` in its
// chat and completion serving paths, streamed and not), so on such a server
// a usage without details means 0 cached tokens: the miss that corrects an
// over-optimistic shadow. kAuto takes a backend's first details as proof of
// the flag. Owned by the server's backend table, one per backend; shared by
// every worker's relays. Thread-safe (relaxed atomics: each is a fact on its
// own).
class CachedTokensRule {
 public:
  explicit CachedTokensRule(AbsentCachedTokens absent = AbsentCachedTokens::kAuto)
      : absent_(absent) {}

  // The backend's configured reading (set again on a config reload; what it
  // has seen stays).
  void Configure(AbsentCachedTokens absent) { absent_.store(absent, std::memory_order_relaxed); }

  // Completes the usage of one response. `complete`: the response ended as
  // the engine meant it to (an SSE stream reached [DONE]); a usage cut short
  // is never read as 0. Idempotent.
  void Apply(bool complete, Usage* usage);

  AbsentCachedTokens absent() const { return absent_.load(std::memory_order_relaxed); }
  bool details_seen() const { return details_seen_.load(std::memory_order_relaxed); }

 private:
  std::atomic<AbsentCachedTokens> absent_;
  std::atomic<bool> details_seen_{false};
};

class ResponseObserver {
 public:
  // `keep_transfer_params`: also keep a JSON body's kv_transfer_params
  // (then the whole body is parsed; without it, only its usage member).
  // `cached_tokens_rule`: the backend's reading of a usage without details
  // (not owned; outlives the observer); null: such a usage stays unknown.
  ResponseObserver(bool sse, size_t max_json_body, size_t max_event_bytes = 1 << 20,
                   bool keep_transfer_params = false, ApiDialect dialect = ApiDialect::kOpenAi,
                   CachedTokensRule* cached_tokens_rule = nullptr);

  void Feed(std::string_view bytes);
  // The usage of an event that did not pass through Feed (StreamUsageFilter
  // took it out of the client's stream); counts as one event.
  void ReportUsage(const Usage& usage);
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
  CachedTokensRule* cached_tokens_rule_;
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

// Whether `json_text` is a streamed usage-only chunk: an object whose
// `choices` is an empty array and whose `usage` is an object (what an
// OpenAI-compatible server sends before [DONE] when asked for
// stream_options.include_usage). Fills `out` when it is.
bool ParseUsageOnlyChunk(std::string_view json_text, Usage* out);

}  // namespace kvroute::proxy
