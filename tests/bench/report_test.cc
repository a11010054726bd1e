#include "bench/kvroute_bench/report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "bench/kvroute_bench/ablation.h"
#include "bench/kvroute_bench/metrics_sampler.h"
#include "bench/kvroute_bench/stats.h"
#include "bench/kvroute_bench/svg_chart.h"
#include "bench/kvroute_bench/sweep.h"
#include "proxy/config.h"

namespace kvroute::bench {
namespace {
namespace json = boost::json;

TEST(PercentileTest, LinearInterpolation) {
  std::vector<double> v = {10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 5.5);
  EXPECT_DOUBLE_EQ(Percentile(v, 90), 9.1);
  EXPECT_NEAR(Percentile(v, 99), 9.91, 1e-12);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 10);
  EXPECT_DOUBLE_EQ(Percentile({3}, 99), 3);
  EXPECT_TRUE(std::isnan(Percentile({}, 50)));
  const Distribution d = Describe(v);
  EXPECT_EQ(d.n, 10);
  EXPECT_DOUBLE_EQ(d.mean, 5.5);
  EXPECT_DOUBLE_EQ(d.max, 10);
  EXPECT_TRUE(std::isnan(Describe({}).p50));
}

RequestRecord Req(std::string klass, double ttft, double e2e, int64_t prompt, int64_t cached,
                  std::string backend = "gpu0") {
  RequestRecord r;
  r.klass = std::move(klass);
  r.backend = std::move(backend);
  r.http_status = 200;
  r.ttft = ttft;
  r.tpot = 0.01;
  r.e2e = e2e;
  r.prompt_tokens = prompt;
  r.cached_tokens = cached;
  r.completion_tokens = 20;
  r.bound_cached_tokens = prompt / 2;
  return r;
}

RunResult FixedRun(std::string name, double scale) {
  RunResult run;
  run.name = std::move(name);
  run.mode = "v2";
  run.heavy_threshold = 20000;
  run.workload = "agentic";
  run.time_scale = scale;
  run.duration_s = 10 * scale;
  run.requests = {Req("WARM", 0.1 * scale, 0.5 * scale, 1000, 900),
                  Req("WARM", 0.3 * scale, 0.7 * scale, 1000, 800),
                  Req("HEAVY", 2.0 * scale, 3.0 * scale, 30000, 0, "gpu1->gpu3"),
                  Req("MEDIUM", 1.0 * scale, 1.5 * scale, 8000, 1000)};
  RequestRecord failed;
  failed.klass = "WARM";
  failed.error = "http 503: overloaded";
  failed.http_status = 503;
  run.requests.push_back(failed);
  run.dropped = 1;
  JobRecord j1{.job = 0,
               .t_arrival = 0,
               .t_done = 4 * scale,
               .ok = true,
               .turn_e2e = {1 * scale, 2 * scale}};
  JobRecord j2{.job = 1,
               .t_arrival = 1 * scale,
               .t_done = 7 * scale,
               .ok = true,
               .turn_e2e = {1 * scale, 4 * scale}};
  run.jobs = {j1, j2};
  run.samples = {
      {.t = 0, .instance = "gpu0", .kv_usage = 0.2, .running = 1, .waiting = 0, .gpu_busy = 0.5},
      {.t = 2 * scale,
       .instance = "gpu0",
       .kv_usage = 0.6,
       .running = 2,
       .waiting = 1,
       .gpu_busy = 0.7},
      {.t = 0, .instance = "gpu1", .kv_usage = 0.4, .running = 0, .waiting = 0, .gpu_busy = 0.1}};
  return run;
}

TEST(SummaryTest, FixedInputs) {
  const RunSummary s = Summarize(FixedRun("v2-T20k", 1.0));
  EXPECT_EQ(s.requests, 5);
  EXPECT_EQ(s.errors, 1);
  EXPECT_EQ(s.dropped, 1);
  EXPECT_DOUBLE_EQ(s.error_rate, 2.0 / 6.0);
  EXPECT_EQ(s.offloads, 1);
  EXPECT_EQ(s.prompt_tokens, 40000);
  EXPECT_EQ(s.cached_tokens, 2700);
  EXPECT_EQ(s.transferred_tokens, 0);  // the offloaded request reported 0 cached
  EXPECT_DOUBLE_EQ(s.hit_ratio, 2700.0 / 40000.0);
  EXPECT_DOUBLE_EQ(s.bound_hit_ratio, 0.5);
  ASSERT_EQ(s.classes.size(), 4u);
  EXPECT_EQ(s.classes[0].klass, "ALL");
  EXPECT_EQ(s.classes[0].requests, 4);
  EXPECT_EQ(s.classes[1].klass, "WARM");
  EXPECT_EQ(s.classes[2].klass, "MEDIUM");
  EXPECT_EQ(s.classes[3].klass, "HEAVY");
  EXPECT_DOUBLE_EQ(s.classes[1].ttft.p50, 0.2);
  EXPECT_DOUBLE_EQ(s.classes[3].ttft.p99, 2.0);
  EXPECT_DOUBLE_EQ(s.classes[0].ttft.p50, 0.65);
  EXPECT_DOUBLE_EQ(s.throughput_rps, 0.4);
  EXPECT_EQ(s.jobs_ok, 2);
  EXPECT_DOUBLE_EQ(s.job_completion.p50, 5.0);
  ASSERT_EQ(s.turn_mean_e2e.size(), 2u);
  EXPECT_DOUBLE_EQ(s.turn_mean_e2e[0], 1.0);
  EXPECT_DOUBLE_EQ(s.turn_mean_e2e[1], 3.0);
  EXPECT_DOUBLE_EQ(s.t8_over_t1, 3.0);
  EXPECT_DOUBLE_EQ(s.mean_kv_usage, 0.4);
  EXPECT_DOUBLE_EQ(s.max_kv_usage, 0.6);
}

TEST(SummaryTest, QueuedSplitsWaitsForMemoryFromWaitsForCompute) {
  RunResult run = FixedRun("v1", 1.0);
  // FixedRun: three samples, one with a request waiting at 60 % KV (a wait for compute).
  EXPECT_DOUBLE_EQ(Summarize(run).queued_share, 1.0 / 3);
  EXPECT_DOUBLE_EQ(Summarize(run).queued_kv_full_share, 0);
  run.samples.push_back({.t = 3, .instance = "gpu1", .kv_usage = kKvFullUsage, .waiting = 2});
  run.samples.push_back({.t = 4, .instance = "gpu1", .kv_usage = 0.99, .waiting = 0});
  // No waiting gauge: neither a wait nor its absence.
  run.samples.push_back({.t = 5, .instance = "gpu1", .kv_usage = 0.99});
  const RunSummary s = Summarize(run);
  EXPECT_DOUBLE_EQ(s.queued_share, 2.0 / 5);
  EXPECT_DOUBLE_EQ(s.queued_kv_full_share, 1.0 / 5);
  Report report;
  report.runs = {run};
  const std::string md = ReportMarkdown(report);
  EXPECT_NE(md.find("| GPU busy | queued (KV full) | goodput |"), std::string::npos);
  EXPECT_NE(md.find("| 40.0% (20.0%) |"), std::string::npos);
  const json::value j = ReportJson(report);
  const json::object& summary = j.at("runs").as_array()[0].at("summary").as_object();
  EXPECT_DOUBLE_EQ(summary.at("queued_share").as_double(), 0.4);
  EXPECT_DOUBLE_EQ(summary.at("queued_kv_full_share").as_double(), 0.2);
  // Without samples there is nothing to split.
  run.samples.clear();
  EXPECT_EQ(Summarize(run).queued_share, -1);
  report.runs = {run};
  EXPECT_TRUE(
      ReportJson(report).at("runs").as_array()[0].at("summary").at("queued_share").is_null());
}

TEST(SessionTurnsTest, SplitsFirstHomeAndMovedTurns) {
  auto turn = [](int64_t job, int t, std::string backend, int64_t prompt, int64_t cached) {
    RequestRecord r = Req("WARM", 0.1, 0.2, prompt, cached, std::move(backend));
    r.job = job;
    r.turn = t;
    return r;
  };
  RunResult run;
  run.name = "v";
  RequestRecord shed = turn(1, 4, "gpu0", 16000, 0);
  shed.error = "429";
  shed.http_status = 429;
  shed.failure = RequestOutcome::kShed;
  RequestRecord unnamed = turn(3, 1, "", 9000, 0);
  RequestRecord trace = turn(-1, 0, "gpu0", 1000, 0);
  // Job 1's move recomputes its context: 5 s of compute alone, past the WARM SLO (2 s).
  RequestRecord recompute = turn(1, 3, "gpu1", 14000, 0);
  recompute.compute_floor_s = 5;
  recompute.ttft = 6;
  // Job 2's move waited: its floor is within the SLO, its TTFT is not.
  RequestRecord waited = turn(2, 2, "gpu3", 6000, 3000);
  waited.compute_floor_s = 1;
  waited.ttft = 3;
  run.requests = {
      turn(1, 1, "gpu0", 10000, 0),      // first: 10000 computed
      waited,                            // job 2's second turn, moved: 3000
      turn(1, 2, "gpu0", 12000, 10000),  // home: 2000
      recompute,                         // moved: 14000
      shed,                              // not served: no turn
      // Served on the retry, offloaded to gpu1: its KV ends at home; its prefill
      // instance computed the whole prompt.
      turn(1, 4, "gpu0->gpu1", 16000, 14000),
      turn(2, 1, "gpu2", 5000, 0),  // job 2's first turn: 5000
      unnamed,                      // no backend: nothing says where it ran
      trace,                        // no session
  };
  const SessionTurns t = SplitSessionTurns(run.requests);
  using Kind = std::pair<int64_t, int64_t>;  // turns, computed tokens
  auto kind = [](const TurnKind& k) { return Kind{k.turns, k.computed_tokens}; };
  EXPECT_EQ(kind(t.first), (Kind{2, 15000}));
  EXPECT_EQ(kind(t.home), (Kind{2, 18000}));
  EXPECT_EQ(kind(t.moved), (Kind{2, 17000}));
  // Judged against the default SLOs: every other served turn met them.
  EXPECT_EQ(t.moved.slo_met, 0);
  EXPECT_EQ(t.moved.missed_floor, 1);
  EXPECT_EQ(t.home.slo_met, 2);
  EXPECT_EQ(t.first.slo_met, 2);
  EXPECT_EQ(t.home.missed_floor + t.first.missed_floor, 0);
  // Under a time scale the floor is in wall seconds like the TTFT: 5 s is 0.5 modelled.
  EXPECT_EQ(SplitSessionTurns(run.requests, {}, 10).moved.missed_floor, 0);
  EXPECT_EQ(KvInstance("gpu1->gpu3"), "gpu3");
  EXPECT_EQ(KvInstance("gpu1"), "gpu1");

  Report report;
  report.runs = {run};
  const std::string md = ReportMarkdown(report);
  EXPECT_NE(md.find("## Session turns: at home or moved"), std::string::npos);
  EXPECT_NE(md.find("| v | 2 / 15000 | 2 / 18000 | 2 / 17000 | 34.0% | 2 / 2 / 0 | 0 / 0 / 1 |"),
            std::string::npos)
      << md;
  const json::value j = ReportJson(report);
  const json::value& in_json = j.at("runs").as_array()[0].at("summary").at("session_turns");
  EXPECT_EQ(in_json.at("moved").at("turns").as_int64(), 2);
  EXPECT_EQ(in_json.at("home").at("computed_tokens").as_int64(), 18000);
  EXPECT_EQ(in_json.at("moved").at("missed_floor").as_int64(), 1);
  EXPECT_EQ(in_json.at("home").at("slo_met").as_int64(), 2);
  // The sweep's figures: every successful request's computed tokens (the unnamed and the
  // trace request's too; the offloaded one's cached tokens were pulled, not hits).
  const SweepFigureValues v = SweepFiguresOf(Summarize(run));
  EXPECT_DOUBLE_EQ(v[static_cast<size_t>(SweepFigure::kMovedTurns)], 2);
  EXPECT_DOUBLE_EQ(v[static_cast<size_t>(SweepFigure::kComputedTokens)],
                   15000 + 18000 + 17000 + 9000 + 1000);
  // No agent session: no split, and the report leaves the section out.
  run.requests = {trace};
  EXPECT_FALSE(Summarize(run).session_turns.known());
  report.runs = {run};
  EXPECT_EQ(ReportMarkdown(report).find("Session turns"), std::string::npos);
  EXPECT_TRUE(
      ReportJson(report).at("runs").as_array()[0].at("summary").at("session_turns").is_null());
}

TEST(InstanceLoadTest, CountsSessionsRequestsAndGaugesPerInstance) {
  auto turn = [](int64_t job, int t, double start, std::string backend, int64_t prompt,
                 int64_t cached) {
    RequestRecord r = Req("WARM", 0.1, 0.2, prompt, cached, std::move(backend));
    r.job = job;
    r.turn = t;
    r.t_start = start;
    return r;
  };
  RequestRecord shed = turn(3, 1, 0.0, "gpu1", 5000, 0);
  shed.error = "429";
  shed.http_status = 429;
  shed.failure = RequestOutcome::kShed;
  RunResult run;
  run.name = "v";
  run.requests = {
      turn(1, 2, 2.0, "gpu0", 12000, 10000),      // 2000 computed on gpu0
      turn(1, 1, 1.0, "gpu0", 10000, 0),          // job 1 starts on gpu0: 10000
      turn(2, 1, 1.5, "gpu0", 8000, 0),           // job 2 starts on gpu0 too: 8000
      turn(2, 2, 3.0, "gpu0->gpu1", 9000, 8000),  // offloaded: 9000 computed on gpu0
      shed,                                       // job 3's shed first turn: nowhere
      turn(3, 1, 4.0, "gpu1", 5000, 0),           // job 3 starts on gpu1 on the retry: 5000
      turn(-1, 0, 0.5, "gpu2", 1000, 0),          // no session: served on gpu2, 1000
  };
  auto sample = [](std::string name, double running, double waiting, double busy) {
    InstanceSample x;
    x.instance = std::move(name);
    x.running = running;
    x.waiting = waiting;
    x.gpu_busy = busy;
    return x;
  };
  run.samples = {sample("gpu0", 3, 1, 1.0), sample("gpu0", 1, 0, 0.5), sample("gpu1", 1, 0, 0.5),
                 sample("gpu1", 1, 0, -1),  sample("gpu2", 0, 0, 0.0), sample("gpu3", 0, 0, 0.0)};

  const std::vector<InstanceLoad> loads = InstanceLoads(run.requests, run.samples);
  ASSERT_EQ(loads.size(), 4u);
  using Row = std::tuple<std::string, int64_t, int64_t, int64_t, double, double, double>;
  auto row = [](const InstanceLoad& l) {
    return Row{l.instance, l.sessions_started, l.served,  l.computed_tokens,
               l.running,  l.waiting,          l.gpu_busy};
  };
  EXPECT_EQ(row(loads[0]), (Row{"gpu0", 2, 3, 2000 + 10000 + 8000 + 9000, 2, 0.5, 0.75}));
  EXPECT_EQ(row(loads[1]), (Row{"gpu1", 1, 2, 5000, 1, 0, 0.5}));
  EXPECT_EQ(row(loads[2]), (Row{"gpu2", 0, 1, 1000, 0, 0, 0}));
  EXPECT_EQ(row(loads[3]), (Row{"gpu3", 0, 0, 0, 0, 0, 0}));  // idle all run

  const LoadSpread s = LoadSpreadOf(loads);
  EXPECT_EQ(s.served.n, 4);  // the idle instance counts, as 0
  EXPECT_DOUBLE_EQ(s.served.min, 0);
  EXPECT_DOUBLE_EQ(s.served.max, 3);
  EXPECT_DOUBLE_EQ(s.sessions_started.max, 2);
  EXPECT_DOUBLE_EQ(s.computed_tokens.max_over_mean(), 29000.0 / (35000.0 / 4));
  EXPECT_DOUBLE_EQ(s.running.mean, 0.75);
  EXPECT_EQ(s.busiest, "gpu0");

  Report report;
  report.runs = {run};
  const std::string md = ReportMarkdown(report);
  EXPECT_NE(md.find("## Load per instance"), std::string::npos);
  EXPECT_NE(md.find("| v | 4 | 0-2 | 0-3 | 3.31 | 0.75 (0.00-2.00) | 0.12 (0.00-0.50) | "
                    "31.2% (0.0%-75.0%) | gpu0 |"),
            std::string::npos)
      << md;
  // report.html carries the same table.
  const std::string html = ReportHtml(report);
  EXPECT_NE(html.find("<h2>Load per instance</h2>"), std::string::npos);
  EXPECT_NE(html.find("<td>0.75 (0.00-2.00)</td>"), std::string::npos) << html;
  const json::value j = ReportJson(report);
  const json::array& in_json = j.at("runs").as_array()[0].at("summary").at("instances").as_array();
  ASSERT_EQ(in_json.size(), 4u);
  EXPECT_EQ(in_json[0].at("sessions_started").as_int64(), 2);
  EXPECT_DOUBLE_EQ(in_json[1].at("running").as_double(), 1);

  // The sweep's figure: the busiest instance's requests running over the fleet's mean.
  const size_t most = static_cast<size_t>(SweepFigure::kRunningMostOverMean);
  EXPECT_DOUBLE_EQ(SweepFiguresOf(Summarize(run))[most], 2.0 / 0.75);

  // A target that names no backend and one instance sampled: nothing to spread.
  for (RequestRecord& r : run.requests) r.backend.clear();
  run.samples = {sample("gpu0", 1, 0, 0.5)};
  report.runs = {run};
  EXPECT_EQ(ReportMarkdown(report).find("Load per instance"), std::string::npos);
  EXPECT_TRUE(std::isnan(SweepFiguresOf(Summarize(run))[most]));
}

TEST(SummaryTest, ReportsModelledSecondsUnderATimeScale) {
  const RunSummary a = Summarize(FixedRun("a", 1.0));
  const RunSummary b = Summarize(FixedRun("b", 0.05));
  EXPECT_NEAR(a.classes[0].ttft.p99, b.classes[0].ttft.p99, 1e-9);
  EXPECT_NEAR(a.job_completion.p50, b.job_completion.p50, 1e-9);
  EXPECT_NEAR(a.throughput_rps, b.throughput_rps, 1e-9);
}

Report FixedReport() {
  Report r;
  r.title = "test <ablation>";
  r.generated_at = "2026-01-01 00:00:00 UTC";
  r.setup = {{"workload", "agentic & co"}};
  r.runs = {FixedRun("baseline", 1.0), FixedRun("v2-T20k", 1.0)};
  r.runs[0].mode = "baseline";
  return r;
}

TEST(ReportTest, JsonCarriesSummariesAndRecords) {
  const json::value v = ReportJson(FixedReport());
  const json::array& runs = v.at("runs").as_array();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].at("name").as_string(), "baseline");
  const json::object& s = runs[1].at("summary").as_object();
  EXPECT_EQ(s.at("offloads").as_int64(), 1);
  EXPECT_DOUBLE_EQ(s.at("classes").at("WARM").at("ttft_s").at("p50").as_double(), 0.2);
  EXPECT_EQ(runs[1].at("requests").as_array().size(), 5u);
  EXPECT_EQ(runs[1].at("jobs").as_array().size(), 2u);
  EXPECT_EQ(runs[1].at("samples").as_array().size(), 3u);
  // Parses back from text.
  EXPECT_EQ(json::parse(json::serialize(v)).at("runs").as_array().size(), 2u);
}

