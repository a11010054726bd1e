#include "classifier/classifier.h"

#include <random>

#include "gtest/gtest.h"

namespace kvroute::classifier {
namespace {

struct Case {
  int64_t prompt;
  int64_t cached;
  RequestClass want;
};

TEST(ClassifyTest, DefaultThresholdsTable) {
  const Thresholds t;  // heavy 20000, warm_new 5000, warm fraction 0.5
  const Case cases[] = {
      {0, 0, RequestClass::kWarm},
      {4999, 0, RequestClass::kWarm},    // few new tokens
      {5000, 0, RequestClass::kMedium},  // exactly warm_new_tokens: not WARM
      {19999, 0, RequestClass::kMedium},
      {20000, 0, RequestClass::kHeavy},  // new == T is HEAVY
      {30000, 0, RequestClass::kHeavy},
      {30000, 15000, RequestClass::kMedium},  // exactly half cached is not > 0.5
      {30000, 15001, RequestClass::kWarm},    // more than half cached
      {100000, 79000, RequestClass::kWarm},   // 79% cached
      {100000, 40000, RequestClass::kHeavy},  // 60k new tokens
      {100000, 85000, RequestClass::kWarm},
      {30000, 40000, RequestClass::kWarm},  // over-estimate clamps to prompt
      {30000, -5, RequestClass::kHeavy},    // negative cached treated as 0
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Classify(c.prompt, c.cached, t), c.want)
        << "prompt=" << c.prompt << " cached=" << c.cached;
  }
}

TEST(ClassifyTest, HeavyThresholdIsConfigurable) {
  Thresholds t;
  t.heavy_threshold = 40000;
  EXPECT_EQ(Classify(30000, 0, t), RequestClass::kMedium);
  EXPECT_EQ(Classify(40000, 0, t), RequestClass::kHeavy);
  t.warm_new_tokens = 100;
  t.warm_cached_fraction = 0.9;
  EXPECT_EQ(Classify(1000, 850, t), RequestClass::kMedium);
  EXPECT_EQ(Classify(1000, 950, t), RequestClass::kWarm);
}

// Property: with the WARM rules out of the way, HEAVY exactly when
// new_tokens >= T.
TEST(ClassifyTest, HeavyExactlyWhenNewTokensReachThreshold) {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 20000; ++i) {
    Thresholds t;
    t.heavy_threshold = std::uniform_int_distribution<int64_t>(1, 200000)(rng);
    t.warm_new_tokens = std::uniform_int_distribution<int64_t>(0, 10000)(rng);
    t.warm_cached_fraction = std::uniform_real_distribution<double>(0, 1)(rng);
    const int64_t prompt = std::uniform_int_distribution<int64_t>(0, 300000)(rng);
    const int64_t cached = std::uniform_int_distribution<int64_t>(0, prompt)(rng);
    const int64_t new_tokens = prompt - cached;
    const bool warm =
        (prompt > 0 && static_cast<double>(cached) / prompt > t.warm_cached_fraction) ||
        new_tokens < t.warm_new_tokens;
    const RequestClass c = Classify(prompt, cached, t);
    if (warm) {
      EXPECT_EQ(c, RequestClass::kWarm);
    } else {
      EXPECT_EQ(c == RequestClass::kHeavy, new_tokens >= t.heavy_threshold)
          << prompt << " " << cached << " T=" << t.heavy_threshold;
    }
  }
}

TEST(OffloadCostTest, MovesOnlyWhatDecodeLacks) {
  OffloadCostParams p;
  p.kv_bytes_per_token = 1000;
  p.link_bytes_per_second = 1e6;
  p.transfer_overhead_seconds = 0.5;
  p.prefill_tokens_per_second = 1000;
  const OffloadEstimate e = EstimateOffload({.prompt_tokens = 3000,
                                             .decode_cached_tokens = 1000,
                                             .prefill_cached_tokens = 500,
                                             .decode_queued_prefill_tokens = 4000,
                                             .prefill_queued_prefill_tokens = 0},
                                            p);
  EXPECT_EQ(e.tokens_to_move, 2000);
  EXPECT_DOUBLE_EQ(e.kv_bytes_to_move, 2e6);
  EXPECT_DOUBLE_EQ(e.transfer_seconds, 0.5 + 2.0);
  EXPECT_DOUBLE_EQ(e.prefill_seconds_saved_on_decode, 2.0);
  EXPECT_DOUBLE_EQ(e.ttft_colocated_seconds, (4000 + 2000) / 1000.0);
  EXPECT_DOUBLE_EQ(e.ttft_offload_seconds, 2500 / 1000.0 + 2.5);
  EXPECT_FALSE(e.worthwhile);  // 2 s saved < 2.5 s transfer
}

