// HeavyToLeastDecodePolicy (mode `v1`, adaptive routing, Exp B): WARM and MEDIUM as `baseline`;
// HEAVY is co-located on the healthy instance with the least decode load (fewest decoding requests,
// then fewest in-flight tokens, then lowest index), so the long prefill stalls as few running
// decodes as possible. A HEAVY request has, by definition, at least heavy_threshold uncached tokens
// even on the best instance, so leaving its session's instance forfeits little cache; the Decision
// then says affinity_broken. Thread-safe (stateless).
#pragma once

#include "router/policies/cache_aware.h"

namespace kvroute::router {

class HeavyToLeastDecodePolicy : public Policy {
 public:
  explicit HeavyToLeastDecodePolicy(const Options& options) : cache_aware_(options) {}
  absl::StatusOr<Decision> Decide(const FleetSnapshot& fleet) const override;

 private:
  CacheAwarePolicy cache_aware_;
};

}  // namespace kvroute::router
