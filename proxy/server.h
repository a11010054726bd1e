// proxy::Server: kvroute's HTTP/1.1 front end. Accepts clients, routes each
// completion request through router::Router, relays the chosen instance's
// response (streamed event by event), and serves /health, /metrics,
// /v1/models and /admin/backends.
//
//   Server server(config, std::move(router));
//   if (absl::Status st = server.Start(); !st.ok()) ...
//   server.port();           // the bound port (config may say 0)
//   server.Shutdown();       // stop accepting, drain in-flight, stop threads
//   server.Wait();
//
// Threading: `config.threads` workers (worker.h), each running its own
// io_context; a connection (session.h) lives on one worker for its whole
// life, with that worker's upstream pool, so no per-connection state is
// shared between threads. Shared state (shared_state.h: router, metrics,
// request log) is thread-safe on its own. The files by role: session.h
// (connection loop, dispatch), completion.h (route, retries), relay.h
// (upstream leg, SSE relay), ops_handlers.h, backend_monitor.h,
// proxy_metrics.h; the prefill/decode handoff is transfer/handoff.h.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proxy/config.h"
#include "proxy/health.h"
#include "proxy/http_common.h"
#include "proxy/metrics.h"
#include "proxy/proxy_metrics.h"
#include "proxy/request_log.h"
#include "proxy/upstream.h"
#include "router/router.h"

namespace kvroute::proxy {

class ClusterSync;

class BackendMonitor;
struct SharedState;
struct Worker;

class Server {
 public:
  // `random_seed` seeds every worker's random source (request ids, retry
  // jitter, bootstrap rooms) so that tests are repeatable; without one the
  // sources are seeded from the operating system.
  Server(Config config, std::unique_ptr<router::Router> router,
         std::optional<uint64_t> random_seed = std::nullopt);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listener and starts the worker threads and the backend monitor.
  absl::Status Start();
  uint16_t port() const { return port_; }

  // Stops accepting; in-flight requests may finish until the drain timeout;
  // then the workers stop. Safe to call from any thread, more than once.
  void Shutdown();
  // Blocks until the workers have stopped.
  void Wait();

  // Runs one round of health checks and metric scrapes over every backend and
  // returns when it is done (for tests and for start-up).
  void CheckBackendsNow();

  // Applies a new backend list without a restart (SIGHUP): backends kept at
  // the same address keep their load, shadow cache and connections; new ones
  // join healthy; removed ones stop receiving requests (those in flight
  // finish). On error (empty list, pd_sep pools, too many slots) nothing
  // changes. Thread-safe; reloads are serialised.
  absl::Status ReloadBackends(const std::vector<BackendConfig>& backends,
                              uint16_t default_bootstrap_port);

  router::Router& router() { return *router_; }
  // The cluster store's session records for every connection (null: none);
  // `sync` outlives the server's traffic.
  void SetClusterSync(ClusterSync* sync);
  // A backend's active-check and circuit-breaker state.
  BackendHealth health_of(int backend) const;
  metrics::Registry& registry() { return registry_; }
  const Config& config() const { return config_; }

 private:
  net::awaitable<void> AcceptLoop();
  // Answers a connection beyond limits.max_connections with 503 and closes it.
  static net::awaitable<void> RefuseConnection(tcp::socket sock,
                                               std::shared_ptr<const std::string> response);
  std::shared_ptr<const std::string> RefusalResponse();  // accept loop only
  net::awaitable<void> Drain();

  Config config_;
  std::unique_ptr<router::Router> router_;
  metrics::Registry registry_;
  std::unique_ptr<ProxyMetrics> metrics_;
  RequestLog request_log_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<tcp::acceptor> acceptor_;
  std::unique_ptr<SharedState> state_;
  std::unique_ptr<BackendMonitor> monitor_;
  std::optional<uint64_t> random_seed_;
  uint16_t port_ = 0;
  std::atomic<bool> shutting_down_{false};
  std::vector<std::thread> threads_;
  std::shared_ptr<const std::string> refusal_;  // built once by RefusalResponse()
  absl::Mutex reload_mu_;
};

}  // namespace kvroute::proxy
