#include "router/policy_registry.h"

#include <algorithm>
#include <memory>
#include <utility>

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
    {.name = "round_robin",
     .description = "healthy backends in turn; ignores caches and load",
     .validate = nullptr,
     .make = [](const Options& o) -> std::unique_ptr<Policy> {
       return std::make_unique<RoundRobinPolicy>(o.thresholds);
     }},
    {.name = "least_loaded",
     .description = "the healthy backend with the fewest requests in flight",
     .validate = nullptr,
     .make = [](const Options& o) -> std::unique_ptr<Policy> {
       return std::make_unique<LeastLoadedPolicy>(o.thresholds);
     }},
    {.name = "baseline",
     .description = "cache-aware: lowest estimated time to first token, session affinity",
     .validate = nullptr,
     .make = [](const Options& o) -> std::unique_ptr<Policy> {
       return std::make_unique<CacheAwarePolicy>(o);
     },
     .homes_sessions = true},
    {.name = "v1",
     .description = "baseline; HEAVY requests go to the instance with the least decode load",
     .validate = nullptr,
     .make = [](const Options& o) -> std::unique_ptr<Policy> {
       return std::make_unique<HeavyToLeastDecodePolicy>(o);
     },
     .homes_sessions = true,
     .threshold_sensitive = true},
    {.name = "v1_cost",
     .description =
         "HEAVY co-located where predicted TTFT plus harm to other streams (SLO-weighted) is least",
     .validate = nullptr,
     .make = [](const Options& o) -> std::unique_ptr<Policy> {
       return std::make_unique<JointPlacementPolicy>(o, /*offload=*/false);
     },
     .homes_sessions = true,
     .threshold_sensitive = true},
    {.name = "v2",
     .description =
         "HEAVY prefill site and decode home chosen together; offloads only where that wins",
     .validate = [](const Options& o, const std::vector<BackendSpec>&) {
       return HeavyOffloadPolicy::ParseGate(o.offload_gate).status();
     },
     .make = [](const Options& o) -> std::unique_ptr<Policy> {
       const HeavyOffloadPolicy::Gate gate = *HeavyOffloadPolicy::ParseGate(o.offload_gate);
       if (gate == HeavyOffloadPolicy::Gate::kJoint) {
         return std::make_unique<JointPlacementPolicy>(o, /*offload=*/true);
       }
       return std::make_unique<HeavyOffloadPolicy>(o, gate);
     },
     .homes_sessions = true,
     .threshold_sensitive = true,
     .needs_connector = true},
    {.name = "pd_sep",
     .description = "every request prefills in the prefill pool and decodes in the decode pool",
     .validate = [](const Options&, const std::vector<BackendSpec>& backends) {
       return StaticPdPolicy::CheckPools(backends);
     },
     .make = [](const Options& o) -> std::unique_ptr<Policy> {
       return std::make_unique<StaticPdPolicy>(o.thresholds);
     },
     .needs_connector = true},
};

}  // namespace

// Policy::name_ is private; the table that builds a policy names it.
class PolicyNaming {
 public:
  static void Name(Policy& policy, std::string_view name) { policy.name_ = name; }
};

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

std::vector<std::string> PolicyNamesWith(bool PolicyEntry::*property) {
  std::vector<std::string> names;
  for (const PolicyEntry& e : kPolicies) {
    if (e.*property) names.emplace_back(e.name);
  }
  return names;
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
  const PolicyEntry* e = FindPolicy(options.mode);
  std::unique_ptr<Policy> policy = e->make(options);
  PolicyNaming::Name(*policy, e->name);
  return policy;
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

std::string ModeList() {
  const std::pair<std::string_view, bool PolicyEntry::*> properties[] = {
      {"threshold_sensitive", &PolicyEntry::threshold_sensitive},
      {"homes_sessions", &PolicyEntry::homes_sessions},
      {"needs_connector", &PolicyEntry::needs_connector},
  };
  std::string out;
  for (const PolicyEntry& e : kPolicies) {
    out += e.name;
    for (const auto& [key, member] : properties) {
      absl::StrAppend(&out, " ", absl::string_view(key.data(), key.size()), "=",
                      e.*member ? "yes" : "no");
    }
    out += "\n";
  }
  return out;
}

}  // namespace kvroute::router
