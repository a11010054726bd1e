#include "router/policy_factory.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "router/policies/baseline.h"
#include "router/policies/least_loaded.h"
#include "router/policies/pd_sep.h"
#include "router/policies/round_robin.h"
#include "router/policies/v1.h"
#include "router/policies/v2.h"

namespace kvroute::router {

const std::vector<std::string>& PolicyNames() {
  static const auto* const kNames =
      new std::vector<std::string>{"round_robin", "least_loaded", "baseline", "v1", "v2", "pd_sep"};
  return *kNames;
}

absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(const Options& options,
                                                   const std::vector<BackendSpec>& backends) {
  const std::string& name = options.policy;
  if (name == "round_robin") return std::make_unique<RoundRobinPolicy>(options.thresholds);
  if (name == "least_loaded") return std::make_unique<LeastLoadedPolicy>(options.thresholds);
  if (name == "baseline") return std::make_unique<BaselinePolicy>(options);
  if (name == "v1") return std::make_unique<V1Policy>(options);
  if (name == "v2") {
    if (options.offload_gate == "threshold") {
      return std::make_unique<V2Policy>(options, V2Policy::Gate::kThreshold);
    }
    if (options.offload_gate == "cost") {
      return std::make_unique<V2Policy>(options, V2Policy::Gate::kCost);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("offload_gate: unknown value '", options.offload_gate, "' (threshold|cost)"));
  }
  if (name == "pd_sep") {
    int prefill = 0;
    int decode = 0;
    for (const BackendSpec& b : backends) {
      prefill += b.role != BackendRole::kDecode ? 1 : 0;
      decode += b.role != BackendRole::kPrefill ? 1 : 0;
    }
    if (backends.size() < 2 || prefill == 0 || decode == 0) {
      return absl::InvalidArgumentError(
          "policy pd_sep needs at least two backends, one that can prefill "
          "(role prefill|both) and one that can decode (role decode|both)");
    }
    return std::make_unique<PdSepPolicy>(options.thresholds);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("policy: unknown value '", name, "' (", absl::StrJoin(PolicyNames(), "|"), ")"));
}

}  // namespace kvroute::router
