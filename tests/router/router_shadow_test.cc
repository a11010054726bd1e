// The router's cache model end to end: shadow matching, capacity-bounded
// eviction, feedback from the engine's cached_tokens, bytes/token learning,
// session affinity, and a randomized lifecycle property test.
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "router/prefix_hash.h"
#include "router/router.h"

namespace kvroute::router {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);
constexpr size_t kChunk = 256;  // bytes; 64 tokens at the default 4 bytes/token

// Deterministic varied text: `chunks` full chunks seeded by `seed`.
std::string Text(uint64_t seed, int chunks) {
  std::mt19937_64 rng(seed);
  std::string s(static_cast<size_t>(chunks) * kChunk, ' ');
  for (char& c : s) c = static_cast<char>('a' + rng() % 26);
  return s;
}

std::vector<BackendSpec> Fleet(int n, int64_t capacity_tokens = 0) {
  std::vector<BackendSpec> v;
  for (int i = 0; i < n; ++i) {
    v.push_back({.name = "gpu" + std::to_string(i),
                 .host = "127.0.0.1",
                 .port = static_cast<uint16_t>(8100 + i),
                 .capacity_tokens = capacity_tokens});
  }
  return v;
}

std::unique_ptr<Router> Make(const std::string& policy, std::vector<BackendSpec> fleet,
                             Options o = {}) {
  o.mode = policy;
  o.chunk_bytes = kChunk;
  auto r = Router::Create(o, std::move(fleet));
  EXPECT_TRUE(r.ok()) << r.status();
  return *std::move(r);
}

// v2 offloading every HEAVY request, whatever the fleet's load.
Options ThresholdGate() {
  Options o;
  o.offload_gate = "threshold";
  return o;
}

RequestFeatures Req(const std::string& prompt, const std::string& session = "") {
  RequestFeatures f;
  f.model = "m";
  f.session_id = session;
  f.prompt_bytes = prompt;
  f.chunk_hashes = HashPromptChunks(prompt, kChunk);
  return f;
}

// Routes and completes `prompt`; the engine reports `cached` (-1: unknown)
// and no prompt_tokens (so the bytes/token ratio stays put).
Decision Serve(Router& r, const std::string& prompt, int64_t cached = -1,
               const std::string& session = "", absl::Time now = kT0) {
  absl::StatusOr<RouteTicket> t = r.Route(Req(prompt, session), now);
  EXPECT_TRUE(t.ok()) << t.status();
  r.OnFirstToken(*t, now);
  r.OnComplete(*t, {.ok = true, .cached_tokens = cached, .served_by = t->decision.decode_backend},
               now);
  return t->decision;
}

int64_t EstimateOn(Router& r, const std::string& prompt) {
  absl::StatusOr<RouteTicket> t = r.Route(Req(prompt), kT0);
  EXPECT_TRUE(t.ok());
  r.OnComplete(*t, {.ok = false}, kT0);  // never prefilled: changes nothing
  return t->decision.cached_tokens_est;
}

TEST(RouterShadowTest, FollowUpGoesToTheInstanceHoldingThePrefix) {
  auto r = Make("baseline", Fleet(4));
  const std::string turn1 = Text(1, 40);  // 2560 tokens
  r->SetHealthy(0, false);
  r->SetHealthy(1, false);
  const Decision d1 = Serve(*r, turn1);
  EXPECT_EQ(d1.decode_backend, 2);
  EXPECT_EQ(d1.cached_tokens_est, 0);
  r->SetHealthy(0, true);
  r->SetHealthy(1, true);

  const std::string turn2 = turn1 + Text(2, 20);
  absl::StatusOr<RouteTicket> t = r->Route(Req(turn2), kT0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->decision.decode_backend, 2);
  EXPECT_EQ(t->decision.prompt_tokens_est, 3840);
  EXPECT_EQ(t->decision.cached_tokens_est, 2560);
  EXPECT_EQ(t->decision.best_cached_tokens_est, 2560);
  EXPECT_EQ(t->decision.new_tokens_est, 1280);
  EXPECT_EQ(t->decision.request_class, RequestClass::kWarm);
  EXPECT_EQ(r->Report()[2].shadow_chunks, 40);
  EXPECT_EQ(r->Report()[2].shadow_tokens, 2560);
}

