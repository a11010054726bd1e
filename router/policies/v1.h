// v1 (adaptive routing, Exp B): WARM and MEDIUM as `baseline`; HEAVY is
// co-located on the healthy instance with the least decode load (fewest
// decoding requests, then fewest in-flight tokens, then lowest index), so
// the long prefill stalls as few running decodes as possible. A HEAVY request
// has, by definition, at least heavy_threshold uncached tokens even on the
// best instance, so leaving its session's instance forfeits little cache;
// the Decision then says affinity_broken. Thread-safe (stateless).
#pragma once

#include "router/policies/baseline.h"

namespace kvroute::router {

class V1Policy : public Policy {
 public:
  explicit V1Policy(const Options& options) : baseline_(options) {}
  std::string_view name() const override { return "v1"; }
  absl::StatusOr<Decision> Decide(const FleetSnapshot& fleet) const override;

 private:
  BaselinePolicy baseline_;
};

}  // namespace kvroute::router
