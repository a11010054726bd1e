// The host-memory KV tier of one simulated instance: vLLM's CPU offloading manager, the
// scheduler-side bookkeeping of `--kv-offloading-size` (vllm/v1/kv_offload/lru_manager.py over
// vllm/v1/kv_offload/backends/cpu.py, behind vllm/v1/kv_offload/abstract.py's
// OffloadingManager interface). It knows which offloaded blocks host memory holds; it moves no
// bytes and reads no clock (the engine times the copies, sim/host_copy.h).
//
// A host block is an "offload block" of `block_size` tokens, a whole multiple of the GPU block
// size. It is named by its key: the chained hash of the last GPU block it covers, which names
// its whole prefix (vLLM's OffloadingConnectorScheduler._get_block_hashes).
//
//   HostTier tier(/*num_blocks=*/1000, /*block_size=*/16);
//   std::optional<std::vector<BlockHash>> fresh = tier.PrepareStore(keys);  // evicts LRU
//   ... the copy lands ...
//   tier.CompleteStore(*fresh);              // now loadable
//   int64_t run = tier.Lookup(keys);         // consecutive ready blocks from the first
//   tier.PrepareLoad(first_run);  ...  tier.CompleteLoad(first_run);
//
// A block's life, as vLLM's BlockStatus.ref_cnt: PrepareStore adds it not ready (-1); it is
// neither loadable nor evictable until CompleteStore makes it idle (0); PrepareLoad pins it
// (> 0) until CompleteLoad. Only idle blocks are evicted, least recently used first; Touch
// makes blocks recent, the first of the keys it is given most recent.
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

#include "sim/block_manager.h"
#include "sim/kv_events.h"

namespace sim {

class HostTier {
 public:
  HostTier(int64_t num_blocks, int block_size);

  int64_t num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  // Blocks allocated: stored, being stored or being loaded.
  int64_t num_used() const { return static_cast<int64_t>(blocks_.size()); }
  bool Contains(BlockHash key) const { return blocks_.contains(key); }
  // Stored and not being written: a load may read it.
  bool IsReady(BlockHash key) const;
  int64_t num_evictions() const { return num_evictions_; }

  // The number of leading keys whose blocks are ready (vLLM's lookup()).
  int64_t Lookup(std::span<const BlockHash> keys) const;
  // Whether any of the keys is pinned by a load in flight.
  bool AnyLoading(std::span<const BlockHash> keys) const;
  // Marks the present keys recently used; the first key ends up the most recent. Touching
  // the keys of the previous Touch again, with the order unchanged since, is a no-op and
  // costs a comparison: vLLM's scheduler touches a waiting request's blocks at every step
  // it looks the request up, which for a request held at the head of the queue is every
  // step, over its whole prompt.
  void Touch(std::span<const BlockHash> keys);
  // Pins ready blocks for a load (each key must be ready).
  void PrepareLoad(std::span<const BlockHash> keys);
  void CompleteLoad(std::span<const BlockHash> keys);
  // Allocates not-ready blocks for the keys not yet present, evicting idle blocks least
  // recently used first. Returns the keys to copy, in order (empty when all are present), or
  // nullopt when too few blocks can be evicted: then nothing changes.
  std::optional<std::vector<BlockHash>> PrepareStore(std::span<const BlockHash> keys);
  // The copies of these keys have landed: not-ready blocks become idle and loadable.
  void CompleteStore(std::span<const BlockHash> keys);

  // KV cache events with medium CPU, recorded only when enabled: one BlockRemoved per
  // eviction in PrepareStore, one BlockStored per block CompleteStore makes ready. Each names
  // the block by what Describe() recorded for its key (the self-describing form of vLLM's
  // OffloadingEventsTracker); a key never described is named by itself.
  void EnableKvEvents(bool on) { record_events_ = on; }
  // The medium the events name: CPU for an instance's host tier (the default), STORAGE for
  // the fleet-shared pool (sim/kv_pool.h), which keeps its blocks the same way.
  void set_event_medium(KvCacheEvent::Medium medium) { medium_ = medium; }
  bool kv_events_enabled() const { return record_events_; }
  // What a stored block holds: its GPU blocks' hashes (the key last), the hash before them,
  // and its tokens. Kept until the block is evicted.
  void Describe(BlockHash key, std::optional<BlockHash> parent, std::span<const BlockHash> hashes,
                std::span<const int32_t> token_ids, int gpu_block_size);
  std::vector<KvCacheEvent> TakeKvEvents() { return std::exchange(events_, {}); }

 private:
  struct Description {
    std::optional<BlockHash> parent;
    std::vector<BlockHash> hashes;
    std::vector<int32_t> token_ids;
    int gpu_block_size = 0;
  };
  struct Block {
    int32_t ref = -1;  // -1 being stored, 0 idle, > 0 loads reading it
    std::list<BlockHash>::iterator lru_pos;
    std::optional<Description> description;
  };

  int64_t num_blocks_;
  int block_size_;
  absl::flat_hash_map<BlockHash, Block> blocks_;
  // Recency order: front is evicted first.
  std::list<BlockHash> lru_;
  // Bumped by every change of lru_; the last Touch's keys and the version it left.
  uint64_t lru_version_ = 0;
  uint64_t touched_version_ = 0;
  std::vector<BlockHash> touched_;
  int64_t num_evictions_ = 0;
  bool record_events_ = false;
  KvCacheEvent::Medium medium_ = KvCacheEvent::Medium::kCpu;
  std::vector<KvCacheEvent> events_;
};

}  // namespace sim
