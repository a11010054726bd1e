// router::Router: the fleet's state and the routing decision, behind one
// thread-safe facade. This is the only router header the proxy includes
// (with router/types.h and router/prefix_hash.h).
//
//   auto router = router::Router::Create(options, backends);
//   features.chunk_hashes = router::HashPromptChunks(features.prompt_bytes,
//                                                    options.chunk_bytes);
//   absl::StatusOr<router::RouteTicket> t = (*router)->Route(features, now);
//   ... held (t->residency_wait != 0): wait until the residency listener
//       names it (residency/residency_wait.h does this);
//   router::Router::Dispatched go = (*router)->Dispatch(*t, now);
//   ... first byte from the engine:   (*router)->OnFirstToken(*t, now);
//   ... response finished:           (*router)->OnComplete(*t, outcome, now);
//   ... an offload's measured transfer: (*router)->OnTransfer(*t, seconds);
//
// Thread-safety: every method may be called from any thread. State is guarded
// by one absl::Mutex; the policy runs under it on an immutable FleetSnapshot
// built for the request (a few microseconds), so the load it reserves is
// consistent with the load it saw. Prompt hashing happens outside the lock.
// No method does I/O, sleeps, or reads a clock: callers pass `now`.
//
// Where things live: router/policies/ (one class per policy, behind
// router/policy.h, built from the table in router/policy_registry.h), router/shadow_index.h
// (prefix-cache model) and router/shadow_feedback.h (what the engines'
// truth teaches it), router/load_ledger.h (reserved load),
// router/residency_gate.h (which sessions' KV each instance must hold, and
// the turns held back until theirs fits), router/session_table.h,
// router/bytes_per_token.h, router/rate_learner.h (the cost model's learned
// time factors). router/router_impl.h is the implementation's layout.
// router/README.md explains the model and has the benchmark figures.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "kvsize/tier_pressure.h"
#include "router/options.h"
#include "router/types.h"

