#include "router/policies/round_robin.h"

#include "router/policies/common.h"

namespace kvroute::router {

absl::StatusOr<Decision> RoundRobinPolicy::Decide(const FleetSnapshot& fleet) const {
  const policy_internal::Classification c = policy_internal::ClassifyFleet(fleet, thresholds_);
  if (c.best_backend < 0) return policy_internal::NoHealthyBackend();
  uint64_t healthy = 0;
  for (const BackendSnapshot& b : fleet.backends) healthy += b.healthy ? 1 : 0;
  uint64_t k = fleet.sequence % healthy;
  for (int i = 0; i < static_cast<int>(fleet.backends.size()); ++i) {
    if (!fleet.backends[i].healthy) continue;
    if (k-- == 0) return policy_internal::MakeColocated(fleet, c, i);
  }
  return policy_internal::NoHealthyBackend();  // unreachable
}

}  // namespace kvroute::router
