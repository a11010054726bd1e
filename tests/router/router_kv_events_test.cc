// Router::ApplyEngineKvEvents: an engine's own KV events evict from the
// least recently used end of its shadow, clear it, and count its cached
// tokens. Pure: no sockets (tests/kvevents/ covers the subscriber).
#include <string>

#include "gtest/gtest.h"
#include "router/prefix_hash.h"
#include "router/router.h"
#include "tests/router/policy_test_util.h"

namespace kvroute::router {
namespace {

constexpr size_t kChunk = 256;  // 64 tokens at the default 4 bytes per token
using Kind = EngineKvEvent::Kind;

std::unique_ptr<Router> Make(int backends) {
  Options o;
  o.chunk_bytes = kChunk;
  std::vector<BackendSpec> specs;
  for (int i = 0; i < backends; ++i) {
    specs.push_back({.name = "gpu" + std::to_string(i),
                     .host = "127.0.0.1",
                     .port = static_cast<uint16_t>(8100 + i),
                     .capacity_tokens = 100000});
  }
  auto r = Router::Create(o, std::move(specs));
  EXPECT_TRUE(r.ok()) << r.status();
  return *std::move(r);
}

RequestFeatures Prompt(char fill, int chunks) {
  return testing::ChunkedPrompt(fill, chunks, kChunk);
}

// Routes and completes `f` (round robin: backends take turns).
void Serve(Router& r, const RequestFeatures& f) {
  absl::StatusOr<RouteTicket> t = r.Route(f, absl::UnixEpoch());
  ASSERT_TRUE(t.ok()) << t.status();
  Outcome o;
  o.ok = true;
  r.OnComplete(*t, o, absl::UnixEpoch());
}

int64_t Matched(Router& r, const RequestFeatures& f, int backend) {
  absl::StatusOr<RouteTicket> t = r.Route(f, absl::UnixEpoch());
  EXPECT_TRUE(t.ok());
  r.OnComplete(*t, Outcome{}, absl::UnixEpoch());
  return t->decision.decode_backend == backend ? t->decision.cached_tokens_est : -1;
}

TEST(RouterKvEvents, RemovalsEvictLeastRecentlyUsedChunksWithCarry) {
  auto r = Make(1);
  const RequestFeatures old_prompt = Prompt('o', 4);
  const RequestFeatures new_prompt = Prompt('n', 4);
  Serve(*r, old_prompt);
  Serve(*r, new_prompt);
  ASSERT_EQ(r->Report()[0].shadow_chunks, 8);

  // 40 tokens: less than a chunk, carried over.
  const EngineKvEvent forty[] = {{Kind::kRemoved, 40}};
  EXPECT_EQ(r->ApplyEngineKvEvents(0, forty), 0);
  // 40 more: 80 tokens owed, one chunk (64 tokens) evicted, 16 carried.
  EXPECT_EQ(r->ApplyEngineKvEvents(0, forty), 1);
  // 3 x 64 - 16 = 176 tokens more: three chunks.
  const EngineKvEvent more[] = {{Kind::kRemoved, 176}};
  EXPECT_EQ(r->ApplyEngineKvEvents(0, more), 3);
  EXPECT_EQ(r->Report()[0].shadow_chunks, 4);
  // The four evicted were the old prompt's (least recently used, tails
  // first); the new prompt is still matched in full.
  EXPECT_EQ(Matched(*r, new_prompt, 0), 4 * 64);
  EXPECT_EQ(Matched(*r, old_prompt, 0), 0);
}

TEST(RouterKvEvents, ClearEmptiesOneBackendAndCachedTokensFollowTheEvents) {
  auto r = Make(2);
  Serve(*r, Prompt('a', 3));                           // backend 0
  Serve(*r, Prompt('b', 5));                           // backend 1
  EXPECT_EQ(r->Report()[0].engine_cached_tokens, -1);  // no event yet

  const EngineKvEvent stored[] = {{Kind::kStored, 320}, {Kind::kStored, 64}, {Kind::kRemoved, 64}};
  r->ApplyEngineKvEvents(0, stored);
  EXPECT_EQ(r->Report()[0].engine_cached_tokens, 320);
  // More removed than stored since kvroute subscribed: the count stops at 0.
  const EngineKvEvent removed[] = {{Kind::kRemoved, 1000}};
  r->ApplyEngineKvEvents(0, removed);
  EXPECT_EQ(r->Report()[0].engine_cached_tokens, 0);

  const EngineKvEvent clear_then_store[] = {{Kind::kCleared, 0}, {Kind::kStored, 32}};
  r->ApplyEngineKvEvents(1, clear_then_store);
  const auto report = r->Report();
  EXPECT_EQ(report[1].shadow_chunks, 0);
  EXPECT_EQ(report[1].engine_cached_tokens, 32);
  EXPECT_EQ(report[0].shadow_chunks, 0);  // 1,000 tokens removed: all three chunks
}

// A request routed to a full instance reserves its footprint at once, so the shadow evicts
// for it before the engine admits it; when the engine then reports the same eviction, the
// shadow does not evict again.
TEST(RouterKvEvents, AnEvictionForeseenAtRoutingIsNotAppliedTwice) {
  Options o;
  o.chunk_bytes = kChunk;
  o.default_output_tokens = 0;
  auto made = Router::Create(
      o, {{.name = "gpu0", .host = "127.0.0.1", .port = 8100, .capacity_tokens = 10 * 64}});
  ASSERT_TRUE(made.ok()) << made.status();
  Router& r = **made;
  const EngineKvEvent stored[] = {{Kind::kStored, 64}};
  r.ApplyEngineKvEvents(0, stored);
  const RequestFeatures old_prompt = Prompt('o', 6);
  Serve(r, old_prompt);
  // A 6-chunk request in flight: 6 + 6 chunks exceed the pool of 10.
  absl::StatusOr<RouteTicket> running = r.Route(Prompt('n', 6), absl::UnixEpoch());
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(Matched(r, old_prompt, 0), 4 * 64);
  // The engine admitted it and evicted two blocks of the old prompt: foreseen.
  const EngineKvEvent removed[] = {{Kind::kRemoved, 2 * 64}};
  EXPECT_EQ(r.ApplyEngineKvEvents(0, removed), 0);
  EXPECT_EQ(Matched(r, old_prompt, 0), 4 * 64);
  // One more than foreseen evicts.
  const EngineKvEvent one[] = {{Kind::kRemoved, 64}};
  EXPECT_EQ(r.ApplyEngineKvEvents(0, one), 1);
  EXPECT_EQ(Matched(r, old_prompt, 0), 3 * 64);
  r.OnComplete(*running, Outcome{}, absl::UnixEpoch());
}

TEST(RouterKvEvents, UnknownOrRetiredBackendIsIgnored) {
  auto r = Make(2);
  Serve(*r, Prompt('a', 2));
  const EngineKvEvent clear[] = {{Kind::kCleared, 0}};
  EXPECT_EQ(r->ApplyEngineKvEvents(7, clear), 0);
  EXPECT_EQ(r->ApplyEngineKvEvents(-1, clear), 0);
  ASSERT_TRUE(r->UpdateBackends({(*r->Backends())[1]}).ok());  // retires gpu0
  const EngineKvEvent removed[] = {{Kind::kRemoved, 640}};
  EXPECT_EQ(r->ApplyEngineKvEvents(0, removed), 0);
}

TEST(RouterKvEvents, AHostTierHoldsWhatTheGpuEvictedUntilItsOwnRemovals) {
  for (const bool aware : {true, false}) {
    Options o;
    o.chunk_bytes = kChunk;
    o.host_tier.aware = aware;
    std::vector<BackendSpec> specs{
        {.name = "gpu0", .host = "h", .port = 1, .capacity_tokens = 100000}};
    std::unique_ptr<Router> r = *Router::Create(o, std::move(specs));
    // The engine's first host event reveals its host tier.
    r->ApplyEngineKvEvents(0, std::vector<EngineKvEvent>{{Kind::kStored, 0, /*host=*/true}});
    EXPECT_EQ(r->Report()[0].engine_host_cached_tokens, 0);
    const RequestFeatures a = Prompt('a', 4);
    Serve(*r, a);  // computed on gpu0 and written through to its host tier
    EXPECT_EQ(r->Report()[0].shadow_chunks, 4);
    EXPECT_EQ(r->Report()[0].host_shadow_chunks, 4);
    // The GPU evicts it (4 chunks of 64 tokens); the host tier still holds it.
    r->ApplyEngineKvEvents(0, std::vector<EngineKvEvent>{{Kind::kRemoved, 256}});
    EXPECT_EQ(r->Report()[0].shadow_chunks, 0);
    EXPECT_EQ(Matched(*r, a, 0), aware ? 256 : 0) << "aware=" << aware;
    // The host tier's own removals evict it there.
    r->ApplyEngineKvEvents(
        0, std::vector<EngineKvEvent>{{Kind::kRemoved, 512}, {Kind::kRemoved, 512, /*host=*/true}});
    EXPECT_EQ(r->Report()[0].host_shadow_chunks, 0);
    EXPECT_EQ(Matched(*r, a, 0), 0);
  }
}

// An engine that publishes no host-tier events (GPU events only, or none)
// still has its tier seen: vllm:cache_config_info's kv_offloading_size sizes
// an LRU host shadow at the model's KV bytes per token. The tier's first
// event hands its sizing to the engine's removals.
TEST(RouterKvEvents, AHostTierSizedByTheEnginesMetricsIsAnLruOfThatSize) {
  Options o;
  o.chunk_bytes = kChunk;
  o.offload_cost.kv_bytes_per_token = 1000;
  o.offload_cost_known = true;
  std::vector<BackendSpec> specs{
      {.name = "gpu0", .host = "h", .port = 1, .capacity_tokens = 100000}};
  std::unique_ptr<Router> r = *Router::Create(o, std::move(specs));
  EngineGauges g;
  g.capacity_tokens = 100000;
  g.host_capacity_bytes = 6 * 64 * 1000;  // six chunks of 64 tokens
  r->UpdateEngineGauges(0, g);
  EXPECT_EQ(r->Report()[0].engine_host_cached_tokens, -1) << "no host event yet";
  const RequestFeatures a = Prompt('a', 4);
  const RequestFeatures b = Prompt('b', 4);
  Serve(*r, a);
  EXPECT_EQ(r->Report()[0].host_shadow_chunks, 4);
  Serve(*r, b);  // the host LRU holds six chunks: two of a's go
  EXPECT_EQ(r->Report()[0].host_shadow_chunks, 6);
  // The GPU evicts both prompts; the host tier still holds b whole.
  r->ApplyEngineKvEvents(0, std::vector<EngineKvEvent>{{Kind::kRemoved, 512}});
  EXPECT_EQ(r->Report()[0].shadow_chunks, 0);
  EXPECT_EQ(Matched(*r, b, 0), 256);
  // A scrape that no longer reports a tier drops it.
  g.host_capacity_bytes = 0;
  r->UpdateEngineGauges(0, g);
  EXPECT_EQ(r->Report()[0].host_shadow_chunks, 0);
  EXPECT_EQ(Matched(*r, b, 0), 0);
  // Once the tier's events arrive they size it, whatever the metrics say.
  g.host_capacity_bytes = 6 * 64 * 1000;
  r->UpdateEngineGauges(0, g);
  r->ApplyEngineKvEvents(0, std::vector<EngineKvEvent>{{Kind::kStored, 0, /*host=*/true}});
  EXPECT_EQ(r->Report()[0].engine_host_cached_tokens, 0);
  Serve(*r, a);
  Serve(*r, b);
  Serve(*r, Prompt('c', 4));
  EXPECT_EQ(r->Report()[0].host_shadow_chunks, 12) << "sized by removals alone";
}

// Without a time model of the fleet (its KV bytes per token) the metrics
// cannot size a tier.
TEST(RouterKvEvents, AHostTierFromMetricsNeedsTheKvBytesPerToken) {
  auto r = Make(1);
  EngineGauges g;
  g.capacity_tokens = 100000;
  g.host_capacity_bytes = 64e9;
  r->UpdateEngineGauges(0, g);
  Serve(*r, Prompt('a', 4));
  EXPECT_EQ(r->Report()[0].host_shadow_chunks, 0);
}

// The engine's timed host loads teach the instance's reload factor, which
// prices its host-tier hits: loads at half the configured bandwidth double
// the reload a placement predicts there. Counters that go back (a restarted
// engine) start over rather than teach a negative time.
TEST(RouterKvEvents, EngineTimedHostLoadsTeachTheReloadFactor) {
  auto r = Make(1);
  EngineGauges g;
  g.host_load_bytes_total = 0;
  g.host_load_seconds_total = 0;
  r->UpdateEngineGauges(0, g);
  EXPECT_EQ(r->Report()[0].host_reload_samples, 0);
  // 10 GB at the default 50 GB/s is 0.2 s; the engine took 0.4 s.
  for (int i = 1; i <= 30; ++i) {
    g.host_load_bytes_total = i * 10e9;
    g.host_load_seconds_total = i * 0.4;
    r->UpdateEngineGauges(0, g);
  }
  EXPECT_EQ(r->Report()[0].host_reload_samples, 30);
  EXPECT_NEAR(r->Report()[0].host_reload_time_factor, 2.0, 0.02);
  // Less than a sample's worth of bytes waits; a reset only re-bases.
  g.host_load_bytes_total += 1e6;
  g.host_load_seconds_total += 10;
  r->UpdateEngineGauges(0, g);
  g.host_load_bytes_total = 0;
  g.host_load_seconds_total = 0;
  r->UpdateEngineGauges(0, g);
  EXPECT_EQ(r->Report()[0].host_reload_samples, 30);
}

// `baseline` with 16 output tokens a turn and 1,000 bytes of KV a token,
// the tier as the gate's room (no pauses to learn one from); `aware`:
// router.tier_aware.
Options TieredOptions(bool aware) {
  Options o;
  o.mode = "baseline";
  o.chunk_bytes = kChunk;
  o.host_tier.aware = aware;
  o.host_tier.gate_room.mode = GateRoom::Mode::kTier;
  o.default_output_tokens = 16;
  o.offload_cost.kv_bytes_per_token = 1000;
  o.offload_cost_known = true;
  return o;
}

// One 1,000-token instance with a host tier (its size reported when
// `host_tokens` > 0): session b's turn at t0; once b has left the gate, a's
// turn fills the GPU and ends at `later`, and the GPU evicts b's prefix,
// which the tier keeps.
struct HostTierScene {
  // `gpu_room`: router.residency.room: gpu.
  HostTierScene(bool aware, int64_t host_tokens, bool gpu_room = false)
      : HostTierScene(aware, host_tokens,
                      GateRoom::Options{.mode = gpu_room ? GateRoom::Mode::kGpu
                                                         : GateRoom::Mode::kTier}) {}
  HostTierScene(bool aware, int64_t host_tokens, GateRoom::Options room) {
    Options o = TieredOptions(aware);
    o.host_tier.gate_room = room;
    std::vector<BackendSpec> specs{
        {.name = "gpu0", .host = "h", .port = 1, .capacity_tokens = 1000}};
    r = *Router::Create(o, std::move(specs));
    EngineGauges g;
    g.capacity_tokens = 1000;
    g.host_capacity_bytes = static_cast<double>(host_tokens) * 1000;
    r->UpdateEngineGauges(0, g);
    r->ApplyEngineKvEvents(0, std::vector<EngineKvEvent>{{Kind::kStored, 0, /*host=*/true}});
    const absl::Time t0 = absl::UnixEpoch();
    first = Turn('b', "b", t0);
    EXPECT_EQ(first.residency_wait, 0u);
    r->Dispatch(first, t0);
    r->OnComplete(first, {.ok = true, .served_by = 0}, t0);
    RouteTicket a = Turn('a', "a", later);
    EXPECT_EQ(a.residency_wait, 0u);
    r->Dispatch(a, later);
    r->OnComplete(a, {.ok = true, .served_by = 0}, later);
    r->ApplyEngineKvEvents(0, std::vector<EngineKvEvent>{{Kind::kRemoved, 768}});
  }
  RouteTicket Turn(char fill, const char* session, absl::Time now) {
    RequestFeatures f = Prompt(fill, 12);  // 768 tokens
    f.session_id = session;
    f.defer_kv_reservation = true;
    absl::StatusOr<RouteTicket> t = r->Route(f, now);
    EXPECT_TRUE(t.ok()) << t.status();
    return *t;
  }
  std::unique_ptr<Router> r;
  RouteTicket first;  // b's first turn
  const absl::Time later = absl::UnixEpoch() + absl::Seconds(100);
};

// The residency gate on an instance with a host tier of unknown size: a
// session's turn whose prefix only the tier still holds is not held while a
// long idle resident fills the instance: the resident is swapped out and
// the turn reloads. Without tier pricing the same turn waits for room.
TEST(RouterKvEvents, AHostTierTurnIsSwappedInNotHeld) {
  for (const bool aware : {true, false}) {
    HostTierScene scene(aware, /*host_tokens=*/0);
    // a has been idle longer than sessions take to come back (the gate's
    // grace time, 15 s, before it learns that gap): it is swapped out.
    RouteTicket next = scene.Turn('b', "b", scene.later + absl::Seconds(20));
    EXPECT_EQ(next.residency_wait == 0, aware) << "aware=" << aware;
    EXPECT_EQ(next.decision.cached_tokens_est, aware ? 768 : 0) << "aware=" << aware;
    EXPECT_EQ(scene.r->ResidencyCounters().swapped_in, aware ? 1u : 0u);
    EXPECT_EQ(scene.r->ResidencyCounters().swapped_out, aware ? 1u : 0u);
  }
}

// A host tier whose size the engine reports keeps the residents: a session
// swapped out of the GPU comes back by a reload, so the gate fills that tier,
// not the GPU pool. A session whose prefix only the tier holds is admitted
// at once beside one that fills the GPU and has just finished its turn (no
// swap-out); without tier pricing it waits for room. A cold session still
// needs the GPU's room: it waits.
TEST(RouterKvEvents, AReportedHostTierIsTheResidentsRoom) {
  for (const bool aware : {true, false}) {
    HostTierScene scene(aware, /*host_tokens=*/4000);
    EXPECT_EQ(scene.first.decision.decode_capacity_tokens, aware ? 4000 : 1000)
        << "aware=" << aware;
    // a finished a second ago: it stays resident, and b reloads beside it.
    RouteTicket next = scene.Turn('b', "b", scene.later + absl::Seconds(1));
    EXPECT_EQ(next.decision.cached_tokens_est, aware ? 768 : 0) << "aware=" << aware;
    EXPECT_EQ(next.residency_wait == 0, aware) << "aware=" << aware;
    EXPECT_EQ(scene.r->ResidencyCounters().swapped_out, 0u);
    // A new session's cold turn does not fit the GPU beside them: it waits.
    RouteTicket cold = scene.Turn('c', "c", scene.later + absl::Seconds(2));
    EXPECT_NE(cold.residency_wait, 0u) << "aware=" << aware;
    EXPECT_EQ(scene.r->ResidencyWaiting(), aware ? 1u : 2u);
  }
}

// With the GPU pool as the gate's room the tier is still priced (the
// prefix it holds counts as cached) but keeps no more sessions resident
// than the GPU holds: the turn that would reload beside a session that has
// just finished waits for it to go idle long enough to be swapped out.
TEST(RouterKvEvents, WithTheGpuAsTheRoomATierReloadWaitsItsTurn) {
  HostTierScene scene(/*aware=*/true, /*host_tokens=*/4000, /*gpu_room=*/true);
  EXPECT_EQ(scene.first.decision.decode_capacity_tokens, 1000);
  RouteTicket next = scene.Turn('b', "b", scene.later + absl::Seconds(1));
  EXPECT_EQ(next.decision.cached_tokens_est, 768);
  EXPECT_NE(next.residency_wait, 0u);
  // a leaves once idle longer than sessions take to come back (the grace
  // time, 15 s, before the gate learns that gap).
  scene.r->TickResidency(scene.later + absl::Seconds(14));
  EXPECT_EQ(scene.r->ResidencyWaiting(), 1u) << "a, idle 14 s, may still come back";
  scene.r->TickResidency(scene.later + absl::Seconds(16));
  EXPECT_EQ(scene.r->ResidencyWaiting(), 0u);
  // Without the option the tier is the room: the same turn goes at once.
  HostTierScene tier(/*aware=*/true, /*host_tokens=*/4000);
  EXPECT_EQ(tier.Turn('b', "b", tier.later + absl::Seconds(1)).residency_wait, 0u);
}

// `room: auto` keeps the GPU pool as the gate's room while the agents come
// back within seconds, and takes the tier once some pause for long. A turn
// sent while another of its session is in flight is no pause.
TEST(RouterKvEvents, TheAutoRoomFollowsTheAgentsPauses) {
  HostTierScene scene(/*aware=*/true, /*host_tokens=*/4000,
                      GateRoom::Options{.mode = GateRoom::Mode::kAuto, .min_pauses = 1});
  EXPECT_EQ(scene.first.decision.decode_capacity_tokens, 1000);
  EXPECT_EQ(scene.r->Sizing(scene.later).pauses, 0);
  // a comes back 1 s after its turn: a short pause, the room stays.
  RouteTicket a = scene.Turn('a', "a", scene.later + absl::Seconds(1));
  EXPECT_EQ(a.decision.decode_capacity_tokens, 1000);
  EXPECT_FALSE(scene.r->Sizing(scene.later + absl::Seconds(1)).gate_room_tier);
  // A parallel request of a, sent while that turn runs, is no pause.
  scene.Turn('a', "a", scene.later + absl::Seconds(3));
  EXPECT_EQ(scene.r->Sizing(scene.later).pauses, 1);
  // b comes back 104 s after its turn: half the pauses are long, and the
  // room is the tier for b's turn, which goes beside a.
  RouteTicket b = scene.Turn('b', "b", scene.later + absl::Seconds(4));
  KvSizingReport sizing = scene.r->Sizing(scene.later + absl::Seconds(4));
  EXPECT_EQ(sizing.pauses, 2);
  EXPECT_DOUBLE_EQ(sizing.long_pause_share, 0.5);
  EXPECT_TRUE(sizing.gate_room_tier);
  EXPECT_EQ(b.decision.decode_capacity_tokens, 4000);
  EXPECT_EQ(b.residency_wait, 0u) << "the tier keeps b beside a";
}

// A turn routed to an instance without room, and cold there, is moved by
// the residency gate to an instance with room: its session's home, whose
// host tier holds the prefix the GPU evicted. The estimate it is sent with
// counts that tier (without tier pricing, what the GPU holds: nothing).
TEST(RouterKvEvents, ATurnTheGateMovesHomeCountsItsHostTier) {
  for (const bool aware : {true, false}) {
    Options o = TieredOptions(aware);
    std::vector<BackendSpec> specs{
        {.name = "gpu0", .host = "h", .port = 1, .capacity_tokens = 1000},
        {.name = "gpu1", .host = "h", .port = 2, .capacity_tokens = 500}};
    std::unique_ptr<Router> r = *Router::Create(o, std::move(specs));
    EngineGauges g;
    g.capacity_tokens = 1000;
    g.host_capacity_bytes = 4000.0 * 1000;  // 4,000 tokens on gpu0
    r->UpdateEngineGauges(0, g);
    r->ApplyEngineKvEvents(0, std::vector<EngineKvEvent>{{Kind::kStored, 0, /*host=*/true}});
    const absl::Time t0 = absl::UnixEpoch();
    auto turn = [&](char fill, const char* session, std::vector<int> avoid) {
      RequestFeatures f = Prompt(fill, 12);  // 768 tokens
      f.session_id = session;
      f.defer_kv_reservation = true;
      f.avoid_backends = std::move(avoid);
      absl::StatusOr<RouteTicket> t = r->Route(f, t0);
      EXPECT_TRUE(t.ok()) << t.status();
      return *t;
    };
    // s lives on gpu0; the GPU then evicts its prompt, the host tier keeps it.
    RouteTicket s1 = turn('s', "s", {});
    ASSERT_EQ(r->Dispatch(s1, t0).decision.decode_backend, 0);
    r->OnComplete(s1, {.ok = true, .served_by = 0}, t0);
    r->ApplyEngineKvEvents(0, std::vector<EngineKvEvent>{{Kind::kRemoved, 768}});
    // q is resident on gpu1, which holds no second session.
    RouteTicket q = turn('q', "q", {0});
    ASSERT_EQ(r->Dispatch(q, t0).decision.decode_backend, 1);
    // s's next turn, kept off gpu0, is cold on gpu1 and does not fit there.
    RouteTicket s2 = turn('s', "s", {0});
    EXPECT_EQ(s2.decision.decode_backend, 1);
    const Router::Dispatched go = r->Dispatch(s2, t0);
    EXPECT_EQ(go.decision.decode_backend, 0) << "aware=" << aware;
    EXPECT_EQ(go.cached_tokens_est, aware ? 768 : 0) << "aware=" << aware;
    r->OnComplete(q, {.ok = true, .served_by = 1}, t0);
    r->OnComplete(s2, {.ok = true, .served_by = 0}, t0);
  }
}

// The overload rule moves a session off a crowded instance; with a host tier
// there the session stays when its first token comes sooner at home, since
// the tier keeps its prefix while it waits. gpu0 decodes a 50,000-token
// context (over twice the fleet's mean in flight, nothing queued for
// prefill); s's next turn has 10,000 of its 12,000 tokens cached there
// (2 s to prefill, 1,000 tokens a second) and none elsewhere (12 s). Without
// tier pricing, or without a tier at gpu0, the move stands; so it does when
// a prefill queued at home makes the move sooner.
TEST(RouterKvEvents, AnOverloadedHomeWithATierKeepsATurnSoonerThere) {
  struct Case {
    const char* name;
    bool aware;
    bool tier;
    int64_t queued_home_tokens;
    bool stays;
  };
  for (const Case& c :
       {Case{"tier-aware", true, true, 0, true}, Case{"tier-blind", false, true, 0, false},
        Case{"no tier", true, false, 0, false}, Case{"home queued", true, true, 20000, false}}) {
    SCOPED_TRACE(c.name);
    Options o = TieredOptions(c.aware);
    o.offload_cost.prefill_tokens_per_second = 1000;
    std::unique_ptr<Router> r = *Router::Create(o, testing::LoopbackBackends(3));
    if (c.tier) {
      r->ApplyEngineKvEvents(0, std::vector<EngineKvEvent>{{Kind::kStored, 0, /*host=*/true}});
    }
    const absl::Time t0 = absl::UnixEpoch();
    auto route = [&](const RequestFeatures& f) {
      absl::StatusOr<RouteTicket> t = r->Route(f, t0);
      EXPECT_TRUE(t.ok()) << t.status();
      return *t;
    };
    RequestFeatures first = testing::ChunkedPrompt('s', 156, kChunk);  // 9,984 tokens
    first.session_id = "s";
    first.avoid_backends = {1, 2};
    const RouteTicket s1 = route(first);
    ASSERT_EQ(s1.decision.decode_backend, 0);
    r->OnComplete(s1, {.ok = true, .prompt_tokens = 9984, .served_by = 0}, t0);
    RequestFeatures big = testing::ChunkedPrompt('x', 781, kChunk);  // 49,984 tokens
    big.avoid_backends = {1, 2};
    r->OnFirstToken(route(big), t0);
    if (c.queued_home_tokens > 0) {
      RequestFeatures queued =
          testing::ChunkedPrompt('q', static_cast<int>(c.queued_home_tokens / 64), kChunk);
      queued.avoid_backends = {1, 2};
      route(queued);
    }
    RequestFeatures next = testing::ChunkedPrompt('s', 188, kChunk);  // 12,032 tokens
    next.session_id = "s";
    const RouteTicket s2 = route(next);
    EXPECT_EQ(s2.decision.decode_backend == 0, c.stays);
    EXPECT_EQ(s2.decision.kept_home, c.stays);
    EXPECT_EQ(s2.decision.affinity_hit, c.stays);
    EXPECT_EQ(r->Stats().kept_home, c.stays ? 1 : 0);
    if (c.stays) {
      EXPECT_GE(s2.decision.cached_tokens_est, 9984);
      EXPECT_LT(s2.decision.predicted_ttft_s, 3);
    } else {
      EXPECT_GT(s2.decision.predicted_ttft_s, 11);
    }
  }
}

// Behind a fleet-shared pool each instance keeps its residents in the pool:
// a session swapped out comes back from it by a reload. Until the pool
// evicts it holds everything stored to it (no bound); then each instance
// has its share of what the pool's events say it holds, when that is more
// than its GPU pool.
TEST(RouterKvEvents, ThePoolsShareIsTheResidentsRoom) {
  for (const bool aware : {true, false}) {
    Options o;
    o.chunk_bytes = kChunk;
    o.mode = "baseline";
    o.host_tier.aware = aware;
    o.host_tier.gate_room.mode = GateRoom::Mode::kTier;
    std::vector<BackendSpec> specs{
        {.name = "gpu0", .host = "h", .port = 1, .capacity_tokens = 1000},
        {.name = "gpu1", .host = "h", .port = 2, .capacity_tokens = 1000}};
    std::unique_ptr<Router> r = *Router::Create(o, std::move(specs));
    RequestFeatures f = Prompt('a', 4);
    f.session_id = "a";
    auto capacity = [&] {
      absl::StatusOr<RouteTicket> t = r->Route(f, absl::UnixEpoch());
      EXPECT_TRUE(t.ok()) << t.status();
      r->OnComplete(*t, Outcome{}, absl::UnixEpoch());
      return t->decision.decode_capacity_tokens;
    };
    EXPECT_EQ(capacity(), 1000) << "no pool yet";
    r->ApplyEngineKvEvents(kPoolBackend, std::vector<EngineKvEvent>{{Kind::kStored, 1600}});
    EXPECT_EQ(capacity(), aware ? int64_t{1} << 50 : 1000) << "aware=" << aware;
    r->ApplyEngineKvEvents(kPoolBackend, std::vector<EngineKvEvent>{{Kind::kRemoved, 100}});
    EXPECT_EQ(capacity(), 1000) << "a share of 750 is less than the GPU pool";
    r->ApplyEngineKvEvents(kPoolBackend, std::vector<EngineKvEvent>{{Kind::kStored, 4500}});
    EXPECT_EQ(capacity(), aware ? 3000 : 1000) << "aware=" << aware;
    r->ApplyEngineKvEvents(kPoolBackend, std::vector<EngineKvEvent>{{Kind::kCleared, 0}});
    EXPECT_EQ(capacity(), aware ? int64_t{1} << 50 : 1000) << "a cleared pool is empty, not full";
  }
}

// The engine's timed pool loads teach the instance's pool reload factor,
// apart from its host tier's.
TEST(RouterKvEvents, EngineTimedPoolLoadsTeachThePoolReloadFactor) {
  auto r = Make(1);
  EngineGauges g;
  g.pool_load_bytes_total = 0;
  g.pool_load_seconds_total = 0;
  r->UpdateEngineGauges(0, g);
  // 11 GB at the default 22 GB/s is 0.5 s; the engine took 1 s.
  for (int i = 1; i <= 30; ++i) {
    g.pool_load_bytes_total = i * 11e9;
    g.pool_load_seconds_total = i * 1.0;
    r->UpdateEngineGauges(0, g);
  }
  EXPECT_EQ(r->Report()[0].pool_reload_samples, 30);
  EXPECT_NEAR(r->Report()[0].pool_reload_time_factor, 2.0, 0.02);
  EXPECT_EQ(r->Report()[0].host_reload_samples, 0);
  // A restarted engine's counters re-base, teaching nothing.
  g.pool_load_bytes_total = 0;
  g.pool_load_seconds_total = 0;
  r->UpdateEngineGauges(0, g);
  EXPECT_EQ(r->Report()[0].pool_reload_samples, 30);
}

// A fleet modelled at a tenth of real time times its loads in modelled
// seconds against wall-second bandwidths: the factor compares them in wall
// seconds, so loads at the scaled bandwidth teach a factor of 1.
TEST(RouterKvEvents, EngineTimingsAreScaledToWallSeconds) {
  Options o;
  o.chunk_bytes = kChunk;
  o.host_tier.load_bytes_per_second = 500e9;
  o.host_tier.pool_load_bytes_per_second = 220e9;
  o.host_tier.engine_time_scale = 0.1;
  std::vector<BackendSpec> specs{
      {.name = "gpu0", .host = "h", .port = 1, .capacity_tokens = 100000}};
  std::unique_ptr<Router> r = *Router::Create(o, std::move(specs));
  EngineGauges g;
  g.host_load_bytes_total = 0;
  g.host_load_seconds_total = 0;
  g.pool_load_bytes_total = 0;
  g.pool_load_seconds_total = 0;
  r->UpdateEngineGauges(0, g);
  // 10 GB: 0.2 modelled seconds over the host link at 50 GB/s, 0.02 wall
  // seconds at 500 GB/s; 11 GB over the pool's 22 GB/s takes 1 modelled
  // second, twice its bytes' time.
  for (int i = 1; i <= 30; ++i) {
    g.host_load_bytes_total = i * 10e9;
    g.host_load_seconds_total = i * 0.2;
    g.pool_load_bytes_total = i * 11e9;
    g.pool_load_seconds_total = i * 1.0;
    r->UpdateEngineGauges(0, g);
  }
  EXPECT_NEAR(r->Report()[0].host_reload_time_factor, 1.0, 0.01);
  EXPECT_NEAR(r->Report()[0].pool_reload_time_factor, 2.0, 0.02);
}

TEST(RouterKvEvents, ThePoolMakesAPrefixCachedOnEveryInstanceUntilItsRemovals) {
  for (const bool aware : {true, false}) {
    Options o;
    o.chunk_bytes = kChunk;
    o.mode = "round_robin";
    o.host_tier.aware = aware;
    std::vector<BackendSpec> specs{
        {.name = "gpu0", .host = "h", .port = 1, .capacity_tokens = 100000},
        {.name = "gpu1", .host = "h", .port = 2, .capacity_tokens = 100000}};
    std::unique_ptr<Router> r = *Router::Create(o, std::move(specs));
    EXPECT_EQ(r->Stats().pool_cached_tokens, -1);
    // The pool's first event reveals it.
    r->ApplyEngineKvEvents(kPoolBackend, std::vector<EngineKvEvent>{{Kind::kStored, 64}});
    EXPECT_EQ(r->Stats().pool_cached_tokens, 64);
    const RequestFeatures a = Prompt('a', 4);
    Serve(*r, a);  // computed on gpu0, whose prefill put it to the pool
    EXPECT_EQ(r->Stats().pool_shadow_chunks, 4);
    // gpu1 never computed it: the pool makes it cached there too (round robin
    // routes this one to gpu1), priced as a reload.
    absl::StatusOr<RouteTicket> t = r->Route(a, absl::UnixEpoch());
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->decision.decode_backend, 1);
    EXPECT_EQ(t->decision.cached_tokens_est, aware ? 256 : 0) << "aware=" << aware;
    r->OnComplete(*t, Outcome{}, absl::UnixEpoch());
    // The pool's own removals evict it there, least recently used first.
    r->ApplyEngineKvEvents(kPoolBackend, std::vector<EngineKvEvent>{{Kind::kRemoved, 256}});
    EXPECT_EQ(r->Stats().pool_shadow_chunks, 0);
    EXPECT_EQ(r->Stats().pool_cached_tokens, 0);
    EXPECT_EQ(Matched(*r, a, 0), 256) << "gpu0's own copy stays";
    EXPECT_EQ(Matched(*r, a, 1), 0);
    // A clear empties the pool's shadow; the backends' shadows are untouched.
    Serve(*r, a);
    r->ApplyEngineKvEvents(kPoolBackend, std::vector<EngineKvEvent>{{Kind::kCleared, 0}});
    EXPECT_EQ(r->Stats().pool_shadow_chunks, 0);
    EXPECT_EQ(r->Report()[0].shadow_chunks, 4);
  }
}

}  // namespace
}  // namespace kvroute::router
