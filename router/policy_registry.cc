#include "router/policy_registry.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "router/policies/cache_aware.h"
#include "router/policies/heavy_offload.h"
#include "router/policies/heavy_to_least_decode.h"
#include "router/policies/joint_placement.h"
#include "router/policies/least_loaded.h"
#include "router/policies/round_robin.h"
#include "router/policies/static_pd.h"

namespace kvroute::router {
namespace {

constexpr PolicyEntry kPolicies[] = {
    {"round_robin", "healthy backends in turn; ignores caches and load", nullptr,
     [](const Options& o) -> std::unique_ptr<Policy> {
       return std::make_unique<RoundRobinPolicy>(o.thresholds);
     }},
    {"least_loaded", "the healthy backend with the fewest requests in flight", nullptr,
     [](const Options& o) -> std::unique_ptr<Policy> {
       return std::make_unique<LeastLoadedPolicy>(o.thresholds);
     }},
    {"baseline", "cache-aware: lowest estimated time to first token, session affinity", nullptr,
     [](const Options& o) -> std::unique_ptr<Policy> {
       return std::make_unique<CacheAwarePolicy>(o);
     },
     /*homes_sessions=*/true},
    {"v1", "baseline; HEAVY requests go to the instance with the least decode load", nullptr,
     [](const Options& o) -> std::unique_ptr<Policy> {
       return std::make_unique<HeavyToLeastDecodePolicy>(o);
     },
     /*homes_sessions=*/true},
    {"v1_cost",
     "HEAVY co-located where predicted TTFT plus harm to other streams (SLO-weighted) is least",
     nullptr,
     [](const Options& o) -> std::unique_ptr<Policy> {
       return std::make_unique<JointPlacementPolicy>(o, /*offload=*/false, "v1_cost");
     },
     /*homes_sessions=*/true},
    {"v2", "HEAVY prefill site and decode home chosen together; offloads only where that wins",
     [](const Options& o, const std::vector<BackendSpec>&) {
       return HeavyOffloadPolicy::ParseGate(o.offload_gate).status();
     },
     [](const Options& o) -> std::unique_ptr<Policy> {
       const HeavyOffloadPolicy::Gate gate = *HeavyOffloadPolicy::ParseGate(o.offload_gate);
       if (gate == HeavyOffloadPolicy::Gate::kJoint) {
         return std::make_unique<JointPlacementPolicy>(o, /*offload=*/true, "v2");
       }
       return std::make_unique<HeavyOffloadPolicy>(o, gate);
     },
     /*homes_sessions=*/true},
    {"pd_sep", "every request prefills in the prefill pool and decodes in the decode pool",
     [](const Options&, const std::vector<BackendSpec>& backends) {
       return StaticPdPolicy::CheckPools(backends);
     },
     [](const Options& o) -> std::unique_ptr<Policy> {
       return std::make_unique<StaticPdPolicy>(o.thresholds);
     }},
};

}  // namespace

absl::Span<const PolicyEntry> Policies() { return kPolicies; }

const PolicyEntry* FindPolicy(std::string_view name) {
  for (const PolicyEntry& e : kPolicies) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

const std::vector<std::string>& PolicyNames() {
  static const auto* const kNames = [] {
    auto* names = new std::vector<std::string>;
    for (const PolicyEntry& e : kPolicies) names->emplace_back(e.name);
    return names;
  }();
  return *kNames;
}

absl::Status CheckPolicyName(std::string_view name) {
  if (FindPolicy(name) != nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("mode: unknown mode '", absl::string_view(name.data(), name.size()),
                   "' (expected one of ", absl::StrJoin(PolicyNames(), ", "), ")"));
}

absl::Status ValidatePolicy(const Options& options, const std::vector<BackendSpec>& backends) {
  const PolicyEntry* e = FindPolicy(options.mode);
  if (e == nullptr) return CheckPolicyName(options.mode);
  if (e->validate == nullptr) return absl::OkStatus();
  return e->validate(options, backends);
}

absl::StatusOr<std::unique_ptr<Policy>> MakePolicy(const Options& options,
                                                   const std::vector<BackendSpec>& backends) {
  if (absl::Status st = ValidatePolicy(options, backends); !st.ok()) return st;
  return FindPolicy(options.mode)->make(options);
}

std::string PolicyHelp() {
  size_t width = 0;
  for (const PolicyEntry& e : kPolicies) width = std::max(width, e.name.size());
  std::string out;
  for (const PolicyEntry& e : kPolicies) {
    out += "\n  ";
    out += e.name;
    out.append(width - e.name.size() + 2, ' ');
    out += e.description;
  }
  return out;
}

}  // namespace kvroute::router
