// Router facade: creation errors, load accounting, health, round_robin and
// least_loaded end to end.
#include "router/router.h"

#include <optional>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "router/prefix_hash.h"
#include "tests/router/policy_test_util.h"

namespace kvroute::router {
namespace {

using testing::LoopbackBackends;

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

std::unique_ptr<Router> Make(const std::string& policy, int n, Options o = {}) {
  o.mode = policy;
  auto r = Router::Create(o, LoopbackBackends(n));
  EXPECT_TRUE(r.ok()) << r.status();
  return *std::move(r);
}

RequestFeatures Req(std::string prompt, std::string session = "") {
  RequestFeatures f;
  f.request_id = "r";
  f.model = "m";
  f.session_id = std::move(session);
  f.prompt_bytes = std::move(prompt);
  f.chunk_hashes = HashPromptChunks(f.prompt_bytes, 256);
  return f;
}

TEST(RouterCreateTest, RejectsUnknownPolicyAndEmptyFleet) {
  Options o;
  o.mode = "fastest";
  absl::StatusOr<std::unique_ptr<Router>> r = Router::Create(o, LoopbackBackends(2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("fastest"), std::string::npos);

  o.mode = "round_robin";
  r = Router::Create(o, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);

  o.mode = "v2";
  o.offload_gate = "maybe";
  r = Router::Create(o, LoopbackBackends(2));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);

  o.mode = "pd_sep";
  o.offload_gate = "threshold";
  r = Router::Create(o, LoopbackBackends(1));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);

  r = Router::Create(o, LoopbackBackends(257));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);

  for (const char* name :
       {"round_robin", "least_loaded", "baseline", "v1", "v1_cost", "v2", "pd_sep"}) {
    o.mode = name;
    EXPECT_TRUE(Router::Create(o, LoopbackBackends(4)).ok()) << name;
  }
}

TEST(RouterTest, RoundRobinCyclesOverHealthy) {
  auto r = Make("round_robin", 3);
  std::vector<int> got;
  for (int i = 0; i < 6; ++i) {
    auto t = r->Route(Req("hello"), kT0);
    ASSERT_TRUE(t.ok());
    got.push_back(t->decision.decode_backend);
    EXPECT_EQ(t->decision.prefill_backend, t->decision.decode_backend);
    EXPECT_EQ(t->decision.mode, DecisionMode::kColocated);
  }
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 0, 1, 2}));
  r->SetHealthy(1, false);
  for (int i = 0; i < 10; ++i) {
    auto t = r->Route(Req("hello"), kT0);
    ASSERT_TRUE(t.ok());
    EXPECT_NE(t->decision.decode_backend, 1);
  }
}

TEST(RouterTest, AllUnhealthyIsUnavailable) {
  for (const char* name :
       {"round_robin", "least_loaded", "baseline", "v1", "v1_cost", "v2", "pd_sep"}) {
    auto r = Make(name, 3);
    for (int i = 0; i < 3; ++i) r->SetHealthy(i, false);
    auto t = r->Route(Req("hello"), kT0);
    ASSERT_FALSE(t.ok()) << name;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kUnavailable) << name;
  }
}

TEST(RouterTest, AvoidBackendsExcludesThemForOneDecision) {
  for (const char* name : {"round_robin", "least_loaded", "baseline", "v1", "v2"}) {
    auto r = Make(name, 3);
    RequestFeatures f = Req(std::string(3000, 'a'), "s1");
    f.avoid_backends = {0, 2};
    for (int i = 0; i < 4; ++i) {
      auto t = r->Route(f, kT0);
      ASSERT_TRUE(t.ok()) << name;
      EXPECT_EQ(t->decision.decode_backend, 1) << name;
      EXPECT_EQ(t->decision.prefill_backend, 1) << name;
    }
    // The avoid list is per request: the next one may use every backend.
    RequestFeatures g = Req("other");
    std::set<int> seen;
    for (int i = 0; i < 6; ++i) {
      auto t = r->Route(g, kT0);
      ASSERT_TRUE(t.ok());
      seen.insert(t->decision.decode_backend);
      r->OnComplete(*t, {.ok = true}, kT0);
    }
    if (std::string(name) == "round_robin") {
      EXPECT_EQ(seen.size(), 3u);
    }
    f.avoid_backends = {0, 1, 2};
    auto none = r->Route(f, kT0);
    ASSERT_FALSE(none.ok()) << name;
    EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable) << name;
  }
}

