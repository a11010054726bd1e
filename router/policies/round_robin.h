// RoundRobinPolicy (mode `round_robin`): the (sequence mod healthy count)-th healthy backend, so
// the same snapshot always picks the same backend and healthy backends share requests evenly.
// Ignores caches, load and sessions (the class is still computed). Thread-safe (stateless).
#pragma once

#include "classifier/classifier.h"
#include "router/policy.h"

namespace kvroute::router {

class RoundRobinPolicy : public Policy {
 public:
  explicit RoundRobinPolicy(classifier::Thresholds thresholds) : thresholds_(thresholds) {}
  absl::StatusOr<Decision> Decide(const FleetSnapshot& fleet) const override;

 private:
  classifier::Thresholds thresholds_;
};

}  // namespace kvroute::router
