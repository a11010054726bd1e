// The residency hold and Dispatch of RouterImpl (router/router_impl.h):
// where a routed session turn stands in the residency model
// (router/residency_gate.h) from Route until it is sent and until it ends.
#include <algorithm>
#include <utility>
#include <vector>

#include "router/router_impl.h"

namespace kvroute::router {

// The request's session joins its decode instance's residents: at once, or
// (`hold`: the caller dispatches it later) once its KV fits, waiting at most
// what its deadline leaves after its predicted TTFT. A turn whose prefix its
// instance no longer holds may take another instance's room.
void RouterImpl::EnterResidency(InflightRequest& r, const RouteTicket& ticket, bool hold,
                                absl::Time now) {
  if (r.session.empty()) return;
  const Decision& d = r.decision;
  ResidencyGate::Turn turn{d.footprint_tokens_est, d.decode_capacity_tokens};
  if (const int64_t gpu = NominalCapacityTokens(d.decode_backend); gpu < turn.capacity_tokens) {
    turn.gpu_capacity_tokens = gpu;
  }
  turn.hold = hold;
  if (ticket.shed.deadline_s > 0 && d.predicted_ttft_s > 0) {
    turn.max_wait = absl::Seconds(std::max(0.001, ticket.shed.deadline_s - d.predicted_ttft_s));
  }
  turn.movable = 2 * d.cached_tokens_est < d.prompt_tokens_est;
  // On an instance with a host tier, or behind a fleet-shared pool, the
  // residents it swaps out come back by a reload, and this turn by its own
  // reload of what only those tiers hold.
  if (options_.host_tier.aware &&
      (feedback_.HasHostTier(d.decode_backend) || feedback_.HasPool()) &&
      d.decode_backend < static_cast<int>(snapshot_.backends.size())) {
    turn.reload_s = placement::HostReloadSeconds(snapshot_, d.decode_backend, placement_);
  }
  r.residency_bound = residency_.WaitBound(turn);
  std::vector<uint64_t> woken;
  const uint64_t wait = residency_.Enter(d.decode_backend, r.session, turn, now, &woken);
  r.residency_wait = wait;
  if (wait == 0) {
    r.residency = Residency::kResident;
    r.resident_on = d.decode_backend;
  } else if (std::find(woken.begin(), woken.end(), wait) != woken.end()) {
    // Taken at once by another instance's room.
    r.residency = Residency::kResident;
    r.resident_on = residency_.TakeMove(wait).value_or(d.decode_backend);
  } else {
    r.residency = Residency::kWaiting;
    held_[wait] = ticket.id;
  }
  Wake(woken);
}

void RouterImpl::Wake(std::vector<uint64_t>& woken) {
  if (woken.empty()) return;
  // The woken requests are resident now, where the model admitted them.
  for (uint64_t wait : woken) {
    auto h = held_.find(wait);
    if (h == held_.end()) continue;
    auto it = inflight_.find(h->second);
    held_.erase(h);
    if (it == inflight_.end()) continue;
    InflightRequest& r = it->second;
    r.residency = Residency::kResident;
    r.resident_on = residency_.TakeMove(wait).value_or(r.decision.decode_backend);
  }
  if (listener_) listener_(woken);
}

void RouterImpl::SetResidencyListener(ResidencyListener woken) {
  absl::MutexLock lock(&mu_);
  listener_ = std::move(woken);
}

bool RouterImpl::Held(const RouteTicket& ticket) const {
  absl::MutexLock lock(&mu_);
  return ticket.residency_wait != 0 && held_.contains(ticket.residency_wait);
}

void RouterImpl::TickResidency(absl::Time now) {
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> woken;
  residency_.Tick(now, &woken);
  Wake(woken);
}

std::optional<absl::Time> RouterImpl::NextResidencyEvent() const {
  absl::MutexLock lock(&mu_);
  return residency_.NextEvent();
}

void RouterImpl::Unhold(const RouteTicket& ticket, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto h = held_.find(ticket.residency_wait);
  if (ticket.residency_wait == 0 || h == held_.end()) return;
  held_.erase(h);
  if (auto it = inflight_.find(ticket.id); it != inflight_.end()) {
    it->second.residency = Residency::kNone;
  }
  std::vector<uint64_t> woken;
  residency_.Abandon(ticket.residency_wait, now, &woken);
  Wake(woken);
}

ResidencyGate::Counters RouterImpl::ResidencyCounters() const {
  absl::MutexLock lock(&mu_);
  return residency_.counters();
}

size_t RouterImpl::ResidencyWaiting() const {
  absl::MutexLock lock(&mu_);
  return residency_.waiting();
}

void RouterImpl::LeaveResidency(InflightRequest& r, int64_t footprint_tokens, absl::Time now) {
  std::vector<uint64_t> woken;
  if (r.residency == Residency::kWaiting) {
    held_.erase(r.residency_wait);
    residency_.Abandon(r.residency_wait, now, &woken);
  } else if (r.residency == Residency::kResident) {
    residency_.Leave(r.resident_on, r.session, footprint_tokens, now, &woken);
  }
  r.residency = Residency::kNone;
  Wake(woken);
}

void RouterImpl::Sent(const RouteTicket& ticket, absl::Time now, int64_t resident_turns) {
  absl::MutexLock lock(&mu_);
  auto it = inflight_.find(ticket.id);
  if (it == inflight_.end() || it->second.first_token) return;
  InflightRequest& r = it->second;
  r.routed_at = now;
  if (resident_turns >= 0 && r.residency == Residency::kResident) {
    residency_.SetTurns(r.resident_on, r.session, resident_turns);
  }
}

Router::Dispatched RouterImpl::Dispatch(const RouteTicket& ticket, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = inflight_.find(ticket.id);
  if (it == inflight_.end()) return {ticket.decision, -1};
  InflightRequest& r = it->second;
  if (!r.pin_deferred) return {r.decision, -1};
  // Sent while still held (kvroute drains), or admitted where the router
  // cannot send it: it gives its place up and goes where routed.
  if (r.residency == Residency::kWaiting ||
      (r.residency == Residency::kResident && r.resident_on != r.decision.decode_backend &&
       !Retarget(r, r.resident_on, now))) {
    LeaveResidency(r, /*footprint_tokens=*/0, now);
  }
  r.pin_deferred = false;
  Dispatched go{r.decision, -1};
  if (ticket.residency_gated && r.residency == Residency::kResident) {
    const std::optional<ResidencyGate::Residence> at = residency_.Find(r.session);
    go.resident_footprint_tokens = at && at->backend == r.decision.decode_backend
                                       ? at->footprint_tokens
                                       : r.decision.footprint_tokens_est;
    go.resident_fill_tokens = static_cast<int64_t>(
        residency_.options().fill * static_cast<double>(r.decision.decode_capacity_tokens));
    go.resident_wait_bound = r.residency_bound;
  }
  // The estimate's evictions, and the prefill's time, are judged from here:
  // the engine gets it now.
  r.route_tick = index_.clock();
  r.routed_at = now;
  const int b = r.decision.decode_backend;
  go.cached_tokens_est = r.decision.cached_tokens_est;
  if (ledger_.epoch(b) != r.load.decode_epoch) return go;
  // What the instance evicted of the prefix while the request was held; its
  // host tier, if it has one, may still hold it for a reload.
  index_.Match(r.chain, absl::MakeSpan(matched_));
  if (matched_[b] < r.est_chunks_decode) {
    const int64_t held = HeldTokens(r, b);
    r.est_chunks_decode = matched_[b];
    r.est_chunks_prefill = matched_[b];
    r.decision.cached_tokens_est = std::min(r.decision.cached_tokens_est, held);
    r.decision.prefill_cached_tokens_est = r.decision.cached_tokens_est;
  }
  r.decode_pin = index_.PinRequest(b, r.chain, r.est_chunks_decode, r.footprint_chunks);
  SharePin(ticket.id, /*prefill=*/false, r);
  go.decision = r.decision;
  go.cached_tokens_est = r.decision.cached_tokens_est;
  return go;
}

int64_t RouterImpl::HeldTokens(const InflightRequest& r, int backend) {
  int64_t held = ChunksToTokens(matched_[backend], r.bytes_per_token);
  if (!options_.host_tier.aware) return held;
  if (feedback_.HasHostTier(backend)) {
    host_index_.Match(r.chain, absl::MakeSpan(host_matched_));
    held = std::max(held, ChunksToTokens(host_matched_[backend], r.bytes_per_token));
  }
  if (feedback_.HasPool()) {
    pool_index_.Match(r.chain, absl::MakeSpan(pool_matched_));
    held = std::max(held, ChunksToTokens(pool_matched_[0], r.bytes_per_token));
  }
  return held;
}

bool RouterImpl::Retarget(InflightRequest& r, int backend, absl::Time now) {
  if (!Valid(backend) || !state_[backend].healthy || (*specs_)[backend].retired ||
      (*specs_)[backend].role == BackendRole::kPrefill) {
    return false;
  }
  ledger_.Release(r.load, /*first_token=*/false);
  Decision& d = r.decision;
  index_.Match(r.chain, absl::MakeSpan(matched_));
  d.decode_backend = backend;
  d.prefill_backend = backend;
  d.affinity_hit = false;
  d.cached_tokens_est = std::min(d.prompt_tokens_est, HeldTokens(r, backend));
  d.prefill_cached_tokens_est = d.cached_tokens_est;
  d.decode_capacity_tokens = ResidentCapacityTokens(backend);
  // The prediction was for the other instance: none is learned from this one.
  d.predicted_ttft_s = -1;
  r.est_chunks_decode = matched_[backend];
  r.est_chunks_prefill = matched_[backend];
  LoadLedger::Request moved = r.load.request;
  moved.prefill = moved.decode = backend;
  moved.offload = false;
  moved.prefill_new_tokens = std::max<int64_t>(0, d.prompt_tokens_est - d.cached_tokens_est);
  r.load = ledger_.Reserve(moved);
  sessions_.Assign(r.session, backend, now);
  return true;
}

}  // namespace kvroute::router
