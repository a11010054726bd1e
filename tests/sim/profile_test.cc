#include "sim/profile.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

namespace sim {
namespace {

std::string ProfilePath(const std::string& name) {
  return (std::filesystem::path(KVROUTE_SOURCE_DIR) / "configs/profiles" / name).string();
}

TEST(ProfileTest, H20FleetProfileDerivesItsCapacity) {
  absl::StatusOr<Profile> p = LoadProfile(ProfilePath("h20-qwen3-coder-30b-a3b.yaml"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->model_name, "Qwen/Qwen3-Coder-30B-A3B-Instruct");
  EXPECT_DOUBLE_EQ(p->KvBytesPerToken(), 98304);
  // 97,871 MiB of H20 memory: (0.9 x 102.6e9 - 3.22e9 - 61e9) / 98,304.
  EXPECT_NEAR(p->Capacity().token_capacity, 286.05e3, 0.1e3);
  EXPECT_EQ(p->NumGpuBlocks(), static_cast<int64_t>(p->Capacity().token_capacity / 16));
  EXPECT_EQ(p->max_num_seqs, 1024);
  EXPECT_EQ(p->admission, AdmissionRule::kFullPrompt);
  EXPECT_FALSE(p->always_report_cached_tokens);
  EXPECT_EQ(p->timing.num_experts, 128);
  EXPECT_DOUBLE_EQ(p->link.per_descriptor_s, 2.8e-6);
}

TEST(ProfileTest, BuiltInDefaultIsTheH20Profile) {
  absl::StatusOr<Profile> file = LoadProfile(ProfilePath("h20-qwen3-coder-30b-a3b.yaml"));
  ASSERT_TRUE(file.ok()) << file.status();
  const Profile builtin = DefaultProfile();
  EXPECT_EQ(builtin.NumGpuBlocks(), file->NumGpuBlocks());
  EXPECT_DOUBLE_EQ(builtin.timing.step_fixed_s, file->timing.step_fixed_s);
  EXPECT_DOUBLE_EQ(builtin.timing.prefill_s_per_token, file->timing.prefill_s_per_token);
  EXPECT_DOUBLE_EQ(builtin.timing.attn_s_per_token_pair, file->timing.attn_s_per_token_pair);
  EXPECT_DOUBLE_EQ(builtin.timing.weight_read_s, file->timing.weight_read_s);
  EXPECT_DOUBLE_EQ(builtin.timing.expert_weight_fraction, file->timing.expert_weight_fraction);
  EXPECT_DOUBLE_EQ(builtin.timing.decode_s_per_seq, file->timing.decode_s_per_seq);
  EXPECT_DOUBLE_EQ(builtin.timing.kv_read_s_per_token, file->timing.kv_read_s_per_token);
  EXPECT_DOUBLE_EQ(builtin.link.bandwidth_bytes_per_s, file->link.bandwidth_bytes_per_s);
  EXPECT_DOUBLE_EQ(builtin.link.overhead_s, file->link.overhead_s);
  EXPECT_DOUBLE_EQ(builtin.link.per_descriptor_s, file->link.per_descriptor_s);
}

TEST(ProfileTest, MixtureOfExpertsWeightFractionSaturatesWithTokens) {
  TimingModel t{.expert_weight_fraction = 0.95, .num_experts = 128, .experts_per_token = 8};
  EXPECT_NEAR(t.WeightFraction(1), 0.05 + 0.95 * 8.0 / 128, 1e-12);
  EXPECT_NEAR(t.WeightFraction(32), 0.05 + 0.95 * (1 - std::pow(120.0 / 128, 32)), 1e-12);
  EXPECT_NEAR(t.WeightFraction(8192), 1.0, 1e-9);
  EXPECT_DOUBLE_EQ(TimingModel{}.WeightFraction(1), 1.0);  // dense
}

TEST(ProfileTest, LlamaH100ProfileHolds434KTokens) {
  absl::StatusOr<Profile> p = LoadProfile(ProfilePath("h100-llama-3.1-8b.yaml"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_DOUBLE_EQ(p->deployment.utilisation, 0.85);
  EXPECT_NEAR(p->Capacity().token_capacity, 434e3, 1e3);
}

TEST(ProfileTest, TinyTestProfileOverridesTheBlockCount) {
  absl::StatusOr<Profile> p = LoadProfile(ProfilePath("tiny-test.yaml"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->NumGpuBlocks(), 64);
  EXPECT_EQ(p->max_num_batched_tokens, 256);
}

TEST(ProfileTest, HostKvTierIsSizedInOffloadedBlocks) {
  absl::StatusOr<Profile> p = LoadProfile(ProfilePath("h20-qwen3-coder-30b-a3b.yaml"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_DOUBLE_EQ(p->kv_offloading.bandwidth_bytes_per_s, 50e9);
  EXPECT_FALSE(p->kv_offloading.enabled());
  EXPECT_EQ(p->NumHostBlocks(), 0);
  EXPECT_EQ(p->OffloadedBlockSize(), 16);
  // vLLM's CPUOffloadingSpec: cpu_bytes_to_use // bytes of one offloaded block.
  p->kv_offloading.size_gib = 100;
  EXPECT_EQ(p->NumHostBlocks(), static_cast<int64_t>(100.0 * 1073741824 / (98304.0 * 16)));
  p->kv_offloading.block_size = 64;
  EXPECT_EQ(p->NumHostBlocks(), static_cast<int64_t>(100.0 * 1073741824 / (98304.0 * 64)));
  absl::StatusOr<Profile> bad = ParseProfile("kv_offloading:\n  block_size: 24\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              ::testing::HasSubstr("kv_offloading.block_size"));
  EXPECT_FALSE(ParseProfile("kv_offloading:\n  bandwidth_bytes_per_s: 0\n").ok());
  absl::StatusOr<Profile> chunks = ParseProfile("kv_offloading:\n  block_size: 32\n");
  ASSERT_TRUE(chunks.ok()) << chunks.status();
  EXPECT_EQ(chunks->OffloadedBlockSize(), 32);
  absl::StatusOr<Profile> lmcache = ParseProfile("kv_offloading:\n  lmcache_schedule_s: 0.002\n");
  ASSERT_TRUE(lmcache.ok()) << lmcache.status();
  EXPECT_DOUBLE_EQ(lmcache->kv_offloading.lmcache_schedule_s, 0.002);
  bad = ParseProfile("kv_offloading:\n  lmcache_schedule_s: -1\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              ::testing::HasSubstr("kv_offloading.lmcache_schedule_s"));
}

TEST(ProfileTest, BadValuesNameTheKey) {
  absl::StatusOr<Profile> p = ParseProfile("engine:\n  block_size: lots\n");
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), ::testing::HasSubstr("engine.block_size"));
  EXPECT_FALSE(ParseProfile("engine:\n  max_num_seqs: 0\n").ok());
  p = ParseProfile("engine:\n  long_prefill_token_threshold: -1\n");
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()),
              ::testing::HasSubstr("engine.long_prefill_token_threshold"));
  p = ParseProfile("engine:\n  long_prefill_token_threshold: 2048\n");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->long_prefill_token_threshold, 2048);
  p = ParseProfile("engine:\n  admission: sometimes\n");
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), ::testing::HasSubstr("engine.admission"));
  p = ParseProfile("timing:\n  attn_s_per_token_pair: -1\n");
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()),
              ::testing::HasSubstr("timing.attn_s_per_token_pair"));
  EXPECT_FALSE(ParseProfile("timing:\n  num_experts: 4\n  experts_per_token: 8\n").ok());
  p = ParseProfile("engine:\n  admission: first_chunk\n  cache_generated_blocks: false\n");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->admission, AdmissionRule::kFirstChunk);
  EXPECT_FALSE(p->cache_generated_blocks);
  EXPECT_FALSE(ParseProfile("- a list\n").ok());
  EXPECT_FALSE(LoadProfile("/nonexistent.yaml").ok());
  // A model too big for the GPU leaves no KV.
  EXPECT_FALSE(ParseProfile("model:\n  params: 500e9\n").ok());
}

}  // namespace
}  // namespace sim
