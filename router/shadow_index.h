// ShadowIndex: the router's model of every instance's prefix cache.
//
// One fleet-wide hash map takes a chunk hash (router/prefix_hash.h) to the
// set of instances believed to hold that chunk (a 256-bit set), so Match()
// walks a request's chain once, intersecting sets, and yields every
// instance's matched prefix at a cost proportional to the prompt, not to
// prompt x instances.
//
// Per instance it models the engine's KV block pool (vLLM's KVCacheManager):
// the pool holds `capacity` chunks; requests in flight there occupy part of
// it, and only the rest keeps cached prefixes.
//   - pinned entries: cached chunks a request in flight reuses (vLLM takes
//     them out of its free queue while the request runs); they cannot be
//     evicted and still match;
//   - reserved chunks: the rest of a request in flight's footprint (its
//     uncached prompt and its output), anonymous to the index;
//   - free entries: cached and evictable, in a list ordered by when they
//     were last freed or proven; eviction takes the least recently freed.
// Free entries never exceed capacity - pinned - reserved, so a busy instance
// keeps fewer cached prefixes than an idle one, as the engine does. A
// request reserves its footprint when it is routed, so the shadow predicts
// the engine at the admission of the next request routed there; the engine
// evicts for the same request later, when it admits it. So on an instance
// whose engine reports its own evictions (SetEngineEvicts,
// EvictLeastRecentlyFreed), what the shadow evicted to fit reservations is
// counted as ahead of the engine, and the engine's reports pay that off
// first and evict only beyond it, rather than evicting the same blocks
// twice. The credit never exceeds the chunks reserved: the shadow can be
// ahead only by what it reserved for requests the engine has not yet
// allocated.
// Insert() and Unpin() touch a chain tail-first so a prefix is always at
// least as recent as its descendants and eviction removes tails first, like
// vLLM's free queue (a finished request's blocks are freed in reverse
// order). Every entry carries a tick of a global clock (its last touch);
// ticks are non-increasing along a chain.
//
//   ShadowIndex index(8);
//   index.SetCapacity(3, 6250);
//   index.Insert(3, chain);
//   std::vector<int32_t> matched(8);
//   index.Match(chain, matched);   // matched[3] == chain.size()
//   ShadowIndex::Pin pin = index.PinRequest(3, chain, matched[3], /*footprint=*/chain.size() + 4);
//   ... the request runs; later:
//   index.Unpin(pin, chain);
//
// Memory is bounded by the sum of capacities (pinned entries are matched
// prefixes, which were free entries within the bound when pinned). Not
// thread-safe: the Router owns it under its mutex.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace kvroute::router {

class ShadowIndex {
 public:
  static constexpr int kMaxInstances = 256;

  explicit ShadowIndex(int num_instances);
  ShadowIndex(const ShadowIndex&) = delete;
  ShadowIndex& operator=(const ShadowIndex&) = delete;

  int num_instances() const { return static_cast<int>(lrus_.size()); }

  // What a request in flight holds on one instance; returned by PinRequest
  // and handed back to Unpin exactly once.
  struct Pin {
    int instance = -1;
    uint64_t generation = 0;  // Clear() invalidates older pins
    int32_t chunks = 0;       // leading chunks of the chain pinned
    int64_t reserved = 0;     // anonymous chunks reserved
  };

  // Bounds `instance`'s pool to `chunks` (at least 1), evicting the least
  // recently freed entries that no longer fit.
  void SetCapacity(int instance, int64_t chunks);
  int64_t capacity(int instance) const { return lrus_[instance].capacity; }
  // Whether the engine of `instance` reports its evictions: while it does,
  // the shadow's own evictions are credited against its reports (above).
  void SetEngineEvicts(int instance, bool engine_evicts);
  bool engine_evicts(int instance) const { return lrus_[instance].engine_evicts; }
  // Chunks the shadow evicted that the engine has not reported yet.
  int64_t evicted_ahead(int instance) const { return lrus_[instance].evicted_ahead; }
  // Entries held (free and pinned).
  int64_t size(int instance) const { return lrus_[instance].size; }
  int64_t pinned(int instance) const { return lrus_[instance].pinned; }
  int64_t reserved(int instance) const { return lrus_[instance].reserved; }

  // matched[i] = number of leading chunks of `chain` instance i holds.
  // `matched` must have num_instances() elements.
  void Match(absl::Span<const uint64_t> chain, absl::Span<int32_t> matched) const;

  // `instance` now holds chain (the prefix that fits its capacity): touch
  // or insert every chunk, tail first. Pinned chunks stay pinned.
  void Insert(int instance, absl::Span<const uint64_t> chain);

  // Insert() in two steps, for a caller that pins what it stored for
  // requests in flight (ExtendPin) before the pool is fitted: Store touches
  // or inserts every chunk, tail first, evicting nothing; Fit evicts the
  // least recently freed entries that no longer fit beside the pinned and
  // reserved ones.
  void Store(int instance, absl::Span<const uint64_t> chain);
  void Fit(int instance) { FitFreeEntries(instance); }
  // Whether `instance`'s free entries exceed the room its pins and
  // reservations leave (a Store() did it, and Fit() will evict them).
  bool Overfull(int instance) const;

