#include "router/shadow_feedback.h"

#include <algorithm>
#include <cstdlib>

namespace kvroute::router {

int64_t ShadowFeedback::CapacityChunks(int64_t nominal_tokens, double bytes_per_token,
                                       double fraction) const {
  const double chunks = static_cast<double>(nominal_tokens) * bytes_per_token /
                        static_cast<double>(params_.chunk_bytes);
  return std::max<int64_t>(1, static_cast<int64_t>(chunks * fraction));
}

void ShadowFeedback::ApplyCapacity(int backend, int64_t nominal_tokens, double bytes_per_token) {
  index_.SetCapacity(backend, CapacityChunks(nominal_tokens, bytes_per_token,
                                             backends_[backend].capacity_fraction));
}

void ShadowFeedback::LearnFromTruth(const Truth& t, int64_t nominal_tokens,
                                    double fleet_bytes_per_token) {
  Backend& s = backends_[t.served];
  const int64_t error = t.est_tokens - t.actual_tokens;
  s.est_requests += 1;
  s.est_abs_error_sum += static_cast<double>(std::llabs(error));
  s.est_sum += static_cast<double>(t.est_tokens);
  s.actual_sum += static_cast<double>(t.actual_tokens);
  s.signed_error_sum += static_cast<double>(error);
  s.last_error = error;

  const double chunk_bytes = static_cast<double>(params_.chunk_bytes);
  const auto actual_chunks =
      static_cast<int64_t>(static_cast<double>(t.actual_tokens) * t.bytes_per_token / chunk_bytes);
  // The estimate may include a session continuation credit beyond the
  // shadow's chunks; growing capacity must compare against all of it.
  const auto est_tokens_as_chunks =
      static_cast<int64_t>(static_cast<double>(t.est_tokens) * t.bytes_per_token / chunk_bytes);
  const int64_t nominal = CapacityChunks(nominal_tokens, fleet_bytes_per_token, 1.0);
  const double lr = std::clamp(params_.capacity_learning_rate, 0.0, 1.0);
  if (t.est_chunks > actual_chunks + params_.eviction_tolerance_chunks &&
      actual_chunks < static_cast<int64_t>(t.chain.size())) {
    // The engine no longer had chunk `actual_chunks` of this chain. Unless
    // something re-proved it since routing, everything as old or older in
    // the shadow's LRU went with it (the engine's LRU is monotone too).
    const uint64_t tick = index_.TickOf(t.served, t.chain[actual_chunks]);
    if (tick == 0 || tick > t.route_tick) return;
    index_.EvictThrough(t.served, tick);
    s.corrections += 1;
    // The engine's own eviction reports size this pool; without them, what
    // is left beside what requests in flight hold is what the engine
    // keeps: move the effective capacity toward it.
    if (index_.engine_evicts(t.served)) return;
    const double kept = static_cast<double>(index_.size(t.served) + index_.reserved(t.served)) /
                        static_cast<double>(std::max<int64_t>(1, nominal));
    s.capacity_fraction = std::clamp((1 - lr) * s.capacity_fraction + lr * kept,
                                     std::clamp(params_.min_capacity_fraction, 0.0, 1.0), 1.0);
    ApplyCapacity(t.served, nominal_tokens, fleet_bytes_per_token);
  } else if (actual_chunks >
                 std::max(t.est_chunks, est_tokens_as_chunks) + params_.eviction_tolerance_chunks &&
             s.capacity_fraction < 1.0 && !HasHostTier(t.served) && !HasPool()) {
    // (With a host tier the engine's count includes what it reloaded: more
    // than the estimate says nothing of its GPU pool.)
    // The engine kept more than the shadow did: the shadow evicted too early.
    s.capacity_fraction = std::min(1.0, s.capacity_fraction + lr * (1 - s.capacity_fraction));
    ApplyCapacity(t.served, nominal_tokens, fleet_bytes_per_token);
  }
}

void ShadowFeedback::ApplyHostCapacity(int backend, int64_t capacity_tokens,
                                       double bytes_per_token) {
  Backend& s = backends_[backend];
  if (s.host_tier == Backend::HostTier::kFromEvents) return;
  if (capacity_tokens <= 0) {
    if (s.host_tier == Backend::HostTier::kFromMetrics) {
      s.host_tier = Backend::HostTier::kNone;
      host_index_.Clear(backend);
    }
    return;
  }
  s.host_tier = Backend::HostTier::kFromMetrics;
  host_index_.SetEngineEvicts(backend, false);
  host_index_.SetCapacity(backend, CapacityChunks(capacity_tokens, bytes_per_token, 1.0));
}

int64_t ShadowFeedback::EvictRemoved(ShadowIndex& index, int backend, int64_t tokens,
                                     double tokens_per_chunk, double* carry) {
  const double owed = *carry + static_cast<double>(tokens);
  const auto chunks = static_cast<int64_t>(owed / tokens_per_chunk);
  const int64_t evicted = index.EvictLeastRecentlyFreed(backend, chunks);
  // Only the fraction of a chunk is carried: when the shadow held fewer
  // entries than the engine evicted, it has nothing older left to owe.
  *carry = owed - static_cast<double>(chunks) * tokens_per_chunk;
  return evicted;
}

int64_t ShadowFeedback::ApplyPoolKvEvents(absl::Span<const EngineKvEvent> events,
                                          double fleet_bytes_per_token) {
  const double tokens_per_chunk =
      static_cast<double>(params_.chunk_bytes) / std::max(fleet_bytes_per_token, 1e-9);
  int64_t evicted = 0;
  for (const EngineKvEvent& e : events) {
    if (!HasPool()) {
      pool_cached_tokens_ = 0;
      pool_index_.SetCapacity(0, kUnboundedChunks);
      pool_index_.SetEngineEvicts(0, true);
    }
    switch (e.kind) {
      case EngineKvEvent::Kind::kCleared:
        pool_index_.Clear(0);
        pool_cached_tokens_ = 0;
        pool_evicts_ = false;
        pool_evict_carry_tokens_ = 0;
        break;
      case EngineKvEvent::Kind::kStored:
        pool_cached_tokens_ += e.tokens;
        break;
      case EngineKvEvent::Kind::kRemoved:
        pool_cached_tokens_ = std::max<int64_t>(pool_cached_tokens_ - e.tokens, 0);
        pool_evicts_ = true;
        evicted +=
            EvictRemoved(pool_index_, 0, e.tokens, tokens_per_chunk, &pool_evict_carry_tokens_);
        break;
    }
  }
  return evicted;
}

int64_t ShadowFeedback::ApplyEngineKvEvents(int backend, absl::Span<const EngineKvEvent> events,
                                            double fleet_bytes_per_token) {
  Backend& s = backends_[backend];
  const double tokens_per_chunk =
      static_cast<double>(params_.chunk_bytes) / std::max(fleet_bytes_per_token, 1e-9);
  int64_t evicted = 0;
  for (const EngineKvEvent& e : events) {
    if (e.host) {
      // The first host event reveals the tier: its shadow is sized by the
      // engine's removals alone.
      if (s.host_tier != Backend::HostTier::kFromEvents) {
        s.host_tier = Backend::HostTier::kFromEvents;
        s.engine_host_cached_tokens = 0;
        host_index_.SetCapacity(backend, kUnboundedChunks);
        host_index_.SetEngineEvicts(backend, true);
      }
      if (e.kind == EngineKvEvent::Kind::kStored) {
        s.engine_host_cached_tokens += e.tokens;
      } else if (e.kind == EngineKvEvent::Kind::kRemoved) {
        s.engine_host_cached_tokens = std::max<int64_t>(s.engine_host_cached_tokens - e.tokens, 0);
        EvictRemoved(host_index_, backend, e.tokens, tokens_per_chunk, &s.host_evict_carry_tokens);
      }
      continue;
    }
    // From the first event on, the engine's removals trim the shadow beyond
    // what it evicted ahead of them.
    if (!index_.engine_evicts(backend)) index_.SetEngineEvicts(backend, true);
    switch (e.kind) {
      case EngineKvEvent::Kind::kCleared:
        index_.Clear(backend);
        s.engine_cached_tokens = 0;
        s.evict_carry_tokens = 0;
        break;
      case EngineKvEvent::Kind::kStored:
        s.engine_cached_tokens = std::max<int64_t>(s.engine_cached_tokens, 0) + e.tokens;
        break;
      case EngineKvEvent::Kind::kRemoved:
        s.engine_cached_tokens = std::max<int64_t>(s.engine_cached_tokens - e.tokens, 0);
        evicted += EvictRemoved(index_, backend, e.tokens, tokens_per_chunk, &s.evict_carry_tokens);
        break;
    }
  }
  return evicted;
}

}  // namespace kvroute::router
