// The body half of a leg (proxy/relay_leg.h): the engine's response body
// relayed to the client as it arrives, piece by piece, or captured for a
// prefill leg; then its end.
#include <spdlog/spdlog.h>

#include <array>
#include <string>

#include "absl/strings/str_cat.h"
#include "proxy/agent_apis.h"
#include "proxy/eager_io.h"
#include "proxy/relay_leg.h"
#include "proxy/response_homes.h"
#include "proxy/session.h"
#include "proxy/shared_state.h"
#include "proxy/watchdog.h"
#include "proxy/worker.h"

namespace kvroute::proxy {

namespace {

// A read of the body failed, timed out, or the leg was aborted meanwhile.
void NoteBodyBroken(RelayLeg& leg, const beast::error_code& ec) {
  if (leg.aborted()) {
    leg.NoteAborted();
    return;
  }
  RelayResult& r = leg.r;
  r.timed_out = ec == beast::error::timeout;
  r.error = r.timed_out && !leg.first_token_seen
                ? std::string("timed out waiting for the first token")
                : absl::StrCat("upstream broke mid-response: ", ec.message());
  leg.shared.metrics->stream_errors->Inc({leg.spec.name});
  if (r.timed_out) {
    leg.TimedOutWaiting(Clock::now());
  } else {
    leg.Passive(false, Clock::now());
  }
}

// The stream's first body byte is its first token.
void NoteStreamFirstToken(RelayLeg& leg) {
  leg.first_token_seen = true;
  const auto t_first = Clock::now();
  leg.r.t_first_byte = WallSecondsAt(t_first);
  leg.r.ttfb_s = Seconds(t_first - leg.t0);
  if (leg.opts.on_first_byte) leg.opts.on_first_byte(t_first);
}

// The `n` bytes just read go to the observer, through the usage filter when
// there is one (which leaves the client's share in `body.pieces`); the end
// of the response fires the completion hook.
void ObserveBody(RelayLeg& leg, BodyRelay& body, size_t n) {
  if (body.usage_filter) {
    body.pieces.clear();
    for (std::string_view p : body.usage_filter->Feed(std::string_view(body.chunk, n))) {
      body.pieces.push_back(net::buffer(p.data(), p.size()));
    }
    if (leg.parser->is_done()) {
      for (std::string_view p : body.usage_filter->Finish()) {
        body.pieces.push_back(net::buffer(p.data(), p.size()));
      }
    }
  } else {
    body.observer.Feed(std::string_view(body.chunk, n));
  }
  if (leg.parser->is_done()) body.FireHook(leg);
}

// A prefill leg keeps its body, up to the capture's bound.
void Capture(const RelayLeg& leg, const BodyRelay& body, size_t n) {
  if (leg.opts.capture != nullptr && leg.opts.capture->size() + n <= leg.opts.max_capture) {
    leg.opts.capture->append(body.chunk, n);
  }
}

}  // namespace

BodyRelay::BodyRelay(RelayLeg& leg)
    : observer(leg.r.sse, leg.pool.options().max_observed_body,
               leg.pool.options().max_observed_body, /*keep_transfer_params=*/false,
               DialectFor(leg.decor.endpoint),
               &leg.shared.cached_tokens_rules[static_cast<size_t>(leg.backend)]),
      chunk_lease(leg.worker.read_buffers),
      chunk(static_cast<char*>(chunk_lease->prepare(kRelayChunkBytes).data())) {
  if (leg.filter_usage) usage_filter.emplace(&observer, leg.pool.options().max_observed_body);
}

void BodyRelay::FireHook(RelayLeg& leg) {
  if (hook_fired) return;
  hook_fired = true;
  observer.Finish();
  // A stored response's backend is learned before the client can name it
  // in a follow-up.
  if (leg.opts.to_client && leg.r.status == 200 && !observer.response_id().empty()) {
    leg.shared.response_homes->Learn(observer.response_id(), leg.spec.name);
  }
  if (leg.opts.before_last_write) leg.opts.before_last_write(leg.r.status, observer.usage());
}

net::awaitable<void> RelayBody(RelayLeg& leg, BodyRelay& body) {
  Connection& conn = *leg.conn;
  RelayResponseParser& parser = *leg.parser;
  char* const chunk = body.chunk;
  for (bool first = true; !parser.is_done(); first = false) {
    parser.set_body_buffer(chunk, kRelayChunkBytes);
    // The first read follows the header (and its write, which does not
    // wait while the client reads): its deadline counts from there. Until
    // the first token it is the first-token wait, then the idle timer.
    const auto now = first ? leg.t_header : Clock::now();
    const absl::Duration limit =
        leg.first_token_seen ? leg.pool.options().idle_timeout : leg.first_token_wait;
    Watchdog::Scoped wait(leg.session.watchdog(), now + ToChrono(limit), &conn.socket());
    auto read_some = [&](beast::error_code& e) {
      return http::read_some(conn.socket(), *leg.up_buf, parser, e);
    };
    auto [rec, rn] = ReadNow(conn.socket(), read_some);
    if (rec == net::error::would_block) {
      std::tie(rec, rn) = co_await EagerRead(conn.socket(), *leg.up_buf, read_some, false);
    }
    if (wait.expired()) rec = beast::error::timeout;
    const size_t n = kRelayChunkBytes - parser.body_left();
    if ((rec && rec != http::error::need_buffer) || leg.aborted()) {
      body.upstream_ok = false;
      NoteBodyBroken(leg, rec);
      break;
    }
    if (n == 0) continue;
    if (!leg.first_token_seen) NoteStreamFirstToken(leg);
    ObserveBody(leg, body, n);
    if (!leg.opts.to_client) {
      Capture(leg, body, n);
      continue;
    }
    beast::error_code wec;
    if (body.usage_filter) {
      if (net::buffer_size(body.pieces) == 0) continue;  // all taken out: no empty chunk
      const auto piece = http::make_chunk(body.pieces);
      const WriteAttempt w = WriteNow(leg.client, piece);
      wec = w.ec;
      if (!w.done) wec = co_await WriteRest(leg.client, piece, w.written, leg.write_timeout);
    } else if (leg.chunked) {
      const auto piece = http::make_chunk(net::buffer(chunk, n));
      const WriteAttempt w = WriteNow(leg.client, piece);
      wec = w.ec;
      if (!w.done) wec = co_await WriteRest(leg.client, piece, w.written, leg.write_timeout);
    } else {
      // The held header, if any (else an empty buffer), goes with the body.
      const std::array<net::const_buffer, 2> both{net::buffer(leg.held_header),
                                                  net::buffer(chunk, n)};
      const WriteAttempt w = WriteNow(leg.client, both);
      wec = w.ec;
      if (!w.done) wec = co_await WriteRest(leg.client, both, w.written, leg.write_timeout);
      leg.held_header.clear();
    }
    if (wec) {
      body.upstream_ok = false;
      leg.NoteClientWriteFailed();
      break;
    }
  }
}

net::awaitable<void> EndBody(RelayLeg& leg, BodyRelay& body) {
  RelayResult& r = leg.r;
  if (!leg.held_header.empty() && !r.client_gone) {
    // No body bytes came: the client gets the header, as it would have.
    co_await EagerWrite(leg.client, net::buffer(leg.held_header), leg.write_timeout);
  }
  body.observer.Finish();
  r.usage = body.observer.usage();
  r.events = body.observer.events();
  if (body.upstream_ok) {
    r.completed = true;
    body.FireHook(leg);
    if (leg.client_chunked && leg.opts.to_client) {
      if (co_await EagerWrite(leg.client, http::make_chunk_last(), leg.write_timeout)) {
        r.completed = false;
      }
    }
    const bool reusable = leg.parser->keep_alive();
    leg.leg_state->upstream = nullptr;
    leg.pool.Release(leg.backend, std::move(leg.conn), reusable);
    co_return;
  }
  leg.leg_state->upstream = nullptr;
  leg.conn.reset();  // closing the connection cancels the engine's request
  if (body.usage_filter && !r.client_gone) {
    // The bytes the filter still holds (an unfinished event) were the
    // client's before the stream broke.
    const auto& rest = body.usage_filter->Finish();
    if (!rest.empty()) {
      co_await EagerWrite(leg.client, http::make_chunk(net::buffer(rest.front())),
                          leg.write_timeout);
    }
  }
  if (leg.opts.to_client && !r.client_gone && leg.client_chunked && r.sse &&
      leg.client_wants_stream) {
    // Tell the client the stream ended abnormally instead of truncating.
    const std::string event = MidStreamErrorEvent(leg.decor.endpoint, r.error);
    co_await EagerWrite(leg.client, http::make_chunk(net::buffer(event)), leg.write_timeout);
    co_await EagerWrite(leg.client, http::make_chunk_last(), leg.write_timeout);
  }
}

}  // namespace kvroute::proxy
