#include "router/eviction_history.h"

#include <algorithm>

namespace kvroute::router {

void EvictionHistory::Resize(int backends) {
  if (backends > static_cast<int>(engines_.size())) engines_.resize(backends);
}

void EvictionHistory::Apply(int backend, absl::Span<const EngineKvEvent> events,
                            int64_t in_use_tokens) {
  if (backend < 0 || backend >= static_cast<int>(engines_.size())) return;
  Engine& e = engines_[backend];
  absl::Time at = absl::InfinitePast();
  for (const EngineKvEvent& ev : events) {
    if (ev.host || ev.at == absl::InfinitePast()) continue;
    at = std::max(at, ev.at);
    switch (ev.kind) {
      case EngineKvEvent::Kind::kStored:
        e.cached += ev.tokens;
        break;
      case EngineKvEvent::Kind::kRemoved:
        e.removed += ev.tokens;
        e.cached = std::max<int64_t>(0, e.cached - ev.tokens);
        break;
      case EngineKvEvent::Kind::kCleared:
        // Everything went: every prefix freed before now is gone.
        e.removed += e.cached;
        e.cached = 0;
        break;
    }
  }
  // A batch within the spacing of the last sample is counted, not sampled:
  // a prefix freed in between is aged from that sample, by removals that may
  // have come before it (never too young).
  if (at == absl::InfinitePast()) return;
  if (!e.samples.empty() && at < e.samples.back().at + kSpacing) return;
  const int64_t evictable = std::max<int64_t>(0, e.cached - std::max<int64_t>(0, in_use_tokens));
  e.samples.push_back({at, e.removed, evictable});
  if (e.samples.size() > kMaxSamples) e.samples.pop_front();
}

int64_t EvictionHistory::Surviving(int backend, absl::Time freed_at, int64_t held_tokens) const {
  if (backend < 0 || backend >= static_cast<int>(engines_.size())) return -1;
  const Engine& e = engines_[backend];
  if (e.samples.empty()) return -1;
  held_tokens = std::max<int64_t>(0, held_tokens);
  // The last sample at or before freed_at; before the first, the first.
  auto it = std::upper_bound(e.samples.begin(), e.samples.end(), freed_at,
                             [](absl::Time t, const Sample& s) { return t < s.at; });
  const Sample& then = it == e.samples.begin() ? *it : *std::prev(it);
  const int64_t removed_since = e.removed - then.removed;
  // What the engine held cached and free beside the prefix then, all of it
  // ahead of the prefix in the free queue.
  const int64_t older = std::max<int64_t>(0, then.evictable - held_tokens);
  const int64_t evicted = std::clamp<int64_t>(removed_since - older, 0, held_tokens);
  return held_tokens - evicted;
}

}  // namespace kvroute::router
