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

// How the agents behave as clients, apart from what their sessions hold: a preset rebuilt at
// another seed (the sweep's agentic-long) carries these over unchanged.
struct AgenticClientOptions {
  // false: requests carry no session id (no X-Session-Id header, no metadata.user_id), as a
  // client that sends none; the router then has only the prompts to go by.
  bool send_session_ids = true;
  // > 0: open loop. Turn k+1 is sent open_loop_turn_s + turn k's tool time after turn k was
  // sent, whatever became of turn k (a replay of recorded sessions at their recorded times),
  // and the conversation carries each turn's planned answer (AgenticPlannedAnswer) instead of
  // the generated one, so every configuration receives the same prompts. 0: closed loop, a
  // turn follows its predecessor's answer and tool time, and a turn that fails ends its job.
  double open_loop_turn_s = 0;
  bool open_loop() const { return open_loop_turn_s > 0; }
};

// One line for reports: "session ids sent, closed loop" or "no session ids, open loop:
// turn k+1 sent 12 s + tool time after turn k".
std::string AgenticClientDescription(const AgenticClientOptions& client);

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

  // Per-job and per-turn variation (all off by default; seeded per job and turn):
  // turns uniform in [turns, turns_max]; tool outputs in [tool_tokens_min, tool_tokens_max],
  // log-uniform with a square on the exponent so small outputs dominate (replaces
  // tool_tokens when tool_tokens_max > 0); answers uniform in [completion_tokens,
  // completion_tokens_max]; tool time uniform in [tool_time_s, tool_time_max_s], or, when
  // tool_time_p99_s > 0, log-normal with median tool_time_s and 99th percentile
  // tool_time_p99_s (tool_time_max_s unused): published agent traces have a heavy tail of
  // long pauses, the turns whose KV leaves the GPU before they come back.
  int turns_max = 0;
  int64_t tool_tokens_min = 0;
  int64_t tool_tokens_max = 0;
  int64_t completion_tokens_max = 0;
  double tool_time_max_s = 0;
  double tool_time_p99_s = 0;
  // A job ends before a turn whose planned prompt would exceed this (0: no limit), as a
  // coding agent stops or compacts when its context fills up.
  int64_t max_context_tokens = 0;
  // Label for reports ("agentic-long"); empty for hand-set options.
  std::string preset = {};
  // The agentic-long preset's inputs (AgenticLongPreset; 0 for hand-set options), kept so a
  // sweep can rebuild the preset at each seed: the job count follows that seed's contexts.
  struct LongPresetInputs {
    int64_t fleet_kv_tokens = 0;
    double working_set_ratio = 0;
    double arrival_window_s = 0;
    // The agent's tool time per turn, uniform in [tool_time_s, tool_time_max_s] or
    // log-normal (tool_time_p99_s > 0), as the fields of the same names above.
    double tool_time_s = 2;
    double tool_time_max_s = 6;
    double tool_time_p99_s = 0;
  };
  LongPresetInputs long_preset = {};
  AgenticClientOptions client = {};
};

// The `agentic-long` preset: coding-agent sessions under KV memory pressure.
//   shared system+tools prefix 14,000 tokens; repository context 10K-80K per session;
//   20-40 turns; tool outputs 0.5K-8K (median ~1K); answers 100-800; tool time uniform in
//   2-6 s unless given, or log-normal with median tool_time_s and 99th percentile
//   tool_time_p99_s when that is positive (a tool time changes when a session returns, not
//   its contexts);
//   contexts capped at 131,072 tokens.
// Sizing rule: the sessions all arrive within `arrival_window_s` (much shorter than a
// session's life, ~8 modelled minutes), so they are live together and the working set is the
// sum of their contexts. With C = the planned mean context of a session over its turns,
// jobs = ceil(working_set_ratio x fleet_kv_tokens / C); PlanCacheBounds reports the
// resulting peak ratio.
AgenticOptions AgenticLongPreset(int64_t fleet_kv_tokens, double working_set_ratio,
                                 double arrival_window_s, uint64_t seed, double tool_time_s = 2,
                                 double tool_time_max_s = 6, double tool_time_p99_s = 0);
// The planned mean context (prompt tokens averaged over a session's turns), over sessions.
double AgenticMeanSessionContext(const AgenticOptions& options, int64_t sample_jobs = 400);

