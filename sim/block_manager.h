// Paged KV block pool of one simulated instance, with prefix caching.
//
// A full block is identified by a hash chained over its parent block's hash and its own token
// ids, so a cache hit is always a prefix of whole blocks. Blocks referenced by a running (or
// held) request are pinned; blocks whose reference count drops to zero stay cached and are
// evicted least-recently-freed first. When a request frees its blocks they are queued in
// reverse order, so a sequence's tail is evicted before its head.
//
// Owned by one Engine; not thread-safe.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "sim/kv_events.h"

namespace sim {

using BlockHash = uint64_t;
using BlockId = int32_t;

// Chained hashes of the full blocks of `tokens` (a trailing partial block gets none).
std::vector<BlockHash> HashFullBlocks(std::span<const int32_t> tokens, int block_size);
// The hash of one block given its parent's hash (0 for the first block).
BlockHash ChainBlockHash(BlockHash parent, std::span<const int32_t> block_tokens);

class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int block_size);

  int block_size() const { return block_size_; }
  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  // Blocks not referenced by anyone (free or cached-and-evictable).
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  // Fraction of blocks referenced by a request (vllm:kv_cache_usage_perc).
  double Usage() const;

  // Number of leading entries of `hashes` that are cached (the prefix hit, in blocks).
  int64_t CountCachedPrefix(std::span<const BlockHash> hashes) const;
  // Whether `num_fresh` new blocks can be allocated after taking the first `num_hit` blocks of
  // `hashes` (which must be cached) out of the free queue.
  bool CanAllocate(std::span<const BlockHash> hashes, int64_t num_hit, int64_t num_fresh) const;
  // Takes a reference on the first `n` cached blocks of `hashes` (all must be hits).
  std::vector<BlockId> AcquireCached(std::span<const BlockHash> hashes, int64_t n);
  // Allocates `n` fresh blocks, evicting cached ones in LRU order; nullopt if too few are free.
  std::optional<std::vector<BlockId>> Allocate(int64_t n);
  // Marks a full, computed block as holding the content `hash`, making it a future cache hit.
  // If another block already caches that content, this one stays anonymous (returns false).
  bool Commit(BlockId block, BlockHash hash);
  // Drops one reference on each block; unreferenced blocks join the eviction queue, last
  // block first.
  void Release(std::span<const BlockId> blocks);
  void Retain(std::span<const BlockId> blocks);

  // Drops every cached hash when no block is referenced (vLLM's reset_prefix_cache, which
  // refuses while requests hold blocks); returns whether it did.
  bool ResetPrefixCache();

  // KV cache events as vLLM's BlockPool queues them, recorded only when enabled: BlockRemoved
  // when Allocate evicts a cached block, AllBlocksCleared on ResetPrefixCache, and the
  // BlockStored the engine reports through RecordStored after committing a run of blocks.
  void EnableKvEvents(bool on) { record_events_ = on; }
  void RecordStored(std::optional<BlockHash> parent, std::span<const BlockHash> hashes,
                    std::span<const int32_t> token_ids);
  std::vector<KvCacheEvent> TakeKvEvents() { return std::exchange(events_, {}); }

  // Inspection for metrics and tests.
  bool IsCached(BlockHash hash) const { return cached_.contains(hash); }
  int32_t RefCount(BlockId block) const { return blocks_[block].ref; }
  int64_t num_cached() const { return static_cast<int64_t>(cached_.size()); }
  int64_t num_evictions() const { return num_evictions_; }

 private:
  struct Block {
    int32_t ref = 0;
    bool has_hash = false;
    BlockHash hash = 0;
    bool in_free = false;
    std::list<BlockId>::iterator free_pos;
  };

  void RemoveFromFree(BlockId id);

  int block_size_;
  std::vector<Block> blocks_;
  // Eviction order: front is evicted first.
  std::list<BlockId> free_;
  absl::flat_hash_map<BlockHash, BlockId> cached_;
  int64_t num_evictions_ = 0;
  bool record_events_ = false;
  std::vector<KvCacheEvent> events_;
};

}  // namespace sim
