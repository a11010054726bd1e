// kvroute-bench compare: the paired session bootstrap over two runs' report.json.
#include "bench/kvroute_bench/compare.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

#include "bench/kvroute_bench/report.h"
#include "bench/kvroute_bench/stats.h"

namespace kvroute::bench {
namespace {

// `jobs` agent sessions of `turns` turns each; turn t of job j waits a TTFT that grows with
// both (wall seconds at time scale 0.5), every fifth turn a WARM miss, job 0's third turn
// shed, and each job's plan one turn longer than it sent.
RunResult Sessions(int jobs, int turns, double ttft_shift = 0) {
  RunResult run;
  run.name = "baseline";
  run.mode = "baseline";
  run.time_scale = 0.5;
  for (int j = 0; j < jobs; ++j) {
    JobRecord job;
    job.job = j;
    job.planned_turns = turns + 1;
    for (int t = 1; t <= turns; ++t) {
      RequestRecord r;
      r.job = j;
      r.turn = t;
      r.request_id = "r" + std::to_string(j) + "-" + std::to_string(t);
      r.klass = t == 1 ? "HEAVY" : "WARM";
      r.ttft = 0.1 * (1 + (j * 7 + t * 3) % 11) + (t % 5 == 0 ? 1.5 : 0) + ttft_shift;
      r.tpot = 0.01;
      if (j == 0 && t == 3) {
        r.error = "HTTP 429";
        r.failure = RequestOutcome::kShed;
        r.ttft = -1;
        r.tpot = -1;
      }
      run.requests.push_back(r);
      job.turn_e2e.push_back(1.0);
    }
    run.jobs.push_back(job);
  }
  return run;
}

ComparedRun Compared(const RunResult& run, const std::string& source) {
  Report report;
  report.runs = {run};
  // Through the text, as `kvroute-bench compare` reads it.
  const boost::json::value v = boost::json::parse(boost::json::serialize(ReportJson(report)));
  absl::StatusOr<ComparedRun> c = ComparedRunFromJson(v, "", source);
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

TEST(CompareTest, EachRunsFiguresAreItsSummarys) {
  const RunResult run = Sessions(12, 9);
  const RunSummary s = Summarize(run);
  const ComparedRun a = Compared(run, "a");
  absl::StatusOr<Comparison> c = CompareRuns(a, a, CompareOptions{.resamples = 200});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->figures.size(), 6u);
  const ClassSummary& all = s.classes.front();
  EXPECT_DOUBLE_EQ(c->figures[0].a, all.ttft.p50);
  EXPECT_DOUBLE_EQ(c->figures[1].a, all.ttft.p90);
  EXPECT_DOUBLE_EQ(c->figures[2].a, all.ttft.p99);
  EXPECT_DOUBLE_EQ(c->figures[3].a, all.goodput);
  EXPECT_DOUBLE_EQ(c->figures[4].a, s.planned_goodput);
  EXPECT_EQ(c->figures[5].label, "sessions completed");
  EXPECT_DOUBLE_EQ(c->figures[5].a, static_cast<double>(s.jobs_ok) / static_cast<double>(s.jobs));
  EXPECT_GT(all.goodput, 0);
  EXPECT_LT(all.goodput, 1);  // the shed turn and the slow fifth turns miss
  // A run against itself: no difference in any draw.
  for (const FigureComparison& f : c->figures) {
    EXPECT_EQ(f.difference, 0) << f.label;
    EXPECT_EQ(f.low, 0) << f.label;
    EXPECT_EQ(f.high, 0) << f.label;
    EXPECT_EQ(f.b_lower_share, 0) << f.label;
    if (f.a == 0) {  // no session completed (each planned a turn more than it sent): no ratio
      EXPECT_TRUE(std::isnan(f.ratio)) << f.label;
      continue;
    }
    EXPECT_EQ(f.ratio, 1) << f.label;
    EXPECT_EQ(f.ratio_low, 1) << f.label;
    EXPECT_EQ(f.ratio_high, 1) << f.label;
  }
  EXPECT_EQ(c->units, 12);
  EXPECT_EQ(c->units_only_a, 0);
  EXPECT_TRUE(c->notes.empty());
}

// Jobs 1..n-1 complete, job j after (j + 1) wall seconds times `stretch`; job 0 fails.
RunResult CompletedSessions(int jobs, double stretch) {
  RunResult run = Sessions(jobs, 3);
  for (JobRecord& j : run.jobs) {
    j.t_arrival = 10.0 * static_cast<double>(j.job);
    if (j.job == 0) continue;
    j.ok = true;
    j.t_done = j.t_arrival + stretch * static_cast<double>(j.job + 1);
  }
  return run;
}

TEST(CompareTest, JobTimeIsTheMeanOfTheCompletedJobs) {
  const RunResult run = CompletedSessions(8, 1);
  const RunSummary s = Summarize(run);
  absl::StatusOr<Comparison> c = CompareRuns(
      Compared(run, "a"), Compared(CompletedSessions(8, 2), "b"), CompareOptions{.resamples = 200});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->figures.size(), 7u);
  const FigureComparison& job = c->figures[5];
  EXPECT_EQ(job.label, "mean job time (s)");
  // Jobs 1..7 took 2..8 wall s, 4..16 modelled s at time scale 0.5: a mean of 10; the failed
  // job 0 has no time. The run's own summary says the same.
  EXPECT_DOUBLE_EQ(job.a, 10);
  EXPECT_DOUBLE_EQ(job.a, s.job_completion.mean);
  EXPECT_DOUBLE_EQ(job.b, 20);
  EXPECT_NEAR(job.ratio, 2, 1e-9);
  EXPECT_GT(job.low, 0);  // every draw with a completed job: B above A
  EXPECT_EQ(job.b_lower_share, 0);
  EXPECT_NE(ComparisonMarkdown(*c).find("| mean job time (s) | 10 | 20 | +10 |"), std::string::npos)
      << ComparisonMarkdown(*c);
  // Sessions completed: 7 of 8 a side (job 0 failed), a share of the jobs like the summary's.
  const FigureComparison& completed = c->figures[6];
  EXPECT_EQ(completed.label, "sessions completed");
  EXPECT_DOUBLE_EQ(completed.a, 7.0 / 8);
  EXPECT_DOUBLE_EQ(completed.a, static_cast<double>(s.jobs_ok) / static_cast<double>(s.jobs));
  EXPECT_DOUBLE_EQ(completed.difference, 0);
  EXPECT_NE(ComparisonMarkdown(*c).find("| sessions completed | 87.5 % | 87.5 % | +0.0 pt |"),
            std::string::npos);

