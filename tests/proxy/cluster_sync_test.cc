// proxy::ClusterSync over an in-memory store: the router's own load goes out
// by backend name, the peers' summed load comes back into its decisions, and
// a view stale for longer than a lease is dropped (fail open). The Redis
// store itself is tested in tests/cluster/.
#include "proxy/cluster_sync.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "router/prefix_hash.h"
#include "tests/router/policy_test_util.h"

namespace kvroute::proxy {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

// Keeps what it is given; serves the view a test sets.
class MemoryStore : public cluster::ClusterStore {
 public:
  void PublishLoad(cluster::LoadByInstance load) override { published = std::move(load); }
  void PublishRates(cluster::RateByInstance r) override { rates = std::move(r); }
  void PublishHome(std::string session, std::string home) override { homes[session] = home; }
  absl::StatusOr<absl::flat_hash_map<std::string, std::string>> ReadHomes(
      absl::Span<const std::string> sessions) override {
    absl::flat_hash_map<std::string, std::string> out;
    for (const std::string& s : sessions) {
      if (auto it = homes.find(s); it != homes.end()) out[s] = it->second;
    }
    return out;
  }
  std::shared_ptr<const cluster::PeerView> View() const override { return view; }
  // Admits what fits `fill_tokens` beside what is held, as the store's
  // script does (forced: everything else yields).
  absl::StatusOr<cluster::Reservation> Reserve(absl::string_view instance, absl::string_view id,
                                               int64_t tokens, int64_t fill_tokens,
                                               bool force) override {
    if (!reachable) return absl::UnavailableError("unreachable");
    auto& held = reserved[std::string(instance)];
    int64_t others = 0;
    for (const auto& [other, n] : held) others += other == id ? 0 : n;
    cluster::Reservation r;
    if (others > 0 && others + tokens > fill_tokens) {
      if (!force) return cluster::Reservation{.admitted = false, .reserved_tokens = others};
      r.evicted = static_cast<int64_t>(held.size()) - (held.contains(id) ? 1 : 0);
      held.clear();
      others = 0;
    }
    held[std::string(id)] = tokens;
    r.admitted = true;
    r.reserved_tokens = others + tokens;
    return r;
  }
  void Release(std::string instance, std::string id) override {
    released.emplace_back(instance, id);
    reserved[instance].erase(id);
  }
  void PublishPins(std::vector<cluster::RequestPin> pinned,
                   std::vector<uint64_t> unpinned) override {
    for (cluster::RequestPin& p : pinned) pins.push_back(std::move(p));
    for (uint64_t id : unpinned) unpins.push_back(id);
  }
  cluster::PeerPinChanges TakePeerPins() override {
    cluster::PeerPinChanges out = std::exchange(peer_pins, {});
    out.view = view;
    return out;
  }
  bool connected() const override { return reachable; }
  cluster::ClusterStoreStats stats() const override { return {}; }

