// proxy::SharedState: what every connection of one Server shares (config,
// router, metrics, request log, admission, health, handoff state). Private
// to proxy/: the Server owns it and hands each Session a reference.
//
// Thread-safety: the pointed-to objects are thread-safe on their own; the
// counters are atomics.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "proxy/admission.h"
#include "proxy/config.h"
#include "proxy/health.h"
#include "proxy/metrics.h"
#include "proxy/proxy_metrics.h"
#include "proxy/request_log.h"
#include "router/router.h"
#include "transfer/handoff.h"

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
  // Prefill/decode handoffs: the connector, the in-flight bound, the
  // bootstrap ports and engine ids.
  std::unique_ptr<transfer::Handoff> handoff;
};

}  // namespace kvroute::proxy
