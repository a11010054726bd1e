#include "proxy/relay.h"

#include "proxy/agent_apis.h"

#include <spdlog/spdlog.h>

#include <array>
#include <optional>

#include "absl/container/inlined_vector.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "proxy/absl_compat.h"
#include "proxy/buffer_stash.h"
#include "proxy/eager_io.h"
#include "proxy/engine_priority.h"
#include "proxy/relay_parser.h"
#include "proxy/session.h"
#include "proxy/shared_state.h"
#include "proxy/stream_usage.h"
#include "proxy/watchdog.h"
#include "proxy/worker.h"
#include "wire/sse.h"

namespace kvroute::proxy {

namespace {

// Upstream responses are relayed in pieces of up to kRelayChunkBytes.
constexpr size_t kRelayChunkBytes = 16 * 1024;

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

}  // namespace

absl::Duration FirstTokenTimeout(const UpstreamOptions& options, double predicted_ttft_s) {
  absl::Duration wait = options.first_token_timeout;
  if (predicted_ttft_s > 0) {
    wait = std::max(wait, absl::Seconds(options.first_token_timeout_factor * predicted_ttft_s));
  }
  return std::min(wait, std::max(options.first_token_timeout, options.first_token_timeout_max));
}

net::awaitable<RelayResult> Relay(Session& s, int backend, ClientRequest& up, const Decor& decor,
                                  bool client_wants_stream, LegOptions opts) {
  Worker& worker = s.worker();
  SharedState& state = s.state();
  const Config& cfg = s.config();
  beast::tcp_stream& client = s.client();
  RelayResult r;
  const auto write_timeout = ToChrono(cfg.limits.write_timeout);  // of each client write
  worker.Ensure(*state.router, backend);
  UpstreamPool& pool = worker.pool;
  const router::BackendSpec& spec = pool.backend(backend);
  const auto t0 = Clock::now();
  // A stream whose client did not ask for usage asks the engine for it:
  // the body goes as three pieces (the client's bytes around kvroute's).
  StreamUsagePlan usage_plan;
  // Only chat and completions have stream_options; the agent APIs send
  // their usage unasked.
  const bool openai_stream =
      decor.endpoint == Endpoint::kChat || decor.endpoint == Endpoint::kCompletions;
  if (opts.ask_stream_usage && opts.to_client && client_wants_stream && openai_stream) {
    usage_plan = PlanStreamUsage(up.body());
  }
  // An engine scheduling by priority gets the request's deadline as the
  // body's first member, ahead of any usage edit (which never starts
  // before the first member).
  std::optional<BodyInsert> priority;
  if (decor.engine_priority && spec.priority_scheduling && openai_stream) {
    priority = PlanPriority(up.body(), *decor.engine_priority);
  }
  const std::array<std::string_view, 3> usage_pieces = usage_plan.Pieces(up.body());
  std::array<std::string_view, 5> body{usage_pieces[0], {}, {}, usage_pieces[1], usage_pieces[2]};
  size_t body_size = usage_plan.BodySize(up.body());
  if (priority) {
    body[0] = usage_pieces[0].substr(0, priority->at);
    body[1] = priority->text;
    body[2] = usage_pieces[0].substr(priority->at);
    body_size += priority->text.size();
  }
  // The request's header bytes, written with its body: the client's
  // fields less the hop-by-hop and framing ones, kvroute's request id, this
  // backend's Host, the body's length (no edits to the field map).
  std::string up_header;
  up_header.reserve(256);
  AppendUpstreamHeader(up, decor.request_id, spec.host, spec.port, body_size, &up_header);
  const std::array<net::const_buffer, 6> up_bytes{
      net::buffer(up_header), net::buffer(body[0]), net::buffer(body[1]),
      net::buffer(body[2]),   net::buffer(body[3]), net::buffer(body[4])};

  std::shared_ptr<LegState> leg = opts.state ? opts.state : std::make_shared<LegState>();
  if (opts.watch_client) {
    WatchClient(client.socket(), leg);
  }
  auto finish = [&] {
    leg->relay_done = true;
    leg->upstream = nullptr;
  };
  auto note_aborted = [&] {
    r.client_gone = leg->client_gone;
    r.error = leg->client_gone ? "client disconnected" : "cancelled";
    if (leg->client_gone) state.metrics->client_disconnects->Inc({});
  };

  std::unique_ptr<Connection> conn;
  BufferStash<beast::flat_buffer>::Lease up_buf_lease(worker.read_buffers);
  beast::flat_buffer& up_buf = *up_buf_lease;
  // Beast reads at most the buffer's free capacity (512 B when empty):
  // reserved, a response comes in relay-sized pieces.
  up_buf.reserve(kRelayChunkBytes);
  // The engine's response: parsed without a field map, its forwarded
  // fields kept as wire lines (relay_parser.h).
  std::optional<RelayResponseParser> parser;
  static constexpr std::string_view kOwnFields[] = {"X-Request-Id", "X-Kvroute-Backend",
                                                    "X-Kvroute-Class"};
  const size_t own_count = decor.request_class.empty() ? 2 : 3;
  const absl::Span<const std::string_view> own_fields(kOwnFields, own_count);
  // Until the response header arrives the leg can be cut short by an
  // ejection of its backend (ApplyHealthChange, backend_monitor.h) and
  // retried elsewhere.
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
  std::optional<WaitingMark> waiting;
  waiting.emplace(&worker.waiting[backend], leg.get());
  auto passive = [&](bool ok, Clock::time_point at) {
    state.health->OnRequest(backend, ok, WallAt(at));
  };
  // A wait that timed out on an engine whose counters move is its queue's
  // length, not a fault of the instance: the request fails, the breaker is
  // not fed (a hung engine is ejected by its standing counters instead).
  auto timed_out_waiting = [&](Clock::time_point at) {
    if (state.health->MakingProgress(backend, WallAt(at))) {
      state.metrics->busy_timeouts->Inc({spec.name});
    } else {
      passive(false, at);
    }
  };
  // A stream's header comes as soon as the engine accepts the request; a
  // plain body's comes with the whole answer, after the engine's queue.
  const absl::Duration first_token_wait = opts.first_token_timeout > absl::ZeroDuration()
                                              ? opts.first_token_timeout
                                              : cfg.upstream.first_token_timeout;
  const bool header_is_first_token = !(opts.to_client && client_wants_stream);
  const absl::Duration header_wait =
      header_is_first_token ? first_token_wait : pool.options().first_byte_timeout;
  std::string held_header;  // a client header to send with the first body bytes
  for (int attempt = 0; attempt < 2 && !leg->aborted() && !leg->ejected; ++attempt) {
    beast::error_code ec;
    bool reused = false;
    if (attempt == 0) {
      conn = pool.TakeIdle(backend);  // no coroutine when a connection is idle
      reused = conn != nullptr;
      if (!conn) std::tie(ec, conn) = co_await pool.Connect(backend);
    } else {
      std::tie(ec, conn) = co_await pool.Connect(backend);
    }
    if (leg->aborted()) break;
    if (ec && !leg->ejected) {
      r.upstream_failed = true;
      r.timed_out = ec == beast::error::timeout;
      r.error = absl::StrCat("connect failed: ", ec.message());
      state.metrics->upstream_errors->Inc({spec.name, "connect"});
      passive(false, Clock::now());
      break;
    }
    if (leg->ejected) {
      conn.reset();
      break;
    }
    leg->upstream = conn.get();
    const WriteAttempt up_write = WriteNow(*conn, up_bytes);
    beast::error_code wec = up_write.ec;
    if (!up_write.done) {
      wec = co_await WriteRest(*conn, up_bytes, up_write.written,
                               ToChrono(pool.options().first_byte_timeout));
    }
    if (!wec) {
      parser.emplace(own_fields);
      parser->body_limit(boost::none);
      up_buf.clear();
      // Nothing can have arrived yet: wait first, then parse. A reused
      // connection written at once has not waited since t0.
      const auto sent = attempt == 0 && reused && up_write.done ? t0 : Clock::now();
      Watchdog::Scoped wait(s.watchdog(), sent + ToChrono(header_wait), &conn->socket());
      auto [hec, hn] = co_await EagerRead(
          conn->socket(), up_buf,
          [&](beast::error_code& e) {
            return http::read_header(conn->socket(), up_buf, *parser, e);
          },
          /*try_first=*/false);
      if (wait.expired()) hec = beast::error::timeout;
      if (!hec && !leg->aborted()) break;
      wec = hec ? hec : net::error::operation_aborted;
      if (reused && hn == 0 && hec != beast::error::timeout && !leg->aborted() && !leg->ejected) {
        state.metrics->retries->Inc({spec.name, "stale_connection"});
        parser.reset();
        leg->upstream = nullptr;
        conn.reset();
        continue;  // stale keep-alive connection: once more on a fresh one
      }
    } else if (reused && !leg->aborted() && !leg->ejected && wec != beast::error::timeout) {
      state.metrics->retries->Inc({spec.name, "stale_connection"});
      leg->upstream = nullptr;
      conn.reset();
      continue;
    }
    parser.reset();
    leg->upstream = nullptr;
    conn.reset();
    if (leg->aborted() || leg->ejected) break;
    r.upstream_failed = true;
    r.timed_out = wec == beast::error::timeout;
    r.error = r.timed_out ? "timed out waiting for the response" : wec.message();
    state.metrics->upstream_errors->Inc({spec.name, r.timed_out ? "timeout" : "read"});
    if (r.timed_out && header_is_first_token) {
      timed_out_waiting(Clock::now());
    } else {
      passive(false, Clock::now());
    }
    break;
  }
  waiting.reset();
  if (leg->aborted()) {
    note_aborted();
  } else if (leg->ejected && !parser) {
    r.upstream_failed = true;
    r.ejected = true;
    r.error = "backend was ejected while the request waited for its response";
    state.metrics->upstream_errors->Inc({spec.name, "ejected"});
  }
  if (!parser || r.upstream_failed || leg->aborted()) {
    finish();
    co_return r;
  }

  // Response header from the engine: relay it with kvroute's headers.
  r.status = parser->status();
  const auto t_header = Clock::now();
  r.sse = ContainsIgnoreCase(parser->content_type(), "text/event-stream");
  if (!r.sse) {
    r.t_first_byte = WallSecondsAt(t_header);
    r.ttfb_s = Seconds(t_header - t0);
  }
  const boost::optional<uint64_t> length = parser->content_length();
  const bool chunked = !length.has_value();
  // The usage chunk kvroute asked for comes out of the client's stream, so
  // the client's framing is chunked whatever the engine's.
  const bool filter_usage = usage_plan.edits_body() && r.sse && opts.to_client;
  const bool client_chunked = chunked || filter_usage;
  passive(r.status < 500, t_header);
  if (opts.fail_on_5xx && r.status >= 500) {
    r.upstream_failed = true;
    r.error = absl::StrCat("backend answered HTTP ", r.status);
    state.metrics->upstream_errors->Inc({spec.name, "5xx"});
    leg->upstream = nullptr;
    conn.reset();
    finish();
    co_return r;
  }
  if (opts.to_client) {
    // The engine's forwarded fields, then kvroute's, then the framing.
    const std::array<std::pair<std::string_view, std::string_view>, 3> extra = {{
        {kOwnFields[0], decor.request_id},
        {kOwnFields[1], decor.backend_label},
        {kOwnFields[2], decor.request_class},
    }};
    std::string header = parser->ClientHeader(absl::MakeConstSpan(extra.data(), own_count),
                                              client_chunked ? boost::none : length);
    beast::error_code hwec;
    if (!chunked && !r.sse && *length > 0 && *length <= kRelayChunkBytes) {
      // A small plain body: its header goes out with the body in one
      // write (one syscall fewer per request).
      held_header = std::move(header);
    } else {
      hwec = co_await EagerWrite(client, net::buffer(header), write_timeout);
    }
    if (hwec) {
      r.client_gone = true;
      r.error = "client write failed";
      state.metrics->client_disconnects->Inc({});
      finish();
      co_return r;
    }
    r.headers_sent = true;
  }
  // An engine sends a stream's header as soon as it accepts the request: the
  // first token is the stream's first body byte. A plain body's header
  // comes with the whole answer.
  bool first_token_seen = !r.sse;
  if (first_token_seen && opts.on_first_byte) opts.on_first_byte(t_header);

  ResponseObserver observer(r.sse, pool.options().max_observed_body,
                            pool.options().max_observed_body, /*keep_transfer_params=*/false,
                            DialectFor(decor.endpoint), &state.cached_tokens_rules[static_cast<size_t>(backend)]);
  // With filter_usage, the client's bytes pass through the filter, which
  // feeds the observer; the pieces of one read go out as one chunk.
  std::optional<StreamUsageFilter> usage_filter;
  absl::InlinedVector<net::const_buffer, 4> pieces;
  if (filter_usage) usage_filter.emplace(&observer, pool.options().max_observed_body);
  bool hook_fired = false;
  auto fire_hook = [&] {
    if (hook_fired) return;
    hook_fired = true;
    observer.Finish();
    // A stored response's backend is learned before the client can name it
    // in a follow-up.
    if (opts.to_client && r.status == 200 && !observer.response_id().empty()) {
      state.response_homes->Learn(observer.response_id(), spec.name);
    }
    if (opts.before_last_write) opts.before_last_write(r.status, observer.usage());
  };
  // The body's bytes land here: a stashed buffer, so the coroutine frame
  // stays small and no chunk is allocated per request.
  BufferStash<beast::flat_buffer>::Lease chunk_lease(worker.read_buffers);
  char* const chunk = static_cast<char*>(chunk_lease->prepare(kRelayChunkBytes).data());
  bool upstream_ok = true;
  for (bool first = true; !parser->is_done(); first = false) {
    parser->set_body_buffer(chunk, kRelayChunkBytes);
    // The first read follows the header (and its write, which does not
    // wait while the client reads): its deadline counts from there. Until
    // the first token it is the first-token wait, then the idle timer.
    const auto now = first ? t_header : Clock::now();
    const absl::Duration limit = first_token_seen ? pool.options().idle_timeout : first_token_wait;
    Watchdog::Scoped wait(s.watchdog(), now + ToChrono(limit), &conn->socket());
    auto read_some = [&](beast::error_code& e) {
      return http::read_some(conn->socket(), up_buf, *parser, e);
    };
    auto [rec, rn] = ReadNow(conn->socket(), read_some);
    if (rec == net::error::would_block) {
      std::tie(rec, rn) = co_await EagerRead(conn->socket(), up_buf, read_some, false);
    }
    if (wait.expired()) rec = beast::error::timeout;
    const size_t n = kRelayChunkBytes - parser->body_left();
    if ((rec && rec != http::error::need_buffer) || leg->aborted()) {
      upstream_ok = false;
      if (leg->aborted()) {
        note_aborted();
      } else {
        r.timed_out = rec == beast::error::timeout;
        r.error = r.timed_out && !first_token_seen
                      ? std::string("timed out waiting for the first token")
                      : absl::StrCat("upstream broke mid-response: ", rec.message());
        state.metrics->stream_errors->Inc({spec.name});
        if (r.timed_out) {
          timed_out_waiting(Clock::now());
        } else {
          passive(false, Clock::now());
        }
      }
      break;
    }
    if (n == 0) continue;
    if (!first_token_seen) {
      first_token_seen = true;
      const auto t_first = Clock::now();
      r.t_first_byte = WallSecondsAt(t_first);
      r.ttfb_s = Seconds(t_first - t0);
      if (opts.on_first_byte) opts.on_first_byte(t_first);
    }
    if (usage_filter) {
      pieces.clear();
      for (std::string_view p : usage_filter->Feed(std::string_view(chunk, n))) {
        pieces.push_back(net::buffer(p.data(), p.size()));
      }
      if (parser->is_done()) {
        for (std::string_view p : usage_filter->Finish()) {
          pieces.push_back(net::buffer(p.data(), p.size()));
        }
      }
    } else {
      observer.Feed(std::string_view(chunk, n));
    }
    if (parser->is_done()) fire_hook();
    if (!opts.to_client) {
      if (opts.capture != nullptr && opts.capture->size() + n <= opts.max_capture) {
        opts.capture->append(chunk, n);
      }
      continue;
    }
    beast::error_code wec;
    if (usage_filter) {
      if (net::buffer_size(pieces) == 0) continue;  // all taken out: no empty chunk
      const auto piece = http::make_chunk(pieces);
      const WriteAttempt w = WriteNow(client, piece);
      wec = w.ec;
      if (!w.done) wec = co_await WriteRest(client, piece, w.written, write_timeout);
    } else if (chunked) {
      const auto piece = http::make_chunk(net::buffer(chunk, n));
      const WriteAttempt w = WriteNow(client, piece);
      wec = w.ec;
      if (!w.done) wec = co_await WriteRest(client, piece, w.written, write_timeout);
    } else {
      // The held header, if any (else an empty buffer), goes with the body.
      const std::array<net::const_buffer, 2> both{net::buffer(held_header), net::buffer(chunk, n)};
      const WriteAttempt w = WriteNow(client, both);
      wec = w.ec;
      if (!w.done) wec = co_await WriteRest(client, both, w.written, write_timeout);
      held_header.clear();
    }
    if (wec) {
      upstream_ok = false;
      r.client_gone = true;
      r.error = "client write failed";
      state.metrics->client_disconnects->Inc({});
      break;
    }
  }
  if (!held_header.empty() && !r.client_gone) {
    // No body bytes came: the client gets the header, as it would have.
    co_await EagerWrite(client, net::buffer(held_header), write_timeout);
  }
  observer.Finish();
  r.usage = observer.usage();
  r.events = observer.events();
  if (upstream_ok) {
    r.completed = true;
    fire_hook();
    if (client_chunked && opts.to_client) {
      if (co_await EagerWrite(client, http::make_chunk_last(), write_timeout)) {
        r.completed = false;
      }
    }
    const bool reusable = parser->keep_alive();
    leg->upstream = nullptr;
    pool.Release(backend, std::move(conn), reusable);
  } else {
    leg->upstream = nullptr;
    conn.reset();  // closing the connection cancels the engine's request
    if (usage_filter && !r.client_gone) {
      // The bytes the filter still holds (an unfinished event) were the
      // client's before the stream broke.
      const auto& rest = usage_filter->Finish();
      if (!rest.empty()) {
        co_await EagerWrite(client, http::make_chunk(net::buffer(rest.front())), write_timeout);
      }
    }
    if (opts.to_client && !r.client_gone && client_chunked && r.sse && client_wants_stream) {
      // Tell the client the stream ended abnormally instead of truncating.
      const std::string event = MidStreamErrorEvent(decor.endpoint, r.error);
      co_await EagerWrite(client, http::make_chunk(net::buffer(event)), write_timeout);
      co_await EagerWrite(client, http::make_chunk_last(), write_timeout);
    }
  }
  finish();
  co_return r;
}

}  // namespace kvroute::proxy
