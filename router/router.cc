// RouterImpl: the Router facade over the policy, shadow index, session table,
// bytes-per-token model and per-backend load accounting. One absl::Mutex
// guards all of it; Route() builds the FleetSnapshot and runs the (pure,
// microsecond-scale) policy under the lock, so the reservation it makes is
// consistent with the load the policy saw.
#include "router/router.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "router/bytes_per_token.h"
#include "router/policies/placement_cost.h"
#include "router/policy.h"
#include "router/policy_registry.h"
#include "router/prefix_hash.h"
#include "router/rate_learner.h"
#include "router/session_table.h"
#include "router/shadow_index.h"

namespace kvroute::router {
namespace {

struct BackendState {
  bool healthy = true;
  // Bumped when the backend is ejected: its load counters restart at zero,
  // and requests routed before (which carry the old epoch) no longer touch
  // them when they end.
  uint64_t epoch = 0;
  int64_t inflight_requests = 0;
  int64_t inflight_prefill_tokens = 0;
  int64_t decoding_requests = 0;
  int64_t inflight_tokens = 0;
  EngineGauges gauges;
  // Learned share of the nominal capacity the engine really keeps for
  // prompt prefixes (running requests and outputs take the rest).
  double capacity_fraction = 1.0;
  int64_t est_requests = 0;
  double est_abs_error_sum = 0;
  double est_sum = 0;
  double actual_sum = 0;
  double signed_error_sum = 0;
  int64_t last_error = 0;
  int64_t corrections = 0;
  // From the engine's KV events: tokens in blocks it caches (-1: no event
  // yet), and the fraction of a shadow chunk a removal still owes.
  int64_t engine_cached_tokens = -1;
  double evict_carry_tokens = 0;
  // In-flight tokens of requests without a session id (sessions' demand is
  // in the session table's resident footprints).
  int64_t sessionless_tokens = 0;
};

struct InflightRequest {
  Decision decision;
  std::string model;
  std::string session;
  int64_t prompt_bytes = 0;
  std::vector<uint64_t> chain;
  int64_t prefill_new_tokens = 0;  // reserved on the prefill backend
  int64_t total_tokens = 0;        // prompt + expected output
  double bytes_per_token = 0;      // used for the estimate
  int32_t est_chunks_decode = 0;
  int32_t est_chunks_prefill = 0;
  uint64_t route_tick = 0;  // shadow clock at routing
  absl::Time routed_at;
  // Only a stream's first byte is its first token (a plain body's comes
  // with the whole answer).
  bool stream = false;
  double prefill_time_factor = 1;  // the decode backend's, in the prediction
  bool first_token = false;
  uint64_t prefill_epoch = 0;  // BackendState::epoch of each backend at routing
  uint64_t decode_epoch = 0;
  // What the request holds in each backend's modelled KV pool until it ends.
  ShadowIndex::Pin decode_pin;
  ShadowIndex::Pin prefill_pin;
  // Routed with defer_kv_reservation and not dispatched yet: decode_pin is
  // taken by OnDispatch, for footprint_chunks.
  bool pin_deferred = false;
  int64_t footprint_chunks = 0;
};

class RouterImpl : public Router {
 public:
  RouterImpl(Options options, std::vector<BackendSpec> backends, std::unique_ptr<Policy> policy)
      : options_(std::move(options)),
        policy_(std::move(policy)),
        index_(static_cast<int>(backends.size())),
        sessions_(options_.max_sessions, options_.session_ttl, options_.session_resident_window),
        ratios_(options_.default_bytes_per_token, options_.bytes_per_token_alpha,
                options_.max_models),
        placement_(placement::ParamsFromOptions(options_)),
        rates_(options_.rate_learning),
        state_(backends.size()),
        matched_(backends.size()) {
    absl::MutexLock lock(&mu_);
    rates_.Resize(static_cast<int>(backends.size()));
    specs_ = std::make_shared<const std::vector<BackendSpec>>(std::move(backends));
    ApplyCapacities();
  }

