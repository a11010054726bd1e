#include "proxy/server.h"

#include <spdlog/spdlog.h>

#include <boost/json.hpp>
#include <deque>
#include <future>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proxy/absl_compat.h"
#include "proxy/admin_auth.h"
#include "proxy/admission.h"
#include "proxy/health.h"
#include "proxy/buffer_stash.h"
#include "proxy/client_request.h"
#include "proxy/eager_io.h"
#include "proxy/features.h"
#include "proxy/relay_parser.h"
#include "proxy/request_framing.h"
#include "proxy/response_observer.h"
#include "proxy/watchdog.h"
#include "router/prefix_hash.h"
#include "transfer/connector.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"

namespace kvroute::proxy {

namespace {
struct LegState;  // one upstream leg's shared state, defined below
}  // namespace

struct Server::Worker {
  Worker(std::vector<router::BackendSpec> backends, const UpstreamOptions& options)
      : ioc(1),
        guard(net::make_work_guard(ioc)),
        waiting(backends.size()),
        pool(ioc, std::move(backends), options) {}
  // Spare read and relay buffers (each up to the client read size, 64 KiB)
  // and request body strings (each up to 1 MiB) of this worker's sessions,
  // at most 2 and 4 MiB in all. Declared first: coroutine frames destroyed
  // with `ioc` still give buffers back.
  BufferStash<beast::flat_buffer> read_buffers{128, 64 * 1024, 2 << 20};
  BufferStash<std::string> bodies{64, 1 << 20, 4 << 20};
  net::io_context ioc;
  net::executor_work_guard<net::io_context::executor_type> guard;
  // Legs of this worker waiting for a response header, per backend: when the
  // backend is ejected they are cut short and retried elsewhere. Touched
  // only on this worker's thread; a deque, so growing keeps references.
  std::deque<absl::flat_hash_set<LegState*>> waiting;
  UpstreamPool pool;

