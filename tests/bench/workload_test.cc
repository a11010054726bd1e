#include "bench/kvroute_bench/workload.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "bench/kvroute_bench/text.h"

namespace kvroute::bench {
namespace {

TEST(SyntheticTextTest, ExactSizeAndPrefixStable) {
  const std::string long_text = SyntheticText(42, 1000);
  EXPECT_EQ(long_text.size(), 4000u);
  const std::string short_text = SyntheticText(42, 123);
  EXPECT_EQ(short_text.size(), 492u);
  EXPECT_EQ(long_text.substr(0, short_text.size()), short_text);
  EXPECT_NE(SyntheticText(43, 1000), long_text);
  // English-like: space-separated three-letter lowercase words.
  for (size_t i = 0; i < long_text.size(); i += 4) {
    ASSERT_EQ(long_text[i], ' ');
    for (size_t j = 1; j < 4; ++j) ASSERT_TRUE(long_text[i + j] >= 'a' && long_text[i + j] <= 'z');
  }
}

TEST(SyntheticTextTest, StreamSeedsAreStable) {
  EXPECT_EQ(StreamSeed(1, "x", 2, 3), StreamSeed(1, "x", 2, 3));
  EXPECT_NE(StreamSeed(1, "x", 2, 3), StreamSeed(1, "x", 3, 2));
  EXPECT_NE(StreamSeed(1, "x", 2, 3), StreamSeed(1, "y", 2, 3));
  EXPECT_NE(StreamSeed(1, "x", 2, 3), StreamSeed(2, "x", 2, 3));
}

TEST(AgenticWorkloadTest, DeterministicGivenSeed) {
  AgenticOptions a{.jobs_per_second = 2, .duration_s = 100, .seed = 7};
  const std::vector<AgenticJob> x = PlanAgenticJobs(a);
  const std::vector<AgenticJob> y = PlanAgenticJobs(a);
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(x[i].id, y[i].id);
    EXPECT_EQ(x[i].arrival_s, y[i].arrival_s);
    EXPECT_EQ(x[i].session_id, y[i].session_id);
  }
  EXPECT_EQ(AgenticTask(a, 3), AgenticTask(a, 3));
  EXPECT_EQ(AgenticToolOutput(a, 3, 2), AgenticToolOutput(a, 3, 2));
  EXPECT_EQ(AgenticSystemPrompt(a), AgenticSystemPrompt(a));

