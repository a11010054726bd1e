// Helpers shared by the policies in router/policies/: classification over
// the healthy part of a snapshot, session-affinity evaluation, and Decision
// construction. Pure functions; thread-safe. Internal to router/.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "classifier/classifier.h"
#include "router/policy.h"
#include "router/types.h"

namespace kvroute::router::policy_internal {

// The request's class against the best cache hit among HEALTHY backends
// (DESIGN.md §3). `best_backend` is -1 when no backend is healthy; ties on
// cached tokens go to the lowest index.
struct Classification {
  RequestClass request_class = RequestClass::kMedium;
  int64_t best_cached_tokens = 0;
  int64_t new_tokens = 0;
  int best_backend = -1;
};
Classification ClassifyFleet(const FleetSnapshot& fleet, const classifier::Thresholds& thresholds);

absl::Status NoHealthyBackend();

// Mean in-flight tokens over healthy backends (0 when none).
double MeanInflightTokens(const FleetSnapshot& fleet);

struct OverloadRule {
  double factor = 2.0;     // x fleet mean in-flight tokens
  int64_t min_tokens = 0;  // and at least this many in-flight tokens
};
// in-flight tokens > max(factor x mean, min_tokens).
bool Overloaded(const FleetSnapshot& fleet, int backend, const OverloadRule& rule);

// The session's instance if it may keep the session (healthy, not
// overloaded), else -1 with `broken` set when the session had an instance.
struct Affinity {
  int backend = -1;
  bool broken = false;
};
Affinity EvaluateAffinity(const FleetSnapshot& fleet, const OverloadRule& rule);

Decision MakeColocated(const FleetSnapshot& fleet, const Classification& c, int backend);
Decision MakeOffload(const FleetSnapshot& fleet, const Classification& c, int prefill_backend,
                     int decode_backend);
// affinity_hit when the decode backend is the session's instance,
// affinity_broken when the session had another one.
void MarkAffinity(const FleetSnapshot& fleet, Decision& d);

// Uncached tokens of the request on `backend`.
int64_t NewTokensOn(const FleetSnapshot& fleet, int backend);

}  // namespace kvroute::router::policy_internal