namespace kvroute::router {

// Load and cache figures of one backend as /admin/backends reports them.
struct BackendReport {
  std::string name;
  BackendRole role = BackendRole::kBoth;
  bool retired = false;  // removed by a config reload
  bool healthy = true;
  int64_t inflight_requests = 0;
  int64_t inflight_prefill_tokens = 0;
  int64_t decoding_requests = 0;
  int64_t inflight_tokens = 0;
  int64_t shadow_tokens = 0;  // tokens the shadow index believes cached
  int64_t capacity_tokens = 0;
  double kv_usage = -1;         // scraped vllm:kv_cache_usage_perc, -1 unknown
  int64_t engine_running = -1;  // scraped num_requests_running
  int64_t engine_waiting = -1;  // scraped num_requests_waiting
  int64_t est_requests = 0;     // requests with both estimate and truth
  double est_abs_error_tokens_sum = 0;
  // The shadow index and the estimate against the engine's truth.
  int64_t effective_capacity_tokens = 0;   // capacity after learned shrinkage
  int64_t shadow_chunks = 0;               // entries in the shadow LRU
  // Of the shadow's model of the pool, what requests in flight hold (every
  // replica's, when they share pins): cached entries they reuse, and the
  // rest of their footprints.
  int64_t shadow_pinned_chunks = 0;
  int64_t shadow_reserved_chunks = 0;
  double est_tokens_sum = 0;               // sum of estimates (with truth)
  double actual_cached_tokens_sum = 0;     // sum of engine cached_tokens
  double est_signed_error_tokens_sum = 0;  // sum of estimate - actual
  int64_t last_est_error_tokens = 0;       // estimate - actual, last response
  int64_t shadow_corrections = 0;          // times the engine proved evictions
  // Tokens in blocks the engine's own KV events say it caches (stored minus
  // removed, reset by a clear); -1 until the backend's first event.
  int64_t engine_cached_tokens = -1;
  // The same for its host-memory tier (`medium: "CPU"` events), and the
  // chunks the router's shadow of that tier holds; -1 / 0 without one.
  int64_t engine_host_cached_tokens = -1;
  int64_t host_shadow_chunks = 0;
  // The learned prefill time factor (router/rate_learner.h) and its samples.
  double prefill_time_factor = 1;
  int64_t prefill_time_samples = 0;
  // The learned host reload factor (engine-timed loads against the host
  // link's configured bandwidth) and its samples.
  double host_reload_time_factor = 1;
  int64_t host_reload_samples = 0;
  double pool_reload_time_factor = 1;
  int64_t pool_reload_samples = 0;
};

// The learned transfer time factor of one (prefill, decode) pair.
struct TransferFactorReport {
  int prefill_backend = -1;
  int decode_backend = -1;
  double factor = 1;
  int64_t samples = 0;
};

// Fleet-wide figures for /metrics.
struct RouterStats {
  int64_t sessions = 0;
  int64_t inflight_requests = 0;   // routed, not completed
  int64_t index_chunks = 0;        // distinct chunk hashes in the index
  int64_t index_replicas = 0;      // (instance, chunk) pairs
  int64_t index_memory_bytes = 0;  // approximate heap bytes of the index
  double bytes_per_token = 0;      // fleet-wide learned ratio
  int64_t affinity_hits = 0;
  int64_t affinity_breaks = 0;
  int64_t shed_new_sessions = 0;  // requests shed at admission, by session state
  int64_t shed_running_sessions = 0;
  // Session turns placed off their instance, predicted past their deadline
  // there, and sent to their instance instead (in time there).
  int64_t shed_averted_home = 0;
  // Session turns the overload rule moved that stayed on their instance: its
  // host tier holds their prefix and their first token comes sooner there
  // (Decision::kept_home).
  int64_t kept_home = 0;
  // Learned transfer time factors: fleet-wide, and each pair with samples.
  double transfer_time_factor = 1;
  std::vector<TransferFactorReport> transfer_time_factors;
  // The fleet-shared KV pool: the tokens its events say it holds (-1 before
  // its first event) and the chunks of the router's shadow of it.
  int64_t pool_cached_tokens = -1;
  int64_t pool_shadow_chunks = 0;
  // Several replicas: the other replicas' requests in flight pinned in this
  // replica's shadow (Router::ApplyPeerShadowPins).
  int64_t peer_shadow_pins = 0;
};

// Engine gauges scraped from an instance's /metrics.
struct EngineGauges {
  int64_t num_requests_running = -1;
  int64_t num_requests_waiting = -1;
  double kv_cache_usage_perc = -1;
  int64_t capacity_tokens = 0;  // num_gpu_blocks x block_size, 0 = unknown
  // The host-memory KV tier: vllm:cache_config_info's kv_offloading_size
  // (GiB, --kv-offloading-size) in bytes; 0 = none or unknown.
  double host_capacity_bytes = 0;
  // vllm:prompt_tokens_total + vllm:generation_tokens_total: grows while the
  // engine works (-1: not published). The health tracker's progress signal.
  double work_tokens_total = -1;
  // The engine's host tier loads (host -> GPU), vLLM's
  // vllm:kv_offload_total_bytes / _total_time with transfer_type CPU_to_GPU:
  // bytes loaded and the seconds the loads took, summed over loads (-1: not
  // published). Their growth teaches the host reload factor.
  double host_load_bytes_total = -1;
  double host_load_seconds_total = -1;
  // Its loads from a fleet-shared pool, vLLM's MooncakeStoreConnector
  // vllm:mooncake_store_operation_bytes_total and the sum of
  // vllm:mooncake_store_operation_time_seconds with operation load_get
  // (-1: not published). Their growth teaches the pool reload factor.
  double pool_load_bytes_total = -1;
  double pool_load_seconds_total = -1;
};

// The load one or more other kvroute replicas carry on one backend, as a
// shared store reports it (bounded staleness): what they route there that
// this replica's own ledger does not count.
struct PeerLoad {
  int64_t inflight_requests = 0;
  int64_t inflight_prefill_tokens = 0;
  int64_t decoding_requests = 0;
  int64_t inflight_tokens = 0;
  // The sessions the residency gate holds resident on the backend (session,
  // footprint tokens): from LocalLoad, this replica's; to SetPeerLoad, the
  // others' (a session several hold: its largest footprint).
  std::vector<std::pair<std::string, int64_t>> resident_sessions = {};
  // The backend's learned prefill time factor (router/rate_learner.h): from
  // LocalLoad, this replica's, or 0 before its first sample; to SetPeerLoad,
  // the fleet's (every live replica's with samples, merged), which this
  // replica's predictions then use in place of its own; 0: none.
  double prefill_time_factor = 0;
  // To SetPeerLoad: session turns waiting for room on the backend across
  // replicas (ResidencyGate::SetPeerResidents); from LocalLoad: 0 (the
  // proxy counts its turns the cluster store refused).
  int64_t waiting_turns = 0;
};

// Several replicas: a request in flight as a shadow index holds it on one
// backend (ShadowIndex::PinRequest), shared so that every replica's shadow
// reserves the fleet's requests, not only its own third: the engine evicts
// for all of them before it admits the next turn.
struct ShadowPin {
  uint64_t id = 0;  // unique among one replica's pins
  int backend = -1;
  int64_t footprint_chunks = 0;      // pinned and reserved
  std::vector<uint64_t> chain = {};  // the leading chunks pinned (cached, reused)
};

// What changed in this replica's pins since the last TakeShadowPinChanges:
// the pins taken, and the ids of those given back (a pin taken and given
// back between two calls is in neither).
struct ShadowPinChanges {
  std::vector<ShadowPin> pinned = {};
  std::vector<uint64_t> unpinned = {};
};

// The other replicas' pins, to ApplyPeerShadowPins, which first drops the
// pins that can no longer be live, then applies the changes in order.
struct PeerShadowPins {
  // Drop every peer pin: the changes of some were lost (the store
  // reconnected, or has been unreachable for longer than a lease).
  bool reset = false;
  // When set, the pins of a replica not in it are dropped (its lease ended).
  std::optional<std::vector<std::string>> live_replicas = std::nullopt;
  // Backend slots no other replica has a request in flight on, as of a
  // reading taken before every change below was written: their pins are
  // dropped (an unpin lost on the way cannot hold one forever).
  std::vector<int> idle_backends = {};
  std::vector<std::pair<std::string, ShadowPin>> pinned = {};   // (replica, pin)
  std::vector<std::pair<std::string, uint64_t>> unpinned = {};  // (replica, id)
};

// The live sizing figures (Router::Sizing): the working set against the
// fleet's KV tiers, each tier's retention against the sessions' reuse gap,
// through the same kvsize::ComputeTierPressure as kvroute-size.
struct KvSizingReport {
  // What went into the comparison: fleet-wide figures over the healthy
  // instances.
  // - working set: footprints of the sessions resident (active within
  //   session_resident_window) plus in-flight requests without a session;
  // - gpu capacity: each instance's learned KV capacity (nominal x learned
  //   fraction); host capacity: its scraped kv_offloading_size / c_KV;
  // - write rates: tokens newly written per second (engine KV events'
  //   stored blocks where the engine publishes them for that tier, else the
  //   tokens a completed request computed: prompt - cached + output), over
  //   Options::sizing.window; an instance without a host tier counts into
  //   the host rate what one would take (it writes through);
  // - reuse gap: mean time from a session's turn ending to its next turn's
  //   first token, over the same window (0 without turns).
  kvsize::TierLoad load;
  kvsize::TierPressure pressure;
  int64_t reuse_gaps = 0;  // turns measured in the window
  // The residency gate's room on tiered instances (router/gate_room.h):
  // the tier (false: the GPU pool), and the share of the agents' pauses
  // between turns that were long, which `room: auto` follows (0 and 0
  // pauses in the other modes).
  bool gate_room_tier = true;
  double long_pause_share = 0;
  int64_t pauses = 0;
};

// One routed request's reservation. Copyable; pass it back to OnFirstToken /
// OnComplete exactly once each (OnComplete alone is fine for a request that
// never produced a first token).
struct RouteTicket {
  uint64_t id = 0;
  Decision decision;
  // The learned transfer time factor the decision's prediction used, so
  // OnTransfer can learn against the profile's rates after OnComplete.
  double transfer_time_factor = 1;
  // shed.shed: the request is refused at admission (Options::shed); the
  // ticket reserves nothing (id 0) and takes no Dispatch, OnFirstToken or
  // OnComplete; `decision` says where it would have gone and what it predicted.
  ShedVerdict shed;
  // A co-located turn of a session routed with defer_kv_reservation while
  // the router holds sessions: it went through the residency gate.
  bool residency_gated = false;
  // Non-zero: the residency model holds it (its KV does not fit its
  // instance yet). It may be dispatched once the residency listener names
  // this id, or once Router::Held says it is not held any more.
  uint64_t residency_wait = 0;
};

// Whether `outcome.cached_tokens` may count KV moved in by a connector
// (Outcome::kv_transferred, or when unset, an OFFLOAD served by its decode
// backend); such a count is no truth about the serving backend's own cache.
bool CachedTokensMayIncludeTransfer(const Decision& decision, const Outcome& outcome);

// The cache-hit estimate's error for one completed request, estimate minus
// the engine's cached_tokens, in tokens; nullopt when the outcome carries no
// truth (no cached_tokens, or CachedTokensMayIncludeTransfer). This is the
// figure the router accumulates in BackendReport; the proxy can use it for
// an error histogram and the request log.
std::optional<int64_t> EstimateError(const Decision& decision, const Outcome& outcome);

class Router {
 public:
  virtual ~Router() = default;