  AgenticOptions b = a;
  b.seed = 8;
  const std::vector<AgenticJob> z = PlanAgenticJobs(b);
  ASSERT_FALSE(z.empty());
  EXPECT_NE(z[0].arrival_s, x[0].arrival_s);
  EXPECT_NE(AgenticToolOutput(b, 3, 2), AgenticToolOutput(a, 3, 2));
}

TEST(AgenticWorkloadTest, PoissonArrivalsWithinDurationAndBounded) {
  AgenticOptions a{.jobs_per_second = 1, .duration_s = 2000, .seed = 3};
  const std::vector<AgenticJob> jobs = PlanAgenticJobs(a);
  // 2000 expected; the plan is fixed by the seed, the bound is a sanity check of the rate.
  EXPECT_GT(jobs.size(), 1800u);
  EXPECT_LT(jobs.size(), 2200u);
  double prev = 0;
  std::set<std::string> sessions;
  for (const AgenticJob& j : jobs) {
    EXPECT_GE(j.arrival_s, prev);
    EXPECT_LT(j.arrival_s, a.duration_s);
    prev = j.arrival_s;
    sessions.insert(j.session_id);
  }
  EXPECT_EQ(sessions.size(), jobs.size());
  a.max_jobs = 10;
  EXPECT_EQ(PlanAgenticJobs(a).size(), 10u);
  a.jobs_per_second = 0;
  EXPECT_TRUE(PlanAgenticJobs(a).empty());
}

TEST(AgenticWorkloadTest, ToolOutputsUniquePerJobAndTurnWithTargetSizes) {
  AgenticOptions a{.seed = 11};
  std::set<std::string> outputs;
  std::set<std::string> first_blocks;
  for (int64_t job = 0; job < 40; ++job) {
    for (int turn = 1; turn < a.turns; ++turn) {
      const std::string out = AgenticToolOutput(a, job, turn);
      const int64_t target = a.tool_tokens[static_cast<size_t>(turn - 1)];
      // The target size in synthetic tokens plus a short "Tool output N:" header.
      EXPECT_GE(static_cast<int64_t>(out.size()), target * kBytesPerToken);
      EXPECT_LE(static_cast<int64_t>(out.size()), target * kBytesPerToken + 20);
      EXPECT_TRUE(outputs.insert(out).second) << "job " << job << " turn " << turn;
      // Not merely different somewhere: different from the start of the synthetic text.
      first_blocks.insert(out.substr(0, 80));
    }
  }
  EXPECT_EQ(first_blocks.size(), outputs.size());
  EXPECT_NE(AgenticTask(a, 1), AgenticTask(a, 2));
  EXPECT_EQ(AgenticTaskTokens(a, 5), a.task_tokens);
  a.task_tokens = 1000;
  a.task_tokens_max = 5000;
  std::set<int64_t> sizes;
  for (int64_t job = 0; job < 50; ++job) {
    const int64_t n = AgenticTaskTokens(a, job);
    EXPECT_GE(n, 1000);
    EXPECT_LE(n, 5000);
    EXPECT_EQ(n, AgenticTaskTokens(a, job));
    EXPECT_GE(static_cast<int64_t>(AgenticTask(a, job).size()), n * kBytesPerToken);
    sizes.insert(n);
  }
  EXPECT_GT(sizes.size(), 40u);
  EXPECT_EQ(AgenticToolTokens(a, 1), 1640);
  EXPECT_EQ(AgenticToolTokens(a, 7), 775);
  EXPECT_EQ(AgenticToolTokens(a, 8), 1640);  // cycles
}

// ---- trace ----

TraceRecord Record(int64_t index, int64_t input, std::vector<int64_t> ids, int64_t bs = 512) {
  TraceRecord r;
  r.index = index;
  r.input_length = input;
  r.output_length = 10;
  r.hash_ids = std::move(ids);
  r.block_size = bs;
  return r;
}

size_t CommonPrefix(const std::string& a, const std::string& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

TEST(AgenticClientTest, NoSessionIdsWhenAsked) {
  AgenticOptions a{.jobs_per_second = 5, .duration_s = 4, .seed = 3};
  const std::vector<AgenticJob> with = PlanAgenticJobs(a);
  ASSERT_FALSE(with.empty());
  for (const AgenticJob& j : with) EXPECT_FALSE(j.session_id.empty());
  a.client.send_session_ids = false;
  const std::vector<AgenticJob> without = PlanAgenticJobs(a);
  ASSERT_EQ(without.size(), with.size());
  for (size_t i = 0; i < with.size(); ++i) {
    EXPECT_EQ(without[i].session_id, "");
    // Only the id goes: arrivals are the same.
    EXPECT_EQ(without[i].id, with[i].id);
    EXPECT_DOUBLE_EQ(without[i].arrival_s, with[i].arrival_s);
  }
}

TEST(AgenticClientTest, OpenLoopSendTimesFollowThePlan) {
  AgenticOptions a{.turns = 5, .tool_time_s = 2, .seed = 9};
  a.tool_time_max_s = 6;
  a.client.open_loop_turn_s = 12;
  const AgenticJob job{.id = 4, .arrival_s = 3.5, .session_id = "s"};
  const std::vector<PlannedTurn> turns = PlanAgenticTurns(a, job.id);
  const std::vector<double> t = AgenticOpenLoopSendTimes(a, job);
  ASSERT_EQ(t.size(), turns.size());
  EXPECT_DOUBLE_EQ(t[0], 3.5);
  for (size_t k = 1; k < t.size(); ++k) {
    // Turn k+1 = turn k's send time + S + turn k's planned tool time, never an answer's.
    EXPECT_DOUBLE_EQ(t[k], t[k - 1] + 12 + AgenticToolTime(a, job.id, turns[k - 1].turn));
    EXPECT_GE(t[k] - t[k - 1], 14);
    EXPECT_LE(t[k] - t[k - 1], 18);
  }
  EXPECT_EQ(AgenticOpenLoopSendTimes(a, job), t);  // pure
  // Stopping early at the context cap stops the schedule with it.
  a.max_context_tokens = a.system_tokens + a.task_tokens + 1;
  EXPECT_EQ(AgenticOpenLoopSendTimes(a, job).size(), PlanAgenticTurns(a, job.id).size());
}

TEST(AgenticClientTest, PlannedAnswersHaveThePlannedSizeAndAreDeterministic) {
  AgenticOptions a{.completion_tokens = 100, .seed = 2};
  a.completion_tokens_max = 800;
  std::set<std::string> seen;
  for (int64_t job = 0; job < 3; ++job) {
    for (int turn = 1; turn <= 3; ++turn) {
      const std::string answer = AgenticPlannedAnswer(a, job, turn);
      EXPECT_EQ(static_cast<int64_t>(answer.size()),
                AgenticCompletionTokens(a, job, turn) * kBytesPerToken);
      EXPECT_EQ(answer, AgenticPlannedAnswer(a, job, turn));
      seen.insert(answer);
    }
  }
  EXPECT_EQ(seen.size(), 9u);  // unique per (job, turn)
  AgenticOptions other = a;
  other.seed = 3;
  EXPECT_NE(AgenticPlannedAnswer(other, 0, 1), AgenticPlannedAnswer(a, 0, 1));
  EXPECT_EQ(AgenticClientDescription(a.client), "session ids sent, closed loop");
  other.client = {.send_session_ids = false, .open_loop_turn_s = 12};
  EXPECT_EQ(AgenticClientDescription(other.client),
            "no session ids, open loop: turn k+1 sent 12 s + tool time after turn k, planned "
            "answers");
}

TEST(TraceWorkloadTest, ExpansionIsDeterministicAndSized) {
  const TraceRecord r = Record(0, 1300, {5, 6, 7});
  const std::string p = ExpandTracePrompt(r, 1);
  EXPECT_EQ(p.size(), 1300u * 4);
  EXPECT_EQ(p, ExpandTracePrompt(r, 1));
  // The partial last block is a prefix of the block's full text.
  const std::string full7 = TraceBlockText(1, 7, 512);
  EXPECT_EQ(p.substr(1024 * 4), full7.substr(0, (1300 - 1024) * 4));
  EXPECT_EQ(p.substr(0, 512 * 4), TraceBlockText(1, 5, 512));
}

// Two requests share exactly k blocks of text iff they share exactly k leading hash ids.
TEST(TraceWorkloadTest, ExpansionPreservesPrefixSharingExactly) {
  constexpr int64_t kBs = 64;  // small blocks keep the test fast; the property is size-free
  std::vector<TraceRecord> recs;
  // A tree of chained prefixes: ids depend on the path, like Mooncake's remapped hashes.
  SplitMix64 rng(99);
  int64_t next_id = 0;
  std::vector<std::vector<int64_t>> pool = {{}};
  for (int64_t i = 0; i < 60; ++i) {
    std::vector<int64_t> ids = pool[rng.Next() % pool.size()];
    const int extra = 1 + static_cast<int>(rng.Next() % 4);
    for (int e = 0; e < extra; ++e) ids.push_back(next_id++);
    pool.push_back(ids);
    const int64_t input = static_cast<int64_t>(ids.size()) * kBs - static_cast<int64_t>(rng.Next() % kBs);
    recs.push_back(Record(i, input, ids, kBs));
  }
  std::vector<std::string> texts;
  for (const TraceRecord& r : recs) texts.push_back(ExpandTracePrompt(r, 5));
  const size_t block_bytes = kBs * 4;
  for (size_t a = 0; a < recs.size(); ++a) {
    for (size_t b = a + 1; b < recs.size(); ++b) {
      const auto& ia = recs[a].hash_ids;
      const auto& ib = recs[b].hash_ids;
      size_t k = 0;
      while (k < ia.size() && k < ib.size() && ia[k] == ib[k]) ++k;
      // Count whole blocks of identical text at the same positions.
      const size_t full_a = texts[a].size() / block_bytes, full_b = texts[b].size() / block_bytes;
      size_t shared_text_blocks = 0;
      while (shared_text_blocks < full_a && shared_text_blocks < full_b &&
             texts[a].compare(shared_text_blocks * block_bytes, block_bytes, texts[b],
                              shared_text_blocks * block_bytes, block_bytes) == 0) {
        ++shared_text_blocks;
      }
      const size_t k_full = std::min({k, full_a, full_b});
      ASSERT_EQ(shared_text_blocks, k_full) << a << " vs " << b;
      const size_t common = CommonPrefix(texts[a], texts[b]);
      EXPECT_GE(common, k_full * block_bytes);
      if (k < ia.size() && k < ib.size()) {
        // The first differing hash id makes the texts diverge inside that block.
        EXPECT_LT(common, (k + 1) * block_bytes) << a << " vs " << b;
      }
    }
  }
}

TEST(TraceWorkloadTest, InfiniteCacheBound) {
  std::vector<TraceRecord> recs = {Record(0, 1536, {1, 2, 3}), Record(1, 1536, {1, 2, 4}),
                                   Record(2, 1200, {1, 2, 4}), Record(3, 512, {9})};
  const std::vector<int64_t> hits = InfiniteCacheHitTokens(recs);
  ASSERT_EQ(hits.size(), 4u);
  EXPECT_EQ(hits[0], 0);
  EXPECT_EQ(hits[1], 1024);
  EXPECT_EQ(hits[2], 1200);  // the partial last block was seen
  EXPECT_EQ(hits[3], 0);
  EXPECT_DOUBLE_EQ(InfiniteCacheHitRatio(recs), (1024.0 + 1200.0) / (1536 + 1536 + 1200 + 512));
  // Only a leading run counts: a seen block after a miss is not a prefix hit.
  std::vector<TraceRecord> gap = {Record(0, 1024, {1, 2}), Record(1, 1536, {7, 2, 3})};
  EXPECT_EQ(InfiniteCacheHitTokens(gap)[1], 0);
}

TEST(TraceWorkloadTest, ParsesLinesWithAndWithoutSessions) {
  auto r = ParseTraceLine(
      R"({"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47]})",
      512);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->timestamp_ms, 27482);
  EXPECT_EQ(r->input_length, 6955);
  EXPECT_EQ(r->hash_ids, (std::vector<int64_t>{46, 47}));
  EXPECT_FALSE(r->chat_id.has_value());
  auto s = ParseTraceLine(
      R"({"timestamp": 1, "input_length": 10, "output_length": 2, "hash_ids": [1],)"
      R"( "chat_id": 5, "parent_chat_id": 3, "turn": 2, "block_size": 16})",
      512);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s->chat_id, 5);
  EXPECT_EQ(*s->parent_chat_id, 3);
  EXPECT_EQ(s->turn, 2);
  EXPECT_EQ(s->block_size, 16);
  EXPECT_FALSE(ParseTraceLine("not json", 512).ok());
  EXPECT_FALSE(ParseTraceLine(R"({"timestamp": 1})", 512).ok());
}

