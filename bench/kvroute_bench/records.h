// What one benchmark run measured: per request, per agentic job, per instance sample.
//
// Times are wall-clock seconds measured by the load generator, relative to the run's start;
// RunResult::time_scale says how many wall seconds one modelled second took (the simulated
// fleet's --time-scale), and summaries report modelled seconds (wall / time_scale).
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "bench/kvroute_bench/log_histogram.h"

namespace kvroute::bench {

// What became of a request. Shed: the target answered HTTP 429 before any stream (admission
// control turned it away, with Retry-After). Failed: any other error once the request was
// sent (another non-2xx status, a refused connection, a broken stream, an SSE error event, an
// upstream timeout the target reports). Gave up: the client abandoned it, its own timeout
// (--client-timeout, or the --request-timeout cap) having fired, or the run ending first.
enum class RequestOutcome { kOk, kShed, kFailed, kGaveUp };

inline std::string_view OutcomeName(RequestOutcome o) {
  switch (o) {
    case RequestOutcome::kOk:
      return "ok";
    case RequestOutcome::kShed:
      return "shed";
    case RequestOutcome::kFailed:
      return "failed";
    case RequestOutcome::kGaveUp:
      return "gave_up";
  }
  return "failed";
}

// The outcome of a request that did not succeed, from its HTTP status (0: none) and whether
// the client's own timeout ended it.
inline RequestOutcome FailureOutcome(int http_status, bool client_gave_up) {
  if (http_status == 429) return RequestOutcome::kShed;
  if (client_gave_up) return RequestOutcome::kGaveUp;
  return RequestOutcome::kFailed;
}

struct RequestRecord {
  int64_t job = -1;  // agentic job id, -1 for trace requests
  int turn = 0;      // 1-based agentic turn
  int64_t trace_index = -1;
  std::string request_id;  // X-Request-Id
  std::string klass;       // X-Kvroute-Class, empty when the target does not send it
  std::string backend;     // X-Kvroute-Backend ("gpu3" or "gpu1->gpu3")
  int http_status = 0;     // 0: no response
  std::string error;       // empty on success
  // What an unsuccessful request met (read only when `error` is set; a record given only an
  // error reads as failed).
  RequestOutcome failure = RequestOutcome::kFailed;
  // A shed request's Retry-After, wall seconds as the target sent them (-1: none).
  double retry_after_s = -1;
  double t_start = 0;      // request sent
  double ttft = -1;        // first content token
  double tpot = -1;        // mean time per output token after the first
  double e2e = -1;
  int64_t prompt_tokens = -1;
  int64_t cached_tokens = -1;
  int64_t completion_tokens = -1;
  // Prompt tokens an infinite prefix cache would have served (-1: unknown).
  int64_t bound_cached_tokens = -1;
  // From kvroute's request log when available (ablations): the router's estimate of cached
  // tokens, and for offloaded requests the prefill leg and KV transfer times (wall seconds).
  int64_t cached_tokens_est = -1;
  double prefill_leg_s = -1;
  double transfer_s = -1;
  // The router's predicted time to first token for its decision (modes with a time model:
  // v1_cost, v2), scaled to wall seconds like the other times; -1 when it made none.
  double predicted_ttft_s = -1;
  // The largest gap between two consecutive streamed chunks carrying generated text, and how
  // many such gaps the stream had (0 with fewer than two chunks; max_gap -1 then).
  double max_gap = -1;
  int64_t gaps = 0;
  // The request's own compute floor: what the fleet's profile says one idle instance needs
  // to prefill its uncached tokens (prompt - engine cached), scaled to wall seconds like the
  // other times; -1 when the run has no profile (RunOptions::prefill_floor).
  double compute_floor_s = -1;
  // With several router replicas (RunOptions::replicas): the replica that answered (0-based;
  // -1: one target), and how many replicas refused or dropped it first.
  int replica = -1;
  int failovers = 0;
  // With a cluster store, from the answering replica's request log: its residency
  // admission across replicas ("resident", "admitted", "waited", "forced", "unavailable"; empty:
  // none asked), the tokens it reserved, its instance's reserved tokens after it (every replica's)
  // and the fill.
  std::string cluster_admission;
  int64_t cluster_footprint_tokens = -1;
  int64_t cluster_reserved_tokens = -1;
  int64_t cluster_fill_tokens = -1;

  bool ok() const { return error.empty(); }
  RequestOutcome outcome() const { return ok() ? RequestOutcome::kOk : failure; }
  bool offloaded() const { return backend.find("->") != std::string::npos; }
};

struct JobRecord {
  int64_t job = 0;
  double t_arrival = 0;
  double t_done = -1;
  bool ok = false;
  std::vector<double> turn_e2e;  // per turn, seconds; -1 for a failed turn
  // The turns the workload planned for the job (0: unknown). A closed-loop job whose turn
  // failed past the client's retries sends no more: those turns are in neither turn_e2e nor
  // the requests.
  int64_t planned_turns = 0;