// Two replicas: what one routes reaches the other as peer load, and the
// other's least_loaded places around it; its own report stays its own.
TEST(RouterTest, PeerLoadFromAnotherReplicaSteersPlacement) {
  auto a = Make("least_loaded", 3);
  auto b = Make("least_loaded", 3);
  std::vector<absl::StatusOr<RouteTicket>> on_a;
  for (int i = 0; i < 4; ++i) on_a.push_back(a->Route(Req("x"), kT0));
  const std::vector<PeerLoad> a_load = a->LocalLoad();
  ASSERT_EQ(a_load.size(), 3u);
  EXPECT_EQ(a_load[0].inflight_requests + a_load[1].inflight_requests + a_load[2].inflight_requests,
            4);
  // A's four requests sit on 0, 1, 2, 0: B, told so, starts on 1.
  b->SetPeerLoad(a_load, kT0);
  auto first = b->Route(Req("y"), kT0);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->decision.decode_backend, 1);
  EXPECT_EQ(b->Report()[1].inflight_requests, 1) << "the report is B's own load";
  EXPECT_EQ(b->Report()[0].inflight_requests, 0);
  // Without peer load B would pick 0 again after one round.
  b->SetPeerLoad({}, kT0);
  auto second = b->Route(Req("y"), kT0);
  EXPECT_EQ(second->decision.decode_backend, 0);
  // Negative figures from a store count as none; a shorter list covers fewer slots.
  PeerLoad negative;
  negative.inflight_requests = -5;
  b->SetPeerLoad({negative}, kT0);
  auto third = b->Route(Req("y"), kT0);
  EXPECT_EQ(third->decision.decode_backend, 2);
}

// A session's turns reach different replicas: the record one replica left
// of the last turn lets the next replica estimate and place as if it had
// routed that turn itself; a record its prompt does not continue, or an
// older one than its own, changes nothing.
// Session "s"'s first turn, `first` (1,024 tokens and 100 of answer),
// routed by one replica at kT0 and completed a second later: that replica's
// record of it.
std::optional<RequestFeatures::PeerSession> FirstTurnRecord(const std::string& first) {
  auto a = Make("baseline", 4);
  absl::StatusOr<RouteTicket> t1 = a->Route(Req(first, "s"), kT0);
  if (!t1.ok()) return std::nullopt;
  a->OnComplete(*t1, {.ok = true, .prompt_tokens = 1024, .completion_tokens = 100},
                kT0 + absl::Seconds(1));
  return a->SessionRecord("s", kT0 + absl::Seconds(1));
}

TEST(RouterTest, APeerSessionRecordCarriesTheSessionsPrefix) {
  auto b = Make("baseline", 4);
  const std::string first(4096, 'p');
  std::optional<RequestFeatures::PeerSession> record = FirstTurnRecord(first);
  ASSERT_TRUE(record.has_value());
  const int home = record->backend;
  EXPECT_EQ(record->prompt_chunks, 16);
  EXPECT_EQ(record->held_tokens, 1124);

  RequestFeatures next = Req(first + std::string(1024, 'q'), "s");
  // Without the record B knows nothing of the session.
  absl::StatusOr<RouteTicket> blind = b->Route(next, kT0 + absl::Seconds(2));
  EXPECT_EQ(blind->decision.cached_tokens_est, 0);
  b->OnComplete(*blind, {.ok = false}, kT0 + absl::Seconds(2));
  // With it, B sends the turn home and counts what the home holds.
  next.peer_session = record;
  absl::StatusOr<RouteTicket> t2 = b->Route(next, kT0 + absl::Seconds(3));
  ASSERT_TRUE(t2.ok());
  EXPECT_EQ(t2->decision.decode_backend, home);
  EXPECT_GE(t2->decision.cached_tokens_est, 1024);
  // A prompt that does not continue the record learns nothing from it.
  auto c = Make("baseline", 4);
  RequestFeatures other = Req(std::string(8192, 'z'), "s");
  other.peer_session = record;
  absl::StatusOr<RouteTicket> t3 = c->Route(other, kT0 + absl::Seconds(3));
  EXPECT_EQ(t3->decision.cached_tokens_est, 0);
}