TEST(TraceWorkloadTest, LoadAppliesWindowAndLimit) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("kvb_trace_" + std::to_string(::getpid()) + ".jsonl"))
          .string();
  {
    std::ofstream f(path);
    for (int i = 0; i < 10; ++i) {
      f << R"({"timestamp": )" << i * 1000 << R"(, "input_length": 600, "output_length": 900,)"
        << R"( "hash_ids": [)" << i << ", " << 100 + i << "]}\n";
    }
  }
  TraceOptions o{.path = path, .limit = 3, .window_start_s = 2, .max_output_tokens = 100};
  auto recs = LoadTrace(o);
  ASSERT_TRUE(recs.ok()) << recs.status();
  ASSERT_EQ(recs->size(), 3u);
  EXPECT_EQ((*recs)[0].hash_ids[0], 2);
  EXPECT_EQ((*recs)[0].timestamp_ms, 0);  // rebased
  EXPECT_EQ((*recs)[2].timestamp_ms, 2000);
  EXPECT_EQ((*recs)[0].output_length, 100);
  o.limit = 0;
  o.window_end_s = 5;
  recs = LoadTrace(o);
  ASSERT_TRUE(recs.ok());
  EXPECT_EQ(recs->size(), 3u);  // timestamps 2, 3, 4 s
  std::remove(path.c_str());
  o.path = path;
  EXPECT_FALSE(LoadTrace(o).ok());
}

}  // namespace
}  // namespace kvroute::bench

