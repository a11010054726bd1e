// KvEventSubscriber against a stand-in for vLLM's ZmqEventPublisher written
// frame by frame here (PUB: topic, 8-byte big-endian sequence number,
// payload; ROUTER replay: [empty, seq, payload]... then [empty, -1, empty]),
// driving a real Router. Every wait is on a condition (the subscriber's
// WaitFor or a socket poll), never a sleep.
#include "kvevents/subscriber.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "router/prefix_hash.h"
#include "sim/kv_events.h"

namespace kvroute::kvevents {
namespace {

using router::EngineKvEvent;
using sim::KvCacheEvent;

constexpr absl::Duration kWait = absl::Seconds(20);  // a failing test's bound, not a pace
constexpr size_t kChunk = 256;  // shadow chunk bytes; 64 tokens at 4 bytes per token

zmq::message_t SeqFrame(int64_t seq) {
  zmq::message_t frame(8);
  auto* p = static_cast<uint8_t*>(frame.data());
  auto v = static_cast<uint64_t>(seq);
  for (int i = 7; i >= 0; --i, v >>= 8) p[i] = static_cast<uint8_t>(v & 0xff);
  return frame;
}

// The engine side of vLLM's protocol, one frame at a time.
class FakeEngine {
 public:
  explicit FakeEngine(bool with_replay, std::string port = "*", int sndhwm = 1000) {
    pub_.set(zmq::sockopt::sndhwm, sndhwm);
    pub_.set(zmq::sockopt::linger, 0);
    pub_.bind("tcp://127.0.0.1:" + port);
    endpoint_ = pub_.get(zmq::sockopt::last_endpoint);
    if (with_replay) {
      replay_ = zmq::socket_t(context_, zmq::socket_type::router);
      replay_.set(zmq::sockopt::linger, 0);
      replay_.bind("tcp://127.0.0.1:*");
      replay_endpoint_ = replay_.get(zmq::sockopt::last_endpoint);
    }
  }
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }
  std::string port() const { return endpoint_.substr(endpoint_.rfind(':') + 1); }

  void Send(int64_t seq, const std::string& payload, const std::string& topic = "") {
    zmq::multipart_t m;
    m.addstr(topic);
    m.add(SeqFrame(seq));
    m.addstr(payload);
    m.send(pub_);
  }

  // Waits for one replay request and answers it from `buffer` as vLLM does
  // (every buffered batch from the requested number on, then the end
  // marker). Returns the requested start, -2 when none came.
  int64_t ServeReplay(const std::map<int64_t, std::string>& buffer) {
    zmq::pollitem_t item{replay_.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, absl::ToChronoMilliseconds(kWait));
    std::vector<zmq::message_t> req;
    if (!zmq::recv_multipart(replay_, std::back_inserter(req), zmq::recv_flags::dontwait)) {
      return -2;
    }
    EXPECT_EQ(req.size(), 3u);  // identity, empty delimiter, start
    EXPECT_EQ(req[1].size(), 0u);
    EXPECT_EQ(req[2].size(), 8u);
    int64_t start = 0;
    for (size_t i = 0; i < 8; ++i)
      start = (start << 8) | static_cast<uint8_t>(req[2].data<char>()[i]);
    for (const auto& [seq, payload] : buffer) {
      if (seq < start) continue;
      zmq::multipart_t reply;
      reply.addstr(req[0].to_string());
      reply.add(zmq::message_t());
      reply.add(SeqFrame(seq));
      reply.addstr(payload);
      reply.send(replay_);
    }
    zmq::multipart_t end;
    end.addstr(req[0].to_string());
    end.add(zmq::message_t());
    end.add(SeqFrame(-1));
    end.add(zmq::message_t());
    end.send(replay_);
    return start;
  }

