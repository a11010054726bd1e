// proxy::SharedState: what every connection of one Server shares (config,
// router, metrics, request log, admission, health, handoff state). Private
// to proxy/: the Server owns it and hands each Session a reference.
//
// Thread-safety: the pointed-to objects are thread-safe on their own; the
// counters are atomics; the handoff maps are guarded by their mutexes.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "proxy/admission.h"
#include "proxy/config.h"
#include "proxy/health.h"
#include "proxy/metrics.h"
#include "proxy/proxy_metrics.h"
#include "proxy/request_log.h"
#include "router/router.h"
#include "transfer/connector.h"

namespace kvroute::proxy {

struct SharedState {
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
  // Handoffs.
  std::unique_ptr<transfer::Connector> connector;
  // Bootstrap port of each configured backend by name (replaced on reload).
  absl::Mutex bootstrap_mu;
  absl::flat_hash_map<std::string, uint16_t> bootstrap_ports ABSL_GUARDED_BY(bootstrap_mu);
  uint16_t default_bootstrap_port ABSL_GUARDED_BY(bootstrap_mu) = 0;
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

}  // namespace kvroute::proxy
