// The load sweep's pure parts: figures from a run summary, the spread across seeds, the
// win/tie/lose rule, aggregation into cells and the regime map, the reports, validation, and
// the workload of a sweep point (identical for every configuration; the same jobs at every
// rate for one seed).
#include "bench/kvroute_bench/sweep.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "bench/kvroute_bench/workload.h"

namespace kvroute::bench {
namespace {
namespace json = boost::json;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

size_t Index(SweepFigure f) { return static_cast<size_t>(f); }

TEST(SweepFiguresTest, TableIsInTheEnumsOrder) {
  for (size_t i = 0; i < kSweepFigureCount; ++i) {
    EXPECT_EQ(Index(SweepFigures()[i].figure), i) << SweepFigures()[i].key;
  }
}

TEST(SpreadTest, MedianMinMaxOverFiniteValues) {
  const Spread odd = SpreadOf({3, 1, 2});
  EXPECT_EQ(odd.n, 3);
  EXPECT_DOUBLE_EQ(odd.median, 2);
  EXPECT_DOUBLE_EQ(odd.min, 1);
  EXPECT_DOUBLE_EQ(odd.max, 3);

  const Spread even = SpreadOf({4, 1, 10, 2});
  EXPECT_EQ(even.n, 4);
  EXPECT_DOUBLE_EQ(even.median, 3);  // (2 + 4) / 2
  EXPECT_DOUBLE_EQ(even.min, 1);
  EXPECT_DOUBLE_EQ(even.max, 10);

  // A seed whose run measured nothing does not count.
  const Spread gaps = SpreadOf({kNaN, 5, std::numeric_limits<double>::infinity(), 7});
  EXPECT_EQ(gaps.n, 2);
  EXPECT_DOUBLE_EQ(gaps.median, 6);

  const Spread none = SpreadOf({kNaN});
  EXPECT_EQ(none.n, 0);
  EXPECT_TRUE(std::isnan(none.median));
  EXPECT_TRUE(std::isnan(none.min));
  EXPECT_TRUE(std::isnan(none.max));
}

TEST(JudgeTest, IntervalsOverSeeds) {
  const Spread reference = SpreadOf({10, 12, 11});  // [10, 12]
  EXPECT_EQ(Judge(SpreadOf({7, 9, 8}), reference), Verdict::kWin);
  EXPECT_EQ(Judge(SpreadOf({13, 15}), reference), Verdict::kLose);
  // Overlap, containment and touching endpoints are all within the spread.
  EXPECT_EQ(Judge(SpreadOf({9, 10.5}), reference), Verdict::kTie);
  EXPECT_EQ(Judge(SpreadOf({11, 11.5}), reference), Verdict::kTie);
  EXPECT_EQ(Judge(SpreadOf({5, 20}), reference), Verdict::kTie);
  EXPECT_EQ(Judge(SpreadOf({8, 10}), reference), Verdict::kTie);
  EXPECT_EQ(Judge(SpreadOf({12, 14}), reference), Verdict::kTie);
  // A median far below the reference's is still a tie when one seed overlaps.
  EXPECT_EQ(Judge(SpreadOf({2, 3, 10}), reference), Verdict::kTie);
  // One seed on either side has no spread to compare the difference with.
  EXPECT_EQ(Judge(SpreadOf({1}), reference), Verdict::kTooFewSeeds);
  EXPECT_EQ(Judge(reference, SpreadOf({100, kNaN})), Verdict::kTooFewSeeds);
  EXPECT_EQ(VerdictName(Verdict::kWin), "win");
  EXPECT_EQ(VerdictName(Verdict::kTie), "tie");
  EXPECT_EQ(VerdictName(Verdict::kLose), "lose");
  EXPECT_EQ(VerdictName(Verdict::kTooFewSeeds), "-");
}

RequestRecord Ok(double ttft, double tpot, int64_t prompt, int64_t cached,
                 std::string backend = "gpu0") {
  RequestRecord r;
  r.klass = "WARM";
  r.backend = std::move(backend);
  r.http_status = 200;
  r.ttft = ttft;
  r.tpot = tpot;
  r.e2e = ttft + 1;
  r.prompt_tokens = prompt;
  r.cached_tokens = cached;
  r.completion_tokens = 20;
  return r;
}

TEST(SweepFiguresTest, FromARunSummary) {
  RunResult run;
  run.name = "v2-T20k";
  run.time_scale = 1.0;
  run.duration_s = 10;
  for (int i = 1; i <= 10; ++i) {
    run.requests.push_back(Ok(i, 0.01 * i, 1000, 500, i == 10 ? "gpu1->gpu0" : "gpu0"));
  }
  run.requests.back().klass = "HEAVY";
  RequestRecord failed;
  failed.error = "http 503";
  run.requests.push_back(failed);
  run.dropped = 2;
  run.pooled_bound_hit_ratio = 0.4;
  const RunSummary summary = Summarize(run);
  const SweepFigureValues v = SweepFiguresOf(summary);
  ASSERT_FALSE(summary.classes.empty());
  EXPECT_DOUBLE_EQ(v[Index(SweepFigure::kTtftP50)], summary.classes[0].ttft.p50);
  EXPECT_DOUBLE_EQ(v[Index(SweepFigure::kTtftP90)], summary.classes[0].ttft.p90);
  EXPECT_DOUBLE_EQ(v[Index(SweepFigure::kTtftP99)], summary.classes[0].ttft.p99);
  EXPECT_DOUBLE_EQ(v[Index(SweepFigure::kTtftP90)], 9.1);
  EXPECT_DOUBLE_EQ(v[Index(SweepFigure::kTpotP99)], summary.classes[0].tpot.p99);
  EXPECT_DOUBLE_EQ(v[Index(SweepFigure::kPrefixHit)], summary.hit_ratio);
  EXPECT_GT(summary.hit_ratio, 0);
  EXPECT_DOUBLE_EQ(v[Index(SweepFigure::kHitOfPooled)], summary.hit_ratio / 0.4);
  EXPECT_DOUBLE_EQ(v[Index(SweepFigure::kHeavyTtftP90)], 10);  // the one HEAVY request
  // WARM TTFTs 1 and 2 s meet the 2 s SLO, the HEAVY one its 30 s; of 13 (one failure and
  // two dropped arrivals count as misses).
  EXPECT_DOUBLE_EQ(v[Index(SweepFigure::kGoodput)], summary.classes[0].goodput);
  EXPECT_DOUBLE_EQ(v[Index(SweepFigure::kGoodput)], 3.0 / 13);
  EXPECT_DOUBLE_EQ(v[Index(SweepFigure::kRequests)], 11);
  EXPECT_DOUBLE_EQ(v[Index(SweepFigure::kOffloads)], 1);
  EXPECT_DOUBLE_EQ(v[Index(SweepFigure::kErrors)], 3);  // one failure, two dropped
  EXPECT_DOUBLE_EQ(v[Index(SweepFigure::kServed)], 10);
  EXPECT_DOUBLE_EQ(v[Index(SweepFigure::kShed)], 0);
  EXPECT_DOUBLE_EQ(v[Index(SweepFigure::kShedShare)], 0);
  EXPECT_DOUBLE_EQ(v[Index(SweepFigure::kFailed)], 1);
  EXPECT_DOUBLE_EQ(v[Index(SweepFigure::kGaveUp)], 0);
  // No agentic job in the run: no job mean, no share done.
  EXPECT_TRUE(std::isnan(v[Index(SweepFigure::kJobMean)]));
  EXPECT_TRUE(std::isnan(v[Index(SweepFigure::kJobsDone)]));
  RunResult jobs = run;
  jobs.jobs = {JobRecord{.job = 1, .t_arrival = 0, .t_done = 4, .ok = true, .turn_e2e = {}},
               JobRecord{.job = 2, .t_arrival = 1, .t_done = 9, .ok = true, .turn_e2e = {}},
               JobRecord{.job = 3, .t_arrival = 2, .t_done = -1, .ok = false, .turn_e2e = {}}};
  // The mean of the completed jobs' times (4 and 8 s); an unfinished job is left out.
  EXPECT_DOUBLE_EQ(SweepFiguresOf(Summarize(jobs))[Index(SweepFigure::kJobMean)], 6);
  // Two of the three completed.
  EXPECT_DOUBLE_EQ(SweepFiguresOf(Summarize(jobs))[Index(SweepFigure::kJobsDone)], 2.0 / 3);
  // Their plans unknown: no goodput of planned turns.
  EXPECT_TRUE(std::isnan(SweepFiguresOf(Summarize(jobs))[Index(SweepFigure::kPlannedGoodput)]));
  // Planned: 5 turns each, the third job ended after 2 sent; the two dropped jobs planned
  // 4 turns between them. The 3 turns that met their SLOs over the 19 planned.
  jobs.jobs[0].turn_e2e.assign(5, 1);
  jobs.jobs[1].turn_e2e.assign(5, 1);
  jobs.jobs[2].turn_e2e = {1, -1};
  for (JobRecord& j : jobs.jobs) j.planned_turns = 5;
  jobs.dropped_turns = 4;
  const RunSummary planned = Summarize(jobs);
  EXPECT_EQ(planned.turns_planned, 19);
  EXPECT_EQ(planned.turns_unsent, 3 + 4);
  EXPECT_DOUBLE_EQ(SweepFiguresOf(planned)[Index(SweepFigure::kPlannedGoodput)], 3.0 / 19);
  // No compute floors (no fleet profile): no floor p90; with them, over the co-located
  // successful requests, the offloaded one left out.
  EXPECT_TRUE(std::isnan(v[Index(SweepFigure::kTtftFloorP90)]));
  RunResult floored = run;
  for (size_t i = 0; i < floored.requests.size(); ++i) {
    floored.requests[i].compute_floor_s = 0.1 * static_cast<double>(i + 1);
  }
  // Floors 0.1 .. 0.9 s on the nine co-located requests: p90 at rank 7.2.
  EXPECT_NEAR(SweepFiguresOf(Summarize(floored))[Index(SweepFigure::kTtftFloorP90)], 0.82, 1e-9);
  // No instance samples: no queue split; with them, the shares of samples.
  EXPECT_TRUE(std::isnan(v[Index(SweepFigure::kQueued)]));
  RunResult sampled = run;
  sampled.samples = {{.t = 0, .instance = "gpu0", .kv_usage = 0.97, .waiting = 1},
                     {.t = 0, .instance = "gpu1", .kv_usage = 0.5, .waiting = 3},
                     {.t = 1, .instance = "gpu0", .kv_usage = 0.5, .waiting = 0},
                     {.t = 1, .instance = "gpu1", .kv_usage = 0.5, .waiting = 0}};
  const SweepFigureValues q = SweepFiguresOf(Summarize(sampled));
  EXPECT_DOUBLE_EQ(q[Index(SweepFigure::kQueued)], 0.5);
  EXPECT_DOUBLE_EQ(q[Index(SweepFigure::kQueuedKvFull)], 0.25);

  // Shed and given-up requests are counted apart, and are errors too.
  RunResult overload = run;
  RequestRecord shed = failed;
  shed.http_status = 429;
  shed.failure = RequestOutcome::kShed;
  RequestRecord gave_up = failed;
  gave_up.failure = RequestOutcome::kGaveUp;
  overload.requests.insert(overload.requests.end(), {shed, shed, gave_up});
  const SweepFigureValues o = SweepFiguresOf(Summarize(overload));
  EXPECT_DOUBLE_EQ(o[Index(SweepFigure::kShed)], 2);
  EXPECT_DOUBLE_EQ(o[Index(SweepFigure::kShedShare)], 2.0 / 14);
  EXPECT_DOUBLE_EQ(o[Index(SweepFigure::kFailed)], 1);
  EXPECT_DOUBLE_EQ(o[Index(SweepFigure::kGaveUp)], 1);
  EXPECT_DOUBLE_EQ(o[Index(SweepFigure::kErrors)], 6);
  EXPECT_DOUBLE_EQ(o[Index(SweepFigure::kGoodput)], 3.0 / 16);

  RunResult empty;
  empty.requests.push_back(failed);
  const SweepFigureValues e = SweepFiguresOf(Summarize(empty));
  EXPECT_TRUE(std::isnan(e[Index(SweepFigure::kTtftP90)]));
  EXPECT_TRUE(std::isnan(e[Index(SweepFigure::kPrefixHit)]));
  EXPECT_TRUE(std::isnan(e[Index(SweepFigure::kHitOfPooled)]));
  EXPECT_TRUE(std::isnan(e[Index(SweepFigure::kHeavyTtftP90)]));
  EXPECT_DOUBLE_EQ(e[Index(SweepFigure::kErrors)], 1);

  // Without a pooled-LRU bound (the fleet's KV unknown) there is no ratio to it.
  run.pooled_bound_hit_ratio = -1;
  EXPECT_TRUE(std::isnan(SweepFiguresOf(Summarize(run))[Index(SweepFigure::kHitOfPooled)]));
}

SweepSample Sample(double rate, uint64_t seed, std::string config, double p90, double p99) {
  SweepSample s{.jobs_per_second = rate,
                .seed = seed,
                .config = std::move(config),
                .figures = {},
                .repeat = 1};
  s.figures.fill(0);
  s.figures[Index(SweepFigure::kRequests)] = 100 + static_cast<double>(seed);
  s.figures[Index(SweepFigure::kTtftP50)] = p90 / 2;
  s.figures[Index(SweepFigure::kTtftP90)] = p90;
  s.figures[Index(SweepFigure::kTtftP99)] = p99;
  return s;
}

// Two rates, three seeds. At 0.3 jobs/s v1 beats baseline on p90 in every seed but overlaps
// on p99; at 0.6 it loses p90 and wins p99. v2 ran only at 0.3, with one seed measured.
std::vector<SweepSample> FixedSamples() {
  return {
      Sample(0.6, 1, "baseline", 20, 40), Sample(0.3, 1, "baseline", 10, 30),
      Sample(0.3, 2, "baseline", 12, 33), Sample(0.3, 3, "baseline", 11, 36),
      Sample(0.3, 1, "v1-T20k", 5, 29),   Sample(0.3, 2, "v1-T20k", 7, 31),
      Sample(0.3, 3, "v1-T20k", 6, 40),   Sample(0.6, 2, "baseline", 22, 44),
      Sample(0.6, 3, "baseline", 21, 42), Sample(0.6, 1, "v1-T20k", 25, 30),
      Sample(0.6, 2, "v1-T20k", 23, 35),  Sample(0.6, 3, "v1-T20k", 24, 32),
      Sample(0.3, 1, "v2-T20k", 3, kNaN),
  };
}

TEST(AggregateSweepTest, CellsPerRateAndConfiguration) {
  const SweepTable t = AggregateSweep(FixedSamples());
  EXPECT_EQ(t.rates, (std::vector<double>{0.3, 0.6}));
  EXPECT_EQ(t.configs, (std::vector<std::string>{"baseline", "v1-T20k", "v2-T20k"}));
  EXPECT_EQ(t.seeds, (std::vector<uint64_t>{1, 2, 3}));
  ASSERT_EQ(t.cells.size(), 5u);  // v2 did not run at 0.6
  EXPECT_EQ(t.cells[0].config, "baseline");
  EXPECT_DOUBLE_EQ(t.cells[0].jobs_per_second, 0.3);
  EXPECT_EQ(t.Find(0.6, "v2-T20k"), nullptr);

  const SweepCell* v1 = t.Find(0.3, "v1-T20k");
  ASSERT_NE(v1, nullptr);
  const Spread& p90 = v1->figures[Index(SweepFigure::kTtftP90)];
  EXPECT_EQ(p90.n, 3);
  EXPECT_DOUBLE_EQ(p90.median, 6);
  EXPECT_DOUBLE_EQ(p90.min, 5);
  EXPECT_DOUBLE_EQ(p90.max, 7);
  EXPECT_DOUBLE_EQ(v1->figures[Index(SweepFigure::kTtftP50)].median, 3);
  // The samples behind the spread, in the seeds' order whatever the samples' order.
  ASSERT_EQ(v1->by_seed.size(), 3u);
  EXPECT_EQ(v1->by_seed[0].first, 1u);
  EXPECT_EQ(v1->by_seed[2].first, 3u);
  EXPECT_DOUBLE_EQ(v1->by_seed[2].second[Index(SweepFigure::kTtftP99)], 40);

  const SweepCell* base6 = t.Find(0.6, "baseline");
  ASSERT_NE(base6, nullptr);
  EXPECT_DOUBLE_EQ(base6->figures[Index(SweepFigure::kTtftP99)].median, 42);
  EXPECT_DOUBLE_EQ(base6->figures[Index(SweepFigure::kTtftP99)].min, 40);

  const SweepCell* v2 = t.Find(0.3, "v2-T20k");
  ASSERT_NE(v2, nullptr);
  EXPECT_EQ(v2->figures[Index(SweepFigure::kTtftP90)].n, 1);
  EXPECT_EQ(v2->figures[Index(SweepFigure::kTtftP99)].n, 0);
}

TEST(RegimeMapTest, VerdictsAndRatiosAgainstEachReference) {
  const SweepTable t = AggregateSweep(FixedSamples());
  const std::vector<RegimeEntry> map = RegimeMap(t, {"baseline"});
  ASSERT_EQ(map.size(), 3u);  // v1 at both rates, v2 at 0.3

  EXPECT_DOUBLE_EQ(map[0].jobs_per_second, 0.3);
  EXPECT_EQ(map[0].config, "v1-T20k");
  EXPECT_EQ(map[0].reference, "baseline");
  ASSERT_EQ(map[0].judgements.size(), 2u);
  EXPECT_EQ(map[0].judgements[0].figure, SweepFigure::kTtftP90);
  EXPECT_EQ(map[0].judgements[0].verdict, Verdict::kWin);  // [5, 7] below [10, 12]
  EXPECT_DOUBLE_EQ(map[0].judgements[0].ratio, 6.0 / 11.0);
  EXPECT_EQ(map[0].judgements[1].figure, SweepFigure::kTtftP99);
  EXPECT_EQ(map[0].judgements[1].verdict, Verdict::kTie);  // [29, 40] overlaps [30, 36]
  EXPECT_DOUBLE_EQ(map[0].judgements[1].ratio, 31.0 / 33.0);
  // Paired at each seed: 29/30, 31/33, 40/36.
  const Spread& paired = map[0].judgements[1].paired_ratio;
  EXPECT_EQ(paired.n, 3);
  EXPECT_DOUBLE_EQ(paired.min, 31.0 / 33.0);
  EXPECT_DOUBLE_EQ(paired.median, 29.0 / 30.0);
  EXPECT_DOUBLE_EQ(paired.max, 40.0 / 36.0);

  EXPECT_EQ(map[1].config, "v2-T20k");
  EXPECT_EQ(map[1].judgements[0].verdict, Verdict::kTooFewSeeds);
  EXPECT_DOUBLE_EQ(map[1].judgements[0].ratio, 3.0 / 11.0);
  // Only seed 1 pairs: v2 ran no other.
  EXPECT_EQ(map[1].judgements[0].paired_ratio.n, 1);
  EXPECT_DOUBLE_EQ(map[1].judgements[0].paired_ratio.median, 3.0 / 10.0);
  EXPECT_EQ(map[1].judgements[1].paired_ratio.n, 0);
  EXPECT_TRUE(std::isnan(map[1].judgements[1].ratio));

  EXPECT_DOUBLE_EQ(map[2].jobs_per_second, 0.6);
  EXPECT_EQ(map[2].config, "v1-T20k");
  EXPECT_EQ(map[2].judgements[0].verdict, Verdict::kLose);  // [23, 25] above [20, 22]
  EXPECT_EQ(map[2].judgements[1].verdict, Verdict::kWin);   // [30, 35] below [40, 44]

  // Against v1 the verdicts mirror.
  const std::vector<RegimeEntry> vs_v1 = RegimeMap(t, {"v1-T20k"});
  ASSERT_EQ(vs_v1.size(), 3u);
  EXPECT_EQ(vs_v1[0].config, "baseline");
  EXPECT_EQ(vs_v1[0].judgements[0].verdict, Verdict::kLose);
  EXPECT_EQ(vs_v1[2].config, "baseline");
  EXPECT_EQ(vs_v1[2].judgements[0].verdict, Verdict::kWin);

  // A reference that never ran gives no entries.
  EXPECT_TRUE(RegimeMap(t, {"round_robin"}).empty());
}

Sweep FixedSweep() {
  Sweep s;
  s.generated_at = "2026-01-01 00:00:00 UTC";
  s.setup = {{"fleet", "kvroute-sim, 2 instances"}};
  s.references = {"baseline"};
  s.samples = FixedSamples();
  return s;
}

TEST(SweepReportTest, MarkdownHasTheRegimeMapAndSpreads) {
  const std::string md = SweepMarkdown(FixedSweep());
  EXPECT_NE(md.find("## Regime map against baseline"), std::string::npos) << md;
  EXPECT_NE(md.find("| jobs/s | v1-T20k | v2-T20k |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 0.3 | win 0.55× (0.50–0.58×) / tie 0.94× (0.94–1.11×) | - 0.27× / - |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| 0.6 | lose 1.14× (1.05–1.25×) / win 0.76× (0.75–0.80×) | - |"),
            std::string::npos)
      << md;
  // Median [min–max] per figure; a single seed shows its value alone.
  EXPECT_NE(md.find("| 0.3 | v1-T20k | 3 | 102 [101–103] | 3.00 [2.50–3.50] | 6.00 [5.00–7.00] | "
                    "31.0 [29.0–40.0] |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| 0.3 | v2-T20k | 1 | 101 | 1.50 | 3.00 | - |"), std::string::npos) << md;
  EXPECT_NE(md.find("**jobs/s**: 0.3, 0.6; **seeds**: 1, 2, 3"), std::string::npos) << md;
}

TEST(SweepReportTest, JsonCarriesSamplesCellsAndVerdicts) {
  const json::value v = json::parse(json::serialize(SweepJson(FixedSweep())));
  EXPECT_EQ(v.at("samples").as_array().size(), FixedSamples().size());
  EXPECT_EQ(v.at("cells").as_array().size(), 5u);
  const json::object& cell = v.at("cells").as_array()[1].as_object();
  EXPECT_EQ(cell.at("config").as_string(), "v1-T20k");
  EXPECT_EQ(cell.at("seeds").as_array().size(), 3u);
  const json::object& p90 = cell.at("figures").at("ttft_p90_s").as_object();
  EXPECT_EQ(p90.at("n").as_int64(), 3);
  EXPECT_DOUBLE_EQ(p90.at("median").as_double(), 6);
  EXPECT_DOUBLE_EQ(p90.at("min").as_double(), 5);
  EXPECT_DOUBLE_EQ(p90.at("max").as_double(), 7);
  const json::array& regime = v.at("regime_map").as_array();
  ASSERT_EQ(regime.size(), 3u);
  EXPECT_EQ(regime[2].at("figures").at("ttft_p90_s").at("verdict").as_string(), "lose");
  EXPECT_EQ(regime[2].at("figures").at("ttft_p99_s").at("verdict").as_string(), "win");
  EXPECT_TRUE(regime[1].at("figures").at("ttft_p99_s").at("median_ratio").is_null());
  const json::object& paired =
      regime[0].at("figures").at("ttft_p90_s").at("paired_ratio").as_object();
  EXPECT_EQ(paired.at("n").as_int64(), 3);
  EXPECT_DOUBLE_EQ(paired.at("min").as_double(), 0.5);
  EXPECT_TRUE(v.at("tie_rule").is_string());
}

// `jobs` agent sessions of three turns, turn t of job j at a TTFT that varies with both,
// times `factor` (modelled seconds at time scale 1); every job completes, in `factor` x 10 s.
RunResult SessionRun(const std::string& name, int jobs, double factor) {
  RunResult run;
  run.name = name;
  run.mode = "baseline";
  for (int j = 0; j < jobs; ++j) {
    JobRecord& job = run.jobs.emplace_back();
    job.job = j;
    job.planned_turns = 3;
    job.ok = true;
    job.t_done = factor * 10;
    for (int t = 1; t <= 3; ++t) {
      RequestRecord r;
      r.job = j;
      r.turn = t;
      r.request_id = absl::StrCat("r", j, "-", t);
      r.klass = "WARM";
      r.ttft = factor * (0.2 + 0.1 * ((j * 5 + t) % 9));
      r.tpot = 0.01;
      run.requests.push_back(r);
    }
  }
  return run;
}

// Each other run of a point against each reference that ran there, paired over the point's
// sessions; sweep.md and sweep.json carry them.
TEST(SweepComparisonTest, EachConfigurationPairedWithEachReferenceAtAPoint) {
  Report report;
  report.runs = {SessionRun("baseline", 30, 1), SessionRun("blind", 30, 2),
                 SessionRun("notier", 30, 1)};
  absl::StatusOr<std::vector<SweepComparison>> c =
      ComparePoint({report}, 0.5, 3, {"baseline", "absent"}, CompareOptions{.resamples = 300});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->size(), 2u);
  const SweepComparison& blind = (*c)[0];
  EXPECT_EQ(blind.config, "blind");
  EXPECT_EQ(blind.reference, "baseline");
  EXPECT_EQ(blind.seed, 3u);
  EXPECT_DOUBLE_EQ(blind.jobs_per_second, 0.5);
  ASSERT_EQ(blind.comparison.figures.size(), kComparedFigures.size());
  const FigureComparison& p90 = blind.comparison.figures[1];
  EXPECT_EQ(p90.label, kComparedFigures[1]);
  EXPECT_GT(p90.low, 0);  // twice the reference's TTFT in every draw
  EXPECT_NEAR(p90.ratio, 2, 1e-9);
  EXPECT_NEAR(p90.ratio_low, 2, 1e-9);
  const FigureComparison& job = blind.comparison.figures[5];
  EXPECT_EQ(job.label, "mean job time (s)");
  EXPECT_DOUBLE_EQ(job.difference, 10);                    // 20 s a session against 10
  EXPECT_EQ((*c)[1].comparison.figures[1].difference, 0);  // the same turns

