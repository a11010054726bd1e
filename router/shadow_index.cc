#include "router/shadow_index.h"

#include <algorithm>
#include <cassert>

namespace kvroute::router {

ShadowIndex::ShadowIndex(int num_instances)
    : lrus_(static_cast<size_t>(std::clamp(num_instances, 1, kMaxInstances))),
      words_((static_cast<int>(lrus_.size()) + 63) / 64) {}

void ShadowIndex::AddInstances(int count) {
  if (count <= 0) return;
  const size_t n = std::min<size_t>(lrus_.size() + static_cast<size_t>(count), kMaxInstances);
  lrus_.resize(n);
  words_ = (static_cast<int>(n) + 63) / 64;
}

void ShadowIndex::SetCapacity(int instance, int64_t chunks) {
  lrus_[instance].capacity = std::max<int64_t>(1, chunks);
  FitFreeEntries(instance);
}

void ShadowIndex::SetEngineEvicts(int instance, bool engine_evicts) {
  Lru& lru = lrus_[instance];
  lru.engine_evicts = engine_evicts;
  lru.evicted_ahead = 0;
}

void ShadowIndex::FitFreeEntries(int instance) {
  Lru& lru = lrus_[instance];
  const int64_t room = std::max<int64_t>(0, lru.capacity - lru.pinned - lru.reserved);
  while (lru.oldest != kNil && lru.size - lru.pinned > room) {
    EvictOldest(instance);
    if (lru.engine_evicts) ++lru.evicted_ahead;
  }
  lru.evicted_ahead = std::min(lru.evicted_ahead, lru.reserved);
}

void ShadowIndex::Match(absl::Span<const uint64_t> chain, absl::Span<int32_t> matched) const {
  const int n = num_instances();
  assert(static_cast<int>(matched.size()) == n);
  std::fill(matched.begin(), matched.end(), 0);
  InstanceSet alive{};
  for (int i = 0; i < n; ++i) alive[i / 64] |= uint64_t{1} << (i % 64);
  // The chain is known up front: prefetch a few lookups ahead so the walk
  // overlaps its cache misses instead of paying them one after another.
  constexpr size_t kPrefetchAhead = 8;
  for (size_t k = 0; k < std::min(kPrefetchAhead, chain.size()); ++k) {
    holders_.prefetch(chain[k]);
  }
  size_t k = 0;
  for (; k < chain.size(); ++k) {
    if (k + kPrefetchAhead < chain.size()) holders_.prefetch(chain[k + kPrefetchAhead]);
    auto it = holders_.find(chain[k]);
    if (it == holders_.end()) break;
    uint64_t any = 0;
    for (int w = 0; w < words_; ++w) {
      uint64_t dropped = alive[w] & ~it->second[w];
      while (dropped != 0) {
        matched[w * 64 + __builtin_ctzll(dropped)] = static_cast<int32_t>(k);
        dropped &= dropped - 1;
      }
      alive[w] &= it->second[w];
      any |= alive[w];
    }
    if (any == 0) return;
  }
  for (int w = 0; w < words_; ++w) {
    uint64_t rest = alive[w];
    while (rest != 0) {
      matched[w * 64 + __builtin_ctzll(rest)] = static_cast<int32_t>(k);
      rest &= rest - 1;
    }
  }
}

void ShadowIndex::Unlink(Lru& lru, uint32_t n) {
  Node& node = lru.nodes[n];
  if (node.newer != kNil)
    lru.nodes[node.newer].older = node.older;
  else
    lru.newest = node.older;
  if (node.older != kNil)
    lru.nodes[node.older].newer = node.newer;
  else
    lru.oldest = node.newer;
  node.newer = node.older = kNil;
}

void ShadowIndex::PushNewest(Lru& lru, uint32_t n) {
  Node& node = lru.nodes[n];
  node.newer = kNil;
  node.older = lru.newest;
  if (lru.newest != kNil) lru.nodes[lru.newest].newer = n;
  lru.newest = n;
  if (lru.oldest == kNil) lru.oldest = n;
}

void ShadowIndex::AddHolder(uint64_t hash, int instance) {
  holders_[hash][instance / 64] |= uint64_t{1} << (instance % 64);
}

void ShadowIndex::RemoveHolder(uint64_t hash, int instance) {
  auto it = holders_.find(hash);
  if (it == holders_.end()) return;
  it->second[instance / 64] &= ~(uint64_t{1} << (instance % 64));
  for (uint64_t w : it->second) {
    if (w != 0) return;
  }
  holders_.erase(it);
}

void ShadowIndex::Drop(int instance, uint32_t n) {
  Lru& lru = lrus_[instance];
  const uint64_t hash = lru.nodes[n].hash;
  Unlink(lru, n);
  lru.slot.erase(hash);
  lru.free.push_back(n);
  --lru.size;
  RemoveHolder(hash, instance);
}

void ShadowIndex::EvictOldest(int instance) {
  if (lrus_[instance].oldest != kNil) Drop(instance, lrus_[instance].oldest);
}

void ShadowIndex::Insert(int instance, absl::Span<const uint64_t> chain) {
  Store(instance, chain);
  FitFreeEntries(instance);
}

bool ShadowIndex::Overfull(int instance) const {
  const Lru& lru = lrus_[instance];
  return lru.size - lru.pinned > std::max<int64_t>(0, lru.capacity - lru.pinned - lru.reserved);
}

void ShadowIndex::Store(int instance, absl::Span<const uint64_t> chain) {
  Lru& lru = lrus_[instance];
  const size_t n = std::min<size_t>(chain.size(), static_cast<size_t>(lru.capacity));
  for (size_t k = n; k-- > 0;) {
    const uint64_t hash = chain[k];
    auto it = lru.slot.find(hash);
    if (it != lru.slot.end()) {
      Node& node = lru.nodes[it->second];
      if (node.pins == 0) {
        Unlink(lru, it->second);
        PushNewest(lru, it->second);
      }
      node.tick = ++clock_;
      continue;
    }
    if (lru.size >= lru.capacity) EvictOldest(instance);
    PushNewest(lru, AddEntry(instance, hash));
  }
}

uint32_t ShadowIndex::AddEntry(int instance, uint64_t hash) {
  Lru& lru = lrus_[instance];
  uint32_t node;
  if (!lru.free.empty()) {
    node = lru.free.back();
    lru.free.pop_back();
  } else {
    node = static_cast<uint32_t>(lru.nodes.size());
    lru.nodes.push_back({});
  }
  lru.nodes[node] = Node{hash, ++clock_, kNil, kNil, 0};
  lru.slot.emplace(hash, node);
  ++lru.size;
  AddHolder(hash, instance);
  return node;
}

int32_t ShadowIndex::PinHeld(Lru& lru, Pin& pin, absl::Span<const uint64_t> chain, size_t end) {
  int32_t added = 0;
  for (size_t k = static_cast<size_t>(pin.chunks); k < std::min(end, chain.size()); ++k) {
    auto it = lru.slot.find(chain[k]);
    if (it == lru.slot.end()) break;
    Node& node = lru.nodes[it->second];
    if (node.pins == 0) {
      Unlink(lru, it->second);
      ++lru.pinned;
    }
    ++node.pins;
    ++pin.chunks;
    ++added;
  }
  return added;
}

ShadowIndex::Pin ShadowIndex::PinRequest(int instance, absl::Span<const uint64_t> chain,
                                         int32_t cached_chunks, int64_t footprint_chunks) {
  Lru& lru = lrus_[instance];
  Pin pin;
  pin.instance = instance;
  pin.generation = lru.generation;
  PinHeld(lru, pin, chain, static_cast<size_t>(std::max(0, cached_chunks)));
  pin.reserved = std::max<int64_t>(0, footprint_chunks - pin.chunks);
  lru.reserved += pin.reserved;
  FitFreeEntries(instance);
  return pin;
}

int32_t ShadowIndex::ExtendPin(Pin& pin, absl::Span<const uint64_t> chain) {
  if (pin.instance < 0 || pin.instance >= num_instances()) return 0;
  Lru& lru = lrus_[pin.instance];
  if (pin.generation != lru.generation) return 0;
  const int32_t added = PinHeld(
      lru, pin, chain, static_cast<size_t>(pin.chunks + std::max<int64_t>(0, pin.reserved)));
  pin.reserved -= added;
  lru.reserved -= added;
  lru.evicted_ahead = std::min(lru.evicted_ahead, lru.reserved);
  return added;
}

int32_t ShadowIndex::HoldComputed(Pin& pin, absl::Span<const uint64_t> chain) {
  if (pin.instance < 0 || pin.instance >= num_instances()) return 0;
  Lru& lru = lrus_[pin.instance];
  if (pin.generation != lru.generation) return 0;
  const size_t end = std::min(
      chain.size(), static_cast<size_t>(pin.chunks + std::max<int64_t>(0, pin.reserved)));
  int32_t added = 0;
  for (size_t k = static_cast<size_t>(pin.chunks); k < end; ++k) {
    const uint64_t hash = chain[k];
    uint32_t node;
    auto it = lru.slot.find(hash);
    if (it != lru.slot.end()) {
      node = it->second;
      if (lru.nodes[node].pins == 0) {
        Unlink(lru, node);
        ++lru.pinned;
      }
      lru.nodes[node].tick = ++clock_;
    } else {
      node = AddEntry(pin.instance, hash);
      ++lru.pinned;
    }
    ++lru.nodes[node].pins;
    ++pin.chunks;
    ++added;
  }
  pin.reserved -= added;
  lru.reserved -= added;
  lru.evicted_ahead = std::min(lru.evicted_ahead, lru.reserved);
  return added;
}

void ShadowIndex::Unpin(const Pin& pin, absl::Span<const uint64_t> chain) {
  if (pin.instance < 0 || pin.instance >= num_instances()) return;
  Lru& lru = lrus_[pin.instance];
  if (pin.generation != lru.generation) return;
  lru.reserved -= pin.reserved;
  assert(lru.reserved >= 0);
  const size_t n = std::min<size_t>(chain.size(), static_cast<size_t>(pin.chunks));
  for (size_t k = n; k-- > 0;) {
    auto it = lru.slot.find(chain[k]);
    // Pinned entries are never evicted, so a pin of this generation finds them.
    assert(it != lru.slot.end());
    if (it == lru.slot.end()) continue;
    Node& node = lru.nodes[it->second];
    assert(node.pins > 0);
    if (node.pins == 0) continue;
    node.tick = ++clock_;
    if (--node.pins == 0) {
      --lru.pinned;
      PushNewest(lru, it->second);
    }
  }
  FitFreeEntries(pin.instance);
}

int64_t ShadowIndex::EvictLeastRecentlyFreed(int instance, int64_t chunks) {
  Lru& lru = lrus_[instance];
  const int64_t paid = std::min(std::max<int64_t>(0, chunks), lru.evicted_ahead);
  lru.evicted_ahead -= paid;
  chunks -= paid;
  int64_t dropped = 0;
  while (dropped < chunks && lru.oldest != kNil) {
    EvictOldest(instance);
    ++dropped;
  }
  return dropped;
}

uint64_t ShadowIndex::TickOf(int instance, uint64_t hash) const {
  const Lru& lru = lrus_[instance];
  auto it = lru.slot.find(hash);
  return it == lru.slot.end() ? 0 : lru.nodes[it->second].tick;
}

int64_t ShadowIndex::EvictThrough(int instance, uint64_t tick) {
  Lru& lru = lrus_[instance];
  int64_t dropped = 0;
  while (lru.oldest != kNil && lru.nodes[lru.oldest].tick <= tick) {
    EvictOldest(instance);
    ++dropped;
  }
  return dropped;
}

int64_t ShadowIndex::Forget(int instance, absl::Span<const uint64_t> chunks) {
  Lru& lru = lrus_[instance];
  int64_t dropped = 0;
  for (const uint64_t hash : chunks) {
    auto it = lru.slot.find(hash);
    if (it == lru.slot.end() || lru.nodes[it->second].pins > 0) continue;
    Drop(instance, it->second);
    ++dropped;
  }
  return dropped;
}

void ShadowIndex::Clear(int instance) {
  Lru& lru = lrus_[instance];
  for (const auto& [hash, node] : lru.slot) RemoveHolder(hash, instance);
  lru.slot = {};
  lru.newest = lru.oldest = kNil;
  lru.size = lru.pinned = lru.reserved = lru.evicted_ahead = 0;
  ++lru.generation;
  lru.nodes.clear();
  lru.nodes.shrink_to_fit();
  lru.free.clear();
  lru.free.shrink_to_fit();
}

int64_t ShadowIndex::replicas() const {
  int64_t total = 0;
  for (const Lru& lru : lrus_) total += lru.size;
  return total;
}

size_t ShadowIndex::MemoryBytes() const {
  // flat_hash_map: one slot plus one control byte per bucket.
  size_t bytes = holders_.capacity() * (sizeof(std::pair<uint64_t, InstanceSet>) + 1);
  for (const Lru& lru : lrus_) {
    bytes += lru.slot.capacity() * (sizeof(std::pair<uint64_t, uint32_t>) + 1);
    bytes += lru.nodes.capacity() * sizeof(Node);
    bytes += lru.free.capacity() * sizeof(uint32_t);
  }
  return bytes + lrus_.capacity() * sizeof(Lru);
}

}  // namespace kvroute::router
