#include "bench/kvroute_bench/workload.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <fstream>
#include <list>
#include <numbers>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/kvroute_bench/text.h"

namespace kvroute::bench {
namespace json = boost::json;

std::vector<AgenticJob> PlanAgenticJobs(const AgenticOptions& options) {
  std::vector<AgenticJob> jobs;
  if (options.jobs_per_second <= 0 || options.duration_s <= 0) return jobs;
  SplitMix64 rng(StreamSeed(options.seed, "agentic-arrivals", 0));
  double t = 0;
  for (int64_t id = 0; id < options.max_jobs; ++id) {
    // Exponential gaps; 1 - u lies in (0, 1], so the log is finite.
    t += -std::log(1.0 - rng.NextDouble()) / options.jobs_per_second;
    if (t >= options.duration_s) break;
    jobs.push_back({id, t,
                    options.client.send_session_ids ? absl::StrCat("job-", options.seed, "-", id)
                                                    : std::string()});
  }
  return jobs;
}

std::string AgenticSystemPrompt(const AgenticOptions& options) {
  return absl::StrCat("You are a coding agent. Tools are run for you.",
                      SyntheticText(StreamSeed(options.seed, "agentic-system", 0),
                                    options.system_tokens));
}

int64_t AgenticTaskTokens(const AgenticOptions& options, int64_t job_id) {
  if (options.task_tokens_max <= options.task_tokens) return options.task_tokens;
  const uint64_t span = static_cast<uint64_t>(options.task_tokens_max - options.task_tokens) + 1;
  return options.task_tokens +
         static_cast<int64_t>(StreamSeed(options.seed, "agentic-task-size", job_id) % span);
}

std::string AgenticTask(const AgenticOptions& options, int64_t job_id) {
  return absl::StrCat("Task ", job_id, ":",
                      SyntheticText(StreamSeed(options.seed, "agentic-task", job_id),
                                    AgenticTaskTokens(options, job_id)));
}

int64_t AgenticToolTokens(const AgenticOptions& options, int turn) {
  if (options.tool_tokens.empty() || turn < 1) return 0;
  return options.tool_tokens[static_cast<size_t>(turn - 1) % options.tool_tokens.size()];
}

int64_t AgenticToolTokens(const AgenticOptions& options, int64_t job_id, int turn) {
  if (options.tool_tokens_max <= 0) return AgenticToolTokens(options, turn);
  const double lo = static_cast<double>(std::max<int64_t>(1, options.tool_tokens_min));
  const double hi = std::max(lo, static_cast<double>(options.tool_tokens_max));
  SplitMix64 rng(StreamSeed(options.seed, "agentic-tool-size", job_id, turn));
  const double u = rng.NextDouble();
  return static_cast<int64_t>(std::llround(lo * std::pow(hi / lo, u * u)));
}

int AgenticTurns(const AgenticOptions& options, int64_t job_id) {
  if (options.turns_max <= options.turns) return options.turns;
  const uint64_t span = static_cast<uint64_t>(options.turns_max - options.turns) + 1;
  return options.turns +
         static_cast<int>(StreamSeed(options.seed, "agentic-turns", job_id) % span);
}

int64_t AgenticCompletionTokens(const AgenticOptions& options, int64_t job_id, int turn) {
  if (options.completion_tokens_max <= options.completion_tokens) {
    return options.completion_tokens;
  }
  const uint64_t span =
      static_cast<uint64_t>(options.completion_tokens_max - options.completion_tokens) + 1;
  return options.completion_tokens +
         static_cast<int64_t>(StreamSeed(options.seed, "agentic-answer", job_id, turn) % span);
}

namespace {

// --tool-time-lognormal set a 99th percentile above a positive median.
bool LogNormalToolTime(const AgenticOptions& options) {
  return options.tool_time_p99_s > options.tool_time_s && options.tool_time_s > 0;
}

}  // namespace

double AgenticToolTime(const AgenticOptions& options, int64_t job_id, int turn) {
  const bool log_normal = LogNormalToolTime(options);
  if (!log_normal && options.tool_time_max_s <= options.tool_time_s) return options.tool_time_s;
  SplitMix64 rng(StreamSeed(options.seed, "agentic-tool-time", job_id, turn));
  if (!log_normal) {
    return options.tool_time_s + rng.NextDouble() * (options.tool_time_max_s - options.tool_time_s);
  }
  // Box-Muller: a standard normal z from two uniforms, u1 in (0, 1] so its log is finite.
  const double u1 = 1.0 - rng.NextDouble();
  const double u2 = rng.NextDouble();
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  // The 99th percentile of the standard normal: sigma puts tool_time_p99_s there.
  constexpr double kZ99 = 2.3263478740408408;
  const double sigma = std::log(options.tool_time_p99_s / options.tool_time_s) / kZ99;
  return options.tool_time_s * std::exp(sigma * z);
}

std::string AgenticToolTimeDescription(const AgenticOptions& options) {
  if (LogNormalToolTime(options)) {
    return absl::StrFormat("log-normal, median %g s, p99 %g s", options.tool_time_s,
                           options.tool_time_p99_s);
  }
  if (options.tool_time_max_s > options.tool_time_s) {
    return absl::StrFormat("%g-%g s", options.tool_time_s, options.tool_time_max_s);
  }
  return absl::StrFormat("%g s", options.tool_time_s);
}

std::string AgenticToolOutput(const AgenticOptions& options, int64_t job_id, int turn) {
  return absl::StrCat("Tool output ", turn, ":",
                      SyntheticText(StreamSeed(options.seed, "agentic-tool", job_id, turn),
                                    AgenticToolTokens(options, job_id, turn)));
}

std::vector<PlannedTurn> PlanAgenticTurns(const AgenticOptions& options, int64_t job_id) {
  std::vector<PlannedTurn> turns;
  const int n = AgenticTurns(options, job_id);
  int64_t prompt = options.system_tokens + AgenticTaskTokens(options, job_id);
  for (int t = 1; t <= n; ++t) {
    if (t > 1 && options.max_context_tokens > 0 && prompt > options.max_context_tokens) break;
    const int64_t answer = AgenticCompletionTokens(options, job_id, t);
    turns.push_back({job_id, t, prompt, answer});
    prompt += answer + AgenticToolTokens(options, job_id, t);
  }
  return turns;
}

std::string AgenticClientDescription(const AgenticClientOptions& client) {
  return absl::StrCat(
      client.send_session_ids ? "session ids sent" : "no session ids",
      client.open_loop() ? absl::StrCat(", open loop: turn k+1 sent ", client.open_loop_turn_s,
                                        " s + tool time after turn k, planned answers")
                         : std::string(", closed loop"));
}

std::vector<double> AgenticOpenLoopSendTimes(const AgenticOptions& options,
                                             const AgenticJob& job) {
  std::vector<double> times;
  double t = job.arrival_s;
  for (const PlannedTurn& p : PlanAgenticTurns(options, job.id)) {
    times.push_back(t);
    t += options.client.open_loop_turn_s + AgenticToolTime(options, job.id, p.turn);
  }
  return times;
}

std::string AgenticPlannedAnswer(const AgenticOptions& options, int64_t job_id, int turn) {
  return SyntheticText(StreamSeed(options.seed, "agentic-planned-answer", job_id, turn),
                       AgenticCompletionTokens(options, job_id, turn));
}

double AgenticMeanSessionContext(const AgenticOptions& options, int64_t sample_jobs) {
  double sum = 0;
  int64_t n = 0;
  for (int64_t job = 0; job < sample_jobs; ++job) {
    const std::vector<PlannedTurn> turns = PlanAgenticTurns(options, job);
    if (turns.empty()) continue;
    double s = 0;
    for (const PlannedTurn& t : turns) s += static_cast<double>(t.prompt_tokens);
    sum += s / static_cast<double>(turns.size());
    ++n;
  }
  return n > 0 ? sum / static_cast<double>(n) : 0;
}

AgenticOptions AgenticLongPreset(int64_t fleet_kv_tokens, double working_set_ratio,
                                 double arrival_window_s, uint64_t seed, double tool_time_s,
                                 double tool_time_max_s, double tool_time_p99_s) {
  AgenticOptions a;
  a.preset = "agentic-long";
  a.long_preset.fleet_kv_tokens = fleet_kv_tokens;
  a.long_preset.working_set_ratio = working_set_ratio;
  a.long_preset.arrival_window_s = arrival_window_s;
  a.long_preset.tool_time_s = tool_time_s;
  a.long_preset.tool_time_max_s = tool_time_max_s;
  a.long_preset.tool_time_p99_s = tool_time_p99_s;
  a.seed = seed;
  a.system_tokens = 14000;
  a.task_tokens = 10000;
  a.task_tokens_max = 80000;
  a.turns = 20;
  a.turns_max = 40;
  a.tool_tokens_min = 500;
  a.tool_tokens_max = 8000;
  a.completion_tokens = 100;
  a.completion_tokens_max = 800;
  a.tool_time_s = tool_time_s;
  a.tool_time_max_s = tool_time_max_s;
  a.tool_time_p99_s = tool_time_p99_s;
  a.max_context_tokens = 131072;
  const double context = AgenticMeanSessionContext(a);
  const int64_t jobs = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(working_set_ratio *
                                        static_cast<double>(std::max<int64_t>(1, fleet_kv_tokens)) /
                                        std::max(1.0, context))));
  a.max_jobs = jobs;
  a.duration_s = std::max(1.0, arrival_window_s);
  // Poisson arrivals at 1.5x the rate that would just fit `jobs` in the window: max_jobs is
  // reached within the window with near certainty, so the job count follows the sizing rule.
  a.jobs_per_second = 1.5 * static_cast<double>(jobs) / a.duration_s;
  return a;
}

