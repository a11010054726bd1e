#include "kvevents/subscriber.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <iterator>
#include <limits>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "absl/strings/str_cat.h"

namespace kvroute::kvevents {
namespace {

std::shared_ptr<spdlog::logger> Log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::get("kvevents");
    return l ? l : spdlog::default_logger()->clone("kvevents");
  }();
  return logger;
}

// vLLM's sequence numbers are 8 bytes, big-endian; the replay socket ends
// its answer with -1 (all ones).
constexpr int64_t kEndOfReplay = -1;

int64_t ReadSeq(const zmq::message_t& frame) {
  const auto* p = static_cast<const uint8_t*>(frame.data());
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return static_cast<int64_t>(v);
}

zmq::message_t SeqFrame(int64_t seq) {
  zmq::message_t frame(8);
  auto* p = static_cast<uint8_t*>(frame.data());
  auto v = static_cast<uint64_t>(seq);
  for (int i = 7; i >= 0; --i, v >>= 8) p[i] = static_cast<uint8_t>(v & 0xff);
  return frame;
}

std::string_view View(const zmq::message_t& frame) {
  return std::string_view(static_cast<const char*>(frame.data()), frame.size());
}

}  // namespace

struct KvEventSubscriber::Sockets {
  zmq::context_t context{1};
  zmq::socket_t sub;
  zmq::socket_t replay;  // unset without a replay endpoint

  // A fresh DEALER: a late answer to a timed-out replay must not be taken
  // for the next replay's.
  void OpenReplay(const SubscriberOptions& o) {
    if (replay) replay.close();
    replay = zmq::socket_t(context, zmq::socket_type::dealer);
    replay.set(zmq::sockopt::linger, 0);
    replay.set(zmq::sockopt::maxmsgsize, o.max_message_bytes);
    replay.connect(o.replay_endpoint);
  }
};

KvEventSubscriber::KvEventSubscriber(router::Router& router, int backend,
                                     SubscriberOptions options)
    : router_(router), backend_(backend), options_(std::move(options)) {}

KvEventSubscriber::~KvEventSubscriber() { Stop(); }

absl::Status KvEventSubscriber::Start() {
  if (started_) return absl::OkStatus();
  auto sockets = std::make_unique<Sockets>();
  const std::string* current = &options_.endpoint;
  try {
    sockets->sub = zmq::socket_t(sockets->context, zmq::socket_type::sub);
    sockets->sub.set(zmq::sockopt::rcvhwm, options_.queue_messages);
    sockets->sub.set(zmq::sockopt::maxmsgsize, options_.max_message_bytes);
    sockets->sub.set(zmq::sockopt::linger, 0);
    sockets->sub.set(zmq::sockopt::subscribe, options_.topic);
    sockets->sub.connect(options_.endpoint);
    if (!options_.replay_endpoint.empty()) {
      current = &options_.replay_endpoint;
      sockets->OpenReplay(options_);
    }
  } catch (const zmq::error_t& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv events endpoint '", *current, "': ", e.what()));
  }
  sockets_ = std::move(sockets);
  started_ = true;
  // The logger (and spdlog's registry, on first use) is made here, before
  // the thread that logs through it: made there, it would race with this
  // thread's own first use of spdlog.
  Log();
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void KvEventSubscriber::Stop() {
  if (!started_) return;
  started_ = false;
  // Makes the thread's blocking receive fail with ETERM; it closes its
  // sockets and returns, and the context can then be destroyed.
  sockets_->context.shutdown();
  thread_.join();
  sockets_.reset();
}

SubscriberStats KvEventSubscriber::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

bool KvEventSubscriber::WaitFor(const std::function<bool(const SubscriberStats&)>& done,
                                absl::Duration timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                           [&] { return done(stats_); });
}

void KvEventSubscriber::Notify() { changed_.notify_all(); }

