// The simulator's KV cache events: where the engine records them, the exact
// bytes of a batch, and the publisher's frames and replay answers.
#include "sim/kv_events.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <msgpack.hpp>
#include <numeric>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "sim/block_manager.h"
#include "sim/engine.h"
#include "tests/kvevents/msgpack_bytes.h"

namespace sim {
namespace {

using kvroute::kvevents::testing::MsgpackBytes;
using Kind = KvCacheEvent::Kind;

EngineConfig TinyConfig(int64_t num_blocks) {
  EngineConfig c;
  c.block_size = 4;
  c.num_gpu_blocks = num_blocks;
  c.max_num_batched_tokens = 8;
  c.max_num_seqs = 8;
  c.timing = TimingModel{.step_fixed_s = 1.0,
                         .prefill_s_per_token = 0.1,
                         .decode_s_per_seq = 0.5,
                         .kv_read_s_per_token = 0};
  c.mean_output_tokens = 4;
  return c;
}

std::vector<int32_t> Tokens(int n, int32_t start) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

void RunToIdle(Engine& engine, std::vector<int32_t> prompt) {
  engine.Submit(RequestSpec{.request_id = "r",
                            .prompt = std::move(prompt),
                            .max_tokens = 1,
                            .ignore_eos = true,
                            .output_seed = 1});
  for (int i = 0; i < 100 && engine.HasRunnableWork(); ++i) engine.Step();
  ASSERT_FALSE(engine.HasRunnableWork());
}

TEST(SimKvEvents, EngineRecordsStoresEvictionsAndResetsLikeVllmsBlockPool) {
  Engine engine(TinyConfig(/*num_blocks=*/6));
  RunToIdle(engine, Tokens(8, 0));
  EXPECT_TRUE(engine.TakeKvEvents().empty());  // off unless enabled

  Engine e(TinyConfig(6));
  e.EnableKvEvents(true);
  const std::vector<int32_t> a = Tokens(8, 0);
  RunToIdle(e, a);
  std::vector<KvCacheEvent> ev = e.TakeKvEvents();
  // The prefill step completes both full blocks of A: one BlockStored.
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, Kind::kBlockStored);
  EXPECT_EQ(ev[0].block_hashes, HashFullBlocks(a, 4));
  EXPECT_FALSE(ev[0].parent_block_hash.has_value());
  EXPECT_EQ(ev[0].token_ids, a);
  EXPECT_EQ(ev[0].block_size, 4);

  // B needs all six blocks: A's two cached blocks are evicted, tail first
  // (freed blocks queue in reverse order), and B's blocks are stored step
  // by step (8 prompt tokens per step), each run chained to the block
  // before it.
  const std::vector<int32_t> b = Tokens(24, 100);
  RunToIdle(e, b);
  ev = e.TakeKvEvents();
  std::vector<uint64_t> stored, removed;
  std::optional<uint64_t> expected_parent;
  for (const KvCacheEvent& x : ev) {
    if (x.kind == Kind::kBlockRemoved) {
      ASSERT_EQ(x.block_hashes.size(), 1u);  // one event per evicted block
      removed.push_back(x.block_hashes[0]);
    } else {
      ASSERT_EQ(x.kind, Kind::kBlockStored);
      EXPECT_EQ(x.parent_block_hash, expected_parent);
      EXPECT_EQ(x.token_ids.size(), x.block_hashes.size() * 4);
      stored.insert(stored.end(), x.block_hashes.begin(), x.block_hashes.end());
      expected_parent = x.block_hashes.back();
    }
  }
  EXPECT_EQ(stored, HashFullBlocks(b, 4));
  const std::vector<uint64_t> ha = HashFullBlocks(a, 4);
  EXPECT_EQ(removed, (std::vector<uint64_t>{ha[1], ha[0]}));
  EXPECT_EQ(e.blocks().num_evictions(), 2);
  EXPECT_EQ(static_cast<int64_t>(stored.size() - removed.size()) + 2, e.blocks().num_cached());

  ASSERT_TRUE(e.ResetPrefixCache());
  ev = e.TakeKvEvents();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, Kind::kAllBlocksCleared);
  EXPECT_EQ(e.blocks().num_cached(), 0);
}

TEST(SimKvEvents, ResetIsRefusedWhileRequestsHoldBlocks) {
  Engine e(TinyConfig(8));
  e.EnableKvEvents(true);
  e.Submit(RequestSpec{.request_id = "r", .prompt = Tokens(8, 0), .max_tokens = 4,
                       .ignore_eos = true, .output_seed = 1});
  e.Step();  // prefill: the request runs and holds its blocks
  e.TakeKvEvents();
  EXPECT_FALSE(e.ResetPrefixCache());
  EXPECT_TRUE(e.TakeKvEvents().empty());
  EXPECT_GT(e.blocks().num_cached(), 0);
}