// The engine caches a prompt's blocks as it computes them: once turn 1's
// first token came, turn 2 (turn 1's prompt and more) finds turn 1's
// prompt on its instance while turn 1 still streams, as a client that does
// not wait for the answer, or parallel calls from one context, meet it.
// Before the first token the prompt is not cached yet.
TEST(RouterShadowTest, APromptIsFoundOnceItsFirstTokenCame) {
  auto r = Make("baseline", Fleet(2));
  const std::string turn1 = Text(5, 40);  // 2560 tokens
  const std::string turn2 = turn1 + Text(6, 20);
  absl::StatusOr<RouteTicket> t1 = r->Route(Req(turn1), kT0);
  ASSERT_TRUE(t1.ok());
  const int home = t1->decision.decode_backend;
  EXPECT_EQ(EstimateOn(*r, turn2), 0);
  r->OnFirstToken(*t1, kT0);
  absl::StatusOr<RouteTicket> t2 = r->Route(Req(turn2), kT0);
  ASSERT_TRUE(t2.ok());
  EXPECT_EQ(t2->decision.decode_backend, home);
  EXPECT_EQ(t2->decision.cached_tokens_est, 2560);
  EXPECT_EQ(t2->decision.request_class, RequestClass::kWarm);
  r->OnComplete(*t2, {.ok = false}, kT0);
  r->OnComplete(*t1, {.ok = true, .cached_tokens = 0, .served_by = home}, kT0);
  EXPECT_EQ(r->Report()[home].shadow_chunks, 40);
  EXPECT_EQ(EstimateOn(*r, turn2), 2560);
}

TEST(RouterShadowTest, HashesThePromptWhenTheCallerDidNot) {
  auto r = Make("baseline", Fleet(2));
  const std::string p = Text(3, 10);
  r->SetHealthy(0, false);
  Serve(*r, p);
  r->SetHealthy(0, true);
  RequestFeatures f;
  f.prompt_bytes = p;  // no chunk_hashes
  absl::StatusOr<RouteTicket> t = r->Route(f, kT0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->decision.decode_backend, 1);
  EXPECT_EQ(t->decision.cached_tokens_est, 640);
}

TEST(RouterShadowTest, BytesPerTokenIsLearnedFromUsage) {
  Options o;
  o.default_bytes_per_token = 4.0;
  auto r = Make("round_robin", Fleet(1), o);
  const std::string p = Text(4, 12);  // 3072 bytes
  absl::StatusOr<RouteTicket> t = r->Route(Req(p), kT0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->decision.prompt_tokens_est, 768);
  r->OnComplete(*t, {.ok = true, .prompt_tokens = 1024, .cached_tokens = 0, .served_by = 0}, kT0);
  EXPECT_DOUBLE_EQ(r->BytesPerToken("m"), 3.0);
  EXPECT_DOUBLE_EQ(r->Stats().bytes_per_token, 3.0);
  t = r->Route(Req(p), kT0);
  EXPECT_EQ(t->decision.prompt_tokens_est, 1024);
  // The whole prompt is cached now: 12 chunks x 256 bytes / 3 bytes per token.
  EXPECT_EQ(t->decision.cached_tokens_est, 1024);
}

TEST(RouterShadowTest, EvictionFollowsCapacity) {
  // 1280 tokens x 4 bytes / 256 = 20 chunks.
  auto r = Make("least_loaded", Fleet(1, 1280));
  EXPECT_EQ(r->Report()[0].capacity_tokens, 1280);
  const std::string a = Text(10, 12);
  const std::string b = Text(11, 12);
  Serve(*r, a);
  // While b ran it occupied its 12 prompt chunks and 4 of output (default_output_tokens 256):
  // a kept the 4 chunks that were left, its head.
  Serve(*r, b);
  EXPECT_EQ(r->Report()[0].shadow_chunks, 16);
  EXPECT_EQ(EstimateOn(*r, b), 12 * 64);
  // The scraped capacity replaces the configured one and the shadow follows: a (least
  // recently freed) goes first, then b's tail.
  r->UpdateEngineGauges(0, {.capacity_tokens = 640});
  EXPECT_EQ(r->Report()[0].shadow_chunks, 10);
  EXPECT_EQ(r->Report()[0].capacity_tokens, 640);
  EXPECT_EQ(EstimateOn(*r, b), 10 * 64);
  EXPECT_EQ(EstimateOn(*r, a), 0);
  EXPECT_GT(r->Stats().index_memory_bytes, 0);
}