  Sweep sweep = FixedSweep();
  sweep.comparisons = *c;
  const std::string md = SweepMarkdown(sweep);
  EXPECT_NE(md.find("## Paired with baseline, by seed"), std::string::npos) << md;
  EXPECT_NE(md.find("over 300 draws"), std::string::npos) << md;
  EXPECT_NE(md.find("| jobs/s | seed | config | TTFT p50 (s), B - A | TTFT p90 (s), B - A | "
                    "TTFT p99 (s), B - A | goodput, B - A | goodput of planned turns, B - A | "
                    "mean job time (s), B - A | sessions completed, B - A | TTFT p90, B / A |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| 0.5 | 3 | notier | +0 [+0, +0] | +0 [+0, +0] | +0 [+0, +0] | +0.0 pt "
                    "[+0.0 pt, +0.0 pt] | +0.0 pt [+0.0 pt, +0.0 pt] | +0 [+0, +0] | +0.0 pt "
                    "[+0.0 pt, +0.0 pt] | 1 [1, 1] |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find(absl::StrCat("| ", RatioCell(p90), " |")), std::string::npos) << md;
  EXPECT_EQ(md.find("(lagged)"), std::string::npos) << "no simulator sampled: nothing flagged";

  const json::value v = json::parse(json::serialize(SweepJson(sweep)));
  const json::array& compared = v.at("comparisons").as_array();
  ASSERT_EQ(compared.size(), 2u);
  EXPECT_EQ(compared[0].at("config").as_string(), "blind");
  EXPECT_EQ(compared[0].at("reference").as_string(), "baseline");
  EXPECT_EQ(compared[0].at("seed").as_int64(), 3);
  EXPECT_NEAR(compared[0].at("comparison").at("figures").as_array()[1].at("ratio").as_double(), 2,
              1e-9);

  // Runs of different workloads share no session: the point names the pair.
  Report apart;
  apart.runs = {SessionRun("baseline", 3, 1), SessionRun("other", 3, 1)};
  for (RequestRecord& r : apart.runs[1].requests) r.job += 100;
  for (JobRecord& j : apart.runs[1].jobs) j.job += 100;
  const absl::Status s = ComparePoint({apart}, 1, 7, {"baseline"}, {}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("comparing other with baseline at 1 jobs/s, seed 7"),
            std::string_view::npos)
      << s;
}

// A pair one of whose runs' simulated fleet lagged past the bound is marked in the paired
// table, with the reason under it.
TEST(SweepComparisonTest, APairWithALaggingSimulatorIsMarked) {
  Report report;
  report.runs = {SessionRun("baseline", 10, 1), SessionRun("blind", 10, 1)};
  for (int k = 0; k < 10; ++k) {
    InstanceSample x;
    x.t = k;
    x.instance = "gpu0";
    x.sim_lag_s = 0.5 * report.runs[1].time_scale;  // 0.5 modelled seconds
    report.runs[1].samples.push_back(x);
  }
  absl::StatusOr<std::vector<SweepComparison>> c =
      ComparePoint({report}, 0.5, 1, {"baseline"}, CompareOptions{.resamples = 50});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->size(), 1u);
  EXPECT_TRUE(c->front().comparison.sim_lag_exceeded);
  Sweep sweep = FixedSweep();
  sweep.comparisons = *c;
  const std::string md = SweepMarkdown(sweep);
  EXPECT_NE(md.find("| 0.5 | 1 | blind (lagged) |"), std::string::npos) << md;
  EXPECT_NE(md.find("(lagged): the simulated fleet of one side or both ran more than 0.25 "
                    "modelled s behind"),
            std::string::npos)
      << md;
}

// Repeats of a point: each side of a comparison is its runs over the repeats.
TEST(SweepComparisonTest, RepeatsOfAPointAreDrawnToo) {
  Report first, second;
  first.runs = {SessionRun("baseline", 20, 1), SessionRun("fast", 20, 0.5)};
  second.runs = {SessionRun("baseline", 20, 1.2), SessionRun("fast", 20, 0.5)};
  absl::StatusOr<std::vector<SweepComparison>> c =
      ComparePoint({first, second}, 1, 2, {"baseline"}, CompareOptions{.resamples = 300});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->size(), 1u);
  const Comparison& fast = c->front().comparison;
  EXPECT_EQ(fast.a_repeats, 2);
  EXPECT_EQ(fast.b_repeats, 2);
  EXPECT_EQ(fast.a_label, "2 repeats: baseline, run 1; baseline, run 2");
  // The reference's figure is the mean of its two runs, 1.1 times the single-run TTFT.
  const FigureComparison& p90 = fast.figures[1];
  EXPECT_NEAR(p90.ratio, 0.5 / 1.1, 1e-9);
  EXPECT_LT(p90.high, 0);
  EXPECT_LT(p90.ratio_low, p90.ratio);  // the runs drawn: some draws hold the slower one only

