// The upstream leg of a request: send it to one backend and relay the
// response to the client as it arrives (byte for byte, event by event for
// SSE), or capture it (a handoff's prefill leg); watch the client meanwhile
// and cancel the leg when it goes away.
//
//   LegOptions opts;
//   opts.on_first_byte = ...;          // the router's first token
//   RelayResult r = co_await Relay(session, backend, request, decor, stream, std::move(opts));
//   if (!r.headers_sent && r.upstream_failed) ...   // retry elsewhere
//
// Thread-safety: a leg, its client watcher and its LegState live on the
// session's worker thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "proxy/client_request.h"
#include "proxy/features.h"
#include "proxy/http_common.h"
#include "proxy/request_clock.h"
#include "proxy/response_observer.h"
#include "proxy/upstream.h"

namespace kvroute::proxy {

class Session;

// What a relayed response answers: the extra response headers kvroute adds
// (the id and the class are views of the request's record, ServeCompletion's,
// which outlives every leg, a concurrent prefill leg included: the handoff
// joins it, so the copies of a Decor per leg copy no strings but the label),
// and the request's API, which says how the response's usage is read and how
// a broken stream is ended.
struct Decor {
  std::string_view request_id;
  std::string backend_label;       // "gpu3" or "gpu1->gpu3"
  std::string_view request_class;  // empty: not a routed request
  Endpoint endpoint = Endpoint::kChat;
  // The `priority` every chat/completions leg to a backend with
  // priority_scheduling carries (proxy/engine_priority.h); none: no leg does.
  std::optional<int64_t> engine_priority;
};

struct RelayResult {
  bool headers_sent = false;  // the client has a response header
  bool completed = false;     // the whole upstream response reached the client
  bool client_gone = false;
  bool upstream_failed = false;  // failed before any response header: 502/504
  bool timed_out = false;
  bool ejected = false;  // cut short because its backend was ejected
  int status = 0;
  std::string error;
  Usage usage;
  bool sse = false;
  // The first token: a stream's first body byte (-1 when none came), a plain
  // body's header.
  double t_first_byte = -1;  // wall seconds
  double ttfb_s = -1;        // steady seconds since relay start
  int64_t events = 0;
};

// One upstream leg's shared state. The leg's coroutine, the client watcher
// and (for concurrent handoffs) the other leg all run on the connection's
// worker thread, so plain fields suffice.
struct LegState {
  Connection* upstream = nullptr;  // the connection in use, if any
  bool relay_done = false;
  bool client_gone = false;  // set by the client watcher
  bool cancelled = false;    // set by Cancel()
  bool ejected = false;      // set by Eject(): the backend was taken out
  void Cancel() {
    cancelled = true;
    if (upstream != nullptr) upstream->cancel();
  }
  void Eject() {
    ejected = true;
    if (upstream != nullptr) upstream->cancel();
  }
  bool aborted() const { return client_gone || cancelled; }
};

// Waits until the client's socket is readable. Readable at end of stream
// means the client closed: cancel the upstream exchange so the engine stops
// generating. Readable with data means a pipelined request: stop watching.
// Readable with nothing there is a stale readiness event (bytes the eager
// reads took while the event was queued): wait again. Peeking tells these
// apart; FIONREAD (available()) says 0 for both of the last two.

// Called once with the time of the leg's first token: a stream's first body
// byte (an engine sends a stream's header as soon as it accepts the
// request), a plain body's header. A plain handler, not a coroutine, and not
// cancelled when the leg ends.
using OnFirstByte = std::function<void(Clock::time_point)>;

// How Relay() treats a leg.
struct LegOptions {
  bool to_client = true;     // false: keep the body in `capture` (prefill legs)
  bool watch_client = true;  // cancel the leg when the client disconnects
  std::string* capture = nullptr;
  size_t max_capture = 1 << 20;
  std::shared_ptr<LegState> state;  // created by Relay when null
  OnFirstByte on_first_byte;
  // A 5xx answer is a failure before the first byte (the caller retries
  // elsewhere) instead of a response to relay.
  bool fail_on_5xx = false;
  // Called once the engine's response is complete, before its last bytes
  // go to the client, so that whatever the client sends next (a session's
  // next turn) is routed with this response already learned.
  std::function<void(int status, const Usage& usage)> before_last_write;
  // The longest wait for the leg's first token: a stream's first body byte,
  // or a plain body's header (which comes with the whole answer). The
  // caller derives it from the request's predicted TTFT
  // (FirstTokenTimeout); zero: upstream.first_token_timeout_s. The stream's
  // idle timer applies only once tokens flow.
  absl::Duration first_token_timeout = absl::ZeroDuration();
  // A chat/completions leg whose response goes to the client: when the
  // client streams without asking for usage, ask the engine for it and take
  // it back out of the client's stream (proxy/stream_usage.h).
  bool ask_stream_usage = false;
};

// The wait a request predicted to take `predicted_ttft_s` wall seconds to
// its first token (< 0: no prediction) may spend before it:
// factor x prediction, at least the floor and at most the cap
// (upstream.first_token_timeout_*).
absl::Duration FirstTokenTimeout(const UpstreamOptions& options, double predicted_ttft_s);

// Sends `up` to `backend` and relays the response to the client as it
// arrives (or captures it, for a prefill leg). Retries once on a fresh
// connection when a reused keep-alive connection turns out to be dead
// before any response byte.
net::awaitable<RelayResult> Relay(Session& s, int backend, ClientRequest& up, const Decor& decor,
                                  bool client_wants_stream, LegOptions opts);

}  // namespace kvroute::proxy
