// The ablation runner: the same seeded workload against several kvroute configurations
// (ablation.cc runs them; ablation_config.cc builds them and their kvroute configs).
//
// For each configuration (mode x heavy threshold) it starts a fresh simulated fleet
// (kvroute-sim, cold caches) and one kvroute on loopback ephemeral ports as child processes,
// runs the workload, stops both, and collects a RunResult; or it drives given target URLs.
// After every configuration the reports in out_dir are rewritten, so an interrupted
// ablation still leaves the finished configurations on disk.
//
// Usage:
//   AblationOptions o{.modes = {"baseline", "v2"}, .thresholds = {20000}, .out_dir = "out"};
//   absl::StatusOr<Report> r = RunAblation(o, workload);
//
// Thread-safety: RunAblation blocks the calling thread; do not run two with one out_dir.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/kvroute_bench/report.h"
#include "bench/kvroute_bench/runner.h"

namespace kvroute::bench {

// The mode name of the oracle reference (oracle_reference.h): kvroute-bench routes by the
// `baseline` policy from kvroute-sim's true cached-token counts, with no kvroute process. Only
// for the embedded simulated fleet.
inline constexpr std::string_view kOracleReferenceMode = "oracle";

struct AblationConfig {
  std::string name;  // "baseline", "v2-T20k"
  std::string mode;
  int64_t heavy_threshold = 20000;
  std::string profile;  // the model/GPU profile kvroute's config names; empty: none
  // The fleet-shared KV pool's event sockets kvroute follows; empty: none.
  std::string kv_pool_events;
  std::string kv_pool_events_replay;
  // The cluster store the replicas share ("redis://127.0.0.1:PORT"); empty: none.
  std::string cluster_store;
  // A variant's own settings (ConfigVariant): router keys written after the ablation's
  // (a key set in both takes the variant's value), and the host tier of its fleet
  // (GiB per instance; negative: the ablation's).
  std::vector<std::pair<std::string, std::string>> router_keys;
  double kv_offloading_size_gib = -1;
};

// A configuration beside the modes': a mode with router settings and a host tier of its
// own, so that one ablation or sweep holds an ablation of kvroute's settings too (the tier
// pricing off, the fleet without its tier) on the same arrivals as the modes'. Given as
// --variant 'NAME=MODE;SETTING;...', each SETTING either a router KEY=VALUE
// (ParseRouterKeys' rules) or fleet.kv_offloading_size=GIB:
//   blind=baseline;tier_aware=false
//   notier=baseline;fleet.kv_offloading_size=0
struct ConfigVariant {
  std::string name;
  std::string mode;
  std::vector<std::pair<std::string, std::string>> router_keys;
  double kv_offloading_size_gib = -1;  // negative: the ablation's
};
// Errors name the flag and the setting: a name that is not a plain word (letters, digits,
// '_', '-', '.'), a mode kvroute does not run (the oracle reference included: it routes
// with the defaults), a setting that is neither kind, a size that is not a number >= 0.
absl::StatusOr<ConfigVariant> ParseConfigVariant(const std::string& spec);
// "NAME: MODE, router K=V, ..., no host tier" for reports.
std::string ConfigVariantDescription(const ConfigVariant& v);

// Modes whose routing depends on the heavy threshold (the policy table's threshold_sensitive
// rows, router/policy_registry.h) are crossed with every threshold; the others run once at
// default_threshold.
std::vector<AblationConfig> AblationConfigs(const std::vector<std::string>& modes,
                                            const std::vector<int64_t>& thresholds,
                                            int64_t default_threshold);

struct AblationOptions {
  std::vector<std::string> modes = {"baseline", "v1", "v2"};
  std::vector<int64_t> thresholds = {20000};
  int64_t default_threshold = 20000;
  // Embedded fleet.
  std::string kvroute_bin;
  std::string sim_bin;
  int instances = 8;
  std::string profile;  // kvroute-sim --profile (empty: the simulator's default)
  double sim_time_scale = 0.1;
  uint64_t sim_seed = 1;
  // kvroute-sim --threads: the simulated instances' steps spread over this many threads
  // (each instance stays on its own strand), so a busy fleet's clock keeps up with the wall
  // clock (report.md's "Simulator lag"); 0: one per hardware thread of the host.
  int sim_threads = 0;
  // The simulated engines publish their KV cache events (as vLLM does with
  // --kv-events-config) and kvroute subscribes to them.
  bool kv_events = true;
  // The simulated engines' scheduling policy (vLLM's --scheduling-policy): "fcfs", or
  // "priority", and then kvroute's config names it on every backend so each leg carries the
  // request's deadline (proxy/engine_priority.h).
  std::string scheduling_policy = "fcfs";
  // The simulated engines' --long-prefill-token-threshold (vLLM's: the most tokens one request
  // prefills in a step); 0: vLLM's default, one prompt may take the step's whole budget.
  int long_prefill_token_threshold = 0;
  // The simulated engines' host-memory KV tier (vLLM's --kv-offloading-size, GiB per
  // instance); 0: off.
  double kv_offloading_size_gib = 0;
  // Its backend (vLLM's --kv-offloading-backend): "native", or "lmcache", whose stores and
  // loads block the engine's steps; passed only with a tier.
  std::string kv_offloading_backend = "native";
  // The simulated fleet's shared KV pool (kvroute-sim --kv-pool-size, GiB for the fleet); 0:
  // off. With kv_events, kvroute follows the pool's events too (kv_events.pool).
  double kv_pool_size_gib = 0;
  std::string log_level = "warn";
  // Router replicas per configuration, each a full kvroute with the same config, behind the
  // load generator's round robin (RunOptions::replicas); 1: one kvroute.
  int kvroute_replicas = 1;
  // Modelled seconds after a configuration's start at which replica 0 is killed (SIGKILL);
  // negative: never. Needs kvroute_replicas >= 2.
  double kill_replica_at_s = -1;
  // What the replicas share state through: "none", or "redis" (the bench starts a
  // redis-server on a free loopback port per configuration, `redis_server_bin`).
  std::string cluster_store = "none";
  // Modelled seconds after a configuration's start at which the cluster store is killed
  // (SIGKILL), and how long it stays down before it starts again, empty, on its port;
  // negative: never. Needs cluster_store "redis".
  double kill_store_at_s = -1;
  double store_down_s = 20;
  std::string redis_server_bin = "redis-server";
  // KEY=VALUE settings added under `router:` in every kvroute config the
  // bench writes (ParseRouterKeys); times in wall seconds.
  std::vector<std::string> router_keys;
  // Configurations run after the modes' (ConfigVariant), in the order given.
  std::vector<ConfigVariant> variants;
  double startup_timeout_s = 60;
  // Given targets instead: (name, URL) pairs; run_template.instances are scraped.
  std::vector<std::pair<std::string, std::string>> targets;
  std::string out_dir = "kvroute-bench-out";
  RunOptions run_template;  // timeouts, sampling, progress, model
  std::string generated_at;
};

// The modes' configurations (AblationConfigs), then the variants'. Errors: a variant named
// as another configuration, or variants with given targets (they write the bench's own
// kvroute configs and fleets).
absl::StatusOr<std::vector<AblationConfig>> AblationConfigsOf(const AblationOptions& options);

// The router keys a configuration's kvroute config gets: the ablation's (--router), then the
// configuration's own in place of any of the ablation's with the same key.
std::vector<std::pair<std::string, std::string>> RouterKeysFor(
    const AblationConfig& config,
    const std::vector<std::pair<std::string, std::string>>& ablation_keys);

absl::StatusOr<Report> RunAblation(const AblationOptions& options, WorkloadSpec& workload);

// ", its instances' steps on N threads" for the embedded fleet (SimThreads), ", host KV tier
// N GiB per instance" (and its backend when not native) with --kv-offloading-size,
// ", fleet-shared KV pool M GiB" with --kv-pool-size, and "; N kvroute replicas ..." with
// --kvroute-replicas (and the kill).
std::string FleetExtrasDescription(const AblationOptions& options);
// The threads the embedded kvroute-sim runs on: options.sim_threads, or with 0 the host's
// hardware threads (at least 1).
int SimThreads(const AblationOptions& options);

// Path of a binary built next to the running executable: searches the executable's
// directory and its ancestors (up to 3 levels) in `subdirs`. Empty if not found.
std::string FindBuiltBinary(const std::string& name, const std::vector<std::string>& subdirs);

// Joins kvroute's request log (one JSON object per line, DESIGN.md section 4) into the run's
// records by request id: cached_tokens_est, prefill leg (t_prefill_done - t_routed),
// transfer_s and predicted_ttft_s (wall seconds, as kvroute's config for the run has them), and
// the class of a record the target sent none for (a shed request). Returns
// how many records matched; a missing file matches none.
int64_t MergeRequestLog(const std::string& path, RunResult& run);

// One simulated instance as kvroute's config names it: its HTTP URL and, when
// it publishes them, its KV event endpoints (empty: none).
struct FleetBackend {
  std::string name;
  std::string url;
  std::string kv_events;
  std::string kv_events_replay;
  bool priority_scheduling = false;  // the engine runs --scheduling-policy priority
};

// The kvroute YAML config (DESIGN.md section 4) for one configuration on a
// simulated fleet running at `time_scale` wall seconds per modelled second:
// its time windows, its profile's costs (profile_time_scale) and the SLOs
// its placement cost weighs (`slo`, modelled seconds, as the report judges
// by) are scaled to wall seconds.
// `router_keys` (ParseRouterKeys) are written under `router:`: a plain key as given; a
// section's keys (SECTION.KEY, or SECTION as a map) merged into that section, over the
// bench's scaled defaults for `residency` (grace_s, max_wait_s) and `shed`
// (min_retry_after_s, max_retry_after_s), later settings winning.
std::string KvrouteConfigYaml(
    const AblationConfig& config, const std::vector<FleetBackend>& backends,
    double time_scale = 1.0, const SloTargets& slo = {},
    const std::vector<std::pair<std::string, std::string>>& router_keys = {});

// Splits --router KEY=VALUE settings. KEY is a plain `router` key (letters,
// digits, underscores) or SECTION.KEY, one key of a router section
// (residency.max_wait_s), other than the ones the bench writes itself
// (session_resident_window_s, slo); VALUE is non-empty YAML on one line (a
// scalar, or a flow map or list). kvroute's own config loader judges the key
// and the value when it starts.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseRouterKeys(
    const std::vector<std::string>& settings);

}  // namespace kvroute::bench