// The engine's timed KV events since the record's turn ended age what it
// names: evicted since, the prefix is not credited; removals that took only
// what was cached beside it leave it whole.
TEST(RouterTest, APeerRecordOfAPrefixTheEngineEvictedSinceIsNotCredited) {
  const std::string first(4096, 'p');
  const std::optional<RequestFeatures::PeerSession> record = FirstTurnRecord(first);
  ASSERT_TRUE(record.has_value());
  const int home = record->backend;
  using Kind = EngineKvEvent::Kind;
  RequestFeatures next = Req(first + std::string(1024, 'q'), "s");
  next.peer_session = record;

  // 5,000 tokens cached at its end, the session's 1,124 among them; 3,000
  // removed since: all older than it.
  auto b = Make("baseline", 4);
  b->ApplyEngineKvEvents(home, std::vector<EngineKvEvent>{{Kind::kStored, 5000, false, kT0}});
  b->ApplyEngineKvEvents(
      home, std::vector<EngineKvEvent>{{Kind::kRemoved, 3000, false, kT0 + absl::Seconds(2)}});
  absl::StatusOr<RouteTicket> kept = b->Route(next, kT0 + absl::Seconds(3));
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->decision.decode_backend, home);
  EXPECT_GE(kept->decision.cached_tokens_est, 1024);

  // 5,000 removed since: past the 3,876 beside it, the session went too.
  auto c = Make("baseline", 4);
  c->ApplyEngineKvEvents(home, std::vector<EngineKvEvent>{{Kind::kStored, 5000, false, kT0}});
  c->ApplyEngineKvEvents(
      home, std::vector<EngineKvEvent>{{Kind::kRemoved, 5000, false, kT0 + absl::Seconds(2)}});
  absl::StatusOr<RouteTicket> gone = c->Route(next, kT0 + absl::Seconds(3));
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(gone->decision.cached_tokens_est, 0);
}

// A replica's own record of a session's last turn is aged the same way: its
// shadow orders entries by its own traffic alone, so the engine's removals,
// taken oldest first there, may have taken other prompts in its place.
TEST(RouterTest, AReplicasOwnRecordIsAgedByTheEnginesEventsToo) {
  using Kind = EngineKvEvent::Kind;
  const std::string first(4096, 'p');
  // Ten other prompts served first (the oldest entries of the shadow), then
  // the session's first turn; 5,000 tokens cached when it ended, its 1,124
  // among them, then 5,000 removed: the session's went too, while the
  // shadow's oldest entries, the ten other prompts', took the removals.
  // Returns the replica's record of the turn.
  auto serve = [&](Router& r) {
    for (char c = 'a'; c < 'k'; ++c) {
      absl::StatusOr<RouteTicket> t = r.Route(Req(std::string(4096, c)), kT0);
      EXPECT_TRUE(t.ok());
      r.OnComplete(*t, {.ok = true, .prompt_tokens = 1024, .completion_tokens = 1}, kT0);
    }
    absl::StatusOr<RouteTicket> t1 = r.Route(Req(first, "s"), kT0);
    EXPECT_TRUE(t1.ok());
    r.OnComplete(*t1, {.ok = true, .prompt_tokens = 1024, .completion_tokens = 100},
                 kT0 + absl::Seconds(1));
    r.ApplyEngineKvEvents(0, std::vector<EngineKvEvent>{{Kind::kStored, 5000, false, kT0}});
    r.ApplyEngineKvEvents(
        0, std::vector<EngineKvEvent>{{Kind::kRemoved, 5000, false, kT0 + absl::Seconds(2)}});
    return r.SessionRecord("s", kT0 + absl::Seconds(1));
  };
  RequestFeatures next = Req(first + std::string(1024, 'q'), "s");
  auto alone = Make("baseline", 1);
  serve(*alone);
  absl::StatusOr<RouteTicket> shadow_only = alone->Route(next, kT0 + absl::Seconds(3));
  ASSERT_TRUE(shadow_only.ok());
  EXPECT_GE(shadow_only->decision.cached_tokens_est, 1024) << "the shadow alone credits it";
  // With the store's record (its own), the replica ages it and forgets it.
  auto a = Make("baseline", 1);
  next.peer_session = serve(*a);
  ASSERT_TRUE(next.peer_session.has_value());
  absl::StatusOr<RouteTicket> aged = a->Route(next, kT0 + absl::Seconds(3));
  ASSERT_TRUE(aged.ok());
  EXPECT_EQ(aged->decision.cached_tokens_est, 0);
}

