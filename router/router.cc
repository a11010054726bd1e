// The request life cycle of RouterImpl (router/router_impl.h): Route,
// OnFirstToken, OnComplete (the residency hold and Dispatch are in
// router/router_residency.cc).
#include "router/router.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "router/policies/common.h"
#include "router/policy_registry.h"
#include "router/prefix_hash.h"
#include "router/router_impl.h"

namespace kvroute::router {

struct RouterImpl::Routing {
  const std::vector<uint64_t>* chain = nullptr;
  double bytes_per_token = 1;
  int64_t output_est = 0;
  // The session's entry as routing found it (nullptr: none). Valid until the
  // session table's next non-const call.
  const SessionTable::Info* session = nullptr;
  Decision decision;
};

RouterImpl::RouterImpl(Options options, std::vector<BackendSpec> backends,
                       std::unique_ptr<Policy> policy, bool homes_sessions)
    : options_([&] {
        // One window: a session idle this long leaves its instance's residents.
        options.residency.window = options.session_resident_window;
        // Only policies that keep sessions on an instance have residents to protect.
        options.residency.enabled = options.residency.enabled && homes_sessions;
        return std::move(options);
      }()),
      homes_sessions_(homes_sessions),
      policy_(std::move(policy)),
      index_(static_cast<int>(backends.size())),
      host_index_(static_cast<int>(backends.size())),
      pool_index_(1),
      feedback_({.chunk_bytes = options_.chunk_bytes,
                 .eviction_tolerance_chunks = options_.eviction_tolerance_chunks,
                 .capacity_learning_rate = options_.capacity_learning_rate,
                 .min_capacity_fraction = options_.min_capacity_fraction},
                index_, host_index_, pool_index_, static_cast<int>(backends.size())),
      ledger_(static_cast<int>(backends.size())),
      residency_(options_.residency),
      sizing_(options_.sizing),
      gate_room_(options_.host_tier.gate_room),
      sessions_(options_.max_sessions, options_.session_ttl),
      ratios_(options_.default_bytes_per_token, options_.bytes_per_token_alpha,
              options_.max_models),
      placement_(placement::ParamsFromOptions(options_)),
      rates_(options_.rate_learning),
      state_(backends.size()),
      matched_(backends.size()),
      host_matched_(backends.size()),
      pool_matched_(1) {
  absl::MutexLock lock(&mu_);
  rates_.Resize(static_cast<int>(backends.size()));
  evictions_.Resize(static_cast<int>(backends.size()));
  specs_ = std::make_shared<const std::vector<BackendSpec>>(std::move(backends));
  ApplyCapacities();
}

int64_t RouterImpl::ChunksToTokens(int64_t chunks, double bytes_per_token) const {
  return std::llround(static_cast<double>(chunks) * static_cast<double>(options_.chunk_bytes) /
                      bytes_per_token);
}

int64_t RouterImpl::TokensToChunks(int64_t tokens, double bytes_per_token) const {
  return static_cast<int64_t>(
      std::ceil(static_cast<double>(std::max<int64_t>(0, tokens)) * bytes_per_token /
                static_cast<double>(options_.chunk_bytes)));
}

absl::StatusOr<RouteTicket> RouterImpl::Route(const RequestFeatures& features, absl::Time now) {
  Routing ro;
  // Hash outside the lock when the caller did not.
  std::vector<uint64_t> own_chain;
  ro.chain = &features.chunk_hashes;
  if (ro.chain->empty() && features.prompt_bytes.size() >= options_.chunk_bytes) {
    own_chain = HashPromptChunks(features.prompt_bytes, options_.chunk_bytes);
    ro.chain = &own_chain;
  }

  absl::MutexLock lock(&mu_);
  if (inflight_.size() >= options_.max_inflight_requests) {
    return absl::ResourceExhaustedError(
        absl::StrCat("router: ", inflight_.size(), " requests in flight (max_inflight_requests)"));
  }
  AdoptPeerSession(features, *ro.chain, now);
  BuildSnapshot(features, ro, now);
  if (absl::Status s = Decide(ro); !s.ok()) return s;
  const ShedVerdict verdict = JudgeShedding(features, ro);
  if (verdict.shed) {
    RouteTicket shed;
    shed.decision = ro.decision;
    shed.shed = verdict;
    return shed;
  }
  const Decision& d = ro.decision;
  InflightRequest r = Reserve(features, ro, now);
  if (d.affinity_hit) ++affinity_hits_;
  if (d.affinity_broken) ++affinity_breaks_;
  sessions_.Assign(features.session_id, d.decode_backend, now);

  RouteTicket ticket;
  ticket.id = next_ticket_++;
  ticket.decision = d;
  const bool split = d.mode == DecisionMode::kOffload && d.prefill_backend != d.decode_backend;
  ticket.transfer_time_factor =
      split ? placement::TransferTimeFactor(snapshot_, d.prefill_backend, d.decode_backend) : 1;
  ticket.shed = verdict;
  const bool hold = r.pin_deferred && options_.residency.enabled && !r.session.empty();
  EnterResidency(r, ticket, hold, now);
  ticket.residency_gated = hold;
  ticket.residency_wait = r.residency == Residency::kWaiting ? r.residency_wait : 0;
  r.pins_shared = share_pins_;
  const InflightRequest& held = inflight_.emplace(ticket.id, std::move(r)).first->second;
  SharePin(ticket.id, /*prefill=*/false, held);
  SharePin(ticket.id, /*prefill=*/true, held);
  return ticket;
}

// The fleet as the policy sees it for this request: each instance's load,
// gauges, resident demand and the prompt's estimated cached tokens there.
void RouterImpl::BuildSnapshot(const RequestFeatures& features, Routing& ro, absl::Time now) {
  const std::vector<uint64_t>& chain = *ro.chain;
  const double bpt = ratios_.For(features.model);
  ro.bytes_per_token = bpt;
  const int n = static_cast<int>(specs_->size());
  index_.Match(chain, absl::MakeSpan(matched_));

  FleetSnapshot& fleet = snapshot_;
  fleet.backends.resize(n);
  fleet.prompt_tokens_est =
      static_cast<int64_t>(std::ceil(static_cast<double>(features.prompt_bytes.size()) / bpt));
  ro.output_est = features.max_tokens > 0
                      ? std::min(features.max_tokens, options_.max_output_tokens_est)
                      : options_.default_output_tokens;
  fleet.footprint_tokens_est = fleet.prompt_tokens_est + ro.output_est;
  residency_.Age(now);
  // The agents' pause, learned before the decision reads the gate's room.
  if (std::optional<absl::Duration> pause = sessions_.TakePause(features.session_id, now)) {
    gate_room_.LearnPause(*pause);
  }
  const SessionTable::Info* session = sessions_.Find(features.session_id, now);
  ro.session = session;
  fleet.session_backend = session == nullptr ? -1 : session->backend;
  fleet.sequence = sequence_++;
  // The session's instance also holds its last response, which the shadow
  // cannot hash (the router never sees output bytes): when this prompt
  // continues the last one and the shadow still holds that, credit what the
  // engine reported holding after it.
  int64_t continuation_tokens = 0;
  const bool continues = session != nullptr && session->prompt_chunks > 0 &&
                         static_cast<int64_t>(chain.size()) >= session->prompt_chunks &&
                         chain[session->prompt_chunks - 1] == session->last_chunk_hash;
  if (continues && session->held_tokens > 0 &&
      matched_[session->backend] >= session->prompt_chunks) {
    continuation_tokens = session->held_tokens;
  }
  // Less than half of the last prompt left: the instance evicted it.
  const bool reference = features.reference_cached_tokens.size() == static_cast<size_t>(n);
  fleet.session_prefix_evicted =
      continues &&
      (reference ? 2 * features.reference_cached_tokens[session->backend] <
                       ChunksToTokens(session->prompt_chunks, bpt)
                 : 2 * static_cast<int64_t>(matched_[session->backend]) < session->prompt_chunks);
  for (int b = 0; b < n; ++b) {
    const BackendState& s = state_[b];
    const LoadLedger::Load& load = ledger_.at(b);
    BackendSnapshot& v = fleet.backends[b];
    v.healthy = s.healthy && std::find(features.avoid_backends.begin(),
                                       features.avoid_backends.end(),
                                       b) == features.avoid_backends.end();
    v.role = (*specs_)[b].role;
    v.inflight_requests = load.inflight_requests;
    v.inflight_prefill_tokens = load.inflight_prefill_tokens;
    v.decoding_requests = load.decoding_requests;
    v.inflight_tokens = load.inflight_tokens;
    if (b < static_cast<int>(peer_load_.size())) {
      const PeerLoad& peer = peer_load_[b];
      v.inflight_requests += peer.inflight_requests;
      v.inflight_prefill_tokens += peer.inflight_prefill_tokens;
      v.decoding_requests += peer.decoding_requests;
      v.inflight_tokens += peer.inflight_tokens;
    }
    v.engine_running = s.gauges.num_requests_running;
    v.engine_waiting = s.gauges.num_requests_waiting;
    v.kv_usage = s.gauges.kv_cache_usage_perc;
    v.kv_capacity_tokens = ChunksToTokens(index_.capacity(b), bpt);
    v.resident_tokens = residency_.demand_tokens(b) + load.sessionless_tokens;
    v.resident_capacity_tokens = TierCapacityTokens(b);
    int64_t cached = ChunksToTokens(matched_[b], bpt);
    if (b == fleet.session_backend) cached = std::max(cached, continuation_tokens);
    if (reference) cached = std::max<int64_t>(0, features.reference_cached_tokens[b]);
    v.cached_tokens_est = std::min(fleet.prompt_tokens_est, cached);
    v.host_reload_tokens_est = 0;
    v.pool_reload_tokens_est = 0;
    v.prefill_time_factor = rates_.prefill_factor(b);
    // Several replicas: the factor every replica learned of the instance,
    // from all the traffic it sees, not this replica's share of it.
    if (b < static_cast<int>(peer_load_.size()) && peer_load_[b].prefill_time_factor > 0) {
      v.prefill_time_factor = peer_load_[b].prefill_time_factor;
    }
    v.host_reload_time_factor = rates_.reload_factor(b);
    v.pool_reload_time_factor = rates_.pool_reload_factor(b);
  }
  if (options_.host_tier.aware && !reference) {
    AddHostTierHits(chain, fleet, bpt);
    AddPoolHits(chain, fleet, bpt);
  }
  // The pair factors change only when an offload's transfer is learned.
  if (snapshot_transfer_version_ != rates_.transfer_version()) {
    fleet.transfer_time_factors = rates_.transfer_table();
    snapshot_transfer_version_ = rates_.transfer_version();
  }
  // The session's own footprint is replaced by this request's wherever it
  // goes: it is not demand from others on its instance.
  if (options_.session_resident_window > absl::ZeroDuration()) {
    if (std::optional<ResidencyGate::Residence> home = residency_.Find(features.session_id);
        home && home->backend < n) {
      BackendSnapshot& v = fleet.backends[home->backend];
      v.resident_tokens = std::max<int64_t>(0, v.resident_tokens - home->footprint_tokens);
    }
  }
}

void RouterImpl::AddHostTierHits(const std::vector<uint64_t>& chain, FleetSnapshot& fleet,
                                 double bpt) {
  const int n = static_cast<int>(fleet.backends.size());
  bool any = false;
  for (int b = 0; b < n && !any; ++b) any = feedback_.HasHostTier(b);
  if (!any) return;
  host_index_.Match(chain, absl::MakeSpan(host_matched_));
  for (int b = 0; b < n; ++b) {
    if (!feedback_.HasHostTier(b)) continue;
    BackendSnapshot& v = fleet.backends[b];
    const int64_t host = std::min(fleet.prompt_tokens_est, ChunksToTokens(host_matched_[b], bpt));
    if (host <= v.cached_tokens_est) continue;
    v.host_reload_tokens_est = host - v.cached_tokens_est;
    v.cached_tokens_est = host;
  }
}

void RouterImpl::AddPoolHits(const std::vector<uint64_t>& chain, FleetSnapshot& fleet,
                             double bpt) {
  if (!feedback_.HasPool()) return;
  pool_index_.Match(chain, absl::MakeSpan(pool_matched_));
  const int64_t pool = std::min(fleet.prompt_tokens_est, ChunksToTokens(pool_matched_[0], bpt));
  // Any instance loads what the pool holds, after what it holds itself.
  for (BackendSnapshot& v : fleet.backends) {
    if (pool <= v.cached_tokens_est) continue;
    v.pool_reload_tokens_est = pool - v.cached_tokens_est;
    v.cached_tokens_est = pool;
  }
}

// The policy's decision on the snapshot, checked, with the time model's
// prediction when the policy made none.
absl::Status RouterImpl::Decide(Routing& ro) {
  const FleetSnapshot& fleet = snapshot_;
  absl::StatusOr<Decision> decided = policy_->Decide(fleet);
  if (!decided.ok()) return decided.status();
  Decision& d = *decided;
  if (!Valid(d.decode_backend) || !Valid(d.prefill_backend) ||
      !fleet.backends[d.decode_backend].healthy || !fleet.backends[d.prefill_backend].healthy) {
    return absl::InternalError(absl::StrCat("policy ", std::string(policy_->name()),
                                            " chose an invalid or unhealthy backend"));
  }
  if (d.predicted_ttft_s < 0 && options_.offload_cost_known) Predict(fleet, d);
  d.footprint_tokens_est = fleet.footprint_tokens_est;
  d.decode_capacity_tokens = ResidentCapacityTokens(d.decode_backend);
  ro.decision = std::move(d);
  KeepHomeIfSooner(ro);
  return absl::OkStatus();
}

// The overload rule moves a session off a crowded instance to spread the
// load, not to make its turn slower. Where that instance keeps the session's
// prefix in its host tier, a turn waiting there still finds the prefix when
// it is admitted (reloaded if the GPU pool let it go meanwhile), so the time
// model's prediction there holds; a turn moved away recomputes what the
// destination lacks and holds up that instance's own sessions while it does.
// Without a tier the wait can cost the prefix, and the move stands. HEAVY
// turns keep their policy's rule (v1's least decode load).
void RouterImpl::KeepHomeIfSooner(Routing& ro) {
  const FleetSnapshot& fleet = snapshot_;
  const Decision& d = ro.decision;
  const int home = fleet.session_backend;
  if (!options_.host_tier.aware || !options_.offload_cost_known || !homes_sessions_ ||
      ro.session == nullptr || !Valid(home) || home == d.decode_backend ||
      d.mode != DecisionMode::kColocated || d.request_class == RequestClass::kHeavy) {
    return;
  }
  if (!CanServeHome(home) || !feedback_.HasHostTier(home) ||
      fleet.backends[home].cached_tokens_est <=
          fleet.backends[d.decode_backend].cached_tokens_est ||
      !policy_internal::Overloaded(fleet, home,
                                   {options_.overload_factor, options_.overload_min_tokens})) {
    return;
  }
  Decision there = AtHome(d, home);
  if (there.predicted_ttft_s < 0 || there.predicted_ttft_s >= d.predicted_ttft_s) return;
  there.kept_home = true;
  ro.decision = std::move(there);
  ++kept_home_;
}

ShedVerdict RouterImpl::JudgeShedding(const RequestFeatures& features, Routing& ro) {
  if (!features.allow_shed || !options_.shed.enabled) return {};
  const TtftSlos slos{options_.slo.ttft_warm_s, options_.slo.ttft_medium_s,
                      options_.slo.ttft_heavy_s};
  const Decision& d = ro.decision;
  // A known session, or a prompt mostly cached where it goes (a running
  // conversation that sends no session id), continues; anything else starts.
  const bool running = ro.session != nullptr ||
                       (d.cached_tokens_est > 0 && 2 * d.cached_tokens_est >= d.prompt_tokens_est);
  ShedVerdict verdict = JudgeShed(options_.shed, slos, d, running);
  // The overload rule moves a session off a crowded instance to spread the
  // load, not to refuse its turn: a move whose prefill there runs past the
  // deadline stays home if the session's instance would serve it in time.
  const int home = snapshot_.session_backend;
  if (verdict.shed && homes_sessions_ && ro.session != nullptr && home != d.decode_backend &&
      Valid(home) && CanServeHome(home)) {
    Decision there = AtHome(d, home);
    const ShedVerdict at_home = JudgeShed(options_.shed, slos, there, running);
    if (!at_home.shed) {
      there.shed_averted_home = true;
      ro.decision = std::move(there);
      ++shed_averted_home_;
      return at_home;
    }
  }
  if (verdict.shed) ++(running ? shed_running_ : shed_new_);
  return verdict;
}

bool RouterImpl::CanServeHome(int home) const {
  return snapshot_.backends[home].healthy && !(*specs_)[home].retired &&
         (*specs_)[home].role != BackendRole::kPrefill;
}

Decision RouterImpl::AtHome(const Decision& d, int home) const {
  const FleetSnapshot& fleet = snapshot_;
  Decision h = d;
  h.mode = DecisionMode::kColocated;
  h.prefill_backend = h.decode_backend = home;
  h.cached_tokens_est = std::clamp<int64_t>(fleet.backends[home].cached_tokens_est, 0,
                                            std::max<int64_t>(0, d.prompt_tokens_est));
  h.prefill_cached_tokens_est = h.cached_tokens_est;
  h.affinity_hit = true;
  h.affinity_broken = false;
  h.predicted_ttft_s = -1;
  h.predicted_transfer_s = -1;
  Predict(fleet, h);
  h.decode_capacity_tokens = ResidentCapacityTokens(home);
  return h;
}

// The request's load on its backends and its footprint in the engines' KV
// pools, from now until it ends: the cached prefix it reuses is pinned, the
// rest (its uncached prompt and, where it decodes, its output) reserved, so
// the cached prefixes that stay evictable are what the pool has left. Taken
// at routing rather than at admission: the estimate for the next request
// must predict the engine at that request's admission, which comes after the
// admission of every request already routed there. A request the caller
// dispatches later (defer_kv_reservation, co-located) pins at Dispatch.
InflightRequest RouterImpl::Reserve(const RequestFeatures& features, const Routing& ro,
                                    absl::Time now) {
  const Decision& d = ro.decision;
  const std::vector<uint64_t>& chain = *ro.chain;
  const double bpt = ro.bytes_per_token;
  InflightRequest r;
  r.decision = d;
  r.model = features.model;
  r.session = features.session_id;
  r.prompt_bytes = static_cast<int64_t>(features.prompt_bytes.size());
  r.chain = chain;
  r.bytes_per_token = bpt;
  r.est_chunks_decode = matched_[d.decode_backend];
  r.est_chunks_prefill = matched_[d.prefill_backend];
  r.route_tick = index_.clock();
  r.routed_at = now;
  r.stream = features.stream;
  r.prefill_time_factor = placement::PrefillTimeFactor(snapshot_, d.decode_backend);
  r.predicted_cached_tokens = d.cached_tokens_est;
  r.load = ledger_.Reserve({.prefill = d.prefill_backend,
                            .decode = d.decode_backend,
                            .offload = d.mode == DecisionMode::kOffload,
                            .prefill_new_tokens = std::max<int64_t>(
                                0, d.prompt_tokens_est - d.prefill_cached_tokens_est),
                            .prompt_tokens = d.prompt_tokens_est,
                            .total_tokens = snapshot_.footprint_tokens_est,
                            .sessionless = features.session_id.empty()});

  const int64_t prompt_chunks =
      std::max(static_cast<int64_t>(chain.size()), TokensToChunks(d.prompt_tokens_est, bpt));
  r.footprint_chunks = prompt_chunks + TokensToChunks(ro.output_est, bpt);
  if (features.defer_kv_reservation && d.prefill_backend == d.decode_backend) {
    r.pin_deferred = true;
  } else {
    r.decode_pin =
        index_.PinRequest(d.decode_backend, chain, r.est_chunks_decode, r.footprint_chunks);
  }
  if (d.prefill_backend != d.decode_backend) {
    r.prefill_pin =
        index_.PinRequest(d.prefill_backend, chain, r.est_chunks_prefill, prompt_chunks);
  }
  return r;
}

void RouterImpl::OnFirstToken(const RouteTicket& ticket, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = inflight_.find(ticket.id);
  if (it == inflight_.end() || it->second.first_token) return;
  InflightRequest& r = it->second;
  r.first_token = true;
  const Decision& d = r.decision;
  ledger_.FirstToken(r.load);
  // A co-located streamed request's TTFT teaches its instance's prefill
  // time factor, when the response ends and the engine has said what it
  // found cached (LearnPrefillRate). WARM turns teach nothing: their TTFT is
  // mostly what the model leaves out (a scheduling step, the HTTP round
  // trip).
  if (options_.rate_learning.enabled && r.stream && d.mode == DecisionMode::kColocated &&
      d.prefill_backend == d.decode_backend && d.request_class != RequestClass::kWarm &&
      d.predicted_ttft_s > 0 && ledger_.epoch(d.decode_backend) == r.load.decode_epoch &&
      !(*specs_)[d.decode_backend].retired) {
    r.ttft_sample_s = absl::ToDoubleSeconds(now - r.routed_at);
  }
  // Its instance now caches the whole prompt: a request sharing the prefix
  // sent before this one ends (a turn whose predecessor is still streaming,
  // parallel calls from one context) finds it there. Pins published to
  // other replicas stay as published.
  if (d.prefill_backend == d.decode_backend && !r.pin_deferred && !r.pins_shared &&
      !(*specs_)[d.decode_backend].retired) {
    r.computed_begin = r.decode_pin.chunks;
    r.computed_end = r.computed_begin + index_.HoldComputed(r.decode_pin, r.chain);
  }
  RecordReuseGap(r, now);
}

// The sample waits for the engine's cached count because the factor is the
// fleet's speed, not the estimate's error: a prompt estimated cold that the
// engine found mostly cached (a prefix the shadow evicted too early, or a
// predecessor's prompt routed after it) prefills in a fraction of the
// predicted time, and priced at the estimate that sample would pull the
// factor down, so the next cold prefills there would be predicted at a
// fraction of what they take, and admitted past their deadlines.
void RouterImpl::LearnPrefillRate(const InflightRequest& r, const Outcome& outcome, int served) {
  const Decision& d = r.decision;
  if (!outcome.ok || !(r.ttft_sample_s >= 0) || (*specs_)[d.decode_backend].retired) return;
  double modelled_s = d.predicted_ttft_s / r.prefill_time_factor;
  if (served == d.decode_backend && outcome.prompt_tokens > 0 && outcome.cached_tokens >= 0 &&
      !CachedTokensMayIncludeTransfer(d, outcome)) {
    const int64_t est_cached =
        std::clamp<int64_t>(r.predicted_cached_tokens, 0, d.prompt_tokens_est);
    const int64_t cached = std::clamp<int64_t>(outcome.cached_tokens, 0, outcome.prompt_tokens);
    modelled_s += placement::PrefillSeconds(outcome.prompt_tokens - cached, cached,
                                            placement_.rates) -
                  placement::PrefillSeconds(d.prompt_tokens_est - est_cached, est_cached,
                                            placement_.rates);
  }
  rates_.ObservePrefill(d.decode_backend, r.ttft_sample_s, modelled_s);
}

void RouterImpl::OnTransfer(const RouteTicket& ticket, double transfer_s) {
  const Decision& d = ticket.decision;
  if (!options_.rate_learning.enabled || d.mode != DecisionMode::kOffload ||
      !(d.predicted_transfer_s > 0) || !(ticket.transfer_time_factor > 0) || !(transfer_s >= 0)) {
    return;
  }
  absl::MutexLock lock(&mu_);
  if (!Valid(d.prefill_backend) || !Valid(d.decode_backend) ||
      (*specs_)[d.prefill_backend].retired || (*specs_)[d.decode_backend].retired) {
    return;
  }
  rates_.ObserveTransfer(d.prefill_backend, d.decode_backend, transfer_s,
                         d.predicted_transfer_s / ticket.transfer_time_factor);
}

// The placement cost's figures for the plan a policy chose without them.
void RouterImpl::Predict(const FleetSnapshot& fleet, Decision& d) const {
  if (d.mode == DecisionMode::kOffload && d.prefill_backend != d.decode_backend) {
    const placement::PlanCost plan =
        placement::Offload(fleet, d.prefill_backend, d.decode_backend, d.request_class, placement_);
    d.predicted_ttft_s = plan.ttft_s;
    d.predicted_transfer_s = plan.transfer_s + plan.decode_wait_s;
    return;
  }
  d.predicted_ttft_s =
      placement::Colocated(fleet, d.decode_backend, d.request_class, placement_).ttft_s;
  d.predicted_transfer_s = -1;
}

void RouterImpl::LearnFromTruth(const InflightRequest& r, const Outcome& outcome, int served) {
  const Decision& d = r.decision;
  const bool on_decode = served == d.decode_backend;
  // This request's own bytes/token converts the engine's tokens to chunks.
  const double bpt =
      outcome.prompt_tokens > 0 && r.prompt_bytes > 0
          ? static_cast<double>(r.prompt_bytes) / static_cast<double>(outcome.prompt_tokens)
          : r.bytes_per_token;
  feedback_.LearnFromTruth(
      {.served = served,
       .est_tokens = on_decode ? d.cached_tokens_est : d.prefill_cached_tokens_est,
       .est_chunks = on_decode ? r.est_chunks_decode : r.est_chunks_prefill,
       .actual_tokens = outcome.cached_tokens,
       .bytes_per_token = bpt,
       .chain = r.chain,
       .route_tick = r.route_tick},
      NominalCapacityTokens(served), ratios_.FleetWide());
}

void RouterImpl::OnComplete(const RouteTicket& ticket, const Outcome& outcome, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = inflight_.find(ticket.id);
  if (it == inflight_.end()) return;
  InflightRequest r = std::move(it->second);
  inflight_.erase(it);
  const Decision& d = r.decision;
  ledger_.Release(r.load, r.first_token);
  const int served = Valid(outcome.served_by) ? outcome.served_by : d.decode_backend;
  LearnPrefillRate(r, outcome, served);
  LeaveResidency(r,
                 std::max<int64_t>(0, outcome.prompt_tokens) +
                     std::max<int64_t>(0, outcome.completion_tokens),
                 now);
  sessions_.Finish(r.session, now);

  if (outcome.ok && outcome.prompt_tokens > 0) {
    ratios_.Observe(r.model, r.prompt_bytes, outcome.prompt_tokens);
    const double fleet = ratios_.FleetWide();
    if (std::abs(fleet - capacity_ratio_) > 0.02 * capacity_ratio_) ApplyCapacities();
  }
  // Only a completed 2xx response proves the engine cached the prompt: a
  // first byte may be an error body (404, 400) from an engine that never
  // prefilled. A stream cut short did cache it; the next truth for that
  // prefix corrects the resulting under-estimate, a phantom entry would
  // mislead routing until then.
  // (A backend retired by a reload while this ran teaches nothing.)
  const bool learn = outcome.ok && !(*specs_)[served].retired;
  // The truth is read before the request's pinned chunks are freed: freeing
  // touches them, which would read as "re-proved since routing".
  if (learn && outcome.cached_tokens >= 0 && !CachedTokensMayIncludeTransfer(d, outcome) &&
      (served == d.decode_backend || served == d.prefill_backend)) {
    LearnFromTruth(r, outcome, served);
  }
  // The engine frees the request's blocks whatever the outcome: they become
  // its most recently freed.
  index_.Unpin(r.decode_pin, r.chain);
  index_.Unpin(r.prefill_pin, r.chain);
  ShareUnpin(ticket.id, /*prefill=*/false, r);
  ShareUnpin(ticket.id, /*prefill=*/true, r);
  if (!learn) {
    // A first byte may have been an error body's: what it put into the
    // shadow is no proof, and goes (as a stream cut short, which the next
    // truth for that prefix corrects).
    if (r.computed_end > r.computed_begin) {
      index_.Forget(d.decode_backend,
                    absl::MakeConstSpan(r.chain).subspan(
                        static_cast<size_t>(r.computed_begin),
                        static_cast<size_t>(r.computed_end - r.computed_begin)));
    }
    return;
  }
  RecordWrites(r, outcome, served);
  // Whoever computed the prompt now caches all of it, and stores it
  // through to its host tier.
  index_.Store(served, r.chain);
  PinStoredPrefix(served);
  index_.Fit(served);
  if (feedback_.HasHostTier(served)) host_index_.Insert(served, r.chain);
  // Its prefill put the prompt's blocks to the fleet-shared pool.
  if (feedback_.HasPool()) pool_index_.Insert(0, r.chain);
  if (outcome.ok && outcome.prompt_tokens > 0 && !r.chain.empty()) {
    sessions_.RecordCompletion(
        r.session, served, r.chain.back(), static_cast<int64_t>(r.chain.size()),
        outcome.prompt_tokens + std::max<int64_t>(0, outcome.completion_tokens));
  }
  if (outcome.kv_transferred.value_or(false) && d.prefill_backend != served &&
      !(*specs_)[d.prefill_backend].retired) {
    index_.Insert(d.prefill_backend, r.chain);
  }
}

// Requests routed to `backend` beyond its pool wait in the engine and take
// their blocks at admission, where they find whatever prefix is cached by
// then: the shared system prompt a request before them stored. The shadow
// reserved their whole footprint at routing, so without this the pool has
// no room left for what the engine keeps, and an instance that stays
// oversubscribed (more routed than it holds) never shows even its shared
// prefix again. Only an overfull pool needs it; it walks the requests in
// flight. Pins shared with other replicas keep the chunks they published.
void RouterImpl::PinStoredPrefix(int backend) {
  if (!index_.Overfull(backend)) return;
  for (auto& [id, q] : inflight_) {
    if (q.pins_shared) continue;
    if (q.decode_pin.instance == backend) index_.ExtendPin(q.decode_pin, q.chain);
    if (q.prefill_pin.instance == backend) index_.ExtendPin(q.prefill_pin, q.chain);
  }
}

bool CachedTokensMayIncludeTransfer(const Decision& decision, const Outcome& outcome) {
  if (outcome.kv_transferred.has_value()) return *outcome.kv_transferred;
  const int served = outcome.served_by >= 0 ? outcome.served_by : decision.decode_backend;
  return decision.mode == DecisionMode::kOffload && served == decision.decode_backend;
}

std::optional<int64_t> EstimateError(const Decision& decision, const Outcome& outcome) {
  if (outcome.cached_tokens < 0 || CachedTokensMayIncludeTransfer(decision, outcome)) {
    return std::nullopt;
  }
  const bool on_prefill = outcome.served_by >= 0 && outcome.served_by == decision.prefill_backend &&
                          outcome.served_by != decision.decode_backend;
  const int64_t est = on_prefill ? decision.prefill_cached_tokens_est : decision.cached_tokens_est;
  return est - outcome.cached_tokens;
}

absl::StatusOr<std::unique_ptr<Router>> Router::Create(Options options,
                                                       std::vector<BackendSpec> backends) {
  if (backends.empty()) {
    return absl::InvalidArgumentError("backends: the list is empty");
  }
  if (backends.size() > static_cast<size_t>(kMaxBackends)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backends: ", backends.size(), " configured, at most ", kMaxBackends, " supported"));
  }
  if (options.chunk_bytes == 0) {
    return absl::InvalidArgumentError("chunk_bytes: must be positive");
  }
  if (!(options.default_bytes_per_token > 0)) {
    return absl::InvalidArgumentError("default_bytes_per_token: must be positive");
  }
  absl::StatusOr<std::unique_ptr<Policy>> policy = MakePolicy(options, backends);
  if (!policy.ok()) return policy.status();
  const PolicyEntry* entry = FindPolicy(options.mode);
  const bool homes_sessions = entry != nullptr && entry->homes_sessions;
  return std::unique_ptr<Router>(new RouterImpl(std::move(options), std::move(backends),
                                                *std::move(policy), homes_sessions));
}

}  // namespace kvroute::router