namespace kvroute::bench {
namespace {

TEST(AgenticLongPresetTest, SizesFollowTheCodingAgentShape) {
  const AgenticOptions a = AgenticLongPreset(1804800, 2.0, 60, 3);
  EXPECT_EQ(a.preset, "agentic-long");
  EXPECT_GE(a.system_tokens, 12000);
  EXPECT_LE(a.system_tokens, 16000);
  for (int64_t job = 0; job < 50; ++job) {
    const int64_t repo = AgenticTaskTokens(a, job);
    EXPECT_GE(repo, 10000);
    EXPECT_LE(repo, 80000);
    const int turns = AgenticTurns(a, job);
    EXPECT_GE(turns, 20);
    EXPECT_LE(turns, 40);
    const std::vector<PlannedTurn> plan = PlanAgenticTurns(a, job);
    ASSERT_FALSE(plan.empty());
    EXPECT_LE(static_cast<int>(plan.size()), turns);
    int64_t prompt = a.system_tokens + repo;
    for (const PlannedTurn& t : plan) {
      EXPECT_EQ(t.prompt_tokens, prompt);
      EXPECT_LE(t.prompt_tokens, a.max_context_tokens);
      EXPECT_GE(t.completion_tokens, 100);
      EXPECT_LE(t.completion_tokens, 800);
      const int64_t tool = AgenticToolTokens(a, job, t.turn);
      EXPECT_GE(tool, 500);
      EXPECT_LE(tool, 8000);
      const double tool_time = AgenticToolTime(a, job, t.turn);
      EXPECT_GE(tool_time, 2.0);
      EXPECT_LE(tool_time, 6.0);
      prompt += t.completion_tokens + tool;
    }
    // A job stops early only because the next prompt would not fit.
    if (static_cast<int>(plan.size()) < turns) {
      EXPECT_GT(prompt, a.max_context_tokens);
    }
  }
  // The tool output size for a (job, turn) is fixed by the seed and appears in the text.
  EXPECT_EQ(AgenticToolOutput(a, 4, 2).size(),
            std::string("Tool output 2:").size() + 4 * static_cast<size_t>(AgenticToolTokens(a, 4, 2)));
}

// The tool times of `b`'s first `jobs` sessions, each turn's prompt checked equal to `a`'s:
// a tool time changes when each turn is sent, not what it carries.
std::vector<double> ToolTimesOfTheSameSessions(const AgenticOptions& a, const AgenticOptions& b,
                                               int64_t jobs) {
  std::vector<double> times;
  for (int64_t job = 0; job < jobs; ++job) {
    const std::vector<PlannedTurn> pa = PlanAgenticTurns(a, job);
    const std::vector<PlannedTurn> pb = PlanAgenticTurns(b, job);
    EXPECT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < std::min(pa.size(), pb.size()); ++i) {
      EXPECT_EQ(pb[i].prompt_tokens, pa[i].prompt_tokens);
      times.push_back(AgenticToolTime(b, job, pb[i].turn));
    }
  }
  return times;
}

// A tool time the operator gives changes when each turn is sent, not what it
// carries: the job count, the sessions and their prompts are the preset's.
TEST(AgenticLongPresetTest, AToolTimeRangeKeepsTheSessions) {
  const AgenticOptions a = AgenticLongPreset(1804800, 1.5, 60, 2);
  const AgenticOptions b = AgenticLongPreset(1804800, 1.5, 60, 2, 10, 30);
  EXPECT_DOUBLE_EQ(b.long_preset.tool_time_s, 10);
  EXPECT_DOUBLE_EQ(b.long_preset.tool_time_max_s, 30);
  EXPECT_EQ(b.max_jobs, a.max_jobs);
  bool spread = false;
  for (double tool_time : ToolTimesOfTheSameSessions(a, b, 20)) {
    EXPECT_GE(tool_time, 10.0);
    EXPECT_LE(tool_time, 30.0);
    spread = spread || tool_time > 20.0;
  }
  EXPECT_TRUE(spread);
}

// A log-normal tool time (median, 99th percentile) has those quantiles over many turns,
// its tail far past the uniform range, and leaves the sessions as they were.
TEST(AgenticLongPresetTest, ALogNormalToolTimeHasItsQuantiles) {
  const AgenticOptions a = AgenticLongPreset(1804800, 1.5, 60, 2);
  const AgenticOptions b = AgenticLongPreset(1804800, 1.5, 60, 2, 5.2, 5.2, 81.4);
  EXPECT_DOUBLE_EQ(b.long_preset.tool_time_p99_s, 81.4);
  EXPECT_EQ(b.max_jobs, a.max_jobs);
  EXPECT_EQ(AgenticToolTimeDescription(a), "2-6 s");
  EXPECT_EQ(AgenticToolTimeDescription(b), "log-normal, median 5.2 s, p99 81.4 s");
  std::vector<double> times = ToolTimesOfTheSameSessions(a, b, 400);
  ASSERT_GT(times.size(), 5000u);
  EXPECT_EQ(times, ToolTimesOfTheSameSessions(a, b, 400));  // seeded per (job, turn)
  std::sort(times.begin(), times.end());
  EXPECT_GT(times.front(), 0.0);
  const auto quantile = [&](double q) {
    return times[static_cast<size_t>(q * static_cast<double>(times.size() - 1))];
  };
  EXPECT_NEAR(quantile(0.5), 5.2, 0.4);
  EXPECT_NEAR(quantile(0.99), 81.4, 12.0);
  // sigma = ln(81.4 / 5.2) / 2.326 puts the 90th percentile near 24 s.
  EXPECT_NEAR(quantile(0.9), 23.7, 2.5);
}

TEST(AgenticLongPresetTest, JobCountFollowsTheSizingRule) {
  const AgenticOptions a = AgenticLongPreset(1804800, 2.0, 60, 1);
  const double context = AgenticMeanSessionContext(a);
  EXPECT_EQ(a.max_jobs, static_cast<int64_t>(std::ceil(2.0 * 1804800 / context)));
  // Twice the fleet needs twice the sessions.
  const AgenticOptions b = AgenticLongPreset(2 * 1804800, 2.0, 60, 1);
  EXPECT_NEAR(static_cast<double>(b.max_jobs), 2.0 * static_cast<double>(a.max_jobs), 1.0);
  // All sessions arrive within the window.
  const std::vector<AgenticJob> jobs = PlanAgenticJobs(a);
  EXPECT_EQ(static_cast<int64_t>(jobs.size()), a.max_jobs);
  EXPECT_LT(jobs.back().arrival_s, 60.0);
  // The sessions live together: the planned peak working set lands in the 1.5-3x band.
  const AgenticPlanStats st = PlanAgenticStats(a, 1804800);
  const double ratio = static_cast<double>(st.peak_working_set_tokens) / 1804800.0;
  EXPECT_GE(ratio, 1.5);
  EXPECT_LE(ratio, 3.0);
  EXPECT_LT(st.bounds.pooled_lru_hit_ratio(), st.bounds.infinite_hit_ratio());
  EXPECT_GT(st.bounds.pooled_lru_hit_ratio(), 0.0);
}

TEST(CacheBoundsTest, PooledLruEvictsTheLeastRecentlyUsedBlocks) {
  // Block size 10. Stream 0 and stream 1 share a 20-token prefix.
  auto req = [](double t, int64_t stream, int64_t prompt, int64_t completion) {
    BoundRequest r;
    r.arrival_s = t;
    r.stream = stream;
    r.shared_prefix_tokens = 20;
    r.prompt_tokens = prompt;
    r.completion_tokens = completion;
    return r;
  };
  // Given out of order: sorted by arrival.
  std::vector<BoundRequest> rs = {
      req(2, 1, 41, 0),   // 4 prompt blocks: shared 0,1 cached; its own 2,3 not
      req(1, 0, 50, 10),  // cold: caches 6 blocks (prompt 5 + answer 1)
      req(3, 0, 70, 0),   // stream 0 again: blocks 0..5 were cached
  };
  // Unbounded: request 1 hits 0, request 2 hits 20 (shared), request 3 hits 60.
  CacheBounds inf = ComputeCacheBounds(rs, 0, 10);
  EXPECT_EQ(inf.requests, 3);
  EXPECT_EQ(inf.prompt_tokens, 161);
  EXPECT_EQ(inf.infinite_hit_tokens, 80);
  // Capacity 6 blocks: request 2's two new blocks evict stream 0's blocks 5 and 4 (its
  // oldest, as they were touched tail first), so request 3 hits blocks 0..3 only.
  CacheBounds pooled = ComputeCacheBounds(rs, 60, 10);
  EXPECT_EQ(pooled.infinite_hit_tokens, 80);
  EXPECT_EQ(pooled.pooled_lru_hit_tokens, 20 + 40);
  EXPECT_NEAR(pooled.pooled_lru_hit_ratio(), 60.0 / 161.0, 1e-12);
  // A prompt that is entirely cached still recomputes its last token.
  std::vector<BoundRequest> again = {req(1, 0, 30, 0), req(2, 0, 30, 0)};
  EXPECT_EQ(ComputeCacheBounds(again, 1000, 10).pooled_lru_hit_tokens, 20);
}

TEST(CacheBoundsTest, TraceBlocksUseTheirOwnIds) {
  BoundRequest a;
  a.arrival_s = 0;
  a.prompt_tokens = 1000;
  a.blocks = {1, 2};
  a.block_tokens = 512;
  BoundRequest b = a;
  b.arrival_s = 1;
  b.blocks = {1, 3};
  BoundRequest c = a;
  c.arrival_s = 2;
  c.blocks = {2, 9};
  // Capacity 2 blocks: b evicts block 2 (its tail 3 then head 1 are touched).
  CacheBounds x = ComputeCacheBounds({a, b, c}, 1024, 512);
  EXPECT_EQ(x.infinite_hit_tokens, 512 + 512);
  EXPECT_EQ(x.pooled_lru_hit_tokens, 512);
}

}  // namespace
}  // namespace kvroute::bench

