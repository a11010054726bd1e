#include "bench/kvroute_bench/compute_floor.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "sim/engine.h"
#include "sim/profile.h"

namespace kvroute::bench {
namespace {

const std::string kH20Profile =
    (std::filesystem::path(KVROUTE_SOURCE_DIR) / "configs/profiles/h20-qwen3-coder-30b-a3b.yaml")
        .string();

std::vector<int32_t> Tokens(int n, int32_t first) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Time from arrival to the first token of `prompt` on an idle engine.
double IdleTtft(sim::Engine& engine, const std::string& id, std::vector<int32_t> prompt,
                int* cached) {
  const sim::RequestHandle h =
      engine.Submit({.request_id = id, .prompt = std::move(prompt), .max_tokens = 1});
  while (engine.HasRunnableWork()) engine.Step();
  const sim::RequestInfo* info = engine.Info(h);
  *cached = info->cached_tokens;
  return info->first_token - info->arrival;
}

TEST(ComputeFloorTest, MatchesTheSimulatorOnAnIdleInstance) {
  absl::StatusOr<sim::Profile> profile = sim::LoadProfile(kH20Profile);
  ASSERT_TRUE(profile.ok()) << profile.status();
  sim::Engine engine(sim::EngineConfig::FromProfile(*profile));
  // A cold 30,000-token prompt: four chunks of max_num_batched_tokens (8,192).
  int cached = -1;
  std::vector<int32_t> prompt = Tokens(30000, 1);
  const double cold = IdleTtft(engine, "cold", prompt, &cached);
  EXPECT_EQ(cached, 0);
  EXPECT_NEAR(PrefillFloorSeconds(*profile, 30000, 0), cold, 1e-9);
  // The same prompt grown by 5,000 tokens: its 30,000-token prefix is cached.
  std::vector<int32_t> longer = prompt;
  const std::vector<int32_t> more = Tokens(5000, 100000);
  longer.insert(longer.end(), more.begin(), more.end());
  const double warm = IdleTtft(engine, "warm", longer, &cached);
  EXPECT_GT(cached, 29000);
  EXPECT_NEAR(PrefillFloorSeconds(*profile, 35000, cached), warm, 1e-9);
  EXPECT_LT(warm, cold);
  // Fully cached: the last token is recomputed as one decode step.
  const double again = IdleTtft(engine, "again", longer, &cached);
  EXPECT_NEAR(PrefillFloorSeconds(*profile, 35000, cached), again, 1e-9);
}

TEST(ComputeFloorTest, ProfileAnchorsAndUnknownInput) {
  absl::StatusOr<sim::Profile> profile = sim::LoadProfile(kH20Profile);
  ASSERT_TRUE(profile.ok()) << profile.status();
  // The profile's calibration anchor (sim/README.md): TTFT 1.19 s for 8K tokens.
  EXPECT_NEAR(PrefillFloorSeconds(*profile, 8192, 0), 1.19, 0.1);
  EXPECT_EQ(PrefillFloorSeconds(*profile, 0, 0), 0);
  EXPECT_NEAR(PrefillFloorSeconds(*profile, 1000, 5000), PrefillFloorSeconds(*profile, 1000, 999),
              1e-12);  // more cached than the prompt: still the last token

  RunOptions run;
  ASSERT_TRUE(UseFleetProfile(kH20Profile, run).ok());
  ASSERT_TRUE(run.prefill_floor);
  EXPECT_DOUBLE_EQ(run.prefill_floor(30000, 0), PrefillFloorSeconds(*profile, 30000, 0));
  EXPECT_DOUBLE_EQ(run.kv_bytes_per_token, 98304);
  const absl::Status missing = UseFleetProfile("/nonexistent/profile.yaml", run);
  EXPECT_FALSE(missing.ok());
}

}  // namespace
}  // namespace kvroute::bench
