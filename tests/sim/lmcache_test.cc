// The LMCache backend of the host tier (--kv-offloading-backend lmcache; sim/engine_offload.cc),
// driven step by step on the virtual clock: stores that lengthen the step that makes them,
// LMCache's chunk as the unit of storing and lookup, retrieves that block the admitting step
// instead of parking the request, and the native backend left as it was.
#include <gtest/gtest.h>

#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "sim/block_manager.h"
#include "sim/engine.h"
#include "sim/profile.h"

namespace sim {
namespace {

// Round numbers: a step costs 1 s + 0.1 s per prefill token + 0.5 s per decode; a token's KV
// is 100 B; GPU blocks hold 4 tokens and LMCache's chunks 8. A chunk (800 B) stores in 2 s
// (400 B/s) and loads in 1 s (800 B/s).
EngineConfig LmcacheConfig(bool lmcache = true) {
  EngineConfig c;
  c.block_size = 4;
  c.num_gpu_blocks = 32;
  c.max_num_batched_tokens = 64;
  c.max_num_seqs = 8;
  c.timing = TimingModel{.step_fixed_s = 1.0,
                         .prefill_s_per_token = 0.1,
                         .decode_s_per_seq = 0.5,
                         .kv_read_s_per_token = 0};
  c.kv_bytes_per_token = 100;
  c.kv_offloading = true;
  c.host_num_blocks = 64;
  c.host_block_size = lmcache ? 8 : 4;
  c.host_bandwidth_bytes_per_s = 800;
  c.lmcache = lmcache;
  c.lmcache_store_bandwidth_bytes_per_s = 400;
  c.lmcache_load_bandwidth_bytes_per_s = 800;
  c.lmcache_store_fixed_s = 0;  // the copies' bytes alone; a test each sets these
  c.lmcache_schedule_s = 0;
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

// The keys of the whole chunks of `tokens`: a chunk (two GPU blocks) is named by the hash of
// its last GPU block.
std::vector<BlockHash> ChunkKeys(const std::vector<int32_t>& tokens) {
  const std::vector<BlockHash> h = HashFullBlocks(tokens, 4);
  std::vector<BlockHash> keys;
  for (size_t j = 1; j < h.size(); j += 2) keys.push_back(h[j]);
  return keys;
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

TEST(LmcacheTest, TheStepThatCompletesChunksIncludesTheirStore) {
  Engine engine(LmcacheConfig());
  engine.Submit(Spec("a", Tokens(20)));
  // Prefill 20 tokens: 1 + 2.0 s of compute, then 2 whole chunks stored before the step
  // returns: 1,600 B at 400 B/s = 4 s.
  const StepResult s = engine.Step();
  EXPECT_DOUBLE_EQ(s.duration, 7.0);
  ASSERT_EQ(s.tokens.size(), 1u);
  const RequestInfo* info = engine.Info(s.tokens[0].handle);
  ASSERT_NE(info, nullptr);
  EXPECT_DOUBLE_EQ(info->first_token, 7.0);
  // The chunks are loadable as soon as the step ends: nothing is in flight, nothing held.
  const HostTier* tier = engine.host_tier();
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->Lookup(ChunkKeys(Tokens(20))), 2);
  EXPECT_EQ(engine.blocks().num_free(), 32);
  EXPECT_FALSE(engine.NextTimedEvent().has_value());
  EXPECT_EQ(engine.host_stores().copies, 1u);
  EXPECT_DOUBLE_EQ(engine.host_stores().bytes, 1600);
  EXPECT_DOUBLE_EQ(engine.host_stores().seconds, 4.0);
}

TEST(LmcacheTest, AStoringStepPaysTheBookkeepingOnce) {
  EngineConfig c = LmcacheConfig();
  c.lmcache_store_fixed_s = 0.5;
  c.max_num_batched_tokens = 12;  // a 20-token prompt prefills in chunks of 12 and 8
  Engine engine(c);
  engine.Submit(Spec("a", Tokens(20), /*max_tokens=*/2));
  // Step 1 stores one chunk (2 s) after the bookkeeping.
  EXPECT_DOUBLE_EQ(engine.Step().duration, 1.0 + 1.2 + 0.5 + 2.0);
  // Step 2 stores the second; step 3 decodes and stores nothing, so pays nothing.
  EXPECT_DOUBLE_EQ(engine.Step().duration, 1.0 + 0.8 + 0.5 + 2.0);
  EXPECT_DOUBLE_EQ(engine.Step().duration, 1.5);
  EXPECT_DOUBLE_EQ(engine.host_stores().seconds, 2 * 2.5);
}

TEST(LmcacheTest, TheNativeBackendStoresBesideTheSteps) {
  Engine engine(LmcacheConfig(/*lmcache=*/false));
  engine.Submit(Spec("a", Tokens(20)));
  const StepResult s = engine.Step();
  // Compute only: the copies run on their own stream after the step.
  EXPECT_DOUBLE_EQ(s.duration, 3.0);
  EXPECT_EQ(engine.host_stores().copies, 0u);
  // The request finished but holds its blocks until the copy of 5 blocks (2,000 B at 800 B/s)
  // lands, 2.5 s after the step.
  EXPECT_EQ(engine.blocks().num_free(), 32 - 5);
  engine.AdvanceTo(5.5);
  EXPECT_EQ(engine.host_stores().copies, 1u);
  EXPECT_EQ(engine.blocks().num_free(), 32);
}

TEST(LmcacheTest, TheConnectorsSchedulingLengthensEveryStep) {
  EngineConfig c = LmcacheConfig();
  c.lmcache_schedule_s = 0.25;
  Engine engine(c);
  engine.Submit(Spec("a", Tokens(20), /*max_tokens=*/3));
  // The prefill step: its scheduling, 1 + 2.0 s of compute, 4 s of stores.
  StepResult s = engine.Step();
  EXPECT_DOUBLE_EQ(s.duration, 0.25 + 7.0);
  // A decode step stores nothing but is scheduled all the same.
  s = engine.Step();
  EXPECT_DOUBLE_EQ(s.duration, 0.25 + 1.5);
  // The native connector's scheduling is vLLM's own, inside step_fixed_s.
  c.lmcache = false;
  c.host_block_size = 4;
  Engine native(c);
  native.Submit(Spec("a", Tokens(20), /*max_tokens=*/3));
  EXPECT_DOUBLE_EQ(native.Step().duration, 3.0);
  EXPECT_DOUBLE_EQ(native.Step().duration, 1.5);
}

TEST(LmcacheTest, OnlyWholeChunksOfThePromptAreStored) {
  EngineConfig c = LmcacheConfig();
  c.max_num_batched_tokens = 12;  // a 20-token prompt prefills in chunks of 12 and 8
  Engine engine(c);
  engine.Submit(Spec("a", Tokens(20), /*max_tokens=*/9));
  // Step 1 computes 12 tokens: one whole chunk (8) stored, 2 s; the partial one waits.
  StepResult s = engine.Step();
  EXPECT_DOUBLE_EQ(s.duration, 1.0 + 1.2 + 2.0);
  // Step 2 computes 8 more (20): the second chunk (8..15) is stored; the last 4 prompt
  // tokens never make a whole chunk and are dropped (save_unfull_chunk off).
  s = engine.Step();
  EXPECT_DOUBLE_EQ(s.duration, 1.0 + 0.8 + 2.0);
  // Decodes store nothing, even where generated tokens complete a chunk (20 + 8 = 28).
  for (int i = 0; i < 8; ++i) {
    s = engine.Step();
    EXPECT_DOUBLE_EQ(s.duration, 1.5) << "decode step " << i;
  }
  EXPECT_EQ(engine.num_running(), 0);
  EXPECT_EQ(engine.host_tier()->num_used(), 2);
  EXPECT_DOUBLE_EQ(engine.host_stores().bytes, 1600);
}

TEST(LmcacheTest, AHitIsCountedInWholeChunksFromThePromptsStart) {
  Engine engine(LmcacheConfig());
  RunRequest(engine, Spec("a", Tokens(16)));  // chunks 0..7 and 8..15 stored
  ASSERT_TRUE(engine.ResetPrefixCache());
  // Shares 12 tokens with a: one whole chunk (8 tokens), not three GPU blocks (12).
  std::vector<int32_t> b = Tokens(12);
  const std::vector<int32_t> tail = Tokens(8, 500);
  b.insert(b.end(), tail.begin(), tail.end());
  EXPECT_EQ(engine.CachedPromptTokens(b), 8);
  const RequestInfo info = RunRequest(engine, Spec("b", b));
  EXPECT_EQ(info.cached_tokens, 8);
  EXPECT_EQ(info.host_loaded_tokens, 8);
}

TEST(LmcacheTest, ARetrieveBlocksTheStepThatAdmitsTheRequest) {
  Engine engine(LmcacheConfig());
  RunRequest(engine, Spec("a", Tokens(16)));  // 2 chunks stored; the step ends at 1 + 1.6 + 4
  ASSERT_TRUE(engine.ResetPrefixCache());
  const double t0 = engine.now();
  // 24 tokens, the first 16 in LMCache: the admitting step retrieves them (1,600 B at
  // 800 B/s = 2 s) before its forward pass, computes the other 8 (1.8 s) and stores their
  // chunk (2 s). The request is never parked: it runs, and samples, in that same step.
  const RequestHandle h = engine.Submit(Spec("b", Tokens(24)));
  const StepResult s = engine.Step();
  EXPECT_DOUBLE_EQ(s.start, t0);
  EXPECT_DOUBLE_EQ(s.duration, 2.0 + 1.8 + 2.0);
  EXPECT_EQ(s.prefill_tokens, 8);
  EXPECT_EQ(engine.num_waiting(), 0);
  const RequestInfo* info = engine.Info(h);
  ASSERT_NE(info, nullptr);
  EXPECT_DOUBLE_EQ(info->first_token, t0 + 5.8);
  EXPECT_EQ(info->cached_tokens, 16);
  EXPECT_EQ(info->host_loaded_tokens, 16);
  EXPECT_EQ(engine.host_loads().copies, 1u);
  EXPECT_DOUBLE_EQ(engine.host_loads().bytes, 1600);
  EXPECT_EQ(engine.counters().external_prefix_cache_hits, 16u);
}

TEST(LmcacheTest, ARetrieveCopiesTheWholeChunkTheGpuHitEndsIn) {
  Engine engine(LmcacheConfig());
  RunRequest(engine, Spec("a", Tokens(16)));
  ASSERT_TRUE(engine.ResetPrefixCache());
  RunRequest(engine, Spec("warm", Tokens(5)));  // the GPU caches block 0..3 again, no chunk
  ASSERT_EQ(engine.host_tier()->num_used(), 2);
  const double t0 = engine.now();
  // GPU hit 4 tokens, LMCache 16: 12 tokens are new to the GPU, but the retrieve masks only
  // whole chunks the GPU holds (none here), so it copies all 16 tokens' KV (2 s).
  const RequestHandle h = engine.Submit(Spec("b", Tokens(24)));
  const StepResult s = engine.Step();
  EXPECT_DOUBLE_EQ(s.duration, 2.0 + 1.8 + 2.0);
  EXPECT_DOUBLE_EQ(engine.host_loads().bytes, 1600);
  const RequestInfo* info = engine.Info(h);
  ASSERT_NE(info, nullptr);
  EXPECT_DOUBLE_EQ(info->first_token, t0 + 5.8);
  EXPECT_EQ(info->cached_tokens, 16);
  EXPECT_EQ(info->host_loaded_tokens, 12);
}

TEST(LmcacheTest, AWholePromptHitRecomputesItsLastToken) {
  Engine engine(LmcacheConfig());
  RunRequest(engine, Spec("a", Tokens(16)));
  ASSERT_TRUE(engine.ResetPrefixCache());
  const RequestHandle h = engine.Submit(Spec("again", Tokens(16)));
  const StepResult s = engine.Step();
  // Retrieve all 16 tokens (2 s), compute the last one (priced as the decode it is to the
  // step model: 1.5 s); nothing new to store.
  EXPECT_DOUBLE_EQ(s.duration, 2.0 + 1.5);
  const RequestInfo* info = engine.Info(h);
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->cached_tokens, 15);
  EXPECT_EQ(info->host_loaded_tokens, 15);
}

TEST(LmcacheTest, TheProfileSetsTheChunkAndPerRankRates) {
  Profile p = DefaultProfile();
  p.kv_offloading.size_gib = 1;
  EngineConfig native = EngineConfig::FromProfile(p);
  EXPECT_FALSE(native.lmcache);
  EXPECT_EQ(native.host_block_size, p.block_size);
  p.kv_offloading.backend = KvOffloadingBackend::kLmcache;
  p.deployment.tensor_parallel = 2;
  const EngineConfig c = EngineConfig::FromProfile(p);
  EXPECT_TRUE(c.lmcache);
  EXPECT_EQ(c.host_block_size, 256);
  // Every TP rank copies its share at once (LMCache PR #1413's per-rank logs), after ~4 ms
  // of bookkeeping.
  EXPECT_DOUBLE_EQ(c.lmcache_store_bandwidth_bytes_per_s, 2 * 53.6e9);
  EXPECT_DOUBLE_EQ(c.lmcache_store_fixed_s, 4e-3);
  EXPECT_DOUBLE_EQ(c.lmcache_load_bandwidth_bytes_per_s, 2 * 41.1e9);
  // The scheduler's time per step, 2.85 ms with LMCache against 1.76 ms without.
  EXPECT_DOUBLE_EQ(c.lmcache_schedule_s, 1.09e-3);
  EXPECT_EQ(p.NumHostBlocks(),
            static_cast<int64_t>(1073741824.0 / (p.KvBytesPerToken() * 256)));
  EXPECT_EQ(KvOffloadingBackendByName("lmcache"), KvOffloadingBackend::kLmcache);
  EXPECT_EQ(KvOffloadingBackendByName("lmcache_mp"), std::nullopt);
}

}  // namespace
}  // namespace sim