  // No job completed on one side: no job time to compare.
  absl::StatusOr<Comparison> none = CompareRuns(Compared(run, "a"), Compared(Sessions(8, 3), "b"),
                                                CompareOptions{.resamples = 50});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->figures.size(), 6u);
  EXPECT_DOUBLE_EQ(none->figures[5].b, 0);  // but every session ended early
}

TEST(CompareTest, AConfigurationFasterOnEveryTurnIsBelowInEveryDraw) {
  const ComparedRun a = Compared(Sessions(10, 8), "a");
  const ComparedRun b = Compared(Sessions(10, 8, /*ttft_shift=*/-0.05), "b");
  absl::StatusOr<Comparison> c = CompareRuns(a, b, CompareOptions{.resamples = 300});
  ASSERT_TRUE(c.ok()) << c.status();
  for (int f = 0; f < 3; ++f) {  // TTFT p50, p90, p99: 0.05 wall s = 0.1 modelled s
    EXPECT_NEAR(c->figures[f].difference, -0.1, 1e-9) << c->figures[f].label;
    EXPECT_NEAR(c->figures[f].low, -0.1, 1e-9) << c->figures[f].label;
    EXPECT_NEAR(c->figures[f].high, -0.1, 1e-9) << c->figures[f].label;
    EXPECT_EQ(c->figures[f].b_lower_share, 1) << c->figures[f].label;
  }
}