  // Follows the router's backend slots after a reload (worker thread only).
  void Sync(const std::vector<router::BackendSpec>& backends) {
    pool.SetBackends(backends);
    if (waiting.size() < backends.size()) waiting.resize(backends.size());
  }
  // Makes sure slot `backend`, which the router may have added since, is known.
  void Ensure(router::Router& router, int backend) {
    if (backend >= 0 && static_cast<size_t>(backend) >= pool.size()) Sync(*router.Backends());
  }
};

// Shared by all sessions of a server. Counters are atomics; the monitor's
// per-backend streaks are touched only on worker 0.
struct Server::State {
  const Config* config = nullptr;
  router::Router* router = nullptr;
  ProxyMetrics* metrics = nullptr;
  RequestLog* request_log = nullptr;
  metrics::Registry* registry = nullptr;
  std::atomic<int64_t> connections{0};
  std::atomic<int64_t> inflight{0};
  std::atomic<bool> draining{false};
  std::unique_ptr<HealthTracker> health;
  std::unique_ptr<Admission> admission;
  std::vector<std::chrono::steady_clock::time_point> last_scrape;  // monitor (worker 0) only
  // Handoffs.
  std::unique_ptr<transfer::Connector> connector;
  // Bootstrap port of each configured backend by name (replaced on reload).
  absl::Mutex bootstrap_mu;
  absl::flat_hash_map<std::string, uint16_t> bootstrap_ports ABSL_GUARDED_BY(bootstrap_mu);
  uint16_t default_bootstrap_port = 0;
  uint16_t BootstrapPort(const std::string& backend) {
    absl::MutexLock lock(&bootstrap_mu);
    auto it = bootstrap_ports.find(backend);
    return it == bootstrap_ports.end() ? default_bootstrap_port : it->second;
  }
  void SetBootstrapPorts(const std::vector<BackendConfig>& backends, uint16_t fallback) {
    absl::MutexLock lock(&bootstrap_mu);
    default_bootstrap_port = fallback;
    bootstrap_ports.clear();
    for (const BackendConfig& b : backends) {
      bootstrap_ports[b.name] = b.bootstrap_port != 0 ? b.bootstrap_port : fallback;
    }
  }
  std::atomic<int64_t> offload_inflight{0};
  absl::Mutex engine_ids_mu;
  absl::flat_hash_map<int, std::string> engine_ids ABSL_GUARDED_BY(engine_ids_mu);
};

namespace {

using Clock = std::chrono::steady_clock;

// Read sizes: upstream responses are relayed in pieces of up to
// kRelayChunkBytes; a client's large body is read kMaxClientReadBytes at a
// time; a request's first read takes up to kFirstReadBytes (a 1k-token
// request in one recv). The client buffer is released once a request is
// served, so idle keep-alive connections hold none.
constexpr size_t kRelayChunkBytes = 16 * 1024;
constexpr uint64_t kMaxClientReadBytes = 64 * 1024;
constexpr size_t kFirstReadBytes = 16 * 1024;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double Since(Clock::time_point t0) { return Seconds(Clock::now() - t0); }

// The wall-clock time of a steady-clock reading: the reading plus the
// offset between the two clocks, read afresh once a second on each thread.
// A request's timestamps then cost one clock read each, not two (the
// request path read a clock 18 times a request before), and differences of
// the wall times are differences of the steady readings.
absl::Time WallAt(Clock::time_point t) {
  thread_local Clock::time_point anchor_steady{};
  thread_local absl::Time anchor_wall = absl::InfinitePast();
  if (anchor_wall == absl::InfinitePast() || t - anchor_steady > std::chrono::seconds(1)) {
    anchor_wall = absl::Now();
    anchor_steady = Clock::now();
  }
  return anchor_wall + absl::FromChrono(t - anchor_steady);
}

// Seconds since the epoch, to the microsecond, as the request log has them.
double WallSecondsAt(Clock::time_point t) {
  return static_cast<double>(absl::ToUnixMicros(WallAt(t))) / 1e6;
}

// "kvr-" and 32 random hex digits (two zero-padded 64-bit numbers).
std::string NewRequestId() {
  thread_local absl::BitGen gen;
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string id(4 + 32, '0');
  id.replace(0, 4, "kvr-");
  for (int half = 0; half < 2; ++half) {
    uint64_t v = absl::Uniform<uint64_t>(gen);
    for (int i = 15; i >= 0; --i, v >>= 4) id[4 + 16 * half + i] = kDigits[v & 0xF];
  }
  return id;
}

bool IsLoopback(const tcp::endpoint& ep) { return ep.address().is_loopback(); }

// What a connection closed after an error answer reads and discards before
// closing (see Session::DrainBeforeClose).
constexpr size_t kLingerBytes = 1 << 20;
constexpr auto kLingerTime = std::chrono::seconds(2);

bool ContainsIgnoreCase(std::string_view haystack, std::string_view needle) {
  return absl::AsciiStrToLower(ToAbsl(haystack)).find(needle) != std::string::npos;
}

using Headers = std::vector<std::pair<std::string, std::string>>;

struct RouteSpec {
  std::string_view path;
  http::verb verb;
};
constexpr RouteSpec kRoutes[] = {
    {"/v1/completions", http::verb::post}, {"/v1/chat/completions", http::verb::post},
    {"/v1/models", http::verb::get},       {"/health", http::verb::get},
    {"/metrics", http::verb::get},         {"/admin/backends", http::verb::get},
};

// Extra response headers kvroute adds to a relayed response. The id and the
// class are views of the request's record (HandleCompletion's, which
// outlives every leg, a concurrent prefill leg included: ServeOffload joins
// it), so the copies of a Decor per leg copy no strings but the label.
struct Decor {
  std::string_view request_id;
  std::string backend_label;       // "gpu3" or "gpu1->gpu3"
  std::string_view request_class;  // empty: not a routed request
};

struct RelayResult {
  bool headers_sent = false;   // the client has a response header
  bool completed = false;      // the whole upstream response reached the client
  bool client_gone = false;
  bool upstream_failed = false;  // failed before any response header: 502/504
  bool timed_out = false;
  bool ejected = false;  // cut short because its backend was ejected
  int status = 0;
  std::string error;
  Usage usage;
  bool sse = false;
  double t_first_byte = -1;   // wall seconds
  double ttfb_s = -1;         // steady seconds since relay start
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
// A plain handler, not a coroutine, and not cancelled when the leg ends
// (a cancellation is one more trip through the scheduler per request): it
// completes, doing nothing, when the client sends its next request or
// closes, or when the connection closes.
void WatchClient(tcp::socket& sock, std::shared_ptr<LegState> st) {
  sock.async_wait(tcp::socket::wait_read, [&sock, st = std::move(st)](beast::error_code ec) mutable {
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

// Called with the time a leg's response header came (the router's first
// token).
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
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Server::Worker& worker, Server::State& state, tcp::socket sock)
      : worker_(worker), state_(state), cfg_(*state.config), stream_(std::move(sock)) {
    beast::error_code ec;
    remote_ = stream_.socket().remote_endpoint(ec);
  }

  net::awaitable<void> Run() {
    auto self = shared_from_this();
    bool linger = false;  // an error answer went out: drain before closing
    for (;;) {
      ClientRequestParser parser(request_);  // empties request_
      parser.header_limit(static_cast<std::uint32_t>(cfg_.limits.max_header_bytes));
      parser.body_limit(cfg_.limits.max_body_bytes);
      if (buffer_.size() == 0) {
        // Keep-alive: wait until the next request's first bytes arrive (or
        // the client closes) with no buffer at all (an idle connection holds
        // no read buffer), then read them. The idle timeout is kept by the
        // session's watchdog (no timer armed and cancelled per wait). Waited
        // here, not in a coroutine of its own: a frame and a resumption fewer.
        Watchdog::Scoped wait(*watchdog_, Clock::now() + ToChrono(cfg_.limits.idle_timeout),
                              &stream_.socket());
        auto [wec] = co_await stream_.socket().async_wait(tcp::socket::wait_read, kUseTuple);
        if (wec || wait.expired()) break;
        buffer_ = worker_.read_buffers.Take();
        buffer_.reserve(kFirstReadBytes);  // the first read takes up to this much
      }
      request_.body() = worker_.bodies.Take();  // its capacity is kept
      // Each read is tried at once, and only a read that would block enters
      // a coroutine (eager_io.h: ReadNow).
      auto read_header = [&](beast::error_code& e) {
        return http::read_header(stream_.socket(), buffer_, parser, e);
      };
      auto [hec, hn] = ReadNow(stream_, read_header);
      if (hec == net::error::would_block) {
        std::tie(hec, hn) = co_await EagerRead(stream_, buffer_, read_header, /*try_first=*/false,
                                               ToChrono(cfg_.limits.header_timeout));
      }
      if (hec) {
        linger = co_await ReadFailed(hec);
        break;
      }
      // Refused before any body byte is read, and the connection closes:
      // nothing after an ambiguously framed body can be taken for a request.
      if (absl::Status framing = CheckRequestFraming(request_); !framing.ok()) {
        co_await SendError(400, std::string(framing.message()), false);
        linger = true;
        break;
      }
      if (absl::EqualsIgnoreCase(ToAbsl(request_.expect()), "100-continue")) {
        http::response<http::empty_body> cont{http::status::continue_, 11};
        http::response_serializer<http::empty_body> csr{cont};
        if (co_await EagerWriteMessage(stream_, csr, ToChrono(cfg_.limits.write_timeout))) break;
      }
      // Large bodies: read in kMaxClientReadBytes pieces, not 4 KB ones
      // (beast reads at most the buffer's free capacity).
      if (const auto len = parser.content_length(); len && *len > buffer_.capacity()) {
        buffer_.reserve(static_cast<size_t>(std::min<uint64_t>(*len, kMaxClientReadBytes)));
      }
      auto read_body = [&](beast::error_code& e) {
        return http::read(stream_.socket(), buffer_, parser, e);
      };
      auto [bec, bn] = ReadNow(stream_, read_body);
      if (bec == net::error::would_block) {
        std::tie(bec, bn) = co_await EagerRead(stream_, buffer_, read_body, /*try_first=*/false,
                                               ToChrono(cfg_.limits.request_timeout));
      }
      if (bec) {
        linger = co_await ReadFailed(bec);
        break;
      }
      const bool keep_alive = co_await Dispatch(request_);
      worker_.bodies.Give(std::move(request_.body()));
      request_.Trim();
      // Idle: the read buffer goes back to the worker; the connection holds none.
      if (buffer_.size() == 0) worker_.read_buffers.Give(std::move(buffer_));
      if (!keep_alive || state_.draining.load()) break;
    }
    worker_.read_buffers.Give(std::move(buffer_));
    watchdog_->Stop();  // releases its timer's handler
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (linger) co_await DrainBeforeClose();
    stream_.close();
    state_.connections.fetch_sub(1);
    state_.metrics->connections->Add({}, -1);
  }

 private:
  // Answers a request that could not be read; returns whether it answered.
  net::awaitable<bool> ReadFailed(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      co_await SendError(413, absl::StrCat("request body exceeds ", cfg_.limits.max_body_bytes,
                                           " bytes"),
                         false);
    } else if (ec == http::error::header_limit) {
      co_await SendError(431, "request header fields too large", false);
    } else if (ec != http::error::end_of_stream && ec != beast::error::timeout &&
               ec != net::error::eof && ec != net::error::connection_reset &&
               ec != net::error::operation_aborted) {
      co_await SendError(400, absl::StrCat("malformed HTTP request: ", ec.message()), false);
    } else {
      co_return false;
    }
    co_return true;
  }

  // After an error answer to a request that was not read to its end, the
  // client may still be sending. Closing a socket with unread bytes makes the
  // kernel reset the connection, and the reset can destroy the answer before
  // the client reads it; so, with our side already shut down, read and
  // discard a bounded amount for a bounded time first (nginx's
  // lingering_close).
  net::awaitable<void> DrainBeforeClose() {
    stream_.expires_after(std::min<Clock::duration>(kLingerTime,
                                                    ToChrono(cfg_.limits.header_timeout)));
    char sink[4096];
    for (size_t drained = 0; drained < kLingerBytes;) {
      auto [ec, n] = co_await stream_.async_read_some(net::buffer(sink), kUseTuple);
      if (ec) break;
      drained += n;
    }
  }

  // Routes one request; returns whether the connection may be kept alive.
  // A completion request (the hot path) goes to HandleCompletion without a
  // coroutine frame of its own here; everything else, a query string
  // included, through DispatchOther.
  net::awaitable<bool> Dispatch(ClientRequest& req) {
    if (req.method() == http::verb::post) {
      const std::string_view target = req.target();
      if (target == "/v1/completions") {
        return HandleCompletion(req, Endpoint::kCompletions, "/v1/completions");
      }
      if (target == "/v1/chat/completions") {
        return HandleCompletion(req, Endpoint::kChat, "/v1/chat/completions");
      }
    }
    return DispatchOther(req);
  }

  net::awaitable<bool> DispatchOther(ClientRequest& req) {
    std::string_view target = req.target();
    if (size_t q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
    const bool keep_alive = req.keep_alive();
    const http::verb m = req.method();
    if (target == "/admin" || absl::StartsWith(ToAbsl(target), "/admin/")) {
      switch (CheckAdminAccess(cfg_.admin, IsLoopback(remote_), req.authorization())) {
        case AdminAccess::kAllowed:
          break;
        case AdminAccess::kUnauthorized: {
          Headers challenge;
          challenge.emplace_back("WWW-Authenticate", "Bearer realm=\"kvroute-admin\"");
          co_return co_await SendError(
              401, "admin endpoints need Authorization: Bearer <admin.token>", keep_alive,
              std::move(challenge));
        }
        case AdminAccess::kForbidden:
          co_return co_await SendError(403,
                                       cfg_.admin.allow_loopback
                                           ? "admin endpoints answer only on loopback"
                                           : "admin endpoints are closed: no admin.token is set",
                                       keep_alive);
      }
    }
    for (const RouteSpec& r : kRoutes) {
      if (target != r.path) continue;
      if (m != r.verb && !(r.verb == http::verb::get && m == http::verb::head)) {
        Headers allow;
        allow.emplace_back("Allow", std::string(http::to_string(r.verb)));
        std::string msg = absl::StrCat("method ", ToAbsl(req.method_string()),
                                       " is not allowed on ", ToAbsl(target));
        co_return co_await SendError(405, msg, keep_alive, std::move(allow));
      }
      if (target == "/v1/completions") {
        co_return co_await HandleCompletion(req, Endpoint::kCompletions, "/v1/completions");
      }
      if (target == "/v1/chat/completions") {
        co_return co_await HandleCompletion(req, Endpoint::kChat, "/v1/chat/completions");
      }
      if (target == "/v1/models") co_return co_await HandleModels(req);
      if (target == "/health") co_return co_await HandleHealth(keep_alive);
      if (target == "/metrics") {
        co_return co_await SendBody(200, "text/plain; version=0.0.4; charset=utf-8",
                                    state_.registry->Render(), keep_alive);
      }
      if (target == "/admin/backends") co_return co_await HandleAdminBackends(req);
    }
    co_return co_await SendError(404, absl::StrCat("no route for ", ToAbsl(target)), keep_alive);
  }

  net::awaitable<bool> SendBody(int status, std::string_view content_type, std::string body,
                                bool keep_alive,
                                Headers extra = {}) {
    http::response<http::string_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::server, "kvroute");
    res.set(http::field::content_type, content_type);
    for (auto& [k, v] : extra) res.set(k, v);
    res.keep_alive(keep_alive && !state_.draining.load());
    res.body() = std::move(body);
    res.prepare_payload();
    http::response_serializer<http::string_body> sr{res};
    const beast::error_code ec =
        co_await EagerWriteMessage(stream_, sr, ToChrono(cfg_.limits.write_timeout));
    co_return !ec && res.keep_alive();
  }

  net::awaitable<bool> SendError(int status, std::string_view message, bool keep_alive,
                                 Headers extra = {}) {
    co_return co_await SendBody(status, "application/json", OpenAiErrorBody(status, message),
                                keep_alive, std::move(extra));
  }

  std::string RetryAfterValue() const {
    return std::to_string(std::max<int64_t>(
        1, absl::ToInt64Seconds(absl::Ceil(cfg_.limits.retry_after, absl::Seconds(1)))));
  }

  net::awaitable<bool> HandleHealth(bool keep_alive) {
    int healthy = 0;
    for (const auto& b : state_.router->Report()) healthy += b.healthy ? 1 : 0;
    boost::json::object o;
    o["status"] = healthy > 0 ? "ok" : "no healthy backend";
    o["healthy_backends"] = healthy;
    int configured = 0;
    for (const auto& b : *state_.router->Backends()) configured += b.retired ? 0 : 1;
    o["backends"] = configured;
    co_return co_await SendBody(healthy > 0 ? 200 : 503, "application/json",
                                boost::json::serialize(o), keep_alive);
  }

  // Dispatch() has checked the caller (proxy/admin_auth.h).
  net::awaitable<bool> HandleAdminBackends(const ClientRequest& req) {
    boost::json::array arr;
    for (const router::BackendReport& b : state_.router->Report()) {
      boost::json::object o;
      o["name"] = b.name;
      o["role"] = router::ToString(b.role);
      o["retired"] = b.retired;
      o["healthy"] = b.healthy;
      o["inflight_requests"] = b.inflight_requests;
      o["inflight_prefill_tokens"] = b.inflight_prefill_tokens;
      o["decoding_requests"] = b.decoding_requests;
      o["inflight_tokens"] = b.inflight_tokens;
      o["shadow_tokens"] = b.shadow_tokens;
      o["capacity_tokens"] = b.capacity_tokens;
      o["kv_usage"] = b.kv_usage < 0 ? boost::json::value(nullptr) : boost::json::value(b.kv_usage);
      o["engine_running"] = b.engine_running;
      o["engine_waiting"] = b.engine_waiting;
      o["effective_capacity_tokens"] = b.effective_capacity_tokens;
      o["shadow_corrections"] = b.shadow_corrections;
      o["estimated_cached_tokens_total"] = b.est_tokens_sum;
      o["actual_cached_tokens_total"] = b.actual_cached_tokens_sum;
      o["last_estimate_error_tokens"] = b.last_est_error_tokens;
      o["estimates"] = b.est_requests;
      o["mean_abs_estimate_error_tokens"] =
          b.est_requests > 0 ? b.est_abs_error_tokens_sum / static_cast<double>(b.est_requests)
                             : 0.0;
      arr.push_back(std::move(o));
    }
    boost::json::object root;
    root["mode"] = cfg_.mode;
    root["backends"] = std::move(arr);
    co_return co_await SendBody(200, "application/json", boost::json::serialize(root),
                                req.keep_alive());
  }

  int FirstHealthyBackend() const {
    const auto report = state_.router->Report();
    for (size_t i = 0; i < report.size(); ++i) {
      if (report[i].healthy) return static_cast<int>(i);
    }
    return -1;
  }

  net::awaitable<bool> HandleModels(const ClientRequest& req) {
    const int backend = FirstHealthyBackend();
    if (backend < 0) co_return co_await SendError(503, "no healthy backend", req.keep_alive());
    worker_.Ensure(*state_.router, backend);
    http::request<http::string_body> up{http::verb::get, "/v1/models", 11};
    BufferedResponse r = co_await FetchBuffered(worker_.pool, backend, std::move(up),
                                                cfg_.upstream.idle_timeout, 4 << 20);
    if (r.ec) {
      co_return co_await SendError(r.timed_out ? 504 : 502,
                                   absl::StrCat("backend ", worker_.pool.backend(backend).name,
                                                ": ", r.ec.message()),
                                   req.keep_alive());
    }
    Headers extra;
    extra.emplace_back("X-Kvroute-Backend", worker_.pool.backend(backend).name);
    std::string content_type = r.content_type.empty() ? std::string("application/json")
                                                      : r.content_type;
    co_return co_await SendBody(r.status, content_type, std::move(r.body), req.keep_alive(),
                                std::move(extra));
  }

  // Serves a completion request: features, route, relay (retried elsewhere
  // while nothing has reached the client), then its record and metrics.
  net::awaitable<bool> HandleCompletion(ClientRequest& req, Endpoint endpoint,
                                        std::string_view route) {
    const auto t0 = Clock::now();
    RequestRecord rec;
    rec.t_arrival = WallSecondsAt(t0);
    rec.route = std::string(route);
    rec.mode = cfg_.mode;
    std::string_view rid_header = req.request_id();
    rec.id = rid_header.empty() || rid_header.size() > 256 ? NewRequestId()
                                                           : std::string(rid_header);
    state_.inflight.fetch_add(1);
    state_.metrics->inflight->Add({}, 1);
    // Whichever way the request ends (after its answer is written): the
    // record's end, the metrics, the log line. One coroutine for the whole
    // request, not a wrapper around another (each is a frame and a resumption).
    absl::Cleanup finish = [&] {
      const auto t_done = Clock::now();
      rec.t_done = WallSecondsAt(t_done);
      const std::string status = std::to_string(rec.status);
      const std::string cls = rec.request_class.empty() ? "none" : rec.request_class;
      state_.metrics->requests->Inc({route, cfg_.mode, cls, status});
      state_.metrics->duration->Observe({route, cls}, Seconds(t_done - t0));
      state_.request_log->Write(rec);
      // Last: a drain waits for this, so the log and metrics are complete.
      state_.inflight.fetch_sub(1);
      state_.metrics->inflight->Add({}, -1);
    };
    const bool keep_alive = req.keep_alive();
    auto reject = [&](int status, std::string msg,
                      bool retry_after = false) -> net::awaitable<bool> {
      rec.status = status;
      rec.error = msg;
      Headers extra;
      extra.emplace_back("X-Request-Id", rec.id);
      if (retry_after) extra.emplace_back("Retry-After", RetryAfterValue());
      co_return co_await SendError(status, msg, keep_alive, std::move(extra));
    };
    if (state_.draining.load()) {
      co_return co_await reject(503, "kvroute is shutting down", /*retry_after=*/true);
    }
    if (!state_.admission->TryAcquire() &&
        !co_await state_.admission->Acquire(cfg_.limits.queue_timeout)) {
      state_.metrics->admission_rejections->Inc({});
      co_return co_await reject(
          429,
          absl::StrCat("kvroute is at its limit of ", cfg_.limits.max_inflight_requests,
                       " requests in flight; retry later"),
          /*retry_after=*/true);
    }
    struct SlotGuard {
      Admission* admission;
      ~SlotGuard() { admission->Release(); }
    } slot{state_.admission.get()};
    // Like vLLM's server, the body is read as JSON whatever Content-Type
    // says (curl -d sends form encoding); a non-JSON body is a 400 below.
    absl::StatusOr<router::RequestFeatures> features =
        ExtractFeatures(endpoint, req.body(), req.session_id());
    if (!features.ok()) co_return co_await reject(400, std::string(features.status().message()));
    features->request_id = rec.id;
    if (cfg_.request_log_prompts) rec.prompt = features->prompt_bytes;
    rec.session = features->session_id;
    rec.stream = features->stream;
    const router::Options& ropts = state_.router->options();
    features->chunk_hashes = router::HashPromptChunks(features->prompt_bytes, ropts.chunk_bytes);

    // The upstream request is the client's: Relay writes its header from
    // the client's fields (AppendUpstreamHeader: hop-by-hop and framing
    // fields out, kvroute's request id, Host and Content-Length in).
    ClientRequest& tmpl = req;
    std::string body = std::move(req.body());
    // Back into the request at the end, for the worker's stash (Run).
    absl::Cleanup body_back = [&body, &req] { req.body() = std::move(body); };
    const int max_attempts = std::max(1, cfg_.upstream.max_attempts);

    // Route, serve, and while nothing has reached the client and the
    // failure was the instance's (connect error, timeout, 5xx), route again
    // avoiding the instances that failed, after a jittered backoff.
    LegResult leg;
    router::Decision d;
    Decor decor;
    int attempts = 0;
    std::string retry_reason;  // why this attempt is a retry; empty on the first
    for (int attempt = 1;; ++attempt) {
      const auto td0 = Clock::now();
      absl::StatusOr<router::RouteTicket> ticket = state_.router->Route(*features, WallAt(td0));
      const auto td1 = Clock::now();
      state_.metrics->decision_time->Observe({}, Seconds(td1 - td0));
      if (!ticket.ok()) {
        if (attempt > 1) break;  // nowhere else to go: answer with the last failure
        // ResourceExhausted: too many requests in flight (429, retry soon);
        // Unavailable: no healthy backend (503).
        const bool busy = ticket.status().code() == absl::StatusCode::kResourceExhausted;
        co_return co_await reject(busy ? 429 : 503, std::string(ticket.status().message()),
                                  /*retry_after=*/true);
      }
      if (attempt == 1) rec.t_routed = WallSecondsAt(td1);
      const auto fleet = state_.router->Backends();  // includes the decision's slots
      const auto& backends = *fleet;
      d = ticket->decision;
      if (!retry_reason.empty()) {
        state_.metrics->retries->Inc({backends[d.decode_backend].name, retry_reason});
      }
      rec.request_class = std::string(router::ToString(d.request_class));
      rec.prompt_tokens_est = d.prompt_tokens_est;
      rec.cached_tokens_est = d.cached_tokens_est;
      rec.new_tokens_est = d.new_tokens_est;
      state_.metrics->decisions->Inc(
          {cfg_.mode, rec.request_class, std::string(router::ToString(d.mode))});
      if (d.affinity_hit) state_.metrics->affinity->Inc({"hit"});
      if (d.affinity_broken) state_.metrics->affinity->Inc({"broken"});
      const bool offload = d.mode == router::DecisionMode::kOffload && d.prefill_backend >= 0 &&
                           d.prefill_backend != d.decode_backend;
      rec.decode_backend = backends[d.decode_backend].name;
      rec.prefill_backend = backends[offload ? d.prefill_backend : d.decode_backend].name;
      decor = Decor{rec.id, backends[d.decode_backend].name, rec.request_class};

      const router::RouteTicket& tk = *ticket;
      auto on_first_byte = [this, &tk](Clock::time_point at) {
        state_.router->OnFirstToken(tk, WallAt(at));
      };
      bool reported = false;
      auto report = [&](int served_by, bool transferred, bool ok, const Usage& u) {
        if (reported) return;
        reported = true;
        router::Outcome o;
        o.served_by = served_by;
        o.ok = ok;
        o.prompt_tokens = u.prompt_tokens;
        o.cached_tokens = u.cached_tokens;
        o.completion_tokens = u.completion_tokens;
        o.kv_transferred = transferred;
        state_.router->OnComplete(tk, o, WallAt(Clock::now()));
      };
      complete_hook_ = [&](int served_by, bool transferred, int status, const Usage& u) {
        report(served_by, transferred, status >= 200 && status < 300, u);
      };
      if (offload) {
        leg = co_await ServeOffload(tmpl, body, d.prefill_backend, d.decode_backend, decor,
                                    rec.stream, on_first_byte, rec);
      } else {
        leg = LegResult{};
        LegOptions opts =
            BeginColocated(tmpl, body, d.decode_backend, decor, on_first_byte, false, leg);
        leg.r = co_await Relay(d.decode_backend, tmpl, decor, rec.stream, std::move(opts));
        EndColocated(tmpl, body, leg);
      }
      complete_hook_ = nullptr;
      // Normally reported by the relay before the response's last bytes;
      // here for responses that never completed.
      report(leg.served_by, leg.kv_transferred,
             leg.r.completed && leg.r.status >= 200 && leg.r.status < 300, leg.r.usage);
      attempts += leg.attempts;

      const RelayResult& r = leg.r;
      const bool retryable = !r.headers_sent && !r.client_gone && r.upstream_failed;
      if (!retryable || attempt >= max_attempts || state_.draining.load()) break;
      features->avoid_backends.push_back(d.decode_backend);
      if (offload) features->avoid_backends.push_back(d.prefill_backend);
      retry_reason = RetryReason(r);
      spdlog::debug("request {}: attempt {} on {} failed ({}); retrying elsewhere", rec.id,
                    attempt, leg.label, r.error);
      if (const absl::Duration pause = RetryBackoff(attempt); pause > absl::ZeroDuration()) {
        net::steady_timer timer(stream_.get_executor(), ToChrono(pause));
        co_await timer.async_wait(kUseTuple);
      }
    }

    const RelayResult& r = leg.r;
    rec.attempts = attempts;
    rec.status = r.status;
    rec.error = r.error;
    rec.t_first_token = r.t_first_byte;
    rec.prompt_tokens = r.usage.prompt_tokens;
    rec.cached_tokens = r.usage.cached_tokens;
    rec.completion_tokens = r.usage.completion_tokens;
    ObserveOutcome(route, rec, r, leg, d, t0);

    if (!r.headers_sent) {
      if (r.client_gone) co_return false;
      // The engine's own 5xx status when it answered one; else 502/504.
      const int status = r.status >= 500 ? r.status : r.timed_out ? 504 : 502;
      rec.status = status;
      Headers extra;
      extra.emplace_back("X-Request-Id", rec.id);
      extra.emplace_back("X-Kvroute-Backend", leg.label);
      extra.emplace_back("X-Kvroute-Class", decor.request_class);
      std::string msg = absl::StrCat("backend ", leg.label, ": ", r.error);
      if (attempts > 1) absl::StrAppend(&msg, " (", attempts, " attempts)");
      co_return co_await SendError(status, msg, keep_alive, std::move(extra));
    }
    co_return r.completed && keep_alive && !state_.draining.load();
  }

  // Why a failed attempt is retried, as the retries counter labels it.
  static std::string RetryReason(const RelayResult& r) {
    if (r.status >= 500) return "5xx";
    if (r.timed_out) return "timeout";
    if (absl::StartsWith(r.error, "connect failed")) return "connect";
    return r.ejected ? "ejected" : "upstream_error";
  }

  // Full jitter: uniform in [0, min(max, base x 2^(attempt-1))].
  absl::Duration RetryBackoff(int attempt) const {
    absl::Duration cap = cfg_.upstream.retry_backoff;
    for (int i = 1; i < attempt && cap < cfg_.upstream.retry_backoff_max; ++i) cap *= 2;
    cap = std::min(cap, cfg_.upstream.retry_backoff_max);
    if (cap <= absl::ZeroDuration()) return absl::ZeroDuration();
    thread_local absl::BitGen gen;
    return absl::Nanoseconds(absl::Uniform<int64_t>(gen, 0, absl::ToInt64Nanoseconds(cap) + 1));
  }

  // The result of serving one request, co-located or offloaded.
  struct LegResult {
    RelayResult r;        // the client-facing leg
    int served_by = -1;   // backend whose usage the client got
    std::string label;    // X-Kvroute-Backend
    int attempts = 0;
    // Whether served_by got the prompt's KV through the connector (so its
    // cached_tokens are not truth about its own prefix cache).
    bool kv_transferred = false;
  };

  // Arms the relay's completion hook for a client-facing leg on `backend`.
  void ArmCompletion(LegOptions& opts, int backend, bool kv_transferred) {
    opts.before_last_write = [this, backend, kv_transferred](int status, const Usage& u) {
      if (complete_hook_) complete_hook_(backend, kv_transferred, status, u);
    };
  }

  // A co-located leg on one instance, in two halves around its relay so
  // that the request's own coroutine can await Relay itself (a wrapping
  // coroutine is a frame and a resumption per request):
  //   LegOptions opts = BeginColocated(tmpl, body, backend, decor, ..., out);
  //   out.r = co_await Relay(backend, tmpl, decor, stream, std::move(opts));
  //   EndColocated(tmpl, body, out);
  // `body` is lent to the upstream request and handed back, so a retry
  // elsewhere needs no copy. A 5xx answer counts as a failure before the
  // first byte (the caller may retry it elsewhere).
  LegOptions BeginColocated(ClientRequest& tmpl, std::string& body, int backend, Decor& decor,
                            OnFirstByte on_first_byte, bool kv_transferred, LegResult& out) {
    out.served_by = backend;
    out.kv_transferred = kv_transferred;
    out.label = (*state_.router->Backends())[backend].name;
    decor.backend_label = out.label;
    tmpl.body() = std::move(body);  // Relay sets Host and the framing per leg
    LegOptions opts;
    opts.on_first_byte = std::move(on_first_byte);
    opts.fail_on_5xx = true;
    ArmCompletion(opts, backend, kv_transferred);
    return opts;
  }
  static void EndColocated(ClientRequest& tmpl, std::string& body, LegResult& out) {
    body = std::move(tmpl.body());
    out.attempts = 1;
  }
  net::awaitable<LegResult> ServeColocated(ClientRequest& tmpl,
                                           std::string& body, int backend, Decor decor,
                                           bool stream, OnFirstByte on_first_byte,
                                           bool kv_transferred = false) {
    LegResult out;
    LegOptions opts =
        BeginColocated(tmpl, body, backend, decor, std::move(on_first_byte), kv_transferred, out);
    out.r = co_await Relay(backend, tmpl, decor, stream, std::move(opts));
    EndColocated(tmpl, body, out);
    co_return out;
  }

  // Mooncake: A's engine_id from its bootstrap server, cached per backend.
  net::awaitable<std::string> PrefillEngineId(int a, const std::string& host, uint16_t port) {
    {
      absl::MutexLock lock(&state_.engine_ids_mu);
      auto it = state_.engine_ids.find(a);
      if (it != state_.engine_ids.end()) co_return it->second;
    }
    BufferedResponse q = co_await FetchOnce(worker_.pool.ioc(), host, port, "/query",
                                            cfg_.upstream.connect_timeout, 1 << 20);
    if (q.ec || q.status != 200) co_return std::string();
    absl::StatusOr<std::string> id = transfer::EngineIdFromQuery(q.body);
    if (!id.ok()) co_return std::string();
    absl::MutexLock lock(&state_.engine_ids_mu);
    state_.engine_ids[a] = *id;
    co_return *id;
  }

  void ForgetEngineId(int a) {
    absl::MutexLock lock(&state_.engine_ids_mu);
    state_.engine_ids.erase(a);
  }

  // A HEAVY request in v2 (or any request in pd_sep): prefill on A, the
  // engines move the KV, decode on B. Falls back to co-located serving
  // whenever the handoff cannot run, so nothing is lost:
  //   prefill leg fails or times out   -> co-located on B
  //   decode leg fails before a byte   -> co-located on A (it holds the KV)
  //   decode leg fails after a byte    -> SSE error event (no retry)
  net::awaitable<LegResult> ServeOffload(ClientRequest& tmpl,
                                         std::string& body, int a, int b, Decor decor,
                                         bool stream, OnFirstByte on_first_byte,
                                         RequestRecord& rec) {
    const auto fleet = state_.router->Backends();
    const auto& backends = *fleet;
    const transfer::Connector& connector = *state_.connector;
    const std::string conn_name(connector.name());
    auto count = [&](std::string_view outcome) {
      state_.metrics->offloads->Inc({conn_name, outcome});
    };
    auto colocated = [&](int on, std::string_view why,
                         bool transferred = false) -> net::awaitable<LegResult> {
      count(why);
      rec.prefill_backend = backends[on].name;
      rec.decode_backend = backends[on].name;
      LegResult out =
          co_await ServeColocated(tmpl, body, on, decor, stream, on_first_byte, transferred);
      co_return out;
    };
    if (state_.offload_inflight.load() >= static_cast<int64_t>(cfg_.transfer.max_offload_inflight)) {
      co_return co_await colocated(b, "over_bound");
    }
    boost::system::error_code ec;
    boost::json::value parsed = boost::json::parse(body, ec);
    if (ec || !parsed.is_object()) co_return co_await colocated(b, "bad_body");
    const boost::json::object& client = parsed.get_object();

    transfer::HandoffPlan plan;
    plan.request_id = rec.id;
    plan.prefill_host = backends[a].host;
    plan.prefill_port = backends[a].port;
    plan.bootstrap_port = state_.BootstrapPort(backends[a].name);
    {
      thread_local absl::BitGen gen;
      plan.bootstrap_room = absl::Uniform<uint64_t>(gen) & 0x7fffffffffffffffULL;
    }
    if (connector.needs_engine_id()) {
      plan.engine_id = co_await PrefillEngineId(a, plan.prefill_host, plan.bootstrap_port);
      if (plan.engine_id.empty()) co_return co_await colocated(b, "bootstrap_failed");
    }
    absl::StatusOr<std::string> prefill_body = connector.PrefillBody(client, plan);
    if (!prefill_body.ok()) co_return co_await colocated(b, "bad_body");

    state_.offload_inflight.fetch_add(1);
    LegResult out;
    out.served_by = b;
    out.label = absl::StrCat(backends[a].name, "->", backends[b].name);
    decor.backend_label = out.label;
    rec.prefill_backend = backends[a].name;
    rec.decode_backend = backends[b].name;
    const auto tp0 = Clock::now();
    bool prefill_failed = false;
    bool decode_failed = false;
    double t_prefill_done = -1;

    if (connector.sequential()) {
      std::string captured;
      ClientRequest pre = tmpl;
      pre.body() = *std::move(prefill_body);
      LegOptions po;
      po.to_client = false;
      po.capture = &captured;
      RelayResult p = co_await Relay(a, pre, decor, false, std::move(po));
      out.attempts = 1;
      if (p.client_gone) {
        state_.offload_inflight.fetch_sub(1);
        count("client_gone");
        out.r = p;
        co_return out;
      }
      if (!p.completed || p.status != 200) {
        prefill_failed = true;
      } else {
        t_prefill_done = WallSecondsAt(Clock::now());
        state_.metrics->prefill_seconds->Observe({conn_name}, Since(tp0));
        std::optional<boost::json::object> params;
        boost::system::error_code pec;
        boost::json::value pv = boost::json::parse(captured, pec);
        if (!pec && pv.is_object()) {
          if (const auto* kv = pv.get_object().if_contains("kv_transfer_params");
              kv != nullptr && kv->is_object()) {
            params = kv->get_object();
          }
        }
        if (!params) count("no_kv_params");  // B prefills by itself
        out.kv_transferred = params.has_value();
        absl::StatusOr<std::string> decode_body = connector.DecodeBody(client, plan, params);
        ClientRequest dec = tmpl;
        dec.body() = decode_body.ok() ? *std::move(decode_body) : body;
        LegOptions dopts;
        dopts.on_first_byte = on_first_byte;
        dopts.fail_on_5xx = true;
        ArmCompletion(dopts, b, out.kv_transferred);
        out.r = co_await Relay(b, dec, decor, stream, std::move(dopts));
        out.attempts = 2;
        decode_failed = !out.r.headers_sent && !out.r.client_gone && out.r.upstream_failed;
      }
    } else {
      absl::StatusOr<std::string> decode_body = connector.DecodeBody(client, plan, std::nullopt);
      auto pstate = std::make_shared<LegState>();
      auto dstate = std::make_shared<LegState>();
      struct Join {
        explicit Join(net::any_io_executor ex) : timer(ex, Clock::time_point::max()) {}
        bool done = false;
        RelayResult r;
        double t_done = -1;
        net::steady_timer timer;
      };
      auto join = std::make_shared<Join>(stream_.get_executor());
      auto pre = std::make_shared<ClientRequest>(tmpl);
      pre->body() = *std::move(prefill_body);
      auto self = shared_from_this();
      net::co_spawn(
          stream_.get_executor(),
          [self, this, a, pre, pstate, dstate, join, decor]() -> net::awaitable<void> {
            std::string captured;
            LegOptions po;
            po.to_client = false;
            po.watch_client = false;
            po.capture = &captured;
            po.state = pstate;
            join->r = co_await Relay(a, *pre, decor, false, std::move(po));
            join->t_done = WallSecondsAt(Clock::now());
            join->done = true;
            // The decode leg would wait for KV that never comes.
            if ((!join->r.completed || join->r.status != 200) && !pstate->cancelled) {
              dstate->Cancel();
            }
            join->timer.cancel();
          },
          net::detached);
      ClientRequest dec = tmpl;
      dec.body() = decode_body.ok() ? *std::move(decode_body) : body;
      LegOptions dopts;
      dopts.on_first_byte = on_first_byte;
      dopts.state = dstate;
      dopts.fail_on_5xx = true;
      ArmCompletion(dopts, b, true);
      out.r = co_await Relay(b, dec, decor, stream, std::move(dopts));
      out.attempts = 2;
      out.kv_transferred = true;
      if (!out.r.completed) pstate->Cancel();
      while (!join->done) co_await join->timer.async_wait(kUseTuple);
      if (join->r.completed && join->r.status == 200) {
        t_prefill_done = join->t_done;
        state_.metrics->prefill_seconds->Observe({conn_name}, Since(tp0));
      }
      if (!out.r.headers_sent && !out.r.client_gone) {
        if (dstate->cancelled) {
          prefill_failed = true;
        } else if (out.r.upstream_failed) {
          decode_failed = true;
        }
      }
      if (out.r.client_gone) {
        state_.offload_inflight.fetch_sub(1);
        count("client_gone");
        co_return out;
      }
    }
    state_.offload_inflight.fetch_sub(1);

    if (prefill_failed) {
      if (connector.needs_engine_id()) ForgetEngineId(a);
      state_.metrics->retries->Inc({backends[b].name, "prefill_failed"});
      LegResult again = co_await colocated(b, "prefill_failed");
      again.attempts += out.attempts;
      co_return again;
    }
    if (decode_failed) {
      // A computed the prompt's KV: it is the cheapest place to serve it now.
      state_.metrics->retries->Inc({backends[a].name, "decode_failed"});
      // A ran the prefill leg: it holds the prompt.
      LegResult again = co_await colocated(a, "decode_failed", /*transferred=*/true);
      again.attempts += out.attempts;
      co_return again;
    }
    rec.t_prefill_done = t_prefill_done;
    if (t_prefill_done >= 0 && out.r.t_first_byte >= 0) {
      rec.transfer_s = std::max(0.0, out.r.t_first_byte - t_prefill_done);
      state_.metrics->transfer_seconds->Observe({conn_name}, rec.transfer_s);
    }
    if (out.r.headers_sent && !out.r.completed) {
      count(out.r.client_gone ? "client_gone" : "stream_error");
    } else {
      count(out.r.completed ? "ok" : "failed");
    }
    co_return out;
  }

  // Records the per-request metrics once a request is served.
  void ObserveOutcome(std::string_view route, const RequestRecord& rec, const RelayResult& r,
                      const LegResult& leg, const router::Decision& d,
                      Clock::time_point t0) {
    const std::string& cls = rec.request_class;
    if (rec.t_first_token >= 0) {
      state_.metrics->ttfb->Observe({route, cls}, rec.t_first_token - rec.t_arrival);
    }
    if (r.completed && r.usage.completion_tokens > 1 && rec.t_first_token >= 0) {
      const double decode_s = Since(t0) - (rec.t_first_token - rec.t_arrival);
      state_.metrics->tpot->Observe({cls}, decode_s / static_cast<double>(r.usage.completion_tokens - 1));
    }
    if (r.usage.cached_tokens >= 0 && r.usage.prompt_tokens > 0 && leg.served_by >= 0) {
      const std::string name = (*state_.router->Backends())[leg.served_by].name;
      state_.metrics->cached_tokens_est->Inc({name}, static_cast<double>(d.cached_tokens_est));
      state_.metrics->cached_tokens_actual->Inc({name},
                                                static_cast<double>(r.usage.cached_tokens));
      state_.metrics->estimate_error->Observe(
          {}, static_cast<double>(d.cached_tokens_est - r.usage.cached_tokens) /
                  static_cast<double>(r.usage.prompt_tokens));
    }
  }


  // Sends `up` to `backend` and relays the response to the client as it
  // arrives (or captures it, for a prefill leg). Retries once on a fresh
  // connection when a reused keep-alive connection turns out to be dead
  // before any response byte.
  net::awaitable<RelayResult> Relay(int backend, ClientRequest& up,
                                    const Decor& decor, bool client_wants_stream,
                                    LegOptions opts) {
    RelayResult r;
    const auto write_timeout = ToChrono(cfg_.limits.write_timeout);  // of each client write
    worker_.Ensure(*state_.router, backend);
    UpstreamPool& pool = worker_.pool;
    const router::BackendSpec& spec = pool.backend(backend);
    const auto t0 = Clock::now();
    // The request's header bytes, written with its body: the client's
    // fields less the hop-by-hop and framing ones, kvroute's request id, this
    // backend's Host, the body's length (no edits to the field map).
    std::string up_header;
    up_header.reserve(256);
    AppendUpstreamHeader(up, decor.request_id, spec.host, spec.port, up.body().size(),
                         &up_header);
    const std::array<net::const_buffer, 2> up_bytes{net::buffer(up_header),
                                                     net::buffer(up.body())};

    std::shared_ptr<LegState> leg = opts.state ? opts.state : std::make_shared<LegState>();
    if (opts.watch_client) {
      WatchClient(stream_.socket(), leg);
    }
    auto finish = [&] {
      leg->relay_done = true;
      leg->upstream = nullptr;
    };
    auto note_aborted = [&] {
      r.client_gone = leg->client_gone;
      r.error = leg->client_gone ? "client disconnected" : "cancelled";
      if (leg->client_gone) state_.metrics->client_disconnects->Inc({});
    };

    std::unique_ptr<Connection> conn;
    BufferStash<beast::flat_buffer>::Lease up_buf_lease(worker_.read_buffers);
    beast::flat_buffer& up_buf = *up_buf_lease;
    // Beast reads at most the buffer's free capacity (512 B when empty): a
    // 62 KB stream took 128 recv/send pairs before this.
    up_buf.reserve(kRelayChunkBytes);
    // The engine's response: parsed without a field map, its forwarded
    // fields kept as wire lines (relay_parser.h).
    std::optional<RelayResponseParser> parser;
    static constexpr std::string_view kOwnFields[] = {"X-Request-Id", "X-Kvroute-Backend",
                                                      "X-Kvroute-Class"};
    const size_t own_count = decor.request_class.empty() ? 2 : 3;
    const absl::Span<const std::string_view> own_fields(kOwnFields, own_count);
    // Until the response header arrives the leg can be cut short by an
    // ejection of its backend (Server::OnHealthChange) and retried elsewhere.
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
    waiting.emplace(&worker_.waiting[backend], leg.get());
    auto passive = [&](bool ok, Clock::time_point at) {
      state_.health->OnRequest(backend, ok, WallAt(at));
    };
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
        state_.metrics->upstream_errors->Inc({spec.name, "connect"});
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
        Watchdog::Scoped wait(*watchdog_, sent + ToChrono(pool.options().first_byte_timeout),
                              &conn->socket());
        auto [hec, hn] = co_await EagerRead(
            conn->socket(), up_buf,
            [&](beast::error_code& e) {
              return http::read_header(conn->socket(), up_buf, *parser, e);
            },
            /*try_first=*/false);
        if (wait.expired()) hec = beast::error::timeout;
        if (!hec && !leg->aborted()) break;
        wec = hec ? hec : net::error::operation_aborted;
        if (reused && hn == 0 && hec != beast::error::timeout && !leg->aborted() &&
            !leg->ejected) {
          state_.metrics->retries->Inc({spec.name, "stale_connection"});
          parser.reset();
          leg->upstream = nullptr;
          conn.reset();
          continue;  // stale keep-alive connection: once more on a fresh one
        }
      } else if (reused && !leg->aborted() && !leg->ejected && wec != beast::error::timeout) {
        state_.metrics->retries->Inc({spec.name, "stale_connection"});
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
      state_.metrics->upstream_errors->Inc({spec.name, r.timed_out ? "timeout" : "read"});
      passive(false, Clock::now());
      break;
    }
    waiting.reset();
    if (leg->aborted()) {
      note_aborted();
    } else if (leg->ejected && !parser) {
      r.upstream_failed = true;
      r.ejected = true;
      r.error = "backend was ejected while the request waited for its response";
      state_.metrics->upstream_errors->Inc({spec.name, "ejected"});
    }
    if (!parser || r.upstream_failed || leg->aborted()) {
      finish();
      co_return r;
    }

    // Response header from the engine: relay it with kvroute's headers.
    r.status = parser->status();
    const auto t_header = Clock::now();
    r.t_first_byte = WallSecondsAt(t_header);
    r.ttfb_s = Seconds(t_header - t0);
    r.sse = ContainsIgnoreCase(parser->content_type(), "text/event-stream");
    const boost::optional<uint64_t> length = parser->content_length();
    const bool chunked = !length.has_value();
    passive(r.status < 500, t_header);
    if (opts.fail_on_5xx && r.status >= 500) {
      r.upstream_failed = true;
      r.error = absl::StrCat("backend answered HTTP ", r.status);
      state_.metrics->upstream_errors->Inc({spec.name, "5xx"});
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
      std::string header =
          parser->ClientHeader(absl::MakeConstSpan(extra.data(), own_count), length);
      beast::error_code hwec;
      if (!chunked && !r.sse && *length > 0 && *length <= kRelayChunkBytes) {
        // A small plain body: its header goes out with the body in one
        // write (one syscall fewer per request).
        held_header = std::move(header);
      } else {
        hwec = co_await EagerWrite(stream_, net::buffer(header), write_timeout);
      }
      if (hwec) {
        r.client_gone = true;
        r.error = "client write failed";
        state_.metrics->client_disconnects->Inc({});
        finish();
        co_return r;
      }
      r.headers_sent = true;
    }
    if (opts.on_first_byte) opts.on_first_byte(t_header);

    ResponseObserver observer(r.sse, pool.options().max_observed_body);
    bool hook_fired = false;
    auto fire_hook = [&] {
      if (hook_fired) return;
      hook_fired = true;
      observer.Finish();
      if (opts.before_last_write) opts.before_last_write(r.status, observer.usage());
    };
    // The body's bytes land here (a stashed buffer: in the coroutine frame,
    // it made the frame 16 KiB larger, allocated per request).
    BufferStash<beast::flat_buffer>::Lease chunk_lease(worker_.read_buffers);
    char* const chunk = static_cast<char*>(chunk_lease->prepare(kRelayChunkBytes).data());
    bool upstream_ok = true;
    for (bool first = true; !parser->is_done(); first = false) {
      parser->set_body_buffer(chunk, kRelayChunkBytes);
      // The first read follows the header (and its write, which does not
      // wait while the client reads): its idle deadline counts from there.
      const auto now = first ? t_header : Clock::now();
      Watchdog::Scoped wait(*watchdog_, now + ToChrono(pool.options().idle_timeout),
                            &conn->socket());
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
          r.error = absl::StrCat("upstream broke mid-response: ", rec.message());
          state_.metrics->stream_errors->Inc({spec.name});
          passive(false, Clock::now());
        }
        break;
      }
      if (n == 0) continue;
      observer.Feed(std::string_view(chunk, n));
      if (parser->is_done()) fire_hook();
      if (!opts.to_client) {
        if (opts.capture != nullptr && opts.capture->size() + n <= opts.max_capture) {
          opts.capture->append(chunk, n);
        }
        continue;
      }
      beast::error_code wec;
      if (chunked) {
        const auto piece = http::make_chunk(net::buffer(chunk, n));
        const WriteAttempt w = WriteNow(stream_, piece);
        wec = w.ec;
        if (!w.done) wec = co_await WriteRest(stream_, piece, w.written, write_timeout);
      } else {
        // The held header, if any (else an empty buffer), goes with the body.
        const std::array<net::const_buffer, 2> both{net::buffer(held_header),
                                                     net::buffer(chunk, n)};
        const WriteAttempt w = WriteNow(stream_, both);
        wec = w.ec;
        if (!w.done) wec = co_await WriteRest(stream_, both, w.written, write_timeout);
        held_header.clear();
      }
      if (wec) {
        upstream_ok = false;
        r.client_gone = true;
        r.error = "client write failed";
        state_.metrics->client_disconnects->Inc({});
        break;
      }
    }
    if (!held_header.empty() && !r.client_gone) {
      // No body bytes came: the client gets the header, as it would have.
      co_await EagerWrite(stream_, net::buffer(held_header), write_timeout);
    }
    observer.Finish();
    r.usage = observer.usage();
    r.events = observer.events();
    if (upstream_ok) {
      r.completed = true;
      fire_hook();
      if (chunked && opts.to_client) {
        if (co_await EagerWrite(stream_, http::make_chunk_last(), write_timeout)) {
          r.completed = false;
        }
      }
      const bool reusable = parser->keep_alive();
      leg->upstream = nullptr;
      pool.Release(backend, std::move(conn), reusable);
    } else {
      leg->upstream = nullptr;
      conn.reset();  // closing the connection cancels the engine's request
      if (opts.to_client && !r.client_gone && chunked && r.sse && client_wants_stream) {
        // Tell the client the stream ended abnormally instead of truncating.
        const std::string event =
            absl::StrCat("data: ", OpenAiErrorBody(502, r.error), "\n\ndata: [DONE]\n\n");
        co_await EagerWrite(stream_, http::make_chunk(net::buffer(event)), write_timeout);
        co_await EagerWrite(stream_, http::make_chunk_last(), write_timeout);
      }
    }
    finish();
    co_return r;
  }