  std::vector<cluster::RequestPin> pins;
  std::vector<uint64_t> unpins;
  cluster::PeerPinChanges peer_pins;  // handed out by the next TakePeerPins
  cluster::LoadByInstance published;
  cluster::RateByInstance rates;
  absl::flat_hash_map<std::string, std::string> homes;
  absl::flat_hash_map<std::string, absl::flat_hash_map<std::string, int64_t>> reserved;
  std::vector<std::pair<std::string, std::string>> released;
  bool reachable = true;
  std::shared_ptr<const cluster::PeerView> view = std::make_shared<cluster::PeerView>();
};

std::unique_ptr<router::Router> LeastLoaded(int n) {
  router::Options o;
  o.mode = "least_loaded";
  auto r = router::Router::Create(o, router::testing::LoopbackBackends(n));
  EXPECT_TRUE(r.ok()) << r.status();
  return *std::move(r);
}

router::RequestFeatures Req() {
  router::RequestFeatures f;
  f.request_id = "r";
  f.model = "m";
  f.prompt_bytes = "x";
  f.chunk_hashes = router::HashPromptChunks(f.prompt_bytes, 256);
  return f;
}

TEST(ClusterSyncTest, PublishesOwnLoadByNameAndAppliesThePeers) {
  auto store = std::make_shared<MemoryStore>();
  std::unique_ptr<router::Router> router = LeastLoaded(2);
  const std::string gpu0 = (*router->Backends())[0].name;
  const std::string gpu1 = (*router->Backends())[1].name;
  auto sync = ClusterSync::ForStore(store, /*lease_s=*/5, *router);
  ASSERT_TRUE(sync->enabled());

  absl::StatusOr<router::RouteTicket> mine = router->Route(Req(), kT0);
  ASSERT_TRUE(mine.ok());
  ASSERT_EQ(mine->decision.decode_backend, 0);
  // The other replicas carry three requests on gpu1.
  auto view = std::make_shared<cluster::PeerView>();
  view->load[gpu1] = {.requests = 3, .prefill_tokens = 10, .tokens = 100};
  view->synced_at = kT0;
  view->stale = false;
  store->view = view;
  sync->SyncOnce(kT0);
  ASSERT_EQ(store->published.size(), 2u);
  EXPECT_EQ(store->published[gpu0].requests, 1);
  EXPECT_EQ(store->published[gpu1].requests, 0);
  // gpu0 has one (this replica's), gpu1 three (the peers'): gpu0 again.
  absl::StatusOr<router::RouteTicket> next = router->Route(Req(), kT0);
  EXPECT_EQ(next->decision.decode_backend, 0);

  // A turn the store refused waits for room on gpu1: published until it ends.
  sync->BeginWaiting(1);
  sync->SyncOnce(kT0);
  EXPECT_EQ(store->published[gpu1].waiting, 1);
  EXPECT_EQ(store->published[gpu0].waiting, 0);
  sync->EndWaiting(1);
  sync->SyncOnce(kT0);
  EXPECT_EQ(store->published[gpu1].waiting, 0);
}

TEST(ClusterSyncTest, AViewStaleForLongerThanALeaseIsDropped) {
  auto store = std::make_shared<MemoryStore>();
  std::unique_ptr<router::Router> router = LeastLoaded(2);
  const std::string gpu0 = (*router->Backends())[0].name;
  auto sync = ClusterSync::ForStore(store, /*lease_s=*/5, *router);
  auto view = std::make_shared<cluster::PeerView>();
  view->load[gpu0] = {.requests = 10};
  view->synced_at = kT0;
  view->stale = true;  // the store stopped answering after this view
  store->view = view;
  // Within a lease the peers' last load still counts: gpu1 is chosen.
  sync->SyncOnce(kT0 + absl::Seconds(4));
  EXPECT_EQ(router->Route(Req(), kT0)->decision.decode_backend, 1);
  // Past it this replica routes on its own load: gpu0 has none of its own.
  sync->SyncOnce(kT0 + absl::Seconds(6));
  EXPECT_EQ(router->Route(Req(), kT0)->decision.decode_backend, 0);
}

// A request's pin goes out by backend name with the load that counts it; a
// peer's comes back into the shadow, and goes when the peers' load shows no
// request on its instance (its unpin lost on the way).
TEST(ClusterSyncTest, PinsGoOutByNameAndThePeersAreHeldInTheShadow) {
  router::Options o;
  o.mode = "least_loaded";
  o.default_capacity_tokens = 100000;
  auto made_a = router::Router::Create(o, router::testing::LoopbackBackends(2));
  auto made_b = router::Router::Create(o, router::testing::LoopbackBackends(2));
  ASSERT_TRUE(made_a.ok() && made_b.ok());
  std::unique_ptr<router::Router> a = *std::move(made_a);
  std::unique_ptr<router::Router> b = *std::move(made_b);
  auto store_a = std::make_shared<MemoryStore>();
  auto store_b = std::make_shared<MemoryStore>();
  auto sync_a = ClusterSync::ForStore(store_a, /*lease_s=*/5, *a);
  auto sync_b = ClusterSync::ForStore(store_b, /*lease_s=*/5, *b);

  router::RequestFeatures f = Req();
  f.prompt_bytes = std::string(4096, 'p');
  f.chunk_hashes = router::HashPromptChunks(f.prompt_bytes, 256);
  absl::StatusOr<router::RouteTicket> t = a->Route(f, kT0);
  ASSERT_TRUE(t.ok());
  const int slot = t->decision.decode_backend;
  const std::string name = (*a->Backends())[slot].name;
  sync_a->SyncOnce(kT0);
  ASSERT_EQ(store_a->pins.size(), 1u);
  const cluster::RequestPin pin = store_a->pins[0];
  EXPECT_EQ(pin.instance, name);
  EXPECT_GE(pin.footprint_chunks, 16);  // its 4,096-byte prompt at least
  EXPECT_EQ(store_a->published[name].requests, 1);

  auto view = std::make_shared<cluster::PeerView>();
  view->load[name] = store_a->published[name];
  view->live_replicas = {"a", "b"};
  view->synced_at = kT0;
  view->stale = false;
  store_b->view = view;
  store_b->peer_pins.pinned = {{"a", pin}};
  sync_b->SyncOnce(kT0);
  EXPECT_EQ(b->Report()[slot].shadow_reserved_chunks, pin.footprint_chunks);
  EXPECT_EQ(b->Report()[slot].inflight_requests, 0) << "its load is a's, not b's own";

  a->OnComplete(*t, {.ok = true}, kT0);
  sync_a->SyncOnce(kT0);
  EXPECT_EQ(store_a->unpins, std::vector<uint64_t>{pin.id});
  auto idle = std::make_shared<cluster::PeerView>(*view);
  idle->load[name].requests = 0;
  store_b->view = idle;
  sync_b->SyncOnce(kT0);
  EXPECT_EQ(b->Report()[slot].shadow_reserved_chunks, 0);
}

// A session record written by one replica after its turn is read back by
// another, by backend name, into the router's form.
TEST(ClusterSyncTest, ASessionRecordTravelsBetweenReplicasByBackendName) {
  auto store = std::make_shared<MemoryStore>();
  std::unique_ptr<router::Router> a = LeastLoaded(3);
  std::unique_ptr<router::Router> b = LeastLoaded(3);
  auto sync_a = ClusterSync::ForStore(store, 5, *a);
  auto sync_b = ClusterSync::ForStore(store, 5, *b);
  router::RequestFeatures f = Req();
  f.session_id = "s";
  f.prompt_bytes = std::string(1024, 'p');
  f.chunk_hashes = router::HashPromptChunks(f.prompt_bytes, 256);
  absl::StatusOr<router::RouteTicket> t = a->Route(f, kT0);
  ASSERT_TRUE(t.ok());
  a->OnComplete(*t, {.ok = true, .prompt_tokens = 256, .completion_tokens = 10},
                kT0 + absl::Seconds(1));
  sync_a->PublishSession("s", kT0 + absl::Seconds(1));
  ASSERT_TRUE(store->homes.contains("s"));
  std::optional<router::RequestFeatures::PeerSession> read = sync_b->ReadSession("s");
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->backend, t->decision.decode_backend);
  EXPECT_EQ(read->prompt_chunks, 4);
  EXPECT_EQ(read->held_tokens, 266);
  EXPECT_EQ(read->last_chunk_hash, f.chunk_hashes.back());
  EXPECT_EQ(read->finished, kT0 + absl::Seconds(1));
  EXPECT_FALSE(sync_b->ReadSession("unknown").has_value());
  store->homes["bad"] = "gpu9\t1\t2\t3\t4";  // no such backend here
  EXPECT_FALSE(sync_b->ReadSession("bad").has_value());
  store->homes["worse"] = "not a record";
  EXPECT_FALSE(sync_b->ReadSession("worse").has_value());
}

