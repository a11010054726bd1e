#include "sim/engine.h"

#include <gtest/gtest.h>

#include <numeric>

#include "absl/strings/str_cat.h"

namespace sim {
namespace {

// Round numbers so expected times can be computed by hand: a step costs 1 s, plus 0.1 s per
// prefill token, plus 0.5 s per decoding sequence.
EngineConfig TinyConfig(int64_t num_blocks = 16) {
  EngineConfig c;
  c.block_size = 4;
  c.num_gpu_blocks = num_blocks;
  c.max_num_batched_tokens = 8;
  c.max_num_seqs = 8;
  c.timing = TimingModel{.step_fixed_s = 1.0,
                         .prefill_s_per_token = 0.1,
                         .decode_s_per_seq = 0.5,
                         .kv_read_s_per_token = 0};
  c.link = LinkModel{.bandwidth_bytes_per_s = 1000, .overhead_s = 2.0};
  c.kv_bytes_per_token = 100;
  c.kv_hold_timeout_s = 10;
  c.mean_output_tokens = 4;
  return c;
}

std::vector<int32_t> Tokens(int n, int32_t start = 0) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

RequestSpec Spec(const std::string& id, std::vector<int32_t> prompt, int max_tokens) {
  return RequestSpec{.request_id = id,
                     .prompt = std::move(prompt),
                     .max_tokens = max_tokens,
                     .ignore_eos = true,
                     .output_seed = 1};
}

// Steps until idle; returns all token events.
std::vector<TokenEvent> RunToIdle(Engine& engine, int max_steps = 1000) {
  std::vector<TokenEvent> events;
  for (int i = 0; i < max_steps; ++i) {
    if (!engine.HasRunnableWork()) {
      const std::optional<double> next = engine.NextTimedEvent();
      if (!next) break;
      engine.AdvanceTo(*next);
      continue;
    }
    StepResult r = engine.Step();
    events.insert(events.end(), r.tokens.begin(), r.tokens.end());
  }
  return events;
}

TEST(EngineTest, ChunkedPrefillThenOneTokenPerDecodeStep) {
  Engine engine(TinyConfig());
  const RequestHandle h = engine.Submit(Spec("a", Tokens(10), 3));
  StepResult s1 = engine.Step();
  EXPECT_EQ(s1.prefill_tokens, 8);  // the budget
  EXPECT_DOUBLE_EQ(s1.duration, 1.8);
  EXPECT_TRUE(s1.tokens.empty());
  StepResult s2 = engine.Step();
  EXPECT_EQ(s2.prefill_tokens, 2);
  ASSERT_EQ(s2.tokens.size(), 1u);
  EXPECT_EQ(s2.tokens[0].index, 0);
  StepResult s3 = engine.Step();
  EXPECT_EQ(s3.decode_seqs, 1);
  EXPECT_DOUBLE_EQ(s3.duration, 1.5);
  StepResult s4 = engine.Step();
  ASSERT_EQ(s4.tokens.size(), 1u);
  EXPECT_EQ(s4.tokens[0].finish, FinishReason::kLength);
  EXPECT_FALSE(engine.HasRunnableWork());
  const RequestInfo* info = engine.Info(h);
  ASSERT_NE(info, nullptr);
  EXPECT_DOUBLE_EQ(info->first_token, 3.0);
  EXPECT_DOUBLE_EQ(info->finished, 6.0);
  EXPECT_EQ(info->prompt_tokens, 10);
  EXPECT_EQ(info->completion_tokens, 3);
  EXPECT_EQ(info->cached_tokens, 0);
  EXPECT_EQ(engine.counters().generation_tokens, 3u);
}

TEST(EngineTest, RepeatedPromptHitsWholeCachedBlocks) {
  Engine engine(TinyConfig());
  engine.Submit(Spec("a", Tokens(10), 2));
  RunToIdle(engine);
  const RequestHandle b = engine.Submit(Spec("b", Tokens(10), 2));
  RunToIdle(engine);
  EXPECT_EQ(engine.Info(b)->cached_tokens, 8);  // two whole blocks of four
  // A block-aligned prompt still recomputes its last token, so its last block is no hit.
  const RequestHandle c = engine.Submit(Spec("c", Tokens(8), 2));
  RunToIdle(engine);
  EXPECT_EQ(engine.Info(c)->cached_tokens, 4);
  // A different first token: nothing hits.
  const RequestHandle d = engine.Submit(Spec("d", Tokens(10, 500), 2));
  RunToIdle(engine);
  EXPECT_EQ(engine.Info(d)->cached_tokens, 0);
  EXPECT_EQ(engine.counters().prefix_cache_queries, 38u);
  EXPECT_EQ(engine.counters().prefix_cache_hits, 12u);
}

TEST(EngineTest, MultiTurnPromptHitsPreviousOutputBlocks) {
  Engine engine(TinyConfig());
  const RequestHandle a = engine.Submit(Spec("a", Tokens(8), 8));
  std::vector<int32_t> turn2 = Tokens(8);
  for (const TokenEvent& e : RunToIdle(engine)) {
    if (e.handle == a) turn2.push_back(e.token);
  }
  ASSERT_EQ(turn2.size(), 16u);
  turn2.push_back(77);
  const RequestHandle b = engine.Submit(Spec("b", turn2, 1));
  RunToIdle(engine);
  // Prompt + the first 7 generated tokens were computed (the 8th was sampled last): 3 blocks.
  EXPECT_EQ(engine.Info(b)->cached_tokens, 12);
}

TEST(EngineTest, AdmissionWaitsUntilBlocksFit) {
  Engine engine(TinyConfig(/*num_blocks=*/6));
  const RequestHandle a = engine.Submit(Spec("a", Tokens(16), 8));       // 4 blocks, grows to 6
  engine.Step();                                                         // a: first chunk
  const RequestHandle b = engine.Submit(Spec("b", Tokens(12, 100), 2));  // 3 blocks
  engine.Step();
  EXPECT_EQ(engine.num_running(), 1);
  EXPECT_EQ(engine.num_waiting(), 1) << "b must wait for KV blocks";
  RunToIdle(engine);
  const RequestInfo* ia = engine.Info(a);
  const RequestInfo* ib = engine.Info(b);
  EXPECT_GE(ib->first_scheduled, ia->finished);
  EXPECT_EQ(engine.counters().preemptions, 0u);
  EXPECT_EQ(ib->completion_tokens, 2);
}

TEST(EngineTest, PreemptsTheLatestRequestWhenARunningOneCannotGrow) {
  Engine engine(TinyConfig(/*num_blocks=*/6));
  const RequestHandle a = engine.Submit(Spec("a", Tokens(8), 12));
  const RequestHandle b = engine.Submit(Spec("b", Tokens(8, 100), 12));
  const std::vector<TokenEvent> events = RunToIdle(engine);
  EXPECT_GE(engine.counters().preemptions, 1u);
  EXPECT_EQ(engine.Info(a)->num_preemptions, 0);
  EXPECT_GE(engine.Info(b)->num_preemptions, 1);
  EXPECT_EQ(engine.Info(a)->completion_tokens, 12);
  EXPECT_EQ(engine.Info(b)->completion_tokens, 12);
  int b_tokens = 0;
  for (const TokenEvent& e : events) b_tokens += e.handle == b;
  EXPECT_EQ(b_tokens, 12) << "a preempted request resumes, it does not restart its output";
  EXPECT_GT(engine.Info(b)->finished, engine.Info(a)->finished);
}

// vLLM's --scheduling-policy priority: the waiting queue is ordered by (priority, arrival).
std::vector<double> FirstScheduledInPolicy(SchedulingPolicy policy) {
  EngineConfig config = TinyConfig(/*num_blocks=*/6);  // one 16-token request at a time
  config.scheduling_policy = policy;
  Engine engine(config);
  RequestSpec a = Spec("a", Tokens(16), 8);
  a.priority = 9;
  engine.Submit(std::move(a));
  engine.Step();
  std::vector<RequestHandle> later;
  const int64_t priorities[] = {5, 1, 1};
  for (int i = 0; i < 3; ++i) {
    RequestSpec s = Spec(absl::StrCat("w", i), Tokens(16, 100 * (i + 1)), 2);
    s.priority = priorities[i];
    later.push_back(engine.Submit(std::move(s)));
    engine.AdvanceTo(engine.now() + 1);
  }
  RunToIdle(engine);
  std::vector<double> out;
  for (RequestHandle h : later) out.push_back(engine.Info(h)->first_scheduled);
  return out;
}

TEST(EngineTest, PriorityPolicyAdmitsByPriorityThenArrival) {
  const std::vector<double> fcfs = FirstScheduledInPolicy(SchedulingPolicy::kFcfs);
  EXPECT_LT(fcfs[0], fcfs[1]);
  EXPECT_LT(fcfs[1], fcfs[2]);
  const std::vector<double> prio = FirstScheduledInPolicy(SchedulingPolicy::kPriority);
  EXPECT_LT(prio[1], prio[2]) << "equal priorities go by arrival";
  EXPECT_LT(prio[2], prio[0]) << "priority 5 waits for both priority 1 requests";
}

TEST(EngineTest, PriorityPolicyPreemptsTheLowestPriorityRunningRequest) {
  EngineConfig config = TinyConfig(/*num_blocks=*/6);
  config.scheduling_policy = SchedulingPolicy::kPriority;
  Engine engine(config);
  RequestSpec a = Spec("a", Tokens(8), 12);
  a.priority = 5;
  RequestSpec b = Spec("b", Tokens(8, 100), 12);
  b.priority = 0;
  const RequestHandle ha = engine.Submit(std::move(a));
  const RequestHandle hb = engine.Submit(std::move(b));
  const std::vector<TokenEvent> events = RunToIdle(engine);
  // Under FCFS b, admitted last, is the victim (PreemptsTheLatestRequest...); here a is,
  // though it comes first in the running list and was already scheduled in that step.
  EXPECT_GE(engine.Info(ha)->num_preemptions, 1);
  EXPECT_EQ(engine.Info(hb)->num_preemptions, 0);
  EXPECT_EQ(engine.Info(ha)->completion_tokens, 12);
  EXPECT_EQ(engine.Info(hb)->completion_tokens, 12);
  int a_tokens = 0;
  for (const TokenEvent& e : events) a_tokens += e.handle == ha;
  EXPECT_EQ(a_tokens, 12);
  EXPECT_LT(engine.Info(hb)->finished, engine.Info(ha)->finished);
  EXPECT_EQ(engine.blocks().num_free(), 6);
}

TEST(EngineTest, ASequenceThatOutgrowsThePoolStopsOnLength) {
  Engine engine(TinyConfig(/*num_blocks=*/4));  // 16 tokens of KV
  const RequestHandle h = engine.Submit(Spec("a", Tokens(8), 100));
  const std::vector<TokenEvent> events = RunToIdle(engine);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().finish, FinishReason::kLength);
  EXPECT_EQ(events.back().token, kNoToken);
  EXPECT_EQ(events.size(), 10u);
  EXPECT_EQ(engine.Info(h)->completion_tokens, 9);  // 8 + 8 tokens fill 4 blocks
  EXPECT_EQ(engine.counters().preemptions, 0u);
  EXPECT_EQ(engine.blocks().num_free(), 4);
}

TEST(EngineTest, HeavyPrefillStretchesCoLocatedDecodeSteps) {
  Engine engine(TinyConfig(/*num_blocks=*/64));
  const RequestHandle a = engine.Submit(Spec("a", Tokens(4), 20));
  engine.Step();  // a's prefill
  StepResult alone = engine.Step();
  EXPECT_EQ(alone.decode_seqs, 1);
  EXPECT_DOUBLE_EQ(alone.duration, 1.5);
  engine.Submit(Spec("b", Tokens(40, 100), 1));
  StepResult shared = engine.Step();
  EXPECT_EQ(shared.decode_seqs, 1);
  EXPECT_EQ(shared.prefill_tokens, 7);  // budget 8 minus a's decode token
  EXPECT_DOUBLE_EQ(shared.duration, 1.0 + 0.7 + 0.5);
  ASSERT_EQ(shared.tokens.size(), 1u);
  EXPECT_EQ(shared.tokens[0].handle, a);
}

// vLLM's --long-prefill-token-threshold: each request computes at most the threshold in a
// step, running or newly admitted, and the step's budget goes on to the next request.
TEST(EngineTest, LongPrefillThresholdLeavesTheBudgetToOtherPrompts) {
  EngineConfig config = TinyConfig(/*num_blocks=*/64);
  config.long_prefill_token_threshold = 3;
  Engine engine(config);
  const RequestHandle a = engine.Submit(Spec("a", Tokens(20), 1));
  StepResult first = engine.Step();
  EXPECT_EQ(first.prefill_tokens, 3);  // the threshold, not the budget of 8
  EXPECT_DOUBLE_EQ(first.duration, 1.0 + 0.3);
  const RequestHandle b = engine.Submit(Spec("b", Tokens(2, 100), 1));
  const RequestHandle c = engine.Submit(Spec("c", Tokens(12, 200), 1));
  // a's next chunk (3), b's whole prompt (2), and c's first chunk in the rest of the budget.
  StepResult second = engine.Step();
  EXPECT_EQ(second.prefill_tokens, 3 + 2 + 3);
  ASSERT_EQ(second.tokens.size(), 1u);
  EXPECT_EQ(second.tokens[0].handle, b);
  RunToIdle(engine);
  EXPECT_EQ(engine.Info(a)->completion_tokens, 1);
  EXPECT_EQ(engine.Info(c)->completion_tokens, 1);
}

TEST(EngineTest, WithoutTheThresholdAPromptTakesTheWholeBudget) {
  Engine engine(TinyConfig(/*num_blocks=*/64));
  engine.Submit(Spec("a", Tokens(20), 1));
  EXPECT_EQ(engine.Step().prefill_tokens, 8);
  engine.Submit(Spec("b", Tokens(2, 100), 1));
  // a's running chunk takes the budget; b waits for a step with room.
  StepResult second = engine.Step();
  EXPECT_EQ(second.prefill_tokens, 8);
  EXPECT_TRUE(second.tokens.empty());
}

TEST(EngineTest, SlowdownMultipliesStepTime) {
  Engine engine(TinyConfig());
  engine.set_slowdown(3);
  engine.Submit(Spec("a", Tokens(4), 1));
  EXPECT_DOUBLE_EQ(engine.Step().duration, 3 * 1.4);
}

TEST(EngineTest, RemoteDecodePrefillHoldsBlocksUntilReleased) {
  Engine engine(TinyConfig(/*num_blocks=*/8));
  RequestSpec spec = Spec("p1", Tokens(10), 1);
  spec.hold_for_remote_decode = true;
  const RequestHandle h = engine.Submit(spec);
  RunToIdle(engine);
  EXPECT_TRUE(engine.HasHold("p1"));
  EXPECT_EQ(engine.Info(h)->held_blocks.size(), 3u);
  EXPECT_EQ(engine.blocks().num_free(), 5);
  EXPECT_TRUE(engine.ReleaseHold("p1"));
  EXPECT_FALSE(engine.HasHold("p1"));
  EXPECT_EQ(engine.blocks().num_free(), 8);
}

TEST(EngineTest, HeldBlocksExpireAfterTheTimeout) {
  Engine engine(TinyConfig(/*num_blocks=*/8));
  RequestSpec spec = Spec("p1", Tokens(10), 1);
  spec.hold_for_remote_decode = true;
  engine.Submit(spec);
  RunToIdle(engine);
  const double finished = engine.now();
  EXPECT_FALSE(engine.NextTimedEvent().has_value()) << "an idle hold does not drive the clock";
  // A request needing all 8 blocks waits for the hold to expire.
  const RequestHandle big = engine.Submit(Spec("big", Tokens(30, 100), 1));
  EXPECT_FALSE(engine.HasRunnableWork());
  ASSERT_TRUE(engine.NextTimedEvent().has_value());
  EXPECT_DOUBLE_EQ(*engine.NextTimedEvent(), finished + 10);
  RunToIdle(engine);
  EXPECT_FALSE(engine.HasHold("p1"));
  EXPECT_DOUBLE_EQ(engine.Info(big)->first_scheduled, finished + 10);
}

TEST(EngineTest, PullRemoteKvCountsPulledTokensAsCachedAfterTransferTime) {
  Engine engine(TinyConfig());
  RequestSpec spec = Spec("d1", Tokens(10), 2);
  spec.pull_remote_kv = true;
  const RequestHandle h = engine.Submit(spec);
  ASSERT_TRUE(engine.HasRunnableWork());
  StepResult admit = engine.Step();
  EXPECT_TRUE(admit.tokens.empty());
  EXPECT_FALSE(engine.HasRunnableWork());
  // 9 tokens x 100 B at 1000 B/s + 2 s overhead.
  ASSERT_TRUE(engine.NextTimedEvent().has_value());
  EXPECT_DOUBLE_EQ(*engine.NextTimedEvent(), 2.9);
  engine.AdvanceTo(2.9);
  StepResult first = engine.Step();
  ASSERT_EQ(first.transfers_done.size(), 1u);
  EXPECT_EQ(first.decode_seqs, 1);
  EXPECT_EQ(first.prefill_tokens, 0);
  RunToIdle(engine);
  const RequestInfo* info = engine.Info(h);
  EXPECT_EQ(info->cached_tokens, 9);
  EXPECT_EQ(info->pulled_tokens, 9);
  EXPECT_EQ(info->completion_tokens, 2);
  EXPECT_EQ(engine.counters().external_prefix_cache_hits, 9u);
}

TEST(EngineTest, PullSkipsBlocksAlreadyCachedLocally) {
  Engine engine(TinyConfig());
  engine.Submit(Spec("warm", Tokens(10), 1));
  RunToIdle(engine);
  const double t0 = engine.now();
  RequestSpec spec = Spec("d1", Tokens(12), 1);
  spec.pull_remote_kv = true;
  const RequestHandle h = engine.Submit(spec);
  engine.Step();
  ASSERT_TRUE(engine.NextTimedEvent().has_value());
  // Local hit: 8 tokens; pulled: 12 - 1 - 8 = 3 tokens.
  EXPECT_DOUBLE_EQ(*engine.NextTimedEvent(), t0 + 2.0 + 0.3);
  RunToIdle(engine);
  EXPECT_EQ(engine.Info(h)->cached_tokens, 11);
  EXPECT_EQ(engine.Info(h)->pulled_tokens, 3);
}

TEST(EngineTest, NaturalOutputLengthIsDeterministicAndBounded) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    int lengths[2];
    for (int run = 0; run < 2; ++run) {
      Engine engine(TinyConfig());
      RequestSpec spec{.request_id = "x",
                       .prompt = Tokens(4),
                       .max_tokens = 6,
                       .min_tokens = 2,
                       .output_seed = seed};
      const RequestHandle h = engine.Submit(spec);
      RunToIdle(engine);
      lengths[run] = engine.Info(h)->completion_tokens;
      const FinishReason f = engine.Info(h)->finish;
      EXPECT_EQ(f, lengths[run] == 6 ? FinishReason::kLength : FinishReason::kStop);
    }
    EXPECT_EQ(lengths[0], lengths[1]);
    EXPECT_GE(lengths[0], 2);
    EXPECT_LE(lengths[0], 6);
  }
}

