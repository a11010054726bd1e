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
//
// and picks the lowest cost (ties: lowest index). Because cache hit and load
// are in one unit, a hit of H tokens is worth exactly H tokens of queued
// prefill elsewhere: there is no free constant trading a hit ratio against a
// load ratio, and a cold request degenerates to "least prefill work queued".
// The decode weight is small because decode tokens slow a prefill step only
// marginally; the waiting penalty covers load this router cannot see.
//
// Affinity: a request whose session has an instance goes there unless that
// instance is unhealthy or overloaded (in-flight tokens > max(overload_factor
// x healthy-fleet mean, overload_min_tokens)); then it is scored like any
// other, except that an overloaded session instance is left out while any
// other healthy instance exists, and the Decision says affinity_broken.
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
