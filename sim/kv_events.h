// KV cache events of one simulated instance, published in vLLM's exact wire
// format (vllm/distributed/kv_events.py; docs/kv-events.md has the shapes and
// their sources).
//
//   KvEventPublisherOptions o{.host = "127.0.0.1", .port = 0, .replay_port = 0};
//   absl::StatusOr<std::unique_ptr<KvEventPublisher>> pub = KvEventPublisher::Create(o);
//   (*pub)->endpoint();                       // "tcp://127.0.0.1:<bound port>"
//   (*pub)->Publish(unix_seconds, std::move(events));   // one batch per engine step
//
// The block manager records events the way vLLM's BlockPool queues them
// (BlockStored when full blocks enter the prefix cache, BlockRemoved when a
// cached block is evicted for reuse, AllBlocksCleared on a prefix-cache
// reset); the instance drains them after every step and publishes them as
// one batch, as vLLM's scheduler does.
//
// The publisher is vLLM's ZmqEventPublisher: a PUB socket sends each batch as
// three frames (topic, 8-byte big-endian sequence number from 0, msgpack
// payload); an optional ROUTER replay socket answers [empty, 8-byte start
// sequence number] with every buffered batch from there ([empty, seq,
// payload] each) and an end marker [empty, -1 as 8 bytes, empty]. Its own
// thread owns the sockets; Publish() only queues.
//
// Thread-safety: Publish() and the counters from any thread.
#pragma once

#include <absl/status/statusor.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace sim {

// One event as vLLM's block pool (medium GPU), its CPU offloading connector (medium CPU,
// sim/host_tier.h) or the fleet-shared KV pool (medium STORAGE, sim/kv_pool.h) emits it.
struct KvCacheEvent {
  enum class Kind { kBlockStored, kBlockRemoved, kAllBlocksCleared };
  enum class Medium { kGpu, kCpu, kStorage };
  Kind kind = Kind::kAllBlocksCleared;
  Medium medium = Medium::kGpu;
  std::vector<uint64_t> block_hashes;         // stored, removed
  std::optional<uint64_t> parent_block_hash;  // stored: the block before the first, if any
  std::vector<int32_t> token_ids;             // stored: the blocks' tokens
  int block_size = 0;                         // stored
};

// The msgpack payload of one batch as current vLLM's msgspec encoder writes it:
// [ts, [event, ...], data_parallel_rank], each event a map tagged by "type" (see
// docs/kv-events.md for the keys of each event).
std::string EncodeKvEventBatch(double ts, std::span<const KvCacheEvent> events,
                               int data_parallel_rank);

struct KvEventPublisherOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;                     // 0: an ephemeral port
  std::optional<uint16_t> replay_port;   // none: no replay socket; 0: an ephemeral port
  std::string topic;                     // vLLM's default: ""
  size_t buffer_steps = 10000;           // batches kept for replay (vLLM's default)
  int hwm = 100000;                      // PUB high-water mark (vLLM's default)
  size_t max_queue_size = 100000;        // batches waiting for the thread
  int data_parallel_rank = 0;
};

class KvEventPublisher {
 public:
  // Binds the sockets and starts the thread; Unavailable naming the endpoint when a bind
  // fails.
  static absl::StatusOr<std::unique_ptr<KvEventPublisher>> Create(KvEventPublisherOptions o);
  ~KvEventPublisher();
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // "tcp://host:port" as bound; replay_endpoint() is empty without a replay socket.
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }

  // Queues one batch (`ts`: Unix seconds). Never blocks: a batch beyond max_queue_size is
  // dropped and counted (vLLM would block its scheduler instead).
  void Publish(double ts, std::vector<KvCacheEvent> events);

  uint64_t accepted() const;   // batches Publish() queued; the next one gets this number
  uint64_t published() const;  // batches sent
  uint64_t dropped() const;    // batches dropped at the queue

 private:
  struct Sockets;
  struct Batch {
    double ts;
    std::vector<KvCacheEvent> events;
  };
  explicit KvEventPublisher(KvEventPublisherOptions o);
  void Run();
  // Sends and buffers every queued batch (thread only).
  void SendQueued();
  void ServiceReplay();

  KvEventPublisherOptions options_;
  std::unique_ptr<Sockets> sockets_;
  std::string endpoint_;
  std::string replay_endpoint_;
  std::thread thread_;
  // Thread-only: the next sequence number and the replay buffer.
  int64_t next_seq_ = 0;
  std::deque<std::pair<int64_t, std::string>> buffer_;

  // std::mutex/condition_variable: the thread waits with a timeout (to serve the replay
  // socket), which ThreadSanitizer sees only for the standard primitives.
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Batch> queue_;  // guarded by mu_
  bool stopping_ = false;    // guarded by mu_
  uint64_t accepted_ = 0;    // guarded by mu_
  uint64_t published_ = 0;   // guarded by mu_
  uint64_t dropped_ = 0;     // guarded by mu_
};

}  // namespace sim
