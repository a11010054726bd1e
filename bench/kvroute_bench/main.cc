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

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/kvroute_bench/ablation.h"
#include "bench/kvroute_bench/calibrate.h"
#include "bench/kvroute_bench/compare.h"
#include "bench/kvroute_bench/compute_floor.h"
#include "bench/kvroute_bench/report.h"
#include "bench/kvroute_bench/runner.h"
#include "bench/kvroute_bench/sweep.h"
#include "router/policy_registry.h"
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

// Options shared by `run` and `ablation`.
struct CommonFlags {
  std::string workload = "agentic";
  std::string api = "chat";
  std::string session_ids = "send";
  kb::AgenticOptions agentic;
  kb::TraceOptions trace;
  std::string window;
  uint64_t seed = 1;
  kb::RunOptions run;
  std::vector<std::string> metrics_urls;
  std::string dcgm_url;
  std::string slo_ttft;
  std::string slo_class = "router";
  std::string out;
  // The fleet's KV for the agentic-long sizing rule and the pooled-LRU yardstick: 8 instances of
  // configs/profiles/h20-qwen3-coder-30b-a3b.yaml (kvroute-size: 225,600 tokens each).
  int64_t fleet_kv_tokens = 1804800;
  double working_set_ratio = 2.0;
  double arrival_window_s = 60;
  std::vector<double> long_tool_time = {2, 6};
  std::vector<double> long_tool_time_log_normal;

  void AddPreset(CLI::App* app) {
    auto* pr = "agentic-long preset";
    app->add_option("--fleet-kv-tokens", fleet_kv_tokens,
                    "the fleet's KV in tokens (sizing rule; pooled-LRU yardstick when not scraped)")
        ->group(pr)
        ->capture_default_str();
    app->add_option("--working-set-ratio", working_set_ratio,
                    "sessions' working set / fleet KV (agentic-long)")
        ->group(pr)
        ->capture_default_str();
    app->add_option("--arrival-window", arrival_window_s,
                    "seconds in which the agentic-long sessions arrive")
        ->group(pr)
        ->capture_default_str();
    CLI::Option* range =
        app->add_option(
               "--tool-time-range", long_tool_time,
               "MIN,MAX: each agentic-long turn's tool time, uniform in [MIN, MAX] seconds")
            ->delimiter(',')
            ->expected(2)
            ->check(CLI::NonNegativeNumber)
            ->group(pr)
            ->capture_default_str();
    app->add_option("--tool-time-lognormal", long_tool_time_log_normal,
                    "MEDIAN,P99: each agentic-long turn's tool time log-normal with this median "
                    "and 99th percentile, in seconds (in place of --tool-time-range)")
        ->delimiter(',')
        ->expected(2)
        ->check(CLI::PositiveNumber)
        ->excludes(range)
        ->group(pr);
  }

