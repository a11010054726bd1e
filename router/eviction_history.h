// EvictionHistory: what each engine's KV events say it cached and removed,
// over time, so a prefix another replica saw freed can be aged: how much of
// it the engine still holds now.
//
// Why. With several replicas a session's turns pass through different ones;
// the replica that gets the next turn learns from the store what the last
// one left (RequestFeatures::PeerSession: its prefix, the tokens held, when
// it finished). Between then and now the engine may have evicted it, and
// this replica's shadow, which saw only its own share of the traffic, cannot
// say. The engine's own events can: vLLM frees a finished request's blocks
// to the tail of its free queue and evicts from its head (the least
// recently used leave first, a request's tail before its head), so a
// session's blocks freed at F go only after every cached block that was in
// the free queue at F: they start to go once the engine has removed, since
// F, more than it then held cached and free. Blocks that running requests
// held at F are not ahead of them: freed later, they queue behind. The
// events give what is cached; the engine's KV usage gauge (vLLM: 1 - free
// queue / blocks) gives what of it running requests hold.
//
//   EvictionHistory h;
//   h.Resize(n);
//   h.Apply(b, events, in_use_tokens);   // each batch of b's events, as it comes
//   int64_t left = h.Surviving(b, finished, held_tokens);   // -1: unknown
//
// Each event carries its batch's time (EngineKvEvent::at); events without
// one are not recorded. Memory: at most kMaxSamples samples per backend, at
// least kSpacing apart (a batch within it counts in the totals only).
//
// Not thread-safe: RouterImpl owns it under its mutex.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"
#include "router/types.h"

namespace kvroute::router {

class EvictionHistory {
 public:
  static constexpr size_t kMaxSamples = 4096;
  static constexpr absl::Duration kSpacing = absl::Milliseconds(50);

  // Backend slots only grow.
  void Resize(int backends);
  // One batch of `backend`'s GPU-tier events (host-tier ones are skipped);
  // `in_use_tokens`: the KV its running requests hold as of the batch (the
  // last usage gauge x capacity; 0 when unknown, which counts every cached
  // block as evictable).
  void Apply(int backend, absl::Span<const EngineKvEvent> events, int64_t in_use_tokens);
  // The tokens of a prefix of `held_tokens` that `backend`'s engine freed at
  // `freed_at` (the newest free blocks then) and still holds as of its
  // latest event: all of them until its removals since pass what it held
  // cached and free beside them, then fewer, tail first. -1 when the engine's events say nothing
  // (none timed yet); a time before the history's first sample counts from
  // that sample, which can only age the prefix more.
  int64_t Surviving(int backend, absl::Time freed_at, int64_t held_tokens) const;

 private:
  struct Sample {
    absl::Time at;
    int64_t removed = 0;    // cumulative tokens removed
    int64_t evictable = 0;  // tokens cached after the batch, less those in use
  };
  struct Engine {
    int64_t removed = 0;
    int64_t cached = 0;
    std::deque<Sample> samples;
  };
  std::vector<Engine> engines_;
};

}  // namespace kvroute::router