TEST(RouterShadowTest, RequestsInFlightOccupyThePoolUntilTheyEnd) {
  // 20 chunks. b is routed with a footprint of 12 + 4 chunks: of a's 12 cached chunks, 4 stay
  // cached while it is in flight, and the next estimate for a says so.
  auto r = Make("least_loaded", Fleet(1, 1280));
  const std::string a = Text(20, 12);
  const std::string b = Text(21, 12);
  Serve(*r, a);
  absl::StatusOr<RouteTicket> t = r->Route(Req(b), kT0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(r->Report()[0].shadow_chunks, 4);
  EXPECT_EQ(EstimateOn(*r, a), 4 * 64);
  r->OnFirstToken(*t, kT0);
  r->OnComplete(*t, {.ok = true, .cached_tokens = 0, .served_by = 0}, kT0);
  // b ended: its blocks are the most recently freed, a's head is still there.
  EXPECT_EQ(r->Report()[0].shadow_chunks, 16);
  EXPECT_EQ(EstimateOn(*r, b), 12 * 64);
  EXPECT_EQ(EstimateOn(*r, a), 4 * 64);
}

TEST(RouterShadowTest, AnOversubscribedInstanceKeepsThePrefixItsQueuedRequestsShare) {
  // 20 chunks. Three cold prompts sharing an 8-chunk system prompt, 12 chunks each with a
  // footprint of 16, are routed at once: 48 chunks reserved. The engine runs one and queues
  // the others, which find the system prompt cached when it admits them.
  auto r = Make("least_loaded", Fleet(1, 1280));
  const std::string system = Text(30, 8);
  const std::string a = system + Text(31, 4);
  const std::string b = system + Text(32, 4);
  const std::string c = system + Text(33, 4);
  absl::StatusOr<RouteTicket> ta = r->Route(Req(a), kT0);
  absl::StatusOr<RouteTicket> tb = r->Route(Req(b), kT0);
  absl::StatusOr<RouteTicket> tc = r->Route(Req(c), kT0);
  ASSERT_TRUE(ta.ok() && tb.ok() && tc.ok());
  r->OnFirstToken(*ta, kT0);
  r->OnComplete(*ta, {.ok = true, .cached_tokens = 0, .served_by = 0}, kT0);
  // b and c now hold the system prompt (pinned, 8 chunks) and reserve 8 each beside it; a's
  // own 4 chunks had no room left.
  EXPECT_EQ(r->Report()[0].shadow_chunks, 8);
  EXPECT_EQ(EstimateOn(*r, system + Text(34, 4)), 8 * 64);
  r->OnFirstToken(*tb, kT0);
  r->OnComplete(*tb, {.ok = true, .cached_tokens = 8 * 64, .served_by = 0}, kT0);
  r->OnFirstToken(*tc, kT0);
  r->OnComplete(*tc, {.ok = true, .cached_tokens = 8 * 64, .served_by = 0}, kT0);
  EXPECT_EQ(EstimateOn(*r, c), 12 * 64);
  EXPECT_EQ(EstimateOn(*r, b), 12 * 64);
}

TEST(RouterShadowTest, AHeldRequestTakesRoomOnlyOnceDispatched) {
  // As above, but b is held back (the residency gate) before it is sent: a keeps its whole
  // prefix in the shadow until b goes, as in the engine.
  auto r = Make("least_loaded", Fleet(1, 1280));
  const std::string a = Text(20, 12);
  const std::string b = Text(21, 12);
  Serve(*r, a);
  RequestFeatures held = Req(b);
  held.defer_kv_reservation = true;
  absl::StatusOr<RouteTicket> t = r->Route(held, kT0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(r->Report()[0].shadow_chunks, 12);
  EXPECT_EQ(EstimateOn(*r, a), 12 * 64);
  r->Dispatch(*t, kT0);
  EXPECT_EQ(r->Report()[0].shadow_chunks, 4);
  EXPECT_EQ(EstimateOn(*r, a), 4 * 64);
  r->Dispatch(*t, kT0);  // once only
  EXPECT_EQ(r->Report()[0].shadow_chunks, 4);
  r->OnFirstToken(*t, kT0);
  r->OnComplete(*t, {.ok = true, .cached_tokens = 0, .served_by = 0}, kT0);
  EXPECT_EQ(r->Report()[0].shadow_chunks, 16);
}

TEST(RouterShadowTest, AHeldRequestThatNeverWentReleasesNothing) {
  auto r = Make("least_loaded", Fleet(1, 1280));
  const std::string a = Text(20, 12);
  Serve(*r, a);
  RequestFeatures held = Req(Text(21, 12));
  held.defer_kv_reservation = true;
  absl::StatusOr<RouteTicket> t = r->Route(held, kT0);
  ASSERT_TRUE(t.ok());
  r->OnComplete(*t, {.ok = false}, kT0);  // its client left while it waited
  EXPECT_EQ(r->Report()[0].shadow_chunks, 12);
  EXPECT_EQ(EstimateOn(*r, a), 12 * 64);
}

TEST(RouterShadowTest, DefaultCapacityWhenNothingKnown) {
  Options o;
  o.default_capacity_tokens = 128;  // 2 chunks
  auto r = Make("least_loaded", Fleet(1), o);
  Serve(*r, Text(12, 5));
  EXPECT_EQ(r->Report()[0].shadow_chunks, 2);
}

TEST(RouterShadowTest, EngineEvictionDropsOlderChainsAndShrinksCapacity) {
  auto r = Make("least_loaded", Fleet(1));
  const std::string a = Text(20, 5);
  const std::string b = Text(21, 5);
  const std::string c = Text(22, 5);
  Serve(*r, b);  // oldest
  Serve(*r, a);
  Serve(*r, c);  // newest
  const int64_t nominal = r->Report()[0].effective_capacity_tokens;
  EXPECT_EQ(nominal, 400000);

  // The engine had nothing of `a` although the shadow had all 5 chunks:
  // it evicted a, and with it everything older (b). c stays.
  const Decision d = Serve(*r, a, /*cached=*/0);
  EXPECT_EQ(d.cached_tokens_est, 320);
  BackendReport rep = r->Report()[0];
  EXPECT_EQ(rep.shadow_corrections, 1);
  EXPECT_EQ(rep.est_requests, 1);
  EXPECT_EQ(rep.last_est_error_tokens, 320);
  EXPECT_DOUBLE_EQ(rep.est_abs_error_tokens_sum, 320);
  EXPECT_DOUBLE_EQ(rep.est_tokens_sum, 320);
  EXPECT_DOUBLE_EQ(rep.actual_cached_tokens_sum, 0);
  EXPECT_LT(rep.effective_capacity_tokens, nominal);
  EXPECT_EQ(EstimateOn(*r, b), 0);
  EXPECT_EQ(EstimateOn(*r, c), 320);
  EXPECT_EQ(EstimateOn(*r, a), 320);  // served again: the engine holds it now

  // The engine proving more than the shadow knew grows the capacity back.
  const int64_t shrunk = rep.effective_capacity_tokens;
  Serve(*r, Text(23, 5), /*cached=*/320);
  rep = r->Report()[0];
  EXPECT_GT(rep.effective_capacity_tokens, shrunk);
  EXPECT_EQ(rep.last_est_error_tokens, -320);
  EXPECT_EQ(rep.shadow_corrections, 1);
}

TEST(RouterShadowTest, BlockRoundingIsNotAnEviction) {
  auto r = Make("least_loaded", Fleet(1));
  const std::string a = Text(30, 5);
  Serve(*r, a);
  // One chunk less than estimated is within eviction_tolerance_chunks.
  Serve(*r, a, /*cached=*/256);
  EXPECT_EQ(r->Report()[0].shadow_corrections, 0);
  EXPECT_EQ(EstimateOn(*r, a), 320);
}

TEST(RouterShadowTest, ReprovedSinceRoutingSkipsCorrection) {
  auto r = Make("least_loaded", Fleet(1));
  const std::string a = Text(40, 5);
  Serve(*r, a);
  absl::StatusOr<RouteTicket> slow = r->Route(Req(a), kT0);
  ASSERT_TRUE(slow.ok());
  Serve(*r, a, /*cached=*/320);  // another request re-proved a meanwhile
  r->OnFirstToken(*slow, kT0);
  r->OnComplete(*slow, {.ok = true, .cached_tokens = 0, .served_by = 0}, kT0);
  EXPECT_EQ(r->Report()[0].shadow_corrections, 0);
  EXPECT_EQ(EstimateOn(*r, a), 320);
}

TEST(RouterShadowTest, TransferredKvIsNotTruthAndBothInstancesHoldThePrompt) {
  auto r = Make("v2", Fleet(2), ThresholdGate());
  const std::string heavy = Text(50, 400);  // 25600 tokens: HEAVY when cold
  absl::StatusOr<RouteTicket> t = r->Route(Req(heavy), kT0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->decision.request_class, RequestClass::kHeavy);
  ASSERT_EQ(t->decision.mode, DecisionMode::kOffload);
  EXPECT_NE(t->decision.prefill_backend, t->decision.decode_backend);
  std::vector<BackendReport> rep = r->Report();
  EXPECT_EQ(rep[t->decision.prefill_backend].inflight_prefill_tokens, 25600);
  EXPECT_EQ(rep[t->decision.decode_backend].inflight_prefill_tokens, 0);
  EXPECT_EQ(rep[t->decision.decode_backend].inflight_requests, 1);
  r->OnFirstToken(*t, kT0);
  rep = r->Report();
  EXPECT_EQ(rep[t->decision.prefill_backend].inflight_requests, 0);
  EXPECT_EQ(rep[t->decision.decode_backend].decoding_requests, 1);
  r->OnComplete(*t,
                {.ok = true,
                 .prompt_tokens = -1,
                 .cached_tokens = 25599,
                 .served_by = t->decision.decode_backend,
                 .kv_transferred = true},
                kT0);
  rep = r->Report();
  EXPECT_EQ(rep[0].est_requests + rep[1].est_requests, 0);
  EXPECT_EQ(rep[0].shadow_chunks, 400);
  EXPECT_EQ(rep[1].shadow_chunks, 400);
  for (const BackendReport& b : rep) {
    EXPECT_EQ(b.inflight_requests, 0);
    EXPECT_EQ(b.inflight_tokens, 0);
    EXPECT_EQ(b.inflight_prefill_tokens, 0);
    EXPECT_EQ(b.decoding_requests, 0);
  }
}

TEST(RouterShadowTest, OffloadWithUnknownTransferIsNotTruth) {
  auto r = Make("v2", Fleet(2), ThresholdGate());
  absl::StatusOr<RouteTicket> t = r->Route(Req(Text(52, 400)), kT0);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->decision.mode, DecisionMode::kOffload);
  const int b = t->decision.decode_backend;
  const Outcome o{.ok = true, .cached_tokens = 25599, .served_by = b};  // kv_transferred unset
  EXPECT_TRUE(CachedTokensMayIncludeTransfer(t->decision, o));
  EXPECT_FALSE(EstimateError(t->decision, o).has_value());
  r->OnComplete(*t, o, kT0);
  std::vector<BackendReport> rep = r->Report();
  EXPECT_EQ(rep[0].est_requests + rep[1].est_requests, 0);
  EXPECT_EQ(rep[b].shadow_chunks, 400);
  EXPECT_EQ(rep[1 - b].shadow_chunks, 0);  // not known to have prefilled
}

TEST(RouterShadowTest, OffloadServedColocatedCorrectsTheDecodeShadow) {
  auto r = Make("v2", Fleet(2), ThresholdGate());
  const std::string heavy = Text(51, 400);
  absl::StatusOr<RouteTicket> t = r->Route(Req(heavy), kT0);
  ASSERT_TRUE(t.ok());
  const int b = t->decision.decode_backend;
  r->OnFirstToken(*t, kT0);
  r->OnComplete(*t, {.ok = true, .cached_tokens = 0, .served_by = b, .kv_transferred = false}, kT0);
  std::vector<BackendReport> rep = r->Report();
  EXPECT_EQ(rep[b].est_requests, 1);
  EXPECT_EQ(rep[b].shadow_chunks, 400);
  EXPECT_EQ(rep[1 - b].shadow_chunks, 0);  // the prefill leg never ran
}

TEST(RouterShadowTest, SessionAffinityAndTtl) {
  Options o;
  o.session_ttl = absl::Minutes(30);
  auto r = Make("baseline", Fleet(3), o);
  const std::string p = Text(60, 4);
  const Decision d1 = Serve(*r, p, -1, "s");
  EXPECT_FALSE(d1.affinity_hit);
  EXPECT_EQ(d1.session_backend, -1);
  // Another instance gets the same prefix; the session still stays put.
  r->SetHealthy(d1.decode_backend, false);
  const Decision other = Serve(*r, p);
  r->SetHealthy(d1.decode_backend, true);  // comes back with an empty cache
  const Decision d2 = Serve(*r, p, -1, "s", kT0 + absl::Minutes(1));
  EXPECT_EQ(d2.decode_backend, d1.decode_backend);
  EXPECT_TRUE(d2.affinity_hit);
  EXPECT_EQ(d2.cached_tokens_est, 0);
  EXPECT_EQ(d2.best_cached_tokens_est, 256);
  EXPECT_NE(other.decode_backend, d1.decode_backend);
  EXPECT_EQ(r->Stats().affinity_hits, 1);
  EXPECT_EQ(r->Stats().sessions, 1);
  // Past the TTL the session is forgotten.
  const Decision d3 = Serve(*r, p, -1, "s", kT0 + absl::Minutes(32));
  EXPECT_EQ(d3.session_backend, -1);
  EXPECT_FALSE(d3.affinity_hit);
  EXPECT_FALSE(d3.affinity_broken);
}

// A 3-turn session: turn 2 and 3 stay on the instance and are credited with
// what the engine reported holding (prompt + output), which the shadow alone
// cannot know (it never sees output bytes).
TEST(RouterShadowTest, SessionTurnsCreditThePreviousResponse) {
  Options o;
  o.default_bytes_per_token = 4.0;
  auto r = Make("baseline", Fleet(4), o);
  std::string prompt = Text(80, 50);  // 12800 bytes = 3200 tokens
  int backend = -1;
  int64_t held = 0;  // what the engine holds: previous prompt + answer
  for (int turn = 1; turn <= 3; ++turn) {
    absl::StatusOr<RouteTicket> t = r->Route(Req(prompt, "agent"), kT0 + absl::Seconds(turn));
    ASSERT_TRUE(t.ok());
    const int64_t prompt_tokens = static_cast<int64_t>(prompt.size()) / 4;
    if (turn == 1) {
      backend = t->decision.decode_backend;
      EXPECT_EQ(t->decision.cached_tokens_est, 0);
    } else {
      EXPECT_EQ(t->decision.decode_backend, backend);
      EXPECT_TRUE(t->decision.affinity_hit);
      EXPECT_EQ(t->decision.request_class, RequestClass::kWarm);
    }
    // The engine holds the previous prompt and its 150-token answer.
    const int64_t engine_cached = held;
    if (turn > 1) {
      EXPECT_NEAR(static_cast<double>(t->decision.cached_tokens_est),
                  static_cast<double>(engine_cached), 0.05 * engine_cached)
          << "turn " << turn;
    }
    r->OnFirstToken(*t, kT0);
    r->OnComplete(*t,
                  {.ok = true,
                   .prompt_tokens = prompt_tokens,
                   .cached_tokens = engine_cached,
                   .served_by = backend,
                   .completion_tokens = 150},
                  kT0);
    held = prompt_tokens + 150;
    // Next turn: previous prompt + the answer (150 tokens = 600 bytes) +
    // a new user message (~1000 tokens).
    prompt += std::string(600, 'r') + Text(90 + turn, 15) + std::string(100, 'u');
  }
  EXPECT_EQ(r->Report()[backend].shadow_corrections, 0);
}

TEST(RouterShadowTest, EstimateErrorHelper) {
  Decision d;
  d.prefill_backend = 0;
  d.decode_backend = 1;
  d.cached_tokens_est = 500;
  d.prefill_cached_tokens_est = 100;
  EXPECT_FALSE(EstimateError(d, {.cached_tokens = -1}).has_value());
  EXPECT_FALSE(EstimateError(d, {.cached_tokens = 9, .kv_transferred = true}).has_value());
  EXPECT_EQ(*EstimateError(d, {.cached_tokens = 450, .served_by = 1}), 50);
  EXPECT_EQ(*EstimateError(d, {.cached_tokens = 450}), 50);
  EXPECT_EQ(*EstimateError(d, {.cached_tokens = 150, .served_by = 0}), -50);
}

// Four sessions, completed one at a time, on two instances of 6,400 tokens: by hit and load
// alone every one lands on instance 0 (nothing is in flight; ties go to the lowest index) and
// the last two evict the first two; placed by memory, each goes where the resident sessions'
// KV still fits, and every second turn finds its whole first prompt.
TEST(RouterShadowTest, SessionsAreHomedWhereTheirKvFits) {
  const int chunks[] = {62, 62, 28, 28};  // 3,968 and 1,792 tokens
  for (const bool by_memory : {false, true}) {
    Options o;
    if (!by_memory) {
      o.session_resident_window = absl::ZeroDuration();
      o.baseline.admission_weight = 0;
      o.baseline.eviction_weight = 0;
    }
    auto r = Make("baseline", Fleet(2, 6400), o);
    std::vector<int> home;
    for (int s = 0; s < 4; ++s) {
      const std::string prompt = Text(100 + s, chunks[s]);
      absl::StatusOr<RouteTicket> t = r->Route(Req(prompt, "s" + std::to_string(s)), kT0);
      ASSERT_TRUE(t.ok()) << t.status();
      home.push_back(t->decision.decode_backend);
      const int64_t tokens = static_cast<int64_t>(prompt.size()) / 4;
      Outcome done;
      done.ok = true;
      done.prompt_tokens = tokens;
      done.cached_tokens = 0;
      done.completion_tokens = 0;
      done.served_by = home.back();
      r->OnComplete(*t, done, kT0 + absl::Seconds(s + 1));
    }
    if (by_memory) {
      EXPECT_EQ(home, (std::vector<int>{0, 1, 0, 1}));
    } else {
      EXPECT_EQ(home, (std::vector<int>{0, 0, 0, 0}));
    }
    int64_t second_turn_hits = 0;
    for (int s = 0; s < 4; ++s) {
      const std::string prompt = Text(100 + s, chunks[s]) + Text(200 + s, 2);
      absl::StatusOr<RouteTicket> t =
          r->Route(Req(prompt, "s" + std::to_string(s)), kT0 + absl::Seconds(10));
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ(t->decision.decode_backend, home[s]) << "session " << s;
      if (t->decision.cached_tokens_est >= chunks[s] * static_cast<int64_t>(kChunk) / 4) {
        ++second_turn_hits;
      }
      r->OnComplete(*t, {}, kT0 + absl::Seconds(10));
    }
    // By load alone, each second turn's reservation evicts the next session's prefix and
    // only the last session finds its own.
    EXPECT_EQ(second_turn_hits, by_memory ? 4 : 1) << "by memory: " << by_memory;
  }
}

TEST(RouterShadowTest, OverloadBreaksAffinity) {
  auto r = Make("baseline", Fleet(3));
  const std::string big = Text(70, 313);  // 20032 tokens (+256 expected output)
  std::vector<RouteTicket> tickets;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<RouteTicket> t = r->Route(Req(big, "s"), kT0);
    ASSERT_TRUE(t.ok());
    tickets.push_back(*t);
  }
  EXPECT_EQ(tickets[0].decision.decode_backend, 0);
  EXPECT_TRUE(tickets[1].decision.affinity_hit);  // 20k in flight: under 32768
  EXPECT_EQ(tickets[1].decision.decode_backend, 0);
  EXPECT_TRUE(tickets[2].decision.affinity_broken);  // 40k > max(2 x mean, 32768)
  EXPECT_NE(tickets[2].decision.decode_backend, 0);
  EXPECT_EQ(r->Stats().affinity_breaks, 1);
  for (const RouteTicket& t : tickets) r->OnComplete(t, {}, kT0);
}

