#include "router/policies/joint_placement.h"

#include <algorithm>
#include <iterator>

namespace kvroute::router {
namespace {

constexpr int kPrefillSites = 3;
constexpr int kDecodeHomes = 3;

}  // namespace

JointPlacementPolicy::JointPlacementPolicy(const Options& options, bool offload)
    : cache_aware_(options),
      params_(placement::ParamsFromOptions(options)),
      offload_(offload),
      auto_threshold_(options.heavy_threshold_auto) {}

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

  placement::PlanCost best;
  bool have_best = false;
  // The prefill sites with the lowest score, best first.
  int sites[kPrefillSites] = {-1, -1, -1};
  double site_scores[kPrefillSites] = {0, 0, 0};
  int most_free = -1;
  int64_t most_free_tokens = 0;
  for (int i = 0; i < n; ++i) {
    if (!eligible(i)) continue;
    const placement::PlanCost colo = placement::Colocated(fleet, i, c.request_class, params_);
    if ((affinity.backend < 0 || i == affinity.backend) && (!have_best || colo.cost < best.cost)) {
      best = colo;
      have_best = true;
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
  if (!have_best) return policy_internal::NoHealthyBackend();

  if (offload_) {
    int homes[kDecodeHomes] = {-1, -1, -1};
    if (affinity.backend >= 0) {
      homes[0] = affinity.backend;
    } else {
      homes[0] = eligible(c.best_backend) ? c.best_backend : -1;
      homes[1] = best.decode_backend;
      homes[2] = most_free;
    }
    for (int h = 0; h < kDecodeHomes; ++h) {
      const int b = homes[h];
      if (b < 0 || std::find(homes, homes + h, b) != homes + h) continue;
      for (int a : sites) {
        if (a < 0 || a == b) continue;
        const placement::PlanCost off = placement::Offload(fleet, a, b, c.request_class, params_);
        if (off.veto == placement::Veto::kNone && off.cost < best.cost) best = off;
      }
    }
  }

  Decision d = policy_internal::MakeOffload(fleet, c, best.prefill_backend, best.decode_backend);
  policy_internal::MarkAffinity(fleet, d);
  d.predicted_ttft_s = best.ttft_s;
  d.predicted_transfer_s =
      d.mode == DecisionMode::kOffload ? best.transfer_s + best.decode_wait_s : -1;
  return d;
}

}  // namespace kvroute::router
