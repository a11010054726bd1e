// proxy::ProxyMetrics: the proxy's own metric families (requests, latency,
// upstream errors, retries, ejections, handoffs), registered once per
// server in its metrics::Registry and shared by every connection.
//
//   ProxyMetrics m(registry);
//   m.requests->Inc({route, mode, cls, status});
//   RegisterBackendGauges(registry, router);   // per-backend gauges at scrape
//
// Thread-safety: the families are thread-safe (metrics.h); the struct is
// immutable after construction.
#pragma once

#include "proxy/metrics.h"
#include "residency/residency_wait.h"
#include "router/router.h"

namespace kvroute::proxy {

struct ProxyMetrics {
  explicit ProxyMetrics(metrics::Registry& reg);
  metrics::CounterVec* requests;         // route, mode, class, status
  metrics::HistogramVec* ttfb;           // route, class
  metrics::HistogramVec* duration;       // route, class
  metrics::HistogramVec* tpot;           // class
  metrics::CounterVec* upstream_errors;  // backend, kind
  metrics::CounterVec* client_disconnects;
  metrics::CounterVec* stream_errors;  // backend
  metrics::CounterVec* decisions;      // mode, class, decision mode
  metrics::HistogramVec* decision_time;
  metrics::CounterVec* affinity;              // outcome: hit|broken
  metrics::CounterVec* cached_tokens_est;     // backend
  metrics::CounterVec* cached_tokens_actual;  // backend
  metrics::HistogramVec* estimate_error;      // relative error: (est - actual) / prompt
  metrics::GaugeVec* connections;
  metrics::GaugeVec* inflight;
  metrics::CounterVec* health_transitions;  // backend, to
  metrics::CounterVec* retries;             // backend, reason
  metrics::CounterVec* ejections;           // backend, reason
  metrics::CounterVec* admission_rejections;
  metrics::CounterVec* shed;           // route, class, session: new|running
  metrics::CounterVec* shed_averted;   // route, class
  metrics::CounterVec* kept_home;      // route, class
  metrics::CounterVec* busy_timeouts;  // backend
  metrics::CounterVec* offloads;            // connector, outcome
  metrics::HistogramVec* transfer_seconds;  // connector
  metrics::HistogramVec* prefill_seconds;   // connector
  metrics::GaugeVec* offload_min_new_tokens;
  metrics::HistogramVec* residency_wait;  // seconds a gated turn was held back
};

// Adds a collector that renders the router's per-backend gauges (health,
// load, shadow tokens, KV usage) at every scrape. `router` must outlive
// `reg`'s last Render().
void RegisterBackendGauges(metrics::Registry& reg, const router::Router* router);

// Adds a collector that renders the live sizing gauges (kvroute_kv_*,
// router::Router::Sizing) at every scrape, as of the scrape's time: the
// working set against each KV tier's capacity, the tiers' write rates and
// retention, and the sessions' reuse gap. `router` must outlive `reg`'s last
// Render().
void RegisterKvSizingGauges(metrics::Registry& reg, router::Router* router);

// Adds a collector that renders the residency gate's counters
// (router/residency_gate.h) at every scrape. `residency` must outlive `reg`'s
// last Render().
void RegisterResidencyCounters(metrics::Registry& reg,
                               const residency::ResidencyWait* residency);

}  // namespace kvroute::proxy
