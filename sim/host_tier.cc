#include "sim/host_tier.h"

#include <algorithm>
#include <cstdlib>

namespace sim {

HostTier::HostTier(int64_t num_blocks, int block_size)
    : num_blocks_(num_blocks < 0 ? 0 : num_blocks), block_size_(block_size) {}

bool HostTier::IsReady(BlockHash key) const {
  const auto it = blocks_.find(key);
  return it != blocks_.end() && it->second.ref >= 0;
}

int64_t HostTier::Lookup(std::span<const BlockHash> keys) const {
  int64_t n = 0;
  for (BlockHash key : keys) {
    if (!IsReady(key)) break;
    ++n;
  }
  return n;
}

bool HostTier::AnyLoading(std::span<const BlockHash> keys) const {
  for (BlockHash key : keys) {
    const auto it = blocks_.find(key);
    if (it != blocks_.end() && it->second.ref > 0) return true;
  }
  return false;
}

void HostTier::Touch(std::span<const BlockHash> keys) {
  // Repeating the last Touch with nothing moved since leaves the order as it is.
  if (touched_version_ == lru_version_ && std::ranges::equal(keys, touched_)) return;
  // Last to first, so the head of a sequence is the most recent and its tail is evicted first.
  for (auto it = keys.rbegin(); it != keys.rend(); ++it) {
    const auto found = blocks_.find(*it);
    if (found == blocks_.end()) continue;
    lru_.splice(lru_.end(), lru_, found->second.lru_pos);
  }
  touched_.assign(keys.begin(), keys.end());
  touched_version_ = ++lru_version_;
}

void HostTier::PrepareLoad(std::span<const BlockHash> keys) {
  for (BlockHash key : keys) {
    const auto it = blocks_.find(key);
    if (it == blocks_.end() || it->second.ref < 0) std::abort();  // broken invariant: not ready
    ++it->second.ref;
  }
}

void HostTier::CompleteLoad(std::span<const BlockHash> keys) {
  for (BlockHash key : keys) {
    const auto it = blocks_.find(key);
    if (it == blocks_.end() || it->second.ref <= 0) std::abort();  // broken invariant
    --it->second.ref;
  }
}

std::optional<std::vector<BlockHash>> HostTier::PrepareStore(std::span<const BlockHash> keys) {
  std::vector<BlockHash> fresh;
  for (BlockHash key : keys) {
    if (!blocks_.contains(key)) fresh.push_back(key);
  }
  const int64_t free = num_blocks_ - num_used();
  std::vector<BlockHash> victims;
  for (auto it = lru_.begin(); it != lru_.end() && free + static_cast<int64_t>(victims.size()) <
                                                       static_cast<int64_t>(fresh.size());
       ++it) {
    if (blocks_.at(*it).ref == 0) victims.push_back(*it);
  }
  if (free + static_cast<int64_t>(victims.size()) < static_cast<int64_t>(fresh.size())) {
    return std::nullopt;
  }
  KvCacheEvent removed;
  removed.kind = KvCacheEvent::Kind::kBlockRemoved;
  removed.medium = medium_;
  for (BlockHash key : victims) {
    Block& b = blocks_.at(key);
    if (record_events_) {
      if (b.description) {
        removed.block_hashes.insert(removed.block_hashes.end(), b.description->hashes.begin(),
                                    b.description->hashes.end());
      } else {
        removed.block_hashes.push_back(key);
      }
    }
    lru_.erase(b.lru_pos);
    blocks_.erase(key);
    ++num_evictions_;
  }
  if (record_events_ && !victims.empty()) events_.push_back(std::move(removed));
  if (!victims.empty() || !fresh.empty()) ++lru_version_;
  for (BlockHash key : fresh) {
    Block& b = blocks_[key];
    b.lru_pos = lru_.insert(lru_.end(), key);
  }
  return fresh;
}

void HostTier::CompleteStore(std::span<const BlockHash> keys) {
  for (BlockHash key : keys) {
    const auto it = blocks_.find(key);
    if (it == blocks_.end() || it->second.ref >= 0) continue;
    it->second.ref = 0;
    if (!record_events_) continue;
    KvCacheEvent& e = events_.emplace_back();
    e.kind = KvCacheEvent::Kind::kBlockStored;
    e.medium = medium_;
    if (const std::optional<Description>& d = it->second.description) {
      e.block_hashes = d->hashes;
      e.parent_block_hash = d->parent;
      e.token_ids = d->token_ids;
      e.block_size = d->gpu_block_size;
    } else {
      e.block_hashes.push_back(key);
      e.block_size = block_size_;
    }
  }
}

void HostTier::Describe(BlockHash key, std::optional<BlockHash> parent,
                        std::span<const BlockHash> hashes, std::span<const int32_t> token_ids,
                        int gpu_block_size) {
  const auto it = blocks_.find(key);
  if (it == blocks_.end()) return;
  it->second.description =
      Description{.parent = parent,
                  .hashes = std::vector<BlockHash>(hashes.begin(), hashes.end()),
                  .token_ids = std::vector<int32_t>(token_ids.begin(), token_ids.end()),
                  .gpu_block_size = gpu_block_size};
}

}  // namespace sim
