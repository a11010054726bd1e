// The fleet-shared KV pool of one kvroute-sim process (`--kv-pool-size GIB`): a Mooncake-Store-
// like store of KV blocks that every instance writes the blocks its prefills compute to and
// loads any stored prefix from, whichever instance stored it (vLLM's MooncakeStoreConnector,
// sim/README.md "Fleet-shared KV pool"). It knows which blocks the pool holds; it moves no
// bytes and reads no clock: each engine times its own loads and stores over its NIC
// (engine_pool.cc).
//
// A pool block is one GPU block, named by its chained block hash, which names its whole
// prefix: the hashes are the same on every instance of the fleet (vLLM needs one hash seed
// across the fleet for the same reason), so a prefix stored by one instance is found by all.
//
//   KvPool pool(/*num_blocks=*/100000, /*block_size=*/16);
//   std::optional<std::vector<BlockHash>> fresh = pool.PrepareStore(blocks);  // evicts LRU
//   ... the store's bytes land ...
//   pool.CompleteStore(*fresh);                  // now loadable by every instance
//   int64_t run = pool.Lookup(hashes);           // leading blocks stored and ready
//   pool.PrepareLoad(first_run); ... pool.CompleteLoad(first_run);
//
// A block's life is the host tier's (sim/host_tier.h, which keeps the blocks): not ready while
// its store is in flight, then idle, pinned while loads read it; only idle blocks are evicted,
// least recently used first. Loads and stores touch the blocks they name.
//
// Events: with EnableKvEvents the pool publishes on a publisher of its own (Mooncake's master
// publishes apart from the engines, `mooncake_master --enable_kv_events`) in the self-describing
// form of vLLM's offloading events with medium "STORAGE" (docs/kv-events.md).
//
// Thread-safe: the instances of a fleet run on several threads and share one pool.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/status/status.h>
#include <absl/synchronization/mutex.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sim/block_manager.h"
#include "sim/host_tier.h"
#include "sim/kv_events.h"

namespace sim {

// A block a store puts: its key (the chained hash of the GPU block), the hash before it and
// its tokens (what the self-describing BlockStored says).
struct PoolBlock {
  BlockHash key = 0;
  std::optional<BlockHash> parent;
  std::vector<int32_t> token_ids;
};

struct KvPoolStats {
  int64_t num_blocks = 0;
  int64_t used_blocks = 0;
  int64_t evictions = 0;
  int64_t stores_skipped = 0;  // puts that found too few idle blocks to evict
};

class KvPool {
 public:
  KvPool(int64_t num_blocks, int block_size);
  ~KvPool();
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  int block_size() const { return block_size_; }
  KvPoolStats stats() const;

  // The number of leading keys whose blocks are stored and ready (Mooncake's batch exists).
  int64_t Lookup(std::span<const BlockHash> keys) const;
  // Pins ready blocks for a load and makes them recent (each key must be ready).
  void PrepareLoad(std::span<const BlockHash> keys);
  void CompleteLoad(std::span<const BlockHash> keys);
  // Allocates not-ready blocks for the keys not yet present, evicting idle blocks least
  // recently used first, and makes every key recent. Returns the keys whose bytes to send,
  // in order (empty when all are present), or nullopt when too few blocks can be evicted:
  // then nothing changes and the put is skipped.
  std::optional<std::vector<BlockHash>> PrepareStore(std::span<const PoolBlock> blocks);
  // The bytes of these keys have landed: their blocks become loadable by every instance.
  void CompleteStore(std::span<const BlockHash> keys);

  // Binds the pool's own publisher; Unavailable naming the endpoint when a bind fails.
  absl::Status EnableKvEvents(KvEventPublisherOptions options);
  // "tcp://host:port" once enabled, else empty.
  std::string kv_events_endpoint() const;
  std::string kv_events_replay_endpoint() const;
  // Publishes what was recorded since the last call as one batch (`unix_seconds` its ts);
  // nothing when nothing was recorded. Any instance calls it after its step.
  void PublishKvEvents(double unix_seconds);

 private:
  const int block_size_;
  mutable absl::Mutex mu_;
  HostTier blocks_ ABSL_GUARDED_BY(mu_);
  int64_t stores_skipped_ ABSL_GUARDED_BY(mu_) = 0;
  // Set once before the instances start; its Publish is thread-safe.
  std::unique_ptr<KvEventPublisher> publisher_;
};

}  // namespace sim