struct AgenticJob {
  int64_t id = 0;
  double arrival_s = 0;   // offset from the start of the run, in workload time
  std::string session_id;  // sent as X-Session-Id; empty: none (client.send_session_ids off)
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
// Per-job and per-turn sizes (equal to the fixed options when variation is off).
int64_t AgenticToolTokens(const AgenticOptions& options, int64_t job_id, int turn);
int AgenticTurns(const AgenticOptions& options, int64_t job_id);
int64_t AgenticCompletionTokens(const AgenticOptions& options, int64_t job_id, int turn);
double AgenticToolTime(const AgenticOptions& options, int64_t job_id, int turn);
// "2-6 s" or "log-normal, median 5.2 s, p99 81.4 s", for reports.
std::string AgenticToolTimeDescription(const AgenticOptions& options);

// One planned request of an agentic job: its prompt (system + task + earlier answers and tool
// outputs, without chat-template tokens) and answer sizes. Turns stop at AgenticTurns or
// before max_context_tokens would be exceeded.
struct PlannedTurn {
  int64_t job = 0;
  int turn = 0;  // 1-based
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};
std::vector<PlannedTurn> PlanAgenticTurns(const AgenticOptions& options, int64_t job_id);

// Open-loop send times of a job's planned turns, in workload seconds from the start of the
// run: turn 1 at the job's arrival, turn k+1 at turn k's + client.open_loop_turn_s + turn k's
// tool time. One entry per PlanAgenticTurns entry.
std::vector<double> AgenticOpenLoopSendTimes(const AgenticOptions& options, const AgenticJob& job);
// The assistant message an open-loop conversation carries after turn `turn`: exactly
// AgenticCompletionTokens(options, job_id, turn) tokens of synthetic text (4 bytes a token,
// text.h), unique per (seed, job, turn).
std::string AgenticPlannedAnswer(const AgenticOptions& options, int64_t job_id, int turn);

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

// ---------------------------------------------------------------------------------------------
// Cache bounds: what an infinite prefix cache, and one pooled LRU cache holding the whole
// fleet's KV, would serve. Both are replayed in arrival order at KV-block granularity.

// One request as the bounds see it: its prompt is the first prompt_tokens of token stream
// `stream` (an agentic job's conversation; trace requests use `blocks` instead), whose first
// shared_prefix_tokens are common to every stream; its answer's completion_tokens follow the
// prompt in the stream and are cached too.
struct BoundRequest {
  double arrival_s = 0;
  int64_t stream = 0;
  int64_t shared_prefix_tokens = 0;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  // Trace requests: explicit block ids of block_tokens tokens each (the last may be partial).
  std::vector<int64_t> blocks;
  int64_t block_tokens = 0;
};

struct CacheBounds {
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t infinite_hit_tokens = 0;
  int64_t pooled_lru_hit_tokens = 0;
  int64_t pooled_capacity_tokens = 0;
  double infinite_hit_ratio() const;
  double pooled_lru_hit_ratio() const;
};

// Replays `requests` sorted by arrival (ties keep their order). A hit is the longest cached
// prefix of whole blocks, at most (prompt - 1) tokens (the engine recomputes the last token);
// then the prompt's and answer's full blocks are touched tail first, so a prefix is evicted
// after its continuation, as vLLM frees blocks. The pooled cache holds capacity_tokens /
// block_tokens blocks (0: only the infinite bound is computed).
CacheBounds ComputeCacheBounds(std::vector<BoundRequest> requests, int64_t capacity_tokens,
                               int64_t block_tokens = 16);

// Bounds of an agentic plan, with turn k+1 arriving nominal_turn_s + tool time after turn k
// (the plan has no latencies), and its peak working set: the largest sum of live sessions'
// contexts at any arrival, in tokens.
struct AgenticPlanStats {
  int64_t jobs = 0;
  int64_t requests = 0;
  double mean_context_tokens = 0;  // prompt tokens per request
  int64_t max_context_tokens = 0;
  double mean_turns = 0;
  int64_t peak_working_set_tokens = 0;
  CacheBounds bounds;
};
AgenticPlanStats PlanAgenticStats(const AgenticOptions& options, int64_t fleet_kv_tokens,
                                  double nominal_turn_s = 12.0, int64_t block_tokens = 16);

}  // namespace kvroute::bench
