// router::Router: the fleet's state and the routing decision, behind one
// thread-safe facade. This is the only router header the proxy includes
// (with router/types.h and router/prefix_hash.h).
//
//   auto router = router::Router::Create(options, backends);
//   features.chunk_hashes = router::HashPromptChunks(features.prompt_bytes,
//                                                    options.chunk_bytes);
//   absl::StatusOr<router::RouteTicket> t = (*router)->Route(features, now);
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
// (prefix-cache model), router/session_table.h, router/bytes_per_token.h,
// router/rate_learner.h (the cost model's learned time factors).
// router/README.md explains the model and has the benchmark figures.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "classifier/classifier.h"
#include "router/residency_gate.h"
#include "router/shed.h"
#include "router/types.h"

namespace kvroute::router {

// A backend as configured. `capacity_tokens` is the instance's KV capacity in
// tokens when known from the config or profile (0 = unknown; replaced by the
// scraped vllm:cache_config_info when that arrives).
struct BackendSpec {
  std::string name;
  std::string host;
  uint16_t port = 0;
  BackendRole role = BackendRole::kBoth;
  int64_t capacity_tokens = 0;
  // The engine runs vLLM's --scheduling-policy priority: it serves waiting
  // requests by their `priority`, which kvroute then sets on every leg
  // (proxy/engine_priority.h). False: FCFS, and kvroute sends none (vLLM
  // refuses a priority other than 0 under FCFS).
  bool priority_scheduling = false;
  // Set by Router::UpdateBackends on a backend dropped from the list: its
  // slot stays (indices held by requests in flight remain valid) but it is
  // never routed, health-checked or re-admitted again.
  bool retired = false;
};

// Router options. Owned by the router module; only proxy's config loader
// maps YAML onto it.
struct Options {
  // The routing policy by its `mode` name (router/policy_registry.h).
  std::string mode = "round_robin";
  classifier::Thresholds thresholds;
  size_t chunk_bytes = 256;                  // prompt bytes per shadow-index chunk
  double default_bytes_per_token = 4.0;      // until learned from usage.prompt_tokens
  int64_t default_capacity_tokens = 400000;  // when neither config nor scrape knows
  double overload_factor = 2.0;              // affinity breaks above factor x fleet mean
  size_t max_sessions = 100000;              // session table bound (LRU)
  absl::Duration session_ttl = absl::Minutes(30);
  // A session counts toward its instance's resident KV demand until it has
  // sent nothing for this long (router/session_table.h); zero disables
  // placement by memory.
  absl::Duration session_resident_window = absl::Seconds(60);

  // Cache-aware routing and load (all have defaults).
  // Affinity is only broken when the session's instance also holds more
  // than this many in-flight tokens (about two long-context requests), so a
  // lightly loaded fleet, where a single request is already "2x the mean",
  // keeps its sessions and their caches in place.
  int64_t overload_min_tokens = 32768;
  // Bound on routed-but-not-completed requests; Route() returns
  // ResourceExhausted beyond it.
  size_t max_inflight_requests = 65536;
  // Expected output tokens when the client gave no max_tokens, and the cap
  // applied to a client's max_tokens, for in-flight token accounting.
  int64_t default_output_tokens = 256;
  int64_t max_output_tokens_est = 4096;
  // Bytes-per-token learning: EWMA weight of one response, and the bound on
  // the per-model table (further models share the fleet-wide ratio).
  double bytes_per_token_alpha = 0.1;
  size_t max_models = 64;
  // Shadow feedback: the engine must have had more than this many chunks
  // fewer than estimated before the shadow drops entries and shrinks the
  // instance's effective capacity (block rounding is not an eviction).
  int64_t eviction_tolerance_chunks = 1;
  // EWMA weight when the effective capacity moves toward what the engine
  // proved, and its floor as a fraction of the nominal capacity.
  double capacity_learning_rate = 0.25;
  double min_capacity_fraction = 0.1;

  // `baseline` (and the WARM/MEDIUM path of v1/v2) scores an instance by its
  // estimated time to first token in prefill-token units, see
  // router/policies/cache_aware.h:
  //   cost = new_tokens + prefill_queue_weight x inflight_prefill_tokens
  //        + decode_tokens_weight x inflight_tokens
  //        + waiting_penalty_tokens x engine_waiting
  //        + admission_weight x tokens that must leave the pool before admission
  //        + eviction_weight x resident session KV the placement would evict
  //        + decode_stall_weight x decoding requests x new_tokens (not WARM)
  struct BaselineWeights {
    double prefill_queue_weight = 1.0;
    double decode_tokens_weight = 0.05;
    double waiting_penalty_tokens = 1000;
    double admission_weight = 1.0;
    double eviction_weight = 1.0;
    double decode_stall_weight = 1.0;
  };
  BaselineWeights baseline;

  // v2: "joint" (the default) picks the prefill site and the decode home
  // together by the placement cost (router/policies/placement_cost.h) and
  // offloads only where that wins; "threshold" offloads every HEAVY
  // request; "cost" only when the classifier's cost model says the prefill
  // saved on the decode instance outweighs the KV transfer.
  std::string offload_gate = "joint";
  classifier::OffloadCostParams offload_cost;

  // Whether an offload's decode leg reaches B only once A's prefill is done
  // (a sequential connector, NIXL): then B's queue delays the first token in
  // full. false: both legs are sent at once (Mooncake, SGLang) and B's queue
  // runs while A prefills. The config loader sets it from the connector.
  bool decode_leg_after_prefill = true;

