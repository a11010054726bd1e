// RouterImpl: the Router facade (router/router.h) over its parts, one role
// each: the policy (router/policy.h), the shadow index and its feedback
// (router/shadow_feedback.h), the load ledger (router/load_ledger.h), the
// residency model (router/residency_gate.h), the session table, the
// bytes-per-token model and the rate learner. One absl::Mutex guards all of
// it; Route() builds the FleetSnapshot and runs the (pure,
// microsecond-scale) policy under the lock, so the reservation it makes is
// consistent with the load the policy saw.
//
// Internal to the router library: router/router.cc has the request life
// cycle (Route, Dispatch, OnFirstToken, OnComplete and the residency hold),
// router/router_fleet.cc the fleet (backends, health, gauges, engine events,
// reports).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "router/bytes_per_token.h"
#include "router/eviction_history.h"
#include "router/live_sizing.h"
#include "router/load_ledger.h"
#include "router/policies/placement_cost.h"
#include "router/policy.h"
#include "router/rate_learner.h"
#include "router/residency_gate.h"
#include "router/router.h"
#include "router/session_table.h"
#include "router/shadow_feedback.h"
#include "router/shadow_index.h"

namespace kvroute::router {

// A backend's state beside its load: health and the engine's gauges.
struct BackendState {
  bool healthy = true;
  EngineGauges gauges;
  // One tier's load counters (bytes, seconds) at the last sample taken
  // from them.
  struct LoadsSeen {
    double bytes = -1;
    double seconds = -1;
  };
  LoadsSeen host_loads_seen;
  LoadsSeen pool_loads_seen;
};

// Where a routed request stands in the residency model.
enum class Residency {
  kNone,      // not in it (no session), or it gave its place up
  kWaiting,   // held: RouteTicket::residency_wait names it
  kResident,  // admitted: its session is resident on `resident_on`
};

struct InflightRequest {
  Decision decision;
  std::string model;
  std::string session;
  int64_t prompt_bytes = 0;
  std::vector<uint64_t> chain;
  LoadLedger::Claim load;
  double bytes_per_token = 0;  // used for the estimate
  int32_t est_chunks_decode = 0;
  int32_t est_chunks_prefill = 0;
  uint64_t route_tick = 0;  // shadow clock at routing
  absl::Time routed_at;
  // Only a stream's first byte is its first token (a plain body's comes
  // with the whole answer).
  bool stream = false;
  double prefill_time_factor = 1;  // the decode backend's, in the prediction
  int64_t predicted_cached_tokens = 0;  // the decode backend's, in the prediction
  bool first_token = false;
  // chain[computed_begin, computed_end): what its first token put into the
  // shadow (ShadowIndex::HoldComputed), taken back if it ends in failure.
  int32_t computed_begin = 0;
  int32_t computed_end = 0;
  // Its realised TTFT, kept from the first token for the prefill time
  // factor's sample at OnComplete; -1 when it teaches nothing.
  double ttft_sample_s = -1;
  // What the request holds in each backend's modelled KV pool until it ends.
  ShadowIndex::Pin decode_pin;
  ShadowIndex::Pin prefill_pin;
  // Routed with defer_kv_reservation and not dispatched yet: decode_pin is
  // taken by Dispatch, for footprint_chunks.
  bool pin_deferred = false;
  int64_t footprint_chunks = 0;
  // Routed while sharing pins with other replicas: its pins are published.
  bool pins_shared = false;
  Residency residency = Residency::kNone;
  uint64_t residency_wait = 0;
  int resident_on = -1;
  // The longest the residency model lets it wait (ResidencyGate::WaitBound).
  absl::Duration residency_bound = absl::ZeroDuration();
};

class RouterImpl : public Router {
 public:
  RouterImpl(Options options, std::vector<BackendSpec> backends, std::unique_ptr<Policy> policy,
             bool homes_sessions);

  std::shared_ptr<const std::vector<BackendSpec>> Backends() const override;
  absl::Status UpdateBackends(const std::vector<BackendSpec>& backends) override;
  const Options& options() const override { return options_; }

  absl::StatusOr<RouteTicket> Route(const RequestFeatures& features, absl::Time now) override;
  Dispatched Dispatch(const RouteTicket& ticket, absl::Time now) override;
  void Sent(const RouteTicket& ticket, absl::Time now, int64_t resident_turns) override;
  void SetResidencyListener(ResidencyListener woken) override;
  bool Held(const RouteTicket& ticket) const override;
  void TickResidency(absl::Time now) override;
  std::optional<absl::Time> NextResidencyEvent() const override;
  void Unhold(const RouteTicket& ticket, absl::Time now) override;
  ResidencyGate::Counters ResidencyCounters() const override;
  size_t ResidencyWaiting() const override;
  bool HoldsSessions() const override { return options_.residency.enabled; }
  void OnFirstToken(const RouteTicket& ticket, absl::Time now) override;
  void OnComplete(const RouteTicket& ticket, const Outcome& outcome, absl::Time now) override;
  void OnTransfer(const RouteTicket& ticket, double transfer_s) override;
  void SetHealthy(int backend, bool healthy) override;
  void UpdateEngineGauges(int backend, const EngineGauges& g) override;
  std::vector<BackendReport> Report() const override;
  std::optional<RequestFeatures::PeerSession> SessionRecord(std::string_view session,
                                                            absl::Time now) override;
  std::vector<PeerLoad> LocalLoad() const override;
  void SetPeerLoad(std::vector<PeerLoad> by_backend, absl::Time now) override;
  std::vector<std::pair<int, std::string>> TakeResidencyDepartures() override;
  void ShareShadowPins() override;
  ShadowPinChanges TakeShadowPinChanges() override;
  void ApplyPeerShadowPins(const PeerShadowPins& peers) override;
  RouterStats Stats() const override;
  KvSizingReport Sizing(absl::Time now) override;
  double BytesPerToken(const std::string& model) const override;
  int64_t ApplyEngineKvEvents(int backend, absl::Span<const EngineKvEvent> events) override;

