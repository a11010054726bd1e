#include "proxy/upstream.h"

namespace kvroute::proxy {

UpstreamPool::UpstreamPool(net::io_context& ioc, std::vector<router::BackendSpec> backends,
                           UpstreamOptions options)
    : ioc_(ioc),
      backends_(backends.begin(), backends.end()),
      options_(options),
      idle_(backends_.size()) {}

void UpstreamPool::SetBackends(const std::vector<router::BackendSpec>& backends) {
  for (size_t i = 0; i < backends.size(); ++i) {
    if (i >= backends_.size()) {
      backends_.push_back(backends[i]);
      idle_.emplace_back();
      continue;
    }
    if (backends[i].retired && !backends_[i].retired) {
      backends_[i].retired = true;
      for (auto& conn : idle_[i]) {
        beast::error_code ec;
        conn->socket().shutdown(tcp::socket::shutdown_both, ec);
        conn->close();
      }
      idle_[i].clear();
    }
  }
}

net::awaitable<std::tuple<beast::error_code, std::unique_ptr<Connection>>> UpstreamPool::Connect(
    int backend) {
  const router::BackendSpec& spec = backends_[backend];
  auto conn = std::make_unique<Connection>(ioc_);
  beast::error_code ec;
  std::vector<tcp::endpoint> endpoints;
  net::ip::address addr = net::ip::make_address(spec.host, ec);
  if (!ec) {
    endpoints.emplace_back(addr, spec.port);
  } else {
    tcp::resolver resolver(ioc_);
    auto [rec, results] =
        co_await resolver.async_resolve(spec.host, std::to_string(spec.port), kUseTuple);
    if (rec) co_return std::make_tuple(rec, nullptr);
    for (const auto& r : results) endpoints.push_back(r.endpoint());
  }
  conn->expires_after(ToChrono(options_.connect_timeout));
  auto [cec, ep] = co_await conn->async_connect(endpoints, kUseTuple);
  if (cec) co_return std::make_tuple(cec, nullptr);
  conn->socket().set_option(tcp::no_delay(true), ec);
  co_return std::make_tuple(beast::error_code{}, std::move(conn));
}

net::awaitable<std::tuple<beast::error_code, std::unique_ptr<Connection>, bool>>
UpstreamPool::Acquire(int backend) {
  if (std::unique_ptr<Connection> idle = TakeIdle(backend)) {
    co_return std::make_tuple(beast::error_code{}, std::move(idle), true);
  }
  auto [ec, conn] = co_await Connect(backend);
  co_return std::make_tuple(ec, std::move(conn), false);
}

std::unique_ptr<Connection> UpstreamPool::TakeIdle(int backend) {
  auto& idle = idle_[backend];
  if (idle.empty()) return nullptr;
  std::unique_ptr<Connection> conn = std::move(idle.back());
  idle.pop_back();
  return conn;
}

void UpstreamPool::Release(int backend, std::unique_ptr<Connection> conn, bool reusable) {
  if (!conn) return;
  auto& idle = idle_[backend];
  if (!reusable || idle.size() >= options_.max_idle_per_backend) {
    beast::error_code ec;
    conn->socket().shutdown(tcp::socket::shutdown_both, ec);
    conn->close();
    return;
  }
  conn->expires_never();
  idle.push_back(std::move(conn));
}

net::awaitable<BufferedResponse> FetchBuffered(UpstreamPool& pool, int backend,
                                               http::request<http::string_body> req,
                                               absl::Duration timeout, size_t max_body) {
  BufferedResponse out;
  const router::BackendSpec& spec = pool.backend(backend);
  req.set(http::field::host, spec.host + ":" + std::to_string(spec.port));
  req.keep_alive(true);
  req.prepare_payload();
  for (int attempt = 0; attempt < 2; ++attempt) {
    beast::error_code ec;
    std::unique_ptr<Connection> conn;
    bool reused = false;
    if (attempt == 0) {
      std::tie(ec, conn, reused) = co_await pool.Acquire(backend);
    } else {
      std::tie(ec, conn) = co_await pool.Connect(backend);
    }
    if (ec) {
      out.ec = ec;
      out.timed_out = ec == beast::error::timeout;
      co_return out;
    }
    conn->expires_after(ToChrono(timeout));
    auto [wec, wn] = co_await http::async_write(*conn, req, kUseTuple);
    if (wec) {
      out.ec = wec;
      out.timed_out = wec == beast::error::timeout;
      if (reused) continue;
      co_return out;
    }
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(max_body);
    auto [rec, rn] = co_await http::async_read(*conn, buf, parser, kUseTuple);
    if (rec) {
      out.ec = rec;
      out.timed_out = rec == beast::error::timeout;
      if (reused && rn == 0 && !out.timed_out) continue;  // stale keep-alive connection
      co_return out;
    }
    auto& res = parser.get();
    out.ec = {};
    out.status = res.result_int();
    out.content_type = std::string(res[http::field::content_type]);
    const bool reusable = res.keep_alive();
    out.body = std::move(res.body());
    pool.Release(backend, std::move(conn), reusable);
    co_return out;
  }
  co_return out;
}

net::awaitable<BufferedResponse> FetchOnce(net::io_context& ioc, const std::string& host,
                                           uint16_t port, std::string target,
                                           absl::Duration timeout, size_t max_body) {
  router::BackendSpec spec;
  spec.name = host;
  spec.host = host;
  spec.port = port;
  UpstreamOptions options;
  options.connect_timeout = timeout;
  options.max_idle_per_backend = 0;
  UpstreamPool one(ioc, {spec}, options);
  http::request<http::string_body> req{http::verb::get, target, 11};
  co_return co_await FetchBuffered(one, 0, std::move(req), timeout, max_body);
}

}  // namespace kvroute::proxy
