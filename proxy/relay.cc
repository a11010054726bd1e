#include "proxy/relay.h"

#include <spdlog/spdlog.h>

#include <array>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "proxy/absl_compat.h"
#include "proxy/eager_io.h"
#include "proxy/engine_priority.h"
#include "proxy/relay_leg.h"
#include "proxy/session.h"
#include "proxy/shared_state.h"
#include "proxy/stream_usage.h"
#include "proxy/watchdog.h"
#include "proxy/worker.h"

namespace kvroute::proxy {

namespace {

bool ContainsIgnoreCase(std::string_view haystack, std::string_view needle) {
  return absl::AsciiStrToLower(ToAbsl(haystack)).find(needle) != std::string::npos;
}

// Waits until the client's socket is readable. Readable at end of stream
// means the client closed: cancel the upstream exchange so the engine stops
// generating. Readable with data means a pipelined request: stop watching.
// Readable with nothing there is a stale readiness event (bytes the eager
// reads took while the event was queued): wait again. Peeking tells these
// apart; FIONREAD (available()) says 0 for both of the last two.
// A plain handler, not a coroutine, and not cancelled when the leg ends
// (a cancellation is one more trip through the scheduler per request): it
// completes, doing nothing, when the client sends its next request or
// closes, or when the connection closes.
void WatchClient(tcp::socket& sock, std::shared_ptr<LegState> st) {
  sock.async_wait(tcp::socket::wait_read,
                  [&sock, st = std::move(st)](beast::error_code ec) mutable {
                    if (st->relay_done || ec == net::error::operation_aborted) return;
                    if (!ec) {
                      if (!sock.non_blocking()) sock.non_blocking(true, ec);
                      char byte;
                      sock.receive(net::buffer(&byte, 1), tcp::socket::message_peek, ec);
                      if (!ec) return;  // a pipelined request: stop watching
                      if (ec == net::error::would_block || ec == net::error::try_again) {
                        WatchClient(sock, std::move(st));  // nothing there after all
                        return;
                      }
                    }
                    st->client_gone = true;  // end of stream, reset or another error
                    if (st->upstream != nullptr) st->upstream->cancel();
                  });
}

// The pool that knows slot `backend`, which the router may have added
// since the worker last looked.
UpstreamPool& PoolFor(Worker& worker, SharedState& shared, int backend) {
  worker.Ensure(*shared.router, backend);
  return worker.pool;
}

// The request's bytes for the leg's backend, written in one go: the
// header (the client's fields less the hop-by-hop and framing ones,
// kvroute's request id, this backend's Host, the body's length; no edits to
// a field map) and the body as up to five pieces, the client's bytes around
// the leg's edits, none of them copied. Refers to the client's body, which
// outlives the leg; neither copied nor moved.
class UpstreamRequestBytes {
 public:
  UpstreamRequestBytes(const ClientRequest& up, const RelayLeg& leg) {
    // Only chat and completions have stream_options; the agent APIs send
    // their usage unasked.
    const bool openai_stream =
        leg.decor.endpoint == Endpoint::kChat || leg.decor.endpoint == Endpoint::kCompletions;
    // A stream whose client did not ask for usage asks the engine for it:
    // the body goes as three pieces (the client's bytes around kvroute's).
    if (leg.opts.ask_stream_usage && leg.opts.to_client && leg.client_wants_stream &&
        openai_stream) {
      usage_plan_ = PlanStreamUsage(up.body());
    }
    // An engine scheduling by priority gets the request's deadline as the
    // body's first member, ahead of any usage edit (which never starts
    // before the first member).
    if (leg.decor.engine_priority && leg.spec.priority_scheduling && openai_stream) {
      priority_ = PlanPriority(up.body(), *leg.decor.engine_priority);
    }
    const std::array<std::string_view, 3> usage_pieces = usage_plan_.Pieces(up.body());
    body_ = {usage_pieces[0], {}, {}, usage_pieces[1], usage_pieces[2]};
    size_t body_size = usage_plan_.BodySize(up.body());
    if (priority_) {
      body_[0] = usage_pieces[0].substr(0, priority_->at);
      body_[1] = priority_->text;
      body_[2] = usage_pieces[0].substr(priority_->at);
      body_size += priority_->text.size();
    }
    header_.reserve(256);
    AppendUpstreamHeader(up, leg.decor.request_id, leg.spec.host, leg.spec.port, body_size,
                         &header_);
  }
  UpstreamRequestBytes(const UpstreamRequestBytes&) = delete;
  UpstreamRequestBytes& operator=(const UpstreamRequestBytes&) = delete;

