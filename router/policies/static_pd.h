// StaticPdPolicy (mode `pd_sep`): the PD-separated reference. Every request is an OFFLOAD from the
// prefill pool (BackendRole kPrefill or kBoth) to the decode pool (kDecode or
// kBoth), A != B. A = the prefill-pool instance that would finish the
// prefill first (inflight_prefill_tokens + new tokens there, then lowest
// index); B = the decode-pool instance holding the fewest in-flight tokens
// (KV memory is the decode pool's binding resource; ties: fewer decoding
// requests, lowest index). When no distinct healthy pair exists the request
// is served co-located on the least-loaded healthy instance rather than
// refused. Sessions are ignored (the decode pool receives KV anyway).
// Thread-safe (stateless).
#pragma once

#include <vector>

#include "classifier/classifier.h"
#include "router/policy.h"
#include "router/options.h"

namespace kvroute::router {

class StaticPdPolicy : public Policy {
 public:
  explicit StaticPdPolicy(classifier::Thresholds thresholds) : thresholds_(thresholds) {}
  // OK when `backends` has two instances or more, one that can prefill
  // (role prefill|both) and one that can decode (role decode|both);
  // InvalidArgument naming backends otherwise.
  static absl::Status CheckPools(const std::vector<BackendSpec>& backends);
  absl::StatusOr<Decision> Decide(const FleetSnapshot& fleet) const override;

 private:
  classifier::Thresholds thresholds_;
};

}  // namespace kvroute::router
