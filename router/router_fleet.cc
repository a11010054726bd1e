// The fleet side of RouterImpl (router/router_impl.h): backend slots,
// health, engine gauges and KV events, capacities and reports.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "router/policy_registry.h"
#include "router/router_impl.h"

namespace kvroute::router {

std::shared_ptr<const std::vector<BackendSpec>> RouterImpl::Backends() const {
  absl::MutexLock lock(&mu_);
  return specs_;
}

double RouterImpl::BytesPerToken(const std::string& model) const {
  absl::MutexLock lock(&mu_);
  return ratios_.For(model);
}

int64_t RouterImpl::NominalCapacityTokens(int b) const {
  if (state_[b].gauges.capacity_tokens > 0) return state_[b].gauges.capacity_tokens;
  if ((*specs_)[b].capacity_tokens > 0) return (*specs_)[b].capacity_tokens;
  return std::max<int64_t>(1, options_.default_capacity_tokens);
}

int64_t RouterImpl::HostTierTokens(int b) const {
  const double kv_bytes_per_token =
      options_.offload_cost_known ? options_.offload_cost.kv_bytes_per_token : 0;
  const double bytes = state_[b].gauges.host_capacity_bytes;
  return kv_bytes_per_token > 0 && bytes > 0 ? static_cast<int64_t>(bytes / kv_bytes_per_token) : 0;
}

int64_t RouterImpl::TierCapacityTokens(int b) const {
  if (!options_.host_tier.aware) return 0;
  // The fleet-shared pool holds what every instance stored, for every
  // instance: until it evicts, all of it (no bound); then each instance
  // keeps its share of what it holds.
  int64_t pool_share = 0;
  if (feedback_.HasPool()) {
    pool_share = feedback_.pool_evicts()
                     ? feedback_.pool_cached_tokens() / std::max<int64_t>(1, specs_->size())
                     : kUnboundedResidentTokens;
  }
  return std::max(HostTierTokens(b), pool_share);
}

int64_t RouterImpl::ResidentCapacityTokens(int b) const {
  if (!gate_room_.tier()) return NominalCapacityTokens(b);
  return std::max(NominalCapacityTokens(b), TierCapacityTokens(b));
}

void RouterImpl::ApplyCapacity(int b) {
  feedback_.ApplyCapacity(b, NominalCapacityTokens(b), ratios_.FleetWide());
}

void RouterImpl::ApplyCapacities() {
  capacity_ratio_ = ratios_.FleetWide();
  for (int b = 0; b < static_cast<int>(specs_->size()); ++b) ApplyCapacity(b);
}

void RouterImpl::SetHealthy(int backend, bool healthy) {
  absl::MutexLock lock(&mu_);
  if (!Valid(backend) || (*specs_)[backend].retired) return;
  BackendState& s = state_[backend];
  if (!healthy && s.healthy) {
    // Ejected: its requests are failing or will be retried elsewhere, so
    // the load they reserved must stop steering traffic (it would make the
    // instance look busy after it returns). New epoch: the requests routed
    // before leave the reset counters alone when they end.
    ledger_.Reset(backend);
    // Its events may not resume (a restart without them): the shadow's own
    // model trims it until they do.
    index_.SetEngineEvicts(backend, false);
  }
  // An instance coming back most likely restarted with an empty cache
  // (a vLLM restart loses its prefix cache): drop its shadow rather than
  // route by phantom hits; engine cached_tokens re-teach it. (Sessions
  // that lived there moved away while it was out: a session's next turn
  // breaks affinity to an unhealthy instance and is reassigned.)
  if (healthy && !s.healthy) {
    index_.Clear(backend);
    host_index_.Clear(backend);
  }
  s.healthy = healthy;
}

int64_t RouterImpl::ApplyEngineKvEvents(int backend, absl::Span<const EngineKvEvent> events) {
  absl::MutexLock lock(&mu_);
  if (backend == kPoolBackend) return feedback_.ApplyPoolKvEvents(events, ratios_.FleetWide());
  if (!Valid(backend) || (*specs_)[backend].retired) return 0;
  RecordStoredEvents(events);
  const EngineGauges& g = state_[backend].gauges;
  const int64_t in_use = g.kv_cache_usage_perc > 0 && g.capacity_tokens > 0
                             ? static_cast<int64_t>(g.kv_cache_usage_perc * g.capacity_tokens)
                             : 0;
  evictions_.Apply(backend, events, in_use);
  return feedback_.ApplyEngineKvEvents(backend, events, ratios_.FleetWide());
}

void RouterImpl::UpdateEngineGauges(int backend, const EngineGauges& g) {
  absl::MutexLock lock(&mu_);
  if (!Valid(backend)) return;
  BackendState& s = state_[backend];
  const bool capacity_changed =
      g.capacity_tokens > 0 && g.capacity_tokens != s.gauges.capacity_tokens;
  const int64_t known_capacity = s.gauges.capacity_tokens;
  const double known_host_capacity = s.gauges.host_capacity_bytes;
  s.gauges = g;
  // A scrape without vllm:cache_config_info keeps the last known capacity.
  if (g.capacity_tokens <= 0) {
    s.gauges.capacity_tokens = known_capacity;
    s.gauges.host_capacity_bytes = known_host_capacity;
  }
  if (capacity_changed) ApplyCapacity(backend);
  ApplyHostCapacity(backend);
  LearnReloads(backend, s);
}

// An engine whose metrics give its host tier's size has that tier in the
// router's view before (or without) any host-tier KV event: sizing it takes
// the model's KV bytes per token, known when the time model describes the
// fleet (a profile or router.offload_cost).
void RouterImpl::ApplyHostCapacity(int backend) {
  feedback_.ApplyHostCapacity(backend, HostTierTokens(backend), ratios_.FleetWide());
}

namespace {

// The loads the engine timed since the last sample, as (seconds, bytes),
// once enough bytes have moved for the ratio to mean something; a counter
// that went back (the engine restarted) starts over.
std::optional<std::pair<double, double>> TakeLoads(BackendState::LoadsSeen& seen, double bytes,
                                                   double seconds, double min_bytes) {
  if (bytes < 0 || seconds < 0) return std::nullopt;
  if (seen.bytes < 0 || bytes < seen.bytes || seconds < seen.seconds) {
    seen = {bytes, seconds};
    return std::nullopt;
  }
  const double moved = bytes - seen.bytes;
  if (moved < min_bytes) return std::nullopt;
  const std::pair<double, double> sample{seconds - seen.seconds, moved};
  seen = {bytes, seconds};
  return sample;
}

}  // namespace

// Each tier's loads teach its reload factor: their seconds, in wall
// seconds, against their bytes at the configured bandwidth of the host link,
// or of the NIC for the fleet-shared pool.
void RouterImpl::LearnReloads(int backend, BackendState& s) {
  const bool learn = options_.rate_learning.enabled;
  const double to_wall = options_.host_tier.engine_time_scale;
  const double host_bw = options_.host_tier.load_bytes_per_second;
  if (auto loads = TakeLoads(s.host_loads_seen, s.gauges.host_load_bytes_total,
                             s.gauges.host_load_seconds_total, kMinReloadSampleBytes);
      loads && learn && host_bw > 0) {
    rates_.ObserveReload(backend, loads->first * to_wall, loads->second / host_bw);
  }
  const double pool_bw = options_.host_tier.pool_load_bytes_per_second;
  if (auto loads = TakeLoads(s.pool_loads_seen, s.gauges.pool_load_bytes_total,
                             s.gauges.pool_load_seconds_total, kMinReloadSampleBytes);
      loads && learn && pool_bw > 0) {
    rates_.ObservePoolReload(backend, loads->first * to_wall, loads->second / pool_bw);
  }
}

absl::Status RouterImpl::UpdateBackends(const std::vector<BackendSpec>& backends) {
  if (backends.empty()) return absl::InvalidArgumentError("backends: the list is empty");
  // Validate the new list as Create would (pd_sep needs both pools).
  absl::StatusOr<std::unique_ptr<Policy>> policy = MakePolicy(options_, backends);
  if (!policy.ok()) return policy.status();

  absl::MutexLock lock(&mu_);
  std::vector<BackendSpec> next = *specs_;
  std::vector<bool> listed(next.size(), false);
  std::vector<int> added;
  for (const BackendSpec& want : backends) {
    int slot = -1;
    for (int b = 0; b < static_cast<int>(next.size()); ++b) {
      if (!next[b].retired && next[b].name == want.name) slot = b;
    }
    if (slot >= 0 && next[slot].host == want.host && next[slot].port == want.port) {
      // Same instance: keep its slot, load and shadow; take the new role,
      // capacity and scheduling policy.
      next[slot].role = want.role;
      next[slot].capacity_tokens = want.capacity_tokens;
      next[slot].priority_scheduling = want.priority_scheduling;
      listed[slot] = true;
      continue;
    }
    // A new name, or a known name at a new address (another instance with
    // its own cache): a new slot. A moved name's old slot is retired below.
    if (static_cast<int>(next.size()) >= kMaxBackends) {
      return absl::InvalidArgumentError(
          absl::StrCat("backends: the router has used all ", kMaxBackends,
                       " backend slots (removed backends keep theirs until restart)"));
    }
    BackendSpec s = want;
    s.retired = false;
    next.push_back(std::move(s));
    listed.push_back(true);
    added.push_back(static_cast<int>(next.size()) - 1);
  }
  // Backends no longer listed (or moved) are retired: never routed again;
  // their slot stays so the indices held by requests in flight stay valid.
  for (int b = 0; b < static_cast<int>(next.size()); ++b) {
    if (listed[b] || next[b].retired) continue;
    next[b].retired = true;
    BackendState& s = state_[b];
    s.healthy = false;
    ledger_.Reset(b);
    index_.Clear(b);
    host_index_.Clear(b);
  }
  const int n = static_cast<int>(next.size());
  index_.AddInstances(n - index_.num_instances());
  host_index_.AddInstances(n - host_index_.num_instances());
  rates_.Resize(n);
  evictions_.Resize(n);
  state_.resize(n);
  ledger_.Resize(n);
  feedback_.Resize(n);
  matched_.resize(n);
  host_matched_.resize(n);
  snapshot_.backends.resize(n);
  specs_ = std::make_shared<const std::vector<BackendSpec>>(std::move(next));
  policy_ = *std::move(policy);
  for (int b : added) ApplyCapacity(b);
  return absl::OkStatus();
}

std::vector<BackendReport> RouterImpl::Report() const {
  absl::MutexLock lock(&mu_);
  std::vector<BackendReport> out;
  out.reserve(specs_->size());
  const double bpt = ratios_.FleetWide();
  for (int b = 0; b < static_cast<int>(specs_->size()); ++b) {
    const BackendState& s = state_[b];
    const LoadLedger::Load& load = ledger_.at(b);
    const ShadowFeedback::Backend& f = feedback_.at(b);
    BackendReport r;
    r.name = (*specs_)[b].name;
    r.role = (*specs_)[b].role;
    r.retired = (*specs_)[b].retired;
    r.healthy = s.healthy;
    r.inflight_requests = load.inflight_requests;
    r.inflight_prefill_tokens = load.inflight_prefill_tokens;
    r.decoding_requests = load.decoding_requests;
    r.inflight_tokens = load.inflight_tokens;
    r.shadow_chunks = index_.size(b);
    r.shadow_pinned_chunks = index_.pinned(b);
    r.shadow_reserved_chunks = index_.reserved(b);
    r.engine_cached_tokens = f.engine_cached_tokens;
    r.engine_host_cached_tokens = f.engine_host_cached_tokens;
    r.host_shadow_chunks = host_index_.size(b);
    r.shadow_tokens = ChunksToTokens(r.shadow_chunks, bpt);
    r.capacity_tokens = NominalCapacityTokens(b);
    r.effective_capacity_tokens = ChunksToTokens(index_.capacity(b), bpt);
    r.kv_usage = s.gauges.kv_cache_usage_perc;
    r.engine_running = s.gauges.num_requests_running;
    r.engine_waiting = s.gauges.num_requests_waiting;
    r.est_requests = f.est_requests;
    r.est_abs_error_tokens_sum = f.est_abs_error_sum;
    r.est_tokens_sum = f.est_sum;
    r.actual_cached_tokens_sum = f.actual_sum;
    r.est_signed_error_tokens_sum = f.signed_error_sum;
    r.last_est_error_tokens = f.last_error;
    r.shadow_corrections = f.corrections;
    r.prefill_time_factor = rates_.prefill_factor(b);
    r.prefill_time_samples = rates_.prefill_samples(b);
    r.host_reload_time_factor = rates_.reload_factor(b);
    r.host_reload_samples = rates_.reload_samples(b);
    r.pool_reload_time_factor = rates_.pool_reload_factor(b);
    r.pool_reload_samples = rates_.pool_reload_samples(b);
    out.push_back(std::move(r));
  }
  return out;
}

RouterStats RouterImpl::Stats() const {
  absl::MutexLock lock(&mu_);
  RouterStats s;
  s.sessions = static_cast<int64_t>(sessions_.size());
  s.inflight_requests = static_cast<int64_t>(inflight_.size());
  s.index_chunks = index_.distinct_chunks();
  s.index_replicas = index_.replicas();
  s.index_memory_bytes = static_cast<int64_t>(index_.MemoryBytes());
  s.bytes_per_token = ratios_.FleetWide();
  s.affinity_hits = affinity_hits_;
  s.affinity_breaks = affinity_breaks_;
  s.shed_new_sessions = shed_new_;
  s.shed_running_sessions = shed_running_;
  s.shed_averted_home = shed_averted_home_;
  s.kept_home = kept_home_;
  s.peer_shadow_pins = static_cast<int64_t>(peer_pins_.size());
  s.transfer_time_factor = rates_.fleet_transfer_factor();
  s.pool_cached_tokens = feedback_.pool_cached_tokens();
  s.pool_shadow_chunks = pool_index_.size(0);
  const int n = static_cast<int>(specs_->size());
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (rates_.transfer_samples(a, b) == 0) continue;
      s.transfer_time_factors.push_back({.prefill_backend = a,
                                         .decode_backend = b,
                                         .factor = rates_.transfer_factor(a, b),
                                         .samples = rates_.transfer_samples(a, b)});
    }
  }
  return s;
}

