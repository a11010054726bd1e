// The shipped profiles reproduce their calibration anchors (sim/README.md, "Calibration")
// when driven through the engine on its virtual clock: single-request TTFT, decode step time
// at several batch sizes, and a P/D pull's handover. Deterministic: no wall clock.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <string>

#include "sim/engine.h"
#include "sim/profile.h"

namespace sim {
namespace {

constexpr double kTolerance = 0.15;

Profile Load(const std::string& name) {
  absl::StatusOr<Profile> p =
      LoadProfile((std::filesystem::path(KVROUTE_SOURCE_DIR) / "configs/profiles" / name).string());
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : Profile{};
}

std::vector<int32_t> UniqueTokens(int n, int32_t start) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

// Time to first token of one request alone on an idle engine.
double Ttft(const Profile& profile, int prompt_tokens) {
  Engine engine(EngineConfig::FromProfile(profile));
  const RequestHandle h = engine.Submit(RequestSpec{.request_id = "ttft",
                                                    .prompt = UniqueTokens(prompt_tokens, 0),
                                                    .max_tokens = 1,
                                                    .ignore_eos = true});
  while (engine.HasRunnableWork()) engine.Step();
  const RequestInfo* info = engine.Info(h);
  return info->first_token - info->arrival;
}

// Mean duration of the steps in which `batch` sequences of about `context` tokens decode and
// nothing prefills: the TPOT each of them sees.
double Tpot(const Profile& profile, int batch, int context) {
  Engine engine(EngineConfig::FromProfile(profile));
  for (int i = 0; i < batch; ++i) {
    engine.Submit(RequestSpec{.request_id = "d" + std::to_string(i),
                              .prompt = UniqueTokens(context, i * (context + 1)),
                              .max_tokens = 1000000,
                              .ignore_eos = true});
  }
  double sum = 0;
  int steps = 0;
  for (int guard = 0; guard < 100000 && steps < 8; ++guard) {
    const StepResult s = engine.Step();
    if (s.prefill_tokens == 0 && s.decode_seqs == batch) {
      sum += s.duration;
      ++steps;
    }
  }
  EXPECT_EQ(steps, 8) << "batch " << batch << " never decoded alone";
  return sum / std::max(1, steps);
}

// A decode leg that pulls a `prompt_tokens` prompt from a prefill instance: arrival to first
// token on an idle decode instance (vLLM's "handover": step alignment, transfer, the last
// prompt token recomputed).
double PullHandover(Profile profile, int prompt_tokens, int block_size) {
  profile.block_size = block_size;
  Engine engine(EngineConfig::FromProfile(profile));
  const RequestHandle h = engine.Submit(RequestSpec{.request_id = "pull",
                                                    .prompt = UniqueTokens(prompt_tokens, 0),
                                                    .max_tokens = 1,
                                                    .ignore_eos = true,
                                                    .pull_remote_kv = true});
  for (int guard = 0; guard < 1000; ++guard) {
    if (engine.HasRunnableWork()) {
      engine.Step();
    } else if (std::optional<double> t = engine.NextTimedEvent()) {
      engine.AdvanceTo(*t);
    } else {
      break;
    }
  }
  const RequestInfo* info = engine.Info(h);
  EXPECT_EQ(info->pulled_tokens, prompt_tokens - 1);
  return info->first_token - info->arrival;
}

#define EXPECT_WITHIN_15_PERCENT(measured, anchor)    \
  EXPECT_NEAR((measured) / (anchor), 1.0, kTolerance) \
      << #measured << " = " << (measured) << " s against the anchor " << (anchor) << " s"

// Qwen3-Coder-30B-A3B on one H20.
TEST(AnchorTest, H20Qwen3MoeTimeToFirstToken) {
  const Profile p = Load("h20-qwen3-coder-30b-a3b.yaml");
  // FLOP counts: 5.4 GFLOP/token of linear layers at ~50 TFLOPS plus 786,432 FLOP per
  // query x context token of attention at ~100 TFLOPS.
  EXPECT_WITHIN_15_PERCENT(Ttft(p, 1024), 0.14);
  EXPECT_WITHIN_15_PERCENT(Ttft(p, 8192), 1.17);
  EXPECT_WITHIN_15_PERCENT(Ttft(p, 32768), 7.9);
  EXPECT_WITHIN_15_PERCENT(Ttft(p, 128000), 79);
}

TEST(AnchorTest, H20Qwen3MoeTimePerOutputToken) {
  const Profile p = Load("h20-qwen3-coder-30b-a3b.yaml");
  // Published: 137 tokens/s at concurrency 1 with 15K tokens of input.
  EXPECT_WITHIN_15_PERCENT(Tpot(p, 1, 15000), 0.0073);
  // Byte counts at 80% of 4.0 TB/s: experts touched by 32 tokens (88%) plus 32 x 8K of KV,
  // and every expert plus 256 x 1K of KV, each with ~5 ms of launches.
  EXPECT_WITHIN_15_PERCENT(Tpot(p, 32, 8192), 0.030);
  EXPECT_WITHIN_15_PERCENT(Tpot(p, 256, 1024), 0.040);
}

TEST(AnchorTest, H20Qwen3MoePullOfFiveThousandTokens) {
  const Profile p = Load("h20-qwen3-coder-30b-a3b.yaml");
  // vLLM RFC #50913 (NixlConnector): handover of a ~5K-token pull, 263 ms at block size 16
  // (descriptor-bound), 197 ms at block size 64.
  EXPECT_WITHIN_15_PERCENT(PullHandover(p, 5000, 16), 0.263);
  EXPECT_WITHIN_15_PERCENT(PullHandover(p, 5000, 64), 0.197);
}

TEST(AnchorTest, H20Qwen3MoePrefillIsSuperlinearInContext) {
  const Profile p = Load("h20-qwen3-coder-30b-a3b.yaml");
  const double ratio = Ttft(p, 100000) / Ttft(p, 8192);
  EXPECT_GT(ratio, 1.5 * 100000.0 / 8192) << ratio;
}

// Llama-3.1-8B on one H100 80 GB.
TEST(AnchorTest, H100LlamaTimeToFirstToken) {
  const Profile p = Load("h100-llama-3.1-8b.yaml");
  // FLOP counts: 16 GFLOP/token at ~530 TFLOPS plus 524,288 FLOP per query x context token
  // at ~550 TFLOPS.
  EXPECT_WITHIN_15_PERCENT(Ttft(p, 1024), 0.039);
  EXPECT_WITHIN_15_PERCENT(Ttft(p, 8192), 0.28);
  EXPECT_WITHIN_15_PERCENT(Ttft(p, 32768), 1.5);
  EXPECT_WITHIN_15_PERCENT(Ttft(p, 128000), 11.6);
}

TEST(AnchorTest, H100LlamaTimePerOutputToken) {
  const Profile p = Load("h100-llama-3.1-8b.yaml");
  // Byte counts at 80% of 3.35 TB/s: 16.06 GB of weights plus the batch's KV, ~2 ms of
  // launches.
  EXPECT_WITHIN_15_PERCENT(Tpot(p, 1, 1024), 0.008);
  EXPECT_WITHIN_15_PERCENT(Tpot(p, 32, 8192), 0.022);
  EXPECT_WITHIN_15_PERCENT(Tpot(p, 256, 1024), 0.028);
}

TEST(AnchorTest, H100LlamaPullOfFiveThousandTokens) {
  const Profile p = Load("h100-llama-3.1-8b.yaml");
  EXPECT_WITHIN_15_PERCENT(PullHandover(p, 5000, 16), 0.263);
  EXPECT_WITHIN_15_PERCENT(PullHandover(p, 5000, 64), 0.197);
}

TEST(AnchorTest, H100LlamaPrefillIsSuperlinearInContext) {
  const Profile p = Load("h100-llama-3.1-8b.yaml");
  const double ratio = Ttft(p, 100000) / Ttft(p, 8192);
  EXPECT_GT(ratio, 1.5 * 100000.0 / 8192) << ratio;
}

}  // namespace
}  // namespace sim