TEST(ReportTest, MarkdownAndTextTables) {
  const Report r = FixedReport();
  const std::string md = ReportMarkdown(r);
  EXPECT_NE(md.find("| config | requests |"), std::string::npos);
  EXPECT_NE(md.find("| v2-T20k |"), std::string::npos);
  EXPECT_NE(md.find("## Latency per class"), std::string::npos);
  EXPECT_NE(md.find("| T1 | T2 |"), std::string::npos);
  const std::string table = SummaryTable(r);
  EXPECT_NE(table.find("baseline"), std::string::npos);
  EXPECT_NE(table.find("TTFTp99"), std::string::npos);
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 3);
  EXPECT_EQ(ReportMarkdown(r), md);  // deterministic
}

TEST(ReportTest, HtmlIsSelfContainedWithCharts) {
  const std::string html = ReportHtml(FixedReport());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org/2000/svg"));  // no external refs
  EXPECT_NE(html.find("TTFT CDF: HEAVY"), std::string::npos);
  EXPECT_NE(html.find("TTFT CDF: MEDIUM"), std::string::npos);
  EXPECT_NE(html.find("Mean end-to-end latency per agent turn"), std::string::npos);
  EXPECT_NE(html.find("KV usage: v2-T20k"), std::string::npos);
  EXPECT_NE(html.find("no sample"), std::string::npos);  // the heat map's scale
  EXPECT_NE(html.find("test &lt;ablation&gt;"), std::string::npos);
  EXPECT_NE(html.find("agentic &amp; co"), std::string::npos);
  size_t svgs = 0;
  for (size_t p = html.find("<svg"); p != std::string::npos; p = html.find("<svg", p + 1)) ++svgs;
  EXPECT_EQ(svgs, 4u /*TTFT classes*/ + 1u /*turns*/ + 2u /*KV per config*/);
}