bool KvEventSubscriber::Apply(std::string_view payload) {
  absl::StatusOr<EventBatch> batch = DecodeEventBatch(payload, options_.limits);
  if (!batch.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.decode_errors;
    }
    Log()->warn("backend {}: {}", backend_, std::string(batch.status().message()));
    return false;
  }
  // Each tier's block size, learned from its BlockStored (vLLM's offloaded
  // blocks may span several GPU blocks); a removal counts in its tier's.
  int64_t block_size, host_block_size;
  {
    std::lock_guard<std::mutex> lock(mu_);
    block_size = stats_.block_size > 0 ? stats_.block_size : options_.default_block_size;
    host_block_size = stats_.host_block_size > 0 ? stats_.host_block_size : block_size;
  }
  SubscriberStats delta;
  const absl::Time at =
      batch->ts > 0 ? absl::UnixEpoch() + absl::Seconds(batch->ts) : absl::InfinitePast();
  std::vector<router::EngineKvEvent> effects;
  effects.reserve(batch->events.size());
  for (const KvCacheEvent& e : batch->events) {
    // The shadow models the GPU prefix cache of the engine's first KV cache
    // group and its host-memory tier (`medium: "CPU"`, vLLM's CPU
    // offloading); other media and a hybrid model's other groups (which
    // store and evict the same token ranges again) are not counted. The
    // fleet-shared pool's feed (router::kPoolBackend) is the pool's whatever
    // its medium says (kvroute-sim: "STORAGE"; Mooncake's master: "cpu").
    const bool pool_feed = backend_ == router::kPoolBackend;
    const bool host = !pool_feed && e.medium == "CPU";
    if ((!pool_feed && !e.medium.empty() && e.medium != "GPU" && !host) ||
        (e.group_idx && *e.group_idx != 0)) {
      ++delta.ignored_events;
      continue;
    }
    if (host) ++delta.host_events;
    const auto blocks = static_cast<int64_t>(e.block_hashes.size());
    int64_t& tier_block_size = host ? host_block_size : block_size;
    switch (e.kind) {
      case EventKind::kBlockStored:
        // Mooncake's master stamps no block size: the last one known holds.
        if (e.block_size > 0) tier_block_size = e.block_size;
        if (host) delta.host_block_size = tier_block_size;
        ++delta.stored_events;
        delta.stored_blocks += blocks;
        effects.push_back(
            {router::EngineKvEvent::Kind::kStored, blocks * tier_block_size, host, at});
        if (!host) delta.block_size = tier_block_size;
        break;
      case EventKind::kBlockRemoved:
        ++delta.removed_events;
        delta.removed_blocks += blocks;
        effects.push_back(
            {router::EngineKvEvent::Kind::kRemoved, blocks * tier_block_size, host, at});
        break;
      case EventKind::kAllBlocksCleared:
        ++delta.cleared_events;
        effects.push_back({router::EngineKvEvent::Kind::kCleared, 0, false, at});
        break;
    }
  }
  const int64_t evicted = router_.ApplyEngineKvEvents(backend_, effects);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.batches;
  stats_.stored_events += delta.stored_events;
  stats_.removed_events += delta.removed_events;
  stats_.cleared_events += delta.cleared_events;
  stats_.stored_blocks += delta.stored_blocks;
  stats_.removed_blocks += delta.removed_blocks;
  stats_.ignored_events += delta.ignored_events;
  stats_.host_events += delta.host_events;
  stats_.evicted_chunks += evicted;
  if (delta.block_size > 0) stats_.block_size = delta.block_size;
  if (delta.host_block_size > 0) stats_.host_block_size = delta.host_block_size;
  return true;
}