  void Add(CLI::App* app) {
    app->add_option("--workload", workload, "agentic | agentic-long | trace")
        ->check(CLI::IsMember({"agentic", "agentic-long", "trace"}))
        ->capture_default_str();
    AddPreset(app);
    app->add_option("--seed", seed, "workload seed")->capture_default_str();
    auto* ag = "Agentic workload";
    app->add_option("--jps", agentic.jobs_per_second, "agent jobs per second (Poisson)")
        ->group(ag)
        ->capture_default_str();
    app->add_option("--duration", agentic.duration_s, "seconds of job arrivals")
        ->group(ag)
        ->capture_default_str();
    app->add_option("--turns", agentic.turns, "turns per job")->group(ag)->capture_default_str();
    app->add_option("--tool-tokens", agentic.tool_tokens,
                    "tool output sizes after turns 1..n-1 (comma separated)")
        ->delimiter(',')
        ->group(ag)
        ->capture_default_str();
    app->add_option("--system-tokens", agentic.system_tokens, "shared system prompt tokens")
        ->group(ag)
        ->capture_default_str();
    app->add_option("--task-tokens", agentic.task_tokens, "per-job task tokens")
        ->group(ag)
        ->capture_default_str();
    app->add_option("--task-tokens-max", agentic.task_tokens_max,
                    "if larger than --task-tokens: task sizes uniform in [task, max] per job")
        ->group(ag)
        ->capture_default_str();
    app->add_option("--tool-time", agentic.tool_time_s, "seconds the agent's tool runs")
        ->group(ag)
        ->capture_default_str();
    app->add_option("--completion-tokens", agentic.completion_tokens, "output tokens per turn")
        ->group(ag)
        ->capture_default_str();
    app->add_option("--max-jobs", agentic.max_jobs, "bound on the number of jobs")
        ->group(ag)
        ->capture_default_str();
    app->add_option("--session-ids", session_ids,
                    "send: each job's id as X-Session-Id (metadata.user_id with --api "
                    "messages); none: no session id, as a client that sends none")
        ->check(CLI::IsMember({"send", "none"}))
        ->group(ag)
        ->capture_default_str();
    app->add_option("--open-loop-turn-s", agentic.client.open_loop_turn_s,
                    "open loop: send turn k+1 this many seconds + turn k's tool time after "
                    "turn k was sent, whatever became of it, with planned answers in the "
                    "conversation (0: closed loop, each turn waits for the previous answer)")
        ->check(CLI::NonNegativeNumber)
        ->group(ag)
        ->capture_default_str();
    auto* tr = "Trace workload";
    app->add_option("--trace", trace.path,
                    "JSONL trace (timestamp, input_length, "
                    "output_length, hash_ids)")
        ->group(tr);
    app->add_option("--speedup", trace.speedup, "replay speed-up factor")
        ->group(tr)
        ->capture_default_str();
    app->add_option("--limit", trace.limit, "at most this many requests (0: all)")
        ->group(tr)
        ->capture_default_str();
    app->add_option("--window", window, "START:END seconds of trace time to replay")->group(tr);
    app->add_option("--block-size", trace.block_size, "tokens per hash id")
        ->group(tr)
        ->capture_default_str();
    app->add_option("--max-output-tokens", trace.max_output_tokens, "cap output_length (0: none)")
        ->group(tr)
        ->capture_default_str();
    app->add_option("--think-time", trace.think_time_s,
                    "seconds between a session turn and its parent's completion "
                    "(negative: the timestamp gap)")
        ->group(tr)
        ->capture_default_str();
    auto* rn = "Run";
    app->add_option("--model", run.model, "model name (default: first of GET /v1/models)")
        ->group(rn);
    app->add_option("--api", api,
                    "chat: POST /v1/chat/completions; messages: POST /v1/messages as a coding "
                    "agent sends it (system block, tools, session in metadata.user_id)")
        ->check(CLI::IsMember({"chat", "messages"}))
        ->group(rn)
        ->capture_default_str();
    app->add_option("--request-timeout", run.request_timeout_s,
                    "hard cap per request, wall seconds (counted as given up)")
        ->group(rn)
        ->capture_default_str();
    app->add_option("--client-timeout", run.client_timeout_s,
                    "the client abandons a request not finished this many seconds after it "
                    "was sent (workload seconds, scaled by --time-scale; counted as given up; "
                    "0: off)")
        ->check(CLI::NonNegativeNumber)
        ->group(rn)
        ->capture_default_str();
    app->add_option("--shed-retries", run.shed_retries,
                    "closed-loop agents send a shed (429) turn again after its retry-after-ms "
                    "(else Retry-After) up to this many times, as the agent SDKs do (0: a shed "
                    "ends the session)")
        ->check(CLI::NonNegativeNumber)
        ->group(rn)
        ->capture_default_str();
    app->add_option("--drain-timeout", run.drain_timeout_s,
                    "seconds to wait for in-flight work after the last arrival (wall)")
        ->group(rn)
        ->capture_default_str();
    app->add_option("--max-inflight", run.max_inflight,
                    "jobs/requests in flight before arrivals are dropped")
        ->group(rn)
        ->capture_default_str();
    app->add_option("--sample-interval", run.sample_interval_s, "seconds between /metrics scrapes")
        ->group(rn)
        ->capture_default_str();
    app->add_option("--progress-interval", run.progress_interval_s,
                    "seconds between progress lines")
        ->group(rn)
        ->capture_default_str();
    app->add_option("--metrics-urls", metrics_urls,
                    "instances to scrape: NAME=URL,... (or URL,...)")
        ->delimiter(',')
        ->group(rn);
    app->add_option("--dcgm-url", dcgm_url, "DCGM exporter base URL for GPU utilisation")
        ->group(rn);
    app->add_option("--slo-ttft", slo_ttft,
                    "TTFT SLOs for goodput, modelled seconds: warm=S,medium=S,heavy=S")
        ->group(rn)
        ->default_str("warm=2,medium=10,heavy=30");
    app->add_option("--slo-tpot", run.slo.tpot_s, "TPOT SLO for goodput, modelled seconds")
        ->check(CLI::PositiveNumber)
        ->group(rn)
        ->capture_default_str();
    app->add_option("--slo-class", slo_class,
                    "which class a request's SLO is: router (its X-Kvroute-Class) or workload "
                    "(its class with every earlier prompt's prefix cached)")
        ->check(CLI::IsMember({"router", "workload"}))
        ->group(rn)
        ->capture_default_str();
  }

