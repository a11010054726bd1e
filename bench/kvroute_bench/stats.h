// Percentiles and run summaries (overall and per request class).
//
// Usage:
//   RunSummary s = Summarize(result);
//   double p99 = Percentile({1, 2, 3}, 99);
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/kvroute_bench/instance_load.h"
#include "bench/kvroute_bench/records.h"
#include "bench/kvroute_bench/session_turns.h"

namespace kvroute::bench {

// Linear interpolation between closest ranks (numpy's default); p in [0, 100]. NaN if empty.
double Percentile(std::vector<double> values, double p);

struct Distribution {
  int64_t n = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // NaN when n == 0
};
Distribution Describe(const std::vector<double>& values);

// The router's cache-hit estimate against the engine's cached_tokens, as fractions of the
// prompt: error = (estimate - actual) / prompt_tokens, so a positive error promised a hit the
// engine did not have.
struct EstimateErrorSummary {
  int64_t n = 0;
  double median_abs = -1;   // median |error|
  double mean_abs = -1;
  double mean_signed = -1;  // meaningful only when n > 0 (may be negative)
  double p90_abs = -1;
  double over_5pct = -1;    // share of requests with error > +5 % (over-estimates)
  double under_5pct = -1;   // share with error < -5 %
  // Percentiles of the signed error (NaN when n == 0).
  double p1 = 0, p10 = 0, p50 = 0, p90 = 0, p99 = 0;
};

// The signed cache-estimate error of one request, (cached_tokens_est - cached_tokens) /
// prompt_tokens, for a successful co-located request with both counts; nullopt otherwise
// (an offload's cached_tokens count KV pulled from its prefill instance, not a hit).
std::optional<double> SignedEstimateError(const RequestRecord& r);

// Signed estimate errors of a run's requests by class ("unlabelled" when the target sent
// none), every class in one map; the summary's per-class figures use exactly these.
std::map<std::string, std::vector<double>> EstimateErrorsByClass(const RunResult& run);

// A stream "stalls" when two consecutive text chunks are further apart than this (modelled
// seconds).
inline constexpr double kStreamStallS = 0.5;

struct ClassSummary {
  std::string klass;  // "ALL", "WARM", "MEDIUM", "HEAVY", or "unlabelled"
  int64_t requests = 0;          // successful ones
  Distribution ttft, tpot, e2e;  // modelled seconds
  EstimateErrorSummary estimate;
  // Inter-token latency: every gap between consecutive streamed text chunks of the class's
  // successful requests (RunResult::itl_by_class, within 1.2 %), modelled seconds.
  int64_t itl_gaps = 0;
  double itl_p50 = -1, itl_p99 = -1, itl_max = -1;  // -1: no gaps
  // The router's TTFT prediction against the realised TTFT, over successful requests with a
  // prediction: (predicted - realised) / realised. -1 (n 0): no predictions.
  int64_t predicted = 0;
  double prediction_abs_error_p50 = -1, prediction_abs_error_p90 = -1;
  double prediction_signed_error_p50 = 0;
  double prediction_abs_error_s_p50 = -1;  // modelled seconds
  // Successful requests with at least one gap, and the share of them with a gap over
  // kStreamStallS (-1: none).
  int64_t streams = 0;
  double stalled_stream_share = -1;
  // Goodput: slo_met of slo_requests met their class TTFT SLO and the TPOT SLO. The
  // denominator counts the class's unsuccessful requests too (shed, failed, given up: all
  // misses); for ALL it also counts dropped arrivals and unsuccessful requests without a
  // class. -1: no request had a class with a TTFT SLO.
  int64_t slo_requests = 0;
  int64_t slo_met = 0;
  double goodput = -1;
  // The successful requests that missed, by why: missed_floor, the compute floor alone
  // (RequestRecord::compute_floor_s: the uncached tokens it found, prefilled on an idle
  // instance) is past the TTFT SLO, so only a larger cache hit could have met it;
  // missed_wait, the floor is within it (or unknown) and the TTFT is not: queueing,
  // admission, a shed turn's retries, steps shared with other requests; missed_tpot, the
  // TTFT is within it and the TPOT is not.
  int64_t missed_floor = 0, missed_wait = 0, missed_tpot = 0;
};

// A TTFT split into its compute floor (RequestRecord::compute_floor_s: the uncached tokens it
// found, prefilled on an idle instance of the fleet's profile) and the rest (queueing,
// admission, steps shared with other requests), over successful co-located requests with a
// floor, modelled seconds. Offloaded requests are left out: their prefill ran on another
// instance, whose cached tokens the records do not carry. n == 0 when the run had no profile.
// The floor's percentiles against the TTFT's say how much of a tail any placement or
// admission could remove: none of the floor, at most the rest.
struct TtftSplit {
  Distribution ttft, floor, queue;
  double queue_share = -1;  // sum of the rest / sum of TTFT over those requests
};

struct RunSummary {
  int64_t requests = 0;  // sent
  int64_t errors = 0;    // shed + failed + gave_up
  // Outcomes (records.h RequestOutcome): served (succeeded), shed (HTTP 429 before any
  // stream), failed after the target accepted the request, given up by the client.
  int64_t served = 0;
  int64_t shed = 0;
  int64_t failed = 0;
  int64_t gave_up = 0;
  double shed_share = 0;  // shed / requests
  int64_t dropped = 0;
  double error_rate = 0;  // (errors + dropped) / (requests + dropped)
  int64_t offloads = 0;
  double throughput_rps = 0;  // completed requests per modelled second
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  // Cached tokens of offloaded requests are KV pulled from the prefill instance (vLLM counts
  // connector loads as cached): they are reported as transferred_tokens, not as hits.
  int64_t transferred_tokens = 0;
  double hit_ratio = 0;         // cached / prompt over successful requests
  double bound_hit_ratio = -1;  // infinite-cache bound, -1 if unknown
  double pooled_bound_hit_ratio = -1;  // one LRU cache of the fleet's KV, -1 if unknown
  // hit_ratio over the pooled-LRU bound; -1 when the bound is unknown (or 0).
  double hit_of_pooled() const {
    return pooled_bound_hit_ratio > 0 ? hit_ratio / pooled_bound_hit_ratio : -1;
  }
  int64_t fleet_kv_tokens = 0;
  // Offloaded requests (kvroute request log): prefill leg and KV transfer, modelled seconds.
  Distribution offload_prefill, offload_transfer;
  // Mean |estimated - actual cached tokens| / prompt tokens (-1: no estimates).
  double cache_estimate_error = -1;
  double offload_rate = 0;              // offloads / requests
  int64_t offloaded_prompt_tokens = 0;  // prompt tokens of successful offloaded requests
  double transferred_bytes = -1;        // transferred_tokens x KV bytes per token; -1: unknown
  // Goodput and the SLOs it was measured against.
  SloTargets slo;
  double goodput_rps = -1;  // requests meeting their SLOs per modelled second
  // TTFT split over successful co-located requests with a compute floor (TtftSplit): every
  // class, and the HEAVY class alone.
  TtftSplit floor_split, heavy_split;
  std::vector<ClassSummary> classes;  // "ALL" first, then WARM, MEDIUM, HEAVY, others
  // Agentic jobs.
  int64_t jobs = 0;
  int64_t jobs_ok = 0;
  // The turns the agentic jobs planned (dropped jobs' included), those never sent (a job
  // ended by a turn that failed past the client's retries, or dropped), and the share of
  // the planned turns that met their SLOs: goodput over the work the clients wanted done,
  // so a configuration that ends sessions early is charged for the turns they never sent
  // (-1: no agentic jobs, or a job whose plan is unknown).
  int64_t turns_planned = 0;
  int64_t turns_unsent = 0;
  double planned_goodput = -1;
  Distribution job_completion;       // modelled seconds, completed jobs
  std::vector<double> turn_mean_e2e;  // index t-1: mean E2E of turn t
  std::vector<double> turn_p50_e2e;
  double t8_over_t1 = -1;  // last turn's mean E2E / first turn's
  // Instance samples.
  double mean_kv_usage = -1;
  double max_kv_usage = -1;
  double mean_gpu_busy = -1;
  // A simulated fleet's lag (InstanceSample::sim_lag_s), modelled seconds: the 99th
  // percentile over the instances' samples, and the largest any instance reported (-1: no
  // instance published it). A request's modelled times stretch by the lag of its instance,
  // so a lag that is a sizeable share of the TTFTs says the host was too slow for the time
  // scale.
  double sim_lag_p99 = -1;
  double max_sim_lag = -1;
  // Where requests queued, over the instance samples that read both the KV usage and the
  // waiting gauge: the share with a request waiting, and the share with a request waiting
  // while at least kKvFullUsage of the KV was in use (-1: no such sample). A request that
  // waits with the pool that full waits for blocks that running requests hold; one that
  // waits with room left waits for the engine's token budget, behind other requests'
  // prefills (or for a reload). Memory pressure that evicts prefixes shows in the second
  // kind, as recomputes (prompt tokens by source): the split tells whether requests wait
  // for memory itself, not whether memory costs compute.
  double queued_share = -1;
  double queued_kv_full_share = -1;
  // Agent sessions' served turns: first, at home, moved (session_turns.h).
  SessionTurns session_turns;
  // Each instance's sessions, requests and gauges (instance_load.h).
  std::vector<InstanceLoad> instances;
};

// The KV usage (vllm:kv_cache_usage_perc, blocks held by requests) at which a waiting
// request counts as waiting for memory: 5 % of an H20 instance's 225,600-token pool is
// 11K tokens, less than a returning agent turn's reload of its prefix.
inline constexpr double kKvFullUsage = 0.95;

RunSummary Summarize(const RunResult& run);

// The TTFT SLO of a class (modelled seconds), -1 for a class without one.
double TtftSlo(const SloTargets& slo, std::string_view klass);
// The class `r`'s SLOs are measured in (slo.class_source): the router's class, or the
// workload's when `r` has prompt tokens and an infinite-cache bound; "" when it has none.
// Summaries group requests by it.
std::string SloClass(const RequestRecord& r, const SloTargets& slo);
// Whether goodput counts `r`: every request of a class with a TTFT SLO, and every
// unsuccessful request (a miss whatever its class).
bool CountsForGoodput(const RequestRecord& r, const SloTargets& slo);
// Whether `r` met its SLOs: it succeeded, its class has a TTFT SLO and its TTFT is within
// it, and its TPOT (when it has one) is within the TPOT SLO. `time_scale`: wall seconds
// per modelled second (RunResult::time_scale).
bool MeetsSlos(const RequestRecord& r, const SloTargets& slo, double time_scale);
// Whether `r`'s compute floor alone (RequestRecord::compute_floor_s) is past `ttft_slo`,
// modelled seconds: a miss no queue caused, which no placement but a warmer one avoids.
bool MissedOnFloor(const RequestRecord& r, double ttft_slo, double time_scale);

// Parses --slo-ttft "warm=S,medium=S,heavy=S" (any subset, positive seconds) over `base`.
absl::StatusOr<SloTargets> ParseTtftSlos(const std::string& spec, SloTargets base);
// --slo-class's and report.json's names of a class source: "router", "workload".
std::string_view SloClassSourceName(SloClassSource source);
absl::StatusOr<SloClassSource> ParseSloClassSource(std::string_view name);

// Summary of signed estimate errors (fractions of the prompt).
EstimateErrorSummary DescribeEstimateErrors(const std::vector<double>& signed_errors);

}  // namespace kvroute::bench