TEST(ReportTest, WritesThreeFiles) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kvb_report_" + std::to_string(::getpid()));
  ASSERT_TRUE(WriteReports(FixedReport(), dir.string()).ok());
  for (const char* f : {"report.json", "report.md", "report.html"}) {
    EXPECT_GT(std::filesystem::file_size(dir / f), 100u) << f;
  }
  std::filesystem::remove_all(dir);
}

TEST(SvgChartTest, CdfAndRendering) {
  const auto pts = CdfPoints({3, 1, 2, 4});
  ASSERT_EQ(pts.size(), 8u);  // a step per value
  EXPECT_EQ(pts[0], (std::pair<double, double>(1, 0.0)));
  EXPECT_EQ(pts[1], (std::pair<double, double>(1, 0.25)));
  EXPECT_EQ(pts.back(), (std::pair<double, double>(4, 1.0)));
  std::vector<double> many(1000);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<double>(i);
  EXPECT_LE(CdfPoints(many, 100).size(), 101u);
  EXPECT_EQ(CdfPoints(many, 100).back().second, 1.0);

  ChartOptions o{.title = "a<b", .x_label = "x", .y_label = "y", .log_x = true};
  const std::string svg = RenderLineChart(
      o, {{"s1", {{0.01, 0.1}, {1, 0.5}, {10, 1}}, ""}, {"s2", {{0.1, 0.2}, {0, 0.3}}, ""}});
  EXPECT_NE(svg.find("a&lt;b"), std::string::npos);
  EXPECT_EQ(std::count(svg.begin(), svg.end(), '\n') > 5, true);
  size_t lines = 0;
  for (size_t p = svg.find("<polyline"); p != std::string::npos; p = svg.find("<polyline", p + 1))
    ++lines;
  EXPECT_EQ(lines, 2u);
  EXPECT_NE(RenderLineChart(o, {}).find("no data"), std::string::npos);
}

TEST(PrometheusTest, ParsesVllmAndSimulatorGauges) {
  const std::string text =
      "# HELP vllm:kv_cache_usage_perc KV usage\n"
      "# TYPE vllm:kv_cache_usage_perc gauge\n"
      "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n"
      "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3\n"
      "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 2\n"
      "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 1.5e3\n"
      "kvroute_sim_gpu_busy_fraction{engine=\"0\",model_name=\"m\"} 0.75\n"
      "weird{label=\"a \\\"quoted\\\" b\"} 7 1700000000\n"
      "garbage line here\n";
  const std::vector<PromSample> s = ParsePrometheusText(text);
  ASSERT_EQ(s.size(), 6u);
  EXPECT_EQ(s[0].labels.at("model_name"), "m");
  EXPECT_DOUBLE_EQ(s[3].value, 1500);
  EXPECT_EQ(s[5].labels.at("label"), "a \"quoted\" b");
  EXPECT_DOUBLE_EQ(s[5].value, 7);
  const InstanceSample x = InstanceSampleFromMetrics(s);
  EXPECT_DOUBLE_EQ(x.kv_usage, 0.25);
  EXPECT_DOUBLE_EQ(x.running, 3);
  EXPECT_DOUBLE_EQ(x.waiting, 2);
  EXPECT_DOUBLE_EQ(x.gpu_busy, 0.75);
  const auto dcgm = GpuUtilFromDcgm(ParsePrometheusText(
      "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"x\"} 87\nDCGM_FI_DEV_GPU_UTIL{gpu=\"1\"} 13\n"));
  EXPECT_DOUBLE_EQ(dcgm.at("0"), 0.87);
  EXPECT_DOUBLE_EQ(dcgm.at("1"), 0.13);
}

// kvroute's learned time factors reach the run by metric and backend, and report.md and
// report.json show them; a run without them (another router) has no section.
TEST(PrometheusTest, LearnedTimeFactorsFromKvroutesMetrics) {
  const auto learned = LearnedFactorsFromMetrics(ParsePrometheusText(
      "# TYPE kvroute_prefill_time_factor gauge\n"
      "kvroute_prefill_time_factor{backend=\"sim-0\"} 1.1\n"
      "kvroute_prefill_time_factor{backend=\"sim-1\"} 0.9\n"
      "kvroute_pool_reload_time_factor{backend=\"sim-0\"} 2.5\n"
      "kvroute_pool_reload_time_factor{backend=\"sim-1\"} 2.1\n"
      "kvroute_backend_kv_usage{backend=\"sim-0\"} 0.5\n"
      "kvroute_host_reload_time_factor 3\n"));
  ASSERT_EQ(learned.size(), 2u);  // the unlabelled host sample names no backend
  EXPECT_DOUBLE_EQ(learned.at("kvroute_prefill_time_factor").at("sim-1"), 0.9);
  EXPECT_DOUBLE_EQ(learned.at("kvroute_pool_reload_time_factor").at("sim-0"), 2.5);

  Report r = FixedReport();
  EXPECT_EQ(ReportMarkdown(r).find("## Learned time factors"), std::string::npos);
  r.runs[1].learned_factors = learned;
  const std::string md = ReportMarkdown(r);
  EXPECT_NE(md.find("## Learned time factors"), std::string::npos);
  EXPECT_NE(md.find("| v2-T20k | 2 | 1.00 (0.90-1.10) | - | 2.30 (2.10-2.50) |"),
            std::string::npos)
      << md;
  const json::value v = ReportJson(r);
  EXPECT_FALSE(v.at("runs").at(0).as_object().contains("learned_time_factors"));
  EXPECT_DOUBLE_EQ(v.at("runs")
                       .at(1)
                       .at("learned_time_factors")
                       .at("kvroute_pool_reload_time_factor")
                       .at("sim-1")
                       .as_double(),
                   2.1);
}