  // Fails with InvalidArgument naming the policy when it is unknown, or when
  // the backend list is empty.
  static absl::StatusOr<std::unique_ptr<Router>> Create(Options options,
                                                        std::vector<BackendSpec> backends);

  // The backend slots in index order (Decision's backend fields index it).
  // A snapshot: UpdateBackends publishes a new vector and never changes one
  // handed out; slots are only ever appended, so an index stays valid.
  virtual std::shared_ptr<const std::vector<BackendSpec>> Backends() const = 0;
  // Applies a new backend list (a config reload), matching by name: a
  // backend at the same host:port keeps its slot, load and shadow cache
  // (role and capacity are updated); a new name, or a known name at a new
  // address, gets a new slot (healthy, empty cache); a backend no longer
  // listed is retired (its in-flight load released, its shadow dropped).
  // InvalidArgument, changing nothing, when the list is empty, fails the
  // policy's checks (pd_sep pools), or would need more than kMaxBackends
  // slots in all.
  virtual absl::Status UpdateBackends(const std::vector<BackendSpec>& backends) = 0;
  virtual const Options& options() const = 0;

  // Decides where `features` goes and reserves its load, or (with
  // features.allow_shed) returns a shed ticket that reserves nothing when
  // the request's predicted TTFT is past its deadline. Unavailable when no
  // healthy backend can take it; ResourceExhausted beyond
  // Options::max_inflight_requests. When features.chunk_hashes is empty the
  // router hashes prompt_bytes itself (outside its lock) with chunk_bytes.
  virtual absl::StatusOr<RouteTicket> Route(const RequestFeatures& features, absl::Time now) = 0;
  // The request is sent now. A request routed with defer_kv_reservation
  // pins its cached prefix and reserves the rest of its footprint in the
  // shadow's pool of its instance, and its realised TTFT (which teaches the
  // prefill time factor) counts from `now`; a held one the residency model
  // admitted on another instance (its prefix gone, it took the room that
  // freed first) moves there first, its load and session home with it.
  // Returns the decision as it now stands and its cached-token estimate as
  // of now (lower than at routing when the instance evicted part of the
  // prefix meanwhile; what OnComplete compares with the engine's count), or
  // -1 for a request not routed with defer_kv_reservation. Once per ticket.
  struct Dispatched {
    Decision decision;
    int64_t cached_tokens_est = -1;
    // A session turn the residency model holds (RouteTicket::residency_gated)
    // and admitted: its footprint there and the fill of the instance it is
    // resident on (ResidencyGate::Options::fill of its KV capacity), for an
    // admission across replicas (cluster::ClusterStore::Reserve); 0 for
    // every other request.
    int64_t resident_footprint_tokens = 0;
    int64_t resident_fill_tokens = 0;
    // The longest the turn may wait for its room, counted from when the
    // router first held it (ResidencyGate::WaitBound: what its deadline
    // leaves after its predicted TTFT, at most max_wait), so that a wait
    // across replicas ends when one gate's would.
    absl::Duration resident_wait_bound = absl::ZeroDuration();
  };
  virtual Dispatched Dispatch(const RouteTicket& ticket, absl::Time now) = 0;
  // A dispatched request that waited after Dispatch (its reservation across
  // replicas, proxy/residency_hold.h) is sent only at `now`: its realised
  // TTFT counts from here, so the wait does not teach the instance's prefill
  // time factor. `resident_turns` (>= 0): the turns its session has run
  // resident on the instance through every replica, as the cluster store
  // counts them (cluster::Reservation::turns_before), which the residency
  // quantum then counts from, as one gate would; -1: unknown. A no-op once
  // its first token came or it completed.
  virtual void Sent(const RouteTicket& ticket, absl::Time now, int64_t resident_turns) = 0;