absl::StatusOr<TraceRecord> ParseTraceLine(std::string_view line, int64_t default_block_size) {
  boost::system::error_code ec;
  json::value v = json::parse(line, ec);
  if (ec || !v.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("not a JSON object: ", std::string(line.substr(0, 80))));
  }
  const json::object& o = v.as_object();
  auto number = [&](std::string_view key) -> std::optional<double> {
    const json::value* f = o.if_contains(key);
    if (f == nullptr || f->is_null()) return std::nullopt;
    if (f->is_int64()) return static_cast<double>(f->as_int64());
    if (f->is_uint64()) return static_cast<double>(f->as_uint64());
    if (f->is_double()) return f->as_double();
    return std::nullopt;
  };
  TraceRecord r;
  auto ts = number("timestamp");
  auto in = number("input_length");
  auto out = number("output_length");
  if (!ts || !in || !out) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing timestamp/input_length/output_length: ",
                     std::string(line.substr(0, 80))));
  }
  r.timestamp_ms = *ts;
  r.input_length = static_cast<int64_t>(*in);
  r.output_length = static_cast<int64_t>(*out);
  r.block_size = static_cast<int64_t>(number("block_size").value_or(default_block_size));
  if (r.block_size <= 0) return absl::InvalidArgumentError("block_size must be positive");
  if (const json::value* ids = o.if_contains("hash_ids"); ids != nullptr && ids->is_array()) {
    for (const json::value& id : ids->as_array()) {
      if (id.is_int64()) {
        r.hash_ids.push_back(id.as_int64());
      } else if (id.is_uint64()) {
        r.hash_ids.push_back(static_cast<int64_t>(id.as_uint64()));
      } else {
        return absl::InvalidArgumentError("hash_ids must be integers");
      }
    }
  }
  if (auto c = number("chat_id")) r.chat_id = static_cast<int64_t>(*c);
  if (auto p = number("parent_chat_id"); p && *p >= 0) r.parent_chat_id = static_cast<int64_t>(*p);
  r.turn = static_cast<int>(number("turn").value_or(0));
  return r;
}