// A held session turn the residency gate admitted reserves its footprint,
// within the instance's fill, under its instance's name; a session that has
// left the gate's residents gives its reservation back at the next sync,
// and one resident again keeps it.
TEST(ClusterSyncTest, AnAdmittedTurnReservesItsRoomAndADepartureReleasesIt) {
  auto store = std::make_shared<MemoryStore>();
  router::Options o;
  o.mode = "baseline";
  o.default_capacity_tokens = 100000;
  auto created = router::Router::Create(o, router::testing::LoopbackBackends(2));
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<router::Router> router = *std::move(created);
  auto sync = ClusterSync::ForStore(store, /*lease_s=*/5, *router);
  sync->SyncOnce(kT0);  // departures are kept from the first sync on

  router::RequestFeatures f = Req();
  f.session_id = "s";
  f.defer_kv_reservation = true;
  f.prompt_bytes = std::string(4096, 'p');
  f.chunk_hashes = router::HashPromptChunks(f.prompt_bytes, 256);
  absl::StatusOr<router::RouteTicket> t = router->Route(f, kT0);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(t->residency_gated);
  ASSERT_EQ(t->residency_wait, 0u);  // nothing else resident: admitted at once
  const router::Router::Dispatched go = router->Dispatch(*t, kT0);
  ASSERT_GT(go.resident_footprint_tokens, 0);
  EXPECT_EQ(go.resident_fill_tokens, static_cast<int64_t>(o.residency.fill * 100000));
  const std::string home = (*router->Backends())[go.decision.decode_backend].name;

  std::optional<cluster::Reservation> r =
      sync->Reserve(go.decision.decode_backend, "s", go.resident_footprint_tokens,
                    go.resident_fill_tokens, /*force=*/false);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->admitted);
  EXPECT_EQ(r->reserved_tokens, go.resident_footprint_tokens);
  EXPECT_EQ(store->reserved[home].at("s"), go.resident_footprint_tokens);
  // A peer's session that fills the instance is refused; forced, it makes
  // this one yield.
  EXPECT_FALSE(sync->Reserve(go.decision.decode_backend, "peer", go.resident_fill_tokens,
                             go.resident_fill_tokens, false)
                   ->admitted);
  router->OnComplete(*t, {.ok = true, .prompt_tokens = 1024, .completion_tokens = 10},
                     kT0 + absl::Seconds(1));

  // Still resident after its turn: nothing is released.
  sync->SyncOnce(kT0 + absl::Seconds(2));
  EXPECT_TRUE(store->released.empty());
  // Idle past the resident window, it leaves its instance's residents, and
  // its reservation goes at the next sync.
  const absl::Time later = kT0 + o.session_resident_window + absl::Seconds(30);
  router->TickResidency(later);
  sync->SyncOnce(later);
  EXPECT_EQ(store->released, (std::vector<std::pair<std::string, std::string>>{{home, "s"}}));
  EXPECT_FALSE(store->reserved[home].contains("s"));

  // The store unreachable: no answer, the local admission stands.
  store->reachable = false;
  EXPECT_FALSE(sync->Reserve(go.decision.decode_backend, "s", 10, 100, false).has_value());
}

