#include "sim/kv_pool.h"

#include <utility>

namespace sim {

KvPool::KvPool(int64_t num_blocks, int block_size)
    : block_size_(block_size), blocks_(num_blocks, block_size) {
  blocks_.set_event_medium(KvCacheEvent::Medium::kStorage);
}

KvPool::~KvPool() = default;

KvPoolStats KvPool::stats() const {
  absl::MutexLock lock(&mu_);
  return KvPoolStats{.num_blocks = blocks_.num_blocks(),
                     .used_blocks = blocks_.num_used(),
                     .evictions = blocks_.num_evictions(),
                     .stores_skipped = stores_skipped_};
}

int64_t KvPool::Lookup(std::span<const BlockHash> keys) const {
  absl::MutexLock lock(&mu_);
  return blocks_.Lookup(keys);
}

void KvPool::PrepareLoad(std::span<const BlockHash> keys) {
  absl::MutexLock lock(&mu_);
  blocks_.Touch(keys);
  blocks_.PrepareLoad(keys);
}

void KvPool::CompleteLoad(std::span<const BlockHash> keys) {
  absl::MutexLock lock(&mu_);
  blocks_.CompleteLoad(keys);
}

std::optional<std::vector<BlockHash>> KvPool::PrepareStore(std::span<const PoolBlock> blocks) {
  std::vector<BlockHash> keys;
  keys.reserve(blocks.size());
  for (const PoolBlock& b : blocks) keys.push_back(b.key);
  absl::MutexLock lock(&mu_);
  std::optional<std::vector<BlockHash>> fresh = blocks_.PrepareStore(keys);
  if (!fresh) {
    ++stores_skipped_;
    return fresh;
  }
  if (blocks_.kv_events_enabled()) {
    auto next = fresh->begin();
    for (const PoolBlock& b : blocks) {
      if (next == fresh->end()) break;
      if (b.key != *next) continue;
      ++next;
      const BlockHash key = b.key;
      blocks_.Describe(key, b.parent, std::span<const BlockHash>(&key, 1), b.token_ids,
                       block_size_);
    }
  }
  blocks_.Touch(keys);
  return fresh;
}

void KvPool::CompleteStore(std::span<const BlockHash> keys) {
  absl::MutexLock lock(&mu_);
  blocks_.CompleteStore(keys);
}

absl::Status KvPool::EnableKvEvents(KvEventPublisherOptions options) {
  if (publisher_) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<KvEventPublisher>> pub =
      KvEventPublisher::Create(std::move(options));
  if (!pub.ok()) return pub.status();
  publisher_ = *std::move(pub);
  absl::MutexLock lock(&mu_);
  blocks_.EnableKvEvents(true);
  return absl::OkStatus();
}

std::string KvPool::kv_events_endpoint() const {
  return publisher_ ? publisher_->endpoint() : std::string();
}

std::string KvPool::kv_events_replay_endpoint() const {
  return publisher_ ? publisher_->replay_endpoint() : std::string();
}

void KvPool::PublishKvEvents(double unix_seconds) {
  if (!publisher_) return;
  // Taken and queued under one lock, so batches go out in the order the pool recorded them
  // whichever instance's thread flushes (Publish only queues).
  absl::MutexLock lock(&mu_);
  std::vector<KvCacheEvent> events = blocks_.TakeKvEvents();
  if (!events.empty()) publisher_->Publish(unix_seconds, std::move(events));
}

}  // namespace sim