absl::StatusOr<std::vector<TraceRecord>> LoadTrace(const TraceOptions& options) {
  std::ifstream in(options.path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open trace ", options.path));
  std::vector<TraceRecord> records;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    absl::StatusOr<TraceRecord> r = ParseTraceLine(line, options.block_size);
    if (!r.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(options.path, ":", line_no, ": ", r.status().message()));
    }
    const double ts_s = r->timestamp_ms / 1000.0;
    if (ts_s < options.window_start_s) continue;
    if (options.window_end_s > 0 && ts_s >= options.window_end_s) break;
    if (options.max_output_tokens > 0) {
      r->output_length = std::min(r->output_length, options.max_output_tokens);
    }
    r->output_length = std::max<int64_t>(r->output_length, 1);
    r->index = static_cast<int64_t>(records.size());
    records.push_back(*std::move(r));
    if (options.limit > 0 && static_cast<int64_t>(records.size()) >= options.limit) break;
  }
  if (!records.empty()) {
    const double t0 = records.front().timestamp_ms;
    for (TraceRecord& r : records) r.timestamp_ms -= t0;
  }
  return records;
}

std::string TraceBlockText(uint64_t seed, int64_t hash_id, int64_t block_size) {
  return SyntheticText(StreamSeed(seed, "trace-block", static_cast<uint64_t>(hash_id)),
                       block_size);
}

