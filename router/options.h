// router::Options and router::BackendSpec: what the router is built from.
// The config loader (proxy/config.h) fills them from YAML; the policies,
// the registry and the learners read them. Below the router::Router facade
// (router/router.h), so a router header needs no more than this to see them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "classifier/classifier.h"
#include "router/gate_room.h"
#include "router/live_sizing.h"
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
  // A session stays resident on its instance, counting toward its KV
  // demand, until it has sent nothing for this long (the residency model's
  // window, router/residency_gate.h); zero disables placement by memory.
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
  //   cost = new_tokens (+ attention_weight x its attention, in prefill
  //          tokens) + prefill_queue_weight x inflight_prefill_tokens
  //        + decode_tokens_weight x inflight_tokens
  //        + waiting_penalty_tokens x engine_waiting
  //        + admission_weight x tokens that must leave the pool before admission
  //        + eviction_weight x resident session KV the placement would evict
  //        + decode_stall_weight x decoding requests x new_tokens (not WARM there)
  //        + host-tier reload time in prefill tokens (Options::host_tier)
  struct BaselineWeights {
    double prefill_queue_weight = 1.0;
    double decode_tokens_weight = 0.05;
    double waiting_penalty_tokens = 1000;
    double admission_weight = 1.0;
    double eviction_weight = 1.0;
    double decode_stall_weight = 1.0;
    // The own prefill's attention, in prefill tokens: the profile's
    // attention seconds per token pair x prefill rate x n x (cached + n / 2)
    // for n new tokens, times this weight (0: new tokens count linearly).
    double attention_weight = 0.0;
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

  // KV beyond HBM: an engine that publishes host-memory (`medium: "CPU"`)
  // KV events has a host tier the router models beside its GPU prefix cache
  // (router/shadow_feedback.h). A prefix there is reloaded, not recomputed:
  // it counts as cached, its reload priced at the host link's bandwidth.
  struct HostTier {
    // router.tier_aware: false counts host-tier hits as misses (the ablation).
    bool aware = true;
    // Host -> GPU copy bandwidth, one way (vLLM's CPU offloading blog
    // measures about 50 GB/s on H100; 51-55 GB/s for 1.5 MiB blocks and
    // large copies on H200).
    double load_bytes_per_second = 50e9;
    // router.pool_load_bytes_per_second: the fleet-shared pool's load
    // bandwidth into one instance, its NIC (one 200 Gb/s NIC: Mooncake's
    // Transfer Engine moves 87 GB/s over 4 x 200 Gb/s, ~22 GB/s each).
    // tier_aware: false turns the pool's hits off too.
    double pool_load_bytes_per_second = 22e9;
    // Wall seconds per second of the engines' own load timings
    // (EngineGauges::host_load_seconds_total, pool_load_seconds_total): 1
    // for real engines; a simulated fleet running at profile_time_scale
    // reports modelled seconds, so its timings are scaled by that, as the
    // bandwidths above are scaled to wall seconds.
    double engine_time_scale = 1;
    // router.residency.room: the residency gate's room on an instance with
    // a host tier, or behind the pool (router/gate_room.h). "tier": the
    // tier, so every session it keeps is admitted and the engine swaps them
    // through the GPU; no turn waits at the router for long, but where
    // sessions come back within seconds their turns outnumber what the GPU
    // runs at once and each waits for the blocks of the others. "gpu": the
    // GPU pool, as without a tier: sessions rotate in sets the GPU holds and
    // a rotation costs a reload, not a recompute; the tier is still priced.
    // "auto" (the default): the GPU pool while almost none of the agents'
    // pauses between turns is long, the tier once some are. docs/design.md,
    // "The residency gate", gives the measured trade-off.
    GateRoom::Options gate_room;
  };
  HostTier host_tier;

  // Agent sessions held back until their KV fits their instance
  // (router/residency_gate.h): co-located turns that carry a session id,
  // routed with RequestFeatures::defer_kv_reservation, under a policy that
  // homes sessions. Its `window` is session_resident_window's.
  ResidencyGate::Options residency;

  // The live sizing gauges (Router::Sizing): the window over which the
  // tiers' write rates and the sessions' reuse gap are measured.
  LiveSizing::Options sizing;
};

// The largest fleet the router (and its shadow index bitsets) supports.
inline constexpr int kMaxBackends = 256;

}  // namespace kvroute::router
