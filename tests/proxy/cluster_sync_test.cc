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
  void PublishRates(cluster::RateByInstance) override {}
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
  absl::StatusOr<bool> Reserve(absl::string_view, absl::string_view, int64_t, int64_t) override {
    return absl::UnavailableError("not in this test");
  }
  void Release(std::string, std::string) override {}
  bool connected() const override { return true; }
  cluster::ClusterStoreStats stats() const override { return {}; }

  cluster::LoadByInstance published;
  absl::flat_hash_map<std::string, std::string> homes;
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

}  // namespace
}  // namespace kvroute::proxy
