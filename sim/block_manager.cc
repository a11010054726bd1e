#include "sim/block_manager.h"

#include <xxhash.h>

#include <cassert>
#include <cstdlib>

namespace sim {

BlockHash ChainBlockHash(BlockHash parent, std::span<const int32_t> block_tokens) {
  BlockHash h = XXH3_64bits_withSeed(block_tokens.data(), block_tokens.size_bytes(), parent);
  return h == 0 ? 1 : h;  // 0 is the root's "parent"
}

std::vector<BlockHash> HashFullBlocks(std::span<const int32_t> tokens, int block_size) {
  std::vector<BlockHash> hashes;
  const size_t n = tokens.size() / block_size;
  hashes.reserve(n);
  BlockHash parent = 0;
  for (size_t i = 0; i < n; ++i) {
    parent = ChainBlockHash(parent, tokens.subspan(i * block_size, block_size));
    hashes.push_back(parent);
  }
  return hashes;
}

BlockManager::BlockManager(int64_t num_blocks, int block_size)
    : block_size_(block_size), blocks_(static_cast<size_t>(num_blocks)) {
  for (BlockId id = 0; id < static_cast<BlockId>(num_blocks); ++id) {
    blocks_[id].in_free = true;
    blocks_[id].free_pos = free_.insert(free_.end(), id);
  }
}

double BlockManager::Usage() const {
  if (blocks_.empty()) return 0;
  return 1.0 - static_cast<double>(free_.size()) / static_cast<double>(blocks_.size());
}

int64_t BlockManager::CountCachedPrefix(std::span<const BlockHash> hashes) const {
  int64_t n = 0;
  for (BlockHash h : hashes) {
    if (!cached_.contains(h)) break;
    ++n;
  }
  return n;
}

bool BlockManager::CanAllocate(std::span<const BlockHash> hashes, int64_t num_hit,
                               int64_t num_fresh) const {
  int64_t hit_in_free = 0;
  for (int64_t i = 0; i < num_hit; ++i) {
    const auto it = cached_.find(hashes[i]);
    if (it != cached_.end() && blocks_[it->second].ref == 0) ++hit_in_free;
  }
  return num_free() - hit_in_free >= num_fresh;
}

void BlockManager::RemoveFromFree(BlockId id) {
  Block& b = blocks_[id];
  if (b.in_free) {
    free_.erase(b.free_pos);
    b.in_free = false;
  }
}

std::vector<BlockId> BlockManager::AcquireCached(std::span<const BlockHash> hashes, int64_t n) {
  std::vector<BlockId> ids;
  ids.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    const auto it = cached_.find(hashes[i]);
    if (it == cached_.end()) std::abort();  // broken invariant: caller checked the hit
    RemoveFromFree(it->second);
    ++blocks_[it->second].ref;
    ids.push_back(it->second);
  }
  return ids;
}

std::optional<std::vector<BlockId>> BlockManager::Allocate(int64_t n) {
  if (n > num_free()) return std::nullopt;
  std::vector<BlockId> ids;
  ids.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    const BlockId id = free_.front();
    free_.pop_front();
    Block& b = blocks_[id];
    b.in_free = false;
    if (b.has_hash) {
      cached_.erase(b.hash);
      b.has_hash = false;
      ++num_evictions_;
      // vLLM's BlockPool emits one BlockRemoved per evicted block.
      if (record_events_) {
        KvCacheEvent& e = events_.emplace_back();
        e.kind = KvCacheEvent::Kind::kBlockRemoved;
        e.block_hashes.push_back(b.hash);
      }
    }
    b.ref = 1;
    ids.push_back(id);
  }
  return ids;
}

bool BlockManager::Commit(BlockId block, BlockHash hash) {
  Block& b = blocks_[block];
  if (b.has_hash) return false;
  if (cached_.contains(hash)) return false;
  b.has_hash = true;
  b.hash = hash;
  cached_.emplace(hash, block);
  return true;
}

void BlockManager::RecordStored(std::optional<BlockHash> parent,
                                std::span<const BlockHash> hashes,
                                std::span<const int32_t> token_ids) {
  if (!record_events_ || hashes.empty()) return;
  KvCacheEvent& e = events_.emplace_back();
  e.kind = KvCacheEvent::Kind::kBlockStored;
  e.block_hashes.assign(hashes.begin(), hashes.end());
  e.parent_block_hash = parent;
  e.token_ids.assign(token_ids.begin(), token_ids.end());
  e.block_size = block_size_;
}

bool BlockManager::ResetPrefixCache() {
  if (free_.size() != blocks_.size()) return false;
  for (Block& b : blocks_) b.has_hash = false;
  cached_.clear();
  if (record_events_) events_.emplace_back().kind = KvCacheEvent::Kind::kAllBlocksCleared;
  return true;
}

void BlockManager::Release(std::span<const BlockId> blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    Block& b = blocks_[*it];
    if (b.ref <= 0) std::abort();  // double free
    if (--b.ref == 0) {
      b.in_free = true;
      // Anonymous blocks are reused before any cached content is evicted.
      b.free_pos = b.has_hash ? free_.insert(free_.end(), *it) : free_.insert(free_.begin(), *it);
    }
  }
}

void BlockManager::Retain(std::span<const BlockId> blocks) {
  for (BlockId id : blocks) {
    RemoveFromFree(id);
    ++blocks_[id].ref;
  }
}

}  // namespace sim