std::vector<PeerLoad> RouterImpl::LocalLoad() const {
  absl::MutexLock lock(&mu_);
  std::vector<PeerLoad> out(specs_->size());
  for (int b = 0; b < static_cast<int>(out.size()); ++b) {
    if ((*specs_)[b].retired) continue;
    const LoadLedger::Load& load = ledger_.at(b);
    out[b] = {.inflight_requests = load.inflight_requests,
              .inflight_prefill_tokens = load.inflight_prefill_tokens,
              .decoding_requests = load.decoding_requests,
              .inflight_tokens = load.inflight_tokens,
              .resident_sessions = residency_.Residents(b),
              .prefill_time_factor = rates_.prefill_samples(b) > 0 ? rates_.prefill_factor(b) : 0};
  }
  return out;
}

void RouterImpl::SetPeerLoad(std::vector<PeerLoad> by_backend, absl::Time now) {
  // Negative figures (a store's arithmetic gone wrong) count as none.
  std::vector<absl::flat_hash_map<std::string, int64_t>> residents(by_backend.size());
  std::vector<int64_t> waiting(by_backend.size());
  for (size_t b = 0; b < by_backend.size(); ++b) {
    PeerLoad& p = by_backend[b];
    p.inflight_requests = std::max<int64_t>(0, p.inflight_requests);
    p.inflight_prefill_tokens = std::max<int64_t>(0, p.inflight_prefill_tokens);
    p.decoding_requests = std::max<int64_t>(0, p.decoding_requests);
    p.inflight_tokens = std::max<int64_t>(0, p.inflight_tokens);
    if (!(p.prefill_time_factor > 0) || !std::isfinite(p.prefill_time_factor)) {
      p.prefill_time_factor = 0;
    }
    for (auto& [session, tokens] : p.resident_sessions) {
      int64_t& held = residents[b][session];
      held = std::max(held, tokens);
    }
    p.resident_sessions.clear();  // the gate keeps them
    waiting[b] = std::max<int64_t>(0, p.waiting_turns);
  }
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> woken;
  const int n = static_cast<int>(specs_->size());
  residents.resize(std::max<size_t>(residents.size(), static_cast<size_t>(n)));
  waiting.resize(residents.size());
  for (int b = 0; b < n; ++b) {
    residency_.SetPeerResidents(b, std::move(residents[b]), waiting[b], now, &woken);
  }
  peer_load_ = std::move(by_backend);
  Wake(woken);
}

