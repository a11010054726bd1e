#include "router/policies/static_pd.h"

#include <tuple>

#include "router/policies/common.h"

namespace kvroute::router {
namespace {

bool CanPrefill(BackendRole r) { return r != BackendRole::kDecode; }
bool CanDecode(BackendRole r) { return r != BackendRole::kPrefill; }

int BestPrefill(const FleetSnapshot& fleet, int exclude) {
  int best = -1;
  int64_t best_work = 0;
  for (int i = 0; i < static_cast<int>(fleet.backends.size()); ++i) {
    const BackendSnapshot& b = fleet.backends[i];
    if (i == exclude || !b.healthy || !CanPrefill(b.role)) continue;
    const int64_t work = b.inflight_prefill_tokens + policy_internal::NewTokensOn(fleet, i);
    if (best < 0 || work < best_work) {
      best = i;
      best_work = work;
    }
  }
  return best;
}

int BestDecode(const FleetSnapshot& fleet, int exclude) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(fleet.backends.size()); ++i) {
    const BackendSnapshot& b = fleet.backends[i];
    if (i == exclude || !b.healthy || !CanDecode(b.role)) continue;
    if (best < 0) {
      best = i;
      continue;
    }
    const BackendSnapshot& o = fleet.backends[best];
    if (std::tie(b.inflight_tokens, b.decoding_requests) <
        std::tie(o.inflight_tokens, o.decoding_requests)) {
      best = i;
    }
  }
  return best;
}

}  // namespace

absl::Status StaticPdPolicy::CheckPools(const std::vector<BackendSpec>& backends) {
  int prefill = 0;
  int decode = 0;
  for (const BackendSpec& b : backends) {
    prefill += CanPrefill(b.role) ? 1 : 0;
    decode += CanDecode(b.role) ? 1 : 0;
  }
  if (backends.size() >= 2 && prefill > 0 && decode > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "backends: mode pd_sep needs at least two backends, one that can prefill "
      "(role prefill|both) and one that can decode (role decode|both)");
}

absl::StatusOr<Decision> StaticPdPolicy::Decide(const FleetSnapshot& fleet) const {
  const policy_internal::Classification c = policy_internal::ClassifyFleet(fleet, thresholds_);
  if (c.best_backend < 0) return policy_internal::NoHealthyBackend();
  int prefill = BestPrefill(fleet, -1);
  int decode = BestDecode(fleet, prefill);
  if (prefill < 0 || decode < 0) {
    decode = BestDecode(fleet, -1);
    prefill = BestPrefill(fleet, decode);
  }
  if (prefill >= 0 && decode >= 0) {
    return policy_internal::MakeOffload(fleet, c, prefill, decode);
  }
  // No distinct pair: serve co-located on the least-loaded healthy instance.
  int best = -1;
  for (int i = 0; i < static_cast<int>(fleet.backends.size()); ++i) {
    const BackendSnapshot& b = fleet.backends[i];
    if (!b.healthy) continue;
    if (best < 0 || b.inflight_tokens < fleet.backends[best].inflight_tokens) best = i;
  }
  return policy_internal::MakeColocated(fleet, c, best);
}

}  // namespace kvroute::router
