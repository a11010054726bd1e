// proxy::BackendMonitor: the active side of backend health. Every
// monitor.health_interval it probes each backend's /health, feeds the
// HealthTracker (which ejects and restores), and scrapes /metrics every
// monitor.scrape_interval into the router's engine gauges. Also here: the
// fan-out of a health change (tell the router, count, cut short the legs
// waiting on an ejected backend on every worker) and the vLLM /metrics
// parser.
//
//   BackendMonitor monitor(config, router, health);
//   net::co_spawn(worker0.ioc, monitor.Run(worker0, stopping), net::detached);
//
// Owned by the Server. Thread-safety: Run and CheckOnce run on one worker
// (the first); ApplyHealthChange may run on any thread (it posts to workers).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string_view>
#include <vector>

#include "proxy/config.h"
#include "proxy/health.h"
#include "proxy/http_common.h"
#include "proxy/proxy_metrics.h"
#include "router/router.h"

namespace kvroute::proxy {

struct Worker;

class BackendMonitor {
 public:
  BackendMonitor(const Config& config, router::Router& router, HealthTracker& health)
      : config_(config), router_(router), health_(health) {}

  // Runs a round, then waits monitor.health_interval, until `stop` is set or
  // the worker's io_context stops.
  net::awaitable<void> Run(Worker& w, const std::atomic<bool>& stop);
  // One round of health checks; /metrics is scraped when `force_scrape` or
  // when a backend's last scrape is older than the scrape interval.
  net::awaitable<void> CheckOnce(Worker& w, bool force_scrape);

 private:
  const Config& config_;
  router::Router& router_;
  HealthTracker& health_;
  std::vector<std::chrono::steady_clock::time_point> last_scrape_;  // the monitor's worker only
};

// A backend's routability changed (the HealthTracker's callback): tell the
// router, count, log, and cut short the requests waiting on an ejected one
// on every worker.
void ApplyHealthChange(const HealthChange& c, router::Router& router, ProxyMetrics& metrics,
                       const std::vector<std::unique_ptr<Worker>>& workers);

// Parses the engine gauges kvroute uses out of a vLLM /metrics text.
router::EngineGauges ParseEngineMetrics(std::string_view text);

}  // namespace kvroute::proxy