  // Set by HandleCompletion while a request is served: tells the router the
  // response completed (served_by, kv_transferred, status, usage).
  std::function<void(int, bool, int, const Usage&)> complete_hook_;
  Server::Worker& worker_;
  Server::State& state_;
  const Config& cfg_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  ClientRequest request_;  // the request being served; reused, its strings kept
  tcp::endpoint remote_;
  // Deadlines of the idle wait and of the upstream waits (see watchdog.h).
  std::shared_ptr<Watchdog> watchdog_ = std::make_shared<Watchdog>(stream_.get_executor());
};

}  // namespace

ProxyMetrics::ProxyMetrics(metrics::Registry& reg)
    : requests(reg.AddCounter("kvroute_requests_total",
                              "Completion requests by route, mode, class and HTTP status.",
                              {"route", "mode", "class", "status"})),
      ttfb(reg.AddHistogram("kvroute_time_to_first_byte_seconds",
                            "Time from request arrival to the engine's response header, which "
                            "for a stream is its first token.",
                            {"route", "class"}, metrics::LatencyBuckets())),
      duration(reg.AddHistogram("kvroute_request_duration_seconds",
                                "End-to-end request latency as seen by kvroute.",
                                {"route", "class"}, metrics::LatencyBuckets())),
      tpot(reg.AddHistogram("kvroute_time_per_output_token_seconds",
                            "Mean time per output token after the first, per request.", {"class"},
                            metrics::LatencyBuckets())),
      upstream_errors(reg.AddCounter("kvroute_upstream_errors_total",
                                     "Failed upstream exchanges by backend and kind.",
                                     {"backend", "kind"})),
      client_disconnects(reg.AddCounter("kvroute_client_disconnects_total",
                                        "Requests whose client went away before the end.")),
      stream_errors(reg.AddCounter("kvroute_stream_errors_total",
                                   "Responses that broke after their first byte.", {"backend"})),
      decisions(reg.AddCounter("kvroute_decisions_total", "Routing decisions.",
                               {"mode", "class", "decision"})),
      decision_time(reg.AddHistogram(
          "kvroute_decision_seconds", "Time to hash the prompt and decide.", {},
          {1e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 1e-2})),
      affinity(reg.AddCounter("kvroute_affinity_total", "Session affinity outcomes.",
                              {"outcome"})),
      cached_tokens_est(reg.AddCounter("kvroute_cached_tokens_estimated_total",
                                       "Prompt tokens the router estimated cached, for "
                                       "requests whose engine reported cached_tokens.",
                                       {"backend"})),
      cached_tokens_actual(reg.AddCounter("kvroute_cached_tokens_actual_total",
                                          "Prompt tokens the engine reported cached.",
                                          {"backend"})),
      estimate_error(reg.AddHistogram(
          "kvroute_cache_estimate_error_ratio",
          "(estimated - actual cached tokens) / prompt tokens, per request.", {},
          {-1, -0.5, -0.25, -0.1, -0.05, -0.01, 0.01, 0.05, 0.1, 0.25, 0.5, 1})),
      connections(reg.AddGauge("kvroute_client_connections", "Open client connections.")),
      inflight(reg.AddGauge("kvroute_requests_inflight", "Completion requests in flight.")),
      health_transitions(reg.AddCounter("kvroute_backend_health_transitions_total",
                                        "Backend health changes.", {"backend", "to"})),
      retries(reg.AddCounter("kvroute_retries_total",
                             "Upstream attempts made again before any byte reached the client, "
                             "by the backend retried on and reason (stale_connection: a pooled "
                             "keep-alive connection was dead; prefill_failed / decode_failed: a "
                             "handoff fell back to co-located serving; connect, timeout, 5xx, ejected, "
                             "upstream_error: the previous instance failed the request and it "
                             "was routed again, avoiding it).",
                             {"backend", "reason"})),
      ejections(reg.AddCounter("kvroute_backend_ejections_total",
                               "Times a backend was taken out of rotation, by reason "
                               "(health_check, passive_failures, half_open_failure).",
                               {"backend", "reason"})),
      admission_rejections(reg.AddCounter(
          "kvroute_admission_rejections_total",
          "Completion requests refused with 429 because kvroute was at "
          "limits.max_inflight_requests and the queue was full or its wait ran out.")),
      offloads(reg.AddCounter("kvroute_offloads_total",
                              "Prefill/decode handoffs by connector and outcome (ok, "
                              "prefill_failed, decode_failed, stream_error, client_gone, "
                              "over_bound, bootstrap_failed, no_kv_params, bad_body, failed).",
                              {"connector", "outcome"})),
      transfer_seconds(reg.AddHistogram("kvroute_transfer_seconds",
                                        "Handoff time: prefill done to the decode leg's first "
                                        "byte.",
                                        {"connector"}, metrics::LatencyBuckets())),
      prefill_seconds(reg.AddHistogram("kvroute_prefill_leg_seconds",
                                       "Duration of the prefill leg of a handoff.",
                                       {"connector"}, metrics::LatencyBuckets())) {}

