// LeastLoadedPolicy (mode `least_loaded`): the healthy backend with the fewest in-flight requests;
// ties go to the lowest index. Ignores caches and sessions (the class is still computed).
// Thread-safe (stateless).
#pragma once

#include "classifier/classifier.h"
#include "router/policy.h"

namespace kvroute::router {

class LeastLoadedPolicy : public Policy {
 public:
  explicit LeastLoadedPolicy(classifier::Thresholds thresholds) : thresholds_(thresholds) {}
  absl::StatusOr<Decision> Decide(const FleetSnapshot& fleet) const override;

 private:
  classifier::Thresholds thresholds_;
};

}  // namespace kvroute::router
