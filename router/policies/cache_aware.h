// CacheAwarePolicy (mode `baseline`): cache-aware routing with token-level load balance and session
// affinity (DESIGN.md §3, Exp A). Every class is scored by the same cost.
//
// Scoring. For each healthy instance i the policy estimates the request's
// time to first token there, in prefill-token units (divide by a prefill
// rate to get seconds; the rate is common to a homogeneous fleet so it drops
// out of the argmin):
//
//   cost_i = own_i                               (own work: new_i = prompt -
//                                    cached_i, plus attention_weight x a x
//                                    r x new_i x (cached_i + new_i / 2), a
//                                    = the profile's attention seconds per
//                                    token pair, r = the prefill rate)
//          x (1 + decode_stall_weight x decoding_i)  (streams the prefill
//                                    stalls; 0 for a request WARM on i)
//          + prefill_queue_weight  x inflight_prefill_tokens_i  (work ahead)
//          + decode_tokens_weight  x inflight_tokens_i  (decode batch sharing
//                                    each prefill step, KV memory pressure)
//          + waiting_penalty_tokens x engine_waiting_i  (requests the engine
//                                    itself queues, e.g. from other clients)
//          + admission_weight x shortfall_i  (KV that requests in flight must
//                                    free before this one fits: it waits)
//          + eviction_weight x evicted_i  (resident session KV this placement
//                                    pushes out: prefill a session pays again)
//          + reload_weight x host_reload_i  (cached tokens only the host tier
//                                    holds: KV bytes per token x prefill rate
//                                    / host link bandwidth, Options::host_tier)
//          + pool_weight x pool_reload_i  (the same for the fleet-shared pool,
//                                    over the instance's NIC; each reload
//                                    term times the instance's learned
//                                    reload factor for that tier)
//
// and picks the lowest cost (ties: lowest index). Because cache hit and load
// are in one unit, a hit of H tokens is worth exactly H tokens of queued
// prefill elsewhere: there is no free constant trading a hit ratio against a
// load ratio, and a cold request degenerates to "least prefill work queued".
// The decode weight is small because decode tokens slow a prefill step only
// marginally; the waiting penalty covers load this router cannot see.
//
// The attention weight (0 by default: new tokens count linearly) prices a
// prefill at the time it takes: each new token attends to the cached prefix
// and the new tokens before it, so recomputing a long context costs several
// times its token count (68K new tokens after 22K cached: 5x on the H20
// profile). At 1 a session's turn rarely leaves a crowded home whose cache
// (or host tier) holds its context for an instance that would recompute it:
// the fleet computes less and the tail of TTFT and job times shortens, while
// the turns queued at the crowded homes miss a tight WARM SLO more often
// (bench/kvroute_bench/README.md, "Pricing a recompute's attention").
//
// The stall factor prices the decode streams a long prefill holds up: chunked
// prefill shares every engine step with the decode batch, so each of the
// decoding_i streams on i runs at the chunk's step time for as long as the
// prefill lasts. With weight 1 a stream's stall counts as much as the
// request's own wait (placement_cost.h, at its default SLOs, weighs one
// stream's stall at about 1.2 times a HEAVY request's own). A WARM turn's prefill
// is a step or two, and moving it off its cache would cost its session more
// than the streams lose, so it pays no stall where it is WARM; where its
// prefix is missing (a turn leaving an overloaded home) it is a cold prompt
// and pays as one. The term steers cold prompts
// to instances whose resident sessions are not mid-answer: a session that is
// decoding will send its next turn soon, and a long prefill there would both
// delay that turn and evict its KV.
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
#include "router/options.h"

namespace kvroute::router {

class CacheAwarePolicy : public Policy {
 public:
  explicit CacheAwarePolicy(const Options& options);
  absl::StatusOr<Decision> Decide(const FleetSnapshot& fleet) const override;

  // The score above, for one backend of `fleet` and a request of class `c`
  // (lower is better).
  double Cost(const FleetSnapshot& fleet, int backend, RequestClass c) const;
  // argmin Cost over healthy backends other than `exclude`, -1 when none.
  int BestByCost(const FleetSnapshot& fleet, RequestClass c, int exclude = -1) const;
  const policy_internal::OverloadRule& overload_rule() const { return overload_; }
  const classifier::Thresholds& thresholds() const { return thresholds_; }

 private:
  classifier::Thresholds thresholds_;
  Options::BaselineWeights weights_;
  double host_reload_weight_ = 0;  // prefill tokens per host-reloaded token
  double pool_reload_weight_ = 0;  // prefill tokens per pool-reloaded token
  classifier::OffloadCostParams rates_;  // the prefill rate and attention cost
  policy_internal::OverloadRule overload_;
};

}  // namespace kvroute::router