TEST(SimKvEvents, DuplicateContentIsNotStoredTwice) {
  // Two requests with the same prompt in one step: the second's blocks stay
  // anonymous (the block manager caches one copy), so only one BlockStored
  // is published and stored minus removed stays the number of cached blocks.
  Engine e(TinyConfig(16));
  e.EnableKvEvents(true);
  for (const char* id : {"r1", "r2"}) {
    e.Submit(RequestSpec{.request_id = id, .prompt = Tokens(4, 0), .max_tokens = 1,
                         .ignore_eos = true, .output_seed = 1});
  }
  for (int i = 0; i < 100 && e.HasRunnableWork(); ++i) e.Step();
  size_t stored = 0;
  for (const KvCacheEvent& x : e.TakeKvEvents()) {
    if (x.kind == Kind::kBlockStored) stored += x.block_hashes.size();
  }
  EXPECT_EQ(static_cast<int64_t>(stored), e.blocks().num_cached());
}

std::vector<KvCacheEvent> ThreeEvents() {
  KvCacheEvent s;
  s.kind = Kind::kBlockStored;
  s.block_hashes = {15760518052499183552u, 7};
  s.token_ids = {1, 2, 3, 151644};
  s.block_size = 2;
  KvCacheEvent r;
  r.kind = Kind::kBlockRemoved;
  r.block_hashes = {7};
  return {s, r, KvCacheEvent{}};
}

// The bytes msgspec writes for vLLM's KVEventBatch of these events (keys in
// declaration order, defaults omitted, integers in their shortest form),
// written out from the msgpack specification.
TEST(SimKvEvents, BatchBytesAreVllms) {
  MsgpackBytes m;
  m.Array(3).Float64(1789095808.8378847).Array(3);
  m.Map(11)
      .Str("type").Str("BlockStored")
      .Str("block_hashes").Array(2).UInt(15760518052499183552u).UInt(7)
      .Str("parent_block_hash").Nil()
      .Str("token_ids").Array(4).UInt(1).UInt(2).UInt(3).UInt(151644)
      .Str("block_size").UInt(2)
      .Str("lora_id").Nil()
      .Str("medium").Str("GPU")
      .Str("lora_name").Nil()
      .Str("extra_keys").Array(2).Nil().Nil()
      .Str("group_idx").UInt(0)
      .Str("kv_cache_spec_kind").Str("full_attention");
  m.Map(4)
      .Str("type").Str("BlockRemoved")
      .Str("block_hashes").Array(1).UInt(7)
      .Str("medium").Str("GPU")
      .Str("group_idx").UInt(0);
  m.Map(1).Str("type").Str("AllBlocksCleared");
  m.UInt(0);
  const std::vector<KvCacheEvent> events = ThreeEvents();
  EXPECT_EQ(EncodeKvEventBatch(1789095808.8378847, events, 0), m.bytes());
}

TEST(SimKvEvents, BatchShapeDecodedGenerically) {
  const std::vector<KvCacheEvent> events = ThreeEvents();
  const std::string bytes = EncodeKvEventBatch(12.5, events, 3);
  msgpack::object_handle h = msgpack::unpack(bytes.data(), bytes.size());
  const msgpack::object& root = h.get();
  ASSERT_EQ(root.type, msgpack::type::ARRAY);
  ASSERT_EQ(root.via.array.size, 3u);
  EXPECT_EQ(root.via.array.ptr[0].type, msgpack::type::FLOAT64);
  EXPECT_EQ(root.via.array.ptr[0].as<double>(), 12.5);
  EXPECT_EQ(root.via.array.ptr[2].as<int>(), 3);
  const msgpack::object& evs = root.via.array.ptr[1];
  ASSERT_EQ(evs.via.array.size, 3u);
  auto keys = [](const msgpack::object& map) {
    std::vector<std::string> k;
    for (uint32_t i = 0; i < map.via.map.size; ++i) k.push_back(map.via.map.ptr[i].key.as<std::string>());
    return k;
  };
  EXPECT_EQ(keys(evs.via.array.ptr[0]),
            (std::vector<std::string>{"type", "block_hashes", "parent_block_hash", "token_ids",
                                      "block_size", "lora_id", "medium", "lora_name", "extra_keys",
                                      "group_idx", "kv_cache_spec_kind"}));
  EXPECT_EQ(keys(evs.via.array.ptr[1]),
            (std::vector<std::string>{"type", "block_hashes", "medium", "group_idx"}));
  EXPECT_EQ(keys(evs.via.array.ptr[2]), (std::vector<std::string>{"type"}));
  EXPECT_EQ(evs.via.array.ptr[0].via.map.ptr[1].val.as<std::vector<uint64_t>>(),
            (std::vector<uint64_t>{15760518052499183552u, 7}));
}

