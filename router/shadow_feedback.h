// ShadowFeedback: what the engines' own figures teach the shadow index
// (router/shadow_index.h). Each completed request's true `cached_tokens`
// against the estimate it was routed on proves evictions the shadow missed
// (it drops them and, without engine events, moves the instance's effective
// capacity toward what the engine really keeps) or early ones (the capacity
// grows back); an engine's KV events trim the shadow by its own removals.
// An engine with a host-memory tier gets a second shadow, of that tier (the
// router writes every computed prompt through to it, as the engine does):
// trimmed by the engine's host removals when its events include the tier
// (`medium: "CPU"`), else an LRU of the size the engine's
// `vllm:cache_config_info` gives its tier (`kv_offloading_size`).
// Per backend it also keeps the estimate's accuracy figures.
//
//   ShadowFeedback feedback(params, index, host_index, n);
//   feedback.ApplyCapacity(b, nominal_tokens, bytes_per_token);
//   feedback.LearnFromTruth({.served = b, .est_tokens = ..., ...}, nominal_tokens, bpt);
//   feedback.ApplyEngineKvEvents(b, events, bpt);
//
// Not thread-safe: the Router owns it, and the index, under its mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "router/shadow_index.h"
#include "router/types.h"

namespace kvroute::router {

class ShadowFeedback {
 public:
  struct Params {
    size_t chunk_bytes = 256;
    // The engine must have had more than this many chunks fewer than
    // estimated before the shadow drops entries (block rounding is no eviction).
    int64_t eviction_tolerance_chunks = 1;
    // EWMA weight of a capacity move, and the capacity's floor as a
    // fraction of the nominal one.
    double capacity_learning_rate = 0.25;
    double min_capacity_fraction = 0.1;
  };

  // One backend's figures.
  struct Backend {
    // Learned share of the nominal capacity the engine keeps for prefixes.
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
    // The same for its host tier; -1: no host event yet.
    int64_t engine_host_cached_tokens = -1;
    double host_evict_carry_tokens = 0;
    // How the host tier is known: its events size its shadow, and override
    // what the engine's metrics say.
    enum class HostTier { kNone, kFromMetrics, kFromEvents };
    HostTier host_tier = HostTier::kNone;
  };

  // One completed request's truth about the backend that served it.
  struct Truth {
    int served = -1;
    int64_t est_tokens = 0;      // the estimate it was routed on there
    int64_t est_chunks = 0;      // the shadow's matched chunks in it
    int64_t actual_tokens = 0;   // the engine's cached_tokens
    double bytes_per_token = 1;  // this request's own ratio
    absl::Span<const uint64_t> chain;
    uint64_t route_tick = 0;  // the shadow's clock at routing
  };

  // The host shadow's capacity: the engine's removals size it.
  static constexpr int64_t kUnboundedChunks = int64_t{1} << 40;

  // `pool_index` has one instance, 0: the fleet-shared KV pool.
  ShadowFeedback(Params params, ShadowIndex& index, ShadowIndex& host_index,
                 ShadowIndex& pool_index, int backends)
      : params_(params),
        index_(index),
        host_index_(host_index),
        pool_index_(pool_index),
        backends_(backends) {}

  void Resize(int backends) {
    if (backends > static_cast<int>(backends_.size())) backends_.resize(backends);
  }
  const Backend& at(int backend) const { return backends_[backend]; }
  // Whether `backend`'s engine has a host tier, from its events or metrics.
  bool HasHostTier(int backend) const {
    return backends_[backend].host_tier != Backend::HostTier::kNone;
  }
  // The host tier's size from the engine's metrics, in KV tokens (0: none).
  // Until the engine's events reveal the tier, a positive size makes the
  // host shadow an LRU of that many tokens at `bytes_per_token` (prompt
  // bytes); a tier whose events have been seen keeps their sizing.
  void ApplyHostCapacity(int backend, int64_t capacity_tokens, double bytes_per_token);
  // Whether the fleet-shared pool has published events (kPoolBackend), and
  // the tokens they say it holds (stored minus removed; -1 before).
  bool HasPool() const { return pool_cached_tokens_ >= 0; }
  int64_t pool_cached_tokens() const { return pool_cached_tokens_; }
  // Whether the pool has removed KV since it was revealed or cleared: it
  // evicts only when full, so until then it holds everything stored to it.
  bool pool_evicts() const { return pool_evicts_; }
  // Applies the pool's events in order: the first reveals the pool (its
  // shadow is then sized by the pool's removals alone), removals trim its
  // shadow least recently used first, a clear empties it. Returns the
  // chunks evicted.
  int64_t ApplyPoolKvEvents(absl::Span<const EngineKvEvent> events, double fleet_bytes_per_token);

  // The shadow's pool of `backend`: its nominal KV capacity in tokens times
  // the learned fraction, in chunks at `bytes_per_token`.
  int64_t CapacityChunks(int64_t nominal_tokens, double bytes_per_token, double fraction) const;
  void ApplyCapacity(int backend, int64_t nominal_tokens, double bytes_per_token);
  // Records the estimate's error and corrects the shadow and its capacity.
  // Call before the request's pins are freed (freeing touches its chunks,
  // which would read as re-proved since routing).
  void LearnFromTruth(const Truth& t, int64_t nominal_tokens, double fleet_bytes_per_token);
  // Applies the engine's events in order (Router::ApplyEngineKvEvents);
  // returns the shadow chunks evicted.
  int64_t ApplyEngineKvEvents(int backend, absl::Span<const EngineKvEvent> events,
                              double fleet_bytes_per_token);

 private:
  Params params_;
  // Trims `index` by `tokens` of engine removals, the fraction of a chunk
  // carried in `carry`; returns the chunks evicted.
  int64_t EvictRemoved(ShadowIndex& index, int backend, int64_t tokens, double tokens_per_chunk,
                       double* carry);

  ShadowIndex& index_;
  ShadowIndex& host_index_;
  ShadowIndex& pool_index_;
  std::vector<Backend> backends_;
  int64_t pool_cached_tokens_ = -1;
  bool pool_evicts_ = false;
  double pool_evict_carry_tokens_ = 0;
};

}  // namespace kvroute::router