// The store's count of a resident session's turns (through every replica)
// reaches the gate with Router::Sent: with turns waiting for the instance,
// the session yields when its quantum is up counted so, not after a
// quantum of turns through this replica alone, and its reservation goes.
TEST(ClusterSyncTest, TheStoresTurnCountEndsAResidentsQuantum) {
  auto store = std::make_shared<MemoryStore>();
  router::Options o;
  o.mode = "baseline";
  o.default_capacity_tokens = 100000;
  auto created = router::Router::Create(o, router::testing::LoopbackBackends(2));
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<router::Router> router = *std::move(created);
  auto sync = ClusterSync::ForStore(store, /*lease_s=*/5, *router);
  sync->SyncOnce(kT0);

  router::RequestFeatures f = Req();
  f.session_id = "s";
  f.defer_kv_reservation = true;
  f.prompt_bytes = std::string(4096, 'p');
  f.chunk_hashes = router::HashPromptChunks(f.prompt_bytes, 256);
  // One turn, sent with `turns` counted before it; true if the session
  // left the instance's residents when it ended.
  const auto turn = [&](int64_t turns, absl::Time at) {
    absl::StatusOr<router::RouteTicket> t = router->Route(f, at);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return false;
    EXPECT_EQ(t->residency_wait, 0u);
    const router::Router::Dispatched go = router->Dispatch(*t, at);
    const int b = go.decision.decode_backend;
    // Another replica's turn waits for room there.
    std::vector<router::PeerLoad> peers(2);
    peers[b].waiting_turns = 1;
    router->SetPeerLoad(peers, at);
    router->Sent(*t, at, turns);
    router->OnComplete(*t, {.ok = true, .prompt_tokens = 1024, .completion_tokens = 10},
                       at + absl::Seconds(1));
    return router->TakeResidencyDepartures().size() == 1;
  };
  EXPECT_FALSE(turn(-1, kT0)) << "its first turn here: a quantum is far off";
  EXPECT_FALSE(turn(o.residency.quantum_turns - 2, kT0 + absl::Seconds(2)));
  EXPECT_TRUE(turn(o.residency.quantum_turns - 1, kT0 + absl::Seconds(4)))
      << "the store counted the turns through other replicas: this one ends its quantum";
}

