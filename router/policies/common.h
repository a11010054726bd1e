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

// The session's instance if it may keep the session, else -1:
//   - unhealthy or overloaded: `broken`, and the policy leaves it out while
//     any other healthy instance exists;
//   - it evicted the session's prefix (FleetSnapshot::session_prefix_evicted):
//     -1 without `broken`: the instance is scored like any other, since a cold
//     prefill costs about the same wherever it runs and the session may move
//     to where it is cheapest.
struct Affinity {
  int backend = -1;
  bool broken = false;
};
Affinity EvaluateAffinity(const FleetSnapshot& fleet, const OverloadRule& rule);

// KV memory terms of placing the request on `backend`, in tokens; 0 when the
// backend's capacity is unknown.
// Tokens requests in flight there must free before the request's footprint
// fits the pool (the engine keeps it waiting until then).
int64_t AdmissionShortfall(const FleetSnapshot& fleet, int backend);
// Resident session KV the request pushes out of the pool: how far the new
// KV it adds (its footprint less what the instance already holds of it;
// on the session's own instance the whole footprint, since the session's
// old footprint is not counted there) takes the resident demand past the
// capacity that keeps them (the pool, or BackendSnapshot::
// resident_capacity_tokens if larger), beyond what already overflowed. Evicted tokens are prefill
// some session pays again.
int64_t EvictedResident(const FleetSnapshot& fleet, int backend);

Decision MakeColocated(const FleetSnapshot& fleet, const Classification& c, int backend);
Decision MakeOffload(const FleetSnapshot& fleet, const Classification& c, int prefill_backend,
                     int decode_backend);
// affinity_hit when the decode backend is the session's instance,
// affinity_broken when the session had another one.
void MarkAffinity(const FleetSnapshot& fleet, Decision& d);

// Uncached tokens of the request on `backend`.
int64_t NewTokensOn(const FleetSnapshot& fleet, int backend);

}  // namespace kvroute::router::policy_internal