// Random operations against a random fleet: the router never picks an
// unhealthy instance, and every reservation is released.
TEST(RouterShadowTest, RandomLifecycleProperty) {
  for (const char* policy : {"round_robin", "least_loaded", "baseline", "v1", "v2", "pd_sep"}) {
    std::mt19937_64 rng(7);
    auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int n = 8;
    Options o;
    o.thresholds.heavy_threshold = 2000;  // make HEAVY/OFFLOAD frequent
    o.thresholds.warm_new_tokens = 500;
    auto r = Make(policy, Fleet(n, 20000), o);
    std::vector<std::string> prefixes;
    for (int i = 0; i < 6; ++i) prefixes.push_back(Text(100 + i, uni(1, 60)));
    std::vector<RouteTicket> open;
    std::vector<bool> healthy(n, true);
    absl::Time now = kT0;
    for (int step = 0; step < 3000; ++step) {
      now += absl::Milliseconds(uni(0, 500));
      const int op = uni(0, 9);
      if (op == 0) {
        const int b = uni(0, n - 1);
        healthy[b] = uni(0, 3) != 0;
        r->SetHealthy(b, healthy[b]);
      } else if (op <= 5) {
        const std::string prompt = prefixes[uni(0, 5)] + Text(step, uni(0, 30));
        absl::StatusOr<RouteTicket> t =
            r->Route(Req(prompt, "s" + std::to_string(uni(0, 20))), now);
        bool any = false;
        for (bool h : healthy) any |= h;
        if (!any) {
          ASSERT_EQ(t.status().code(), absl::StatusCode::kUnavailable);
          continue;
        }
        ASSERT_TRUE(t.ok()) << t.status();
        ASSERT_TRUE(healthy[t->decision.prefill_backend]) << policy;
        ASSERT_TRUE(healthy[t->decision.decode_backend]) << policy;
        if (t->decision.mode == DecisionMode::kOffload) {
          ASSERT_NE(t->decision.prefill_backend, t->decision.decode_backend);
        }
        open.push_back(*t);
      } else if (!open.empty()) {
        const size_t i = static_cast<size_t>(uni(0, static_cast<int>(open.size()) - 1));
        RouteTicket t = open[i];
        open.erase(open.begin() + static_cast<long>(i));
        if (uni(0, 1)) r->OnFirstToken(t, now);
        const int64_t cached =
            uni(0, 2) == 0 ? -1 : uni(0, static_cast<int>(t.decision.prompt_tokens_est));
        r->OnComplete(t,
                      {.ok = uni(0, 4) != 0,
                       .prompt_tokens = t.decision.prompt_tokens_est,
                       .cached_tokens = cached,
                       .served_by = t.decision.decode_backend},
                      now);
      }
    }
    for (const RouteTicket& t : open) r->OnComplete(t, {}, now);
    for (const BackendReport& b : r->Report()) {
      EXPECT_EQ(b.inflight_requests, 0) << policy;
      EXPECT_EQ(b.inflight_tokens, 0) << policy;
      EXPECT_EQ(b.inflight_prefill_tokens, 0) << policy;
      EXPECT_EQ(b.decoding_requests, 0) << policy;
      EXPECT_LE(b.shadow_tokens, b.capacity_tokens + 64) << policy;
    }
    EXPECT_EQ(r->Stats().inflight_requests, 0);
  }
}

}  // namespace
}  // namespace kvroute::router
