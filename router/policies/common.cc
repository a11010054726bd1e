#include "router/policies/common.h"

#include <algorithm>

namespace kvroute::router::policy_internal {

Classification ClassifyFleet(const FleetSnapshot& fleet, const classifier::Thresholds& thresholds) {
  Classification c;
  for (int i = 0; i < static_cast<int>(fleet.backends.size()); ++i) {
    const BackendSnapshot& b = fleet.backends[i];
    if (!b.healthy) continue;
    if (c.best_backend < 0 || b.cached_tokens_est > c.best_cached_tokens) {
      c.best_backend = i;
      c.best_cached_tokens = b.cached_tokens_est;
    }
  }
  c.best_cached_tokens =
      std::clamp<int64_t>(c.best_cached_tokens, 0, std::max<int64_t>(0, fleet.prompt_tokens_est));
  c.new_tokens = classifier::NewTokens(fleet.prompt_tokens_est, c.best_cached_tokens);
  c.request_class = classifier::Classify(fleet.prompt_tokens_est, c.best_cached_tokens, thresholds);
  return c;
}

absl::Status NoHealthyBackend() {
  return absl::UnavailableError("no healthy backend can take the request");
}

double MeanInflightTokens(const FleetSnapshot& fleet) {
  double sum = 0;
  int n = 0;
  for (const BackendSnapshot& b : fleet.backends) {
    if (!b.healthy) continue;
    sum += static_cast<double>(b.inflight_tokens);
    ++n;
  }
  return n == 0 ? 0.0 : sum / n;
}

bool Overloaded(const FleetSnapshot& fleet, int backend, const OverloadRule& rule) {
  const double limit =
      std::max(rule.factor * MeanInflightTokens(fleet), static_cast<double>(rule.min_tokens));
  return static_cast<double>(fleet.backends[backend].inflight_tokens) > limit;
}

Affinity EvaluateAffinity(const FleetSnapshot& fleet, const OverloadRule& rule) {
  Affinity a;
  const int s = fleet.session_backend;
  if (s < 0 || s >= static_cast<int>(fleet.backends.size())) return a;
  if (!fleet.backends[s].healthy || Overloaded(fleet, s, rule)) {
    a.broken = true;
    return a;
  }
  if (!fleet.session_prefix_evicted) a.backend = s;
  return a;
}

int64_t AdmissionShortfall(const FleetSnapshot& fleet, int backend) {
  const BackendSnapshot& b = fleet.backends[backend];
  if (b.kv_capacity_tokens <= 0) return 0;
  return std::max<int64_t>(0,
                           b.inflight_tokens + fleet.footprint_tokens_est - b.kv_capacity_tokens);
}

int64_t EvictedResident(const FleetSnapshot& fleet, int backend) {
  const BackendSnapshot& b = fleet.backends[backend];
  if (b.kv_capacity_tokens <= 0) return 0;
  const int64_t capacity = std::max(b.kv_capacity_tokens, b.resident_capacity_tokens);
  const int64_t held = backend == fleet.session_backend ? 0 : b.cached_tokens_est;
  const int64_t added = std::max<int64_t>(0, fleet.footprint_tokens_est - held);
  const int64_t before = std::max<int64_t>(0, b.resident_tokens - capacity);
  const int64_t after = std::max<int64_t>(0, b.resident_tokens + added - capacity);
  return after - before;
}

int64_t NewTokensOn(const FleetSnapshot& fleet, int backend) {
  return classifier::NewTokens(fleet.prompt_tokens_est, fleet.backends[backend].cached_tokens_est);
}

namespace {
int64_t CachedOn(const FleetSnapshot& fleet, int backend) {
  return std::clamp<int64_t>(fleet.backends[backend].cached_tokens_est, 0,
                             std::max<int64_t>(0, fleet.prompt_tokens_est));
}
}  // namespace

Decision MakeColocated(const FleetSnapshot& fleet, const Classification& c, int backend) {
  return MakeOffload(fleet, c, backend, backend);
}

Decision MakeOffload(const FleetSnapshot& fleet, const Classification& c, int prefill_backend,
                     int decode_backend) {
  Decision d;
  d.request_class = c.request_class;
  d.mode = prefill_backend == decode_backend ? DecisionMode::kColocated : DecisionMode::kOffload;
  d.prefill_backend = prefill_backend;
  d.decode_backend = decode_backend;
  d.prompt_tokens_est = fleet.prompt_tokens_est;
  d.cached_tokens_est = CachedOn(fleet, decode_backend);
  d.prefill_cached_tokens_est = CachedOn(fleet, prefill_backend);
  d.best_cached_tokens_est = c.best_cached_tokens;
  d.new_tokens_est = c.new_tokens;
  d.session_backend = fleet.session_backend;
  return d;
}

void MarkAffinity(const FleetSnapshot& fleet, Decision& d) {
  if (fleet.session_backend < 0) return;
  d.affinity_hit = d.decode_backend == fleet.session_backend;
  d.affinity_broken = !d.affinity_hit;
}

}  // namespace kvroute::router::policy_internal