// v1_cost is crossed with the thresholds like v1 and v2; the fleet's profile
// reaches kvroute's config, whose placement cost reads it.
// kvroute-sim's scheduler lag reaches the samples (the largest over the engines), the
// summary in modelled seconds, and report.md only when an instance published it.
TEST(PrometheusTest, SimulatorLagInModelledSecondsAndItsOwnSection) {
  const InstanceSample x = InstanceSampleFromMetrics(ParsePrometheusText(
      "kvroute_sim_scheduler_lag_seconds{engine=\"0\"} 0.01\n"
      "kvroute_sim_scheduler_lag_seconds{engine=\"1\"} 0.03\n"
      "kvroute_sim_scheduler_lag_max_seconds{engine=\"0\"} 0.05\n"));
  EXPECT_DOUBLE_EQ(x.sim_lag_s, 0.03);
  EXPECT_DOUBLE_EQ(x.sim_lag_max_s, 0.05);
  EXPECT_DOUBLE_EQ(InstanceSampleFromMetrics({}).sim_lag_s, -1);

  Report r = FixedReport();
  EXPECT_EQ(ReportMarkdown(r).find("## Simulator lag"), std::string::npos);
  EXPECT_DOUBLE_EQ(Summarize(r.runs[1]).max_sim_lag, -1);
  RunResult& run = r.runs[1];
  run.time_scale = 0.1;
  run.samples[0].sim_lag_s = 0;
  run.samples[1].sim_lag_s = 0.02;  // wall seconds: 0.2 modelled
  run.samples[2].sim_lag_s = 0;
  run.samples[2].sim_lag_max_s = 0.04;
  const RunSummary s = Summarize(run);
  EXPECT_NEAR(s.max_sim_lag, 0.4, 1e-12) << "the largest since start, modelled";
  EXPECT_NEAR(s.sim_lag_p99, Percentile({0, 0.2, 0}, 99), 1e-12);
  const std::string md = ReportMarkdown(r);
  ASSERT_NE(md.find("## Simulator lag"), std::string::npos);
  EXPECT_NE(md.find("| v2-T20k | " + FormatSeconds(s.sim_lag_p99) + " | " +
                    FormatSeconds(s.max_sim_lag) + " |"),
            std::string::npos);
  const size_t at = md.find("## Simulator lag");
  const std::string section = md.substr(at, md.find("\n## ", at + 1) - at);
  EXPECT_EQ(section.find("| baseline |"), std::string::npos) << "only runs with a lag are listed";
  const json::value js = ReportJson(r);
  const json::array& runs = js.at("runs").as_array();
  EXPECT_NEAR(runs[1].at("summary").at("max_sim_lag_s").as_double(), 0.4, 1e-12);
  EXPECT_TRUE(runs[0].at("summary").at("max_sim_lag_s").is_null());
  EXPECT_DOUBLE_EQ(runs[1].at("samples").as_array()[1].at("sim_lag").as_double(), 0.02);
  // The sweep's tables carry the 99th percentile; a run without the lag leaves it unmeasured.
  const size_t lag = static_cast<size_t>(SweepFigure::kSimLagP99);
  EXPECT_NEAR(SweepFiguresOf(s)[lag], s.sim_lag_p99, 1e-12);
  EXPECT_TRUE(std::isnan(SweepFiguresOf(Summarize(FixedReport().runs[1]))[lag]));
}

TEST(AblationConfigTest, CostModesAndProfile) {
  const auto c = AblationConfigs({"v1_cost"}, {10000, 20000}, 20000);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[1].name, "v1_cost-T20k");
  EXPECT_EQ(KvrouteConfigYaml(c[1], {}).find("profile:"), std::string::npos);
  AblationConfig with_profile = c[1];
  with_profile.profile = "/p/h20.yaml";
  EXPECT_NE(KvrouteConfigYaml(with_profile, {}).find("\nprofile: /p/h20.yaml\n"),
            std::string::npos);
}

// A fleet simulated at 0.1 wall seconds per modelled second: kvroute's
// windows, profile costs and SLOs are all in wall seconds, the SLOs being the
// report's own (modelled) targets scaled; the config loads.
TEST(AblationConfigTest, ScalesTheConfigToTheSimulatedFleet) {
  const auto c = AblationConfigs({"v2"}, {}, 20000);
  SloTargets slo;
  slo.ttft_warm_s = 2;
  slo.ttft_medium_s = 10;
  slo.ttft_heavy_s = 40;
  slo.tpot_s = 0.1;
  const std::string y =
      KvrouteConfigYaml(c[0], {{"gpu0", "http://127.0.0.1:9000", "", ""}}, 0.1, slo);
  EXPECT_NE(y.find("\nprofile_time_scale: 0.1\n"), std::string::npos) << y;
  EXPECT_NE(y.find("  session_resident_window_s: 6\n"), std::string::npos) << y;
  EXPECT_NE(y.find("  slo: {ttft_warm_s: 0.2, ttft_medium_s: 1, ttft_heavy_s: 4, tpot_s: 0.01}\n"),
            std::string::npos)
      << y;
  absl::StatusOr<proxy::Config> parsed = proxy::ParseConfig(y, "bench");
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << y;
  EXPECT_EQ(parsed->profile_time_scale, 0.1);
  EXPECT_NEAR(parsed->router.slo.ttft_heavy_s, 4, 1e-12);
  EXPECT_NEAR(parsed->router.slo.tpot_s, 0.01, 1e-12);
  // So is the wait a shed request is advised.
  EXPECT_NEAR(parsed->router.shed.min_retry_after_s, 0.1, 1e-12);
  EXPECT_NEAR(parsed->router.shed.max_retry_after_s, 6, 1e-12);
  // The waits that judge an engine are modelled time too.
  EXPECT_EQ(parsed->upstream.idle_timeout, absl::Seconds(12));
  EXPECT_EQ(parsed->upstream.first_token_timeout, absl::Seconds(30));
  EXPECT_EQ(parsed->upstream.first_token_timeout_max, absl::Seconds(360));
  EXPECT_EQ(parsed->monitor.hung_after, absl::Seconds(12));

  // Replicas sharing a store see each other as often, in modelled time, as
  // a real fleet's do.
  AblationConfig shared = c[0];
  shared.cluster_store = "redis://127.0.0.1:6390/0";
  parsed = proxy::ParseConfig(
      KvrouteConfigYaml(shared, {{"gpu0", "http://127.0.0.1:9000", "", ""}}, 0.1, slo), "bench");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->cluster.store, "redis://127.0.0.1:6390/0");
  EXPECT_NEAR(parsed->cluster.sync_interval_s, 0.01, 1e-12);
}

// --router settings land under router: and reach kvroute's loader; malformed
// ones and the keys the bench scales itself are refused.
TEST(AblationConfigTest, RouterSettingsReachKvroutesConfig) {
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> keys =
      ParseRouterKeys({"decode_stall_weight=2.5", "eviction_weight = 3"});
  ASSERT_TRUE(keys.ok()) << keys.status();
  const auto c = AblationConfigs({"baseline"}, {}, 20000);
  const std::string y =
      KvrouteConfigYaml(c[0], {{"gpu0", "http://127.0.0.1:9000", "", ""}}, 0.1, {}, *keys);
  absl::StatusOr<proxy::Config> parsed = proxy::ParseConfig(y, "bench");
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << y;
  EXPECT_DOUBLE_EQ(parsed->router.baseline.decode_stall_weight, 2.5);
  EXPECT_DOUBLE_EQ(parsed->router.baseline.eviction_weight, 3);
  EXPECT_EQ(parsed->backends.size(), 1u);

  for (const char* bad :
       {"decode_stall_weight", "=2", "a.b.c=1", ".b=1", "a.=1", "slo=1", "slo.ttft_warm_s=1",
        "session_resident_window_s=60", "x=1\ny: 2", "x=1 # c", "x=[1, 2", "x={a: 1"}) {
    absl::StatusOr<std::vector<std::pair<std::string, std::string>>> r = ParseRouterKeys({bad});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("--router"), std::string_view::npos) << r.status();
  }
}

// A section's keys set one by one (residency.duty_cycle_room=true) or as a map keep the
// bench's scaled defaults for the section's other keys: the gate's times and a shed
// request's advised wait stay in modelled time.
TEST(AblationConfigTest, RouterSectionKeysKeepTheScaledDefaults) {
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> keys =
      ParseRouterKeys({"residency.enabled=false", "shed={ttft_factor: 2}",
                       "shed.running_session_factor = 10", "tier_aware=false"});
  ASSERT_TRUE(keys.ok()) << keys.status();
  const auto c = AblationConfigs({"baseline"}, {}, 20000);
  const std::string y =
      KvrouteConfigYaml(c[0], {{"gpu0", "http://127.0.0.1:9000", "", ""}}, 0.1, {}, *keys);
  EXPECT_NE(y.find("  residency: {grace_s: 1.5, max_wait_s: 12, auto_long_pause_s: 1, "
                   "enabled: false}\n"),
            std::string::npos)
      << y;
  absl::StatusOr<proxy::Config> parsed = proxy::ParseConfig(y, "bench");
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << y;
  const router::Options defaults;
  EXPECT_FALSE(parsed->router.residency.enabled);
  EXPECT_EQ(parsed->router.residency.grace, defaults.residency.grace / 10);
  EXPECT_EQ(parsed->router.residency.max_wait, defaults.residency.max_wait / 10);
  EXPECT_NEAR(parsed->router.host_tier.gate_room.long_pause_s,
              defaults.host_tier.gate_room.long_pause_s / 10, 1e-12);
  EXPECT_DOUBLE_EQ(parsed->router.shed.ttft_factor, 2);
  EXPECT_DOUBLE_EQ(parsed->router.shed.running_session_factor, 10);
  EXPECT_NEAR(parsed->router.shed.min_retry_after_s, defaults.shed.min_retry_after_s / 10, 1e-12);
  EXPECT_NEAR(parsed->router.shed.max_retry_after_s, defaults.shed.max_retry_after_s / 10, 1e-12);
  EXPECT_FALSE(parsed->router.host_tier.aware);

  // The caller's own times win over the bench's, in wall seconds as given.
  keys = ParseRouterKeys({"residency={max_wait_s: 3}", "residency.grace_s=0.5"});
  ASSERT_TRUE(keys.ok()) << keys.status();
  parsed = proxy::ParseConfig(
      KvrouteConfigYaml(c[0], {{"gpu0", "http://127.0.0.1:9000", "", ""}}, 0.1, {}, *keys),
      "bench");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->router.residency.max_wait, absl::Seconds(3));
  EXPECT_EQ(parsed->router.residency.grace, absl::Milliseconds(500));

  // A key kvroute does not know is its loader's to refuse, naming the key.
  keys = ParseRouterKeys({"residency.no_such_key=1"});
  ASSERT_TRUE(keys.ok()) << keys.status();
  parsed = proxy::ParseConfig(
      KvrouteConfigYaml(c[0], {{"gpu0", "http://127.0.0.1:9000", "", ""}}, 0.1, {}, *keys),
      "bench");
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("no_such_key"), std::string_view::npos)
      << parsed.status();
}

