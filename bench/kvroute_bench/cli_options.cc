// kvroute-bench's shared command-line options (cli_options.h).
#include "bench/kvroute_bench/cli_options.h"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/kvroute_bench/http_client.h"
#include "bench/kvroute_bench/stats.h"
#include "router/policy_registry.h"

namespace kvroute::bench {

void CommonFlags::AddPreset(CLI::App* app) {
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
      app->add_option("--tool-time-range", long_tool_time,
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

void CommonFlags::Add(CLI::App* app) {
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
  app->add_option("--model", run.model, "model name (default: first of GET /v1/models)")->group(rn);
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
  app->add_option("--progress-interval", run.progress_interval_s, "seconds between progress lines")
      ->group(rn)
      ->capture_default_str();
  app->add_option("--metrics-urls", metrics_urls, "instances to scrape: NAME=URL,... (or URL,...)")
      ->delimiter(',')
      ->group(rn);
  app->add_option("--dcgm-url", dcgm_url, "DCGM exporter base URL for GPU utilisation")->group(rn);
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

bool CommonFlags::Finish(WorkloadSpec& spec) {
  agentic.seed = seed;
  trace.seed = seed;
  spec.kind = workload == "trace" ? WorkloadKind::kTrace : WorkloadKind::kAgentic;
  spec.agentic = agentic;
  if (absl::StatusOr<ChatApi> a = ParseChatApi(api); a.ok()) {
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
      std::fprintf(stderr, "--tool-time-lognormal must be MEDIAN,P99 seconds with MEDIAN < P99\n");
      return false;
    }
    spec.agentic =
        long_tool_time_log_normal.empty()
            ? AgenticLongPreset(fleet_kv_tokens, working_set_ratio, arrival_window_s, seed,
                                long_tool_time[0], long_tool_time[1])
            : AgenticLongPreset(fleet_kv_tokens, working_set_ratio, arrival_window_s, seed,
                                long_tool_time_log_normal[0], long_tool_time_log_normal[0],
                                long_tool_time_log_normal[1]);
  }
  agentic.client.send_session_ids = session_ids == "send";
  spec.agentic.client = agentic.client;
  if (spec.kind == WorkloadKind::kTrace &&
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
  if (absl::StatusOr<SloTargets> slo = ParseTtftSlos(slo_ttft, run.slo); slo.ok()) {
    run.slo = *slo;
    run.slo.class_source = *ParseSloClassSource(slo_class);
  } else {
    std::fprintf(stderr, "%s\n", std::string(slo.status().message()).c_str());
    return false;
  }
  spec.trace = trace;
  if (spec.kind == WorkloadKind::kTrace && trace.path.empty()) {
    std::fprintf(stderr, "--workload trace needs --trace FILE\n");
    return false;
  }
  for (size_t i = 0; i < metrics_urls.size(); ++i) {
    std::string name = absl::StrCat("instance", i), url = metrics_urls[i];
    if (auto eq = url.find('='); eq != std::string::npos) {
      name = url.substr(0, eq);
      url = url.substr(eq + 1);
    }
    auto ep = ParseHttpUrl(url);
    if (!ep.ok()) {
      std::fprintf(stderr, "--metrics-urls: %s\n", std::string(ep.status().message()).c_str());
      return false;
    }
    run.instances.push_back({name, *ep});
  }
  if (!dcgm_url.empty()) {
    auto ep = ParseHttpUrl(dcgm_url);
    if (!ep.ok()) {
      std::fprintf(stderr, "--dcgm-url: %s\n", std::string(ep.status().message()).c_str());
      return false;
    }
    run.dcgm = *ep;
  }
  return true;
}

// Configurations and the embedded simulated fleet, shared by `ablation` and `sweep`; returns
// the --time-scale option.
CLI::Option* AddFleetOptions(CLI::App* cmd, AblationOptions& abl) {
  cmd->add_option("--modes", abl.modes,
                  absl::StrCat("modes (", absl::StrJoin(router::PolicyNames(), ","),
                               "; oracle: baseline from kvroute-sim's true cached tokens, "
                               "bench-only reference)"))
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option(
         "--thresholds", abl.thresholds,
         absl::StrCat("heavy thresholds crossed with the threshold-sensitive modes (",
                      absl::StrJoin(
                          router::PolicyNamesWith(&router::PolicyEntry::threshold_sensitive), ", "),
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
                  "decode_stall_weight=2, or one key of a section: residency.enabled=false, "
                  "over the bench's scaled defaults; times in wall seconds; not the oracle "
                  "reference)")
      ->type_name("KEY=VALUE");
  cmd->add_option_function<std::vector<std::string>>(
         "--variant",
         [&abl](const std::vector<std::string>& specs) {
           for (const std::string& spec : specs) {
             absl::StatusOr<ConfigVariant> v = ParseConfigVariant(spec);
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
void FindFleetBinaries(AblationOptions& abl) {
  if (abl.kvroute_bin.empty()) {
    abl.kvroute_bin = FindBuiltBinary("kvroute", {"proxy", "", "bin"});
  }
  if (abl.sim_bin.empty()) abl.sim_bin = FindBuiltBinary("kvroute-sim", {"sim", "", "bin"});
}

}  // namespace kvroute::bench
