// vLLM's native CPU offloading in the engine (sim/engine_offload.cc), driven step by step on
// the virtual clock: write-through stores that start when the next step starts, a hit made of
// the GPU prefix and the host tier's run of whole offloaded blocks, loads that park the
// request and queue on the host -> GPU stream, finished requests holding their blocks until
// their stores land, the cached-token and by-source accounting, and the CPU-medium events.
#include <gtest/gtest.h>

#include <msgpack.hpp>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "sim/block_manager.h"
#include "sim/engine.h"
#include "sim/kv_events.h"

namespace sim {
namespace {

using Kind = KvCacheEvent::Kind;
using Medium = KvCacheEvent::Medium;

// Round numbers: a step costs 1 s + 0.1 s per prefill token + 0.5 s per decode; a token's KV
// is 100 B and host copies move 800 B/s each way, so a 4-token block copies in 0.5 s.
EngineConfig OffloadConfig(int host_block_size = 4, int64_t host_blocks = 64) {
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
  c.kv_offloading = true;
  c.host_num_blocks = host_blocks;
  c.host_block_size = host_block_size;
  c.host_bandwidth_bytes_per_s = 800;
  return c;
}

std::vector<int32_t> Tokens(int n, int32_t start = 0) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

RequestSpec Spec(const std::string& id, std::vector<int32_t> prompt, int max_tokens = 1) {
  return RequestSpec{.request_id = id,
                     .prompt = std::move(prompt),
                     .max_tokens = max_tokens,
                     .ignore_eos = true,
                     .output_seed = 1};
}

// Runs until nothing is runnable or due; the request's info afterwards.
RequestInfo RunRequest(Engine& engine, RequestSpec spec) {
  const RequestHandle h = engine.Submit(std::move(spec));
  for (int i = 0; i < 1000; ++i) {
    if (engine.HasRunnableWork()) {
      engine.Step();
      continue;
    }
    const std::optional<double> next = engine.NextTimedEvent();
    if (!next) break;
    engine.AdvanceTo(*next);
  }
  const RequestInfo* info = engine.Info(h);
  EXPECT_NE(info, nullptr);
  return info ? *info : RequestInfo{};
}

// Lets every store copy land (by `until`, default 100 s on), then drops the GPU prefix cache:
// only host memory holds KV.
void LandStoresAndClearGpu(Engine& engine, double until = -1) {
  engine.AdvanceTo(until >= 0 ? until : engine.now() + 100);
  ASSERT_TRUE(engine.ResetPrefixCache());
}

TEST(OffloadTest, WriteThroughStoresCompletedBlocksWhenTheNextStepStarts) {
  Engine engine(OffloadConfig());
  const std::vector<BlockHash> h = HashFullBlocks(Tokens(10), 4);  // 2 full blocks
  engine.Submit(Spec("a", Tokens(10)));
  const StepResult s = engine.Step();  // prefill 10 and sample: 0 -> 2.0 s
  ASSERT_DOUBLE_EQ(s.duration, 2.0);
  const HostTier* tier = engine.host_tier();
  ASSERT_NE(tier, nullptr);
  // The completed blocks are handed to the host tier; the trailing partial block is not.
  EXPECT_EQ(tier->num_used(), 2);
  EXPECT_TRUE(tier->Contains(h[0]));
  EXPECT_FALSE(tier->IsReady(h[0]));
  // The copy (800 B) starts at the end of the step, so it lands at 3.0, not at 1.0.
  engine.AdvanceTo(2.9);
  EXPECT_EQ(engine.host_stores().copies, 0u);
  EXPECT_EQ(tier->Lookup(h), 0);
  engine.AdvanceTo(3.0);
  EXPECT_EQ(engine.host_stores().copies, 1u);
  EXPECT_DOUBLE_EQ(engine.host_stores().bytes, 800);
  EXPECT_DOUBLE_EQ(engine.host_stores().seconds, 1.0);
  // The host tier now holds every block the GPU caches.
  for (BlockHash b : h) EXPECT_TRUE(engine.blocks().IsCached(b));
  EXPECT_EQ(tier->Lookup(h), 2);
  // Generated tokens fill blocks too, and those are stored as they complete.
  RunRequest(engine, Spec("b", Tokens(6, 100), /*max_tokens=*/4));
  EXPECT_EQ(tier->num_used(), 4);
}

TEST(OffloadTest, AFinishedRequestKeepsItsBlocksUntilItsStoresLand) {
  Engine engine(OffloadConfig());
  engine.Submit(Spec("a", Tokens(10)));
  engine.Step();  // a finishes at 2.0; its store lands at 3.0
  EXPECT_EQ(engine.num_running(), 0);
  EXPECT_EQ(engine.blocks().num_free(), 13);  // its 3 blocks are still held
  // A request needing 15 blocks waits for them: the store's landing is what it waits on.
  const RequestHandle b = engine.Submit(Spec("b", Tokens(60, 500)));
  EXPECT_FALSE(engine.HasRunnableWork());
  ASSERT_EQ(engine.NextTimedEvent(), std::optional<double>(3.0));
  engine.AdvanceTo(3.0);
  EXPECT_EQ(engine.blocks().num_free(), 16);
  EXPECT_TRUE(engine.host_tier()->IsReady(HashFullBlocks(Tokens(10), 4)[0]));
  ASSERT_TRUE(engine.HasRunnableWork());
  engine.Step();
  EXPECT_DOUBLE_EQ(engine.Info(b)->first_scheduled, 3.0);
}

TEST(OffloadTest, HitIsTheGpuPrefixThenTheHostRunOfWholeBlocks) {
  Engine engine(OffloadConfig());
  RunRequest(engine, Spec("a", Tokens(16)));
  LandStoresAndClearGpu(engine);
  // c loads a's first block back; the GPU now caches that block only.
  const RequestInfo c = RunRequest(engine, Spec("c", Tokens(5)));
  EXPECT_EQ(c.cached_tokens, 4);
  EXPECT_EQ(c.host_loaded_tokens, 4);
  const uint64_t gpu_hits = engine.counters().prefix_cache_hits;
  // a2 shares a's 16 tokens: 4 from the GPU, the next 12 from host memory, 4 computed.
  const RequestInfo a2 = RunRequest(engine, Spec("a2", Concat(Tokens(16), Tokens(4, 100))));
  EXPECT_EQ(a2.cached_tokens, 16);
  EXPECT_EQ(a2.host_loaded_tokens, 12);
  EXPECT_EQ(engine.counters().prefix_cache_hits - gpu_hits, 4u);  // local hits stay GPU-only
  EXPECT_EQ(engine.counters().external_prefix_cache_hits, 4u + 12u);
  EXPECT_EQ(engine.counters().external_prefix_cache_queries, 16u + 5u + 20u);
}

TEST(OffloadTest, HitsComeInWholeOffloadedBlocks) {
  // Offloaded blocks of 8 tokens, two GPU blocks each.
  Engine engine(OffloadConfig(/*host_block_size=*/8));
  RunRequest(engine, Spec("a", Concat(Tokens(16), Tokens(3, 900))));
  EXPECT_EQ(engine.host_tier()->num_used(), 2);  // tokens 0-7 and 8-15; 16-18 are partial
  LandStoresAndClearGpu(engine);
  // Less than a whole offloaded block matches: no load.
  const RequestInfo c = RunRequest(engine, Spec("c", Tokens(5)));
  EXPECT_EQ(c.cached_tokens, 0);
  EXPECT_EQ(c.host_loaded_tokens, 0);
  // With c's first GPU block cached, a2 loads the rest of offloaded block 0 and block 1.
  const RequestInfo a2 = RunRequest(engine, Spec("a2", Concat(Tokens(16), Tokens(4, 100))));
  EXPECT_EQ(a2.cached_tokens, 16);
  EXPECT_EQ(a2.host_loaded_tokens, 12);
  EXPECT_DOUBLE_EQ(engine.host_loads().bytes, 12 * 100);
}

TEST(OffloadTest, LoadsParkTheRequestAndShareTheHostToGpuStream) {
  Engine engine(OffloadConfig());
  RunRequest(engine, Spec("a", Tokens(8)));
  RunRequest(engine, Spec("d", Tokens(8, 1000)));
  LandStoresAndClearGpu(engine, /*until=*/100);
  // f's stores (10 blocks, 5 s) keep the GPU -> host stream busy from 105 to 110.
  RunRequest(engine, Spec("f", Tokens(40, 5000)));
  ASSERT_DOUBLE_EQ(engine.now(), 105);
  const RequestHandle a2 = engine.Submit(Spec("a2", Concat(Tokens(8), Tokens(4, 50))));
  const RequestHandle d2 = engine.Submit(Spec("d2", Concat(Tokens(8, 1000), Tokens(4, 60))));
  // Both are admitted and wait (WAITING_FOR_REMOTE_KVS): nothing runs in this step.
  const StepResult parked = engine.Step();
  EXPECT_EQ(parked.prefill_tokens, 0);
  EXPECT_TRUE(parked.tokens.empty());
  EXPECT_EQ(engine.num_waiting(), 2);
  EXPECT_EQ(engine.num_running(), 0);
  EXPECT_LT(engine.Info(a2)->first_scheduled, 0);
  // 800 B each at 800 B/s, one after the other, untouched by the stores going the other way.
  EXPECT_FALSE(engine.HasRunnableWork());
  ASSERT_EQ(engine.NextTimedEvent(), std::optional<double>(106));
  engine.AdvanceTo(106);
  const StepResult first = engine.Step();  // a2 computes its last 4 tokens: 1.4 s
  EXPECT_EQ(first.prefill_tokens, 4);
  EXPECT_DOUBLE_EQ(engine.Info(a2)->first_token, 107.4);
  // d2's load landed at 107, during a2's step: it runs in the next step.
  engine.Step();
  EXPECT_DOUBLE_EQ(engine.Info(d2)->first_scheduled, 107.4);
  EXPECT_DOUBLE_EQ(engine.Info(d2)->first_token, 108.8);
  EXPECT_EQ(engine.Info(d2)->cached_tokens, 8);
  EXPECT_EQ(engine.host_loads().copies, 2u);
  EXPECT_DOUBLE_EQ(engine.host_loads().seconds, 2.0);
  // The stores queue behind f's on their own stream: f's land at 110, a2's block at 110.5,
  // d2's at 111 (a's and d's landed before 100).
  engine.AdvanceTo(110.5);
  EXPECT_EQ(engine.host_stores().copies, 2u + 2u);
  engine.AdvanceTo(111);
  EXPECT_EQ(engine.host_stores().copies, 2u + 3u);
}

TEST(OffloadTest, CachedTokensCountLoadedTokensAsVllmReportsThem) {
  Engine engine(OffloadConfig());
  RunRequest(engine, Spec("a", Tokens(16)));
  LandStoresAndClearGpu(engine);
  // The whole prompt is in host memory: it is loaded, and its last token computed again.
  const RequestInfo whole = RunRequest(engine, Spec("whole", Tokens(16)));
  EXPECT_EQ(whole.host_loaded_tokens, 16);
  EXPECT_EQ(whole.cached_tokens, 15);
  // Now the GPU caches it too, but a local hit stops a block short of a block-aligned prompt's
  // end, and the connector, asked after it, loads that last block instead of recomputing it.
  const RequestInfo again = RunRequest(engine, Spec("again", Tokens(16)));
  EXPECT_EQ(again.host_loaded_tokens, 4);
  EXPECT_EQ(again.cached_tokens, 15);
  const EngineCounters& c = engine.counters();
  EXPECT_EQ(c.prefix_cache_hits, 12u);
  EXPECT_EQ(c.external_prefix_cache_hits, 16u + 4u);
  // vLLM's PromptTokenStats: a prompt cached but for its last token recomputes that token.
  EXPECT_EQ(c.prompt_tokens_local_compute, 16u + 1u + 1u);
  EXPECT_EQ(c.prompt_tokens_external_kv_transfer, 16u + 4u);
  EXPECT_EQ(c.prompt_tokens_local_cache_hit, 0u + 0u + 12u);
  EXPECT_EQ(c.prompt_tokens_cached, 15u + 15u);
}

TEST(OffloadTest, HostEventsAreSelfDescribingWithMediumCpu) {
  Engine engine(OffloadConfig(/*host_block_size=*/8, /*host_blocks=*/2));
  engine.EnableKvEvents(true);
  const std::vector<BlockHash> h = HashFullBlocks(Tokens(16), 4);
  engine.Submit(Spec("a", Tokens(16)));
  engine.Step();
  std::vector<KvCacheEvent> events = engine.TakeKvEvents();
  ASSERT_EQ(events.size(), 1u);  // the GPU's BlockStored; the copy has not landed
  EXPECT_EQ(events[0].medium, Medium::kGpu);
  engine.AdvanceTo(engine.now() + 10);
  events = engine.TakeKvEvents();
  ASSERT_EQ(events.size(), 2u);  // one per offloaded block, each naming its GPU blocks
  EXPECT_EQ(events[0].kind, Kind::kBlockStored);
  EXPECT_EQ(events[0].medium, Medium::kCpu);
  EXPECT_EQ(events[0].block_hashes, (std::vector<BlockHash>{h[0], h[1]}));
  EXPECT_FALSE(events[0].parent_block_hash.has_value());
  EXPECT_EQ(events[0].token_ids, Tokens(8));
  EXPECT_EQ(events[0].block_size, 4);
  EXPECT_EQ(events[1].block_hashes, (std::vector<BlockHash>{h[2], h[3]}));
  EXPECT_EQ(events[1].parent_block_hash, std::optional<BlockHash>(h[1]));
  EXPECT_EQ(events[1].token_ids, Tokens(8, 8));
  // The tier holds two blocks: storing b's evicts a's, tail first, in one BlockRemoved.
  engine.Submit(Spec("b", Tokens(16, 500)));
  engine.Step();
  events = engine.TakeKvEvents();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].kind, Kind::kBlockRemoved);
  EXPECT_EQ(events[1].medium, Medium::kCpu);
  EXPECT_EQ(events[1].block_hashes, (std::vector<BlockHash>{h[2], h[3], h[0], h[1]}));
  // On the wire: medium "CPU", and no extra_keys (None in the offloading connector's events).
  engine.AdvanceTo(engine.now() + 10);
  events = engine.TakeKvEvents();
  ASSERT_FALSE(events.empty());
  const std::string bytes = EncodeKvEventBatch(1.0, events, 0);
  msgpack::object_handle handle = msgpack::unpack(bytes.data(), bytes.size());
  const msgpack::object& stored = handle.get().via.array.ptr[1].via.array.ptr[0];
  std::vector<std::string> keys;
  std::string medium;
  for (uint32_t i = 0; i < stored.via.map.size; ++i) {
    keys.push_back(stored.via.map.ptr[i].key.as<std::string>());
    if (keys.back() == "medium") medium = stored.via.map.ptr[i].val.as<std::string>();
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"type", "block_hashes", "parent_block_hash",
                                            "token_ids", "block_size", "lora_id", "medium",
                                            "lora_name", "group_idx", "kv_cache_spec_kind"}));
  EXPECT_EQ(medium, "CPU");
}

TEST(OffloadTest, OffIsTheEngineWithoutAHostTier) {
  EngineConfig c = OffloadConfig();
  c.kv_offloading = false;
  Engine engine(c);
  EXPECT_EQ(engine.host_tier(), nullptr);
  RunRequest(engine, Spec("a", Tokens(16)));
  ASSERT_TRUE(engine.ResetPrefixCache());
  const RequestInfo again = RunRequest(engine, Spec("a", Tokens(16)));
  EXPECT_EQ(again.cached_tokens, 0);
  EXPECT_EQ(engine.counters().external_prefix_cache_queries, 0u);
  EXPECT_EQ(engine.CachedPromptTokens(Tokens(16)), 12);
}

}  // namespace
}  // namespace sim