  // The residency model (router/residency_gate.h). `woken` is called, under
  // the router's lock (it must not call the router), with the residency_wait
  // ids of held requests that may go now; one listener at a time, nullptr to
  // remove it.
  using ResidencyListener = std::function<void(absl::Span<const uint64_t> woken)>;
  virtual void SetResidencyListener(ResidencyListener woken) = 0;
  // Whether the residency model still holds the ticket's request.
  virtual bool Held(const RouteTicket& ticket) const = 0;
  // Time passed: idle residents leave, waiters whose wait ran out go.
  virtual void TickResidency(absl::Time now) = 0;
  // When TickResidency would next admit someone, if anyone waits.
  virtual std::optional<absl::Time> NextResidencyEvent() const = 0;
  // A held request that will not be sent (its client left, or kvroute
  // drains): it gives its place up. A no-op once it is not held.
  virtual void Unhold(const RouteTicket& ticket, absl::Time now) = 0;
  virtual ResidencyGate::Counters ResidencyCounters() const = 0;
  virtual size_t ResidencyWaiting() const = 0;
  // Whether co-located session turns may be held (router.residency.enabled
  // and a policy that homes sessions).
  virtual bool HoldsSessions() const = 0;

  // The decode backend produced its first byte: prefill tokens become a
  // decoding request, and a co-located request's instance holds its whole
  // prompt from now on (ShadowIndex::HoldComputed; taken back if the
  // response does not end well, the byte having been an error body's). For a co-located streamed request whose
  // decision carried a prediction, `now` minus the routing time is its
  // realised TTFT, which teaches the instance's prefill time factor when the
  // response ends well (OnComplete; its own prefill priced at the engine's
  // cached_tokens where usage has them).
  virtual void OnFirstToken(const RouteTicket& ticket, absl::Time now) = 0;
  // The response ended (any way). Releases load; learns from usage.
  virtual void OnComplete(const RouteTicket& ticket, const Outcome& outcome, absl::Time now) = 0;
  // An executed OFFLOAD's handoff measured `transfer_s` wall seconds from the
  // prefill leg's end to the decode leg's first byte (Decision::
  // predicted_transfer_s is its prediction): learns the pair's transfer time
  // factor. May come before or after OnComplete; at most once per ticket.
  virtual void OnTransfer(const RouteTicket& ticket, double transfer_s) = 0;

