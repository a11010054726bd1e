// The fleet-shared KV pool (sim/kv_pool.h, sim/engine_pool.cc), driven step by step on the
// engines' virtual clocks: two engines share one pool as two instances of a fleet do. Prompt
// blocks are put when a prefill completes them and land over the storing instance's NIC; any
// instance loads a stored prefix after its GPU hit, parked while the bytes come over its own
// NIC (shared by its loads); the pool evicts least recently used; cached tokens and vLLM's
// connector counters count the loaded tokens; the pool's events say STORAGE.
#include <gtest/gtest.h>

#include <cstring>
#include <msgpack.hpp>
#include <numeric>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "sim/block_manager.h"
#include "sim/engine.h"
#include "sim/kv_pool.h"

namespace sim {
namespace {

// Round numbers: a step costs 1 s + 0.1 s per prefill token + 0.5 s per decode; a token's KV
// is 100 B and the NIC moves 800 B/s each way, so a 4-token block crosses it in 0.5 s.
EngineConfig PoolConfig(KvPool* pool) {
  EngineConfig c;
  c.block_size = 4;
  c.num_gpu_blocks = 16;
  c.max_num_batched_tokens = 64;
  c.max_num_seqs = 8;
  c.timing = TimingModel{.step_fixed_s = 1.0,
                         .prefill_s_per_token = 0.1,
                         .decode_s_per_seq = 0.5,
                         .kv_read_s_per_token = 0};
  c.kv_bytes_per_token = 100;
  c.link = LinkModel{.bandwidth_bytes_per_s = 800, .overhead_s = 5, .per_descriptor_s = 0};
  c.kv_pool = pool;
  return c;
}

std::vector<int32_t> Tokens(int n, int32_t start = 0) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

RequestSpec Spec(const std::string& id, std::vector<int32_t> prompt, int max_tokens = 1) {
  return RequestSpec{.request_id = id,
                     .prompt = std::move(prompt),
                     .max_tokens = max_tokens,
                     .ignore_eos = true,
                     .output_seed = 1};
}

// Runs until nothing is runnable or due (puts landed included).
void RunAll(Engine& engine) {
  for (int i = 0; i < 1000; ++i) {
    if (engine.HasRunnableWork()) {
      engine.Step();
      continue;
    }
    const std::optional<double> next = engine.NextTimedEvent();
    if (!next) return;
    engine.AdvanceTo(*next);
  }
}

RequestInfo RunRequest(Engine& engine, RequestSpec spec) {
  const RequestHandle h = engine.Submit(std::move(spec));
  RunAll(engine);
  const RequestInfo* info = engine.Info(h);
  EXPECT_NE(info, nullptr);
  return info ? *info : RequestInfo{};
}

TEST(KvPoolTest, APrefillPutsItsPromptBlocksWhichLandOverItsNic) {
  KvPool pool(64, 4);
  Engine a(PoolConfig(&pool));
  const std::vector<BlockHash> h = HashFullBlocks(Tokens(10), 4);  // 2 full blocks
  a.Submit(Spec("a", Tokens(10)));
  ASSERT_DOUBLE_EQ(a.Step().duration, 2.0);  // prefill 10 and sample: 0 -> 2.0 s
  // Both whole prompt blocks are put; the partial one is not. Not loadable before they land.
  EXPECT_EQ(pool.stats().used_blocks, 2);
  EXPECT_EQ(pool.Lookup(h), 0);
  // 800 B over 800 B/s from the end of the step; the request has ended, its two stored GPU
  // blocks stay pinned until then.
  EXPECT_EQ(a.blocks().num_free(), 14);
  ASSERT_EQ(a.NextTimedEvent(), std::optional<double>(3.0));
  a.AdvanceTo(2.9);
  EXPECT_EQ(pool.Lookup(h), 0);
  a.AdvanceTo(3.0);
  EXPECT_EQ(pool.Lookup(h), 2);
  EXPECT_EQ(a.blocks().num_free(), 16);
  EXPECT_EQ(a.pool_stores().transfers, 1u);
  EXPECT_DOUBLE_EQ(a.pool_stores().bytes, 800);
  EXPECT_DOUBLE_EQ(a.pool_stores().seconds, 1.0);
  // Generated tokens' blocks are not put (MooncakeStoreConnector's save_decode_cache: false).
  RunRequest(a, Spec("b", Tokens(6, 100), /*max_tokens=*/6));
  EXPECT_EQ(pool.stats().used_blocks, 3);
}

TEST(KvPoolTest, AnotherInstanceLoadsTheStoredPrefixOverItsNicParked) {
  KvPool pool(64, 4);
  Engine a(PoolConfig(&pool));
  Engine b(PoolConfig(&pool));
  RunRequest(a, Spec("a", Tokens(16)));  // 4 blocks put and landed
  // b computed nothing of it; the oracle's count already includes the pool.
  EXPECT_EQ(b.CachedPromptTokens(Tokens(17)), 16);
  const RequestHandle h = b.Submit(Spec("b", Tokens(17)));
  b.Step();  // admitted with its 16 pool tokens: parked, nothing scheduled
  EXPECT_EQ(b.num_running(), 0);
  EXPECT_EQ(b.num_waiting(), 1);
  EXPECT_FALSE(b.HasRunnableWork());
  // 1,600 B over b's 800 B/s NIC.
  ASSERT_EQ(b.NextTimedEvent(), std::optional<double>(2.0));
  RunAll(b);
  const RequestInfo* info = b.Info(h);
  ASSERT_NE(info, nullptr);
  EXPECT_DOUBLE_EQ(info->first_scheduled, 2.0);
  EXPECT_DOUBLE_EQ(info->first_token, 3.5);  // then its last token, a decode-sized step
  EXPECT_EQ(info->cached_tokens, 16);
  EXPECT_EQ(info->pool_loaded_tokens, 16);
  EXPECT_EQ(info->host_loaded_tokens, 0);
  EXPECT_EQ(b.pool_loads().transfers, 1u);
  EXPECT_DOUBLE_EQ(b.pool_loads().bytes, 1600);
  // vLLM's connector counters and prompt sources count pool tokens as external; the GPU's
  // own prefix cache counters do not.
  const EngineCounters& c = b.counters();
  EXPECT_EQ(c.prefix_cache_hits, 0u);
  EXPECT_EQ(c.external_prefix_cache_queries, 17u);
  EXPECT_EQ(c.external_prefix_cache_hits, 16u);
  EXPECT_EQ(c.prompt_tokens_external_kv_transfer, 16u);
  EXPECT_EQ(c.prompt_tokens_pool_loaded, 16u);
  EXPECT_EQ(c.prompt_tokens_local_compute, 1u);
  // vLLM's PromptTokenStats counts the recomputed last token of a fully cached prompt as a
  // cache hit too.
  EXPECT_EQ(c.prompt_tokens_local_cache_hit, 1u);
  EXPECT_EQ(c.prompt_tokens_cached, 16u);
}

TEST(KvPoolTest, TheHitIsTheGpuPrefixThenThePoolsRun) {
  KvPool pool(64, 4);
  Engine a(PoolConfig(&pool));
  Engine b(PoolConfig(&pool));
  RunRequest(b, Spec("b0", Tokens(5)));  // b's GPU caches block 0 (and puts it)
  RunRequest(a, Spec("a", Tokens(16)));   // a loads block 0 and puts the other 3
  const RequestInfo info = RunRequest(b, Spec("b1", Tokens(17)));
  EXPECT_EQ(info.cached_tokens, 16);
  EXPECT_EQ(info.pool_loaded_tokens, 12);  // only the 3 blocks b's GPU lacks come over the NIC
  EXPECT_DOUBLE_EQ(b.pool_loads().bytes, 1200);
}

TEST(KvPoolTest, LoadsIntoOneInstanceShareItsNic) {
  KvPool pool(64, 4);
  Engine a(PoolConfig(&pool));
  Engine b(PoolConfig(&pool));
  RunRequest(a, Spec("a0", Tokens(16, 0)));
  RunRequest(a, Spec("a1", Tokens(16, 1000)));
  std::vector<int32_t> p0 = Tokens(16, 0), p1 = Tokens(16, 1000);
  p0.push_back(7);
  p1.push_back(7);
  const RequestHandle h0 = b.Submit(Spec("b0", p0));
  const RequestHandle h1 = b.Submit(Spec("b1", p1));
  RunAll(b);
  // Alone each load takes 2 s; together they share 800 B/s and both land at 4 s.
  EXPECT_DOUBLE_EQ(b.Info(h0)->first_scheduled, 4.0);
  EXPECT_DOUBLE_EQ(b.Info(h1)->first_scheduled, 4.0);
  EXPECT_DOUBLE_EQ(b.pool_loads().seconds, 8.0);
}

TEST(KvPoolTest, EvictsTheLeastRecentlyUsedIdleBlocks) {
  KvPool pool(/*num_blocks=*/4, 4);
  Engine a(PoolConfig(&pool));
  Engine b(PoolConfig(&pool));
  const std::vector<BlockHash> h0 = HashFullBlocks(Tokens(9, 0), 4);
  const std::vector<BlockHash> h1 = HashFullBlocks(Tokens(9, 100), 4);
  const std::vector<BlockHash> h2 = HashFullBlocks(Tokens(9, 200), 4);
  RunRequest(a, Spec("p0", Tokens(9, 0)));
  RunRequest(a, Spec("p1", Tokens(9, 100)));
  EXPECT_EQ(pool.stats().used_blocks, 4);
  // b loads p0's prefix: a load makes its blocks recent, so p1's are now the oldest.
  EXPECT_EQ(RunRequest(b, Spec("q0", Tokens(9, 0))).pool_loaded_tokens, 8);
  RunRequest(a, Spec("p2", Tokens(9, 200)));
  EXPECT_EQ(pool.Lookup(h0), 2);
  EXPECT_EQ(pool.Lookup(h1), 0);
  EXPECT_EQ(pool.Lookup(h2), 2);
  EXPECT_EQ(pool.stats().evictions, 2);
}

TEST(KvPoolTest, APutFindingNoIdleBlockIsSkipped) {
  KvPool pool(/*num_blocks=*/2, 4);
  Engine a(PoolConfig(&pool));
  a.Submit(Spec("p0", Tokens(9, 0)));
  a.Step();  // puts 2 blocks, in flight until 3.0
  // Nothing idle to evict while those are being stored: the next put is skipped.
  a.Submit(Spec("p1", Tokens(9, 100)));
  a.Step();
  EXPECT_EQ(pool.stats().stores_skipped, 1);
  RunAll(a);
  EXPECT_EQ(pool.Lookup(HashFullBlocks(Tokens(9, 0), 4)), 2);
}

// The payload's events as (type, medium) pairs.
std::vector<std::pair<std::string, std::string>> EventKinds(const std::string& payload) {
  std::vector<std::pair<std::string, std::string>> kinds;
  const msgpack::object_handle oh = msgpack::unpack(payload.data(), payload.size());
  const msgpack::object& batch = oh.get();
  const msgpack::object& events = batch.via.array.ptr[1];
  for (uint32_t i = 0; i < events.via.array.size; ++i) {
    const msgpack::object_map& m = events.via.array.ptr[i].via.map;
    std::string type, medium;
    for (uint32_t k = 0; k < m.size; ++k) {
      const std::string key = m.ptr[k].key.as<std::string>();
      if (key == "type") type = m.ptr[k].val.as<std::string>();
      if (key == "medium") medium = m.ptr[k].val.as<std::string>();
    }
    kinds.emplace_back(type, medium);
  }
  return kinds;
}

TEST(KvPoolTest, ThePoolPublishesStorageEventsOnItsOwnPublisher) {
  KvPool pool(/*num_blocks=*/2, 4);
  KvEventPublisherOptions o;
  o.replay_port = 0;
  ASSERT_TRUE(pool.EnableKvEvents(o).ok());
  ASSERT_NE(pool.kv_events_endpoint().find("tcp://127.0.0.1:"), std::string::npos);
  Engine a(PoolConfig(&pool));
  RunRequest(a, Spec("p0", Tokens(9, 0)));
  pool.PublishKvEvents(1.0);
  RunRequest(a, Spec("p1", Tokens(9, 100)));  // evicts p0's two blocks
  pool.PublishKvEvents(2.0);
  pool.PublishKvEvents(3.0);  // nothing recorded since: no batch

  // The replay socket answers every buffered batch from 0, then an end marker.
  zmq::context_t ctx(1);
  zmq::socket_t replay(ctx, zmq::socket_type::dealer);
  replay.connect(pool.kv_events_replay_endpoint());
  zmq::multipart_t request;
  request.add(zmq::message_t());
  request.add(zmq::message_t(8));
  std::memset(request[1].data(), 0, 8);
  request.send(replay);
  std::vector<std::vector<std::pair<std::string, std::string>>> batches;
  for (;;) {
    std::vector<zmq::message_t> frames;
    ASSERT_TRUE(zmq::recv_multipart(replay, std::back_inserter(frames)));
    ASSERT_EQ(frames.size(), 3u);
    if (frames[2].size() == 0) break;
    batches.push_back(EventKinds(frames[2].to_string()));
  }
  using P = std::pair<std::string, std::string>;
  ASSERT_EQ(batches.size(), 2u);
  // One BlockStored per block when its bytes land.
  EXPECT_EQ(batches[0], (std::vector<P>{{"BlockStored", "STORAGE"}, {"BlockStored", "STORAGE"}}));
  // The eviction for p1's put, then p1's blocks landing.
  EXPECT_EQ(batches[1], (std::vector<P>{{"BlockRemoved", "STORAGE"},
                                        {"BlockStored", "STORAGE"},
                                        {"BlockStored", "STORAGE"}}));
}

TEST(KvPoolTest, WithoutAPoolNothingChanges) {
  Engine e(PoolConfig(nullptr));
  EXPECT_EQ(e.kv_pool(), nullptr);
  RunRequest(e, Spec("a", Tokens(16)));
  EXPECT_EQ(e.counters().external_prefix_cache_queries, 0u);
  EXPECT_EQ(e.pool_stores().transfers, 0u);
  EXPECT_EQ(e.blocks().num_free(), 16);
}

}  // namespace
}  // namespace sim