router::EngineGauges ParseEngineMetrics(std::string_view text) {
  router::EngineGauges g;
  int64_t block_size = 0, num_blocks = 0;
  for (absl::string_view line : absl::StrSplit(ToAbsl(text), '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t name_end = line.find_first_of("{ ");
    if (name_end == absl::string_view::npos) continue;
    const absl::string_view name = line.substr(0, name_end);
    const size_t value_pos = line.rfind(' ');
    double v = 0;
    if (value_pos == absl::string_view::npos ||
        !absl::SimpleAtod(line.substr(value_pos + 1), &v)) {
      continue;
    }
    if (name == "vllm:num_requests_running") {
      g.num_requests_running = std::max<int64_t>(0, g.num_requests_running) + static_cast<int64_t>(v);
    } else if (name == "vllm:num_requests_waiting") {
      g.num_requests_waiting = std::max<int64_t>(0, g.num_requests_waiting) + static_cast<int64_t>(v);
    } else if (name == "vllm:kv_cache_usage_perc" || name == "vllm:gpu_cache_usage_perc") {
      g.kv_cache_usage_perc = std::max(g.kv_cache_usage_perc, v);
    } else if (name == "vllm:cache_config_info") {
      auto label = [&](absl::string_view key) -> int64_t {
        const std::string needle = absl::StrCat(key, "=\"");
        const size_t p = line.find(needle);
        if (p == absl::string_view::npos) return 0;
        const size_t s = p + needle.size();
        const size_t e = line.find('"', s);
        int64_t out = 0;
        if (e == absl::string_view::npos || !absl::SimpleAtoi(line.substr(s, e - s), &out)) return 0;
        return out;
      };
      block_size = label("block_size");
      num_blocks = label("num_gpu_blocks");
    }
  }
  if (block_size > 0 && num_blocks > 0) g.capacity_tokens = block_size * num_blocks;
  return g;
}

Server::Server(Config config, std::unique_ptr<router::Router> router)
    : config_(std::move(config)), router_(std::move(router)), state_(std::make_unique<State>()) {
  metrics_ = std::make_unique<ProxyMetrics>(registry_);
  state_->config = &config_;
  state_->router = router_.get();
  state_->metrics = metrics_.get();
  state_->request_log = &request_log_;
  state_->registry = &registry_;
  const size_t n = router_->Backends()->size();
  state_->health = std::make_unique<HealthTracker>(
      static_cast<int>(n), config_.monitor,
      [this](const HealthChange& c) { OnHealthChange(c); });
  state_->admission = std::make_unique<Admission>(config_.limits.max_inflight_requests,
                                                  config_.limits.max_queued_requests);
  state_->SetBootstrapPorts(config_.backends, config_.transfer.bootstrap_port);
  auto connector = transfer::MakeConnector(config_.transfer.connector);
  if (!connector.ok()) {
    // ParseConfig validated the name; reaching here is a broken invariant.
    spdlog::critical("{}", std::string(connector.status().message()));
    std::abort();
  }
  state_->connector = *std::move(connector);
  registry_.AddCollector([r = router_.get()](std::string* out) {
    const auto report = r->Report();
    struct G {
      const char* name;
      const char* help;
      double (*get)(const router::BackendReport&);
    };
    static const G kGauges[] = {
        {"kvroute_backend_healthy", "1 when the backend is healthy.",
         [](const router::BackendReport& b) { return b.healthy ? 1.0 : 0.0; }},
        {"kvroute_backend_inflight_requests", "Requests in flight per backend.",
         [](const router::BackendReport& b) { return double(b.inflight_requests); }},
        {"kvroute_backend_inflight_prefill_tokens",
         "Estimated new prompt tokens of requests not yet at their first token.",
         [](const router::BackendReport& b) { return double(b.inflight_prefill_tokens); }},
        {"kvroute_backend_decoding_requests", "Requests past their first token.",
         [](const router::BackendReport& b) { return double(b.decoding_requests); }},
        {"kvroute_backend_shadow_tokens", "Tokens the shadow index believes cached.",
         [](const router::BackendReport& b) { return double(b.shadow_tokens); }},
        {"kvroute_backend_kv_usage", "Engine-reported KV cache usage (0..1), -1 unknown.",
         [](const router::BackendReport& b) { return b.kv_usage; }},
    };
    for (const G& g : kGauges) {
      metrics::RenderGaugeHeader(out, g.name, g.help);
      for (const auto& b : report) {
        if (!b.retired) metrics::RenderSample(out, g.name, {{"backend", b.name}}, g.get(b));
      }
    }
  });
}

Server::~Server() {
  Shutdown();
  Wait();
}

absl::Status Server::Start() {
  if (!config_.request_log.empty()) {
    if (absl::Status st = request_log_.Open(config_.request_log); !st.ok()) return st;
  }
  const int threads = std::max(1, config_.threads);
  for (int i = 0; i < threads; ++i) {
    workers_.push_back(std::make_unique<Worker>(*router_->Backends(), config_.upstream));
  }
  beast::error_code ec;
  const auto addr = net::ip::make_address(config_.listen_host, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("listen: bad address '", config_.listen_host, "'"));
  acceptor_ = std::make_unique<tcp::acceptor>(workers_[0]->ioc);
  tcp::endpoint ep(addr, config_.listen_port);
  acceptor_->open(ep.protocol(), ec);
  if (!ec) acceptor_->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_->bind(ep, ec);
  if (!ec) acceptor_->listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("listen: cannot listen on ", config_.listen_host,
                                               ":", config_.listen_port, ": ", ec.message()));
  }
  port_ = acceptor_->local_endpoint().port();
  net::co_spawn(workers_[0]->ioc, AcceptLoop(), net::detached);
  if (config_.monitor.enabled) net::co_spawn(workers_[0]->ioc, MonitorLoop(), net::detached);
  for (auto& w : workers_) {
    threads_.emplace_back([w = w.get()] { w->ioc.run(); });
  }
  return absl::OkStatus();
}

