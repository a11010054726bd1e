// kvroute-bench calibrate: the fit recovers a known timing model from the engine's own
// figures, the profile text keeps everything but its timing section, and the whole probe
// sequence against an in-process kvroute-sim recovers the profile it was started with.
#include "bench/kvroute_bench/calibrate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>

#include "sim/engine.h"
#include "sim/fleet.h"

namespace kvroute::bench {
namespace {

std::vector<int32_t> Tokens(int n, int32_t start) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

// What vLLM's prefill histogram would record for a lone prompt: first token - first scheduled.
double EnginePrefill(const sim::Profile& p, int n) {
  sim::Engine engine(sim::EngineConfig::FromProfile(p));
  const auto h = engine.Submit(
      {.request_id = "p", .prompt = Tokens(n, 0), .max_tokens = 1, .ignore_eos = true});
  while (engine.HasRunnableWork()) engine.Step();
  return engine.Info(h)->first_token - engine.Info(h)->first_scheduled;
}

void ExpectWithin(double fitted, double truth, double tolerance, const char* name) {
  EXPECT_NEAR(fitted / truth, 1.0, tolerance)
      << name << ": fitted " << fitted << ", truth " << truth;
}

void ExpectRecovers(const sim::TimingModel& fitted, const sim::TimingModel& truth, double tolerance,
                    bool weights) {
  ExpectWithin(fitted.step_fixed_s, truth.step_fixed_s, tolerance, "step_fixed_s");
  ExpectWithin(fitted.prefill_s_per_token, truth.prefill_s_per_token, tolerance,
               "prefill_s_per_token");
  ExpectWithin(fitted.attn_s_per_token_pair, truth.attn_s_per_token_pair, tolerance,
               "attn_s_per_token_pair");
  if (weights) ExpectWithin(fitted.weight_read_s, truth.weight_read_s, tolerance, "weight_read_s");
  ExpectWithin(fitted.decode_s_per_seq, truth.decode_s_per_seq, tolerance, "decode_s_per_seq");
  ExpectWithin(fitted.kv_read_s_per_token, truth.kv_read_s_per_token, tolerance,
               "kv_read_s_per_token");
}

TEST(CalibrateFitTest, RecoversTheEnginesOwnTimingModel) {
  const sim::Profile truth = sim::DefaultProfile();  // H20, a mixture of experts
  std::vector<PrefillObservation> prefills;
  for (int n : {1024, 4096, 16384, 65536}) prefills.push_back({n, EnginePrefill(truth, n)});
  std::vector<DecodeObservation> decodes;
  for (auto [batch, prompt] : std::vector<std::pair<int, int>>{
           {1, 512}, {4, 512}, {16, 512}, {64, 512}, {256, 512}, {1, 16384}}) {
    sim::Engine e(sim::EngineConfig::FromProfile(truth));
    for (int i = 0; i < batch; ++i) {
      e.Submit({.request_id = std::to_string(i),
                .prompt = Tokens(prompt, i * (prompt + 1)),
                .max_tokens = 1000,
                .ignore_eos = true});
    }
    // The first step in which every sequence decodes: each has generated g tokens.
    for (int guard = 0; guard < 10000; ++guard) {
      const double before = static_cast<double>(e.counters().generation_tokens);
      const sim::StepResult s = e.Step();
      if (s.prefill_tokens == 0 && s.decode_seqs == batch) {
        decodes.push_back({batch, prompt + before / batch, s.duration});
        break;
      }
    }
  }
  ASSERT_EQ(decodes.size(), 6u);
  absl::StatusOr<Calibration> c = FitTiming(truth, prefills, decodes);
  ASSERT_TRUE(c.ok()) << c.status();
  ExpectRecovers(c->timing, truth.timing, 0.01, /*weights=*/true);
  for (const ProbeResidual& r : c->residuals) EXPECT_NEAR(r.fitted_s / r.measured_s, 1, 1e-6);
}

TEST(CalibrateFitTest, TooFewProbesIsAClearError) {
  const sim::Profile p = sim::DefaultProfile();
  std::vector<PrefillObservation> prefills = {{1024, 0.14}};
  absl::StatusOr<Calibration> c = FitTiming(p, prefills, {});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), ::testing::HasSubstr("probes"));
}

TEST(CalibrateYamlTest, ReplacesOnlyTheTimingSection) {
  const std::string base =
      "model:\n  name: m\n# the step model\ntiming:\n  step_fixed_s: 1\n  # inner\n"
      "  prefill_s_per_token: 2\nlink:\n  overhead_s: 0.1\n";
  Calibration c;
  c.timing.step_fixed_s = 0.005;
  const std::string out = ReplaceTimingSection(base, TimingYaml(c, "http://x"));
  EXPECT_THAT(out, ::testing::StartsWith("model:\n  name: m\n# Fitted by kvroute-bench"));
  EXPECT_THAT(out, ::testing::HasSubstr("  step_fixed_s: 0.005\n"));
  EXPECT_THAT(out, ::testing::Not(::testing::HasSubstr("the step model")));
  EXPECT_THAT(out, ::testing::Not(::testing::HasSubstr("prefill_s_per_token: 2")));
  EXPECT_THAT(out, ::testing::EndsWith("link:\n  overhead_s: 0.1\n"));
  // The result loads as a profile.
  absl::StatusOr<sim::Profile> p = sim::ParseProfile(out);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_DOUBLE_EQ(p->timing.step_fixed_s, 0.005);
  EXPECT_DOUBLE_EQ(p->link.overhead_s, 0.1);
  // No timing section: appended.
  EXPECT_THAT(ReplaceTimingSection("model:\n  name: m\n", "timing:\n  step_fixed_s: 1\n"),
              "model:\n  name: m\ntiming:\n  step_fixed_s: 1\n");
}

// The whole probe sequence over HTTP against kvroute-sim (time scale 0.05: 20x faster than
// the modelled GPU). The engine's histograms are in modelled seconds, so the figures do not
// depend on the machine's speed; the time scale only paces the decode batches so that the
// probe sees them decode together.
TEST(CalibrateTest, RecoversTheSimulatorsProfileOverHttp) {
  sim::FleetOptions fo;
  fo.instances = 1;
  fo.time_scale = 0.05;
  fo.profile = sim::DefaultProfile();
  sim::Fleet fleet(fo);
  absl::StatusOr<std::vector<uint16_t>> ports = fleet.Start();
  ASSERT_TRUE(ports.ok()) << ports.status();

  CalibrateOptions o;
  o.target.host = "127.0.0.1";
  o.target.port = (*ports)[0];
  o.base = sim::DefaultProfile();
  o.prompt_lengths = {1024, 4096, 16384, 65536};
  o.decode_batches = {1, 4, 16, 64, 128};
  o.decode_context = 512;
  o.long_contexts = {16384};
  o.decode_tokens = 1024;
  o.window_steps = 16;
  o.cache_prompt_tokens = 4096;
  o.probe_timeout = std::chrono::seconds(120);
  absl::StatusOr<Calibration> c = Calibrate(o);
  fleet.Stop();
  ASSERT_TRUE(c.ok()) << c.status();
  ExpectRecovers(c->timing, fo.profile.timing, 0.10, /*weights=*/true);
  // The repeated prompt hits all its whole blocks but the last token's.
  EXPECT_EQ(c->cache_cached_tokens, 4096 - 16);
  EXPECT_LT(c->cache_warm_s, c->cache_cold_s / 10);
}

}  // namespace
}  // namespace kvroute::bench
