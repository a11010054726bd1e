#include "bench/kvroute_bench/workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <boost/json.hpp>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
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
    jobs.push_back({id, t, absl::StrCat("job-", options.seed, "-", id)});
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

std::string AgenticToolOutput(const AgenticOptions& options, int64_t job_id, int turn) {
  return absl::StrCat("Tool output ", turn, ":",
                      SyntheticText(StreamSeed(options.seed, "agentic-tool", job_id, turn),
                                    AgenticToolTokens(options, turn)));
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
