// Several replicas' shadows: a replica records the pins its requests take
// and give back (Router::TakeShadowPinChanges), and pins the other replicas'
// requests in its own shadow as if it had routed them
// (Router::ApplyPeerShadowPins), dropping those that can no longer be live.
// Pure: no store (tests/proxy/cluster_sync_test.cc and
// tests/cluster/redis_store_test.cc carry them between replicas).
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "router/router.h"
#include "tests/router/policy_test_util.h"

namespace kvroute::router {
namespace {

constexpr size_t kChunk = 256;  // 64 tokens at the default 4 bytes per token

// One backend whose KV pool holds 64 chunks.
std::unique_ptr<Router> Make() {
  Options o;
  o.mode = "least_loaded";
  o.chunk_bytes = kChunk;
  auto r = Router::Create(
      o, {{.name = "gpu0", .host = "127.0.0.1", .port = 8100, .capacity_tokens = 64 * 64}});
  EXPECT_TRUE(r.ok()) << r.status();
  return *std::move(r);
}

void Serve(Router& r, const RequestFeatures& f) {
  absl::StatusOr<RouteTicket> t = r.Route(f, absl::UnixEpoch());
  ASSERT_TRUE(t.ok()) << t.status();
  r.OnComplete(*t, {.ok = true}, absl::UnixEpoch());
}

TEST(RouterPeerPins, ARequestsPinIsRecordedWhileSharingAndGivenBackAtItsEnd) {
  auto r = Make();
  const RequestFeatures p = testing::ChunkedPrompt('p', 4, kChunk);
  Serve(*r, p);
  absl::StatusOr<RouteTicket> before = r->Route(p, absl::UnixEpoch());
  ASSERT_TRUE(before.ok());
  r->ShareShadowPins();
  EXPECT_TRUE(r->TakeShadowPinChanges().pinned.empty()) << "nothing recorded before sharing";
  r->OnComplete(*before, {.ok = true}, absl::UnixEpoch());
  EXPECT_TRUE(r->TakeShadowPinChanges().unpinned.empty()) << "a pin never shared is not given back";

  absl::StatusOr<RouteTicket> t = r->Route(p, absl::UnixEpoch());
  ASSERT_TRUE(t.ok());
  ShadowPinChanges changes = r->TakeShadowPinChanges();
  ASSERT_EQ(changes.pinned.size(), 1u);
  const ShadowPin pin = changes.pinned[0];
  EXPECT_EQ(pin.backend, 0);
  EXPECT_EQ(pin.chain, p.chunk_hashes) << "the cached prefix it reuses";
  EXPECT_EQ(pin.footprint_chunks,
            r->Report()[0].shadow_pinned_chunks + r->Report()[0].shadow_reserved_chunks);
  EXPECT_GT(pin.footprint_chunks, 4) << "its prompt and its answer";
  EXPECT_TRUE(changes.unpinned.empty());
  r->OnComplete(*t, {.ok = true}, absl::UnixEpoch());
  changes = r->TakeShadowPinChanges();
  EXPECT_TRUE(changes.pinned.empty());
  EXPECT_EQ(changes.unpinned, std::vector<uint64_t>{pin.id});

  // Taken and given back between two calls: in neither.
  Serve(*r, p);
  changes = r->TakeShadowPinChanges();
  EXPECT_TRUE(changes.pinned.empty());
  EXPECT_TRUE(changes.unpinned.empty());
}

TEST(RouterPeerPins, APeersRequestHoldsItsPrefixAndEvictsForItsFootprint) {
  auto r = Make();
  const RequestFeatures p = testing::ChunkedPrompt('p', 4, kChunk);
  const RequestFeatures q = testing::ChunkedPrompt('q', 4, kChunk);
  Serve(*r, p);
  Serve(*r, q);
  ASSERT_EQ(r->Report()[0].shadow_chunks, 8);

  // Another replica's turn reuses p and needs 62 chunks in all: the two
  // free entries left beside it are q's head, q's tail evicted.
  const ShadowPin theirs{.id = 2, .backend = 0, .footprint_chunks = 62, .chain = p.chunk_hashes};
  r->ApplyPeerShadowPins({.pinned = {{"a", theirs}}});
  BackendReport rep = r->Report()[0];
  EXPECT_EQ(rep.shadow_pinned_chunks, 4);
  EXPECT_EQ(rep.shadow_reserved_chunks, 58);
  EXPECT_EQ(rep.shadow_chunks, 6);
  // A replay of the same pin changes nothing.
  r->ApplyPeerShadowPins({.pinned = {{"a", theirs}}});
  EXPECT_EQ(r->Report()[0].shadow_reserved_chunks, 58);

  // Its end frees p's chunks as the engine does; the reservation goes.
  r->ApplyPeerShadowPins({.unpinned = {{"a", 2}}});
  rep = r->Report()[0];
  EXPECT_EQ(rep.shadow_pinned_chunks, 0);
  EXPECT_EQ(rep.shadow_reserved_chunks, 0);
  EXPECT_EQ(rep.shadow_chunks, 6);
  // Unknown ids and backends are ignored.
  r->ApplyPeerShadowPins({.pinned = {{"a", {.id = 4, .backend = 3, .footprint_chunks = 8}}},
                          .unpinned = {{"a", 2}, {"b", 9}}});
  EXPECT_EQ(r->Report()[0].shadow_reserved_chunks, 0);
}

TEST(RouterPeerPins, PinsThatCanNoLongerBeLiveAreDropped) {
  auto r = Make();
  auto pin = [](uint64_t id) {
    return ShadowPin{.id = id, .backend = 0, .footprint_chunks = 2, .chain = {}};
  };
  r->ApplyPeerShadowPins({.pinned = {{"a", pin(2)}, {"c", pin(2)}, {"c", pin(4)}}});
  EXPECT_EQ(r->Report()[0].shadow_reserved_chunks, 6);
  // Replica a's lease is gone.
  r->ApplyPeerShadowPins({.live_replicas = std::vector<std::string>{"b", "c"}});
  EXPECT_EQ(r->Report()[0].shadow_reserved_chunks, 4);
  // The peers' load shows no request on gpu0: an unpin was lost; the pin
  // that comes with that reading was written after it and stays.
  r->ApplyPeerShadowPins({.idle_backends = {0}, .pinned = {{"c", pin(6)}}});
  EXPECT_EQ(r->Report()[0].shadow_reserved_chunks, 2);
  // The store lost changes: start afresh.
  r->ApplyPeerShadowPins({.reset = true});
  EXPECT_EQ(r->Report()[0].shadow_reserved_chunks, 0);
}

}  // namespace
}  // namespace kvroute::router