 private:
  zmq::context_t context_{1};
  zmq::socket_t pub_{context_, zmq::socket_type::pub};
  zmq::socket_t replay_;
  std::string endpoint_;
  std::string replay_endpoint_;
};

KvCacheEvent Stored(int blocks, int block_size = 16) {
  KvCacheEvent e;
  e.kind = KvCacheEvent::Kind::kBlockStored;
  for (int i = 0; i < blocks; ++i) e.block_hashes.push_back(1000 + i);
  e.token_ids.assign(static_cast<size_t>(blocks * block_size), 7);
  e.block_size = block_size;
  return e;
}
KvCacheEvent Removed(int blocks) {
  KvCacheEvent e;
  e.kind = KvCacheEvent::Kind::kBlockRemoved;
  for (int i = 0; i < blocks; ++i) e.block_hashes.push_back(2000 + i);
  return e;
}
KvCacheEvent Cleared() { return KvCacheEvent{}; }

std::string Batch(std::vector<KvCacheEvent> events) {
  return sim::EncodeKvEventBatch(1.0, events, 0);
}

std::unique_ptr<router::Router> MakeRouter(int backends = 1) {
  router::Options o;
  o.chunk_bytes = kChunk;
  std::vector<router::BackendSpec> specs;
  for (int i = 0; i < backends; ++i) {
    specs.push_back({.name = "gpu" + std::to_string(i),
                     .host = "127.0.0.1",
                     .port = static_cast<uint16_t>(8100 + i),
                     .capacity_tokens = 100000});
  }
  auto r = router::Router::Create(o, std::move(specs));
  EXPECT_TRUE(r.ok()) << r.status();
  return *std::move(r);
}

// Routes (and completes) a prompt of `chunks` distinct chunks on the
// router's single backend.
void Serve(router::Router& r, uint64_t seed, int chunks) {
  router::RequestFeatures f;
  f.model = "m";
  f.prompt_bytes.assign(static_cast<size_t>(chunks) * kChunk, ' ');
  for (size_t i = 0; i < f.prompt_bytes.size(); ++i) {
    f.prompt_bytes[i] = static_cast<char>('a' + (seed * 31 + i * 7 + i / kChunk) % 26);
  }
  f.chunk_hashes = router::HashPromptChunks(f.prompt_bytes, kChunk);
  absl::StatusOr<router::RouteTicket> t = r.Route(f, absl::UnixEpoch());
  ASSERT_TRUE(t.ok()) << t.status();
  router::Outcome done;
  done.ok = true;
  r.OnComplete(*t, done, absl::UnixEpoch());
}

const router::BackendReport& Backend(const std::vector<router::BackendReport>& report, int b) {
  return report[static_cast<size_t>(b)];
}

// PUB/SUB drops what is sent before the subscription reaches the engine:
// sends empty batches from `seq` on until one arrives. Returns the next
// sequence number to send.
int64_t SyncUp(FakeEngine& engine, const KvEventSubscriber& sub, int64_t seq) {
  for (int attempt = 0; attempt < 400; ++attempt, ++seq) {
    engine.Send(seq, Batch({}));
    if (sub.WaitFor([&](const SubscriberStats& s) { return s.last_seq == seq; },
                    absl::Milliseconds(50))) {
      return seq + 1;
    }
  }
  ADD_FAILURE() << "the subscriber never received a batch";
  return seq;
}

SubscriberOptions Options(const FakeEngine& engine) {
  SubscriberOptions o;
  o.endpoint = engine.endpoint();
  o.replay_endpoint = engine.replay_endpoint();
  o.replay_timeout = kWait;
  return o;
}

TEST(KvEventSubscriber, StoredRemovedAndClearedDriveTheShadow) {
  auto router = MakeRouter();
  for (uint64_t s = 0; s < 4; ++s) Serve(*router, s, 10);  // 40 chunks = 2,560 tokens
  ASSERT_EQ(Backend(router->Report(), 0).shadow_chunks, 40);
  EXPECT_EQ(Backend(router->Report(), 0).engine_cached_tokens, -1);

  FakeEngine engine(/*with_replay=*/false);
  KvEventSubscriber sub(*router, 0, Options(engine));
  ASSERT_TRUE(sub.Start().ok());
  int64_t seq = SyncUp(engine, sub, 0);

  // 160 blocks of 16 tokens stored, then 12 removed: 192 tokens = 3 chunks
  // from the shadow's least recently used end.
  engine.Send(seq, Batch({Stored(100), Stored(60)}));
  engine.Send(seq + 1, Batch({Removed(8), Removed(4)}));
  ASSERT_TRUE(sub.WaitFor([&](const SubscriberStats& s) { return s.last_seq == seq + 1; }, kWait));
  SubscriberStats st = sub.stats();
  EXPECT_EQ(st.stored_events, 2u);
  EXPECT_EQ(st.stored_blocks, 160u);
  EXPECT_EQ(st.removed_events, 2u);
  EXPECT_EQ(st.removed_blocks, 12u);
  EXPECT_EQ(st.block_size, 16);
  EXPECT_EQ(st.evicted_chunks, 3);
  EXPECT_EQ(st.gaps, 0u);
  auto report = router->Report();
  EXPECT_EQ(Backend(report, 0).shadow_chunks, 37);
  EXPECT_EQ(Backend(report, 0).engine_cached_tokens, (160 - 12) * 16);

  engine.Send(seq + 2, Batch({Cleared()}));
  ASSERT_TRUE(sub.WaitFor([&](const SubscriberStats& s) { return s.last_seq == seq + 2; }, kWait));
  report = router->Report();
  EXPECT_EQ(Backend(report, 0).shadow_chunks, 0);
  EXPECT_EQ(Backend(report, 0).engine_cached_tokens, 0);
  EXPECT_EQ(sub.stats().cleared_events, 1u);
}

TEST(KvEventSubscriber, TheHostTierIsAppliedApartOtherMediaAndGroupsAreNot) {
  auto router = MakeRouter();
  Serve(*router, 1, 10);
  FakeEngine engine(false);
  KvEventSubscriber sub(*router, 0, Options(engine));
  ASSERT_TRUE(sub.Start().ok());
  const int64_t seq = SyncUp(engine, sub, 0);
  // A CPU-offload tier's removal, another medium's and a second KV cache
  // group's, encoded as vLLM writes them.
  auto removal = [](std::string_view medium, int group) {
    std::string s;
    s += "\x92\xcb";
    s += std::string(8, '\0');  // ts 0.0
    s += "\x91\x84\xa4type\xac"
         "BlockRemoved\xac"
         "block_hashes\x92\x01\x02\xa6medium";
    s += static_cast<char>(0xa0 | medium.size());
    s += medium;
    s += "\xa9group_idx";
    s += static_cast<char>(group);
    return s;
  };
  engine.Send(seq, removal("CPU", 0));
  engine.Send(seq + 1, removal("GPU", 1));
  engine.Send(seq + 2, removal("DISK", 0));
  ASSERT_TRUE(sub.WaitFor([&](const SubscriberStats& s) { return s.last_seq == seq + 2; }, kWait));
  EXPECT_EQ(sub.stats().ignored_events, 2u);
  EXPECT_EQ(sub.stats().host_events, 1u);
  EXPECT_EQ(sub.stats().decode_errors, 0u);
  const auto report = router->Report();
  EXPECT_EQ(Backend(report, 0).shadow_chunks, 10)
      << "the host tier's removal leaves the GPU shadow";
  EXPECT_EQ(Backend(report, 0).engine_host_cached_tokens, 0) << "the host tier is known now";
}

TEST(KvEventSubscriber, ThePoolsFeedAppliesEveryMediumToThePool) {
  auto router = MakeRouter();
  Serve(*router, 1, 10);
  FakeEngine engine(false);
  KvEventSubscriber sub(*router, router::kPoolBackend, Options(engine));
  ASSERT_TRUE(sub.Start().ok());
  const int64_t seq = SyncUp(engine, sub, 0);
  // kvroute-sim's pool says STORAGE, Mooncake's master "cpu": both are the pool's.
  auto removal = [](std::string_view medium) {
    std::string s;
    s += "\x92\xcb";
    s += std::string(8, '\0');  // ts 0.0
    s += "\x91\x84\xa4type\xac"
         "BlockRemoved\xac"
         "block_hashes\x92\x01\x02\xa6medium";
    s += static_cast<char>(0xa0 | medium.size());
    s += medium;
    s += "\xa9group_idx";
    s += '\0';
    return s;
  };
  engine.Send(seq, removal("STORAGE"));
  engine.Send(seq + 1, removal("cpu"));
  ASSERT_TRUE(sub.WaitFor([&](const SubscriberStats& s) { return s.last_seq == seq + 1; }, kWait));
  EXPECT_EQ(sub.stats().ignored_events, 0u);
  EXPECT_EQ(sub.stats().host_events, 0u);
  EXPECT_EQ(sub.stats().removed_blocks, 4u);
  EXPECT_EQ(router->Stats().pool_cached_tokens, 0) << "the pool is known now";
  EXPECT_EQ(Backend(router->Report(), 0).shadow_chunks, 10) << "no backend's shadow moves";
  EXPECT_EQ(Backend(router->Report(), 0).engine_host_cached_tokens, -1);
}

TEST(KvEventSubscriber, GapIsReplayedInOrderFromTheReplaySocket) {
  auto router = MakeRouter();
  for (uint64_t s = 0; s < 2; ++s) Serve(*router, s, 10);
  FakeEngine engine(/*with_replay=*/true);
  KvEventSubscriber sub(*router, 0, Options(engine));
  ASSERT_TRUE(sub.Start().ok());
  EXPECT_EQ(engine.ServeReplay({}), 0) << "the start's replay, of an empty buffer";
  const int64_t seq = SyncUp(engine, sub, 0);

  std::map<int64_t, std::string> buffer = {
      {seq - 1, Batch({Removed(100)})},  // applied already: must not be replayed
      {seq, Batch({Stored(10)})},       {seq + 1, Batch({Removed(4)})},  // 64 tokens: one chunk
      {seq + 2, Batch({Removed(8)})},                                    // two chunks
      {seq + 3, Batch({Stored(1)})},  // arrives live too: not applied twice
  };
  engine.Send(seq + 3, buffer[seq + 3]);
  EXPECT_EQ(engine.ServeReplay(buffer), seq);
  ASSERT_TRUE(sub.WaitFor([&](const SubscriberStats& s) { return s.last_seq == seq + 3; }, kWait));
  const SubscriberStats st = sub.stats();
  EXPECT_EQ(st.gaps, 1u);
  EXPECT_EQ(st.missed_batches, 3u);
  EXPECT_EQ(st.replayed_batches, 3u);
  EXPECT_EQ(st.start_replayed_batches, 0u);
  EXPECT_EQ(st.stored_blocks, 11u);
  EXPECT_EQ(st.removed_blocks, 12u);
  EXPECT_EQ(st.evicted_chunks, 3);
  const auto report = router->Report();
  EXPECT_EQ(Backend(report, 0).shadow_chunks, 17);
  // 10 blocks stored, 12 removed (the count stops at 0), 1 stored.
  EXPECT_EQ(Backend(report, 0).engine_cached_tokens, 16);
}

// A subscription that starts after its engine (a replica started late)
// first applies what the engine still buffers, from sequence number 0; the
// live stream's batches that replay covered are not applied again, nor
// taken for an engine restart.
TEST(KvEventSubscriber, AtStartTheEnginesBufferIsReplayedFirst) {
  auto router = MakeRouter();
  Serve(*router, 0, 10);
  FakeEngine engine(/*with_replay=*/true);
  KvEventSubscriber sub(*router, 0, Options(engine));
  ASSERT_TRUE(sub.Start().ok());
  const std::map<int64_t, std::string> buffer = {
      {0, Batch({Stored(10)})}, {1, Batch({Removed(4)})}, {2, Batch({Stored(1)})}};
  EXPECT_EQ(engine.ServeReplay(buffer), 0);
  ASSERT_TRUE(sub.WaitFor([](const SubscriberStats& s) { return s.last_seq == 2; }, kWait));
  SubscriberStats st = sub.stats();
  EXPECT_EQ(st.start_replayed_batches, 3u);
  EXPECT_EQ(st.replayed_batches, 0u);
  EXPECT_EQ(st.evicted_chunks, 1);

  // Batch 2 again, live (sent until the subscription is up), then batch 3.
  bool seen = false;
  for (int attempt = 0; attempt < 400 && !seen; ++attempt) {
    engine.Send(2, Batch({Stored(1)}));
    seen = sub.WaitFor([](const SubscriberStats& s) { return s.duplicate_batches > 0; },
                       absl::Milliseconds(50));
  }
  ASSERT_TRUE(seen);
  engine.Send(3, Batch({Stored(2)}));
  ASSERT_TRUE(sub.WaitFor([](const SubscriberStats& s) { return s.last_seq == 3; }, kWait));
  st = sub.stats();
  EXPECT_EQ(st.stored_blocks, 13u);
  EXPECT_EQ(st.gaps, 0u);
  EXPECT_EQ(st.publisher_restarts, 0u);
  const auto report = router->Report();
  EXPECT_EQ(Backend(report, 0).shadow_chunks, 9);
  EXPECT_EQ(Backend(report, 0).engine_cached_tokens, (10 - 4 + 1 + 2) * 16);
}

TEST(KvEventSubscriber, GapWithoutReplaySocketIsCounted) {
  auto router = MakeRouter();
  FakeEngine engine(/*with_replay=*/false);
  KvEventSubscriber sub(*router, 0, Options(engine));
  ASSERT_TRUE(sub.Start().ok());
  const int64_t seq = SyncUp(engine, sub, 0);
  engine.Send(seq + 5, Batch({Stored(2)}));
  ASSERT_TRUE(sub.WaitFor([&](const SubscriberStats& s) { return s.last_seq == seq + 5; }, kWait));
  EXPECT_EQ(sub.stats().gaps, 1u);
  EXPECT_EQ(sub.stats().missed_batches, 5u);
  EXPECT_EQ(sub.stats().replayed_batches, 0u);
}

TEST(KvEventSubscriber, ReconnectsWhenTheEngineRestartsAndClearsItsShadow) {
  auto router = MakeRouter();
  Serve(*router, 1, 10);
  auto engine = std::make_unique<FakeEngine>(false);
  const std::string port = engine->port();
  KvEventSubscriber sub(*router, 0, Options(*engine));
  ASSERT_TRUE(sub.Start().ok());
  SyncUp(*engine, sub, 0);
  engine->Send(1000, Batch({Stored(4)}));  // a long-running engine's numbering
  ASSERT_TRUE(sub.WaitFor([](const SubscriberStats& s) { return s.last_seq == 1000; }, kWait));
  ASSERT_EQ(Backend(router->Report(), 0).shadow_chunks, 10);

  // The engine goes away and comes back on the same port, numbering from 0
  // with an empty cache; ZeroMQ reconnects the subscriber by itself.
  engine.reset();
  engine = std::make_unique<FakeEngine>(false, port);
  SyncUp(*engine, sub, 0);
  const SubscriberStats st = sub.stats();
  EXPECT_EQ(st.publisher_restarts, 1u);
  EXPECT_LT(st.last_seq, 1000);
  const auto report = router->Report();
  EXPECT_EQ(Backend(report, 0).shadow_chunks, 0);
  EXPECT_EQ(Backend(report, 0).engine_cached_tokens, 0);
}

// A Router whose ApplyEngineKvEvents can be held, to stall the subscriber's
// thread while the engine keeps publishing.
class HoldingRouter : public router::Router {
 public:
  explicit HoldingRouter(std::unique_ptr<router::Router> inner) : inner_(std::move(inner)) {}
  void Hold() {
    std::lock_guard<std::mutex> l(mu_);
    hold_ = true;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> l(mu_);
      hold_ = false;
    }
    cv_.notify_all();
  }
  bool WaitUntilHeld(absl::Duration timeout) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, absl::ToChronoNanoseconds(timeout), [&] { return waiting_; });
  }

  int64_t ApplyEngineKvEvents(int backend, absl::Span<const EngineKvEvent> events) override {
    {
      std::unique_lock<std::mutex> l(mu_);
      waiting_ = hold_;
      cv_.notify_all();
      cv_.wait(l, [&] { return !hold_; });
      waiting_ = false;
    }
    return inner_->ApplyEngineKvEvents(backend, events);
  }
  std::shared_ptr<const std::vector<router::BackendSpec>> Backends() const override {
    return inner_->Backends();
  }
  absl::Status UpdateBackends(const std::vector<router::BackendSpec>& b) override {
    return inner_->UpdateBackends(b);
  }
  const router::Options& options() const override { return inner_->options(); }
  absl::StatusOr<router::RouteTicket> Route(const router::RequestFeatures& f,
                                            absl::Time now) override {
    return inner_->Route(f, now);
  }
  void OnFirstToken(const router::RouteTicket& t, absl::Time now) override {
    inner_->OnFirstToken(t, now);
  }
  void Sent(const router::RouteTicket& t, absl::Time now, int64_t turns) override {
    inner_->Sent(t, now, turns);
  }
  Dispatched Dispatch(const router::RouteTicket& t, absl::Time now) override {
    return inner_->Dispatch(t, now);
  }
  void SetResidencyListener(ResidencyListener woken) override {
    inner_->SetResidencyListener(std::move(woken));
  }
  bool Held(const router::RouteTicket& t) const override { return inner_->Held(t); }
  void TickResidency(absl::Time now) override { inner_->TickResidency(now); }
  std::optional<absl::Time> NextResidencyEvent() const override {
    return inner_->NextResidencyEvent();
  }
  void Unhold(const router::RouteTicket& t, absl::Time now) override { inner_->Unhold(t, now); }
  router::ResidencyGate::Counters ResidencyCounters() const override {
    return inner_->ResidencyCounters();
  }
  size_t ResidencyWaiting() const override { return inner_->ResidencyWaiting(); }
  bool HoldsSessions() const override { return inner_->HoldsSessions(); }
  void OnTransfer(const router::RouteTicket& t, double transfer_s) override {
    inner_->OnTransfer(t, transfer_s);
  }
  void OnComplete(const router::RouteTicket& t, const router::Outcome& o, absl::Time now) override {
    inner_->OnComplete(t, o, now);
  }
  void SetHealthy(int b, bool h) override { inner_->SetHealthy(b, h); }
  void UpdateEngineGauges(int b, const router::EngineGauges& g) override {
    inner_->UpdateEngineGauges(b, g);
  }
  std::vector<router::BackendReport> Report() const override { return inner_->Report(); }
  std::optional<router::RequestFeatures::PeerSession> SessionRecord(std::string_view session,
                                                                    absl::Time now) override {
    return inner_->SessionRecord(session, now);
  }
  std::vector<router::PeerLoad> LocalLoad() const override { return inner_->LocalLoad(); }
  std::vector<std::pair<int, std::string>> TakeResidencyDepartures() override {
    return inner_->TakeResidencyDepartures();
  }
  void SetPeerLoad(std::vector<router::PeerLoad> by_backend, absl::Time now) override {
    inner_->SetPeerLoad(std::move(by_backend), now);
  }
  void ShareShadowPins() override { inner_->ShareShadowPins(); }
  router::ShadowPinChanges TakeShadowPinChanges() override {
    return inner_->TakeShadowPinChanges();
  }
  void ApplyPeerShadowPins(const router::PeerShadowPins& peers) override {
    inner_->ApplyPeerShadowPins(peers);
  }
  router::RouterStats Stats() const override { return inner_->Stats(); }
  router::KvSizingReport Sizing(absl::Time now) override { return inner_->Sizing(now); }
  double BytesPerToken(const std::string& model) const override {
    return inner_->BytesPerToken(model);
  }

 private:
  std::unique_ptr<router::Router> inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool hold_ = false;
  bool waiting_ = false;
};

