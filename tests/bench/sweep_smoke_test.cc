// End-to-end smoke sweep: two configurations at one rate and two seeds, each point run twice,
// each run a fresh kvroute-sim fleet and kvroute on loopback ephemeral ports. Checks that
// every configuration and run at a point was sent the same jobs with the same first prompts,
// that seeds differ, that the comparisons pair both runs a side, and that the sweep's reports
// and per-run ablation reports are written.
// Skipped (with the reason) only when the kvroute or kvroute-sim binaries are not built.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <utility>

#include "bench/kvroute_bench/sweep.h"
#include "tests/bench/smoke_fleet.h"

namespace kvroute::bench {
namespace {

using testing::BinaryPath;
using testing::Executable;

// job id -> prompt tokens of its first turn, as the engine counted them.
std::map<int64_t, int64_t> FirstPrompts(const RunResult& run) {
  std::map<int64_t, int64_t> out;
  for (const RequestRecord& r : run.requests) {
    if (r.turn == 1 && r.ok()) out[r.job] = r.prompt_tokens;
  }
  return out;
}

TEST(SmokeSweepTest, SameArrivalsPerConfigurationAndSpreadAcrossSeeds) {
  const std::string kvroute = BinaryPath(KVROUTE_BIN, "KVROUTE_BIN");
  const std::string sim = BinaryPath(KVROUTE_SIM_BIN, "KVROUTE_SIM_BIN");
  if (!Executable(kvroute) || !Executable(sim)) {
    GTEST_SKIP() << "kvroute (" << (kvroute.empty() ? "no target" : kvroute) << ") or kvroute-sim ("
                 << (sim.empty() ? "no target" : sim)
                 << ") is not built; build both to run the smoke sweep";
  }
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("kvb_sweep_" + std::to_string(::getpid()));
  std::filesystem::remove_all(out);

  SweepOptions o;
  o.jobs_per_second = {1};
  o.seeds = {5, 6};
  o.references = {"baseline"};
  o.repeats = 2;
  AblationOptions& a = o.ablation;
  a.modes = {"baseline", "v1"};
  a.thresholds = {20000};
  testing::UseSmokeFleet(a, kvroute, sim, out.string());
  WorkloadSpec base;
  base.kind = WorkloadKind::kAgentic;
  base.agentic.duration_s = 10;  // modelled seconds: 0.2 s of wall time
  base.agentic.max_jobs = 4;
  base.agentic.turns = 2;
  base.agentic.task_tokens = 200;
  base.agentic.task_tokens_max = 3000;

  std::map<uint64_t, std::map<int64_t, int64_t>> first_prompts_by_seed;
  o.on_point = [&](double rate, uint64_t seed, const Report& report) {
    EXPECT_DOUBLE_EQ(rate, 1);
    ASSERT_EQ(report.runs.size(), 2u);
    const std::map<int64_t, int64_t> baseline = FirstPrompts(report.runs[0]);
    const std::map<int64_t, int64_t> v1 = FirstPrompts(report.runs[1]);
    const size_t planned = PlanAgenticJobs(SweepPointWorkload(base, rate, seed).agentic).size();
    EXPECT_EQ(baseline.size(), planned) << "seed " << seed;
    EXPECT_EQ(baseline, v1) << "seed " << seed << ": configurations were sent different jobs";
    // A point's second run is sent what its first was.
    auto [it, first_run] = first_prompts_by_seed.try_emplace(seed, baseline);
    if (!first_run) {
      EXPECT_EQ(it->second, baseline) << "seed " << seed << ": runs differ";
    }
  };

  absl::StatusOr<Sweep> sweep = RunSweep(o, base);
  ASSERT_TRUE(sweep.ok()) << sweep.status();
  ASSERT_EQ(first_prompts_by_seed.size(), 2u);
  EXPECT_NE(first_prompts_by_seed[5], first_prompts_by_seed[6]);

  ASSERT_EQ(sweep->samples.size(), 8u);  // 2 seeds x 2 runs x 2 configurations
  for (const SweepSample& s : sweep->samples) {
    EXPECT_GT(s.figures[static_cast<size_t>(SweepFigure::kTtftP90)], 0) << s.config;
    EXPECT_EQ(s.figures[static_cast<size_t>(SweepFigure::kErrors)], 0) << s.config;
  }
  const SweepTable table = AggregateSweep(sweep->samples);
  ASSERT_EQ(table.cells.size(), 2u);
  EXPECT_EQ(table.cells[1].config, "v1-T20k");
  EXPECT_EQ(table.cells[1].figures[static_cast<size_t>(SweepFigure::kTtftP90)].n, 2);
  EXPECT_EQ(table.cells[1].repeats, 2);
  const std::vector<RegimeEntry> map = RegimeMap(table, o.references);
  ASSERT_EQ(map.size(), 1u);
  EXPECT_NE(map[0].judgements[0].verdict, Verdict::kTooFewSeeds);
  // v1 paired with baseline at each seed, over the point's sessions.
  ASSERT_EQ(sweep->comparisons.size(), 2u);
  for (const SweepComparison& c : sweep->comparisons) {
    EXPECT_EQ(c.config, "v1-T20k");
    EXPECT_EQ(c.reference, "baseline");
    EXPECT_GT(c.comparison.units, 0) << "seed " << c.seed;
    EXPECT_EQ(c.comparison.a_repeats, 2) << "seed " << c.seed;
    EXPECT_EQ(c.comparison.b_repeats, 2) << "seed " << c.seed;
    EXPECT_EQ(c.comparison.units_only_a + c.comparison.units_only_b, 0) << "seed " << c.seed;
  }

  for (const char* f : {"sweep.md", "sweep.json", "jps-1/seed-5/run-1/report.json",
                        "jps-1/seed-5/run-2/report.json", "jps-1/seed-6/run-2/report.md",
                        "jps-1/seed-6/run-1/v1-T20k/kvroute.yaml"}) {
    EXPECT_TRUE(std::filesystem::exists(out / f)) << f;
  }
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace kvroute::bench