std::shared_ptr<const std::string> Server::RefusalResponse() {
  if (!refusal_) {
    const std::string body = OpenAiErrorBody(
        503, absl::StrCat("kvroute is at its limit of ", config_.limits.max_connections,
                          " connections; retry later"));
    const int64_t retry_after = std::max<int64_t>(
        1, absl::ToInt64Seconds(absl::Ceil(config_.limits.retry_after, absl::Seconds(1))));
    refusal_ = std::make_shared<const std::string>(absl::StrCat(
        "HTTP/1.1 503 Service Unavailable\r\nServer: kvroute\r\nContent-Type: "
        "application/json\r\nRetry-After: ",
        retry_after, "\r\nConnection: close\r\nContent-Length: ", body.size(), "\r\n\r\n",
        body));
  }
  return refusal_;
}

net::awaitable<void> Server::RefuseConnection(tcp::socket sock,
                                              std::shared_ptr<const std::string> response) {
  beast::tcp_stream stream(std::move(sock));
  stream.expires_after(std::chrono::seconds(1));
  co_await net::async_write(stream, net::buffer(*response), kUseTuple);
  beast::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream.close();
}

net::awaitable<void> Server::AcceptLoop() {
  size_t next = 0;
  for (;;) {
    Worker& w = *workers_[next];
    next = (next + 1) % workers_.size();
    auto [ec, sock] = co_await acceptor_->async_accept(w.ioc, kUseTuple);
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor_->is_open()) co_return;
      continue;  // e.g. EMFILE: keep serving the connections we have
    }
    if (state_->connections.load() >= static_cast<int64_t>(config_.limits.max_connections)) {
      // Over the connection bound: a short 503 with Retry-After, then close.
      net::co_spawn(w.ioc, RefuseConnection(std::move(sock), RefusalResponse()), net::detached);
      continue;
    }
    beast::error_code ignored;
    sock.set_option(tcp::no_delay(true), ignored);
    state_->connections.fetch_add(1);
    metrics_->connections->Add({}, 1);
    auto session = std::make_shared<Session>(w, *state_, std::move(sock));
    net::co_spawn(w.ioc, [session]() { return session->Run(); }, net::detached);
  }
}