std::vector<std::pair<int, std::string>> RouterImpl::TakeResidencyDepartures() {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<int, std::string>> departed = residency_.TakeDepartures();
  // A session that left and came back keeps its reservation.
  std::erase_if(departed, [this](const std::pair<int, std::string>& d) {
    mu_.AssertHeld();
    return residency_.IsResident(d.first, d.second);
  });
  return departed;
}

namespace {
// A pin's id among this replica's: a ticket has a decode and a prefill side.
uint64_t PinId(uint64_t ticket, bool prefill) { return ticket * 2 + (prefill ? 1 : 0); }
}  // namespace

void RouterImpl::SharePin(uint64_t ticket, bool prefill, const InflightRequest& r) {
  const ShadowIndex::Pin& pin = prefill ? r.prefill_pin : r.decode_pin;
  if (!r.pins_shared || pin.instance < 0) return;
  const size_t chunks = std::min<size_t>(r.chain.size(), static_cast<size_t>(pin.chunks));
  own_pin_changes_.pinned.push_back(
      {.id = PinId(ticket, prefill),
       .backend = pin.instance,
       .footprint_chunks = pin.chunks + pin.reserved,
       .chain = std::vector<uint64_t>(r.chain.begin(),
                                      r.chain.begin() + static_cast<ptrdiff_t>(chunks))});
}

