// kvroute-bench: workloads, ablations and reports for kvroute.
//
//   kvroute-bench run --target http://127.0.0.1:8000 --workload agentic --jps 0.5 --duration 60
//   kvroute-bench ablation --modes baseline,v1,v2 --thresholds 10000,20000,40000 --out out/
//   kvroute-bench trace-stats --trace bench/traces/conversation_trace.jsonl
//   kvroute-bench calibrate --target http://gpu-host:8000 --profile base.yaml --out fitted.yaml
//   kvroute-bench trace-stats --workload agentic-long --fleet-kv-tokens 1804800
//   kvroute-bench sweep --modes baseline,v1 --jps 0.25,0.5,0.75 --seeds 1,2,3 --out out/sweep
//   kvroute-bench compare out/tier-blind-s1 out/tier-aware-s1
#include <CLI/CLI.hpp>
#include <boost/json/serialize.hpp>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/kvroute_bench/ablation.h"
#include "bench/kvroute_bench/calibrate.h"
#include "bench/kvroute_bench/cli_options.h"
#include "bench/kvroute_bench/compare.h"
#include "bench/kvroute_bench/compute_floor.h"
#include "bench/kvroute_bench/http_client.h"
#include "bench/kvroute_bench/report.h"
#include "bench/kvroute_bench/runner.h"
#include "bench/kvroute_bench/sweep.h"
#include "spdlog/spdlog.h"

namespace kb = kvroute::bench;

namespace {

std::string NowUtc() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&t));
  return buf;
}