TEST(RouterTest, EjectionReleasesInflightLoadOnce) {
  auto r = Make("least_loaded", 2);
  auto a = r->Route(Req("x"), kT0);
  auto b = r->Route(Req("x"), kT0);
  auto c = r->Route(Req("x"), kT0);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_EQ(a->decision.decode_backend, 0);
  ASSERT_EQ(c->decision.decode_backend, 0);
  r->OnFirstToken(*a, kT0);
  EXPECT_EQ(r->Report()[0].inflight_requests, 2);
  EXPECT_EQ(r->Report()[0].decoding_requests, 1);

  r->SetHealthy(0, false);
  EXPECT_EQ(r->Report()[0].inflight_requests, 0);
  EXPECT_EQ(r->Report()[0].decoding_requests, 0);
  EXPECT_EQ(r->Report()[0].inflight_tokens, 0);
  EXPECT_EQ(r->Report()[0].inflight_prefill_tokens, 0);
  EXPECT_EQ(r->Stats().inflight_requests, 3);  // still routed, not completed

  // The ejected backend's requests end later: its counters stay at zero
  // instead of going negative, and the healthy backend's are untouched.
  r->OnFirstToken(*c, kT0);
  r->OnComplete(*a, {.ok = false}, kT0);
  r->OnComplete(*c, {.ok = false}, kT0);
  r->SetHealthy(0, true);
  const auto rep = r->Report();
  EXPECT_EQ(rep[0].inflight_requests, 0);
  EXPECT_EQ(rep[0].decoding_requests, 0);
  EXPECT_EQ(rep[0].inflight_tokens, 0);
  EXPECT_EQ(rep[1].inflight_requests, 1);
  // Requests routed after the return are accounted normally.
  auto d = r->Route(Req("x"), kT0);
  ASSERT_EQ(d->decision.decode_backend, 0);
  EXPECT_EQ(r->Report()[0].inflight_requests, 1);
  r->OnComplete(*d, {.ok = true}, kT0);
  r->OnComplete(*b, {.ok = true}, kT0);
  EXPECT_EQ(r->Report()[0].inflight_requests, 0);
  EXPECT_EQ(r->Report()[1].inflight_requests, 0);
  EXPECT_EQ(r->Stats().inflight_requests, 0);
}