  // Ejecting a backend (healthy -> false) releases the load of its requests
  // in flight (they are failing or being retried elsewhere); re-admitting it
  // drops its shadow cache, since an instance that was out most likely
  // restarted with an empty prefix cache.
  virtual void SetHealthy(int backend, bool healthy) = 0;
  virtual void UpdateEngineGauges(int backend, const EngineGauges& g) = 0;

  virtual std::vector<BackendReport> Report() const = 0;

  // Several replicas: this replica's own load per backend slot (retired
  // slots included, as zeros), to publish to the others; and the others'
  // load, summed, per backend slot (missing slots: none), which every
  // routing decision adds to this replica's own until the next call
  // replaces it. BackendReport's load figures stay this replica's own.
  // The others' resident sessions count against each instance's fill in
  // the residency gate (ResidencyGate::SetPeerResidents); turns they free
  // room for are woken as of `now`.
  // The session's last completed turn as this replica recorded it, to
  // share (RequestFeatures::peer_session); nullopt when it has none.
  virtual std::optional<RequestFeatures::PeerSession> SessionRecord(std::string_view session,
                                                                    absl::Time now) = 0;
  virtual std::vector<PeerLoad> LocalLoad() const = 0;
  virtual void SetPeerLoad(std::vector<PeerLoad> by_backend, absl::Time now) = 0;
  // Several replicas' shadows: ShareShadowPins starts recording this
  // replica's pins (nothing is recorded before, so a replica alone keeps no
  // queue); TakeShadowPinChanges hands over what changed since the last
  // call, to publish; ApplyPeerShadowPins pins the other replicas' requests
  // in this replica's shadow, and gives them back, as its own. Peer pins are
  // void after their backend's shadow is cleared, like its own.
  virtual void ShareShadowPins() = 0;
  virtual ShadowPinChanges TakeShadowPinChanges() = 0;
  virtual void ApplyPeerShadowPins(const PeerShadowPins& peers) = 0;
  // The sessions that left a backend's residents since the last call
  // (backend slot, session), less those resident there again: the
  // reservations to give back in the cluster store. Departures are kept
  // only once this has been called.
  virtual std::vector<std::pair<int, std::string>> TakeResidencyDepartures() = 0;

