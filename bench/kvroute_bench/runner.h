// Open-loop load generation against one OpenAI-compatible target, with fleet sampling and
// progress output.
//
// Arrivals follow the workload's plan on the wall clock (scaled by time_scale) whatever the
// target's speed: a slow system never slows the generator. An agentic job's later turns
// follow its earlier answers (closed loop; a failed, shed or abandoned turn ends the job), or
// with AgenticClientOptions::open_loop_turn_s their planned send times. Work in flight is bounded by
// max_inflight (arrivals beyond it are dropped and counted), every request has a timeout and
// the run ends at most drain_timeout after the last arrival.
//
// Usage:
//   WorkloadSpec w{.kind = WorkloadKind::kAgentic, .agentic = {...}};
//   RunOptions o{.name = "baseline", .target = *ParseHttpUrl("http://127.0.0.1:8000")};
//   absl::StatusOr<RunResult> r = RunWorkload(o, w);
//
// Thread-safety: RunWorkload is reentrant; it runs its own io_context on the calling thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/kvroute_bench/http_client.h"
#include "bench/kvroute_bench/metrics_sampler.h"
#include "bench/kvroute_bench/oracle_reference.h"
#include "bench/kvroute_bench/records.h"
#include "bench/kvroute_bench/workload.h"

namespace kvroute::bench {

enum class WorkloadKind { kAgentic, kTrace };

struct WorkloadSpec {
  WorkloadKind kind = WorkloadKind::kAgentic;
  AgenticOptions agentic;
  TraceOptions trace;
  // Filled by PrepareWorkload for traces, shared by every run of an ablation.
  std::shared_ptr<const std::vector<TraceRecord>> trace_records;
};

// Loads the trace (if any) once; idempotent.
absl::Status PrepareWorkload(WorkloadSpec& spec);
std::string_view WorkloadName(WorkloadKind kind);

struct RunOptions {
  std::string name = "run";  // label in reports and progress lines
  std::string mode;          // for reports only
  int64_t heavy_threshold = 0;
  Endpoint target;
  // Several router replicas behind a plain balancer: requests go to them round robin (then
  // `target` is unused), and one whose connection is refused, or reset or closed before any
  // response header, is sent again to the next replica, as client SDKs retry a connection
  // error; each replica is tried at most once per request.
  std::vector<Endpoint> replicas;
  std::string model;  // empty: first id from GET /v1/models, else "default"
  // The API requests speak. kMessages sends the agentic jobs as a coding agent does (system
  // block, tool definitions, session in metadata.user_id, no X-Session-Id header).
  ChatApi api = ChatApi::kChatCompletions;
  std::vector<NamedEndpoint> instances;  // scraped for /metrics
  Endpoint dcgm;                         // DCGM exporter (empty host: none)
  double time_scale = 1.0;  // workload seconds are multiplied by this on the wall clock
  double sample_interval_s = 2.0;
  double progress_interval_s = 5.0;
  // The hard cap on a request, wall seconds: the client closes the connection and counts the
  // request as given up (RequestOutcome::kGaveUp).
  double request_timeout_s = 600;
  // The agents' own patience, modelled seconds (x time_scale on the wall clock; 0: off): a
  // request not finished this long after it was sent is abandoned and counted as given up.
  double client_timeout_s = 0;
  // Closed-loop agents answered 429 (shed) send the turn again after the wait it advises
  // (retry-after-ms, else Retry-After: ChatOutcome::retry_after_s), up to
  // this many times, as the OpenAI and Anthropic SDKs do (max_retries, 2 by default there);
  // the turn's TTFT and E2E then count from its first attempt. 0: a shed ends the session.
  int shed_retries = 0;
  double drain_timeout_s = 600;
  int64_t max_inflight = 4096;  // jobs or requests in flight
  // The fleet's KV in tokens for the pooled-LRU bound; 0: the sum over `instances` of
  // vllm:cache_config_info's num_gpu_blocks x block_size, scraped at the start.
  int64_t fleet_kv_tokens = 0;
  // When set, requests bypass `target` (used only for GET /v1/models): the oracle reference
  // routes each one to an instance of its simulated fleet (oracle_reference.h).
  std::shared_ptr<OracleReference> reference;
  // The SLOs goodput is measured against (copied into the result).
  SloTargets slo;
  // The fleet's profile when known (the embedded simulated fleet): a request's compute floor
  // in modelled seconds from its prompt and engine-cached tokens (compute_floor.h), and the
  // model's KV bytes per token. Empty / 0: unknown, and the reports say so.
  std::function<double(int64_t prompt_tokens, int64_t cached_tokens)> prefill_floor;
  double kv_bytes_per_token = 0;
  // Receives progress lines; default prints to stderr.
  std::function<void(std::string_view)> progress;
};

absl::StatusOr<RunResult> RunWorkload(const RunOptions& options, const WorkloadSpec& workload);

// How the client behaves, for reports' setup lines: the agentic client options, the client
// timeout and the retries after a shed.
std::string RunClientDescription(const AgenticClientOptions& client, const RunOptions& run);

// Fills run.bound_hit_ratio (infinite cache) and run.pooled_bound_hit_ratio (one LRU cache of
// run.fleet_kv_tokens) from the requests as they were sent (t_start order, the engine's
// prompt and completion token counts; open-loop agentic runs go on with planned answers, so
// their completions are not reused), at 16-token blocks for agentic runs and the trace's
// blocks for traces. Leaves the pooled bound at -1 when the fleet's KV is unknown.
void ComputeRunBounds(const WorkloadSpec& workload, RunResult& run);

}  // namespace kvroute::bench
