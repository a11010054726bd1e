// CacheAwarePolicy (mode `baseline`): cache-aware routing with token-level load balance and session
// affinity (DESIGN.md §3, Exp A). Every class is routed the same way.
//
// Scoring. For each healthy instance i the policy estimates the request's
// time to first token there, in prefill-token units (divide by a prefill
// rate to get seconds; the rate is common to a homogeneous fleet so it drops
// out of the argmin):
//
//   cost_i = new_tokens_i                        (prompt - cached_i: own work)
//          + prefill_queue_weight  x inflight_prefill_tokens_i  (work ahead)
//          + decode_tokens_weight  x inflight_tokens_i  (decode batch sharing
//                                    each prefill step, KV memory pressure)
//          + waiting_penalty_tokens x engine_waiting_i  (requests the engine
//                                    itself queues, e.g. from other clients)
//          + admission_weight x shortfall_i  (KV that requests in flight must
//                                    free before this one fits: it waits)
//          + eviction_weight x evicted_i  (resident session KV this placement
//                                    pushes out: prefill a session pays again)
//
// and picks the lowest cost (ties: lowest index). Because cache hit and load
// are in one unit, a hit of H tokens is worth exactly H tokens of queued
// prefill elsewhere: there is no free constant trading a hit ratio against a
// load ratio, and a cold request degenerates to "least prefill work queued".
// The decode weight is small because decode tokens slow a prefill step only
// marginally; the waiting penalty covers load this router cannot see.
//
// The two memory terms (policies/common.h) are what make a session's home
// one where the resident sessions' KV fits: while some instance has room,
// filling one that has none costs the evicted tokens; when every pool
// overflows they cost the same everywhere and load decides.
//
// Affinity: a request whose session has an instance goes there unless that
// instance is unhealthy or overloaded (in-flight tokens > max(overload_factor
// x healthy-fleet mean, overload_min_tokens)), or has evicted the session's
// prefix (FleetSnapshot::session_prefix_evicted); then it is scored
// like any other, except that an overloaded session instance is left out
// while any other healthy instance exists. The Decision says affinity_broken
// whenever the session lands elsewhere.
//
// Thread-safe (stateless after construction).
#pragma once

#include "classifier/classifier.h"
#include "router/policies/common.h"
#include "router/policy.h"
#include "router/router.h"

namespace kvroute::router {

class CacheAwarePolicy : public Policy {
 public:
  explicit CacheAwarePolicy(const Options& options);
  std::string_view name() const override { return "baseline"; }
  absl::StatusOr<Decision> Decide(const FleetSnapshot& fleet) const override;

  // The score above, for one backend of `fleet` (lower is better).
  double Cost(const FleetSnapshot& fleet, int backend) const;
  // argmin Cost over healthy backends other than `exclude`, -1 when none.
  int BestByCost(const FleetSnapshot& fleet, int exclude = -1) const;
  const policy_internal::OverloadRule& overload_rule() const { return overload_; }
  const classifier::Thresholds& thresholds() const { return thresholds_; }

 private:
  classifier::Thresholds thresholds_;
  Options::BaselineWeights weights_;
  policy_internal::OverloadRule overload_;
};

}  // namespace kvroute::router
