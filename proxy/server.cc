#include "proxy/server.h"

#include <spdlog/spdlog.h>

#include <future>

#include "absl/strings/str_cat.h"
#include "proxy/backend_monitor.h"
#include "proxy/request_clock.h"
#include "proxy/session.h"
#include "proxy/shared_state.h"
#include "proxy/worker.h"
#include "router/policy_registry.h"
#include "transfer/handoff.h"

namespace kvroute::proxy {

namespace {

// Each configured backend's bootstrap port by name (0 in its config: the
// transfer section's).
absl::flat_hash_map<std::string, uint16_t> BootstrapPorts(
    const std::vector<BackendConfig>& backends, uint16_t fallback) {
  absl::flat_hash_map<std::string, uint16_t> ports;
  for (const BackendConfig& b : backends) {
    ports[b.name] = b.bootstrap_port != 0 ? b.bootstrap_port : fallback;
  }
  return ports;
}

}  // namespace

Server::Server(Config config, std::unique_ptr<router::Router> router,
               std::optional<uint64_t> random_seed)
    : config_(std::move(config)),
      router_(std::move(router)),
      state_(std::make_unique<SharedState>()),
      random_seed_(random_seed) {
  metrics_ = std::make_unique<ProxyMetrics>(registry_);
  state_->config = &config_;
  state_->router = router_.get();
  state_->metrics = metrics_.get();
  state_->request_log = &request_log_;
  state_->registry = &registry_;
  const size_t n = router_->Backends()->size();
  state_->health = std::make_unique<HealthTracker>(
      static_cast<int>(n), config_.monitor,
      [this](const HealthChange& c) { ApplyHealthChange(c, *router_, *metrics_, workers_); });
  state_->admission = std::make_unique<Admission>(config_.limits.max_inflight_requests,
                                                  config_.limits.max_queued_requests);
  state_->residency =
      std::make_unique<residency::ResidencyWait>(*router_, residency::SystemClock());
  auto connector = transfer::MakeConnector(config_.transfer.connector);
  if (!connector.ok()) {
    // ParseConfig validated the name; reaching here is a broken invariant.
    spdlog::critical("{}", std::string(connector.status().message()));
    std::abort();
  }
  state_->response_homes = std::make_unique<ResponseHomes>(config_.limits.max_response_ids);
  state_->handoff = std::make_unique<transfer::Handoff>(
      *std::move(connector), static_cast<int64_t>(config_.transfer.max_offload_inflight));
  state_->handoff->bootstrap().SetPorts(
      BootstrapPorts(config_.backends, config_.transfer.bootstrap_port),
      config_.transfer.bootstrap_port);
  state_->ConfigureCachedTokens(config_.backends, *router_->Backends());
  monitor_ = std::make_unique<BackendMonitor>(config_, *router_, *state_->health);
  RegisterBackendGauges(registry_, router_.get());
  RegisterKvSizingGauges(registry_, router_.get());
  RegisterResidencyCounters(registry_, state_->residency.get());
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
    workers_.push_back(std::make_unique<Worker>(
        *router_->Backends(), config_.upstream,
        random_seed_ ? std::optional<uint64_t>(*random_seed_ + i) : std::nullopt));
  }
  beast::error_code ec;
  const auto addr = net::ip::make_address(config_.listen_host, ec);
  if (ec)
    return absl::InvalidArgumentError(
        absl::StrCat("listen: bad address '", config_.listen_host, "'"));
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
  if (config_.monitor.enabled) {
    net::co_spawn(workers_[0]->ioc, monitor_->Run(*workers_[0], shutting_down_), net::detached);
  }
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
    const int64_t retry_after = RetryAfterSeconds(config_.limits.retry_after);
    refusal_ = std::make_shared<const std::string>(absl::StrCat(
        "HTTP/1.1 503 Service Unavailable\r\nServer: kvroute\r\nContent-Type: "
        "application/json\r\nRetry-After: ",
        retry_after, "\r\nConnection: close\r\nContent-Length: ", body.size(), "\r\n\r\n", body));
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
    net::co_spawn(
        w.ioc, [session]() { return session->Run(); }, net::detached);
  }
}

void Server::SetClusterSync(ClusterSync* sync) {
  state_->cluster.store(sync, std::memory_order_release);
}

BackendHealth Server::health_of(int backend) const { return state_->health->Get(backend); }

absl::Status Server::ReloadBackends(const std::vector<BackendConfig>& backends,
                                    uint16_t default_bootstrap_port) {
  absl::MutexLock lock(&reload_mu_);
  std::vector<router::BackendSpec> specs;
  for (const BackendConfig& b : backends) specs.push_back(b.spec);
  if (absl::Status st = router_->UpdateBackends(specs); !st.ok()) return st;
  const auto fleet = router_->Backends();
  state_->health->Resize(static_cast<int>(fleet->size()));
  state_->handoff->bootstrap().SetPorts(BootstrapPorts(backends, default_bootstrap_port),
                                        default_bootstrap_port);
  state_->ConfigureCachedTokens(backends, *fleet);
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
  net::co_spawn(workers_[0]->ioc, monitor_->CheckOnce(*workers_[0], true),
                [&done](std::exception_ptr) { done.set_value(); });
  done.get_future().wait();
}

net::awaitable<void> Server::Drain() {
  state_->residency->ReleaseAll();
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