TEST(OffloadCostTest, FastLinkMakesOffloadWorthwhile) {
  const OffloadCostParams p;  // defaults: 128 KiB/token, 25 GB/s, 10k tok/s
  const OffloadEstimate e = EstimateOffload({.prompt_tokens = 30000}, p);
  EXPECT_EQ(e.tokens_to_move, 30000);
  EXPECT_NEAR(e.transfer_seconds, 0.002 + 30000.0 * 131072 / 25e9, 1e-9);
  EXPECT_DOUBLE_EQ(e.prefill_seconds_saved_on_decode, 3.0);
  EXPECT_TRUE(e.worthwhile);
}

TEST(OffloadCostTest, NothingToMoveSavesNothing) {
  const OffloadEstimate e =
      EstimateOffload({.prompt_tokens = 1000, .decode_cached_tokens = 1000}, {});
  EXPECT_EQ(e.tokens_to_move, 0);
  EXPECT_FALSE(e.worthwhile);
}

}  // namespace
}  // namespace kvroute::classifier

namespace kvroute::classifier {
namespace {
TEST(OffloadCostTest, FromProfile) {
  // Llama-3-8B: 32 layers, 8 KV heads, head dim 128, BF16 -> 128 KiB/token.
  const kvsize::ModelArch arch{.name = "llama-3-8b",
                               .num_attention_layers = 32,
                               .num_kv_heads = 8,
                               .head_dim = 128,
                               .kv_bytes_per_element = 2};
  const OffloadCostParams p = OffloadCostFromProfile(arch, 25e9, 12000);
  EXPECT_DOUBLE_EQ(p.kv_bytes_per_token, 131072);
  EXPECT_DOUBLE_EQ(p.link_bytes_per_second, 25e9);
  EXPECT_DOUBLE_EQ(p.prefill_tokens_per_second, 12000);
  EXPECT_DOUBLE_EQ(p.transfer_overhead_seconds, 0.002);
}

// The gate depends on the fleet the config describes: Qwen3-Coder-30B-A3B on
// H20 (98,304 B/token, ~7,000 prefill tokens/s, the profile's 0.1 s
// overhead) over 200 Gb RDMA or 10 GbE TCP, with the configured margin.
TEST(OffloadCostTest, ConfiguredFleetDecidesTheGate) {
  const kvsize::ModelArch qwen{.name = "qwen3-coder-30b-a3b",
                               .num_attention_layers = 48,
                               .num_kv_heads = 4,
                               .head_dim = 128,
                               .kv_bytes_per_element = 2};
  const OffloadCase heavy{.prompt_tokens = 8000};
  OffloadCostParams rdma = OffloadCostFromProfile(qwen, 25e9, 7000, 0.1);
  const OffloadEstimate on_rdma = EstimateOffload(heavy, rdma);
  EXPECT_NEAR(on_rdma.transfer_seconds, 0.1 + 8000.0 * 98304 / 25e9, 1e-9);
  EXPECT_TRUE(on_rdma.worthwhile);  // 1.14 s saved > 0.13 s moved

  OffloadCostParams tcp = OffloadCostFromProfile(qwen, 1.25e9, 7000, 0.1);
  EXPECT_TRUE(EstimateOffload(heavy, tcp).worthwhile);  // 1.14 s > 0.73 s
  tcp.margin = 2;
  EXPECT_FALSE(EstimateOffload(heavy, tcp).worthwhile);  // 1.14 s < 2 x 0.73 s
  rdma.margin = 2;
  EXPECT_TRUE(EstimateOffload(heavy, rdma).worthwhile);
}

}  // namespace
}  // namespace kvroute::classifier
