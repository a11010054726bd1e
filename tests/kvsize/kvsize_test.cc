#include "kvsize/kvsize.h"

#include <gtest/gtest.h>

namespace kvsize {
namespace {

// A worked example: Qwen3.6-35B-A3B on 2 x H100.
ModelArch Qwen36() {
  return ModelArch{.name = "Qwen3.6-35B-A3B",
                   .num_attention_layers = 10,
                   .num_kv_heads = 2,
                   .head_dim = 256,
                   .kv_bytes_per_element = 2,
                   .weight_bytes = 35e9 * 2};
}

Deployment TwoH100() {
  return Deployment{.gpu_name = "H100",
                    .gpu_memory_bytes = 85.9e9,
                    .tensor_parallel = 2,
                    .utilisation = 0.9,
                    .overhead_bytes_per_gpu = 3.22e9};
}

TEST(KvSizeTest, WorkedExampleCapacity) {
  const Capacity cap = ComputeCapacity(Qwen36(), TwoH100());
  EXPECT_DOUBLE_EQ(cap.kv_bytes_per_token, 20480);
  EXPECT_NEAR(cap.kv_memory_bytes, 78.18e9, 0.01e9);
  EXPECT_NEAR(cap.token_capacity, 3.817e6, 0.001e6);
  EXPECT_TRUE(cap.warnings.empty());
}

TEST(KvSizeTest, WorkedExampleUtilisationWindow) {
  const Workload wl{.concurrency = 32,
                    .input_tokens = 32768,
                    .output_tokens = 2048,
                    .sessions = 200,
                    .tokens_per_session = 34816};
  const UtilisationWindow w = ComputeUtilisationWindow(Qwen36(), TwoH100(), wl);
  EXPECT_DOUBLE_EQ(w.live_set_tokens, 32.0 * 34816);
  EXPECT_NEAR(w.u_min, 0.58, 0.005);
  EXPECT_NEAR(w.u_max, 1.28, 0.005);
}

TEST(KvSizeTest, TieringSpillAndRetention) {
  const Capacity cap = ComputeCapacity(Qwen36(), TwoH100());
  UtilisationWindow w;
  w.corpus_tokens = 10e6;
  const Tiering t{.cpu_buffer_bytes = 20480.0 * 2e6,
                  .write_rate_tokens_per_s = 10000,
                  .think_time_s = 60,
                  .ttft_s = 2};
  const TieringResult r = ComputeTiering(Qwen36(), cap, w, t);
  EXPECT_DOUBLE_EQ(r.cpu_token_capacity, 2e6);
  EXPECT_NEAR(r.disk_spill_tokens, 10e6 - cap.token_capacity - 2e6, 1);
  EXPECT_DOUBLE_EQ(r.retention_s, 200);
  EXPECT_TRUE(r.retention_ok);
  // The GPU keeps a block for T_GPU / 10,000 = 381.7 s: longer than the CPU tier's 200 s, so
  // a 300 s think time is still covered; 400 s is not.
  EXPECT_NEAR(r.pressure.gpu_retention_s, cap.token_capacity / 10000, 1e-9);
  Tiering slow = t;
  slow.think_time_s = 300;
  EXPECT_TRUE(ComputeTiering(Qwen36(), cap, w, slow).retention_ok);
  slow.think_time_s = 400;
  EXPECT_FALSE(ComputeTiering(Qwen36(), cap, w, slow).retention_ok);
}

TEST(KvSizeTest, WarnsWhenTensorParallelExceedsKvHeads) {
  Deployment dep = TwoH100();
  dep.tensor_parallel = 4;
  const Capacity cap = ComputeCapacity(Qwen36(), dep);
  ASSERT_EQ(cap.warnings.size(), 1u);
  EXPECT_NE(cap.warnings[0].find("replicated"), std::string::npos);
  EXPECT_DOUBLE_EQ(cap.effective_kv_bytes_per_token, 2 * 20480);
}

TEST(KvSizeTest, LlamaOnH100MatchesProfileFigure) {
  const ModelArch llama{.name = "Llama-3.1-8B",
                        .num_attention_layers = 32,
                        .num_kv_heads = 8,
                        .head_dim = 128,
                        .kv_bytes_per_element = 2,
                        .weight_bytes = 8.03e9 * 2};
  const Deployment h100{.gpu_name = "H100",
                        .gpu_memory_bytes = 85.9e9,
                        .tensor_parallel = 1,
                        .utilisation = 0.85,
                        .overhead_bytes_per_gpu = 0};
  const Capacity cap = ComputeCapacity(llama, h100);
  EXPECT_DOUBLE_EQ(cap.kv_bytes_per_token, 131072);
  EXPECT_NEAR(cap.token_capacity, 434e3, 1e3);
  EXPECT_EQ(NumGpuBlocks(cap, 16), static_cast<int64_t>(cap.token_capacity / 16));
}

TEST(KvSizeTest, ModelThatDoesNotFitHasNoCapacity) {
  ModelArch big = Qwen36();
  big.weight_bytes = 200e9;  // more than 2 x 0.9 x 85.9e9
  const Capacity cap = ComputeCapacity(big, TwoH100());
  EXPECT_EQ(cap.token_capacity, 0);
  EXPECT_FALSE(cap.warnings.empty());
  EXPECT_EQ(NumGpuBlocks(cap, 16), 0);
}

}  // namespace
}  // namespace kvsize