  // Validates and fills the workload spec and run options.
  bool Finish(kb::WorkloadSpec& spec) {
    agentic.seed = seed;
    trace.seed = seed;
    spec.kind = workload == "trace" ? kb::WorkloadKind::kTrace : kb::WorkloadKind::kAgentic;
    spec.agentic = agentic;
    if (absl::StatusOr<kb::ChatApi> a = kb::ParseChatApi(api); a.ok()) {
      run.api = *a;
    } else {
      std::fprintf(stderr, "%s\n", std::string(a.status().message()).c_str());
      return false;
    }
    if (workload == "agentic-long") {
      if (fleet_kv_tokens <= 0 || !(working_set_ratio > 0) || !(arrival_window_s > 0)) {
        std::fprintf(stderr,
                     "agentic-long needs positive --fleet-kv-tokens, "
                     "--working-set-ratio and --arrival-window\n");
        return false;
      }
      if (long_tool_time.size() != 2 || long_tool_time[1] < long_tool_time[0]) {
        std::fprintf(stderr, "--tool-time-range must be MIN,MAX seconds with MIN <= MAX\n");
        return false;
      }
      if (!long_tool_time_log_normal.empty() &&
          !(long_tool_time_log_normal.size() == 2 &&
            long_tool_time_log_normal[1] > long_tool_time_log_normal[0])) {
        std::fprintf(stderr,
                     "--tool-time-lognormal must be MEDIAN,P99 seconds with MEDIAN < P99\n");
        return false;
      }
      spec.agentic =
          long_tool_time_log_normal.empty()
              ? kb::AgenticLongPreset(fleet_kv_tokens, working_set_ratio, arrival_window_s, seed,
                                      long_tool_time[0], long_tool_time[1])
              : kb::AgenticLongPreset(fleet_kv_tokens, working_set_ratio, arrival_window_s, seed,
                                      long_tool_time_log_normal[0], long_tool_time_log_normal[0],
                                      long_tool_time_log_normal[1]);
    }
    agentic.client.send_session_ids = session_ids == "send";
    spec.agentic.client = agentic.client;
    if (spec.kind == kb::WorkloadKind::kTrace &&
        (!agentic.client.send_session_ids || agentic.client.open_loop())) {
      std::fprintf(stderr,
                   "--session-ids none and --open-loop-turn-s are for agentic workloads "
                   "(agentic, agentic-long)\n");
      return false;
    }
    if (!window.empty()) {
      std::vector<std::string> parts = absl::StrSplit(window, ':');
      if (parts.size() != 2 || !absl::SimpleAtod(parts[0], &trace.window_start_s) ||
          (!parts[1].empty() && !absl::SimpleAtod(parts[1], &trace.window_end_s))) {
        std::fprintf(stderr, "--window must be START:END seconds, got %s\n", window.c_str());
        return false;
      }
    }
    if (absl::StatusOr<kb::SloTargets> slo = kb::ParseTtftSlos(slo_ttft, run.slo); slo.ok()) {
      run.slo = *slo;
      run.slo.class_source = *kb::ParseSloClassSource(slo_class);
    } else {
      std::fprintf(stderr, "%s\n", std::string(slo.status().message()).c_str());
      return false;
    }
    spec.trace = trace;
    if (spec.kind == kb::WorkloadKind::kTrace && trace.path.empty()) {
      std::fprintf(stderr, "--workload trace needs --trace FILE\n");
      return false;
    }
    for (size_t i = 0; i < metrics_urls.size(); ++i) {
      std::string name = absl::StrCat("instance", i), url = metrics_urls[i];
      if (auto eq = url.find('='); eq != std::string::npos) {
        name = url.substr(0, eq);
        url = url.substr(eq + 1);
      }
      auto ep = kb::ParseHttpUrl(url);
      if (!ep.ok()) {
        std::fprintf(stderr, "--metrics-urls: %s\n", std::string(ep.status().message()).c_str());
        return false;
      }
      run.instances.push_back({name, *ep});
    }
    if (!dcgm_url.empty()) {
      auto ep = kb::ParseHttpUrl(dcgm_url);
      if (!ep.ok()) {
        std::fprintf(stderr, "--dcgm-url: %s\n", std::string(ep.status().message()).c_str());
        return false;
      }
      run.dcgm = *ep;
    }
    return true;
  }
};