// The factors this replica learned go out by backend name; the fleet's
// merged factors come back into its predictions.
TEST(ClusterSyncTest, LearnedRatesGoOutByNameAndTheFleetsComeBack) {
  auto store = std::make_shared<MemoryStore>();
  router::Options o = router::testing::PlacementTestOptions();
  o.mode = "baseline";
  o.offload_cost_known = true;
  auto created = router::Router::Create(o, router::testing::LoopbackBackends(2));
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<router::Router> router = *std::move(created);
  const std::string gpu1 = (*router->Backends())[1].name;
  auto sync = ClusterSync::ForStore(store, /*lease_s=*/5, *router);

  // One cold 10,000-token stream on gpu1 (1 s modelled) takes 2 s.
  router::RequestFeatures f = Req();
  f.stream = true;
  f.avoid_backends = {0};
  f.prompt_bytes = std::string(40000, 'c');
  f.chunk_hashes = router::HashPromptChunks(f.prompt_bytes, 256);
  absl::StatusOr<router::RouteTicket> t = router->Route(f, kT0);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->decision.decode_backend, 1);
  router->OnFirstToken(*t, kT0 + absl::Seconds(2));
  router->OnComplete(*t, {.ok = true, .served_by = 1}, kT0 + absl::Seconds(2));
  sync->SyncOnce(kT0 + absl::Seconds(3));
  ASSERT_TRUE(store->rates.contains(gpu1));
  EXPECT_GT(store->rates.at(gpu1), 1.0);
  EXPECT_EQ(store->rates.size(), 1u);  // gpu0 has learned nothing

  auto view = std::make_shared<cluster::PeerView>();
  view->rate_factors[gpu1] = 4.0;
  view->synced_at = kT0 + absl::Seconds(3);
  view->stale = false;
  store->view = view;
  sync->SyncOnce(kT0 + absl::Seconds(3));
  router::RequestFeatures next = f;
  next.prompt_bytes = std::string(40000, 'd');
  next.chunk_hashes = router::HashPromptChunks(next.prompt_bytes, 256);
  absl::StatusOr<router::RouteTicket> u = router->Route(next, kT0 + absl::Seconds(4));
  ASSERT_TRUE(u.ok());
  EXPECT_NEAR(u->decision.predicted_ttft_s, 4.0, 1e-6);
}

}  // namespace
}  // namespace kvroute::proxy