  // Fleet-wide counters of the shadow index and the estimate.
  virtual RouterStats Stats() const = 0;
  // The live sizing figures as of `now`. Takes a reading of the write and
  // reuse-gap totals (router/live_sizing.h): the rates are measured between
  // successive calls, so call it at a steady pace (every scrape).
  virtual KvSizingReport Sizing(absl::Time now) = 0;
  // The learned prompt bytes per token for `model` (the fleet-wide ratio
  // for a model it has not seen).
  virtual double BytesPerToken(const std::string& model) const = 0;

  // Applies an engine's own KV cache events, in order. kRemoved evicts that
  // many tokens' worth of chunks (at the fleet-wide bytes per token) from
  // the least recently used end of the backend's shadow, carrying a
  // fraction of a chunk over to the next removal; kCleared empties the
  // backend's shadow; kStored and kRemoved move
  // BackendReport::engine_cached_tokens. From a backend's first event until
  // it is ejected, the shadow's evictions for requests routed there are
  // credited against its removals, which evict only beyond them
  // (ShadowIndex::SetEngineEvicts), and misses the engine reports no longer
  // shrink its modelled capacity. Returns the shadow chunks evicted.
  // `backend` kPoolBackend (router/types.h): the fleet-shared pool's events.
  virtual int64_t ApplyEngineKvEvents(int backend, absl::Span<const EngineKvEvent> events) = 0;
};

}  // namespace kvroute::router