  std::shared_ptr<const std::vector<BackendSpec>> Backends() const override {
    absl::MutexLock lock(&mu_);
    return specs_;
  }
  absl::Status UpdateBackends(const std::vector<BackendSpec>& backends) override;
  const Options& options() const override { return options_; }

  absl::StatusOr<RouteTicket> Route(const RequestFeatures& features, absl::Time now) override;
  int64_t OnDispatch(const RouteTicket& ticket, absl::Time now) override;
  absl::StatusOr<Decision> Retarget(const RouteTicket& ticket, int backend,
                                    absl::Time now) override;
  void OnFirstToken(const RouteTicket& ticket, absl::Time now) override;
  void OnComplete(const RouteTicket& ticket, const Outcome& outcome, absl::Time now) override;
  void OnTransfer(const RouteTicket& ticket, double transfer_s) override;
  void SetHealthy(int backend, bool healthy) override;
  void UpdateEngineGauges(int backend, const EngineGauges& g) override;
  std::vector<BackendReport> Report() const override;
  RouterStats Stats() const override;
  double BytesPerToken(const std::string& model) const override {
    absl::MutexLock lock(&mu_);
    return ratios_.For(model);
  }
  int64_t ApplyEngineKvEvents(int backend, absl::Span<const EngineKvEvent> events) override;