std::string ExpandTracePrompt(const TraceRecord& record, uint64_t seed) {
  std::string prompt;
  int64_t left = record.input_length;
  for (int64_t id : record.hash_ids) {
    if (left <= 0) break;
    const int64_t n = std::min(left, record.block_size);
    // A shorter text from the same stream is a prefix of the full block.
    AppendSyntheticText(StreamSeed(seed, "trace-block", static_cast<uint64_t>(id)), n, prompt);
    left -= n;
  }
  if (left > 0) {
    // The trace gave fewer hash ids than the input needs: fill with text unique to the record.
    AppendSyntheticText(StreamSeed(seed, "trace-fill", static_cast<uint64_t>(record.index)),
                        left, prompt);
  }
  return prompt;
}

std::vector<int64_t> InfiniteCacheHitTokens(const std::vector<TraceRecord>& records) {
  absl::flat_hash_set<int64_t> seen;
  std::vector<int64_t> hits;
  hits.reserve(records.size());
  for (const TraceRecord& r : records) {
    int64_t hit = 0;
    int64_t left = r.input_length;
    bool prefix = true;
    for (int64_t id : r.hash_ids) {
      const int64_t n = std::min(left, r.block_size);
      if (n <= 0) break;
      if (prefix && seen.contains(id)) {
        hit += n;
      } else {
        prefix = false;
      }
      left -= n;
    }
    for (int64_t id : r.hash_ids) seen.insert(id);
    hits.push_back(hit);
  }
  return hits;
}

double InfiniteCacheHitRatio(const std::vector<TraceRecord>& records) {
  const std::vector<int64_t> hits = InfiniteCacheHitTokens(records);
  double hit = 0, total = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    hit += static_cast<double>(hits[i]);
    total += static_cast<double>(records[i].input_length);
  }
  return total > 0 ? hit / total : 0;
}

}  // namespace kvroute::bench

namespace kvroute::bench {
namespace {

// An LRU set of block keys with a fixed capacity (0: unbounded).
class BlockLru {
 public:
  explicit BlockLru(int64_t capacity_blocks) : capacity_(capacity_blocks) {}
  bool Contains(uint64_t key) const { return where_.contains(key); }
  void Touch(uint64_t key) {
    if (auto it = where_.find(key); it != where_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      return;
    }
    if (capacity_ > 0 && static_cast<int64_t>(where_.size()) >= capacity_) {
      where_.erase(order_.back());
      order_.pop_back();
    }
    order_.push_front(key);
    where_.emplace(key, order_.begin());
  }