BackendHealth Server::health_of(int backend) const { return state_->health->Get(backend); }

void Server::OnHealthChange(const HealthChange& c) {
  // Runs under the tracker's lock: changes reach the router in order.
  const std::string name = (*router_->Backends())[c.backend].name;
  router_->SetHealthy(c.backend, c.routable);
  metrics_->health_transitions->Inc({name, c.routable ? "healthy" : "unhealthy"});
  if (c.routable) {
    spdlog::warn("backend {} is back in rotation ({})", name, c.reason);
    return;
  }
  metrics_->ejections->Inc({name, c.reason});
  spdlog::warn("backend {} ejected ({})", name, c.reason);
  // Requests waiting on it for a response header go elsewhere now.
  for (auto& w : workers_) {
    net::post(w->ioc, [w = w.get(), b = c.backend] {
      if (static_cast<size_t>(b) >= w->waiting.size()) return;  // slot not synced yet: none wait
      std::vector<LegState*> legs(w->waiting[b].begin(), w->waiting[b].end());
      for (LegState* leg : legs) leg->Eject();
    });
  }
}

net::awaitable<void> Server::CheckBackends(Worker& w, bool force_scrape) {
  const auto fleet = router_->Backends();
  const auto& backends = *fleet;
  w.Sync(backends);
  if (state_->last_scrape.size() < backends.size()) {
    state_->last_scrape.resize(backends.size(), std::chrono::steady_clock::time_point{});
  }
  for (size_t i = 0; i < backends.size(); ++i) {
    if (backends[i].retired) continue;
    http::request<http::string_body> hreq{http::verb::get, "/health", 11};
    BufferedResponse h = co_await FetchBuffered(w.pool, static_cast<int>(i), std::move(hreq),
                                                config_.monitor.health_timeout, 64 * 1024);
    const bool ok = !h.ec && h.status == 200;
    state_->health->OnProbe(static_cast<int>(i), ok, absl::Now());
    const auto now = std::chrono::steady_clock::now();
    if (ok && (force_scrape ||
               now - state_->last_scrape[i] >= ToChrono(config_.monitor.scrape_interval))) {
      state_->last_scrape[i] = now;
      http::request<http::string_body> mreq{http::verb::get, "/metrics", 11};
      BufferedResponse m = co_await FetchBuffered(w.pool, static_cast<int>(i), std::move(mreq),
                                                  config_.monitor.health_timeout, 8 << 20);
      if (!m.ec && m.status == 200) {
        router_->UpdateEngineGauges(static_cast<int>(i), ParseEngineMetrics(m.body));
      }
    }
  }
  // Breakers whose ejection ran out turn half-open only after this round's
  // probes: an instance that also fails its checks stays out instead of
  // flapping in for the moment between the two.
  state_->health->Tick(absl::Now());
}