#include "bench/kvroute_bench/runner.h"

namespace kvroute::bench {
namespace {

TEST(CacheBoundsTest, RunBoundsReplayTheRequestsAsSent) {
  WorkloadSpec spec;
  spec.agentic.system_tokens = 32;
  RunResult run;
  run.fleet_kv_tokens = 0;
  auto rec = [](int64_t job, double t, int64_t prompt, int64_t completion) {
    RequestRecord r;
    r.job = job;
    r.t_start = t;
    r.prompt_tokens = prompt;
    r.completion_tokens = completion;
    r.e2e = 1;
    return r;
  };
  // Job 0 twice (its second prompt continues the first and its answer), job 1 once.
  run.requests = {rec(0, 0, 100, 28), rec(1, 1, 64, 0), rec(0, 2, 200, 0)};
  ComputeRunBounds(spec, run);
  EXPECT_EQ(run.pooled_bound_hit_ratio, -1);  // the fleet's KV is unknown
  // Infinite: job 1 shares the 32-token system prefix (2 blocks); job 0's second turn holds
  // its first prompt and answer, 128 tokens = 8 blocks.
  EXPECT_NEAR(run.bound_hit_ratio, (32.0 + 128.0) / 364.0, 1e-12);
  // A 96-token pool (6 blocks): when job 0 comes back it holds the shared 2 blocks, job 1's
  // own 2 and job 0's blocks 2-3 (its tail went first), so job 0 hits 4 blocks.
  run.fleet_kv_tokens = 96;
  run.bound_hit_ratio = -1;
  ComputeRunBounds(spec, run);
  EXPECT_NEAR(run.pooled_bound_hit_ratio, (32.0 + 64.0) / 364.0, 1e-12);
}

TEST(CacheBoundsTest, OpenLoopRunsReuseOnlyTheEarlierPrompt) {
  WorkloadSpec spec;
  spec.agentic.system_tokens = 32;
  spec.agentic.client.open_loop_turn_s = 12;
  RunResult run;
  auto rec = [](double t, int64_t prompt, int64_t completion) {
    RequestRecord r;
    r.job = 0;
    r.t_start = t;
    r.prompt_tokens = prompt;
    r.completion_tokens = completion;
    r.e2e = 1;
    return r;
  };
  // The second prompt carries the planned answer, not the 28 generated tokens: only the
  // first prompt's 6 whole blocks (96 tokens) are reusable.
  run.requests = {rec(0, 100, 28), rec(2, 200, 0)};
  ComputeRunBounds(spec, run);
  EXPECT_NEAR(run.bound_hit_ratio, 96.0 / 300.0, 1e-12);
}

}  // namespace
}  // namespace kvroute::bench
