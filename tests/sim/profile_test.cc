#include "sim/profile.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace sim {
namespace {

std::string ProfilePath(const std::string& name) {
  return std::string(KVROUTE_SOURCE_DIR) + "/configs/profiles/" + name;
}

TEST(ProfileTest, H20FleetProfileDerivesItsCapacity) {
  absl::StatusOr<Profile> p = LoadProfile(ProfilePath("h20-qwen3-coder-30b-a3b.yaml"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->model_name, "Qwen/Qwen3-Coder-30B-A3B-Instruct");
  EXPECT_DOUBLE_EQ(p->KvBytesPerToken(), 98304);
  EXPECT_NEAR(p->Capacity().token_capacity, 225.6e3, 0.1e3);
  EXPECT_EQ(p->NumGpuBlocks(), static_cast<int64_t>(p->Capacity().token_capacity / 16));
  EXPECT_NEAR(1 / p->timing.prefill_s_per_token, 7000, 10);
  EXPECT_DOUBLE_EQ(p->link.overhead_s, 0.1);
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

TEST(ProfileTest, BadValuesNameTheKey) {
  absl::StatusOr<Profile> p = ParseProfile("engine:\n  block_size: lots\n");
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), ::testing::HasSubstr("engine.block_size"));
  EXPECT_FALSE(ParseProfile("engine:\n  max_num_seqs: 0\n").ok());
  EXPECT_FALSE(ParseProfile("- a list\n").ok());
  EXPECT_FALSE(LoadProfile("/nonexistent.yaml").ok());
  // A model too big for the GPU leaves no KV.
  EXPECT_FALSE(ParseProfile("model:\n  params: 500e9\n").ok());
}

}  // namespace
}  // namespace sim