int64_t SeqOf(const zmq::message_t& frame) {
  EXPECT_EQ(frame.size(), 8u);
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | frame.data<uint8_t>()[i];
  return static_cast<int64_t>(v);
}

TEST(SimKvEvents, PublisherSendsThreeFramesAndAnswersReplays) {
  KvEventPublisherOptions o;
  o.replay_port = 0;
  o.topic = "kv-events";
  auto pub = KvEventPublisher::Create(o);
  ASSERT_TRUE(pub.ok()) << pub.status();
  ASSERT_NE((*pub)->endpoint().find("tcp://127.0.0.1:"), std::string::npos);
  ASSERT_FALSE((*pub)->replay_endpoint().empty());

  zmq::context_t ctx(1);
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, "kv-events");
  sub.connect((*pub)->endpoint());
  const std::vector<KvCacheEvent> events = ThreeEvents();
  // PUB/SUB drops what is sent before the subscription arrives: publish
  // until one batch is received; from then on every batch arrives.
  std::vector<zmq::message_t> frames;
  int published = 0;
  for (; published < 400 && frames.empty(); ++published) {
    (*pub)->Publish(published, events);
    zmq::pollitem_t item{sub.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(50));
    if (item.revents & ZMQ_POLLIN) {
      ASSERT_TRUE(zmq::recv_multipart(sub, std::back_inserter(frames)));
    }
  }
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].to_string(), "kv-events");
  int64_t seq = SeqOf(frames[1]);
  EXPECT_EQ(frames[2].to_string(), EncodeKvEventBatch(seq, events, 0));
  // Batches published after the first one that arrived arrive too, in order.
  while (seq < published - 1) {
    frames.clear();
    ASSERT_TRUE(zmq::recv_multipart(sub, std::back_inserter(frames)));
    ASSERT_EQ(SeqOf(frames[1]), ++seq);
  }
  for (int i = 0; i < 4; ++i) (*pub)->Publish(published + i, events);
  published += 4;
  for (int i = 0; i < 4; ++i) {
    frames.clear();
    ASSERT_TRUE(zmq::recv_multipart(sub, std::back_inserter(frames)));
    ASSERT_EQ(frames.size(), 3u);
    EXPECT_EQ(SeqOf(frames[1]), ++seq);
  }
  EXPECT_EQ(seq, published - 1);  // numbered from 0, one per batch

  zmq::socket_t replay(ctx, zmq::socket_type::dealer);
  replay.connect((*pub)->replay_endpoint());
  zmq::multipart_t request;
  request.add(zmq::message_t());
  zmq::message_t start(8);
  std::memset(start.data(), 0, 8);
  start.data<uint8_t>()[7] = 2;  // from sequence number 2
  request.add(std::move(start));
  request.send(replay);
  for (int64_t want = 2;; ++want) {
    frames.clear();
    ASSERT_TRUE(zmq::recv_multipart(replay, std::back_inserter(frames)));
    ASSERT_EQ(frames.size(), 3u);
    EXPECT_EQ(frames[0].size(), 0u);
    if (SeqOf(frames[1]) == -1) {
      EXPECT_EQ(frames[2].size(), 0u);
      EXPECT_EQ(want, published);
      break;
    }
    EXPECT_EQ(SeqOf(frames[1]), want);
    EXPECT_EQ(frames[2].to_string(), EncodeKvEventBatch(want, events, 0));
  }
  EXPECT_EQ((*pub)->dropped(), 0u);
}

TEST(SimKvEvents, PublisherBindFailureNamesTheEndpoint) {
  auto first = KvEventPublisher::Create({});
  ASSERT_TRUE(first.ok());
  const std::string ep = (*first)->endpoint();
  KvEventPublisherOptions o;
  o.port = static_cast<uint16_t>(std::stoi(ep.substr(ep.rfind(':') + 1)));
  auto second = KvEventPublisher::Create(o);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(ep), absl::string_view::npos);
}

}  // namespace
}  // namespace sim