  // `heavy_threshold: auto`: for v1_cost and v2 with the joint gate,
  // every request that is not WARM goes to the placement decision (which
  // decides whether it is worth moving), instead of only HEAVY ones;
  // thresholds.heavy_threshold still labels the class.
  bool heavy_threshold_auto = false;

  // The operator's service-level objectives, in seconds: they weigh a
  // request's own time to first token against the harm its prefill does to
  // the others (router/policies/placement_cost.h).
  struct PlacementSlo {
    double ttft_warm_s = 2;
    double ttft_medium_s = 10;
    double ttft_heavy_s = 30;
    double tpot_s = 0.1;       // per output token of a decode stream
    double harm_weight = 1.0;  // scales the harm terms against the TTFT term
  };
  PlacementSlo slo;

  // Whether offload_cost describes this fleet (the config filled it from a
  // profile or router.offload_cost keys). Then the router predicts the TTFT
  // of every decision, whatever the policy, so the prediction is logged and
  // the rates are learned in every mode.
  bool offload_cost_known = false;

  // Learning the cost model's time factors online (router/rate_learner.h):
  // per instance, realised TTFT of co-located streamed requests against the
  // prediction; per (prefill, decode) pair, the handoff's measured transfer
  // against the prediction. Log-space EWMA of weight `alpha`; each sample's
  // ratio is clamped to [1 / max_sample_ratio, max_sample_ratio].
  struct RateLearning {
    bool enabled = true;
    double alpha = 0.2;
    double max_sample_ratio = 20;
  };
  RateLearning rate_learning;

  // Requests predicted to reach their first token past their deadline are
  // refused at admission (router/shed.h); needs a time model
  // (offload_cost_known) and RequestFeatures::allow_shed.
  ShedOptions shed;

  // Agent sessions held back until their KV fits their instance
  // (router/residency_gate.h); the proxy applies it to co-located requests
  // that carry a session id.
  ResidencyGate::Options residency;
};

// The largest fleet the router (and its shadow index bitsets) supports.
inline constexpr int kMaxBackends = 256;

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
  double est_tokens_sum = 0;               // sum of estimates (with truth)
  double actual_cached_tokens_sum = 0;     // sum of engine cached_tokens
  double est_signed_error_tokens_sum = 0;  // sum of estimate - actual
  int64_t last_est_error_tokens = 0;       // estimate - actual, last response
  int64_t shadow_corrections = 0;          // times the engine proved evictions
  // Tokens in blocks the engine's own KV events say it caches (stored minus
  // removed, reset by a clear); -1 until the backend's first event.
  int64_t engine_cached_tokens = -1;
  // The learned prefill time factor (router/rate_learner.h) and its samples.
  double prefill_time_factor = 1;
  int64_t prefill_time_samples = 0;
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
  // Learned transfer time factors: fleet-wide, and each pair with samples.
  double transfer_time_factor = 1;
  std::vector<TransferFactorReport> transfer_time_factors;
};

// Engine gauges scraped from an instance's /metrics.
struct EngineGauges {
  int64_t num_requests_running = -1;
  int64_t num_requests_waiting = -1;
  double kv_cache_usage_perc = -1;
  int64_t capacity_tokens = 0;  // num_gpu_blocks x block_size, 0 = unknown
  // vllm:prompt_tokens_total + vllm:generation_tokens_total: grows while the
  // engine works (-1: not published). The health tracker's progress signal.
  double work_tokens_total = -1;
};

// One KV cache event of an engine, as much of it as the router uses
// (kvevents/ decodes the engine's messages; docs/kv-events.md): how many
// tokens' worth of blocks the engine stored or evicted, or that it dropped
// its whole prefix cache.
struct EngineKvEvent {
  enum class Kind { kStored, kRemoved, kCleared };
  Kind kind = Kind::kStored;
  int64_t tokens = 0;  // kStored, kRemoved: blocks x block_size
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
  // ticket reserves nothing (id 0) and takes no OnDispatch, OnFirstToken or
  // OnComplete; `decision` says where it would have gone and what it predicted.
  ShedVerdict shed;
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
  // A request routed with RequestFeatures::defer_kv_reservation is sent
  // now: it pins its cached prefix and reserves the rest of its footprint
  // in the shadow's pool of its instance, and its realised TTFT (which
  // teaches the prefill time factor) counts from `now`. Returns its cached-token estimate
  // there as of now (lower than the decision's when the instance evicted
  // part of the prefix while the request was held; what OnComplete then
  // compares with the engine's count), or -1 for any other request (a
  // no-op).
  virtual int64_t OnDispatch(const RouteTicket& ticket, absl::Time now) = 0;
  // A held request (routed with defer_kv_reservation, co-located, not yet
  // dispatched) goes to `backend` instead: the residency gate admitted it
  // where room freed first, its prefix being gone from where it was routed.
  // Its load moves there, its session's home with it, and its estimate is
  // taken there. Returns the decision as it now stands; FailedPrecondition
  // (changing nothing) when the ticket is not such a request or `backend`
  // cannot take it (unknown, unhealthy, retired, prefill-only).
  virtual absl::StatusOr<Decision> Retarget(const RouteTicket& ticket, int backend,
                                            absl::Time now) = 0;
  // The decode backend produced its first byte: prefill tokens become a
  // decoding request. For a co-located streamed request whose decision
  // carried a prediction, `now` minus the routing time is its realised TTFT,
  // which teaches the instance's prefill time factor.
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

  // Fleet-wide counters of the shadow index and the estimate.
  virtual RouterStats Stats() const = 0;
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
  virtual int64_t ApplyEngineKvEvents(int backend, absl::Span<const EngineKvEvent> events) = 0;
};

}  // namespace kvroute::router