void RouterImpl::ShareUnpin(uint64_t ticket, bool prefill, const InflightRequest& r) {
  const ShadowIndex::Pin& pin = prefill ? r.prefill_pin : r.decode_pin;
  if (!r.pins_shared || pin.instance < 0) return;
  const uint64_t id = PinId(ticket, prefill);
  // A pin not yet handed over is withdrawn instead: the peers never see it.
  std::vector<ShadowPin>& pinned = own_pin_changes_.pinned;
  if (auto it = std::find_if(pinned.begin(), pinned.end(),
                             [id](const ShadowPin& p) { return p.id == id; });
      it != pinned.end()) {
    pinned.erase(it);
    return;
  }
  own_pin_changes_.unpinned.push_back(id);
}

void RouterImpl::ShareShadowPins() {
  absl::MutexLock lock(&mu_);
  share_pins_ = true;
}

ShadowPinChanges RouterImpl::TakeShadowPinChanges() {
  absl::MutexLock lock(&mu_);
  return std::exchange(own_pin_changes_, {});
}

void RouterImpl::ApplyPeerShadowPins(const PeerShadowPins& peers) {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_set<std::string> live;
  if (peers.live_replicas) live.insert(peers.live_replicas->begin(), peers.live_replicas->end());
  absl::flat_hash_set<int> idle(peers.idle_backends.begin(), peers.idle_backends.end());
  absl::erase_if(peer_pins_, [&](const auto& entry) {
    mu_.AssertHeld();
    const auto& [key, p] = entry;
    if (!peers.reset && (!peers.live_replicas || live.contains(key.first)) &&
        !idle.contains(p.pin.instance)) {
      return false;
    }
    index_.Unpin(p.pin, p.chain);
    return true;
  });
  for (const auto& [replica, pin] : peers.pinned) {
    if (!Valid(pin.backend) || (*specs_)[pin.backend].retired) continue;
    auto [it, inserted] = peer_pins_.try_emplace({replica, pin.id});
    if (!inserted) continue;  // seen already
    it->second.chain = pin.chain;
    it->second.pin = index_.PinRequest(pin.backend, it->second.chain,
                                       static_cast<int32_t>(it->second.chain.size()),
                                       std::max<int64_t>(0, pin.footprint_chunks));
  }
  for (const auto& key : peers.unpinned) {
    auto it = peer_pins_.find(key);
    if (it == peer_pins_.end()) continue;  // dropped already, or never seen
    index_.Unpin(it->second.pin, it->second.chain);
    peer_pins_.erase(it);
  }
}

