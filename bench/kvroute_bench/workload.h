// Workload generators for kvroute-bench: multi-turn agentic jobs and trace replay.
//
// Both are pure plans: given options and a seed they produce the same arrivals and the same
// prompt text on every run, so one workload can be replayed against every configuration of an
// ablation. The runner (runner.h) turns plans into HTTP requests.
//
// Usage:
//   AgenticOptions opts{.jobs_per_second = 0.5, .duration_s = 60, .seed = 7};
//   std::vector<AgenticJob> jobs = PlanAgenticJobs(opts);
//   std::string tool = AgenticToolOutput(opts, jobs[0].id, /*turn=*/1);
//
// Thread-safety: all functions are pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvroute::bench {

// ---------------------------------------------------------------------------------------------
// Agentic jobs: a shared system prompt, a per-job task, `turns` chat turns; after every
// non-final turn the agent "runs a tool" for tool_time_s and appends its output.

struct AgenticOptions {
  double jobs_per_second = 0.5;
  double duration_s = 60;  // arrivals happen in [0, duration_s)
  int turns = 8;
  // Target sizes of the tool outputs appended after turns 1..turns-1 (cycled if shorter).
  std::vector<int64_t> tool_tokens = {1640, 1510, 2455, 1335, 2730, 1930, 775};
  int64_t system_tokens = 2000;  // shared by every job
  int64_t task_tokens = 400;     // unique per job
  // When > task_tokens, each job's task size is uniform in [task_tokens, task_tokens_max]
  // (seeded per job): large tasks model jobs that start from a big unique context.
  int64_t task_tokens_max = 0;
  double tool_time_s = 0.5;
  int64_t completion_tokens = 20;  // per turn, enforced with min_tokens + ignore_eos
  int64_t max_jobs = 100000;       // bound on the plan size whatever the rate
  uint64_t seed = 1;
};

struct AgenticJob {
  int64_t id = 0;
  double arrival_s = 0;   // offset from the start of the run, in workload time
  std::string session_id;  // sent as X-Session-Id
};

// Poisson arrivals at jobs_per_second over [0, duration_s), at most max_jobs.
std::vector<AgenticJob> PlanAgenticJobs(const AgenticOptions& options);

std::string AgenticSystemPrompt(const AgenticOptions& options);
std::string AgenticTask(const AgenticOptions& options, int64_t job_id);
int64_t AgenticTaskTokens(const AgenticOptions& options, int64_t job_id);
// Tool output appended after turn `turn` (1-based, turn < options.turns); unique per
// (seed, job, turn).
std::string AgenticToolOutput(const AgenticOptions& options, int64_t job_id, int turn);
int64_t AgenticToolTokens(const AgenticOptions& options, int turn);

// ---------------------------------------------------------------------------------------------
// Trace replay (Mooncake FAST'25 format, see bench/traces/README.md).

struct TraceRecord {
  int64_t index = 0;  // line number among the kept records
  double timestamp_ms = 0;
  int64_t input_length = 0;
  int64_t output_length = 0;
  std::vector<int64_t> hash_ids;
  int64_t block_size = 512;
  // Optional session structure (traces that carry chat_id/parent_chat_id/turn).
  std::optional<int64_t> chat_id;
  std::optional<int64_t> parent_chat_id;
  int turn = 0;
};

struct TraceOptions {
  std::string path;
  double speedup = 1.0;       // arrival at timestamp / speedup
  int64_t limit = 0;          // keep at most this many records (0: no limit)
  double window_start_s = 0;  // keep records with timestamp in [start, end) seconds
  double window_end_s = 0;    // 0: until the end
  int64_t block_size = 512;   // tokens per hash id unless a record says otherwise
  int64_t max_output_tokens = 0;  // cap on output_length (0: no cap)
  // Within a session, send a turn this long after its parent completes (negative: use the
  // timestamp gap / speedup).
  double think_time_s = -1;
  uint64_t seed = 0;  // text seed; the same hash id gives the same text for a given seed
};

// Parses JSONL; applies window and limit; timestamps are rebased so the first kept record
// arrives at 0.
absl::StatusOr<std::vector<TraceRecord>> LoadTrace(const TraceOptions& options);
absl::StatusOr<TraceRecord> ParseTraceLine(std::string_view line, int64_t default_block_size);

// The text of one hash-id block (block_size tokens); identical wherever the id appears.
std::string TraceBlockText(uint64_t seed, int64_t hash_id, int64_t block_size);
// The prompt of a record: its blocks' texts concatenated; the last block is cut to
// input_length, so it is a prefix of the full block's text.
std::string ExpandTracePrompt(const TraceRecord& record, uint64_t seed);

// Prompt tokens an infinite prefix cache would serve for each record, in order: the leading
// blocks whose hash ids were seen before (token-weighted; the last block may be partial).
std::vector<int64_t> InfiniteCacheHitTokens(const std::vector<TraceRecord>& records);
// Sum of the above over the sum of input lengths.
double InfiniteCacheHitRatio(const std::vector<TraceRecord>& records);

}  // namespace kvroute::bench