TEST(CompareTest, HalfTheLatencyOnEveryTurnIsARatioOfAHalf) {
  RunResult b = Sessions(10, 8);
  for (RequestRecord& r : b.requests) {
    if (r.ttft >= 0) r.ttft /= 2;
  }
  absl::StatusOr<Comparison> c =
      CompareRuns(Compared(Sessions(10, 8), "a"), Compared(b, "b"), {.resamples = 200});
  ASSERT_TRUE(c.ok()) << c.status();
  for (int f = 0; f < 3; ++f) {
    EXPECT_NEAR(c->figures[f].ratio, 0.5, 1e-9) << c->figures[f].label;
    EXPECT_NEAR(c->figures[f].ratio_low, 0.5, 1e-9) << c->figures[f].label;
    EXPECT_NEAR(c->figures[f].ratio_high, 0.5, 1e-9) << c->figures[f].label;
  }
}

TEST(CompareTest, RepeatsThatDisagreeWidenTheInterval) {
  // B run twice: 0.3 wall s (0.6 modelled) faster on every turn once, as much slower the
  // other time. Alone, either repeat is a certain difference; together, the sign is open.
  RunResult faster = Sessions(10, 8), slower = Sessions(10, 8, 0.6);
  const ComparedRun a = Compared(Sessions(10, 8, 0.3), "a");
  const ComparedRun b1 = Compared(faster, "b1"), b2 = Compared(slower, "b2");
  absl::StatusOr<Comparison> one = CompareRuns(a, b1, {.resamples = 300});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_NEAR(one->figures[0].low, -0.6, 1e-9);
  EXPECT_NEAR(one->figures[0].high, -0.6, 1e-9);
  absl::StatusOr<Comparison> both = CompareRuns({a}, {b1, b2}, {.resamples = 300});
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->b_repeats, 2);
  const FigureComparison& p50 = both->figures[0];
  EXPECT_NEAR(p50.difference, 0, 1e-9);  // the mean of the two repeats' p50
  EXPECT_NEAR(p50.low, -0.6, 1e-9);
  EXPECT_NEAR(p50.high, 0.6, 1e-9);
  EXPECT_GT(p50.b_lower_share, 0.1);
  EXPECT_LT(p50.b_lower_share, 0.9);
  const std::string md = ComparisonMarkdown(*both);
  EXPECT_NE(md.find("- **B**: 2 repeats: b1: baseline; b2: baseline"), std::string::npos);
  EXPECT_NE(md.find("- **repeats**: A 1, B 2"), std::string::npos);
}

TEST(CompareTest, SessionsThatDisagreeLeaveTheSignOpen) {
  // B is faster on half the sessions and slower on the other half: which sessions a draw
  // holds decides the sign.
  RunResult a = Sessions(20, 10);
  RunResult b = a;
  for (RequestRecord& r : b.requests) {
    if (r.ttft >= 0) r.ttft += r.job < 10 ? -0.3 : 0.3;
  }
  absl::StatusOr<Comparison> c = CompareRuns(Compared(a, "a"), Compared(b, "b"), {});
  ASSERT_TRUE(c.ok()) << c.status();
  const FigureComparison& p50 = c->figures[0];
  EXPECT_LT(p50.low, 0);
  EXPECT_GT(p50.high, 0);
  EXPECT_GT(p50.b_lower_share, 0.05);
  EXPECT_LT(p50.b_lower_share, 0.95);
}