TEST(EngineTest, AbortFreesBlocks) {
  Engine engine(TinyConfig(/*num_blocks=*/8));
  const RequestHandle h = engine.Submit(Spec("a", Tokens(10), 5));
  engine.Step();
  EXPECT_LT(engine.blocks().num_free(), 8);
  engine.Abort(h);
  EXPECT_EQ(engine.blocks().num_free(), 8);
  EXPECT_EQ(engine.Info(h), nullptr);
  EXPECT_FALSE(engine.HasRunnableWork());
}

TEST(EngineTest, BusyFractionRisesWhenBusyAndDecaysWhenIdle) {
  Engine engine(TinyConfig());
  engine.Submit(Spec("a", Tokens(4), 10));
  RunToIdle(engine);
  const double busy = engine.BusyFraction();
  EXPECT_GT(busy, 0.5);
  engine.AdvanceTo(engine.now() + 30);
  EXPECT_LT(engine.BusyFraction(), busy * 0.1);
}

TEST(EngineTest, ValidateRejectsPromptsLargerThanTheKvPool) {
  Engine engine(TinyConfig(/*num_blocks=*/4));
  EXPECT_TRUE(engine.Validate(15, 1).ok());
  EXPECT_FALSE(engine.Validate(16, 1).ok());
  EXPECT_FALSE(engine.Validate(0, 1).ok());
}

}  // namespace
}  // namespace sim