// A variant is one more configuration: its mode, its router keys over the ablation's, and
// its own host tier; it runs after the modes' and its config loads in kvroute.
TEST(AblationConfigTest, VariantsRunAfterTheModesWithTheirOwnSettings) {
  absl::StatusOr<ConfigVariant> blind =
      ParseConfigVariant("blind=baseline; tier_aware=false; decode_stall_weight=4");
  ASSERT_TRUE(blind.ok()) << blind.status();
  EXPECT_EQ(blind->name, "blind");
  EXPECT_EQ(blind->mode, "baseline");
  EXPECT_EQ(blind->kv_offloading_size_gib, -1);
  ASSERT_EQ(blind->router_keys.size(), 2u);
  EXPECT_EQ(ConfigVariantDescription(*blind),
            "blind: baseline, router tier_aware=false, router decode_stall_weight=4");
  absl::StatusOr<ConfigVariant> notier =
      ParseConfigVariant("notier=least_loaded;fleet.kv_offloading_size=0;");
  ASSERT_TRUE(notier.ok()) << notier.status();
  EXPECT_EQ(notier->kv_offloading_size_gib, 0);
  EXPECT_TRUE(notier->router_keys.empty());
  EXPECT_EQ(ConfigVariantDescription(*notier), "notier: least_loaded, no host KV tier");
  EXPECT_EQ(ConfigVariantDescription(*ParseConfigVariant("big=v1;fleet.kv_offloading_size=32")),
            "big: v1, host KV tier 32 GiB per instance");

  AblationOptions o;
  o.modes = {"baseline", "v1"};
  o.thresholds = {10000, 20000};
  o.default_threshold = 30000;
  o.variants = {*blind, *notier};
  absl::StatusOr<std::vector<AblationConfig>> configs = AblationConfigsOf(o);
  ASSERT_TRUE(configs.ok()) << configs.status();
  ASSERT_EQ(configs->size(), 5u);
  EXPECT_EQ((*configs)[2].name, "v1-T20k");
  const AblationConfig& b = (*configs)[3];
  EXPECT_EQ(b.name, "blind");
  EXPECT_EQ(b.mode, "baseline");
  EXPECT_EQ(b.heavy_threshold, 30000);
  EXPECT_EQ(b.kv_offloading_size_gib, -1);
  EXPECT_EQ((*configs)[4].kv_offloading_size_gib, 0);
  EXPECT_TRUE((*configs)[0].router_keys.empty());

  // The variant's keys replace the ablation's same keys; the others stay, in order.
  const auto keys = RouterKeysFor(b, {{"decode_stall_weight", "2"}, {"eviction_weight", "3"}});
  const std::vector<std::pair<std::string, std::string>> want = {
      {"eviction_weight", "3"}, {"tier_aware", "false"}, {"decode_stall_weight", "4"}};
  EXPECT_EQ(keys, want);
  absl::StatusOr<proxy::Config> parsed = proxy::ParseConfig(
      KvrouteConfigYaml(b, {{"gpu0", "http://127.0.0.1:9000", "", ""}}, 0.1, {}, keys), "bench");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->router.host_tier.aware);
  EXPECT_DOUBLE_EQ(parsed->router.baseline.decode_stall_weight, 4);
  EXPECT_DOUBLE_EQ(parsed->router.baseline.eviction_weight, 3);
  EXPECT_EQ(RouterKeysFor((*configs)[0], keys), keys);

  // A variant named as another configuration, or with given targets, is refused.
  o.variants = {*ParseConfigVariant("v1-T10k=baseline")};
  EXPECT_EQ(AblationConfigsOf(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.variants = {*blind};
  o.targets = {{"a", "http://127.0.0.1:1"}};
  EXPECT_EQ(AblationConfigsOf(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AblationConfigTest, MalformedVariantsAreRefusedNamingTheFlag) {
  for (const char* bad :
       {"baseline", "=baseline", "a/b=baseline", "..=baseline", "x=nosuchmode", "x=oracle",
        "x=baseline;fleet.kv_pool_size=2", "x=baseline;fleet.kv_offloading_size=-1",
        "x=baseline;fleet.kv_offloading_size=lots", "x=baseline;fleet.kv_offloading_size",
        "x=baseline;tier_aware", "x=baseline;slo=1", "x=baseline;a.b.c=1"}) {
    absl::StatusOr<ConfigVariant> v = ParseConfigVariant(bad);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(v.status().message().find(absl::StrCat("--variant '", bad, "'")),
              std::string_view::npos)
        << v.status();
  }
}

TEST(AblationConfigTest, CrossesThresholdSensitiveModes) {
  const auto c = AblationConfigs({"baseline", "v1", "v2"}, {10000, 20000, 40000}, 20000);
  ASSERT_EQ(c.size(), 7u);
  EXPECT_EQ(c[0].name, "baseline");
  EXPECT_EQ(c[0].heavy_threshold, 20000);
  EXPECT_EQ(c[1].name, "v1-T10k");
  EXPECT_EQ(c[6].name, "v2-T40k");
  EXPECT_EQ(c[6].heavy_threshold, 40000);
  const std::string y = KvrouteConfigYaml(
      c[6], {{"gpu0", "http://127.0.0.1:9000", "", ""},
             {"gpu1", "http://127.0.0.1:9001", "tcp://127.0.0.1:5557", "tcp://127.0.0.1:5558"}});
  EXPECT_NE(y.find("profile_time_scale: 1\n"), std::string::npos) << y;
  EXPECT_NE(y.find("mode: v2\n"), std::string::npos);
  EXPECT_NE(y.find("heavy_threshold: 40000\n"), std::string::npos);
  EXPECT_NE(y.find("  - {name: gpu0, url: http://127.0.0.1:9000}\n"), std::string::npos);
  EXPECT_NE(y.find("  - {name: gpu1, url: http://127.0.0.1:9001, kv_events: "
                   "\"tcp://127.0.0.1:5557\", kv_events_replay: \"tcp://127.0.0.1:5558\"}\n"),
            std::string::npos);
}

TEST(AblationConfigTest, MergesKvrouteRequestLog) {
  RunResult run = FixedRun("v2", 1.0);
  run.requests[2].request_id = "bench-v2-2";  // the offloaded HEAVY request
  run.requests[0].request_id = "bench-v2-0";
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("kvb_reqlog_" + std::to_string(::getpid()));
  {
    std::ofstream f(path);
    f << R"({"id":"bench-v2-2","cached_tokens_est":100,"t_routed":1000.5,)"
      << R"("t_prefill_done":1001.75,"transfer_s":0.25,"prompt_tokens":30000})"
      << "\n";
    f << R"({"id":"bench-v2-0","cached_tokens_est":800,"t_routed":1000.0,)"
      << R"("t_prefill_done":null,"transfer_s":null})"
      << "\n";
    f << R"({"id":"someone-else","cached_tokens_est":1})"
      << "\n"
      << "not json\n";
    f << R"({"id":"bench-v2-5","class":"HEAVY","status":429,"outcome":"shed"})"
      << "\n";
  }
  // A shed request: no X-Kvroute-Class on the 429, its class in kvroute's log.
  RequestRecord shed;
  shed.request_id = "bench-v2-5";
  shed.http_status = 429;
  shed.error = "http 429: shedding";
  shed.failure = RequestOutcome::kShed;
  run.requests.push_back(shed);
  EXPECT_EQ(MergeRequestLog(path.string(), run), 3);
  EXPECT_EQ(run.requests[5].klass, "HEAVY");
  EXPECT_EQ(run.requests[0].klass, "WARM");  // a class the target sent stays
  std::filesystem::remove(path);
  EXPECT_EQ(run.requests[2].cached_tokens_est, 100);
  EXPECT_DOUBLE_EQ(run.requests[2].prefill_leg_s, 1.25);
  EXPECT_DOUBLE_EQ(run.requests[2].transfer_s, 0.25);
  EXPECT_EQ(run.requests[0].cached_tokens_est, 800);
  EXPECT_LT(run.requests[0].prefill_leg_s, 0);
  EXPECT_LT(run.requests[0].transfer_s, 0);
  const RunSummary s = Summarize(run);
  EXPECT_DOUBLE_EQ(s.offload_prefill.p50, 1.25);
  EXPECT_DOUBLE_EQ(s.offload_transfer.p50, 0.25);
  // |100 - 0| / 30000 and |800 - 900| / 1000, averaged.
  EXPECT_NEAR(s.cache_estimate_error, (100.0 / 30000 + 100.0 / 1000) / 2, 1e-12);
  EXPECT_EQ(MergeRequestLog("/nonexistent/requests.jsonl", run), 0);
}

// kvroute logs its TTFT prediction in wall seconds (its config scales the profile by the
// run's time scale); the report sets it against the realised TTFT per class.
TEST(AblationConfigTest, ReportsThePredictedTtftAgainstTheRealised) {
  RunResult run = FixedRun("v2", 0.5);
  run.requests[2].request_id = "bench-v2-2";  // HEAVY, TTFT 2.0 modelled seconds
  run.requests[0].request_id = "bench-v2-0";  // WARM, 0.1
  run.requests[1].request_id = "bench-v2-1";  // WARM, no prediction
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("kvb_predlog_" + std::to_string(::getpid()));
  {
    std::ofstream f(path);
    f << R"({"id":"bench-v2-2","predicted_ttft_s":1.25})"
      << "\n";
    f << R"({"id":"bench-v2-0","predicted_ttft_s":0.025})"
      << "\n";
    f << R"({"id":"bench-v2-1","predicted_ttft_s":null})"
      << "\n";
  }
  EXPECT_EQ(MergeRequestLog(path.string(), run), 3);
  std::filesystem::remove(path);
  EXPECT_DOUBLE_EQ(run.requests[2].predicted_ttft_s, 1.25);  // as logged, not rescaled
  EXPECT_LT(run.requests[1].predicted_ttft_s, 0);
  const RunSummary s = Summarize(run);
  for (const ClassSummary& c : s.classes) {
    if (c.klass == "HEAVY") {
      EXPECT_EQ(c.predicted, 1);
      EXPECT_DOUBLE_EQ(c.prediction_abs_error_p50, 0.25);
      EXPECT_DOUBLE_EQ(c.prediction_signed_error_p50, 0.25);
      EXPECT_DOUBLE_EQ(c.prediction_abs_error_s_p50, 0.5);
    } else if (c.klass == "WARM") {
      EXPECT_EQ(c.predicted, 1);
      EXPECT_DOUBLE_EQ(c.prediction_signed_error_p50, -0.5);
    } else if (c.klass == "ALL") {
      EXPECT_EQ(c.predicted, 2);
    } else {
      EXPECT_EQ(c.predicted, 0) << c.klass;
    }
  }
  Report report;
  report.runs = {run};
  const std::string md = ReportMarkdown(report);
  EXPECT_NE(md.find("## Predicted TTFT against realised"), std::string::npos);
  EXPECT_NE(md.find("| v2 | HEAVY | 1 | 25.0%"), std::string::npos) << md;
}

}  // namespace
}  // namespace kvroute::bench

namespace kvroute::bench {
namespace {

TEST(EstimateErrorTest, SignedErrorsPerClassAndInTheReport) {
  RunResult run;
  run.name = "baseline";
  run.workload = "agentic";
  run.pooled_bound_hit_ratio = 0.4;
  run.fleet_kv_tokens = 1000;
  // Estimates against the engine: +10 % (over), -20 % (under), 0, +2 %; the offloaded one
  // is not a hit estimate and is left out.
  const std::vector<std::tuple<std::string, int64_t, int64_t>> rows = {
      {"WARM", 600, 500}, {"WARM", 300, 500}, {"HEAVY", 0, 0}, {"HEAVY", 220, 200}};
  for (const auto& [klass, est, actual] : rows) {
    RequestRecord r;
    r.klass = klass;
    r.backend = "gpu0";
    r.ttft = r.e2e = 1;
    r.prompt_tokens = 1000;
    r.cached_tokens = actual;
    r.cached_tokens_est = est;
    run.requests.push_back(r);
  }
  RequestRecord off = run.requests.front();
  off.backend = "gpu0->gpu1";
  off.cached_tokens_est = 0;
  run.requests.push_back(off);
  const RunSummary s = Summarize(run);
  const EstimateErrorSummary& all = s.classes.front().estimate;
  EXPECT_EQ(all.n, 4);
  EXPECT_NEAR(all.mean_signed, (0.1 - 0.2 + 0 + 0.02) / 4, 1e-12);
  EXPECT_NEAR(all.median_abs, (0.02 + 0.1) / 2, 1e-12);
  EXPECT_NEAR(all.over_5pct, 0.25, 1e-12);
  EXPECT_NEAR(all.under_5pct, 0.25, 1e-12);
  // Signed percentiles over -0.2, 0, 0.02, 0.1.
  EXPECT_NEAR(all.p1, -0.2 + 0.03 * 0.2, 1e-12);
  EXPECT_NEAR(all.p50, 0.01, 1e-12);
  EXPECT_NEAR(all.p99, 0.02 + 0.97 * 0.08, 1e-12);
  const auto by_class = EstimateErrorsByClass(run);
  ASSERT_EQ(by_class.size(), 2u);
  EXPECT_EQ(by_class.at("WARM"), (std::vector<double>{0.1, -0.2}));
  const ClassSummary* warm = nullptr;
  for (const ClassSummary& c : s.classes) {
    if (c.klass == "WARM") warm = &c;
  }
  ASSERT_NE(warm, nullptr);
  EXPECT_NEAR(warm->estimate.mean_signed, (0.1 - 0.2) / 2, 1e-12);
  EXPECT_DOUBLE_EQ(s.pooled_bound_hit_ratio, 0.4);

  Report report;
  report.runs.push_back(run);
  const std::string md = ReportMarkdown(report);
  EXPECT_NE(md.find("## Cache estimate error per class"), std::string::npos);
  EXPECT_NE(md.find("| baseline | WARM | 2 |"), std::string::npos);
  EXPECT_NE(md.find("-5.0%"), std::string::npos);  // WARM's mean signed error
  EXPECT_NE(md.find("pooled-LRU yardstick"), std::string::npos);
  EXPECT_NE(md.find("| p1 | p10 | p50 | p90 | p99 |"), std::string::npos);
  EXPECT_NE(md.find("| -19.7% | -17.0% | -5.0% | +7.0% | +9.7% |"), std::string::npos);  // WARM
  EXPECT_NE(SummaryTable(report).find("est mean"), std::string::npos);
  // The HTML histogram: one bar per non-empty (class, bin), shares of each class.
  const std::string html = ReportHtml(report);
  EXPECT_NE(html.find("Cache estimate error: baseline"), std::string::npos);
  size_t warm_bars = 0;
  for (size_t p = html.find("<title>WARM (n=2): 50.0%</title>"); p != std::string::npos;
       p = html.find("<title>WARM (n=2): 50.0%</title>", p + 1)) {
    ++warm_bars;
  }
  EXPECT_EQ(warm_bars, 2u);
  EXPECT_NE(html.find("<title>HEAVY (n=2): 100.0%</title>"), std::string::npos);
  const json::value j = ReportJson(report);
  EXPECT_NEAR(j.at("runs")
                  .as_array()[0]
                  .at("summary")
                  .at("classes")
                  .at("ALL")
                  .at("cache_estimate_error")
                  .at("signed_percentiles")
                  .at("p50")
                  .as_double(),
              0.01, 1e-12);
  EXPECT_DOUBLE_EQ(
      j.at("runs").as_array()[0].at("summary").at("prefix_hit_pooled_lru_bound").as_double(), 0.4);
}

// Two labelled classes with their SLOs, one failure, one dropped arrival and stream gaps at a
// time scale of 0.1 (every wall time is a tenth of its modelled value).
RunResult SloRun() {
  RunResult run;
  run.name = "v1";
  run.workload = "agentic";
  run.time_scale = 0.1;
  run.duration_s = 10 * 0.1;
  run.slo = {.ttft_warm_s = 2, .ttft_medium_s = 10, .ttft_heavy_s = 30, .tpot_s = 0.1};
  run.kv_bytes_per_token = 1000;
  auto add = [&](std::string klass, double ttft, double tpot, double max_gap, double floor,
                 std::string backend = "gpu0") {
    RequestRecord r =
        Req(std::move(klass), ttft * 0.1, (ttft + 1) * 0.1, 40000, 10000, std::move(backend));
    r.tpot = tpot * 0.1;
    r.max_gap = max_gap * 0.1;
    r.gaps = max_gap >= 0 ? 5 : 0;
    r.compute_floor_s = floor * 0.1;
    run.requests.push_back(r);
  };
  add("WARM", 1.0, 0.05, 0.2, -1);                // meets both
  add("WARM", 3.0, 0.05, 0.6, -1);                // TTFT over 2 s; a stalled stream
  add("WARM", 1.0, 0.2, 0.1, -1);                 // TPOT over 0.1 s
  add("HEAVY", 20.0, 0.05, 0.3, 8);               // meets both; floor 8 s of its 20 s
  add("HEAVY", 40.0, 0.05, 0.9, 10);              // TTFT over 30 s; stalled
  add("HEAVY", 10.0, 0.05, -1, 4, "gpu1->gpu0");  // offloaded: meets, not in the split
  RequestRecord failed;
  failed.klass = "HEAVY";
  failed.error = "http 503";
  run.requests.push_back(failed);
  run.dropped = 1;
  for (double g : {0.010, 0.012, 0.020, 0.6}) run.itl_by_class["WARM"].Add(g * 0.1);
  for (double g : {0.030, 0.9}) run.itl_by_class["HEAVY"].Add(g * 0.1);
  return run;
}

const ClassSummary& ClassOf(const RunSummary& s, const std::string& klass) {
  for (const ClassSummary& c : s.classes) {
    if (c.klass == klass) return c;
  }
  ADD_FAILURE() << "no class " << klass;
  return s.classes.front();
}

TEST(SummaryTest, GoodputItlStallsAndTheHeavySplit) {
  const RunSummary s = Summarize(SloRun());
  const ClassSummary& all = ClassOf(s, "ALL");
  const ClassSummary& warm = ClassOf(s, "WARM");
  const ClassSummary& heavy = ClassOf(s, "HEAVY");
  // Goodput: WARM 1 of 3; HEAVY 2 of 4 (the failure counts); ALL 3 of 8 with the drop.
  EXPECT_EQ(warm.slo_met, 1);
  EXPECT_DOUBLE_EQ(warm.goodput, 1.0 / 3);
  EXPECT_EQ(heavy.slo_requests, 4);
  EXPECT_DOUBLE_EQ(heavy.goodput, 0.5);
  EXPECT_EQ(all.slo_requests, 8);
  EXPECT_DOUBLE_EQ(all.goodput, 3.0 / 8);
  EXPECT_DOUBLE_EQ(s.goodput_rps, 3.0 / 10);
  // Streams with a gap over 0.5 modelled s: 2 of the 5 with gaps.
  EXPECT_EQ(all.streams, 5);
  EXPECT_DOUBLE_EQ(all.stalled_stream_share, 0.4);
  EXPECT_DOUBLE_EQ(warm.stalled_stream_share, 1.0 / 3);
  // ITL in modelled seconds from the histograms (within 1.2 %).
  EXPECT_EQ(all.itl_gaps, 6);
  EXPECT_NEAR(warm.itl_p50, 0.012, 0.012 * 0.012);
  EXPECT_NEAR(all.itl_p99, 0.9, 1e-9);  // the top bucket clamps to the exact max
  EXPECT_NEAR(heavy.itl_max, 0.9, 1e-9);
  // HEAVY split: the two co-located HEAVY requests; the WARM ones have no floor, so the
  // split over every class holds the same two.
  EXPECT_EQ(s.heavy_split.floor.n, 2);
  EXPECT_DOUBLE_EQ(s.heavy_split.floor.p50, 9);
  EXPECT_DOUBLE_EQ(s.heavy_split.queue.p50, (12 + 30) / 2.0);
  EXPECT_DOUBLE_EQ(s.heavy_split.ttft.p50, 30);
  EXPECT_DOUBLE_EQ(s.heavy_split.queue_share, 42.0 / 60);
  EXPECT_EQ(s.floor_split.floor.n, 2);
  EXPECT_DOUBLE_EQ(s.floor_split.queue_share, 42.0 / 60);
  // Offloads: 1 of 7; its 10,000 cached tokens were pulled, 10 MB at 1,000 B/token.
  EXPECT_DOUBLE_EQ(s.offload_rate, 1.0 / 7);
  EXPECT_EQ(s.offloaded_prompt_tokens, 40000);
  EXPECT_EQ(s.transferred_tokens, 10000);
  EXPECT_DOUBLE_EQ(s.transferred_bytes, 1e7);
}

TEST(SummaryTest, TtftSplitOverEveryClassLeavesOutOffloadsAndFailures) {
  RunResult run = SloRun();
  run.requests[0].compute_floor_s = 0.4 * 0.1;  // WARM, TTFT 1 s: floor 0.4, queue 0.6
  run.requests[1].compute_floor_s = 2.5 * 0.1;  // WARM, TTFT 3 s: floor 2.5, queue 0.5
  const RunSummary s = Summarize(run);
  // The two WARM requests and the two co-located HEAVY ones; not the offloaded HEAVY
  // request (floor 4 s), the WARM one without a floor nor the failure.
  EXPECT_EQ(s.floor_split.floor.n, 4);
  EXPECT_NEAR(s.floor_split.floor.p50, (2.5 + 8) / 2, 1e-9);
  EXPECT_NEAR(s.floor_split.floor.max, 10, 1e-9);
  EXPECT_NEAR(s.floor_split.queue.p50, (0.6 + 12) / 2, 1e-9);
  EXPECT_NEAR(s.floor_split.ttft.max, 40, 1e-9);
  EXPECT_NEAR(s.floor_split.queue_share, (0.6 + 0.5 + 12 + 30) / (1.0 + 3 + 20 + 40), 1e-9);
  // The HEAVY split keeps its two.
  EXPECT_EQ(s.heavy_split.floor.n, 2);
  // Each run gets an "all" row and a HEAVY row, in report.md and in report.json.
  Report report;
  report.runs = {run};
  const std::string md = ReportMarkdown(report);
  EXPECT_NE(md.find("| v1 | all | 4 | 11.5 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| v1 | HEAVY | 2 | 30.0 |"), std::string::npos) << md;
  const json::value j = ReportJson(report);
  const json::object& summary = j.at("runs").as_array()[0].at("summary").as_object();
  EXPECT_EQ(summary.at("ttft_floor_s").at("n").as_int64(), 4);
  EXPECT_EQ(summary.at("heavy_ttft_floor_s").at("n").as_int64(), 2);
}

TEST(SummaryTest, ServedMissesSplitByFloorWaitAndTpot) {
  RunResult run = SloRun();
  // A WARM turn whose uncached tokens alone take 3 s: past its 2 s SLO wherever it waited.
  RequestRecord recompute = Req("WARM", 0.4, 0.5, 40000, 10000);
  recompute.compute_floor_s = 0.3;
  run.requests.push_back(recompute);
  const RunSummary s = Summarize(run);
  const ClassSummary& warm = ClassOf(s, "WARM");
  const ClassSummary& heavy = ClassOf(s, "HEAVY");
  const ClassSummary& all = ClassOf(s, "ALL");
  // WARM: the 3 s TTFT without a floor waited, the 0.2 s TPOT missed on TPOT, the recompute
  // missed on its floor; HEAVY: 40 s against a 10 s floor waited, the failure is no served
  // miss.
  using Missed = std::tuple<int64_t, int64_t, int64_t>;  // floor, wait, TPOT
  auto missed = [](const ClassSummary& c) {
    return Missed{c.missed_floor, c.missed_wait, c.missed_tpot};
  };
  EXPECT_EQ(missed(warm), (Missed{1, 1, 1}));
  EXPECT_EQ(missed(heavy), (Missed{0, 1, 0}));
  EXPECT_EQ(missed(all), (Missed{1, 2, 1}));
  // Every request of a class is met, a served miss, or unsuccessful.
  EXPECT_EQ(heavy.slo_met + heavy.missed_floor + heavy.missed_wait + heavy.missed_tpot + 1,
            heavy.slo_requests);
  Report report;
  report.runs = {run};
  EXPECT_NE(ReportMarkdown(report).find("| 1 / 4 | 25.0% | 1 / 1 / 1 |"), std::string::npos);
  const json::value j = ReportJson(report);
  const json::value& in_json =
      j.at("runs").as_array()[0].at("summary").at("classes").at("WARM").at("missed");
  EXPECT_EQ(in_json.at("floor").as_int64(), 1);
  EXPECT_EQ(in_json.at("wait").as_int64(), 1);
  EXPECT_EQ(in_json.at("tpot").as_int64(), 1);
}

TEST(SummaryTest, NoGoodputWithoutClasses) {
  RunResult run = SloRun();
  for (RequestRecord& r : run.requests) r.klass.clear();
  const RunSummary s = Summarize(run);
  EXPECT_EQ(s.classes.front().goodput, -1);
  EXPECT_EQ(s.goodput_rps, -1);
}

TEST(SloTest, WorkloadClassIsTheInfiniteCachesClassWhateverTheRouterSaid) {
  SloTargets by_workload;
  by_workload.class_source = SloClassSource::kWorkload;
  RequestRecord r = Req("HEAVY", 0.5, 1.0, 60000, 0);
  r.bound_cached_tokens = 56000;  // a returning turn: 4K new tokens on a cached context
  EXPECT_EQ(SloClass(r, SloTargets{}), "HEAVY");
  EXPECT_EQ(SloClass(r, by_workload), "WARM");
  r.bound_cached_tokens = 0;  // a cold prompt: its size decides
  EXPECT_EQ(SloClass(r, by_workload), "HEAVY");
  r.prompt_tokens = 15000;
  EXPECT_EQ(SloClass(r, by_workload), "MEDIUM");
  r.bound_cached_tokens = 90000;  // a bound past the prompt is all of it
  EXPECT_EQ(SloClass(r, by_workload), "WARM");
  // A request the engine never counted (shed before its usage) keeps the router's class,
  // as does one of a run without bounds.
  RequestRecord shed;
  shed.klass = "MEDIUM";
  shed.error = "shed";
  shed.failure = RequestOutcome::kShed;
  EXPECT_EQ(SloClass(shed, by_workload), "MEDIUM");
  r.bound_cached_tokens = -1;
  EXPECT_EQ(SloClass(r, by_workload), r.klass);
  // A target that sends no class gets the workload's.
  r.klass.clear();
  r.bound_cached_tokens = 0;
  EXPECT_EQ(SloClass(r, SloTargets{}), "");
  EXPECT_EQ(SloClass(r, by_workload), "MEDIUM");

  EXPECT_EQ(SloClassSourceName(SloClassSource::kWorkload), "workload");
  EXPECT_EQ(*ParseSloClassSource("router"), SloClassSource::kRouter);
  absl::StatusOr<SloClassSource> bad = ParseSloClassSource("engine");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--slo-class"), std::string::npos);
}

TEST(SummaryTest, GoodputInTheWorkloadsClasses) {
  RunResult run = SloRun();
  // The router called these HEAVY (its estimate saw no cache) and their 20 s and 10 s met the
  // 30 s SLO; every earlier prompt cached, each is a WARM turn that missed 2 s.
  for (RequestRecord& r : run.requests) {
    if (r.klass == "HEAVY" && r.ok() && r.ttft < 3) r.bound_cached_tokens = 38000;
  }
  const RunSummary by_router = Summarize(run);
  EXPECT_DOUBLE_EQ(ClassOf(by_router, "ALL").goodput, 3.0 / 8);
  run.slo.class_source = SloClassSource::kWorkload;
  const RunSummary by_workload = Summarize(run);
  // WARM: the two HEAVY turns, both misses. HEAVY: the router's three WARM requests (half
  // of their 40K prompts bound: 20K new tokens), two within 30 s (the third misses on its
  // 0.2 s TPOT), the 40 s turn and the failure, which keeps the router's class.
  const ClassSummary& warm = ClassOf(by_workload, "WARM");
  EXPECT_EQ(warm.slo_requests, 2);
  EXPECT_EQ(warm.slo_met, 0);
  const ClassSummary& heavy = ClassOf(by_workload, "HEAVY");
  EXPECT_EQ(heavy.slo_requests, 5);
  EXPECT_EQ(heavy.slo_met, 2);
  EXPECT_DOUBLE_EQ(ClassOf(by_workload, "ALL").goodput, 2.0 / 8);
  EXPECT_EQ(warm.itl_gaps, 0);  // the runner's histograms are the router's classes
  Report report;
  report.runs = {run};
  EXPECT_NE(ReportMarkdown(report).find("Classes are the workload's"), std::string::npos);
  EXPECT_EQ(
      ReportJson(report).at("runs").as_array()[0].at("summary").at("slo").at("class").as_string(),
      "workload");
}

TEST(ReportTest, GoodputItlAndHeavySplitInEveryFormat) {
  Report report;
  report.runs = {SloRun()};
  const std::string md = ReportMarkdown(report);
  EXPECT_NE(md.find("| goodput | ITL p99 | stalled streams |"), std::string::npos);
  EXPECT_NE(md.find("| 37.5% | 0.900 | 40.0% |"), std::string::npos);  // the summary row
  EXPECT_NE(md.find("| 1 / 3 | 33.3% |"), std::string::npos);          // WARM per class
  EXPECT_NE(md.find("WARM 2s, MEDIUM 10s, HEAVY 30s) and TPOT within 0.1s"), std::string::npos);
  EXPECT_NE(md.find("## TTFT: queue and compute floor"), std::string::npos);
  EXPECT_NE(md.find("| v1 | HEAVY | 2 | 30.0 |"), std::string::npos);
  EXPECT_NE(md.find("0.01 GB"), std::string::npos);
  const std::string html = ReportHtml(report);
  EXPECT_NE(html.find("<h2>TTFT: queue and compute floor</h2>"), std::string::npos);
  EXPECT_NE(html.find("<th>goodput</th>"), std::string::npos);
  const json::value j = ReportJson(report);
  const json::object& run = j.at("runs").as_array()[0].as_object();
  const json::object& summary = run.at("summary").as_object();
  EXPECT_DOUBLE_EQ(summary.at("classes").at("ALL").at("goodput").as_double(), 3.0 / 8);
  EXPECT_DOUBLE_EQ(summary.at("slo").at("ttft_heavy_s").as_double(), 30);
  EXPECT_DOUBLE_EQ(summary.at("heavy_queue_share").as_double(), 0.7);
  EXPECT_EQ(run.at("itl_histograms").at("by_class").at("WARM").at("count").as_int64(), 4);
  EXPECT_EQ(run.at("requests").as_array()[1].at("gaps").as_int64(), 5);
  // Without floors the report says what is missing.
  report.runs[0].requests[3].compute_floor_s = -1;
  report.runs[0].requests[4].compute_floor_s = -1;
  report.runs[0].requests[5].compute_floor_s = -1;
  EXPECT_NE(ReportMarkdown(report).find("TTFT split: not available"), std::string::npos);
  report.runs[0].requests[6].compute_floor_s = 0.1;  // only the failed request has a floor
  EXPECT_NE(ReportMarkdown(report).find("no successful co-located request"), std::string::npos);
  report.runs[0].requests[0].compute_floor_s = 0.1;  // a WARM request with a floor
  const std::string md_warm = ReportMarkdown(report);
  const size_t split = md_warm.find("## TTFT: queue and compute floor");
  ASSERT_NE(split, std::string::npos);
  const std::string section = md_warm.substr(split, md_warm.find("\n## ", split + 1) - split);
  EXPECT_NE(section.find("| v1 | all | 1 |"), std::string::npos) << section;
  EXPECT_EQ(section.find("| v1 | HEAVY |"), std::string::npos) << section;
}

// The FixedRun plus a shed WARM request (with its Retry-After), a shed request without a
// class, a HEAVY request the client gave up on and a MEDIUM stream that broke.
RunResult OverloadRun() {
  RunResult run = FixedRun("overload", 1.0);
  RequestRecord shed;
  shed.klass = "WARM";
  shed.http_status = 429;
  shed.error = "http 429: fleet KV full";
  shed.failure = RequestOutcome::kShed;
  shed.retry_after_s = 3;
  RequestRecord shed_unlabelled = shed;
  shed_unlabelled.klass.clear();
  RequestRecord gave_up;
  gave_up.klass = "HEAVY";
  gave_up.error = "read body: timeout";
  gave_up.failure = RequestOutcome::kGaveUp;
  RequestRecord broken = Req("MEDIUM", 1.0, -1, 8000, 0);
  broken.error = "stream ended without [DONE]";
  run.requests.insert(run.requests.end(), {shed, shed_unlabelled, gave_up, broken});
  return run;
}

TEST(SummaryTest, OutcomesAreCountedApartAndAreGoodputMisses) {
  const RunSummary s = Summarize(OverloadRun());
  EXPECT_EQ(s.requests, 9);
  EXPECT_EQ(s.served, 4);
  EXPECT_EQ(s.shed, 2);
  EXPECT_DOUBLE_EQ(s.shed_share, 2.0 / 9);
  EXPECT_EQ(s.failed, 2);  // the FixedRun's 503 and the broken stream
  EXPECT_EQ(s.gave_up, 1);
  EXPECT_EQ(s.errors, 5);
  EXPECT_DOUBLE_EQ(s.error_rate, 6.0 / 10);  // with the dropped arrival
  // Every unsuccessful request and the drop are in ALL's denominator; the four served
  // ones all met their SLOs (TTFT within the class's target, TPOT 0.01 s).
  const ClassSummary& all = s.classes.front();
  EXPECT_EQ(all.slo_requests, 4 + 5 + 1);
  EXPECT_EQ(all.slo_met, 4);
  EXPECT_DOUBLE_EQ(all.goodput, 0.4);
  const std::map<std::string, int64_t> want = {
      {"WARM", 4}, {"MEDIUM", 2}, {"HEAVY", 2}};  // WARM: 2 served, the 503, the shed one
  for (const ClassSummary& c : s.classes) {
    if (const auto it = want.find(c.klass); it != want.end()) {
      EXPECT_EQ(c.slo_requests, it->second) << c.klass;
    }
  }
  RequestRecord only_error;
  only_error.error = "x";
  EXPECT_EQ(only_error.outcome(), RequestOutcome::kFailed);  // failed unless told otherwise
  EXPECT_EQ(RequestRecord{}.outcome(), RequestOutcome::kOk);
}

TEST(ReportTest, OutcomesInEveryFormat) {
  Report report;
  report.runs = {OverloadRun()};
  report.runs[0].session_ids = false;
  report.runs[0].open_loop_turn_s = 12;
  report.runs[0].client_timeout_s = 60;
  const std::string md = ReportMarkdown(report);
  EXPECT_NE(md.find("| config | requests | errors | served | shed | failed | gave up |"),
            std::string::npos);
  EXPECT_NE(md.find("| overload | 9 | 6 (60.0%) | 4 | 2 (22.2%) | 2 | 1 |"), std::string::npos);
  EXPECT_NE(md.find("shed (HTTP 429), failed and given-up requests"), std::string::npos);
  EXPECT_NE(ReportHtml(report).find("<th>gave up</th>"), std::string::npos);
  const std::string table = SummaryTable(report);
  EXPECT_NE(table.find("gaveup"), std::string::npos) << table;
  EXPECT_NE(table.find("2 (22.2%)"), std::string::npos) << table;
  const json::value j = ReportJson(report);
  const json::object& run = j.at("runs").as_array()[0].as_object();
  const json::object& summary = run.at("summary").as_object();
  EXPECT_EQ(summary.at("served").as_int64(), 4);
  EXPECT_EQ(summary.at("shed").as_int64(), 2);
  EXPECT_DOUBLE_EQ(summary.at("shed_share").as_double(), 2.0 / 9);
  EXPECT_EQ(summary.at("failed").as_int64(), 2);
  EXPECT_EQ(summary.at("gave_up").as_int64(), 1);
  EXPECT_EQ(run.at("client").at("session_ids").as_string(), "none");
  EXPECT_DOUBLE_EQ(run.at("client").at("open_loop_turn_s").as_double(), 12);
  EXPECT_DOUBLE_EQ(run.at("client").at("client_timeout_s").as_double(), 60);
  const json::array& reqs = run.at("requests").as_array();
  EXPECT_EQ(reqs[0].at("outcome").as_string(), "ok");
  EXPECT_EQ(reqs[4].at("outcome").as_string(), "failed");
  EXPECT_EQ(reqs[5].at("outcome").as_string(), "shed");
  EXPECT_DOUBLE_EQ(reqs[5].at("retry_after_s").as_double(), 3);
  EXPECT_EQ(reqs[7].at("outcome").as_string(), "gave_up");
}

TEST(SloTest, ParsesTtftTargets) {
  absl::StatusOr<SloTargets> s = ParseTtftSlos("warm=1.5, HEAVY=60", SloTargets{});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->ttft_warm_s, 1.5);
  EXPECT_DOUBLE_EQ(s->ttft_medium_s, 10);  // unchanged
  EXPECT_DOUBLE_EQ(s->ttft_heavy_s, 60);
  for (const char* bad : {"warm", "warm=0", "warm=-1", "warm=x", "cold=3", "warm=inf"}) {
    absl::StatusOr<SloTargets> r = ParseTtftSlos(bad, SloTargets{});
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("--slo-ttft"), std::string::npos);
    }
  }
  EXPECT_DOUBLE_EQ(TtftSlo(SloTargets{}, "MEDIUM"), 10);
  EXPECT_EQ(TtftSlo(SloTargets{}, "unlabelled"), -1);
}

}  // namespace
}  // namespace kvroute::bench