std::string NowStamp() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", std::gmtime(&t));
  return buf;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "kvroute-bench: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvroute-bench: workloads, ablations and reports for kvroute"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error")->capture_default_str();

  // run
  CLI::App* run_cmd = app.add_subcommand("run", "drive one OpenAI-compatible endpoint");
  kb::CommonFlags run_flags;
  run_flags.Add(run_cmd);
  std::string target;
  run_cmd->add_option("--target", target, "base URL, e.g. http://127.0.0.1:8000")->required();
  run_cmd->add_option("--name", run_flags.run.name, "label in reports")->capture_default_str();
  run_cmd
      ->add_option("--time-scale", run_flags.run.time_scale,
                   "the target's simulated time scale: workload times are multiplied by it "
                   "and reported latencies divided by it")
      ->capture_default_str();
  run_cmd->add_option("--out", run_flags.out, "write report.{json,md,html} into this directory");

  // ablation
  CLI::App* abl_cmd = app.add_subcommand(
      "ablation", "run the same workload against several kvroute configurations");
  kb::CommonFlags abl_flags;
  abl_flags.Add(abl_cmd);
  kb::AblationOptions abl;
  std::vector<std::string> targets;
  CLI::Option* time_scale_opt = kb::AddFleetOptions(abl_cmd, abl);
  abl_cmd
      ->add_option("--targets", targets,
                   "use running endpoints instead of the embedded fleet: NAME=URL,...")
      ->delimiter(',');
  abl_cmd->add_option("--out", abl_flags.out,
                      "report directory (default: "
                      "kvroute-bench-out/ablation-<time>)");

  // sweep: the ablation at several rates and seeds. --jps and --seed become lists.
  CLI::App* sweep_cmd = app.add_subcommand(
      "sweep",
      "the ablation at several loads (jobs/s) and seeds: spread across seeds and a "
      "regime map (win/tie/lose against a reference configuration)");
  kb::CommonFlags sweep_flags;
  sweep_flags.Add(sweep_cmd);
  sweep_cmd->remove_option(sweep_cmd->get_option("--jps"));
  sweep_cmd->remove_option(sweep_cmd->get_option("--seed"));
  kb::SweepOptions sweep;
  kb::AddFleetOptions(sweep_cmd, sweep.ablation);
  sweep_cmd
      ->add_option("--jps", sweep.jobs_per_second,
                   "agent jobs per second, one point each (agentic-long: the rate its sessions "
                   "arrive at; the ablation's is 1.5 x jobs / --arrival-window)")
      ->delimiter(',')
      ->group("Agentic workload")
      ->capture_default_str();
  sweep_cmd
      ->add_option("--repeats", sweep.repeats,
                   "runs of each point (rate x seed), each on fresh fleets: a seed's figures "
                   "are the mean over its runs, and the paired comparisons draw the runs too")
      ->capture_default_str();
  sweep_cmd->add_option("--seeds", sweep.seeds, "workload seeds run at every rate")
      ->delimiter(',')
      ->capture_default_str();
  sweep_cmd
      ->add_option("--references", sweep.references,
                   "configurations the regime map and the paired comparisons (sweep.md) "
                   "compare the others with")
      ->delimiter(',')
      ->capture_default_str();
  sweep_cmd->add_option("--out", sweep_flags.out,
                        "sweep directory (default: "
                        "kvroute-bench-out/sweep-<time>)");

  // trace-stats
  double nominal_turn_s = 12.0;
  CLI::App* stats_cmd = app.add_subcommand(
      "trace-stats", "print a trace slice's size and infinite-cache prefix-hit bound");
  kb::CommonFlags stats_flags;
  stats_flags.workload = "trace";
  stats_cmd->add_option("--workload", stats_flags.workload, "agentic | agentic-long | trace")
      ->check(CLI::IsMember({"agentic", "agentic-long", "trace"}))
      ->capture_default_str();
  stats_flags.AddPreset(stats_cmd);
  stats_cmd->add_option("--seed", stats_flags.seed, "workload seed")->capture_default_str();
  stats_cmd
      ->add_option("--nominal-turn", nominal_turn_s,
                   "agentic: modelled seconds a turn is assumed to take (arrival order)")
      ->capture_default_str();
  stats_cmd->add_option("--trace", stats_flags.trace.path, "JSONL trace");
  stats_cmd->add_option("--limit", stats_flags.trace.limit, "at most this many requests");
  stats_cmd->add_option("--window", stats_flags.window, "START:END seconds");
  stats_cmd->add_option("--block-size", stats_flags.trace.block_size, "tokens per hash id");

  // compare
  CLI::App* cmp_cmd = app.add_subcommand(
      "compare",
      "two runs of one workload, figure by figure: B - A and how far resampling the "
      "workload's sessions moves it (paired bootstrap)");
  std::string cmp_a, cmp_b, cmp_run_a, cmp_run_b, cmp_json;
  kb::CompareOptions cmp;
  cmp_cmd
      ->add_option("a", cmp_a,
                   "run A: a report.json, or a directory with one under it; repeats of A "
                   "comma-separated")
      ->required();
  cmp_cmd->add_option("b", cmp_b, "run B, the same way (default: A's report, with --run-b)");
  cmp_cmd->add_option("--run-a", cmp_run_a, "A's run (configuration) name, if it has several");
  cmp_cmd->add_option("--run-b", cmp_run_b, "B's run name, if it has several");
  cmp_cmd->add_option("--resamples", cmp.resamples, "draws of the sessions")->capture_default_str();
  cmp_cmd->add_option("--seed", cmp.seed, "seed of the draws")->capture_default_str();
  cmp_cmd->add_option("--confidence", cmp.confidence, "the interval's central share")
      ->capture_default_str();
  cmp_cmd
      ->add_option("--max-sim-lag", cmp.max_sim_lag_s,
                   "flag a run whose simulator lag p99 exceeds this many modelled seconds "
                   "(0: never)")
      ->capture_default_str();
  cmp_cmd->add_option("--json", cmp_json, "also write the comparison as JSON here");
  std::string cmp_slo_class;
  cmp_cmd
      ->add_option("--slo-class", cmp_slo_class,
                   "measure every run's goodput in these classes: router or workload "
                   "(default: each run's own)")
      ->check(CLI::IsMember({"router", "workload"}));

  // calibrate
  CLI::App* cal_cmd = app.add_subcommand(
      "calibrate", "fit a kvroute-sim profile's timing section to one vLLM instance");
  kb::CalibrateOptions cal;
  std::string cal_target, cal_profile, cal_out;
  cal_cmd->add_option("--target", cal_target, "the instance's base URL")->required();
  cal_cmd->add_option("--profile", cal_profile,
                      "base profile: model, GPU and engine sections (default: built-in H20)");
  cal_cmd->add_option("--out", cal_out, "write the base profile with the fitted timing here");
  cal_cmd->add_option("--model", cal.model, "model name (default: first of GET /v1/models)");
  cal_cmd->add_option("--prompt-lengths", cal.prompt_lengths, "prefill probes (tokens)")
      ->delimiter(',')
      ->capture_default_str();
  cal_cmd->add_option("--decode-batches", cal.decode_batches, "decode probes (batch sizes)")
      ->delimiter(',')
      ->capture_default_str();
  cal_cmd
      ->add_option("--decode-context", cal.decode_context,
                   "prompt tokens of each decode-batch request")
      ->capture_default_str();
  cal_cmd
      ->add_option("--long-contexts", cal.long_contexts,
                   "batch-1 decode probes at these "
                   "contexts (tokens)")
      ->delimiter(',')
      ->capture_default_str();
  cal_cmd->add_option("--decode-tokens", cal.decode_tokens, "output tokens per decode request")
      ->capture_default_str();
  cal_cmd->add_option("--window-steps", cal.window_steps, "decode steps measured per probe")
      ->capture_default_str();
  cal_cmd->add_option("--seed", cal.seed, "prompt seed")->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%H:%M:%S.%e %^%l%$ %v");

  if (*stats_cmd) {
    kb::WorkloadSpec spec;
    if (!stats_flags.Finish(spec)) return 2;
    if (spec.kind == kb::WorkloadKind::kAgentic) {
      const kb::AgenticPlanStats st =
          kb::PlanAgenticStats(spec.agentic, stats_flags.fleet_kv_tokens, nominal_turn_s);
      std::printf(
          "%s: %lld jobs, %lld requests (%.1f turns a job), prompt tokens %lld (mean %.0f, max "
          "%lld)\npeak working set %lld tokens = %.2fx the fleet's KV (%lld tokens)\n"
          "prefix-hit bounds: infinite cache %.3f, pooled LRU of the fleet's KV %.3f "
          "(16-token blocks, arrival order with %.0f s a turn)\n",
          spec.agentic.preset.empty() ? "agentic" : spec.agentic.preset.c_str(),
          static_cast<long long>(st.jobs), static_cast<long long>(st.requests), st.mean_turns,
          static_cast<long long>(st.bounds.prompt_tokens), st.mean_context_tokens,
          static_cast<long long>(st.max_context_tokens),
          static_cast<long long>(st.peak_working_set_tokens),
          static_cast<double>(st.peak_working_set_tokens) /
              static_cast<double>(std::max<int64_t>(1, stats_flags.fleet_kv_tokens)),
          static_cast<long long>(stats_flags.fleet_kv_tokens), st.bounds.infinite_hit_ratio(),
          st.bounds.pooled_lru_hit_ratio(), nominal_turn_s);
      return 0;
    }
    if (absl::Status s = kb::PrepareWorkload(spec); !s.ok()) return Fail(s);
    const auto& recs = *spec.trace_records;
    int64_t input = 0, output = 0;
    for (const auto& r : recs) {
      input += r.input_length;
      output += r.output_length;
    }
    std::vector<kb::BoundRequest> bound_requests;
    for (const auto& r : recs) {
      kb::BoundRequest b;
      b.arrival_s = r.timestamp_ms / 1000.0;
      b.prompt_tokens = r.input_length;
      b.blocks = r.hash_ids;
      b.block_tokens = r.block_size;
      bound_requests.push_back(std::move(b));
    }
    const kb::CacheBounds bounds = kb::ComputeCacheBounds(
        std::move(bound_requests), stats_flags.fleet_kv_tokens, stats_flags.trace.block_size);
    std::printf(
        "requests %zu, span %.1f s, input tokens %lld (avg %.0f), output tokens %lld, "
        "infinite-cache prefix-hit bound %.3f, pooled LRU of %lld tokens %.3f\n",
        recs.size(), recs.back().timestamp_ms / 1000.0, static_cast<long long>(input),
        static_cast<double>(input) / static_cast<double>(recs.size()),
        static_cast<long long>(output), kb::InfiniteCacheHitRatio(recs),
        static_cast<long long>(stats_flags.fleet_kv_tokens), bounds.pooled_lru_hit_ratio());
    return 0;
  }

  if (*cmp_cmd) {
    if (!cmp_slo_class.empty()) cmp.slo_class = *kb::ParseSloClassSource(cmp_slo_class);
    std::vector<kb::ComparedRun> sides[2];
    const std::string paths[2] = {cmp_a, cmp_b.empty() ? cmp_a : cmp_b};
    const std::string names[2] = {cmp_run_a, cmp_run_b};
    for (int s = 0; s < 2; ++s) {
      for (absl::string_view path : absl::StrSplit(paths[s], ',', absl::SkipEmpty())) {
        absl::StatusOr<kb::ComparedRun> run = kb::ReadComparedRun(std::string(path), names[s]);
        if (!run.ok()) return Fail(run.status());
        sides[s].push_back(*std::move(run));
      }
    }
    absl::StatusOr<kb::Comparison> c = kb::CompareRuns(sides[0], sides[1], cmp);
    if (!c.ok()) return Fail(c.status());
    std::cout << kb::ComparisonMarkdown(*c);
    if (!cmp_json.empty()) {
      std::ofstream out(cmp_json);
      out << boost::json::serialize(kb::ComparisonJson(*c)) << "\n";
      if (!out) return Fail(absl::UnavailableError(absl::StrCat("cannot write ", cmp_json)));
    }
    return 0;
  }

  if (*cal_cmd) {
    auto ep = kb::ParseHttpUrl(cal_target);
    if (!ep.ok()) return Fail(ep.status());
    cal.target = *ep;
    std::string base_text;
    if (!cal_profile.empty()) {
      std::ifstream in(cal_profile);
      std::stringstream ss;
      ss << in.rdbuf();
      base_text = ss.str();
      absl::StatusOr<sim::Profile> base = sim::LoadProfile(cal_profile);
      if (!base.ok()) return Fail(base.status());
      cal.base = *std::move(base);
    } else {
      cal.base = sim::DefaultProfile();
    }
    absl::StatusOr<kb::Calibration> fitted = kb::Calibrate(cal);
    if (!fitted.ok()) return Fail(fitted.status());
    const std::string timing = kb::TimingYaml(*fitted, cal_target);
    std::cout << timing;
    if (!cal_out.empty()) {
      std::ofstream out(cal_out);
      out << (base_text.empty() ? timing : kb::ReplaceTimingSection(base_text, timing));
      if (!out) return Fail(absl::UnavailableError(absl::StrCat("cannot write ", cal_out)));
      std::cout << "profile: " << cal_out << "\n";
    }
    return 0;
  }

  if (*run_cmd) {
    kb::WorkloadSpec spec;
    if (!run_flags.Finish(spec)) return 2;
    if (absl::Status s = kb::PrepareWorkload(spec); !s.ok()) return Fail(s);
    auto ep = kb::ParseHttpUrl(target);
    if (!ep.ok()) return Fail(ep.status());
    run_flags.run.target = *ep;
    if (run_flags.run.mode.empty()) run_flags.run.mode = run_flags.run.name;
    if (run_flags.run.instances.empty()) run_flags.run.fleet_kv_tokens = run_flags.fleet_kv_tokens;
    absl::StatusOr<kb::RunResult> result = kb::RunWorkload(run_flags.run, spec);
    if (!result.ok()) return Fail(result.status());
    kb::Report report;
    report.title = absl::StrCat("kvroute-bench run against ", target);
    report.generated_at = NowUtc();
    report.setup = {{"target", target}, {"workload", std::string(kb::WorkloadName(spec.kind))}};
    if (spec.kind == kb::WorkloadKind::kAgentic) {
      report.setup.emplace_back("client",
                                kb::RunClientDescription(spec.agentic.client, run_flags.run));
    }
    report.runs.push_back(*std::move(result));
    std::cout << "\n" << kb::SummaryTable(report);
    if (!run_flags.out.empty()) {
      if (absl::Status s = kb::WriteReports(report, run_flags.out); !s.ok()) return Fail(s);
      std::cout << "report: " << run_flags.out << "/report.html\n";
    }
    return report.runs.front().requests.empty() ? 1 : 0;
  }

  if (*sweep_cmd) {
    kb::WorkloadSpec spec;
    if (!sweep_flags.Finish(spec)) return 2;
    kb::AblationOptions& a = sweep.ablation;
    a.run_template = sweep_flags.run;
    a.generated_at = NowUtc();
    a.out_dir = sweep_flags.out.empty() ? absl::StrCat("kvroute-bench-out/sweep-", NowStamp())
                                        : sweep_flags.out;
    kb::FindFleetBinaries(a);
    if (absl::Status s = kb::UseFleetProfile(a.profile, a.run_template); !s.ok()) return Fail(s);
    sweep.on_point = [](double rate, uint64_t seed, const kb::Report& report) {
      std::cout << "\n" << rate << " jobs/s, seed " << seed << ":\n" << kb::SummaryTable(report);
    };
    if (absl::Status s = kb::ValidateSweep(sweep, spec); !s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return 2;
    }
    absl::StatusOr<kb::Sweep> result = kb::RunSweep(sweep, spec);
    if (!result.ok()) return Fail(result.status());
    std::cout << "\n" << kb::SweepMarkdown(*result);
    std::cout << "sweep: " << a.out_dir << "/sweep.md (also sweep.json)\n";
    return 0;
  }

  // ablation
  kb::WorkloadSpec spec;
  if (!abl_flags.Finish(spec)) return 2;
  abl.run_template = abl_flags.run;
  abl.generated_at = NowUtc();
  abl.out_dir = abl_flags.out.empty() ? absl::StrCat("kvroute-bench-out/ablation-", NowStamp())
                                      : abl_flags.out;
  for (const std::string& t : targets) {
    const auto eq = t.find('=');
    if (eq == std::string::npos) {
      abl.targets.emplace_back(absl::StrCat("target", abl.targets.size()), t);
    } else {
      abl.targets.emplace_back(t.substr(0, eq), t.substr(eq + 1));
    }
  }
  if (!abl.targets.empty() && abl.run_template.instances.empty()) {
    abl.run_template.fleet_kv_tokens = abl_flags.fleet_kv_tokens;
  }
  if (!abl.targets.empty() && time_scale_opt->count() > 0) {
    abl.run_template.time_scale = abl.sim_time_scale;
  }
  if (abl.targets.empty()) {
    kb::FindFleetBinaries(abl);
    if (absl::Status s = kb::UseFleetProfile(abl.profile, abl.run_template); !s.ok())
      return Fail(s);
  }
  absl::StatusOr<kb::Report> report = kb::RunAblation(abl, spec);
  if (!report.ok()) return Fail(report.status());
  std::cout << "\n" << kb::SummaryTable(*report);
  std::cout << "report: " << abl.out_dir << "/report.html (also report.md, report.json)\n";
  return 0;
}
