#include "router/policies/cache_aware.h"

#include <algorithm>

#include "router/policies/placement_cost.h"

namespace kvroute::router {

CacheAwarePolicy::CacheAwarePolicy(const Options& options)
    : thresholds_(options.thresholds),
      weights_(options.baseline),
      // A reloaded token's time in prefill tokens: its KV over the host link
      // against the prefill rate.
      host_reload_weight_(options.host_tier.load_bytes_per_second > 0
                              ? options.offload_cost.kv_bytes_per_token *
                                    options.offload_cost.prefill_tokens_per_second /
                                    options.host_tier.load_bytes_per_second
                              : 0),
      pool_reload_weight_(options.host_tier.pool_load_bytes_per_second > 0
                              ? options.offload_cost.kv_bytes_per_token *
                                    options.offload_cost.prefill_tokens_per_second /
                                    options.host_tier.pool_load_bytes_per_second
                              : 0),
      rates_(options.offload_cost),
      overload_{options.overload_factor, options.overload_min_tokens} {}

double CacheAwarePolicy::Cost(const FleetSnapshot& fleet, int backend, RequestClass c) const {
  const BackendSnapshot& b = fleet.backends[backend];
  const int64_t uncached = policy_internal::NewTokensOn(fleet, backend);
  // Its own prefill in prefill tokens: the placement cost's prefill time at
  // the prefill rate is the new tokens plus their attention to the context.
  double new_tokens = static_cast<double>(uncached);
  if (weights_.attention_weight > 0) {
    const double timed = placement::PrefillSeconds(uncached, fleet.prompt_tokens_est - uncached,
                                                   rates_) *
                         rates_.prefill_tokens_per_second;
    new_tokens += weights_.attention_weight * std::max(0.0, timed - new_tokens);
  }
  // The prefill this backend would run: a turn WARM on its home is a cold
  // prompt on an instance without its prefix.
  const bool warm_here =
      c == RequestClass::kWarm &&
      classifier::Classify(fleet.prompt_tokens_est, b.cached_tokens_est, thresholds_) ==
          RequestClass::kWarm;
  const double stalled_streams =
      warm_here ? 0 : static_cast<double>(std::max<int64_t>(0, b.decoding_requests));
  return new_tokens * (1.0 + weights_.decode_stall_weight * stalled_streams) +
         host_reload_weight_ * b.host_reload_time_factor *
             static_cast<double>(b.host_reload_tokens_est) +
         pool_reload_weight_ * b.pool_reload_time_factor *
             static_cast<double>(b.pool_reload_tokens_est) +
         weights_.prefill_queue_weight * static_cast<double>(b.inflight_prefill_tokens) +
         weights_.decode_tokens_weight * static_cast<double>(b.inflight_tokens) +
         weights_.waiting_penalty_tokens *
             static_cast<double>(std::max<int64_t>(0, b.engine_waiting)) +
         weights_.admission_weight *
             static_cast<double>(policy_internal::AdmissionShortfall(fleet, backend)) +
         weights_.eviction_weight *
             static_cast<double>(policy_internal::EvictedResident(fleet, backend));
}

int CacheAwarePolicy::BestByCost(const FleetSnapshot& fleet, RequestClass c, int exclude) const {
  int best = -1;
  double best_cost = 0;
  for (int i = 0; i < static_cast<int>(fleet.backends.size()); ++i) {
    if (i == exclude || !fleet.backends[i].healthy) continue;
    const double cost = Cost(fleet, i, c);
    if (best < 0 || cost < best_cost) {
      best = i;
      best_cost = cost;
    }
  }
  return best;
}

absl::StatusOr<Decision> CacheAwarePolicy::Decide(const FleetSnapshot& fleet) const {
  const policy_internal::Classification c = policy_internal::ClassifyFleet(fleet, thresholds_);
  if (c.best_backend < 0) return policy_internal::NoHealthyBackend();
  const policy_internal::Affinity affinity = policy_internal::EvaluateAffinity(fleet, overload_);
  int backend = affinity.backend;
  if (backend < 0) {
    backend = BestByCost(fleet, c.request_class, affinity.broken ? fleet.session_backend : -1);
  }
  // The overloaded one is all there is.
  if (backend < 0) backend = BestByCost(fleet, c.request_class);
  Decision d = policy_internal::MakeColocated(fleet, c, backend);
  policy_internal::MarkAffinity(fleet, d);
  return d;
}

}  // namespace kvroute::router
