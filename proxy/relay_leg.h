// The steps of one upstream leg as Relay (proxy/relay.h) runs them, and the
// state they share: relay.cc sends the request and takes the response
// header, relay_body.cc relays the body and ends the leg. Private to
// proxy/: relay.h is the interface.
//
//   RelayLeg leg(session, backend, decor, client_wants_stream, std::move(opts));
//   co_await SendAndAwaitHeader(leg, request_bytes);    // relay.cc
//   ... the client's header ...
//   BodyRelay body(leg);
//   co_await RelayBody(leg, body);                      // relay_body.cc
//   co_await EndBody(leg, body);
//   co_return leg.Finish();
//
// Thread-safety: a RelayLeg and its BodyRelay live in Relay's coroutine
// frame, on the session's worker thread.
#pragma once

#include <boost/optional.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/container/inlined_vector.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proxy/buffer_stash.h"
#include "proxy/config.h"
#include "proxy/eager_io.h"
#include "proxy/relay.h"
#include "proxy/relay_parser.h"
#include "proxy/request_clock.h"
#include "proxy/response_observer.h"
#include "proxy/stream_usage.h"
#include "proxy/upstream.h"

namespace kvroute::proxy {

struct SharedState;
struct Worker;

// Upstream responses are relayed in pieces of up to kRelayChunkBytes.
inline constexpr size_t kRelayChunkBytes = 16 * 1024;

// The response fields kvroute sets itself, not forwarded from the engine:
// the first two on every relayed response, the class on a routed request's.
inline constexpr std::string_view kOwnFields[] = {"X-Request-Id", "X-Kvroute-Backend",
                                                  "X-Kvroute-Class"};

// One leg while Relay runs it. Owns the upstream connection in use and the
// response's parser; `leg_state` is what the client watcher and a concurrent
// handoff leg see of it.
struct RelayLeg {
  RelayLeg(Session& s, int backend, const Decor& decor, bool client_wants_stream,
           LegOptions options);
  RelayLeg(const RelayLeg&) = delete;
  RelayLeg& operator=(const RelayLeg&) = delete;

  bool aborted() const { return leg_state->aborted(); }
  bool ejected() const { return leg_state->ejected; }
  // The fields the client's header gets from kvroute (kOwnFields' first n).
  absl::Span<const std::string_view> own_fields() const {
    return absl::MakeConstSpan(kOwnFields, decor.request_class.empty() ? 2 : 3);
  }

  // The backend's passive health check: it answered (ok) or failed at `at`.
  void Passive(bool ok, Clock::time_point at);
  // A wait that timed out on an engine whose counters move is its queue's
  // length, not a fault of the instance: the request fails, the breaker is
  // not fed (a hung engine is ejected by its standing counters instead).
  void TimedOutWaiting(Clock::time_point at);
  // The client went away, or the leg was cancelled.
  void NoteAborted();
  // A write to the client failed: it is gone.
  void NoteClientWriteFailed();
  // Ends the leg (the client watcher stops, no connection is in use) and
  // hands over its result.
  RelayResult Finish();

  Session& session;
  Worker& worker;
  SharedState& shared;
  const Config& config;
  beast::tcp_stream& client;
  UpstreamPool& pool;  // knows `backend`'s slot
  const router::BackendSpec& spec;
  const int backend;
  const Decor& decor;
  const bool client_wants_stream;
  const LegOptions opts;
  const EagerTimeout write_timeout;  // of each client write
  const Clock::time_point t0;
  // A stream's header comes as soon as the engine accepts the request; a
  // plain body's comes with the whole answer, after the engine's queue.
  const absl::Duration first_token_wait;
  const bool header_is_first_token;
  const absl::Duration header_wait;
  const std::shared_ptr<LegState> leg_state;

  RelayResult r;
  std::unique_ptr<Connection> conn;
  // The engine's bytes as read. Beast reads up to the buffer's free
  // capacity (512 B when empty): reserved, a response comes in relay-sized
  // pieces.
  BufferStash<beast::flat_buffer>::Lease up_buf;
  // The engine's response: parsed without a field map, its forwarded
  // fields kept as wire lines (relay_parser.h). Empty until a response
  // header is in.
  std::optional<RelayResponseParser> parser;

  // What the response header said (TakeResponseHeader).
  Clock::time_point t_header;
  boost::optional<uint64_t> length;  // none: the engine's body is chunked
  bool chunked = false;
  // The usage chunk kvroute asked for comes out of the client's stream, so
  // the client's framing is chunked whatever the engine's.
  bool filter_usage = false;
  bool client_chunked = false;
  std::string held_header;  // a client header to send with the first body bytes
  bool first_token_seen = false;
};

// The body's side of a leg: the observer that reads the response's usage
// (fed through the filter that takes kvroute's usage chunk out of the
// client's stream, when it asked for one), the buffer the body's bytes land
// in, and the completion hook.
struct BodyRelay {
  explicit BodyRelay(RelayLeg& leg);
  BodyRelay(const BodyRelay&) = delete;
  BodyRelay& operator=(const BodyRelay&) = delete;

  // Once, when the engine's response is complete: the observer's last
  // word, the stored response's home, then LegOptions::before_last_write.
  void FireHook(RelayLeg& leg);

  ResponseObserver observer;
  // With the filter, the client's bytes pass through it, which feeds the
  // observer; the pieces of one read go out as one chunk.
  std::optional<StreamUsageFilter> usage_filter;
  absl::InlinedVector<net::const_buffer, 4> pieces;
  bool hook_fired = false;
  // A stashed buffer, so the coroutine frame stays small and no chunk is
  // allocated per request.
  BufferStash<beast::flat_buffer>::Lease chunk_lease;
  char* const chunk;
  bool upstream_ok = true;  // false once the engine's response or the client broke
};

// Relays the response body as it arrives (to the client, or into the
// capture of a prefill leg) until it ends or breaks.
net::awaitable<void> RelayBody(RelayLeg& leg, BodyRelay& body);

// Ends the body: its usage into the result, the client's stream closed
// (or, broken, ended with an error event), the connection back to the
// pool when it can serve again.
net::awaitable<void> EndBody(RelayLeg& leg, BodyRelay& body);

}  // namespace kvroute::proxy
