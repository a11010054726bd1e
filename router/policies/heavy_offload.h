// HeavyOffloadPolicy (mode `v2`, adaptive offload, Exp D): WARM and MEDIUM as `baseline`; HEAVY
// becomes an OFFLOAD: decode on B, prefill on A != B, KV moved by the engines.
//
// B keeps the cache: the session's instance when affinity holds (healthy,
// not overloaded), else the best cache hit (ties: lower baseline cost, then
// lowest index; an overloaded session instance only when nothing else is
// healthy). B's cache is where the conversation's KV will keep growing.
//
// Choice of A: the healthy instance other than B that would finish this
// prefill first, i.e. minimal  inflight_prefill_tokens_A + new_tokens_A
// (prefill work queued ahead of us plus our own uncached tokens there; ties:
// fewer decoding requests, then lowest index). "Least loaded by prefill
// tokens" alone would ignore a partial hit on A; adding new_tokens_A makes A
// cache-aware without letting a small hit outweigh a long queue.
//
// offload_gate: "threshold" offloads every HEAVY request (keeps the
// heavy-threshold ablation pure); "cost" asks classifier::EstimateOffload and
// serves the request as `baseline` would when the KV transfer costs more
// than the prefill time it saves on B. With a single healthy instance the
// request is served co-located. The default gate, "joint", is not this
// class: `v2` is then JointPlacementPolicy (policies/joint_placement.h).
// Thread-safe (stateless).
#pragma once

#include "router/policies/cache_aware.h"

namespace kvroute::router {

class HeavyOffloadPolicy : public Policy {
 public:
  enum class Gate { kThreshold, kCost, kJoint };
  // Options::offload_gate ("joint" | "threshold" | "cost") as a Gate;
  // InvalidArgument naming offload_gate otherwise.
  static absl::StatusOr<Gate> ParseGate(std::string_view gate);

  HeavyOffloadPolicy(const Options& options, Gate gate)
      : cache_aware_(options), gate_(gate), cost_(options.offload_cost) {}
  absl::StatusOr<Decision> Decide(const FleetSnapshot& fleet) const override;

 private:
  CacheAwarePolicy cache_aware_;
  Gate gate_;
  classifier::OffloadCostParams cost_;
};

}  // namespace kvroute::router
