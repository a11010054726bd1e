// The engine's cost model: context-dependent prefill, mixture-of-experts weight reads, KV
// pulls sharing the NIC with per-descriptor costs, and the profile switches that change
// admission and multi-turn reuse. Driven on the virtual clock with round numbers.
#include <gtest/gtest.h>

#include <numeric>

#include "sim/engine.h"
#include "sim/kv_fabric.h"
#include "sim/nic_share.h"
#include "sim/tokenizer.h"

namespace sim {
namespace {

EngineConfig RoundConfig() {
  EngineConfig c;
  c.block_size = 4;
  c.num_gpu_blocks = 64;
  c.max_num_batched_tokens = 8;
  c.max_num_seqs = 8;
  c.timing = TimingModel{.step_fixed_s = 1.0,
                         .prefill_s_per_token = 0.1,
                         .decode_s_per_seq = 0.5,
                         .kv_read_s_per_token = 0,
                         .attn_s_per_token_pair = 0.01};
  c.link = LinkModel{.bandwidth_bytes_per_s = 1000, .overhead_s = 2.0};
  c.kv_bytes_per_token = 100;
  c.mean_output_tokens = 4;
  return c;
}

std::vector<int32_t> Tokens(int n, int32_t start = 0) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

RequestSpec Spec(const std::string& id, std::vector<int32_t> prompt, int max_tokens) {
  return RequestSpec{.request_id = id,
                     .prompt = std::move(prompt),
                     .max_tokens = max_tokens,
                     .ignore_eos = true,
                     .output_seed = 1};
}

void RunToIdle(Engine& engine) {
  for (int guard = 0; guard < 100000; ++guard) {
    if (engine.HasRunnableWork()) {
      engine.Step();
    } else if (std::optional<double> t = engine.NextTimedEvent()) {
      engine.AdvanceTo(*t);
    } else {
      return;
    }
  }
  FAIL() << "engine did not go idle";
}

TEST(EngineCostTest, LaterChunksOfALongPromptCostMoreAttention) {
  Engine engine(RoundConfig());
  engine.Submit(Spec("long", Tokens(16), 1));
  // Chunks of 8 at context 0 and 8: 1 + 0.8 + 0.01 x 8 x (c + 4).
  StepResult first = engine.Step();
  EXPECT_DOUBLE_EQ(first.duration, 1 + 0.8 + 0.01 * 8 * 4);
  StepResult second = engine.Step();
  EXPECT_DOUBLE_EQ(second.duration, 1 + 0.8 + 0.01 * 8 * 12);
}

TEST(EngineCostTest, CachedPrefixStillCountsAsAttentionContext) {
  Engine engine(RoundConfig());
  engine.Submit(Spec("warm", Tokens(8), 1));
  RunToIdle(engine);
  engine.Submit(Spec("hit", Tokens(12), 1));
  // The warm prompt's two full blocks hit; 4 new tokens attend to them and to each other.
  StepResult s = engine.Step();
  EXPECT_EQ(s.prefill_tokens, 4);
  EXPECT_DOUBLE_EQ(s.duration, 1 + 0.4 + 0.01 * 4 * (8 + 2));
}

TEST(EngineCostTest, ExpertWeightReadsSaturateWithTheBatch) {
  EngineConfig c = RoundConfig();
  c.timing = TimingModel{.step_fixed_s = 0,
                         .prefill_s_per_token = 0,
                         .decode_s_per_seq = 0,
                         .kv_read_s_per_token = 0,
                         .weight_read_s = 1.0,
                         .expert_weight_fraction = 0.5,
                         .num_experts = 4,
                         .experts_per_token = 1};
  Engine engine(c);
  const std::pair<int64_t, int64_t> none[] = {{0, 0}};
  // One token touches a quarter of the experts; two touch 1 - (3/4)^2.
  EXPECT_DOUBLE_EQ(engine.StepCost(std::span(none, 0), 1, 0), 0.5 + 0.5 * 0.25);
  EXPECT_DOUBLE_EQ(engine.StepCost(std::span(none, 0), 2, 0), 0.5 + 0.5 * (1 - 0.5625));
  EXPECT_NEAR(engine.StepCost(std::span(none, 0), 200, 0), 1.0, 1e-12);
}

TEST(EngineCostTest, PullPaysHandoverAndOneDescriptorPerBlockLayerAndKv) {
  EngineConfig c = RoundConfig();
  c.num_layers = 3;
  c.link.per_descriptor_s = 0.01;
  Engine engine(c);
  // 9 tokens: 3 blocks x 3 layers x 2 = 18 descriptors.
  EXPECT_DOUBLE_EQ(engine.TransferFixedTime(9), 2.0 + 0.18);
  EXPECT_DOUBLE_EQ(engine.TransferTime(9), 2.0 + 0.18 + 0.9);
}

TEST(EngineCostTest, ConcurrentPullsShareTheNic) {
  Engine engine(RoundConfig());
  RequestSpec a = Spec("a", Tokens(11, 0), 1);
  a.pull_remote_kv = true;
  RequestSpec b = Spec("b", Tokens(11, 1000), 1);
  b.pull_remote_kv = true;
  const RequestHandle ha = engine.Submit(a);
  const RequestHandle hb = engine.Submit(b);
  engine.Step();  // both admitted at t = 0
  // Each moves 10 x 100 B after a 2 s handover; sharing 1000 B/s, both end at 2 + 2.
  ASSERT_TRUE(engine.NextTimedEvent().has_value());
  EXPECT_DOUBLE_EQ(*engine.NextTimedEvent(), 4.0);
  RunToIdle(engine);
  EXPECT_EQ(engine.Info(ha)->pulled_tokens, 10);
  EXPECT_EQ(engine.Info(hb)->pulled_tokens, 10);
  EXPECT_GE(engine.Info(ha)->first_token, 4.0);
}

TEST(EngineCostTest, APullArrivingLaterSlowsTheOneInFlight) {
  Engine engine(RoundConfig());
  RequestSpec a = Spec("a", Tokens(21, 0), 1);  // 20 tokens: 2,000 B flowing from t = 2
  a.pull_remote_kv = true;
  const RequestHandle ha = engine.Submit(a);
  engine.Step();
  EXPECT_DOUBLE_EQ(*engine.NextTimedEvent(), 4.0);  // alone: 2 + 2 s
  engine.AdvanceTo(1.0);
  RequestSpec b = Spec("b", Tokens(11, 1000), 1);  // 10 tokens: 1,000 B flowing from t = 3
  b.pull_remote_kv = true;
  const RequestHandle hb = engine.Submit(b);
  engine.Step();
  // At t = 3 both have 1,000 B left and share the link: both end at 5.
  EXPECT_DOUBLE_EQ(*engine.NextTimedEvent(), 5.0);
  RunToIdle(engine);
  EXPECT_GE(engine.Info(ha)->first_token, 5.0);
  EXPECT_GE(engine.Info(hb)->first_token, 5.0);
}

TEST(SharedLinkTest, OverlappingTransfersShareThenSpeedUp) {
  std::vector<SharedTransfer> t = {{.start = 0, .bytes = 3000}, {.start = 1, .bytes = 1000}};
  std::vector<SharedTransfer*> p = {&t[0], &t[1]};
  RunSharedLink(p, 1000, 0, kForever);
  // 0-1: first alone (1,000 B). 1-3: shared, 1,000 B each, second done at 3. 3-4: first alone.
  EXPECT_DOUBLE_EQ(t[1].finish, 3.0);
  EXPECT_DOUBLE_EQ(t[0].finish, 4.0);
}

TEST(SharedLinkTest, ACappedTransferLeavesItsShareToTheOthers) {
  // The first one's source sends at most 250 B/s; the second takes the remaining 750 B/s.
  std::vector<SharedTransfer> t = {{.start = 0, .bytes = 500, .max_rate = 250},
                                   {.start = 0, .bytes = 1500}};
  std::vector<SharedTransfer*> p = {&t[0], &t[1]};
  RunSharedLink(p, 1000, 0, kForever);
  EXPECT_DOUBLE_EQ(t[0].finish, 2.0);
  EXPECT_DOUBLE_EQ(t[1].finish, 2.0);
}

TEST(EngineCostTest, APullFromABusySourceGetsItsShareOfThatNic) {
  Engine engine(RoundConfig());
  RequestSpec a = Spec("a", Tokens(11), 1);  // 1,000 B after the 2 s handover
  a.pull_remote_kv = true;
  a.source_pulls = 4;  // the source serves three other instances too: 250 B/s for this one
  engine.Submit(a);
  engine.Step();
  EXPECT_DOUBLE_EQ(*engine.NextTimedEvent(), 2.0 + 4.0);
}

TEST(SharedLinkTest, DrainingStopsAtTheGivenTime) {
  std::vector<SharedTransfer> t = {{.start = 0, .bytes = 3000}};
  std::vector<SharedTransfer*> p = {&t[0]};
  RunSharedLink(p, 1000, 0, 1.5);
  EXPECT_DOUBLE_EQ(t[0].bytes, 1500);
  EXPECT_LT(t[0].finish, 0);
}

// Late in a long run a few bytes' remaining time is below the clock's resolution
// (t + bytes / rate == t): the link still finishes them instead of looping.
TEST(SharedLinkTest, RemainderBelowTheClockResolutionStillFinishes) {
  const double t0 = 1e6;
  std::vector<SharedTransfer> t = {{.start = t0, .bytes = 0.5}, {.start = t0, .bytes = 4e9}};
  std::vector<SharedTransfer*> p = {&t[0], &t[1]};
  RunSharedLink(p, 22e9, t0, kForever);
  EXPECT_DOUBLE_EQ(t[0].finish, t0);
  EXPECT_GT(t[1].finish, t0);
  EXPECT_EQ(t[1].bytes, 0);
}

TEST(EngineCostTest, FirstChunkAdmissionLetsInWhatFullPromptAdmissionHoldsBack) {
  EngineConfig c = RoundConfig();
  c.num_gpu_blocks = 6;  // 24 tokens
  Engine strict(c);
  strict.Submit(Spec("a", Tokens(12, 0), 8));
  strict.Step();  // a: 3 blocks, first chunk
  strict.Submit(Spec("b", Tokens(16, 100), 8));
  strict.Step();
  EXPECT_EQ(strict.num_running(), 1);  // b's 4 blocks do not fit next to a's 3 + growth

  c.admission = AdmissionRule::kFirstChunk;
  Engine loose(c);
  loose.Submit(Spec("a", Tokens(12, 0), 8));
  loose.Step();
  loose.Submit(Spec("b", Tokens(16, 100), 8));
  loose.Step();
  EXPECT_EQ(loose.num_running(), 2);  // b's first chunk (the rest of this step's budget) fits
  RunToIdle(loose);
  EXPECT_GT(loose.counters().preemptions, 0u);  // and the pool runs out later
}

TEST(EngineCostTest, WithoutCachedOutputTheNextTurnHitsOnlyThePreviousPrompt) {
  for (const bool cache_output : {true, false}) {
    EngineConfig c = RoundConfig();
    c.cache_generated_blocks = cache_output;
    Engine engine(c);
    RequestSpec turn1 = Spec("t1", Tokens(8), 8);
    const uint64_t seed = turn1.output_seed;
    engine.Submit(turn1);
    RunToIdle(engine);
    // The next turn: the previous prompt, the 8 generated tokens, 4 new ones.
    std::vector<int32_t> next = Tokens(8);
    for (int i = 0; i < 8; ++i) {
      next.push_back(StandInTokenizer::PieceId(StandInTokenizer::GeneratedPiece(seed, i)));
    }
    next.insert(next.end(), {900, 901, 902, 903});
    const RequestHandle second = engine.Submit(Spec("t2", next, 1));
    RunToIdle(engine);
    // 15 tokens were computed in turn 1 (the last sampled token never is): 3 full blocks.
    EXPECT_EQ(engine.Info(second)->cached_tokens, cache_output ? 12 : 8) << cache_output;
  }
}

TEST(EngineCostTest, AwaitingDecodeLegHoldsItsBlocksUntilThePrefillPublishes) {
  Engine engine(RoundConfig());
  RequestSpec leg = Spec("decode", Tokens(11), 1);  // 3 blocks; 10 tokens to pull
  leg.pull_remote_kv = true;
  leg.await_remote_kv = true;
  const RequestHandle h = engine.Submit(leg);
  engine.Step();
  EXPECT_EQ(engine.blocks().num_free(), 64 - 3);  // allocated on arrival
  EXPECT_FALSE(engine.HasRunnableWork());
  EXPECT_FALSE(engine.NextTimedEvent().has_value());  // nothing moves by itself
  engine.AdvanceTo(5.0);                              // the prefill runs elsewhere
  engine.StartPull(h);
  ASSERT_TRUE(engine.NextTimedEvent().has_value());
  EXPECT_DOUBLE_EQ(*engine.NextTimedEvent(), 5.0 + 2.0 + 1.0);
  RunToIdle(engine);
  EXPECT_EQ(engine.Info(h)->pulled_tokens, 10);
  EXPECT_EQ(engine.Info(h)->cached_tokens, 10);
}

TEST(EngineCostTest, AwaitingDecodeLegWithoutPrefillComputesInItsBlocks) {
  Engine engine(RoundConfig());
  RequestSpec leg = Spec("decode", Tokens(11), 1);
  leg.pull_remote_kv = true;
  leg.await_remote_kv = true;
  const RequestHandle h = engine.Submit(leg);
  engine.Step();
  engine.CancelPull(h);
  EXPECT_TRUE(engine.HasRunnableWork());
  RunToIdle(engine);
  EXPECT_EQ(engine.Info(h)->pulled_tokens, 0);
  EXPECT_EQ(engine.Info(h)->cached_tokens, 0);
  EXPECT_EQ(engine.Info(h)->completion_tokens, 1);
  EXPECT_EQ(engine.counters().external_prefix_cache_hits, 0u);
}

class FakeHolder : public KvHolder {
 public:
  void ReleaseHeldKv(const std::string&) override {}
  int instance_index() const override { return 0; }
};

TEST(KvFabricTest, ClaimsCountThePullsSharingTheSourceNic) {
  KvFabric fabric;
  FakeHolder source, other;
  fabric.Publish("nixl:a", KvHandle{&source, "a"});
  fabric.Publish("nixl:b", KvHandle{&source, "b"});
  fabric.Publish("nixl:c", KvHandle{&other, "c"});
  EXPECT_EQ(fabric.Claim("nixl:a")->source_pulls, 1);
  EXPECT_EQ(fabric.Claim("nixl:b")->source_pulls, 2);
  EXPECT_EQ(fabric.Claim("nixl:c")->source_pulls, 1);  // another NIC
  fabric.EndPull(&source);
  fabric.Publish("mooncake:d", KvHandle{&source, "d"});
  int seen = 0;
  fabric.ClaimOrWait("mooncake:d", [&](KvHandle h) { seen = h.source_pulls; });
  EXPECT_EQ(seen, 2);  // b and d
}

}  // namespace
}  // namespace sim