 private:
  // What Route's steps pass along.
  struct Routing;

  bool Valid(int b) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return b >= 0 && b < static_cast<int>(specs_->size());
  }
  int64_t NominalCapacityTokens(int b) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The host tier's size in KV tokens as the engine's metrics report it,
  // when the time model gives the KV bytes per token; 0 otherwise.
  int64_t HostTierTokens(int b) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The KV the tiers beyond `b`'s GPU keep its resident sessions in, when
  // the router prices the tiers (Options::host_tier.aware): the larger of
  // its host tier and its share of the fleet-shared pool's content
  // (kUnboundedResidentTokens while the pool has evicted nothing); 0 with
  // neither. Those hold what the GPU holds (written through), and a session
  // swapped out of the GPU comes back by a reload.
  static constexpr int64_t kUnboundedResidentTokens = int64_t{1} << 50;
  int64_t TierCapacityTokens(int b) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The KV `b` keeps its resident sessions in without a recompute: its
  // nominal GPU pool, or TierCapacityTokens if larger; the GPU pool alone
  // while gate_room_ says so (router.residency.room).
  int64_t ResidentCapacityTokens(int b) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyCapacity(int b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyHostCapacity(int backend) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes features.peer_session as this replica's own record when newer.
  void AdoptPeerSession(const RequestFeatures& features, const std::vector<uint64_t>& chain,
                        absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ages a session record's prompt (`recorded`, whose turn ended on
  // `backend` at `finished` holding `held_tokens`) by the engine's events
  // since: the shadow keeps (learns, with `learn`) the head the engine still
  // holds and forgets the tail beyond it.
  void AgeSessionRecord(int backend, absl::Span<const uint64_t> recorded, absl::Time finished,
                        int64_t held_tokens, const std::string& model, bool learn)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Loads smaller than this since the last sample wait for more: 64 MiB is
  // about 40 blocks of a 30B model's KV, enough that the engine's timer
  // granularity and one load's fixed costs do not dominate.
  static constexpr double kMinReloadSampleBytes = 64.0 * 1024 * 1024;
  // The engine's host tier and pool loads teach their reload factors.
  void LearnReloads(int backend, BackendState& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyCapacities() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t ChunksToTokens(int64_t chunks, double bytes_per_token) const;
  int64_t TokensToChunks(int64_t tokens, double bytes_per_token) const;

  // Route's steps, in order.
  void BuildSnapshot(const RequestFeatures& features, Routing& ro, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Decide(Routing& ro) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The shed verdict on the decision; a running session's turn that it
  // sheds off the session's instance goes to that instance instead when
  // it would be served there in time (the decision is replaced).
  ShedVerdict JudgeShedding(const RequestFeatures& features, Routing& ro)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the session's instance `home` (valid) can take a co-located
  // turn in this snapshot: healthy, not retired, not prefill-only.
  bool CanServeHome(int home) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `d` placed co-located on the session's instance `home`, with its
  // prediction there.
  Decision AtHome(const Decision& d, int home) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A session the overload rule moved stays on its instance when a host tier
  // there holds its prefix and its first token comes sooner there
  // (Decision::kept_home).
  void KeepHomeIfSooner(Routing& ro) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  InflightRequest Reserve(const RequestFeatures& features, const Routing& ro, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnterResidency(InflightRequest& r, const RouteTicket& ticket, bool hold, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Counts the prefix each instance's host tier holds beyond its GPU hit as
  // cached, to be reloaded (Options::host_tier).
  void AddHostTierHits(const std::vector<uint64_t>& chain, FleetSnapshot& fleet, double bpt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts the prefix the fleet-shared pool holds beyond each instance's GPU
  // and host hits as cached, to be reloaded over its NIC (Options::host_tier).
  void AddPoolHits(const std::vector<uint64_t>& chain, FleetSnapshot& fleet, double bpt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Predict(const FleetSnapshot& fleet, Decision& d) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Extends the pins of requests in flight on `backend` over the prefix a
  // completed request just stored there (ShadowIndex::ExtendPin).
  void PinStoredPrefix(int backend) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A held request goes to `backend` instead (the residency model admitted
  // it there); false, changing nothing, when `backend` cannot take it.
  bool Retarget(InflightRequest& r, int backend, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tokens of r's prompt `backend` holds: its GPU pool in the shadow
  // (matched_, which the caller has filled for r's chain) or, when the
  // router prices tiers, what its host tier or the fleet-shared pool would
  // reload there.
  int64_t HeldTokens(const InflightRequest& r, int backend) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LeaveResidency(InflightRequest& r, int64_t footprint_tokens, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands the residency model's woken waiters to the listener.
  void Wake(std::vector<uint64_t>& woken) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LearnFromTruth(const InflightRequest& r, const Outcome& outcome, int served)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The prefill time factor's sample for r's realised TTFT (ttft_sample_s),
  // against the prediction with its own prefill priced at the cached count
  // the engine reported where it did (served by r's instance, no KV
  // received), at the estimate where it did not.
  void LearnPrefillRate(const InflightRequest& r, const Outcome& outcome, int served)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Live sizing (router/router_sizing.cc): the KV a completed request wrote
  // into `served`'s tiers, the engine's stored blocks, a session turn's
  // reuse gap.
  void RecordWrites(const InflightRequest& r, const Outcome& outcome, int served)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordStoredEvents(absl::Span<const EngineKvEvent> events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordReuseGap(const InflightRequest& r, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records the pin ticket `ticket`'s request `r` took (its decode or
  // prefill side) or gave back, for TakeShadowPinChanges, if it was routed
  // while ShareShadowPins was on.
  void SharePin(uint64_t ticket, bool prefill, const InflightRequest& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ShareUnpin(uint64_t ticket, bool prefill, const InflightRequest& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  // The policy keeps sessions on an instance (PolicyEntry::homes_sessions).
  const bool homes_sessions_;
  mutable absl::Mutex mu_;
  // Backend slots; replaced (never modified) by UpdateBackends, so a
  // snapshot handed out stays valid.
  std::shared_ptr<const std::vector<BackendSpec>> specs_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Policy> policy_ ABSL_GUARDED_BY(mu_);
  ShadowIndex index_ ABSL_GUARDED_BY(mu_);
  ShadowIndex host_index_ ABSL_GUARDED_BY(mu_);  // the engines' host tiers
  ShadowIndex pool_index_ ABSL_GUARDED_BY(mu_);  // the fleet-shared pool: instance 0
  ShadowFeedback feedback_ ABSL_GUARDED_BY(mu_);
  // The engines' timed KV events, to age the prefixes peers' records name.
  EvictionHistory evictions_ ABSL_GUARDED_BY(mu_);
  LoadLedger ledger_ ABSL_GUARDED_BY(mu_);
  // Other replicas' load by backend slot (SetPeerLoad); shorter: none.
  std::vector<PeerLoad> peer_load_ ABSL_GUARDED_BY(mu_);
  // This replica's pins taken and given back since TakeShadowPinChanges,
  // while sharing; and the other replicas' pins in index_, by (replica, id).
  bool share_pins_ ABSL_GUARDED_BY(mu_) = false;
  ShadowPinChanges own_pin_changes_ ABSL_GUARDED_BY(mu_);
  struct PeerPin {
    ShadowIndex::Pin pin;
    std::vector<uint64_t> chain;
  };
  absl::flat_hash_map<std::pair<std::string, uint64_t>, PeerPin> peer_pins_ ABSL_GUARDED_BY(mu_);
  ResidencyGate residency_ ABSL_GUARDED_BY(mu_);
  LiveSizing sizing_ ABSL_GUARDED_BY(mu_);
  // The residency gate's room on tiered instances (router.residency.room).
  GateRoom gate_room_ ABSL_GUARDED_BY(mu_);
  ResidencyListener listener_ ABSL_GUARDED_BY(mu_);
  // residency_wait id -> ticket id, while held.
  absl::flat_hash_map<uint64_t, uint64_t> held_ ABSL_GUARDED_BY(mu_);
  SessionTable sessions_ ABSL_GUARDED_BY(mu_);
  BytesPerTokenModel ratios_ ABSL_GUARDED_BY(mu_);
  const placement::PlacementParams placement_;  // for predictions the policy did not make
  RateLearner rates_ ABSL_GUARDED_BY(mu_);
  // rates_.transfer_version() of the table in snapshot_.
  uint64_t snapshot_transfer_version_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<BackendState> state_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, InflightRequest> inflight_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> matched_ ABSL_GUARDED_BY(mu_);       // scratch for Match()
  std::vector<int32_t> host_matched_ ABSL_GUARDED_BY(mu_);  // scratch, the host shadow's
  std::vector<int32_t> pool_matched_ ABSL_GUARDED_BY(mu_);  // scratch, the pool shadow's
  FleetSnapshot snapshot_ ABSL_GUARDED_BY(mu_);             // scratch, rebuilt per Route
  double capacity_ratio_ ABSL_GUARDED_BY(mu_) = 0;          // bytes/token of capacities
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t sequence_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t affinity_hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t affinity_breaks_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t shed_new_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t shed_running_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t shed_averted_home_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t kept_home_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvroute::router
