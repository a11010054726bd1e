#include "router/policies/joint_placement.h"

#include <algorithm>
#include <iterator>

namespace kvroute::router {
namespace {

constexpr int kPrefillSites = 3;
constexpr int kDecodeHomes = 3;

}  // namespace

JointPlacementPolicy::JointPlacementPolicy(const Options& options, bool offload,
                                           std::string_view name)
    : cache_aware_(options),
      params_(placement::ParamsFromOptions(options)),
      offload_(offload),
      auto_threshold_(options.heavy_threshold_auto),
      name_(name) {}

absl::StatusOr<Decision> JointPlacementPolicy::Decide(const FleetSnapshot& fleet) const {
  const policy_internal::Classification c =
      policy_internal::ClassifyFleet(fleet, cache_aware_.thresholds());
  if (c.best_backend < 0) return policy_internal::NoHealthyBackend();
  const bool admitted = auto_threshold_ ? c.request_class != RequestClass::kWarm
                                        : c.request_class == RequestClass::kHeavy;
  if (!admitted) return cache_aware_.Decide(fleet);

  const int n = static_cast<int>(fleet.backends.size());
  const policy_internal::Affinity affinity =
      policy_internal::EvaluateAffinity(fleet, cache_aware_.overload_rule());
  int healthy = 0;
  for (const BackendSnapshot& b : fleet.backends) healthy += b.healthy ? 1 : 0;
  // An overloaded session instance is no candidate while another is healthy.
  const int excluded = affinity.broken && healthy > 1 ? fleet.session_backend : -1;
  auto eligible = [&](int i) { return i >= 0 && fleet.backends[i].healthy && i != excluded; };
  const double ttft_slo = placement::TtftSlo(c.request_class, params_.slo);

  // The request's candidate plans: COLO(i) where affinity allows, and the
  // offloads the cost model does not veto.
  auto colocation_candidate = [&](int i) {
    return eligible(i) && (affinity.backend < 0 || i == affinity.backend);
  };
  double fastest_ttft = -1;
  auto consider_speed = [&](const placement::PlanCost& plan) {
    if (fastest_ttft < 0 || plan.ttft_s < fastest_ttft) fastest_ttft = plan.ttft_s;
  };
  // The prefill sites with the lowest score, best first.
  int sites[kPrefillSites] = {-1, -1, -1};
  double site_scores[kPrefillSites] = {0, 0, 0};
  int most_free = -1;
  int64_t most_free_tokens = 0;
  int cheapest_colo = -1;
  double cheapest_colo_cost = 0;
  for (int i = 0; i < n; ++i) {
    if (!eligible(i)) continue;
    const placement::PlanCost colo = placement::Colocated(fleet, i, c.request_class, params_);
    if (colocation_candidate(i)) {
      consider_speed(colo);
      if (cheapest_colo < 0 || colo.cost < cheapest_colo_cost) {
        cheapest_colo = i;
        cheapest_colo_cost = colo.cost;
      }
    }
    const double score =
        colo.ttft_s / ttft_slo + params_.slo.harm_weight * (colo.stall + colo.warm);
    for (int k = 0; k < kPrefillSites; ++k) {
      if (sites[k] >= 0 && score >= site_scores[k]) continue;
      for (int m = kPrefillSites - 1; m > k; --m) {
        sites[m] = sites[m - 1];
        site_scores[m] = site_scores[m - 1];
      }
      sites[k] = i;
      site_scores[k] = score;
      break;
    }
    const BackendSnapshot& b = fleet.backends[i];
    if (b.kv_capacity_tokens > 0) {
      const int64_t free_tokens = b.kv_capacity_tokens - b.inflight_tokens;
      if (most_free < 0 || free_tokens > most_free_tokens) {
        most_free = i;
        most_free_tokens = free_tokens;
      }
    }
  }
  if (cheapest_colo < 0) return policy_internal::NoHealthyBackend();

  placement::PlanCost offloads[kPrefillSites * kDecodeHomes];
  int offload_count = 0;
  if (offload_) {
    int homes[kDecodeHomes] = {-1, -1, -1};
    if (affinity.backend >= 0) {
      homes[0] = affinity.backend;
    } else {
      homes[0] = eligible(c.best_backend) ? c.best_backend : -1;
      homes[1] = cheapest_colo;
      homes[2] = most_free;
    }
    for (int h = 0; h < kDecodeHomes; ++h) {
      const int b = homes[h];
      if (b < 0 || std::find(homes, homes + h, b) != homes + h) continue;
      for (int a : sites) {
        if (a < 0 || a == b) continue;
        const placement::PlanCost off = placement::Offload(fleet, a, b, c.request_class, params_);
        if (off.veto != placement::Veto::kNone) continue;
        consider_speed(off);
        offloads[offload_count++] = off;
      }
    }
  }

  // The harm terms may trade only a bounded part of the request's own TTFT.
  const double ttft_bound = fastest_ttft * (1 + params_.slo.max_ttft_stretch);
  placement::PlanCost best;
  bool have_best = false;
  auto take_if_better = [&](const placement::PlanCost& plan) {
    if (plan.ttft_s > ttft_bound) return;
    if (!have_best || plan.cost < best.cost) {
      best = plan;
      have_best = true;
    }
  };
  for (int i = 0; i < n; ++i) {
    if (colocation_candidate(i)) {
      take_if_better(placement::Colocated(fleet, i, c.request_class, params_));
    }
  }
  for (int k = 0; k < offload_count; ++k) take_if_better(offloads[k]);

  Decision d = policy_internal::MakeOffload(fleet, c, best.prefill_backend, best.decode_backend);
  policy_internal::MarkAffinity(fleet, d);
  d.predicted_ttft_s = best.ttft_s;
  d.predicted_transfer_s =
      d.mode == DecisionMode::kOffload ? best.transfer_s + best.decode_wait_s : -1;
  return d;
}

}  // namespace kvroute::router