  std::array<net::const_buffer, 6> buffers() const {
    return {net::buffer(header_),  net::buffer(body_[0]), net::buffer(body_[1]),
            net::buffer(body_[2]), net::buffer(body_[3]), net::buffer(body_[4])};
  }
  // Whether the engine is asked for a usage the client did not ask for.
  bool asks_stream_usage() const { return usage_plan_.edits_body(); }

 private:
  StreamUsagePlan usage_plan_;
  std::optional<BodyInsert> priority_;
  std::array<std::string_view, 5> body_;
  std::string header_;
};

// Until the response header arrives the leg can be cut short by an
// ejection of its backend (ApplyHealthChange, backend_monitor.h) and
// retried elsewhere: it is in the worker's set of legs waiting on it.
class WaitingMark {
 public:
  WaitingMark(absl::flat_hash_set<LegState*>* set, LegState* leg) : set_(set), leg_(leg) {
    set_->insert(leg_);
  }
  WaitingMark(const WaitingMark&) = delete;
  WaitingMark& operator=(const WaitingMark&) = delete;
  ~WaitingMark() { set_->erase(leg_); }

 private:
  absl::flat_hash_set<LegState*>* set_;
  LegState* leg_;
};

void NoteConnectFailed(RelayLeg& leg, const beast::error_code& ec) {
  leg.r.upstream_failed = true;
  leg.r.timed_out = ec == beast::error::timeout;
  leg.r.error = absl::StrCat("connect failed: ", ec.message());
  leg.shared.metrics->upstream_errors->Inc({leg.spec.name, "connect"});
  leg.Passive(false, Clock::now());
}

// The request could not be written, or no response header came.
void NoteNoResponse(RelayLeg& leg, const beast::error_code& ec) {
  RelayResult& r = leg.r;
  r.upstream_failed = true;
  r.timed_out = ec == beast::error::timeout;
  r.error = r.timed_out ? "timed out waiting for the response" : ec.message();
  leg.shared.metrics->upstream_errors->Inc({leg.spec.name, r.timed_out ? "timeout" : "read"});
  if (r.timed_out && leg.header_is_first_token) {
    leg.TimedOutWaiting(Clock::now());
  } else {
    leg.Passive(false, Clock::now());
  }
}

// A reused keep-alive connection that failed before any response byte had
// gone stale: the caller tries once more on a fresh one.
void DropStaleConnection(RelayLeg& leg) {
  leg.shared.metrics->retries->Inc({leg.spec.name, "stale_connection"});
  leg.parser.reset();
  leg.leg_state->upstream = nullptr;
  leg.conn.reset();
}

// Connects (an idle keep-alive connection first), sends the request and
// waits for the response header, into `leg.parser`; once more on a fresh
// connection when a reused one turns out dead before any response byte.
// Without a header, `leg.parser` is empty and the result says why.
net::awaitable<void> SendAndAwaitHeader(RelayLeg& leg,
                                        const std::array<net::const_buffer, 6>& up_bytes) {
  LegState& st = *leg.leg_state;
  beast::flat_buffer& up_buf = *leg.up_buf;
  WaitingMark waiting(&leg.worker.waiting[leg.backend], &st);
  for (int attempt = 0; attempt < 2 && !st.aborted() && !st.ejected; ++attempt) {
    beast::error_code ec;
    bool reused = false;
    if (attempt == 0) {
      leg.conn = leg.pool.TakeIdle(leg.backend);  // no coroutine when a connection is idle
      reused = leg.conn != nullptr;
      if (!leg.conn) std::tie(ec, leg.conn) = co_await leg.pool.Connect(leg.backend);
    } else {
      std::tie(ec, leg.conn) = co_await leg.pool.Connect(leg.backend);
    }
    if (st.aborted()) break;
    if (ec && !st.ejected) {
      NoteConnectFailed(leg, ec);
      break;
    }
    if (st.ejected) {
      leg.conn.reset();
      break;
    }
    Connection& conn = *leg.conn;
    st.upstream = &conn;
    const WriteAttempt up_write = WriteNow(conn, up_bytes);
    beast::error_code wec = up_write.ec;
    if (!up_write.done) {
      wec = co_await WriteRest(conn, up_bytes, up_write.written,
                               ToChrono(leg.pool.options().first_byte_timeout));
    }
    if (!wec) {
      leg.parser.emplace(leg.own_fields());
      leg.parser->body_limit(boost::none);
      up_buf.clear();
      // Nothing can have arrived yet: wait first, then parse. A reused
      // connection written at once has not waited since t0.
      const auto sent = attempt == 0 && reused && up_write.done ? leg.t0 : Clock::now();
      Watchdog::Scoped wait(leg.session.watchdog(), sent + ToChrono(leg.header_wait),
                            &conn.socket());
      auto [hec, hn] = co_await EagerRead(
          conn.socket(), up_buf,
          [&](beast::error_code& e) {
            return http::read_header(conn.socket(), up_buf, *leg.parser, e);
          },
          /*try_first=*/false);
      if (wait.expired()) hec = beast::error::timeout;
      if (!hec && !st.aborted()) break;
      wec = hec ? hec : net::error::operation_aborted;
      if (reused && hn == 0 && hec != beast::error::timeout && !st.aborted() && !st.ejected) {
        DropStaleConnection(leg);
        continue;  // stale keep-alive connection: once more on a fresh one
      }
    } else if (reused && !st.aborted() && !st.ejected && wec != beast::error::timeout) {
      DropStaleConnection(leg);
      continue;
    }
    leg.parser.reset();
    st.upstream = nullptr;
    leg.conn.reset();
    if (st.aborted() || st.ejected) break;
    NoteNoResponse(leg, wec);
    break;
  }
}

// Takes in the response header SendAndAwaitHeader left: its status, whether
// it streams, its framing, the backend's passive health check. False: the
// leg ends here (no header: aborted, ejected or failed; or a 5xx the caller
// retries elsewhere).
bool TakeResponseHeader(RelayLeg& leg, bool asks_stream_usage) {
  RelayResult& r = leg.r;
  if (leg.aborted()) {
    leg.NoteAborted();
  } else if (leg.ejected() && !leg.parser) {
    r.upstream_failed = true;
    r.ejected = true;
    r.error = "backend was ejected while the request waited for its response";
    leg.shared.metrics->upstream_errors->Inc({leg.spec.name, "ejected"});
  }
  if (!leg.parser || r.upstream_failed || leg.aborted()) return false;

  r.status = leg.parser->status();
  leg.t_header = Clock::now();
  r.sse = ContainsIgnoreCase(leg.parser->content_type(), "text/event-stream");
  if (!r.sse) {
    r.t_first_byte = WallSecondsAt(leg.t_header);
    r.ttfb_s = Seconds(leg.t_header - leg.t0);
  }
  leg.length = leg.parser->content_length();
  leg.chunked = !leg.length.has_value();
  leg.filter_usage = asks_stream_usage && r.sse && leg.opts.to_client;
  leg.client_chunked = leg.chunked || leg.filter_usage;
  leg.Passive(r.status < 500, leg.t_header);
  if (leg.opts.fail_on_5xx && r.status >= 500) {
    r.upstream_failed = true;
    r.error = absl::StrCat("backend answered HTTP ", r.status);
    leg.shared.metrics->upstream_errors->Inc({leg.spec.name, "5xx"});
    leg.leg_state->upstream = nullptr;
    leg.conn.reset();
    return false;
  }
  return true;
}

// The client's response header: the engine's forwarded fields, then
// kvroute's, then the framing.
std::string ClientHeader(const RelayLeg& leg) {
  const std::array<std::pair<std::string_view, std::string_view>, 3> extra = {{
      {kOwnFields[0], leg.decor.request_id},
      {kOwnFields[1], leg.decor.backend_label},
      {kOwnFields[2], leg.decor.request_class},
  }};
  return leg.parser->ClientHeader(absl::MakeConstSpan(extra.data(), leg.own_fields().size()),
                                  leg.client_chunked ? boost::none : leg.length);
}

// A small plain body: its header goes out with the body in one write (one
// syscall fewer per request).
bool HoldsClientHeader(const RelayLeg& leg) {
  return !leg.chunked && !leg.r.sse && *leg.length > 0 && *leg.length <= kRelayChunkBytes;
}

}  // namespace

absl::Duration FirstTokenTimeout(const UpstreamOptions& options, double predicted_ttft_s) {
  absl::Duration wait = options.first_token_timeout;
  if (predicted_ttft_s > 0) {
    wait = std::max(wait, absl::Seconds(options.first_token_timeout_factor * predicted_ttft_s));
  }
  return std::min(wait, std::max(options.first_token_timeout, options.first_token_timeout_max));
}

RelayLeg::RelayLeg(Session& s, int backend_slot, const Decor& leg_decor, bool wants_stream,
                   LegOptions options)
    : session(s),
      worker(s.worker()),
      shared(s.state()),
      config(s.config()),
      client(s.client()),
      pool(PoolFor(worker, shared, backend_slot)),
      spec(pool.backend(backend_slot)),
      backend(backend_slot),
      decor(leg_decor),
      client_wants_stream(wants_stream),
      opts(std::move(options)),
      write_timeout(ToChrono(config.limits.write_timeout)),
      t0(Clock::now()),
      first_token_wait(opts.first_token_timeout > absl::ZeroDuration()
                           ? opts.first_token_timeout
                           : config.upstream.first_token_timeout),
      header_is_first_token(!(opts.to_client && client_wants_stream)),
      header_wait(header_is_first_token ? first_token_wait : pool.options().first_byte_timeout),
      leg_state(opts.state ? opts.state : std::make_shared<LegState>()),
      up_buf(worker.read_buffers) {
  up_buf->reserve(kRelayChunkBytes);
}

void RelayLeg::Passive(bool ok, Clock::time_point at) {
  shared.health->OnRequest(backend, ok, WallAt(at));
}

void RelayLeg::TimedOutWaiting(Clock::time_point at) {
  if (shared.health->MakingProgress(backend, WallAt(at))) {
    shared.metrics->busy_timeouts->Inc({spec.name});
  } else {
    Passive(false, at);
  }
}

void RelayLeg::NoteAborted() {
  r.client_gone = leg_state->client_gone;
  r.error = leg_state->client_gone ? "client disconnected" : "cancelled";
  if (leg_state->client_gone) shared.metrics->client_disconnects->Inc({});
}

void RelayLeg::NoteClientWriteFailed() {
  r.client_gone = true;
  r.error = "client write failed";
  shared.metrics->client_disconnects->Inc({});
}

RelayResult RelayLeg::Finish() {
  leg_state->relay_done = true;
  leg_state->upstream = nullptr;
  return std::move(r);
}

net::awaitable<RelayResult> Relay(Session& s, int backend, ClientRequest& up, const Decor& decor,
                                  bool client_wants_stream, LegOptions opts) {
  RelayLeg leg(s, backend, decor, client_wants_stream, std::move(opts));
  const UpstreamRequestBytes request(up, leg);
  const std::array<net::const_buffer, 6> up_bytes = request.buffers();
  if (leg.opts.watch_client) WatchClient(leg.client.socket(), leg.leg_state);

  co_await SendAndAwaitHeader(leg, up_bytes);
  if (!TakeResponseHeader(leg, request.asks_stream_usage())) co_return leg.Finish();
  if (leg.opts.to_client) {
    std::string header = ClientHeader(leg);
    if (HoldsClientHeader(leg)) {
      leg.held_header = std::move(header);
    } else if (co_await EagerWrite(leg.client, net::buffer(header), leg.write_timeout)) {
      leg.NoteClientWriteFailed();
      co_return leg.Finish();
    }
    leg.r.headers_sent = true;
  }
  // An engine sends a stream's header as soon as it accepts the request: the
  // first token is the stream's first body byte. A plain body's header
  // comes with the whole answer.
  leg.first_token_seen = !leg.r.sse;
  if (leg.first_token_seen && leg.opts.on_first_byte) leg.opts.on_first_byte(leg.t_header);

  BodyRelay body(leg);
  co_await RelayBody(leg, body);
  co_await EndBody(leg, body);
  co_return leg.Finish();
}

}  // namespace kvroute::proxy