net::awaitable<void> Server::MonitorLoop() {
  net::steady_timer timer(workers_[0]->ioc);
  for (;;) {
    if (shutting_down_.load()) co_return;
    co_await CheckBackends(*workers_[0], false);
    timer.expires_after(ToChrono(config_.monitor.health_interval));
    auto [ec] = co_await timer.async_wait(kUseTuple);
    if (ec) co_return;
  }
}

absl::Status Server::ReloadBackends(const std::vector<BackendConfig>& backends,
                                    uint16_t default_bootstrap_port) {
  absl::MutexLock lock(&reload_mu_);
  std::vector<router::BackendSpec> specs;
  for (const BackendConfig& b : backends) specs.push_back(b.spec);
  if (absl::Status st = router_->UpdateBackends(specs); !st.ok()) return st;
  const auto fleet = router_->Backends();
  state_->health->Resize(static_cast<int>(fleet->size()));
  state_->SetBootstrapPorts(backends, default_bootstrap_port);
  for (auto& w : workers_) {
    net::post(w->ioc, [w = w.get(), fleet] { w->Sync(*fleet); });
  }
  int retired = 0;
  for (const auto& b : *fleet) retired += b.retired ? 1 : 0;
  spdlog::info("backends reloaded: {} configured, {} slots retired", backends.size(), retired);
  return absl::OkStatus();
}

void Server::CheckBackendsNow() {
  if (workers_.empty()) return;
  std::promise<void> done;
  net::co_spawn(workers_[0]->ioc, CheckBackends(*workers_[0], true),
                [&done](std::exception_ptr) { done.set_value(); });
  done.get_future().wait();
}

net::awaitable<void> Server::Drain() {
  net::steady_timer timer(co_await net::this_coro::executor);
  const auto deadline = Clock::now() + ToChrono(config_.limits.drain_timeout);
  while (state_->inflight.load() > 0 && Clock::now() < deadline) {
    timer.expires_after(std::chrono::milliseconds(20));
    co_await timer.async_wait(kUseTuple);
  }
  for (auto& w : workers_) {
    w->guard.reset();
    w->ioc.stop();
  }
}

void Server::Shutdown() {
  if (workers_.empty() || shutting_down_.exchange(true)) return;
  state_->draining.store(true);
  net::post(workers_[0]->ioc, [this] {
    beast::error_code ec;
    acceptor_->close(ec);
    net::co_spawn(workers_[0]->ioc, Drain(), net::detached);
  });
}

void Server::Wait() {
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

}  // namespace kvroute::proxy