TEST(RouterTest, UpdateBackendsKeepsSlotsAddsAndRetires) {
  auto r = Make("least_loaded", 2);
  const std::string prompt(4096, 'p');
  auto t = r->Route(Req(prompt), kT0);  // gpu0
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->decision.decode_backend, 0);
  r->OnComplete(*t, {.ok = true, .prompt_tokens = 1024}, kT0);
  auto held = r->Route(Req("x"), kT0);  // in flight on gpu0 across the reload
  ASSERT_EQ(held->decision.decode_backend, 0);
  const int64_t shadow0 = r->Report()[0].shadow_tokens;
  ASSERT_GT(shadow0, 0);
  auto before = r->Backends();

  std::vector<BackendSpec> next = LoopbackBackends(2);
  next[0].capacity_tokens = 12345;  // same address: kept, capacity updated
  next[1].port = 9999;              // gpu1 moved: a new slot
  next.push_back({.name = "gpu9", .host = "127.0.0.1", .port = 8109});
  ASSERT_TRUE(r->UpdateBackends(next).ok());

  auto after = r->Backends();
  ASSERT_EQ(after->size(), 4u);  // gpu0, retired gpu1, gpu1@9999, gpu9
  EXPECT_EQ(before->size(), 2u) << "a snapshot handed out never changes";
  EXPECT_EQ((*after)[0].capacity_tokens, 12345);
  EXPECT_FALSE((*after)[0].retired);
  EXPECT_TRUE((*after)[1].retired);
  EXPECT_EQ((*after)[2].name, "gpu1");
  EXPECT_EQ((*after)[2].port, 9999);
  EXPECT_EQ((*after)[3].name, "gpu9");
  const auto rep = r->Report();
  EXPECT_EQ(rep[0].shadow_tokens, shadow0) << "kept backends keep their shadow";
  EXPECT_EQ(rep[0].inflight_requests, 1) << "and their load";
  EXPECT_TRUE(rep[1].retired);
  EXPECT_FALSE(rep[1].healthy);

  // The retired slot is never routed and never re-admitted.
  r->SetHealthy(1, true);
  std::set<int> seen;
  for (int i = 0; i < 9; ++i) {
    auto u = r->Route(Req("y"), kT0);
    ASSERT_TRUE(u.ok());
    seen.insert(u->decision.decode_backend);
  }
  EXPECT_EQ(seen, (std::set<int>{0, 2, 3}));
  const int64_t inflight0 = r->Report()[0].inflight_requests;
  r->OnComplete(*held, {.ok = true}, kT0);  // routed before the reload, still accounted
  EXPECT_EQ(r->Report()[0].inflight_requests, inflight0 - 1);

  // Invalid lists change nothing.
  EXPECT_EQ(r->UpdateBackends({}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r->Backends()->size(), 4u);
}

TEST(RouterTest, UpdateBackendsIsBoundedBySlots) {
  auto r = Make("round_robin", 1);
  std::vector<BackendSpec> next = LoopbackBackends(1);
  for (int i = 0; i < kMaxBackends - 1; ++i) {
    next.push_back({.name = "n" + std::to_string(i), .host = "h", .port = 1});
  }
  ASSERT_TRUE(r->UpdateBackends(next).ok());
  next.push_back({.name = "one_too_many", .host = "h", .port = 2});
  absl::Status st = r->UpdateBackends(next);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("slots"), std::string::npos);
  EXPECT_EQ(r->Backends()->size(), static_cast<size_t>(kMaxBackends));
}

TEST(RouterTest, LeastLoadedFollowsInflightRequests) {
  auto r = Make("least_loaded", 3);
  auto a = r->Route(Req("x"), kT0);  // all idle: lowest index
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->decision.decode_backend, 0);
  auto b = r->Route(Req("x"), kT0);
  EXPECT_EQ(b->decision.decode_backend, 1);
  auto c = r->Route(Req("x"), kT0);
  EXPECT_EQ(c->decision.decode_backend, 2);
  r->OnComplete(*b, {.ok = true}, kT0);
  auto d = r->Route(Req("x"), kT0);
  EXPECT_EQ(d->decision.decode_backend, 1);
}