 private:
  bool Valid(int b) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return b >= 0 && b < static_cast<int>(specs_->size());
  }
  int64_t NominalCapacityTokens(int b) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t CapacityChunks(int b, double fraction) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyCapacity(int b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyCapacities() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t ChunksToTokens(int64_t chunks, double bytes_per_token) const;
  int64_t TokensToChunks(int64_t tokens, double bytes_per_token) const;
  void Release(InflightRequest& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LearnFromTruth(InflightRequest& r, const Outcome& outcome, int served)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Predict(const FleetSnapshot& fleet, Decision& d) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  // Backend slots; replaced (never modified) by UpdateBackends, so a
  // snapshot handed out stays valid.
  std::shared_ptr<const std::vector<BackendSpec>> specs_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Policy> policy_ ABSL_GUARDED_BY(mu_);
  ShadowIndex index_ ABSL_GUARDED_BY(mu_);
  SessionTable sessions_ ABSL_GUARDED_BY(mu_);
  BytesPerTokenModel ratios_ ABSL_GUARDED_BY(mu_);
  const placement::PlacementParams placement_;  // for predictions the policy did not make
  RateLearner rates_ ABSL_GUARDED_BY(mu_);
  // rates_.transfer_version() of the table in snapshot_.
  uint64_t snapshot_transfer_version_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<BackendState> state_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, InflightRequest> inflight_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> matched_ ABSL_GUARDED_BY(mu_);  // scratch for Match()
  FleetSnapshot snapshot_ ABSL_GUARDED_BY(mu_);        // scratch, rebuilt per Route
  double capacity_ratio_ ABSL_GUARDED_BY(mu_) = 0;     // bytes/token of capacities
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t sequence_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t affinity_hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t affinity_breaks_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t shed_new_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t shed_running_ ABSL_GUARDED_BY(mu_) = 0;
};

int64_t RouterImpl::NominalCapacityTokens(int b) const {
  if (state_[b].gauges.capacity_tokens > 0) return state_[b].gauges.capacity_tokens;
  if ((*specs_)[b].capacity_tokens > 0) return (*specs_)[b].capacity_tokens;
  return std::max<int64_t>(1, options_.default_capacity_tokens);
}

int64_t RouterImpl::CapacityChunks(int b, double fraction) const {
  const double chunks = static_cast<double>(NominalCapacityTokens(b)) * ratios_.FleetWide() /
                        static_cast<double>(options_.chunk_bytes);
  return std::max<int64_t>(1, static_cast<int64_t>(chunks * fraction));
}

void RouterImpl::ApplyCapacity(int b) {
  index_.SetCapacity(b, CapacityChunks(b, state_[b].capacity_fraction));
}

void RouterImpl::ApplyCapacities() {
  capacity_ratio_ = ratios_.FleetWide();
  for (int b = 0; b < static_cast<int>(specs_->size()); ++b) ApplyCapacity(b);
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
  // Hash outside the lock when the caller did not.
  std::vector<uint64_t> own_chain;
  const std::vector<uint64_t>* chain = &features.chunk_hashes;
  if (chain->empty() && features.prompt_bytes.size() >= options_.chunk_bytes) {
    own_chain = HashPromptChunks(features.prompt_bytes, options_.chunk_bytes);
    chain = &own_chain;
  }

  absl::MutexLock lock(&mu_);
  if (inflight_.size() >= options_.max_inflight_requests) {
    return absl::ResourceExhaustedError(
        absl::StrCat("router: ", inflight_.size(), " requests in flight (max_inflight_requests)"));
  }
  const double bpt = ratios_.For(features.model);
  const int n = static_cast<int>(specs_->size());
  index_.Match(*chain, absl::MakeSpan(matched_));

  FleetSnapshot& fleet = snapshot_;
  fleet.backends.resize(n);
  fleet.prompt_tokens_est =
      static_cast<int64_t>(std::ceil(static_cast<double>(features.prompt_bytes.size()) / bpt));
  const int64_t output_est = features.max_tokens > 0
                                 ? std::min(features.max_tokens, options_.max_output_tokens_est)
                                 : options_.default_output_tokens;
  fleet.footprint_tokens_est = fleet.prompt_tokens_est + output_est;
  sessions_.AgeResident(now);
  const SessionTable::Info* session = sessions_.Find(features.session_id, now);
  fleet.session_backend = session == nullptr ? -1 : session->backend;
  fleet.sequence = sequence_++;
  // The session's instance also holds its last response, which the shadow
  // cannot hash (the router never sees output bytes): when this prompt
  // continues the last one and the shadow still holds that, credit what the
  // engine reported holding after it.
  int64_t continuation_tokens = 0;
  const bool continues = session != nullptr && session->prompt_chunks > 0 &&
                         static_cast<int64_t>(chain->size()) >= session->prompt_chunks &&
                         (*chain)[session->prompt_chunks - 1] == session->last_chunk_hash;
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
    BackendSnapshot& v = fleet.backends[b];
    v.healthy = s.healthy && std::find(features.avoid_backends.begin(),
                                       features.avoid_backends.end(),
                                       b) == features.avoid_backends.end();
    v.role = (*specs_)[b].role;
    v.inflight_requests = s.inflight_requests;
    v.inflight_prefill_tokens = s.inflight_prefill_tokens;
    v.decoding_requests = s.decoding_requests;
    v.inflight_tokens = s.inflight_tokens;
    v.engine_running = s.gauges.num_requests_running;
    v.engine_waiting = s.gauges.num_requests_waiting;
    v.kv_usage = s.gauges.kv_cache_usage_perc;
    v.kv_capacity_tokens = ChunksToTokens(index_.capacity(b), bpt);
    v.resident_tokens = sessions_.ResidentTokens(b) + s.sessionless_tokens;
    int64_t cached = ChunksToTokens(matched_[b], bpt);
    if (b == fleet.session_backend) cached = std::max(cached, continuation_tokens);
    if (reference) cached = std::max<int64_t>(0, features.reference_cached_tokens[b]);
    v.cached_tokens_est = std::min(fleet.prompt_tokens_est, cached);
    v.prefill_time_factor = rates_.prefill_factor(b);
  }
  // The pair factors change only when an offload's transfer is learned.
  if (snapshot_transfer_version_ != rates_.transfer_version()) {
    fleet.transfer_time_factors = rates_.transfer_table();
    snapshot_transfer_version_ = rates_.transfer_version();
  }
  // The session's own footprint is replaced by this request's wherever it
  // goes: it is not demand from others on its instance.
  if (session != nullptr && session->footprint_tokens > 0 && fleet.session_backend < n) {
    BackendSnapshot& home = fleet.backends[fleet.session_backend];
    home.resident_tokens = std::max<int64_t>(0, home.resident_tokens - session->footprint_tokens);
  }

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
  d.decode_capacity_tokens = NominalCapacityTokens(d.decode_backend);
  ShedVerdict verdict;
  if (features.allow_shed && options_.shed.enabled) {
    // A known session, or a prompt mostly cached where it goes (a running
    // conversation that sends no session id), continues; anything else starts.
    const bool running =
        session != nullptr || (d.cached_tokens_est > 0 && 2 * d.cached_tokens_est >= d.prompt_tokens_est);
    verdict = JudgeShed(
        options_.shed, {options_.slo.ttft_warm_s, options_.slo.ttft_medium_s, options_.slo.ttft_heavy_s},
        d, running);
    if (verdict.shed) {
      ++(running ? shed_running_ : shed_new_);
      RouteTicket shed;
      shed.decision = d;
      shed.shed = verdict;
      return shed;
    }
  }
  const bool split = d.mode == DecisionMode::kOffload && d.prefill_backend != d.decode_backend;

  InflightRequest r;
  r.decision = d;
  r.model = features.model;
  r.session = features.session_id;
  r.prompt_bytes = static_cast<int64_t>(features.prompt_bytes.size());
  r.chain = *chain;
  r.bytes_per_token = bpt;
  r.est_chunks_decode = matched_[d.decode_backend];
  r.est_chunks_prefill = matched_[d.prefill_backend];
  r.route_tick = index_.clock();
  r.routed_at = now;
  r.stream = features.stream;
  r.prefill_time_factor = placement::PrefillTimeFactor(fleet, d.decode_backend);
  r.prefill_epoch = state_[d.prefill_backend].epoch;
  r.decode_epoch = state_[d.decode_backend].epoch;
  r.prefill_new_tokens = std::max<int64_t>(0, d.prompt_tokens_est - d.prefill_cached_tokens_est);
  r.total_tokens = fleet.footprint_tokens_est;

  // The request's footprint in the engines' KV pools, from now until it
  // ends: the cached prefix it reuses is pinned, the rest (its uncached
  // prompt and, where it decodes, its output) reserved, so the cached
  // prefixes that stay evictable are what the pool has left. Taken at
  // routing rather than at admission: the estimate for the next request must
  // predict the engine at that request's admission, which comes after the
  // admission of every request already routed there.
  const int64_t prompt_chunks =
      std::max(static_cast<int64_t>(chain->size()), TokensToChunks(d.prompt_tokens_est, bpt));
  r.footprint_chunks = prompt_chunks + TokensToChunks(output_est, bpt);
  if (features.defer_kv_reservation && d.prefill_backend == d.decode_backend) {
    r.pin_deferred = true;
  } else {
    r.decode_pin =
        index_.PinRequest(d.decode_backend, *chain, r.est_chunks_decode, r.footprint_chunks);
  }
  if (d.prefill_backend != d.decode_backend) {
    r.prefill_pin =
        index_.PinRequest(d.prefill_backend, *chain, r.est_chunks_prefill, prompt_chunks);
  }

  BackendState& p = state_[d.prefill_backend];
  BackendState& q = state_[d.decode_backend];
  p.inflight_requests += 1;
  p.inflight_prefill_tokens += r.prefill_new_tokens;
  if (d.mode == DecisionMode::kOffload) {
    p.inflight_tokens += d.prompt_tokens_est;
    q.inflight_requests += 1;
  }
  q.inflight_tokens += r.total_tokens;
  if (r.session.empty()) q.sessionless_tokens += r.total_tokens;

  if (d.affinity_hit) ++affinity_hits_;
  if (d.affinity_broken) ++affinity_breaks_;
  sessions_.Assign(features.session_id, d.decode_backend, now, r.total_tokens);

  RouteTicket ticket;
  ticket.id = next_ticket_++;
  ticket.decision = d;
  ticket.transfer_time_factor =
      split ? placement::TransferTimeFactor(fleet, d.prefill_backend, d.decode_backend) : 1;
  ticket.shed = verdict;
  inflight_.emplace(ticket.id, std::move(r));
  return ticket;
}

int64_t RouterImpl::OnDispatch(const RouteTicket& ticket, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = inflight_.find(ticket.id);
  if (it == inflight_.end() || !it->second.pin_deferred) return -1;
  InflightRequest& r = it->second;
  r.pin_deferred = false;
  // The estimate's evictions, and the prefill's time, are judged from here:
  // the engine gets it now.
  r.route_tick = index_.clock();
  r.routed_at = now;
  const int b = r.decision.decode_backend;
  if (state_[b].epoch != r.decode_epoch) return r.decision.cached_tokens_est;  // ejected meanwhile
  // What the instance evicted of the prefix while the request was held.
  index_.Match(r.chain, absl::MakeSpan(matched_));
  if (matched_[b] < r.est_chunks_decode) {
    r.est_chunks_decode = matched_[b];
    r.est_chunks_prefill = matched_[b];
    r.decision.cached_tokens_est = std::min(r.decision.cached_tokens_est,
                                            ChunksToTokens(matched_[b], r.bytes_per_token));
    r.decision.prefill_cached_tokens_est = r.decision.cached_tokens_est;
  }
  r.decode_pin = index_.PinRequest(b, r.chain, r.est_chunks_decode, r.footprint_chunks);
  return r.decision.cached_tokens_est;
}

absl::StatusOr<Decision> RouterImpl::Retarget(const RouteTicket& ticket, int backend,
                                              absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = inflight_.find(ticket.id);
  if (it == inflight_.end() || !it->second.pin_deferred || it->second.first_token) {
    return absl::FailedPreconditionError("router: only a held request can be retargeted");
  }
  InflightRequest& r = it->second;
  if (!Valid(backend) || !state_[backend].healthy || (*specs_)[backend].retired ||
      (*specs_)[backend].role == BackendRole::kPrefill) {
    return absl::FailedPreconditionError(
        absl::StrCat("router: backend ", backend, " cannot take a retargeted request"));
  }
  if (backend == r.decision.decode_backend) return r.decision;
  Release(r);
  Decision& d = r.decision;
  index_.Match(r.chain, absl::MakeSpan(matched_));
  d.decode_backend = backend;
  d.prefill_backend = backend;
  d.affinity_hit = false;
  d.cached_tokens_est =
      std::min(d.prompt_tokens_est, ChunksToTokens(matched_[backend], r.bytes_per_token));
  d.prefill_cached_tokens_est = d.cached_tokens_est;
  d.decode_capacity_tokens = NominalCapacityTokens(backend);
  // The prediction was for the other instance: none is learned from this one.
  d.predicted_ttft_s = -1;
  r.est_chunks_decode = matched_[backend];
  r.est_chunks_prefill = matched_[backend];
  r.prefill_new_tokens = std::max<int64_t>(0, d.prompt_tokens_est - d.cached_tokens_est);
  r.prefill_epoch = r.decode_epoch = state_[backend].epoch;
  BackendState& q = state_[backend];
  q.inflight_requests += 1;
  q.inflight_prefill_tokens += r.prefill_new_tokens;
  q.inflight_tokens += r.total_tokens;
  if (r.session.empty()) q.sessionless_tokens += r.total_tokens;
  sessions_.Assign(r.session, backend, now, r.total_tokens);
  return d;
}

void RouterImpl::OnFirstToken(const RouteTicket& ticket, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = inflight_.find(ticket.id);
  if (it == inflight_.end() || it->second.first_token) return;
  InflightRequest& r = it->second;
  r.first_token = true;
  const Decision& d = r.decision;
  // A backend ejected since routing had its counters reset: leave them.
  BackendState& p = state_[d.prefill_backend];
  if (p.epoch == r.prefill_epoch) {
    p.inflight_prefill_tokens -= r.prefill_new_tokens;
    if (d.mode == DecisionMode::kOffload) {
      // The prefill leg is over; its instance only serves the KV pull now.
      p.inflight_requests -= 1;
      p.inflight_tokens -= d.prompt_tokens_est;
    }
  }
  BackendState& q = state_[d.decode_backend];
  if (q.epoch == r.decode_epoch) q.decoding_requests += 1;

  // A co-located streamed request's TTFT teaches its instance's prefill
  // time factor. WARM turns teach nothing: their TTFT is mostly what the
  // model leaves out (a scheduling step, the HTTP round trip).
  if (options_.rate_learning.enabled && r.stream && d.mode == DecisionMode::kColocated &&
      d.prefill_backend == d.decode_backend && d.request_class != RequestClass::kWarm &&
      d.predicted_ttft_s > 0 && q.epoch == r.decode_epoch && !(*specs_)[d.decode_backend].retired) {
    rates_.ObservePrefill(d.decode_backend, absl::ToDoubleSeconds(now - r.routed_at),
                          d.predicted_ttft_s / r.prefill_time_factor);
  }
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

void RouterImpl::Release(InflightRequest& r) {
  const Decision& d = r.decision;
  BackendState& p = state_[d.prefill_backend];
  BackendState& q = state_[d.decode_backend];
  // Counters of a backend ejected since routing were reset at ejection.
  const bool p_live = p.epoch == r.prefill_epoch;
  const bool q_live = q.epoch == r.decode_epoch;
  if (r.first_token) {
    if (q_live) q.decoding_requests -= 1;
  } else if (p_live) {
    p.inflight_prefill_tokens -= r.prefill_new_tokens;
    if (d.mode == DecisionMode::kOffload) {
      p.inflight_requests -= 1;
      p.inflight_tokens -= d.prompt_tokens_est;
    }
  }
  if (q_live) {
    q.inflight_requests -= 1;
    q.inflight_tokens -= r.total_tokens;
    if (r.session.empty()) q.sessionless_tokens -= r.total_tokens;
  }
}

void RouterImpl::LearnFromTruth(InflightRequest& r, const Outcome& outcome, int served) {
  const Decision& d = r.decision;
  const bool on_decode = served == d.decode_backend;
  const int64_t est_tokens = on_decode ? d.cached_tokens_est : d.prefill_cached_tokens_est;
  const int64_t est_chunks = on_decode ? r.est_chunks_decode : r.est_chunks_prefill;
  const int64_t actual = outcome.cached_tokens;
  BackendState& s = state_[served];

  const int64_t error = est_tokens - actual;
  s.est_requests += 1;
  s.est_abs_error_sum += static_cast<double>(std::llabs(error));
  s.est_sum += static_cast<double>(est_tokens);
  s.actual_sum += static_cast<double>(actual);
  s.signed_error_sum += static_cast<double>(error);
  s.last_error = error;

  // This request's own bytes/token converts the engine's tokens to chunks.
  const double bpt =
      outcome.prompt_tokens > 0 && r.prompt_bytes > 0
          ? static_cast<double>(r.prompt_bytes) / static_cast<double>(outcome.prompt_tokens)
          : r.bytes_per_token;
  const int64_t actual_chunks = static_cast<int64_t>(static_cast<double>(actual) * bpt /
                                                     static_cast<double>(options_.chunk_bytes));
  // The estimate may include a session continuation credit beyond the
  // shadow's chunks; growing capacity must compare against all of it.
  const int64_t est_tokens_as_chunks = static_cast<int64_t>(
      static_cast<double>(est_tokens) * bpt / static_cast<double>(options_.chunk_bytes));
  const int64_t nominal = CapacityChunks(served, 1.0);
  if (est_chunks > actual_chunks + options_.eviction_tolerance_chunks &&
      actual_chunks < static_cast<int64_t>(r.chain.size())) {
    // The engine no longer had chunk `actual_chunks` of this chain. Unless
    // something re-proved it since routing, everything as old or older in
    // the shadow's LRU went with it (the engine's LRU is monotone too).
    const uint64_t tick = index_.TickOf(served, r.chain[actual_chunks]);
    if (tick != 0 && tick <= r.route_tick) {
      index_.EvictThrough(served, tick);
      s.corrections += 1;
      // The engine's own eviction reports size this pool; without them, what
      // is left beside what requests in flight hold is what the engine
      // keeps: move the effective capacity toward it.
      if (index_.engine_evicts(served)) return;
      const double kept = static_cast<double>(index_.size(served) + index_.reserved(served)) /
                          static_cast<double>(std::max<int64_t>(1, nominal));
      const double lr = std::clamp(options_.capacity_learning_rate, 0.0, 1.0);
      s.capacity_fraction = std::clamp((1 - lr) * s.capacity_fraction + lr * kept,
                                       std::clamp(options_.min_capacity_fraction, 0.0, 1.0), 1.0);
      ApplyCapacity(served);
    }
  } else if (actual_chunks >
                 std::max(est_chunks, est_tokens_as_chunks) + options_.eviction_tolerance_chunks &&
             s.capacity_fraction < 1.0) {
    // The engine kept more than the shadow did: the shadow evicted too early.
    const double lr = std::clamp(options_.capacity_learning_rate, 0.0, 1.0);
    s.capacity_fraction = std::min(1.0, s.capacity_fraction + lr * (1 - s.capacity_fraction));
    ApplyCapacity(served);
  }
}

void RouterImpl::OnComplete(const RouteTicket& ticket, const Outcome& outcome, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = inflight_.find(ticket.id);
  if (it == inflight_.end()) return;
  InflightRequest r = std::move(it->second);
  inflight_.erase(it);
  Release(r);
  sessions_.Finish(r.session, now);

  const Decision& d = r.decision;
  if (outcome.ok && outcome.prompt_tokens > 0) {
    ratios_.Observe(r.model, r.prompt_bytes, outcome.prompt_tokens);
    const double fleet = ratios_.FleetWide();
    if (std::abs(fleet - capacity_ratio_) > 0.02 * capacity_ratio_) ApplyCapacities();
  }
  const int served = Valid(outcome.served_by) ? outcome.served_by : d.decode_backend;
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
  if (!learn) return;
  // Whoever computed the prompt now caches all of it.
  index_.Insert(served, r.chain);
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

void RouterImpl::SetHealthy(int backend, bool healthy) {
  absl::MutexLock lock(&mu_);
  if (!Valid(backend) || (*specs_)[backend].retired) return;
  BackendState& s = state_[backend];
  if (!healthy && s.healthy) {
    // Ejected: its requests are failing or will be retried elsewhere, so
    // the load they reserved must stop steering traffic (it would make the
    // instance look busy after it returns). New epoch: the requests routed
    // before leave the reset counters alone when they end.
    s.epoch += 1;
    s.inflight_requests = 0;
    s.inflight_prefill_tokens = 0;
    s.decoding_requests = 0;
    s.inflight_tokens = 0;
    s.sessionless_tokens = 0;
    // Its events may not resume (a restart without them): the shadow's own
    // model trims it until they do.
    index_.SetEngineEvicts(backend, false);
  }
  // An instance coming back most likely restarted with an empty cache
  // (a vLLM restart loses its prefix cache): drop its shadow rather than
  // route by phantom hits; engine cached_tokens re-teach it. (Sessions
  // that lived there moved away while it was out: a session's next turn
  // breaks affinity to an unhealthy instance and is reassigned.)
  if (healthy && !s.healthy) index_.Clear(backend);
  s.healthy = healthy;
}

int64_t RouterImpl::ApplyEngineKvEvents(int backend, absl::Span<const EngineKvEvent> events) {
  absl::MutexLock lock(&mu_);
  if (!Valid(backend) || (*specs_)[backend].retired) return 0;
  BackendState& s = state_[backend];
  const double tokens_per_chunk =
      static_cast<double>(options_.chunk_bytes) / std::max(ratios_.FleetWide(), 1e-9);
  int64_t evicted = 0;
  // From the first event on, the engine's removals trim the shadow beyond
  // what it evicted ahead of them.
  if (!events.empty() && !index_.engine_evicts(backend)) index_.SetEngineEvicts(backend, true);
  for (const EngineKvEvent& e : events) {
    switch (e.kind) {
      case EngineKvEvent::Kind::kCleared:
        index_.Clear(backend);
        s.engine_cached_tokens = 0;
        s.evict_carry_tokens = 0;
        break;
      case EngineKvEvent::Kind::kStored:
        s.engine_cached_tokens = std::max<int64_t>(s.engine_cached_tokens, 0) + e.tokens;
        break;
      case EngineKvEvent::Kind::kRemoved: {
        s.engine_cached_tokens = std::max<int64_t>(s.engine_cached_tokens - e.tokens, 0);
        const double owed = s.evict_carry_tokens + static_cast<double>(e.tokens);
        const auto chunks = static_cast<int64_t>(owed / tokens_per_chunk);
        evicted += index_.EvictLeastRecentlyFreed(backend, chunks);
        // Only the fraction of a chunk is carried: when the shadow held fewer
        // entries than the engine evicted, it has nothing older left to owe.
        s.evict_carry_tokens = owed - static_cast<double>(chunks) * tokens_per_chunk;
        break;
      }
    }
  }
  return evicted;
}

void RouterImpl::UpdateEngineGauges(int backend, const EngineGauges& g) {
  absl::MutexLock lock(&mu_);
  if (!Valid(backend)) return;
  BackendState& s = state_[backend];
  const bool capacity_changed =
      g.capacity_tokens > 0 && g.capacity_tokens != s.gauges.capacity_tokens;
  const int64_t known_capacity = s.gauges.capacity_tokens;
  s.gauges = g;
  // A scrape without vllm:cache_config_info keeps the last known capacity.
  if (g.capacity_tokens <= 0) s.gauges.capacity_tokens = known_capacity;
  if (capacity_changed) ApplyCapacity(backend);
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
    s.epoch += 1;
    s.inflight_requests = s.inflight_prefill_tokens = s.decoding_requests = s.inflight_tokens = 0;
    index_.Clear(b);
  }
  const int n = static_cast<int>(next.size());
  index_.AddInstances(n - index_.num_instances());
  rates_.Resize(n);
  state_.resize(n);
  matched_.resize(n);
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
    BackendReport r;
    r.name = (*specs_)[b].name;
    r.role = (*specs_)[b].role;
    r.retired = (*specs_)[b].retired;
    r.healthy = s.healthy;
    r.inflight_requests = s.inflight_requests;
    r.inflight_prefill_tokens = s.inflight_prefill_tokens;
    r.decoding_requests = s.decoding_requests;
    r.inflight_tokens = s.inflight_tokens;
    r.shadow_chunks = index_.size(b);
    r.engine_cached_tokens = s.engine_cached_tokens;
    r.shadow_tokens = ChunksToTokens(r.shadow_chunks, bpt);
    r.capacity_tokens = NominalCapacityTokens(b);
    r.effective_capacity_tokens = ChunksToTokens(index_.capacity(b), bpt);
    r.kv_usage = s.gauges.kv_cache_usage_perc;
    r.engine_running = s.gauges.num_requests_running;
    r.engine_waiting = s.gauges.num_requests_waiting;
    r.est_requests = s.est_requests;
    r.est_abs_error_tokens_sum = s.est_abs_error_sum;
    r.est_tokens_sum = s.est_sum;
    r.actual_cached_tokens_sum = s.actual_sum;
    r.est_signed_error_tokens_sum = s.signed_error_sum;
    r.last_est_error_tokens = s.last_error;
    r.shadow_corrections = s.corrections;
    r.prefill_time_factor = rates_.prefill_factor(b);
    r.prefill_time_samples = rates_.prefill_samples(b);
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
  s.transfer_time_factor = rates_.fleet_transfer_factor();
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

}  // namespace

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
  return std::unique_ptr<Router>(
      new RouterImpl(std::move(options), std::move(backends), *std::move(policy)));
}

}  // namespace kvroute::router