// The peer's record proves its instance held the recorded prompt when that
// turn ended: the shadow learns it as if this replica had served it, so the
// estimate, the class and the placement see what the session's last turn
// left, whichever replica routed it.
void RouterImpl::AdoptPeerSession(const RequestFeatures& features,
                                  const std::vector<uint64_t>& chain, absl::Time now) {
  if (!features.peer_session || features.session_id.empty()) return;
  const RequestFeatures::PeerSession& p = *features.peer_session;
  if (!Valid(p.backend) || (*specs_)[p.backend].retired || !state_[p.backend].healthy) return;
  if (p.prompt_chunks <= 0 || static_cast<int64_t>(chain.size()) < p.prompt_chunks ||
      chain[p.prompt_chunks - 1] != p.last_chunk_hash) {
    return;  // this prompt does not continue the recorded one
  }
  // This replica's own record of a completed turn, if as new, stands, aged
  // like a peer's: its shadow orders the session by this replica's traffic
  // alone, so the engine's removals, applied to it oldest first, took other
  // sessions (their turns since went through the other replicas) in place
  // of this one.
  if (const SessionTable::Info* mine = sessions_.Find(features.session_id, now);
      mine != nullptr && mine->prompt_chunks > 0 && mine->last_finished >= p.finished) {
    if (Valid(mine->backend) && static_cast<int64_t>(chain.size()) >= mine->prompt_chunks &&
        chain[mine->prompt_chunks - 1] == mine->last_chunk_hash) {
      AgeSessionRecord(mine->backend,
                       absl::MakeConstSpan(chain).first(static_cast<size_t>(mine->prompt_chunks)),
                       mine->last_finished, mine->held_tokens, features.model, /*learn=*/false);
    }
    return;
  }
  // The record is the peer's; the request it continues is routed below.
  sessions_.Assign(features.session_id, p.backend, now, /*routed=*/false);
  sessions_.RecordCompletion(features.session_id, p.backend, p.last_chunk_hash, p.prompt_chunks,
                             p.held_tokens);
  sessions_.Finish(features.session_id, p.finished);
  AgeSessionRecord(p.backend,
                   absl::MakeConstSpan(chain).first(static_cast<size_t>(p.prompt_chunks)),
                   p.finished, p.held_tokens, features.model, /*learn=*/true);
}