TEST(CompareTest, TheSameSeedDrawsTheSameSessions) {
  RunResult b = Sessions(15, 6);
  for (RequestRecord& r : b.requests) {
    if (r.ttft >= 0 && r.job % 3 == 0) r.ttft *= 1.5;
  }
  const ComparedRun ca = Compared(Sessions(15, 6), "a");
  const ComparedRun cb = Compared(b, "b");
  const Comparison x = *CompareRuns(ca, cb, CompareOptions{.resamples = 500, .seed = 7});
  const Comparison y = *CompareRuns(ca, cb, CompareOptions{.resamples = 500, .seed = 7});
  const Comparison z = *CompareRuns(ca, cb, CompareOptions{.resamples = 500, .seed = 8});
  EXPECT_EQ(ComparisonMarkdown(x), ComparisonMarkdown(y));
  EXPECT_NE(ComparisonMarkdown(x), ComparisonMarkdown(z));
}

TEST(CompareTest, ASessionOnlyOneRunSentIsCountedAndDrawn) {
  RunResult b = Sessions(8, 5);
  std::erase_if(b.requests, [](const RequestRecord& r) { return r.job == 7; });
  absl::StatusOr<Comparison> c =
      CompareRuns(Compared(Sessions(8, 5), "a"), Compared(b, "b"), {.resamples = 100});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->units, 8);
  EXPECT_EQ(c->units_only_a, 1);
  EXPECT_EQ(c->units_only_b, 0);
  // B planned job 7's turns and sent none of them: of its plan, fewer met.
  EXPECT_LT(c->figures[4].b, c->figures[4].a);
}