TEST(KvEventSubscriber, BoundedQueueOverflowShowsAsGapsAndEveryBatchIsAccounted) {
  HoldingRouter router(MakeRouter());
  FakeEngine engine(/*with_replay=*/false, "*", /*sndhwm=*/4);
  SubscriberOptions o = Options(engine);
  o.queue_messages = 2;
  KvEventSubscriber sub(router, 0, o);
  ASSERT_TRUE(sub.Start().ok());
  int64_t seq = SyncUp(engine, sub, 0);
  const SubscriberStats before = sub.stats();

  // Stall the subscriber inside a batch, then publish far more than the
  // queues between the two sockets hold (a few batches of ~1 MiB each).
  // (With a high-water mark this low, ZeroMQ's lazy flow-control credit
  // can drop a message sent right after another: send until one arrives.)
  router.Hold();
  for (int attempt = 0;; ++attempt) {
    ASSERT_LT(attempt, 400) << "the subscriber never took a batch";
    engine.Send(seq++, Batch({Stored(1)}));
    if (router.WaitUntilHeld(absl::Milliseconds(50))) break;
  }
  KvCacheEvent big = Stored(1);
  big.token_ids.assign(1 << 20, 7);
  const std::string payload = Batch({big});
  constexpr int kFlood = 96;
  for (int i = 0; i < kFlood; ++i) engine.Send(seq++, payload);
  router.Release();
  seq = SyncUp(engine, sub, seq);

  const SubscriberStats after = sub.stats();
  EXPECT_GE(after.gaps, 1u);
  EXPECT_GT(after.missed_batches, 0u);
  // Every sequence number was either applied or counted missing.
  EXPECT_EQ((after.batches - before.batches) + (after.missed_batches - before.missed_batches),
            static_cast<uint64_t>(after.last_seq - before.last_seq));
  EXPECT_EQ(after.decode_errors, 0u);
}