TEST(RouterTest, LoadAccountingThroughTheLifecycle) {
  Options o;
  o.default_bytes_per_token = 4.0;
  o.default_output_tokens = 100;
  auto r = Make("least_loaded", 2, o);
  RequestFeatures f = Req(std::string(4000, 'a'));  // 1000 tokens est
  auto t = r->Route(f, kT0);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->decision.prompt_tokens_est, 1000);
  EXPECT_EQ(t->decision.cached_tokens_est, 0);
  EXPECT_EQ(t->decision.new_tokens_est, 1000);
  EXPECT_EQ(t->decision.request_class, RequestClass::kWarm);  // < 5000 new

  std::vector<BackendReport> rep = r->Report();
  ASSERT_EQ(rep.size(), 2u);
  EXPECT_EQ(rep[0].name, "gpu0");
  EXPECT_EQ(rep[0].inflight_requests, 1);
  EXPECT_EQ(rep[0].inflight_prefill_tokens, 1000);
  EXPECT_EQ(rep[0].decoding_requests, 0);
  EXPECT_EQ(rep[0].inflight_tokens, 1100);
  EXPECT_EQ(rep[1].inflight_requests, 0);

  r->OnFirstToken(*t, kT0);
  r->OnFirstToken(*t, kT0);  // idempotent
  rep = r->Report();
  EXPECT_EQ(rep[0].inflight_prefill_tokens, 0);
  EXPECT_EQ(rep[0].decoding_requests, 1);
  EXPECT_EQ(rep[0].inflight_tokens, 1100);

  r->OnComplete(*t, {.ok = true, .prompt_tokens = 1000, .cached_tokens = 0, .served_by = 0}, kT0);
  r->OnComplete(*t, {.ok = true}, kT0);  // a second completion is ignored
  rep = r->Report();
  EXPECT_EQ(rep[0].inflight_requests, 0);
  EXPECT_EQ(rep[0].decoding_requests, 0);
  EXPECT_EQ(rep[0].inflight_tokens, 0);
  EXPECT_EQ(rep[0].inflight_prefill_tokens, 0);
  EXPECT_EQ(r->Stats().inflight_requests, 0);
}

TEST(RouterTest, CompletionWithoutFirstTokenReleasesPrefill) {
  auto r = Make("least_loaded", 1);
  auto t = r->Route(Req(std::string(4000, 'a')), kT0);
  ASSERT_TRUE(t.ok());
  r->OnComplete(*t, {.ok = false}, kT0);
  const BackendReport rep = r->Report()[0];
  EXPECT_EQ(rep.inflight_requests, 0);
  EXPECT_EQ(rep.inflight_prefill_tokens, 0);
  EXPECT_EQ(rep.inflight_tokens, 0);
  EXPECT_EQ(rep.shadow_chunks, 0);  // never prefilled: nothing cached
}

TEST(RouterTest, InflightBoundIsResourceExhausted) {
  Options o;
  o.max_inflight_requests = 2;
  auto r = Make("round_robin", 2, o);
  auto a = r->Route(Req("x"), kT0);
  auto b = r->Route(Req("x"), kT0);
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = r->Route(Req("x"), kT0);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  r->OnComplete(*a, {}, kT0);
  EXPECT_TRUE(r->Route(Req("x"), kT0).ok());
}

TEST(RouterTest, GaugesAreReported) {
  auto r = Make("round_robin", 2);
  r->UpdateEngineGauges(1, {.num_requests_running = 3,
                            .num_requests_waiting = 2,
                            .kv_cache_usage_perc = 0.5,
                            .capacity_tokens = 1000});
  std::vector<BackendReport> rep = r->Report();
  EXPECT_EQ(rep[1].engine_running, 3);
  EXPECT_EQ(rep[1].engine_waiting, 2);
  EXPECT_DOUBLE_EQ(rep[1].kv_usage, 0.5);
  EXPECT_EQ(rep[1].capacity_tokens, 1000);
  EXPECT_EQ(rep[0].capacity_tokens, 400000);  // Options default
  // A later scrape without capacity keeps the known one.
  r->UpdateEngineGauges(1, {.num_requests_running = 1});
  EXPECT_EQ(r->Report()[1].capacity_tokens, 1000);
}

}  // namespace
}  // namespace kvroute::router

namespace kvroute::router {
namespace {

TEST(RouterTest, ErrorResponseWithFirstByteCachesNothing) {
  auto r = Make("least_loaded", 1);
  auto t = r->Route(Req(std::string(4000, 'a')), kT0);
  ASSERT_TRUE(t.ok());
  r->OnFirstToken(*t, kT0);  // e.g. a 404 body
  r->OnComplete(*t, {.ok = false, .served_by = 0}, kT0);
  EXPECT_EQ(r->Report()[0].shadow_chunks, 0);
  EXPECT_EQ(r->Report()[0].decoding_requests, 0);
}

}  // namespace
}  // namespace kvroute::router
