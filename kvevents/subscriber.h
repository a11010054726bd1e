// KvEventSubscriber: follows one engine's KV cache events over ZeroMQ and
// applies them to the router's shadow of that engine (docs/kv-events.md).
//
// With backend router::kPoolBackend it follows the fleet-shared KV pool's
// publisher instead (every event is the pool's, whatever its medium).
//
//   KvEventSubscriber sub(router, /*backend=*/3,
//                         {.endpoint = "tcp://10.0.0.5:5557",
//                          .replay_endpoint = "tcp://10.0.0.5:5558"});
//   if (absl::Status st = sub.Start(); !st.ok()) ...   // a malformed endpoint
//   ... sub.stats().batches, .gaps, .publisher_restarts ...
//   sub.Stop();                                         // also the destructor
//
// One thread per subscriber owns its sockets: a SUB socket connected to the
// engine's PUB endpoint and, when a replay endpoint is configured, a DEALER
// socket that asks the engine's ROUTER for the batches a sequence gap lost.
// With a replay endpoint the thread first asks for everything the engine
// still buffers (vLLM keeps its last `buffer_steps` batches), so a kvroute
// that starts after the engine (a replica started late, or restarted) knows
// what it cached and removed before: the history that ages prefixes other
// replicas saw freed (router/eviction_history.h). Live batches that replay
// already applied are skipped.
// The thread receives, checks the sequence number, decodes, and applies the
// batch through Router::ApplyEngineKvEvents (a short lock); nothing runs on
// kvroute's request path. ZeroMQ reconnects on its own when the engine goes
// away and comes back; a sequence number that goes back means the engine
// restarted with an empty prefix cache, so the backend's shadow is cleared.
//
// Bounded: the SUB socket queues at most `queue_messages` batches
// (ZMQ_RCVHWM) and takes messages up to `max_message_bytes`; what ZeroMQ
// drops beyond the queue shows up as a sequence gap, counted, and replayed
// when the engine has a replay socket.
//
// Thread-safety: Start/Stop from one controlling thread; stats() and
// WaitFor() from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "kvevents/wire.h"
#include "router/router.h"

namespace kvroute::kvevents {

struct SubscriberOptions {
  std::string endpoint;         // the engine's PUB socket, tcp://host:port
  std::string replay_endpoint;  // the engine's replay (ROUTER) socket; empty: none
  std::string topic;            // subscription prefix; empty: every topic
  int queue_messages = 10000;   // ZMQ_RCVHWM: batches queued before ZeroMQ drops
  int64_t max_message_bytes = 64 << 20;
  // Tokens per block until the engine's first BlockStored says (vLLM's
  // default block size); BlockRemoved carries no block size.
  int64_t default_block_size = 16;
  // Longest wait for a replay's answer; the live stream waits meanwhile.
  absl::Duration replay_timeout = absl::Milliseconds(500);
  DecodeLimits limits;
};

struct SubscriberStats {
  uint64_t batches = 0;           // batches applied (live and replayed)
  uint64_t stored_events = 0;
  uint64_t removed_events = 0;
  uint64_t cleared_events = 0;    // AllBlocksCleared
  uint64_t stored_blocks = 0;
  uint64_t removed_blocks = 0;
  uint64_t ignored_events = 0;    // another medium (not GPU or CPU) or KV cache group
  uint64_t host_events = 0;       // of those applied, the host tier's (`medium: "CPU"`)
  uint64_t gaps = 0;              // sequence gaps seen
  uint64_t missed_batches = 0;    // batches inside those gaps
  uint64_t replayed_batches = 0;  // of those, recovered through the replay socket
  uint64_t start_replayed_batches = 0;  // the engine's buffer, replayed at start
  uint64_t duplicate_batches = 0;       // live batches the start's replay had applied
  uint64_t publisher_restarts = 0;  // sequence went back: shadow cleared
  uint64_t decode_errors = 0;
  int64_t evicted_chunks = 0;     // shadow chunks the removals evicted
  int64_t last_seq = -1;          // last sequence number applied
  int64_t block_size = 0;         // learned from BlockStored; 0 until then
  int64_t host_block_size = 0;    // the same, of the host tier's blocks
};

class KvEventSubscriber {
 public:
  KvEventSubscriber(router::Router& router, int backend, SubscriberOptions options);
  ~KvEventSubscriber();
  KvEventSubscriber(const KvEventSubscriber&) = delete;
  KvEventSubscriber& operator=(const KvEventSubscriber&) = delete;

  // Creates the sockets, connects them (ZeroMQ connects in the background,
  // so an engine that is not up yet is fine) and starts the thread.
  // InvalidArgument naming the endpoint when ZeroMQ rejects it.
  absl::Status Start();
  // Stops the thread and closes the sockets. Idempotent.
  void Stop();

  int backend() const { return backend_; }
  const SubscriberOptions& options() const { return options_; }
  SubscriberStats stats() const;
  // Blocks until `done(stats())` holds or `timeout` passes; returns whether
  // it holds. Wakes on every batch the thread applies.
  bool WaitFor(const std::function<bool(const SubscriberStats&)>& done,
               absl::Duration timeout) const;

 private:
  struct Sockets;
  void Run();
  // Applies one message's payload; false when it does not decode.
  bool Apply(std::string_view payload);
  // Asks the replay socket for [from, until) and applies what comes back,
  // counting each batch in `counted`; returns the last sequence number
  // applied, -1 when none was.
  int64_t Replay(int64_t from, int64_t until, uint64_t SubscriberStats::*counted);
  void Notify();

  router::Router& router_;
  const int backend_;
  const SubscriberOptions options_;
  std::unique_ptr<Sockets> sockets_;
  std::thread thread_;
  bool started_ = false;

  // std::mutex/condition_variable rather than absl's: WaitFor needs a
  // deadline wait that ThreadSanitizer sees (sanitize/tsan_absl_mutex.cc
  // covers only absl::Mutex's Lock/Unlock and CondVar::Wait).
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  SubscriberStats stats_;  // guarded by mu_
};

}  // namespace kvroute::kvevents
