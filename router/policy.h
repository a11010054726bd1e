// router::Policy: one routing policy, pure and synchronous.
//
// A policy turns an immutable FleetSnapshot (every backend's health, load and
// estimated cached prefix for THIS request, the session's instance, and a
// sequence number) into a Decision. Policies hold only their options: no
// clocks, threads, logging, metrics or I/O, so the same snapshot always
// gives the same Decision. Build them by name with MakePolicy()
// (router/policy_registry.h).
//
// Thread-safety: Decide() is const and touches no shared state; one policy
// object may be used from many threads.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "router/types.h"

namespace kvroute::router {

// One backend as a policy sees it for one request.
struct BackendSnapshot {
  bool healthy = true;
  BackendRole role = BackendRole::kBoth;
  int64_t inflight_requests = 0;
  int64_t inflight_prefill_tokens = 0;  // new tokens not yet past first token
  int64_t decoding_requests = 0;        // past first token
  int64_t inflight_tokens = 0;          // prompt + expected output, in flight
  int64_t engine_running = -1;          // scraped gauges, -1 unknown
  int64_t engine_waiting = -1;
  double kv_usage = -1;
  // The KV pool as the router models it (router/shadow_index.h), in tokens:
  // its effective capacity (0 unknown), and the resident demand on it: the
  // footprints of the live sessions homed here (other than this request's
  // own) plus requests in flight that belong to no session.
  int64_t kv_capacity_tokens = 0;
  int64_t resident_tokens = 0;
  // The KV the tiers beyond the GPU keep those sessions in, when the router
  // prices the tiers: the instance's host tier or its share of the
  // fleet-shared pool (they hold what the GPU holds, and reload it in a
  // fraction of a prefill); 0: none. Those sessions are kept without a
  // recompute within the larger of this and kv_capacity_tokens.
  int64_t resident_capacity_tokens = 0;
  // Estimated prompt tokens of this request already in this backend's
  // prefix cache (shadow index match), 0..prompt_tokens_est.
  int64_t cached_tokens_est = 0;
  // Of those, the tokens only the instance's host-memory tier holds: they
  // are reloaded over the host link before the prefill.
  int64_t host_reload_tokens_est = 0;
  // Its host tier's loads against the configured host link bandwidth, as
  // learned from the engine's own load timings (router/rate_learner.h).
  double host_reload_time_factor = 1;
  // Of those, the tokens only the fleet-shared pool holds (beyond the GPU and
  // host hits): they come over the instance's NIC before the prefill.
  int64_t pool_reload_tokens_est = 0;
  // Its loads from the pool against the pool's configured bandwidth, learned
  // the same way.
  double pool_reload_time_factor = 1;
  // This instance's prefill times against the cost model's rates, as learned
  // from its realised TTFTs (router/rate_learner.h); 1 = as the profile says.
  double prefill_time_factor = 1;
};

struct FleetSnapshot {
  std::vector<BackendSnapshot> backends;
  int64_t prompt_tokens_est = 0;
  int64_t footprint_tokens_est = 0;  // prompt + expected output: KV it will hold
  int session_backend = -1;  // the session's instance, -1 when none
  // The session's instance held the session's last completed prompt, this
  // request continues it, and most of it has been evicted there since.
  bool session_prefix_evicted = false;
  uint64_t sequence = 0;     // increments once per Route() call
  // The learned factor of the time from prefill site a's prefill end to the
  // first token on decode home b, at [a x backends.size() + b] (row-major);
  // empty: 1 for every pair (router/rate_learner.h).
  std::vector<double> transfer_time_factors;
};

class Policy {
 public:
  virtual ~Policy() = default;
  // The `mode` of the policy table's row that built it (policy_registry.h);
  // empty for a policy constructed directly.
  std::string_view name() const { return name_; }
  // Unavailable when no healthy backend can take the request. Never returns
  // an unhealthy backend.
  virtual absl::StatusOr<Decision> Decide(const FleetSnapshot& fleet) const = 0;

 private:
  friend class PolicyNaming;  // policy_registry.cc: the table names what it builds
  std::string_view name_;
};

}  // namespace kvroute::router