TEST(CompareTest, TraceRequestsAreTheirOwnUnitsAndHaveNoPlan) {
  RunResult a;
  a.name = "trace";
  for (int i = 0; i < 30; ++i) {
    RequestRecord r;
    r.trace_index = i;
    r.klass = "WARM";
    r.ttft = 0.1 * (i % 7);
    a.requests.push_back(r);
  }
  absl::StatusOr<Comparison> c = CompareRuns(Compared(a, "a"), Compared(a, "b"), {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->units, 30);
  ASSERT_EQ(c->figures.size(), 4u);  // no goodput of planned turns
  EXPECT_NE(ComparisonMarkdown(*c).find("not every unit is an agentic job"), std::string::npos);
}

TEST(CompareTest, RefusesWhatItCannotCompare) {
  const ComparedRun a = Compared(Sessions(4, 3), "a");
  ComparedRun other_slo = a;
  other_slo.slo.ttft_warm_s = 5;
  EXPECT_EQ(CompareRuns(a, other_slo, {}).status().code(), absl::StatusCode::kInvalidArgument);
  RunResult shifted = Sessions(4, 3);
  for (RequestRecord& r : shifted.requests) r.job += 100;
  for (JobRecord& j : shifted.jobs) j.job += 100;
  EXPECT_EQ(CompareRuns(a, Compared(shifted, "b"), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(CompareRuns(a, a, {.resamples = 0}).ok());
  EXPECT_FALSE(CompareRuns(a, a, {.confidence = 1}).ok());
}

TEST(CompareTest, MeasuresGoodputInTheClassesAsked) {
  // A router that calls its slow turns HEAVY (30 s) where the workload says WARM (2 s): each
  // later turn's prompt is mostly the previous one's, which an infinite cache holds.
  RunResult run = Sessions(12, 9);
  for (RequestRecord& r : run.requests) {
    r.prompt_tokens = 10000 * r.turn;
    r.bound_cached_tokens = r.turn == 1 ? 0 : 10000 * (r.turn - 1);
    if (r.ttft / run.time_scale > 2) r.klass = "HEAVY";
  }
  const ComparedRun by_router = Compared(run, "a");
  EXPECT_EQ(by_router.slo.class_source, SloClassSource::kRouter);
  EXPECT_EQ(by_router.requests.front().bound_cached_tokens, 0);
  EXPECT_EQ(by_router.requests.back().prompt_tokens, 90000);
  absl::StatusOr<Comparison> router = CompareRuns(by_router, by_router, {.resamples = 20});
  ASSERT_TRUE(router.ok()) << router.status();
  absl::StatusOr<Comparison> workload =
      CompareRuns(by_router, by_router, {.resamples = 20, .slo_class = SloClassSource::kWorkload});
  ASSERT_TRUE(workload.ok()) << workload.status();
  // Goodput (figure 3) drops by the relabelled turns, as the run's own summary says.
  run.slo.class_source = SloClassSource::kWorkload;
  const double workload_goodput = Summarize(run).classes.front().goodput;
  EXPECT_LT(workload_goodput, router->figures[3].a);
  EXPECT_DOUBLE_EQ(workload->figures[3].a, workload_goodput);
  EXPECT_NE(ComparisonMarkdown(*workload).find("--slo-class workload"), std::string::npos);
  EXPECT_EQ(ComparisonMarkdown(*router).find("--slo-class workload"), std::string::npos);
  // A report measured in the workload's classes says so, and compare reads it.
  const ComparedRun by_workload = Compared(run, "b");
  EXPECT_EQ(by_workload.slo.class_source, SloClassSource::kWorkload);
  EXPECT_FALSE(CompareRuns(by_router, by_workload, {}).ok());  // not the same SLOs
  absl::StatusOr<Comparison> both =
      CompareRuns(by_router, by_workload, {.slo_class = SloClassSource::kWorkload});
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_DOUBLE_EQ(both->figures[3].difference, 0);
  Report report;
  report.runs = {run};
  boost::json::value v = ReportJson(report);
  v.at("runs").as_array()[0].at("summary").at("slo").as_object()["class"] = "engine";
  absl::StatusOr<ComparedRun> bad = ComparedRunFromJson(v, "", "r.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("summary.slo.class"), std::string::npos);
}

TEST(CompareTest, ReadsARunByNameFromAReportOrTheDirectoryAboveIt) {
  Report report;
  report.runs = {Sessions(3, 3), Sessions(3, 3)};
  report.runs[1].name = "least_loaded";
  const boost::json::value v = ReportJson(report);
  absl::StatusOr<ComparedRun> unnamed = ComparedRunFromJson(v, "", "r.json");
  ASSERT_FALSE(unnamed.ok());
  EXPECT_NE(unnamed.status().message().find("baseline, least_loaded"), std::string::npos);
  EXPECT_FALSE(ComparedRunFromJson(v, "v2", "r.json").ok());
  absl::StatusOr<ComparedRun> named = ComparedRunFromJson(v, "least_loaded", "r.json");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->label, "r.json: least_loaded");
  EXPECT_EQ(named->requests.size(), 9u);
  EXPECT_EQ(named->jobs.size(), 3u);
  EXPECT_FALSE(ComparedRunFromJson(boost::json::object{}, "", "x").ok());

  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kvb_compare_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  EXPECT_EQ(ReadComparedRun(dir.string(), "").status().code(), absl::StatusCode::kNotFound);
  std::filesystem::create_directories(dir);
  EXPECT_EQ(ReadComparedRun(dir.string(), "").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(WriteReports(report, (dir / "jps-0.8" / "seed-1").string()).ok());
  absl::StatusOr<ComparedRun> read = ReadComparedRun(dir.string(), "baseline");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->requests.size(), 9u);
  ASSERT_TRUE(WriteReports(report, (dir / "jps-0.8" / "seed-2").string()).ok());
  EXPECT_EQ(ReadComparedRun(dir.string(), "baseline").status().code(),
            absl::StatusCode::kInvalidArgument);  // two reports: name one
  std::filesystem::remove_all(dir);
}

TEST(CompareTest, MarkdownAndJsonCarryEveryFigure) {
  const ComparedRun a = Compared(Sessions(6, 4), "runs/a");
  absl::StatusOr<Comparison> c = CompareRuns(a, a, {.resamples = 50});
  ASSERT_TRUE(c.ok());
  const std::string md = ComparisonMarkdown(*c);
  EXPECT_NE(md.find("- **A**: runs/a: baseline"), std::string::npos);
  EXPECT_NE(md.find("| TTFT p90 (s) |"), std::string::npos);
  EXPECT_NE(md.find("| goodput of planned turns |"), std::string::npos);
  const boost::json::value j = ComparisonJson(*c);
  EXPECT_EQ(j.at("figures").as_array().size(), 6u);
  EXPECT_NE(md.find("| sessions completed | 0.0 % | 0.0 % | +0.0 pt |"), std::string::npos);
  EXPECT_EQ(j.at("figures").as_array()[1].at("ratio").as_double(), 1);
  EXPECT_EQ(j.at("units").as_int64(), 6);
}

// A run whose simulated fleet lagged past --max-sim-lag is named in a note and flags the
// comparison; the lag is read from report.json (modelled seconds: wall over the time scale)
// and from a run just measured alike; 0 flags nothing.
TEST(CompareTest, FlagsARunWhoseSimulatorLagged) {
  RunResult slow = Sessions(6, 4);
  for (int k = 0; k < 100; ++k) {
    InstanceSample x;
    x.t = k;
    x.instance = "gpu0";
    x.sim_lag_s = k < 98 ? 0.01 : 0.2;  // wall seconds; the p99 lies between them
    slow.samples.push_back(x);
  }
  RunResult quick = Sessions(6, 4);
  quick.samples = slow.samples;
  for (InstanceSample& x : quick.samples) x.sim_lag_s = 0.01;
  const ComparedRun a = Compared(quick, "runs/quick");
  const ComparedRun b = Compared(slow, "runs/slow");
  EXPECT_NEAR(a.sim_lag_p99_s, 0.02, 1e-9);
  EXPECT_GT(b.sim_lag_p99_s, 0.25);
  EXPECT_DOUBLE_EQ(ComparedRunOf(slow, "slow").sim_lag_p99_s, b.sim_lag_p99_s);
  EXPECT_LT(Compared(Sessions(2, 2), "none").sim_lag_p99_s, 0) << "no simulator sampled";

  absl::StatusOr<Comparison> c = CompareRuns(a, b, {.resamples = 20});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->sim_lag_exceeded);
  ASSERT_EQ(c->notes.size(), 1u);
  EXPECT_EQ(c->notes[0].rfind("runs/slow: baseline: the simulated fleet ran", 0), 0u)
      << c->notes[0];
  EXPECT_NE(ComparisonMarkdown(*c).find("--max-sim-lag 0.25 s"), std::string::npos);
  EXPECT_TRUE(ComparisonJson(*c).at("sim_lag_exceeded").as_bool());

  absl::StatusOr<Comparison> same = CompareRuns(a, a, {.resamples = 20});
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(same->sim_lag_exceeded);
  absl::StatusOr<Comparison> off = CompareRuns(a, b, {.resamples = 20, .max_sim_lag_s = 0});
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->sim_lag_exceeded);
  EXPECT_TRUE(off->notes.empty());
  EXPECT_FALSE(CompareRuns(a, b, {.max_sim_lag_s = -1}).ok());
}

// A cell reads B - A with its interval, shares in points; a share that rounds to zero has no
// sign; the ratio with its own interval.
TEST(CompareTest, CellsForTables) {
  FigureComparison g;
  g.label = "goodput";
  g.difference = -0.0001;
  g.low = -0.0331;
  g.high = 0.045;
  EXPECT_EQ(DifferenceCell(g), "+0.0 pt [-3.3 pt, +4.5 pt]");
  FigureComparison p90;
  p90.label = "TTFT p90 (s)";
  p90.difference = -6;
  p90.low = -7.25;
  p90.high = -1.5;
  p90.ratio = 0.4;
  p90.ratio_low = 0.31;
  p90.ratio_high = 0.532;
  EXPECT_EQ(DifferenceCell(p90), "-6 [-7.25, -1.5]");
  EXPECT_EQ(RatioCell(p90), "0.4 [0.31, 0.532]");
  p90.low = std::numeric_limits<double>::quiet_NaN();
  p90.ratio_low = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(DifferenceCell(p90), "-6");
  EXPECT_EQ(RatioCell(p90), "0.4");
  p90.difference = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(DifferenceCell(p90), "-");
}

}  // namespace
}  // namespace kvroute::bench