TEST(KvEventSubscriber, MalformedMessagesAreCountedAndSkipped) {
  auto router = MakeRouter();
  FakeEngine engine(false);
  KvEventSubscriber sub(*router, 0, Options(engine));
  ASSERT_TRUE(sub.Start().ok());
  const int64_t seq = SyncUp(engine, sub, 0);
  engine.Send(seq, std::string("\xc1", 1));  // never used in msgpack
  engine.Send(seq + 1, Batch({Stored(3)}));
  ASSERT_TRUE(sub.WaitFor([&](const SubscriberStats& s) { return s.last_seq == seq + 1; }, kWait));
  EXPECT_EQ(sub.stats().decode_errors, 1u);
  EXPECT_EQ(sub.stats().stored_blocks, 3u);
}

TEST(KvEventSubscriber, TopicFiltersMessages) {
  auto router = MakeRouter();
  FakeEngine engine(false);
  SubscriberOptions o = Options(engine);
  o.topic = "kv-events";
  KvEventSubscriber sub(*router, 0, o);
  ASSERT_TRUE(sub.Start().ok());
  int64_t seq = 0;
  for (;; ++seq) {
    engine.Send(seq, Batch({}), "other");
    engine.Send(seq, Batch({}), "kv-events");
    if (sub.WaitFor([&](const SubscriberStats& s) { return s.last_seq == seq; },
                    absl::Milliseconds(50))) {
      break;
    }
    ASSERT_LT(seq, 400);
  }
  EXPECT_EQ(sub.stats().publisher_restarts, 0u);  // "other" never reached it
}

TEST(KvEventSubscriber, RejectsAMalformedEndpoint) {
  auto router = MakeRouter();
  SubscriberOptions o;
  o.endpoint = "tcp://127.0.0.1";  // no port
  KvEventSubscriber sub(*router, 0, o);
  absl::Status st = sub.Start();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("tcp://127.0.0.1"));
}

}  // namespace
}  // namespace kvroute::kvevents
