// proxy::SharedState: what every connection of one Server shares (config,
// router, metrics, request log, admission, health, handoff state). Private
// to proxy/: the Server owns it and hands each Session a reference.
//
// Thread-safety: the pointed-to objects are thread-safe on their own; the
// counters and the cached-token rules are atomics.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proxy/admission.h"
#include "proxy/cluster_sync.h"
#include "proxy/config.h"
#include "proxy/health.h"
#include "proxy/metrics.h"
#include "proxy/proxy_metrics.h"
#include "proxy/request_log.h"
#include "proxy/response_homes.h"
#include "proxy/response_observer.h"
#include "residency/residency_wait.h"
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
  // The fewest new tokens of an offload made so far (the heavy threshold in
  // effect; with `heavy_threshold: auto` the decision sets it), mirrored in
  // metrics->offload_min_new_tokens. Taken only when a request offloads.
  absl::Mutex offload_min_mu;
  int64_t offload_min_new_tokens ABSL_GUARDED_BY(offload_min_mu) = -1;
  void ObserveOffload(int64_t new_tokens) {
    absl::MutexLock lock(&offload_min_mu);
    if (offload_min_new_tokens >= 0 && offload_min_new_tokens <= new_tokens) return;
    offload_min_new_tokens = new_tokens;
    metrics->offload_min_new_tokens->Set({}, static_cast<double>(new_tokens));
  }
  // Several replicas: the cluster store's session records (set once the
  // store is up; null with `cluster.store: none`).
  std::atomic<ClusterSync*> cluster{nullptr};
  std::unique_ptr<HealthTracker> health;
  std::unique_ptr<Admission> admission;
  // Agent sessions held back until their KV fits their instance.
  std::unique_ptr<residency::ResidencyWait> residency;
  // Prefill/decode handoffs: the connector, the in-flight bound, the
  // bootstrap ports and engine ids.
  std::unique_ptr<transfer::Handoff> handoff;
  // Responses API: the backend holding each stored response kvroute relayed.
  std::unique_ptr<ResponseHomes> response_homes;
  // How each backend's `usage` without prompt_tokens_details is read, by
  // the router's backend index (a retired slot keeps its last rule).
  std::array<CachedTokensRule, router::kMaxBackends> cached_tokens_rules;
  // Sets the rules of `backends` (a config's list) at their slots in `fleet`.
  void ConfigureCachedTokens(const std::vector<BackendConfig>& backends,
                             const std::vector<router::BackendSpec>& fleet) {
    for (const BackendConfig& b : backends) {
      for (size_t i = 0; i < fleet.size() && i < cached_tokens_rules.size(); ++i) {
        if (!fleet[i].retired && fleet[i].name == b.name) {
          cached_tokens_rules[i].Configure(b.cached_tokens_absent);
        }
      }
    }
  }
};

}  // namespace kvroute::proxy
