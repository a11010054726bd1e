// JointPlacementPolicy (modes `v1_cost` and `v2` with `offload_gate: joint`):
// picks the prefill site and the decode home of a request together, by the
// placement cost (router/policies/placement_cost.h): the request's own
// predicted time to first token against its class's TTFT SLO, plus the harm
// its prefill does to the decode streams and WARM turns of the instance that
// runs it, plus the resident KV its footprint evicts where it lands.
//
// Which requests: HEAVY ones (new tokens >= heavy_threshold on the best
// instance); with `heavy_threshold: auto`, every request that is not WARM.
// The rest are routed as `baseline`.
//
// Plans considered:
//   - COLO(i) on every healthy instance i, or only on the session's instance
//     when affinity holds (policies/common.h EvaluateAffinity; an
//     overloaded session instance is left out while any other is healthy);
//   - v2 only, OFF(a, b) with b in {the session's instance when affinity
//     holds; otherwise the best cache hit, the cheapest COLO instance and the
//     instance with the most free KV} and a != b among the three instances
//     with the lowest prefill-site score (COLO TTFT / SLO + prefill harm),
//     skipping plans the cost model vetoes (never recompute B's prefix, B's
//     KV full, A queued, no stall saved).
// The cheapest plan wins; ties go to co-location, then the lowest index.
// The Decision carries the plan's predicted TTFT and, for an offload, the
// seconds from the prefill's end to the first token (transfer and B's wait).
// The snapshot's learned time factors (router/rate_learner.h) scale every
// plan's times.
//
// `v1_cost` (COLO only) is co-location done with the same cost, so an
// ablation against `v2` shows what offload adds beyond smarter placement.
// At most 3 x 3 offload pairs are evaluated; nothing is allocated per
// candidate. Thread-safe (stateless after construction).
#pragma once

#include <string_view>

#include "router/policies/cache_aware.h"
#include "router/policies/placement_cost.h"

namespace kvroute::router {

class JointPlacementPolicy : public Policy {
 public:
  // `offload`: whether OFF(a, b) plans are considered.
  JointPlacementPolicy(const Options& options, bool offload);
  absl::StatusOr<Decision> Decide(const FleetSnapshot& fleet) const override;

 private:
  CacheAwarePolicy cache_aware_;
  placement::PlacementParams params_;
  bool offload_;
  bool auto_threshold_;
};

}  // namespace kvroute::router