int64_t KvEventSubscriber::Replay(int64_t from, int64_t until, uint64_t SubscriberStats::*counted) {
  if (!sockets_->replay) return -1;
  int64_t applied = -1;
  zmq::socket_t& replay = sockets_->replay;
  zmq::multipart_t request;
  request.add(zmq::message_t());  // the empty delimiter a REQ socket would send
  request.add(SeqFrame(from));
  request.send(replay);
  const auto deadline =
      std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(options_.replay_timeout);
  bool ended = false;
  std::vector<zmq::message_t> frames;
  while (!ended) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    zmq::pollitem_t item{replay.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, left);
    if ((item.revents & ZMQ_POLLIN) == 0) continue;
    frames.clear();
    if (!zmq::recv_multipart(replay, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
      continue;
    }
    // [empty delimiter, 8-byte sequence number, payload]
    if (frames.size() != 3 || frames[1].size() != 8) continue;
    const int64_t seq = ReadSeq(frames[1]);
    if (seq == kEndOfReplay) {
      ended = true;
      break;
    }
    // Older batches were applied already; from `until` on the live stream
    // delivers them.
    if (seq < from || seq >= until) continue;
    if (Apply(View(frames[2]))) {
      std::lock_guard<std::mutex> lock(mu_);
      ++(stats_.*counted);
      stats_.last_seq = seq;
      applied = seq;
    }
    from = seq + 1;
  }
  if (!ended) {
    Log()->warn("backend {}: replay from {} got no complete answer within {}", backend_, from,
                absl::FormatDuration(options_.replay_timeout));
    sockets_->OpenReplay(options_);
  }
  return applied;
}

void KvEventSubscriber::Run() {
  zmq::socket_t& sub = sockets_->sub;
  std::vector<zmq::message_t> frames;
  int64_t last_seq = -1;
  // The last batch the start's replay applied, until a live batch passes it.
  int64_t replayed_to = -1;
  try {
    // Everything the engine buffers, oldest first: the SUB socket, connected
    // already, queues the live stream meanwhile.
    replayed_to = last_seq =
        Replay(0, std::numeric_limits<int64_t>::max(), &SubscriberStats::start_replayed_batches);
    if (replayed_to >= 0) {
      Log()->info("backend {}: replayed the engine's buffered event batches up to {}", backend_,
                  replayed_to);
    }
  } catch (const zmq::error_t&) {
    // Stop() (ETERM) or a signal cut the replay short: the loop below ends
    // on the former; after the latter a gap's replay asks again.
  }
  Notify();
  for (bool running = true; running;) try {
    for (;;) {
      frames.clear();
      if (!zmq::recv_multipart(sub, std::back_inserter(frames))) continue;
      // [topic, 8-byte big-endian sequence number, msgpack payload]
      if (frames.size() != 3 || frames[1].size() != 8) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          ++stats_.decode_errors;
        }
        Notify();
        continue;
      }
      const int64_t seq = ReadSeq(frames[1]);
      if (replayed_to >= 0 && seq <= replayed_to) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          ++stats_.duplicate_batches;
        }
        Notify();
        continue;
      }
      replayed_to = -1;
      if (last_seq >= 0 && seq <= last_seq) {
        // Numbering starts again at 0 when the engine restarts, and a
        // restarted engine's prefix cache is empty.
        const router::EngineKvEvent clear{router::EngineKvEvent::Kind::kCleared, 0};
        router_.ApplyEngineKvEvents(backend_, {&clear, 1});
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.publisher_restarts;
        Log()->info("backend {}: event sequence went from {} to {}: engine restarted", backend_,
                    last_seq, seq);
      } else if (last_seq >= 0 && seq > last_seq + 1) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          ++stats_.gaps;
          stats_.missed_batches += static_cast<uint64_t>(seq - last_seq - 1);
        }
        Log()->info("backend {}: missed event batches {}..{}", backend_, last_seq + 1, seq - 1);
        Replay(last_seq + 1, seq, &SubscriberStats::replayed_batches);
      }
      Apply(View(frames[2]));
      last_seq = seq;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.last_seq = seq;
      }
      Notify();
    }
  } catch (const zmq::error_t& e) {
    // ETERM is Stop(); a signal (EINTR) interrupts one wait; anything else
    // ends the subscription, logged.
    if (e.num() == EINTR) continue;
    if (e.num() != ETERM) {
      Log()->error("backend {}: event subscriber stopped: {}", backend_, e.what());
    }
    running = false;
  }
  sockets_->sub.close();
  if (sockets_->replay) sockets_->replay.close();
  Notify();
}

}  // namespace kvroute::kvevents