// Configurations and the embedded simulated fleet, shared by `ablation` and `sweep`; returns
// the --time-scale option.
CLI::Option* AddFleetOptions(CLI::App* cmd, kb::AblationOptions& abl) {
  cmd->add_option("--modes", abl.modes,
                  absl::StrCat("modes (", absl::StrJoin(kvroute::router::PolicyNames(), ","),
                               "; oracle: baseline from kvroute-sim's true cached tokens, "
                               "bench-only reference)"))
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option(
         "--thresholds", abl.thresholds,
         absl::StrCat("heavy thresholds crossed with the threshold-sensitive modes (",
                      absl::StrJoin(kvroute::router::PolicyNamesWith(
                                        &kvroute::router::PolicyEntry::threshold_sensitive),
                                    ", "),
                      ")"))
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--default-threshold", abl.default_threshold,
                  "heavy threshold for the other modes")
      ->capture_default_str();
  cmd->add_option("--instances", abl.instances, "simulated instances")->capture_default_str();
  cmd->add_option("--profile", abl.profile, "kvroute-sim profile YAML");
  CLI::Option* time_scale_opt =
      cmd->add_option("--time-scale", abl.sim_time_scale,
                      "kvroute-sim --time-scale; the workload's clock is scaled the same way "
                      "(with --targets: only when given)")
          ->capture_default_str();
  cmd->add_option("--sim-seed", abl.sim_seed, "kvroute-sim --seed")->capture_default_str();
  cmd->add_option("--sim-threads", abl.sim_threads,
                  "kvroute-sim --threads: threads the simulated instances' steps run on (0: one "
                  "per hardware thread of this host)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  cmd->add_flag("--kv-events,!--no-kv-events", abl.kv_events,
                "the simulated engines publish KV cache events and kvroute subscribes "
                "(as vLLM with --kv-events-config)")
      ->capture_default_str();
  cmd->add_option("--scheduling-policy", abl.scheduling_policy,
                  "the simulated engines' --scheduling-policy; with priority kvroute sets each "
                  "request's deadline as its priority (backends[].scheduling_policy)")
      ->check(CLI::IsMember({"fcfs", "priority"}))
      ->capture_default_str();
  cmd->add_option("--long-prefill-token-threshold", abl.long_prefill_token_threshold,
                  "the simulated engines' --long-prefill-token-threshold: the most tokens one "
                  "request prefills in a step (0: the step's whole budget, vLLM's default)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--kv-offloading-size", abl.kv_offloading_size_gib,
                  "kvroute-sim --kv-offloading-size: GiB of host memory per simulated instance for "
                  "vLLM's native CPU KV offloading (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--kv-offloading-backend", abl.kv_offloading_backend,
                  "kvroute-sim --kv-offloading-backend for that tier: native, or lmcache "
                  "(LMCache's connector: stores and loads block the step, 256-token chunks)")
      ->check(CLI::IsMember({"native", "lmcache"}))
      ->capture_default_str();
  cmd->add_option("--kv-pool-size", abl.kv_pool_size_gib,
                  "kvroute-sim --kv-pool-size: GiB of a KV pool shared by the simulated fleet "
                  "(Mooncake-Store-like); kvroute follows its events with --kv-events (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--kvroute-replicas", abl.kvroute_replicas,
                  "kvroute replicas per configuration, each with the same config; the load "
                  "generator spreads requests over them round robin as a plain balancer would, "
                  "and sends a refused or reset request to the next one")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  cmd->add_option("--cluster-store", abl.cluster_store,
                  "what the replicas share state through: none, or redis (a redis-server "
                  "started on a free loopback port per configuration)")
      ->check(CLI::IsMember({"none", "redis"}))
      ->capture_default_str();
  cmd->add_option("--redis-server-bin", abl.redis_server_bin,
                  "redis-server binary for --cluster-store redis")
      ->capture_default_str();
  cmd->add_option("--kill-store-at", abl.kill_store_at_s,
                  "kill the cluster store (SIGKILL) this many modelled seconds into each "
                  "configuration; it starts again, empty, on its port --store-down-for seconds "
                  "later (needs --cluster-store redis; negative: never)")
      ->capture_default_str();
  cmd->add_option("--store-down-for", abl.store_down_s,
                  "modelled seconds the cluster store stays down after --kill-store-at")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--kill-replica-at", abl.kill_replica_at_s,
                  "kill kvroute replica 0 (SIGKILL) this many modelled seconds into each "
                  "configuration (needs --kvroute-replicas 2 or more; negative: never)")
      ->capture_default_str();
  cmd->add_option("--router", abl.router_keys,
                  "KEY=VALUE added under router: in every kvroute config (e.g. "
                  "decode_stall_weight=2; times in wall seconds; not the oracle reference)")
      ->type_name("KEY=VALUE");
  cmd->add_option_function<std::vector<std::string>>(
         "--variant",
         [&abl](const std::vector<std::string>& specs) {
           for (const std::string& spec : specs) {
             absl::StatusOr<kb::ConfigVariant> v = kb::ParseConfigVariant(spec);
             if (!v.ok()) throw CLI::ValidationError(std::string(v.status().message()));
             abl.variants.push_back(*std::move(v));
           }
         },
         "one more configuration, after the modes': a mode with router settings and a host "
         "tier of its own, on the same arrivals (repeatable; e.g. "
         "'blind=baseline;tier_aware=false', 'notier=baseline;fleet.kv_offloading_size=0')")
      ->type_name("NAME=MODE;SETTING;...");
  cmd->add_option("--kvroute-bin", abl.kvroute_bin, "kvroute binary (default: build dir)");
  cmd->add_option("--sim-bin", abl.sim_bin, "kvroute-sim binary (default: build dir)");
  cmd->add_option("--proxy-log-level", abl.log_level, "kvroute --log-level")->capture_default_str();
  return time_scale_opt;
}

