// Usage on every stream: kvroute asks the engine for `usage` on each streamed
// chat/completions request, so the router learns every response's true
// cached_tokens, and takes that usage back out of the client's stream when
// the client did not ask for it, so the client receives byte for byte what
// the engine would have sent it for its own request.
//
//   StreamUsagePlan plan = PlanStreamUsage(body);         // request side
//   if (plan.edits_body()) {
//     // upstream body = plan.Pieces(body) (three buffers, one write);
//     // Content-Length = plan.BodySize(body)
//   }
//   StreamUsageFilter filter(&observer, max_event_bytes);  // response side
//   for (each read) for (std::string_view p : filter.Feed(bytes)) send p;
//   for (std::string_view p : filter.Finish()) send p;
//
// What vLLM sends (chat_completion_stream_generator and
// completion_stream_generator): with stream_options.include_usage, one
// chunk `{"id",...,"choices":[],"usage":{...}}` comes just before
// `data: [DONE]`, and no other chunk changes (chunks are dumped with
// exclude_unset, so `usage` appears in a content chunk only when
// continuous_usage_stats asked for it; older completions dumps write
// `"usage":null` in every chunk whatever the options). continuous_usage_stats
// acts only together with include_usage, and vLLM's StreamOptions defaults
// include_usage to true, so `"stream_options":{}` or
// `{"continuous_usage_stats":true}` already asks for usage. So:
//   - no stream_options: `"stream_options":{"include_usage":true},` goes in
//     after the body's opening brace, without copying the body;
//   - stream_options null, or an object whose include_usage is false or
//     null: that value is replaced by the same object with include_usage
//     true and continuous_usage_stats removed (the client would have received
//     no usage at all, per chunk or final);
//   - include_usage true, or an object without it: the body and the stream
//     are left alone (the client gets what it asked for from vLLM; an engine
//     whose default is false sends no usage, and kvroute learns nothing);
//   - a body this cannot read safely (not an object, stream_options twice or
//     of another type, include_usage of another type): left alone.
// Known departures: a server started with --enable-force-include-usage
// sends the usage chunk unasked, and this filter takes it out as well; vLLM
// releases that stamp a configured system_fingerprint on the last content
// chunk only when include_usage is off move it to the usage chunk when on.
//
// Thread-safety: PlanStreamUsage is a pure function; a StreamUsageFilter
// belongs to one response and is not thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/response_observer.h"

namespace kvroute::proxy {

// What kvroute changes in one streamed request's body.
struct StreamUsagePlan {
  enum class Action {
    kNone,         // the body goes as it is; the stream is relayed untouched
    kClientAsked,  // the client's stream_options ask for usage: same
    kInsert,       // `text` goes in at `begin` (just after the opening brace)
    kReplace,      // `text` replaces the bytes [begin, end) (stream_options' value)
  };
  Action action = Action::kNone;
  size_t begin = 0;
  size_t end = 0;
  std::string text;

  // Whether the upstream body differs from the client's, and so the stream
  // needs a StreamUsageFilter.
  bool edits_body() const { return action == Action::kInsert || action == Action::kReplace; }
  // The upstream body as three pieces of `body` and `text` (valid while both
  // live); the body itself when nothing changes (then the others are empty).
  std::array<std::string_view, 3> Pieces(std::string_view body) const;
  size_t BodySize(std::string_view body) const;
  // The upstream body in one string (the P/D decode leg keeps its own copy).
  std::string Apply(std::string_view body) const;
};

// Plans the change for a streamed request (`"stream": true`) of the chat or
// completions endpoints. Scans only the body's top-level keys (a key written
// with \u escapes is decoded before it is compared); a body with neither
// the bytes `"stream_options"` nor a \u escape is not scanned at all.
StreamUsagePlan PlanStreamUsage(std::string_view body);

// Takes the usage-only chunk kvroute asked for out of an SSE stream and
// hands its usage to the response's observer; every other byte reaches the
// client unchanged, in order. Events end at a blank line (LF or CRLF line
// ends, mixed or not). An event is held until its end arrives (the client
// could not act on half an event), and never beyond `max_event_bytes`: a
// larger one is passed on as it comes and never taken out.
class StreamUsageFilter {
 public:
  // `observer` (not owned) sees every byte the client gets, through Feed,
  // and the taken-out usage, through ReportUsage.
  StreamUsageFilter(ResponseObserver* observer, size_t max_event_bytes);

  // The next bytes of the engine's response body. Returns the pieces to send
  // to the client, in order; they point into `bytes` or into the filter and
  // stay valid until the next call.
  const std::vector<std::string_view>& Feed(std::string_view bytes);
  // The end of the body: whatever is still held (an unfinished last event)
  // goes out as it is. The pieces of the last Feed stay valid; its returned
  // list does not (copy the pieces out before calling this).
  const std::vector<std::string_view>& Finish();

  int64_t dropped_events() const { return dropped_; }

 private:
  // An event [start, end) of `bytes` (or of held_ when it began earlier)
  // is complete: drops it or keeps it.
  bool IsInjectedUsage(std::string_view event);
  void Emit(std::string_view piece);

  ResponseObserver* observer_;
  size_t max_event_bytes_;
  std::vector<std::string_view> out_;
  std::string held_;         // the start of an event whose end has not come
  std::string completed_;    // a held event, completed by this read, going out
  std::string tail_;         // what Finish sends
  bool oversized_ = false;   // the current event outgrew the bound: passing through
  size_t line_bytes_ = 0;    // bytes of the current line so far (its '\n' not yet seen)
  bool line_is_cr_ = false;  // the current line so far is exactly "\r"
  int64_t dropped_ = 0;
};

}  // namespace kvroute::proxy