 private:
  int64_t capacity_;
  std::list<uint64_t> order_;  // front: most recent
  absl::flat_hash_map<uint64_t, std::list<uint64_t>::iterator> where_;
};

// Stream block k: streams are numbered from 1 in the high bits; the shared prefix is stream 0.
uint64_t StreamBlockKey(int64_t stream, int64_t k, int64_t shared_blocks) {
  if (k < shared_blocks) return static_cast<uint64_t>(k);
  return (static_cast<uint64_t>(stream + 1) << 28) | static_cast<uint64_t>(k);
}

}  // namespace

double CacheBounds::infinite_hit_ratio() const {
  return prompt_tokens > 0
             ? static_cast<double>(infinite_hit_tokens) / static_cast<double>(prompt_tokens)
             : 0;
}

double CacheBounds::pooled_lru_hit_ratio() const {
  return prompt_tokens > 0
             ? static_cast<double>(pooled_lru_hit_tokens) / static_cast<double>(prompt_tokens)
             : 0;
}

CacheBounds ComputeCacheBounds(std::vector<BoundRequest> requests, int64_t capacity_tokens,
                               int64_t block_tokens) {
  CacheBounds out;
  out.pooled_capacity_tokens = capacity_tokens;
  block_tokens = std::max<int64_t>(1, block_tokens);
  std::stable_sort(requests.begin(), requests.end(),
                   [](const BoundRequest& a, const BoundRequest& b) {
                     return a.arrival_s < b.arrival_s;
                   });
  BlockLru infinite(0);
  std::optional<BlockLru> pooled;
  if (capacity_tokens > 0) pooled.emplace(std::max<int64_t>(1, capacity_tokens / block_tokens));
  std::vector<uint64_t> keys;
  std::vector<int64_t> key_tokens;
  for (const BoundRequest& r : requests) {
    if (r.prompt_tokens <= 0) continue;
    ++out.requests;
    out.prompt_tokens += r.prompt_tokens;
    keys.clear();
    key_tokens.clear();
    int64_t max_hit_tokens = r.prompt_tokens - 1;
    size_t prompt_keys = 0;
    if (!r.blocks.empty()) {
      // Trace blocks of the trace's own size; the last may be partial and is still reused.
      const int64_t bt = std::max<int64_t>(1, r.block_tokens);
      int64_t left = r.prompt_tokens;
      for (int64_t id : r.blocks) {
        if (left <= 0) break;
        keys.push_back(static_cast<uint64_t>(id));
        key_tokens.push_back(std::min(left, bt));
        left -= bt;
      }
      prompt_keys = keys.size();
      max_hit_tokens = r.prompt_tokens;
    } else {
      const int64_t shared_blocks = r.shared_prefix_tokens / block_tokens;
      const int64_t full = (r.prompt_tokens + std::max<int64_t>(0, r.completion_tokens)) /
                           block_tokens;
      for (int64_t k = 0; k < full; ++k) {
        keys.push_back(StreamBlockKey(r.stream, k, shared_blocks));
        key_tokens.push_back(block_tokens);
      }
      prompt_keys = static_cast<size_t>(std::min<int64_t>(full, r.prompt_tokens / block_tokens));
    }
    auto hit_of = [&](const BlockLru& lru) {
      int64_t hit = 0;
      for (size_t k = 0; k < prompt_keys; ++k) {
        if (!lru.Contains(keys[k]) || hit + key_tokens[k] > max_hit_tokens) break;
        hit += key_tokens[k];
      }
      return hit;
    };
    out.infinite_hit_tokens += hit_of(infinite);
    if (pooled) out.pooled_lru_hit_tokens += hit_of(*pooled);
    for (size_t k = keys.size(); k-- > 0;) {
      infinite.Touch(keys[k]);
      if (pooled) pooled->Touch(keys[k]);
    }
  }
  return out;
}

AgenticPlanStats PlanAgenticStats(const AgenticOptions& options, int64_t fleet_kv_tokens,
                                  double nominal_turn_s, int64_t block_tokens) {
  AgenticPlanStats st;
  std::vector<BoundRequest> requests;
  // Working-set events: (time, job, context tokens held from then on; -1 ends the job).
  struct Event {
    double t;
    int64_t job;
    int64_t context;
  };
  std::vector<Event> events;
  double turns_sum = 0;
  for (const AgenticJob& job : PlanAgenticJobs(options)) {
    ++st.jobs;
    double t = job.arrival_s;
    const std::vector<PlannedTurn> turns = PlanAgenticTurns(options, job.id);
    turns_sum += static_cast<double>(turns.size());
    for (const PlannedTurn& p : turns) {
      BoundRequest r;
      r.arrival_s = t;
      r.stream = job.id;
      r.shared_prefix_tokens = options.system_tokens;
      r.prompt_tokens = p.prompt_tokens;
      r.completion_tokens = p.completion_tokens;
      requests.push_back(r);
      events.push_back({t, job.id, p.prompt_tokens + p.completion_tokens});
      st.mean_context_tokens += static_cast<double>(p.prompt_tokens);
      st.max_context_tokens = std::max(st.max_context_tokens, p.prompt_tokens);
      t += nominal_turn_s + AgenticToolTime(options, job.id, p.turn);
    }
    events.push_back({t, job.id, -1});
  }
  st.requests = static_cast<int64_t>(requests.size());
  if (st.requests > 0) st.mean_context_tokens /= static_cast<double>(st.requests);
  if (st.jobs > 0) st.mean_turns = turns_sum / static_cast<double>(st.jobs);
  std::stable_sort(events.begin(), events.end(),
                   [](const Event& a, const Event& b) { return a.t < b.t; });
  absl::flat_hash_map<int64_t, int64_t> live;
  int64_t sum = 0;
  for (const Event& e : events) {
    int64_t& held = live[e.job];
    sum -= held;
    held = std::max<int64_t>(0, e.context);
    sum += held;
    st.peak_working_set_tokens = std::max(st.peak_working_set_tokens, sum);
  }
  st.bounds = ComputeCacheBounds(std::move(requests), fleet_kv_tokens, block_tokens);
  return st;
}

}  // namespace kvroute::bench