  // Arrival to the last turn's end, in the run's wall seconds, when the job completed (every
  // turn succeeded); -1 otherwise.
  double Seconds() const { return ok && t_done >= t_arrival ? t_done - t_arrival : -1; }
};

struct InstanceSample {
  double t = 0;
  std::string instance;
  double kv_usage = -1;  // 0..1
  double running = -1;
  double waiting = -1;
  double gpu_busy = -1;  // 0..1 (simulator gauge or DCGM utilisation)
  // The engine's prompt tokens by source so far (counters; -1: not published):
  // vllm:prompt_tokens_by_source_total{source} and kvroute-sim's pool share of
  // the external ones (kvroute_sim_pool_prompt_tokens_loaded_total).
  double prompt_local_compute = -1;
  double prompt_local_cache_hit = -1;
  double prompt_external = -1;
  double prompt_pool_loaded = -1;
  // kvroute-sim: how far its virtual clock ran behind the wall clock (wall seconds, the
  // largest over its engines; -1: not published): now (kvroute_sim_scheduler_lag_seconds)
  // and the largest since it started (kvroute_sim_scheduler_lag_max_seconds).
  double sim_lag_s = -1;
  double sim_lag_max_s = -1;
};

// Which class a request's TTFT SLO is taken from (--slo-class).
enum class SloClassSource {
  // The router's (X-Kvroute-Class): what it decided, with its own estimate of the cache.
  kRouter,
  // The workload's: the class kvroute's default thresholds give the request's prompt when
  // every earlier prompt's prefix is cached (its infinite-cache bound), the same whichever
  // router served it and whether or not the target sends a class. A request the engine did
  // not count (shed or failed before its usage) keeps the router's class.
  kWorkload,
};

// The service-level objectives goodput is measured against, in modelled seconds: a request
// meets them when it succeeded, its TTFT is within its class's target and its TPOT (when it
// generated more than one token) within tpot_s. The defaults are an operator's of coding
// agents (bench/kvroute_bench/README.md, "Measurements and reports").
struct SloTargets {
  double ttft_warm_s = 2;
  double ttft_medium_s = 10;
  double ttft_heavy_s = 30;
  double tpot_s = 0.1;
  SloClassSource class_source = SloClassSource::kRouter;

  bool operator==(const SloTargets&) const = default;
};

struct RunResult {
  std::string name;  // configuration label, e.g. "v2-T20k"
  std::string mode;
  int64_t heavy_threshold = 0;
  std::string target;
  std::string workload;  // "agentic" or "trace"
  double time_scale = 1.0;
  double duration_s = 0;  // wall seconds from first arrival to last completion
  double bound_hit_ratio = -1;  // infinite-cache prefix-hit bound of the workload
  // One pooled LRU cache holding the fleet's whole KV (fleet_kv_tokens), replayed in arrival
  // order at block granularity; -1 when the fleet's KV is unknown.
  double pooled_bound_hit_ratio = -1;
  int64_t fleet_kv_tokens = 0;
  int64_t dropped = 0;  // arrivals dropped because max in-flight was reached
  int64_t dropped_turns = 0;  // the turns the dropped agentic jobs planned
  // How the client behaved (the agentic workload's client options and RunOptions): sent
  // session ids, open-loop turn time (workload seconds, 0: closed loop), client timeout
  // (modelled seconds, 0: none).
  bool session_ids = true;
  double open_loop_turn_s = 0;
  double client_timeout_s = 0;
  int shed_retries = 0;  // RunOptions::shed_retries
  SloTargets slo;
  // KV bytes per token of the fleet's model (0: unknown), for the bytes offloads moved.
  double kv_bytes_per_token = 0;
  // Every inter-chunk gap (RequestRecord::max_gap's population) of the successful streams,
  // wall seconds, by class ("unlabelled" when the target sent none): bounded memory whatever
  // the run's length.
  std::map<std::string, LogHistogram> itl_by_class;
  std::vector<RequestRecord> requests;
  std::vector<JobRecord> jobs;
  std::vector<InstanceSample> samples;
  // What kvroute had learned by the end of the run: its per-backend time factors as its
  // /metrics exports them (kvroute_prefill_time_factor, kvroute_host_reload_time_factor,
  // kvroute_pool_reload_time_factor), by metric, then backend. Scraped from the first router
  // replica that answers once the run has drained; empty for a target that exports none
  // (another router, an engine) and for the oracle reference.
  std::map<std::string, std::map<std::string, double>> learned_factors;
};

}  // namespace kvroute::bench