// What the engine still holds of the record's prompt: its events since the
// turn ended may show it evicted, tail first (all of it survives when they
// say nothing).
void RouterImpl::AgeSessionRecord(int backend, absl::Span<const uint64_t> recorded,
                                  absl::Time finished, int64_t held_tokens,
                                  const std::string& model, bool learn) {
  const int64_t prompt_chunks = static_cast<int64_t>(recorded.size());
  int64_t chunks = prompt_chunks;
  if (const int64_t left = evictions_.Surviving(backend, finished, held_tokens); left >= 0) {
    const double bytes_per_chunk = static_cast<double>(options_.chunk_bytes);
    chunks = std::clamp<int64_t>(
        static_cast<int64_t>(static_cast<double>(left) * ratios_.For(model) / bytes_per_chunk), 0,
        prompt_chunks);
  }
  if (learn && chunks > 0) index_.Insert(backend, recorded.first(static_cast<size_t>(chunks)));
  index_.Forget(backend, recorded.subspan(static_cast<size_t>(chunks)));
}

std::optional<RequestFeatures::PeerSession> RouterImpl::SessionRecord(std::string_view session,
                                                                      absl::Time now) {
  absl::MutexLock lock(&mu_);
  const SessionTable::Info* info = sessions_.Find(session, now);
  if (info == nullptr || info->prompt_chunks <= 0 || info->last_finished == absl::InfinitePast()) {
    return std::nullopt;
  }
  return RequestFeatures::PeerSession{.backend = info->backend,
                                      .last_chunk_hash = info->last_chunk_hash,
                                      .prompt_chunks = info->prompt_chunks,
                                      .held_tokens = info->held_tokens,
                                      .finished = info->last_finished};
}

}  // namespace kvroute::router
