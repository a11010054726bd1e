#include "profile/profile_keys.h"

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace kvroute::profile {
namespace {

TEST(ProfileKeysTest, ReadsEveryShippedProfile) {
  namespace fs = std::filesystem;
  int read = 0;
  for (const auto& e : fs::directory_iterator(fs::path(KVROUTE_SOURCE_DIR) / "configs/profiles")) {
    if (e.path().extension() != ".yaml") continue;
    absl::StatusOr<ProfileKeys> k = LoadProfileKeys(e.path().string());
    EXPECT_TRUE(k.ok()) << e.path() << ": " << k.status();
    ++read;
  }
  EXPECT_GE(read, 1);
  absl::StatusOr<ProfileKeys> h20 = LoadProfileKeys(
      (fs::path(KVROUTE_SOURCE_DIR) / "configs/profiles/h20-qwen3-coder-30b-a3b.yaml").string());
  ASSERT_TRUE(h20.ok()) << h20.status();
  EXPECT_EQ(h20->model.num_attention_layers, 48);
  EXPECT_EQ(h20->timing.prefill_s_per_token, 1.1e-4);
  EXPECT_EQ(h20->link.overhead_s, 0.15);
  EXPECT_EQ(h20->engine.admission, "full_prompt");
}

TEST(ProfileKeysTest, AbsentAndNullAreUnsetAndUnknownKeysAreIgnored) {
  absl::StatusOr<ProfileKeys> k = ParseProfileKeys(
      "model: {num_kv_heads: ~, new_key: [1, 2]}\n"
      "timing: {prefill_s_per_token: 5.0e-5, prefill_attn_s_per_token_ctx: 1e-9}\n"
      "link: ~\n"
      "fabric: {anything: goes}\n");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_TRUE(k->model.present);
  EXPECT_FALSE(k->model.num_kv_heads);
  EXPECT_TRUE(k->timing.present);
  EXPECT_EQ(k->timing.prefill_s_per_token, 5.0e-5);
  EXPECT_FALSE(k->timing.step_fixed_s);
  EXPECT_FALSE(k->link.present);
  EXPECT_FALSE(k->engine.present);
}

TEST(ProfileKeysTest, ErrorsNameTheKeyAndTheExpectedType) {
  auto message = [](const std::string& yaml) {
    return std::string(ParseProfileKeys(yaml).status().message());
  };
  EXPECT_EQ(message("engine: {block_size: lots}"),
            "engine.block_size: expected an integer, got 'lots'");
  EXPECT_EQ(message("timing: {step_fixed_s: [1]}"),
            "timing.step_fixed_s: expected a number, got a list");
  EXPECT_EQ(message("engine: {cache_generated_blocks: maybe}"),
            "engine.cache_generated_blocks: expected true or false, got 'maybe'");
  EXPECT_EQ(message("model: {name: {a: 1}}"), "model.name: expected a string, got a map");
  EXPECT_EQ(message("timing: 5"), "timing: expected a map, got '5'");
  EXPECT_EQ(message("- a list"), "expected a YAML map at top level");
  EXPECT_NE(message("model: {name: x").find("YAML syntax error"), std::string::npos);
  EXPECT_EQ(LoadProfileKeys("/nonexistent/p.yaml").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(LoadProfileKeys("/dev/zero").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvroute::profile
