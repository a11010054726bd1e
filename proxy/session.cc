#include "proxy/session.h"

#include "proxy/agent_apis.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proxy/absl_compat.h"
#include "proxy/admin_auth.h"
#include "proxy/completion.h"
#include "proxy/eager_io.h"
#include "proxy/ops_handlers.h"
#include "proxy/request_clock.h"
#include "proxy/request_framing.h"
#include "proxy/shared_state.h"
#include "proxy/worker.h"

namespace kvroute::proxy {

namespace {

// Read sizes: a client's large body is read kMaxClientReadBytes at a time;
// a request's first read takes up to kFirstReadBytes (a 1k-token request in
// one recv). The client buffer is released once a request is served, so
// idle keep-alive connections hold none.
constexpr uint64_t kMaxClientReadBytes = 64 * 1024;
constexpr size_t kFirstReadBytes = 16 * 1024;

bool IsLoopback(const tcp::endpoint& ep) { return ep.address().is_loopback(); }

// What a connection closed after an error answer reads and discards before
// closing (see Session::DrainBeforeClose).
constexpr size_t kLingerBytes = 1 << 20;
constexpr auto kLingerTime = std::chrono::seconds(2);

struct RouteSpec {
  std::string_view path;
  http::verb verb;
};
constexpr RouteSpec kRoutes[] = {
    {"/v1/completions", http::verb::post}, {"/v1/chat/completions", http::verb::post},
    {"/v1/messages", http::verb::post},    {"/v1/responses", http::verb::post},
    {"/v1/models", http::verb::get},       {"/health", http::verb::get},
    {"/metrics", http::verb::get},         {"/admin/backends", http::verb::get},
};

}  // namespace

Session::Session(Worker& worker, SharedState& state, tcp::socket sock)
    : worker_(worker), state_(state), cfg_(*state.config), stream_(std::move(sock)) {
  beast::error_code ec;
  remote_ = stream_.socket().remote_endpoint(ec);
}

net::awaitable<void> Session::Run() {
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

net::awaitable<bool> Session::ReadFailed(beast::error_code ec) {
  if (ec == http::error::body_limit) {
    co_await SendError(
        413, absl::StrCat("request body exceeds ", cfg_.limits.max_body_bytes, " bytes"), false);
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
net::awaitable<void> Session::DrainBeforeClose() {
  stream_.expires_after(
      std::min<Clock::duration>(kLingerTime, ToChrono(cfg_.limits.header_timeout)));
  char sink[4096];
  for (size_t drained = 0; drained < kLingerBytes;) {
    auto [ec, n] = co_await stream_.async_read_some(net::buffer(sink), kUseTuple);
    if (ec) break;
    drained += n;
  }
}

// Routes one request; returns whether the connection may be kept alive.
// A completion request (the hot path) goes to ServeCompletion without a
// coroutine frame of its own here; everything else, a query string
// included, through DispatchOther.
net::awaitable<bool> Session::Dispatch(ClientRequest& req) {
  if (req.method() == http::verb::post) {
    const std::string_view target = req.target();
    if (target == "/v1/completions") {
      return ServeCompletion(*this, req, Endpoint::kCompletions, "/v1/completions");
    }
    if (target == "/v1/chat/completions") {
      return ServeCompletion(*this, req, Endpoint::kChat, "/v1/chat/completions");
    }
    if (target == "/v1/messages") {
      return ServeCompletion(*this, req, Endpoint::kMessages, "/v1/messages");
    }
    if (target == "/v1/responses") {
      return ServeCompletion(*this, req, Endpoint::kResponses, "/v1/responses");
    }
  }
  return DispatchOther(req);
}

net::awaitable<bool> Session::DispatchOther(ClientRequest& req) {
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
        co_return co_await SendError(401,
                                     "admin endpoints need Authorization: Bearer <admin.token>",
                                     keep_alive, std::move(challenge));
      }
      case AdminAccess::kForbidden:
        co_return co_await SendError(403,
                                     cfg_.admin.allow_loopback
                                         ? "admin endpoints answer only on loopback"
                                         : "admin endpoints are closed: no admin.token is set",
                                     keep_alive);
    }
  }
  if (const std::string_view id = ResponseIdFromTarget(target); !id.empty()) {
    if (m != http::verb::get) {
      Headers allow;
      allow.emplace_back("Allow", "GET");
      std::string msg = absl::StrCat("method ", ToAbsl(req.method_string()), " is not allowed on ",
                                     ToAbsl(target));
      co_return co_await SendError(405, msg, keep_alive, std::move(allow));
    }
    co_return co_await ServeStoredResponse(*this, req, std::string(id));
  }
  for (const RouteSpec& r : kRoutes) {
    if (target != r.path) continue;
    if (m != r.verb && !(r.verb == http::verb::get && m == http::verb::head)) {
      Headers allow;
      allow.emplace_back("Allow", std::string(http::to_string(r.verb)));
      std::string msg = absl::StrCat("method ", ToAbsl(req.method_string()), " is not allowed on ",
                                     ToAbsl(target));
      co_return co_await SendError(405, msg, keep_alive, std::move(allow));
    }
    if (target == "/v1/completions") {
      co_return co_await ServeCompletion(*this, req, Endpoint::kCompletions, "/v1/completions");
    }
    if (target == "/v1/chat/completions") {
      co_return co_await ServeCompletion(*this, req, Endpoint::kChat, "/v1/chat/completions");
    }
    if (target == "/v1/messages") {
      co_return co_await ServeCompletion(*this, req, Endpoint::kMessages, "/v1/messages");
    }
    if (target == "/v1/responses") {
      co_return co_await ServeCompletion(*this, req, Endpoint::kResponses, "/v1/responses");
    }
    if (target == "/v1/models") co_return co_await ServeModels(*this, req);
    if (target == "/health") co_return co_await ServeHealth(*this, keep_alive);
    if (target == "/metrics") {
      co_return co_await ServeMetrics(*this, keep_alive);
    }
    if (target == "/admin/backends") co_return co_await ServeAdminBackends(*this, req);
  }
  co_return co_await SendError(404, absl::StrCat("no route for ", ToAbsl(target)), keep_alive);
}

net::awaitable<bool> Session::SendBody(int status, std::string_view content_type, std::string body,
                                       bool keep_alive, Headers extra) {
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

net::awaitable<bool> Session::SendError(int status, std::string_view message, bool keep_alive,
                                        Headers extra) {
  co_return co_await SendBody(status, "application/json", OpenAiErrorBody(status, message),
                              keep_alive, std::move(extra));
}

net::awaitable<bool> Session::SendApiError(Endpoint endpoint, int status, std::string_view message,
                                           bool keep_alive, Headers extra) {
  co_return co_await SendBody(status, "application/json", ErrorBodyFor(endpoint, status, message),
                              keep_alive, std::move(extra));
}

}  // namespace kvroute::proxy
