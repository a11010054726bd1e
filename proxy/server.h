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
// Threading: `config.threads` workers, each running its own io_context; a
// connection lives on one worker for its whole life, with that worker's
// upstream pool, so no per-connection state is shared between threads.
// Shared state (router, metrics, request log) is thread-safe on its own.
#pragma once

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proxy/config.h"
#include "proxy/health.h"
#include "proxy/http_common.h"
#include "proxy/metrics.h"
#include "proxy/request_log.h"
#include "proxy/upstream.h"
#include "router/router.h"

namespace kvroute::proxy {

// The proxy's own metric families, created once per server.
struct ProxyMetrics {
  explicit ProxyMetrics(metrics::Registry& reg);
  metrics::CounterVec* requests;          // route, mode, class, status
  metrics::HistogramVec* ttfb;            // route, class
  metrics::HistogramVec* duration;        // route, class
  metrics::HistogramVec* tpot;            // class
  metrics::CounterVec* upstream_errors;   // backend, kind
  metrics::CounterVec* client_disconnects;
  metrics::CounterVec* stream_errors;     // backend
  metrics::CounterVec* decisions;         // mode, class, decision mode
  metrics::HistogramVec* decision_time;
  metrics::CounterVec* affinity;          // outcome: hit|broken
  metrics::CounterVec* cached_tokens_est; // backend
  metrics::CounterVec* cached_tokens_actual;  // backend
  metrics::HistogramVec* estimate_error;  // relative error: (est - actual) / prompt
  metrics::GaugeVec* connections;
  metrics::GaugeVec* inflight;
  metrics::CounterVec* health_transitions;  // backend, to
  metrics::CounterVec* retries;           // backend, reason
  metrics::CounterVec* ejections;         // backend, reason
  metrics::CounterVec* admission_rejections;
  metrics::CounterVec* offloads;          // connector, outcome
  metrics::HistogramVec* transfer_seconds;  // connector
  metrics::HistogramVec* prefill_seconds;   // connector
};

class Server {
 public:
  Server(Config config, std::unique_ptr<router::Router> router);
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
  // A backend's active-check and circuit-breaker state.
  BackendHealth health_of(int backend) const;
  metrics::Registry& registry() { return registry_; }
  const Config& config() const { return config_; }

  struct Worker;
  struct State;

 private:
  net::awaitable<void> AcceptLoop();
  // Answers a connection beyond limits.max_connections with 503 and closes it.
  static net::awaitable<void> RefuseConnection(tcp::socket sock,
                                               std::shared_ptr<const std::string> response);
  std::shared_ptr<const std::string> RefusalResponse();  // accept loop only
  net::awaitable<void> MonitorLoop();
  // One round of health checks; /metrics is scraped when `force_scrape` or
  // when a backend's last scrape is older than the scrape interval.
  net::awaitable<void> CheckBackends(Worker& w, bool force_scrape);
  net::awaitable<void> Drain();
  // A backend's routability changed (HealthTracker callback): tell the
  // router, count, log, and cut short the requests waiting on an ejected one.
  void OnHealthChange(const HealthChange& c);

  Config config_;
  std::unique_ptr<router::Router> router_;
  metrics::Registry registry_;
  std::unique_ptr<ProxyMetrics> metrics_;
  RequestLog request_log_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<tcp::acceptor> acceptor_;
  std::unique_ptr<State> state_;
  uint16_t port_ = 0;
  std::atomic<bool> shutting_down_{false};
  std::vector<std::thread> threads_;
  std::shared_ptr<const std::string> refusal_;  // built once by RefusalResponse()
  absl::Mutex reload_mu_;
};

// Parses the engine gauges kvroute uses out of a vLLM /metrics text.
router::EngineGauges ParseEngineMetrics(std::string_view text);

}  // namespace kvroute::proxy