  Sweep sweep = FixedSweep();
  sweep.comparisons = *c;
  EXPECT_NE(SweepMarkdown(sweep).find("With the point's 2 runs a side"), std::string::npos);
}

// A seed run more than once counts as the mean of its runs in the figures over the seeds.
TEST(AggregateSweepTest, ASeedsRepeatsAreAveraged) {
  // TTFT p50 is half the p90 given.
  std::vector<SweepSample> samples = {Sample(0.5, 1, "baseline", 4, 20),
                                      Sample(0.5, 1, "baseline", 8, 30),
                                      Sample(0.5, 2, "baseline", 20, kNaN)};
  samples[1].repeat = 2;
  const SweepTable t = AggregateSweep(samples);
  ASSERT_EQ(t.cells.size(), 1u);
  const SweepCell& c = t.cells[0];
  EXPECT_EQ(c.repeats, 2);
  ASSERT_EQ(c.by_seed.size(), 2u);
  EXPECT_DOUBLE_EQ(c.by_seed[0].second[Index(SweepFigure::kTtftP50)], 3);
  EXPECT_DOUBLE_EQ(c.by_seed[0].second[Index(SweepFigure::kTtftP99)], 25);
  EXPECT_TRUE(std::isnan(c.by_seed[1].second[Index(SweepFigure::kTtftP99)]));
  const Spread& p50 = c.figures[Index(SweepFigure::kTtftP50)];
  EXPECT_EQ(p50.n, 2);
  EXPECT_DOUBLE_EQ(p50.min, 3);
  EXPECT_DOUBLE_EQ(p50.max, 10);
  Sweep sweep = FixedSweep();
  sweep.samples = samples;
  const std::string md = SweepMarkdown(sweep);
  EXPECT_NE(md.find("**runs of each point**: 2"), std::string::npos) << md;
  // Requests 101 (both of seed 1's runs) and 102: a median between them.
  EXPECT_NE(md.find("| 0.5 | baseline | 2 | 101.5 [101–102] | 6.50 [3.00–10.0] |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("`jps-<rate>/seed-<seed>/run-<k>/report.md`"), std::string::npos) << md;
  const json::value v = json::parse(json::serialize(SweepJson(sweep)));
  EXPECT_EQ(v.at("samples").as_array()[1].at("repeat").as_int64(), 2);
  EXPECT_EQ(v.at("cells").as_array()[0].at("repeats").as_int64(), 2);
}

WorkloadSpec AgenticBase() {
  WorkloadSpec w;
  w.kind = WorkloadKind::kAgentic;
  w.agentic.duration_s = 600;
  w.agentic.task_tokens = 2000;
  w.agentic.task_tokens_max = 50000;
  w.agentic.seed = 99;
  return w;
}

TEST(SweepWorkloadTest, APointsPlanDependsOnRateAndSeedOnly) {
  const WorkloadSpec base = AgenticBase();
  const WorkloadSpec a = SweepPointWorkload(base, 0.5, 7);
  const WorkloadSpec b = SweepPointWorkload(base, 0.5, 7);
  EXPECT_EQ(a.agentic.seed, 7u);
  EXPECT_DOUBLE_EQ(a.agentic.jobs_per_second, 0.5);
  const std::vector<AgenticJob> ja = PlanAgenticJobs(a.agentic);
  const std::vector<AgenticJob> jb = PlanAgenticJobs(b.agentic);
  ASSERT_GT(ja.size(), 100u);
  ASSERT_EQ(ja.size(), jb.size());
  for (size_t i = 0; i < ja.size(); ++i) {
    EXPECT_EQ(ja[i].arrival_s, jb[i].arrival_s);
    EXPECT_EQ(ja[i].session_id, jb[i].session_id);
    EXPECT_EQ(AgenticTask(a.agentic, ja[i].id), AgenticTask(b.agentic, jb[i].id));
  }
  EXPECT_EQ(AgenticSystemPrompt(a.agentic), AgenticSystemPrompt(b.agentic));

  // Another seed is another workload.
  const WorkloadSpec c = SweepPointWorkload(base, 0.5, 8);
  const std::vector<AgenticJob> jc = PlanAgenticJobs(c.agentic);
  ASSERT_FALSE(jc.empty());
  EXPECT_NE(ja[0].arrival_s, jc[0].arrival_s);
  EXPECT_FALSE(AgenticTaskTokens(a.agentic, 0) == AgenticTaskTokens(c.agentic, 0) &&
               AgenticTaskTokens(a.agentic, 1) == AgenticTaskTokens(c.agentic, 1) &&
               AgenticTaskTokens(a.agentic, 2) == AgenticTaskTokens(c.agentic, 2));
}

TEST(SweepWorkloadTest, OneSeedKeepsItsJobsAcrossRates) {
  const WorkloadSpec base = AgenticBase();
  const WorkloadSpec slow = SweepPointWorkload(base, 0.25, 3);
  const WorkloadSpec fast = SweepPointWorkload(base, 0.75, 3);
  const std::vector<AgenticJob> js = PlanAgenticJobs(slow.agentic);
  const std::vector<AgenticJob> jf = PlanAgenticJobs(fast.agentic);
  ASSERT_GT(js.size(), 50u);
  ASSERT_GT(jf.size(), js.size());
  for (size_t i = 0; i < js.size(); ++i) {
    EXPECT_EQ(js[i].id, jf[i].id);
    EXPECT_NEAR(jf[i].arrival_s, js[i].arrival_s / 3, 1e-9);
    EXPECT_EQ(AgenticTaskTokens(slow.agentic, js[i].id), AgenticTaskTokens(fast.agentic, jf[i].id));
  }
}

SweepOptions ValidOptions() {
  SweepOptions o;
  o.jobs_per_second = {0.3, 0.6};
  o.seeds = {1, 2};
  o.ablation.modes = {"baseline", "v1"};
  o.ablation.thresholds = {20000};
  return o;
}

TEST(ValidateSweepTest, RejectsWhatASweepCannotCompare) {
  const WorkloadSpec base = AgenticBase();
  EXPECT_TRUE(ValidateSweep(ValidOptions(), base).ok());

  auto message = [&](SweepOptions o, WorkloadSpec w) {
    absl::Status s = ValidateSweep(o, w);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    return std::string(s.message());
  };
  SweepOptions o = ValidOptions();
  o.jobs_per_second = {0.3, 0};
  EXPECT_NE(message(o, base).find("positive"), std::string::npos);
  o.jobs_per_second = {0.3, 0.3};
  EXPECT_NE(message(o, base).find("given twice"), std::string::npos);
  o.jobs_per_second = {};
  EXPECT_NE(message(o, base).find("--jps"), std::string::npos);

  o = ValidOptions();
  o.seeds = {4, 4};
  EXPECT_NE(message(o, base).find("seed 4 given twice"), std::string::npos);
  o.seeds = {};
  EXPECT_NE(message(o, base).find("seed"), std::string::npos);

  o = ValidOptions();
  o.references = {"v2"};
  EXPECT_NE(message(o, base).find("v2 is not one of the configurations (baseline, v1-T20k)"),
            std::string::npos);
  o.references = {"v1-T20k"};
  EXPECT_TRUE(ValidateSweep(o, base).ok());
  // A variant is a configuration, a reference too; one named as another is refused.
  o.ablation.variants = {*ParseConfigVariant("blind=baseline;tier_aware=false")};
  o.references = {"blind", "baseline"};
  EXPECT_TRUE(ValidateSweep(o, base).ok());
  o.ablation.variants.push_back(*ParseConfigVariant("baseline=least_loaded"));
  EXPECT_NE(message(o, base).find("--variant baseline"), std::string::npos);

  o = ValidOptions();
  o.repeats = 0;
  EXPECT_NE(message(o, base).find("--repeats"), std::string::npos);
  o.repeats = 21;
  EXPECT_NE(message(o, base).find("--repeats"), std::string::npos);

  o = ValidOptions();
  o.ablation.targets = {{"baseline", "http://127.0.0.1:8000"}};
  EXPECT_NE(message(o, base).find("embedded simulated fleet"), std::string::npos);

  WorkloadSpec trace;
  trace.kind = WorkloadKind::kTrace;
  EXPECT_NE(message(ValidOptions(), trace).find("--workload agentic"), std::string::npos);
  WorkloadSpec preset = base;
  preset.agentic = AgenticLongPreset(1804800, 2.0, 60, 1);
  EXPECT_TRUE(ValidateSweep(ValidOptions(), preset).ok());
  // A preset label without the inputs to rebuild it at another seed.
  preset.agentic.long_preset = {};
  EXPECT_NE(message(ValidOptions(), preset).find("--workload agentic"), std::string::npos);
}

TEST(SweepWorkloadTest, TheLongPresetIsRebuiltAtEachSeed) {
  WorkloadSpec base;
  base.kind = WorkloadKind::kAgentic;
  base.agentic = AgenticLongPreset(1804800, 2.0, 60, 1);
  for (uint64_t seed : {1u, 2u, 3u}) {
    const WorkloadSpec w = SweepPointWorkload(base, 0.9, seed);
    const AgenticOptions want = AgenticLongPreset(1804800, 2.0, 60, seed);
    EXPECT_EQ(w.agentic.preset, "agentic-long");
    EXPECT_EQ(w.agentic.seed, seed);
    EXPECT_EQ(w.agentic.max_jobs, want.max_jobs) << "seed " << seed;
    EXPECT_DOUBLE_EQ(w.agentic.duration_s, 60);
    EXPECT_DOUBLE_EQ(w.agentic.jobs_per_second, 0.9);
    const std::vector<AgenticJob> jobs = PlanAgenticJobs(w.agentic);
    ASSERT_FALSE(jobs.empty());
    EXPECT_LE(jobs.size(), static_cast<size_t>(want.max_jobs));
    EXPECT_EQ(AgenticTaskTokens(w.agentic, 0), AgenticTaskTokens(want, 0));
  }
  // The sizing rule gives seed 3 one job fewer than seed 1 (41 against 42): the preset is
  // rebuilt, not copied. One seed's plan is the same at every configuration of a point.
  EXPECT_EQ(SweepPointWorkload(base, 0.9, 3).agentic.max_jobs + 1, base.agentic.max_jobs);
  // The preset's tool time is rebuilt with it.
  WorkloadSpec slow = base;
  slow.agentic = AgenticLongPreset(1804800, 2.0, 60, 1, 10, 30);
  const WorkloadSpec rebuilt = SweepPointWorkload(slow, 0.9, 3);
  EXPECT_DOUBLE_EQ(rebuilt.agentic.tool_time_s, 10);
  EXPECT_DOUBLE_EQ(rebuilt.agentic.tool_time_max_s, 30);
  EXPECT_EQ(rebuilt.agentic.max_jobs, SweepPointWorkload(base, 0.9, 3).agentic.max_jobs);
  slow.agentic = AgenticLongPreset(1804800, 2.0, 60, 1, 5.2, 5.2, 81.4);
  EXPECT_DOUBLE_EQ(SweepPointWorkload(slow, 0.9, 3).agentic.tool_time_p99_s, 81.4);
  const WorkloadSpec a = SweepPointWorkload(base, 0.9, 2);
  const WorkloadSpec b = SweepPointWorkload(base, 0.9, 2);
  const std::vector<AgenticJob> ja = PlanAgenticJobs(a.agentic);
  const std::vector<AgenticJob> jb = PlanAgenticJobs(b.agentic);
  ASSERT_EQ(ja.size(), jb.size());
  for (size_t i = 0; i < ja.size(); ++i) EXPECT_EQ(ja[i].arrival_s, jb[i].arrival_s);
  EXPECT_NE(AgenticTaskTokens(SweepPointWorkload(base, 0.9, 1).agentic, 0),
            AgenticTaskTokens(a.agentic, 0));
  // The client's behaviour survives the rebuild.
  base.agentic.client = {.send_session_ids = false, .open_loop_turn_s = 12};
  const WorkloadSpec c = SweepPointWorkload(base, 0.9, 2);
  EXPECT_FALSE(c.agentic.client.send_session_ids);
  EXPECT_DOUBLE_EQ(c.agentic.client.open_loop_turn_s, 12);
  EXPECT_EQ(PlanAgenticJobs(c.agentic).front().session_id, "");
}

TEST(SweepPointDirTest, RateAndSeedInThePath) {
  EXPECT_EQ(SweepPointDir("out/sw", 0.25, 3), "out/sw/jps-0.25/seed-3");
  EXPECT_EQ(SweepPointDir("out", 2, 1), "out/jps-2/seed-1");
  EXPECT_EQ(SweepRunDir("out", 2, 1, 1, 1), "out/jps-2/seed-1");
  EXPECT_EQ(SweepRunDir("out", 2, 1, 3, 4), "out/jps-2/seed-1/run-3");
}

}  // namespace
}  // namespace kvroute::bench
