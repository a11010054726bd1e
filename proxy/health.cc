#include "proxy/health.h"

#include <algorithm>
#include <utility>

namespace kvroute::proxy {

std::string_view ToString(BreakerState s) {
  switch (s) {
    case BreakerState::kClosed:
      return "closed";
    case BreakerState::kOpen:
      return "open";
    case BreakerState::kHalfOpen:
      return "half_open";
  }
  return "closed";
}

HealthTracker::HealthTracker(int backends, HealthOptions options, OnChange on_change)
    : options_(std::move(options)), on_change_(std::move(on_change)) {
  absl::MutexLock lock(&mu_);
  backends_.resize(std::max(0, backends));
  probe_failures_.assign(backends_.size(), 0);
  probe_successes_.assign(backends_.size(), 0);
}

void HealthTracker::Update(int backend, bool was_routable, std::string reason) {
  const bool now_routable = backends_[backend].routable();
  if (now_routable == was_routable || !on_change_) return;
  on_change_(HealthChange{backend, now_routable, std::move(reason)});
}

void HealthTracker::Open(BackendHealth& h, absl::Time now) {
  h.breaker = BreakerState::kOpen;
  h.ejections_in_a_row = std::min(h.ejections_in_a_row + 1, 30);
  absl::Duration d = options_.ejection;
  for (int i = 1; i < h.ejections_in_a_row && d < options_.max_ejection; ++i) d *= 2;
  h.open_until = now + std::min(d, options_.max_ejection);
}

void HealthTracker::OnProbe(int backend, bool ok, absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (backend < 0 || backend >= static_cast<int>(backends_.size())) return;
  BackendHealth& h = backends_[backend];
  const bool was = h.routable();
  if (ok) {
    probe_failures_[backend] = 0;
    ++probe_successes_[backend];
    if (!h.active_up && probe_successes_[backend] >= options_.healthy_after) h.active_up = true;
  } else {
    probe_successes_[backend] = 0;
    ++probe_failures_[backend];
    if (h.active_up && probe_failures_[backend] >= options_.unhealthy_after) h.active_up = false;
  }
  Update(backend, was, ok ? "health_check_recovered" : "health_check");
}

void HealthTracker::OnRequest(int backend, bool ok, absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (backend < 0 || backend >= static_cast<int>(backends_.size())) return;
  BackendHealth& h = backends_[backend];
  const bool was = h.routable();
  if (ok) {
    h.consecutive_failures = 0;
    if (h.breaker == BreakerState::kHalfOpen) {
      h.breaker = BreakerState::kClosed;
      h.ejections_in_a_row = 0;
    }
    return;  // a success never changes routability
  }
  ++h.consecutive_failures;
  std::string reason;
  if (h.breaker == BreakerState::kHalfOpen) {
    Open(h, now);
    reason = "half_open_failure";
  } else if (h.breaker == BreakerState::kClosed &&
             h.consecutive_failures >= options_.passive_failures) {
    Open(h, now);
    reason = "passive_failures";
  }
  Update(backend, was, std::move(reason));
}

void HealthTracker::Tick(absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (int b = 0; b < static_cast<int>(backends_.size()); ++b) {
    BackendHealth& h = backends_[b];
    if (h.breaker != BreakerState::kOpen || now < h.open_until) continue;
    const bool was = h.routable();
    h.breaker = BreakerState::kHalfOpen;
    h.consecutive_failures = 0;
    Update(b, was, "ejection_expired");
  }
}

void HealthTracker::OnProgress(int backend, const EngineProgress& p, absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (backend < 0 || backend >= static_cast<int>(backends_.size())) return;
  BackendHealth& h = backends_[backend];
  if (p.work_counter < 0) return;  // the engine publishes no counter: no judgement
  const bool moved = h.work_counter < 0 || p.work_counter != h.work_counter;
  h.work_counter = p.work_counter;
  if (moved || !p.holds_requests) {
    h.progress_at = now;
    h.hung = false;
    return;
  }
  if (options_.hung_after <= absl::ZeroDuration() || now - h.progress_at < options_.hung_after ||
      h.breaker == BreakerState::kOpen) {
    return;
  }
  const bool was = h.routable();
  h.hung = true;
  Open(h, now);
  Update(backend, was, "hung");
}

bool HealthTracker::MakingProgress(int backend, absl::Time now) const {
  absl::MutexLock lock(&mu_);
  if (backend < 0 || backend >= static_cast<int>(backends_.size())) return false;
  const BackendHealth& h = backends_[backend];
  if (h.work_counter < 0 || h.hung) return false;
  return options_.hung_after <= absl::ZeroDuration() || now - h.progress_at < options_.hung_after;
}

void HealthTracker::Resize(int backends) {
  absl::MutexLock lock(&mu_);
  if (backends <= static_cast<int>(backends_.size())) return;
  backends_.resize(backends);
  probe_failures_.resize(backends, 0);
  probe_successes_.resize(backends, 0);
}

bool HealthTracker::Routable(int backend) const {
  absl::MutexLock lock(&mu_);
  if (backend < 0 || backend >= static_cast<int>(backends_.size())) return false;
  return backends_[backend].routable();
}

BackendHealth HealthTracker::Get(int backend) const {
  absl::MutexLock lock(&mu_);
  if (backend < 0 || backend >= static_cast<int>(backends_.size())) return {};
  return backends_[backend];
}

}  // namespace kvroute::proxy
