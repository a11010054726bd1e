// Upstream connections to the instances: a keep-alive pool per worker thread,
// connecting with a timeout, and a buffered request/response exchange for the
// small control calls (/health, /metrics, /v1/models, prefill legs).
//
//   UpstreamPool pool(ioc, backends, options);
//   auto [ec, conn] = co_await pool.Acquire(backend_index);
//   ... use *conn ...;  pool.Release(backend_index, std::move(conn), reusable);
//
// Thread-safety: an UpstreamPool belongs to one worker io_context (one
// thread) and must only be used from it. Streaming relay lives in the server.
#pragma once

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "proxy/config.h"
#include "proxy/http_common.h"
#include <deque>

#include "router/router.h"

namespace kvroute::proxy {

using Connection = beast::tcp_stream;

class UpstreamPool {
 public:
  UpstreamPool(net::io_context& ioc, std::vector<router::BackendSpec> backends,
               UpstreamOptions options);

  // An idle keep-alive connection when one exists (`reused` = true), else a
  // new one connected within the connect timeout.
  net::awaitable<std::tuple<beast::error_code, std::unique_ptr<Connection>, bool>> Acquire(
      int backend);
  // Acquire's fast path without a coroutine: an idle keep-alive connection,
  // or null when there is none.
  std::unique_ptr<Connection> TakeIdle(int backend);
  // A fresh connection, never from the idle list.
  net::awaitable<std::tuple<beast::error_code, std::unique_ptr<Connection>>> Connect(int backend);
  // Returns a connection after a complete exchange; dropped when not
  // reusable or the idle list is full.
  void Release(int backend, std::unique_ptr<Connection> conn, bool reusable);

  // Follows a new backend list from the router (a config reload): slots
  // are only appended, and a retired slot's idle connections are closed.
  // References returned by backend() stay valid (the slots live in a deque).
  void SetBackends(const std::vector<router::BackendSpec>& backends);

  const router::BackendSpec& backend(int i) const { return backends_[i]; }
  size_t size() const { return backends_.size(); }
  const UpstreamOptions& options() const { return options_; }
  net::io_context& ioc() { return ioc_; }

 private:
  net::io_context& ioc_;
  std::deque<router::BackendSpec> backends_;
  UpstreamOptions options_;
  std::deque<std::vector<std::unique_ptr<Connection>>> idle_;
};

struct BufferedResponse {
  beast::error_code ec;   // transport error, timeout, or parse error
  int status = 0;         // HTTP status when !ec
  std::string body;
  std::string content_type;
  bool timed_out = false;
};

// One request with a buffered response (bounded by `max_body`). Uses the
// pool's keep-alive connections and retries once on a fresh connection when
// a reused one turns out to be closed before any response byte.
net::awaitable<BufferedResponse> FetchBuffered(UpstreamPool& pool, int backend,
                                               http::request<http::string_body> req,
                                               absl::Duration timeout, size_t max_body);

// One request on a new connection to host:port (closed afterwards): for
// endpoints outside the pool, such as a Mooncake bootstrap server's /query.
net::awaitable<BufferedResponse> FetchOnce(net::io_context& ioc, const std::string& host,
                                           uint16_t port, std::string target,
                                           absl::Duration timeout, size_t max_body);

}  // namespace kvroute::proxy
