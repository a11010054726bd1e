// ShadowIndex: the router's model of every instance's prefix cache.
//
// One fleet-wide hash map takes a chunk hash (router/prefix_hash.h) to the
// set of instances believed to hold that chunk (a 256-bit set), so Match()
// walks a request's chain once, intersecting sets, and yields every
// instance's matched prefix at a cost proportional to the prompt, not to
// prompt x instances. Per instance, entries sit in an LRU list bounded by
// that instance's capacity in chunks; Insert() touches a chain tail-first so
// a prefix is always at least as recent as its descendants and eviction
// removes tails first, like vLLM's block pool. Every entry carries a tick of
// a global clock (its last touch); ticks are non-increasing along a chain.
//
//   ShadowIndex index(8);
//   index.SetCapacity(3, 6250);
//   index.Insert(3, chain);
//   std::vector<int32_t> matched(8);
//   index.Match(chain, matched);   // matched[3] == chain.size()
//
// Memory is bounded by the sum of capacities. Not thread-safe: the Router
// owns it under its mutex.
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

  // Bounds `instance` to `chunks` entries (at least 1), evicting the oldest.
  void SetCapacity(int instance, int64_t chunks);
  int64_t capacity(int instance) const { return lrus_[instance].capacity; }
  int64_t size(int instance) const { return lrus_[instance].size; }

  // matched[i] = number of leading chunks of `chain` instance i holds.
  // `matched` must have num_instances() elements.
  void Match(absl::Span<const uint64_t> chain, absl::Span<int32_t> matched) const;

  // `instance` now holds chain (the prefix that fits its capacity): touch
  // or insert every chunk, tail first.
  void Insert(int instance, absl::Span<const uint64_t> chain);

  // The tick of `hash`'s last touch on `instance`, 0 when absent.
  uint64_t TickOf(int instance, uint64_t hash) const;
  // The latest tick issued (any instance).
  uint64_t clock() const { return clock_; }

  // Drops every entry of `instance` last touched at or before `tick` (the
  // engine proved it evicted an entry of that age, and its LRU is
  // monotone). Returns how many were dropped.
  int64_t EvictThrough(int instance, uint64_t tick);
  // Drops the `count` least recently touched entries of `instance` (the
  // engine reported evicting that much). Returns how many were dropped.
  int64_t EvictLeastRecent(int instance, int64_t count);
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
    uint32_t newer;
    uint32_t older;
  };
  struct Lru {
    absl::flat_hash_map<uint64_t, uint32_t, IdentityHash> slot;  // hash -> node
    std::vector<Node> nodes;
    std::vector<uint32_t> free;
    uint32_t newest = kNil;
    uint32_t oldest = kNil;
    int64_t size = 0;
    int64_t capacity = 1;
  };

  void Unlink(Lru& lru, uint32_t n);
  void PushNewest(Lru& lru, uint32_t n);
  void EvictOldest(int instance);
  void AddHolder(uint64_t hash, int instance);
  void RemoveHolder(uint64_t hash, int instance);

  absl::flat_hash_map<uint64_t, InstanceSet, IdentityHash> holders_;
  std::vector<Lru> lrus_;
  int words_;  // 64-bit words of InstanceSet in use
  uint64_t clock_ = 0;
};

}  // namespace kvroute::router