// kvroute and kvroute-sim built next to kvroute-bench, unless given.
void FindFleetBinaries(kb::AblationOptions& abl) {
  if (abl.kvroute_bin.empty()) {
    abl.kvroute_bin = kb::FindBuiltBinary("kvroute", {"proxy", "", "bin"});
  }
  if (abl.sim_bin.empty()) abl.sim_bin = kb::FindBuiltBinary("kvroute-sim", {"sim", "", "bin"});
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
  CommonFlags run_flags;
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
  CommonFlags abl_flags;
  abl_flags.Add(abl_cmd);
  kb::AblationOptions abl;
  std::vector<std::string> targets;
  CLI::Option* time_scale_opt = AddFleetOptions(abl_cmd, abl);
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
  CommonFlags sweep_flags;
  sweep_flags.Add(sweep_cmd);
  sweep_cmd->remove_option(sweep_cmd->get_option("--jps"));
  sweep_cmd->remove_option(sweep_cmd->get_option("--seed"));
  kb::SweepOptions sweep;
  AddFleetOptions(sweep_cmd, sweep.ablation);
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
  CommonFlags stats_flags;
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
    FindFleetBinaries(a);
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
    FindFleetBinaries(abl);
    if (absl::Status s = kb::UseFleetProfile(abl.profile, abl.run_template); !s.ok())
      return Fail(s);
  }
  absl::StatusOr<kb::Report> report = kb::RunAblation(abl, spec);
  if (!report.ok()) return Fail(report.status());
  std::cout << "\n" << kb::SummaryTable(*report);
  std::cout << "report: " << abl.out_dir << "/report.html (also report.md, report.json)\n";
  return 0;
}