  // A request runs on `instance` and occupies `footprint_chunks` of its
  // pool: its first `cached_chunks` chunks of `chain` (those the index
  // holds; the walk stops at the first it does not) are pinned, the rest of
  // the footprint is reserved. Free entries beyond the remaining room are
  // evicted, least recently freed first.
  Pin PinRequest(int instance, absl::Span<const uint64_t> chain, int32_t cached_chunks,
                 int64_t footprint_chunks);
  // The instance now holds more of `chain` than `pin` pinned when its
  // request was routed: another request there stored the prefix since. The
  // engine finds that prefix when it admits the request, or its own copy
  // of it is what the request holds, so the newly held leading chunks are
  // pinned and leave the pin's reservation (the footprint stays the same).
  // Returns how many chunks were added. A pin from before a Clear() of its
  // instance, or one with nothing reserved, is left alone.
  int32_t ExtendPin(Pin& pin, absl::Span<const uint64_t> chain);
  // The request's prefill has run (its first token came): the engine
  // caches every block it computes, so the instance holds the whole prompt,
  // pinned by the request, and a request sharing the prefix finds it from
  // now on, not only once this one ends. The chunks of `chain` past the pin
  // are inserted or found, pinned and taken from the pin's reservation (the
  // footprint stays the same), up to its end. The chunks the pin already
  // held keep their ticks, so the engine's truth when the request ends still
  // dates an eviction behind them. Returns how many chunks were added. A pin
  // from before a Clear() of its instance is left alone.
  int32_t HoldComputed(Pin& pin, absl::Span<const uint64_t> chain);
  // The request ended: its reservation is released and its pinned chunks
  // become the most recently freed (tail first). `chain` is the one given to
  // PinRequest. A pin from before a Clear() of its instance is ignored.
  void Unpin(const Pin& pin, absl::Span<const uint64_t> chain);

  // The engine evicted `chunks` cached chunks from its free queue (its least
  // recently freed): drops that many free entries, oldest first, less what
  // the shadow already evicted ahead of the engine. Returns how many were
  // dropped (fewer when the instance holds fewer free entries).
  int64_t EvictLeastRecentlyFreed(int instance, int64_t chunks);

  // The tick of `hash`'s last touch on `instance`, 0 when absent.
  uint64_t TickOf(int instance, uint64_t hash) const;
  // The latest tick issued (any instance).
  uint64_t clock() const { return clock_; }

  // Drops every free entry of `instance` last touched at or before `tick`
  // (the engine proved it evicted an entry of that age, and its LRU is
  // monotone). Returns how many were dropped.
  int64_t EvictThrough(int instance, uint64_t tick);
  // Drops the free entries of `chunks` on `instance` (the engine's events
  // show that prefix evicted there); pinned ones stay. Returns how many were
  // dropped.
  int64_t Forget(int instance, absl::Span<const uint64_t> chunks);
  // Drops every entry and reservation of `instance` (the engine restarted
  // or dropped its whole cache); pins taken before are void.
  void Clear(int instance);
  // Appends `count` empty instances (capacity 1 until SetCapacity), up to
  // kMaxInstances in all.
  void AddInstances(int count);

  int64_t distinct_chunks() const { return static_cast<int64_t>(holders_.size()); }
  int64_t replicas() const;
  // Approximate heap bytes of the whole index (tables at their capacity).
  size_t MemoryBytes() const;

 private:
  static constexpr uint32_t kNil = 0xffffffffu;
  static constexpr int kWords = kMaxInstances / 64;

  // Keys are already uniform 64-bit hashes.
  struct IdentityHash {
    size_t operator()(uint64_t h) const { return static_cast<size_t>(h); }
  };
  using InstanceSet = std::array<uint64_t, kWords>;

  struct Node {
    uint64_t hash;
    uint64_t tick;
    uint32_t newer;  // free-list links; kNil while pinned
    uint32_t older;
    uint32_t pins;  // requests in flight reusing this chunk
  };
  struct Lru {
    absl::flat_hash_map<uint64_t, uint32_t, IdentityHash> slot;  // hash -> node
    std::vector<Node> nodes;
    std::vector<uint32_t> free;  // recycled node slots
    uint32_t newest = kNil;      // the list holds unpinned entries only
    uint32_t oldest = kNil;
    int64_t size = 0;    // entries, pinned included
    int64_t pinned = 0;  // entries with pins > 0
    int64_t reserved = 0;
    int64_t capacity = 1;
    uint64_t generation = 0;
    bool engine_evicts = false;
    int64_t evicted_ahead = 0;  // <= reserved
  };

  void Unlink(Lru& lru, uint32_t n);
  void PushNewest(Lru& lru, uint32_t n);
  // Removes node `n` (unpinned) of `instance`'s pool from the index.
  void Drop(int instance, uint32_t n);
  void EvictOldest(int instance);
  // A new entry for `hash` in `instance`'s pool, touched now and neither
  // linked nor pinned (the caller does one or the other).
  uint32_t AddEntry(int instance, uint64_t hash);
  // Pins chain[pin.chunks, end) while `lru` holds each chunk, stopping at
  // the first it does not; returns how many it pinned (pin.chunks grows).
  int32_t PinHeld(Lru& lru, Pin& pin, absl::Span<const uint64_t> chain, size_t end);
  // Evicts free entries until they fit beside the pinned and reserved ones,
  // crediting each eviction against the engine's reports while it makes them.
  void FitFreeEntries(int instance);
  void AddHolder(uint64_t hash, int instance);
  void RemoveHolder(uint64_t hash, int instance);

  absl::flat_hash_map<uint64_t, InstanceSet, IdentityHash> holders_;
  std::vector<Lru> lrus_;
  int words_;  // 64-bit words of InstanceSet in use
  uint64_t clock_ = 0;
};

}  // namespace kvroute::router
