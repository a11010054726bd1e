// proxy::ClusterSync: this kvroute replica's side of the cluster store
// (cluster/store.h, docs/design.md "Several replicas: the cluster store"):
// every cluster.sync_interval_s it publishes the router's own in-flight
// load, resident sessions and learned prefill time factors per backend and
// hands the other live replicas' load and residents, and every replica's
// factors merged, to the router (Router::SetPeerLoad), so each replica
// places requests on the fleet's whole load, not its share of it, predicts
// with what every replica learned, and its residency gate fills each
// instance with every replica's sessions. The requests each replica has in
// flight are pinned in every replica's shadow index (Router::ShadowPin), so
// each predicts the evictions the whole fleet's requests make before an
// engine admits the next turn. Its state is on /metrics
// (kvroute_cluster_*).
//
//   absl::StatusOr<std::unique_ptr<ClusterSync>> sync =
//       ClusterSync::Start(config, server.router(), server.registry());
//   ...
//   (*sync)->Stop();   // also the destructor
//
// With `cluster.store: none` it starts nothing and the router sees no peer
// load. While the store is unreachable the router keeps the peers' last
// load until it is older than cluster.lease_s, then routes on its own
// (fails open); the store's own log line says so, and
// kvroute_cluster_store_up reads 0.
//
// Thread-safety: Start/Stop from the controlling thread; the loop runs on
// its own thread; the metrics collector on any. `router` and `registry`
// must outlive it.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cluster/store.h"
#include "proxy/config.h"
#include "proxy/metrics.h"
#include "router/router.h"

namespace kvroute::proxy {

class ClusterSync {
 public:
  // InvalidArgument naming `cluster.store` when the store cannot be set up
  // (an unreachable store is not an error: the replica starts alone).
  static absl::StatusOr<std::unique_ptr<ClusterSync>> Start(const Config& config,
                                                            router::Router& router,
                                                            metrics::Registry& registry);
  // For tests: the same over a given store, with no thread of its own
  // (drive it with SyncOnce); `interval_s` is retry_interval_s().
  static std::unique_ptr<ClusterSync> ForStore(std::shared_ptr<cluster::ClusterStore> store,
                                               double lease_s, router::Router& router,
                                               double interval_s = 0.01);
  ~ClusterSync();
  ClusterSync(const ClusterSync&) = delete;
  ClusterSync& operator=(const ClusterSync&) = delete;

  void Stop();
  // One cycle: publish the router's load, apply the peers'. `now` judges
  // the peers' view's age.
  void SyncOnce(absl::Time now);
  bool enabled() const { return store_ != nullptr; }

  // Session records (a round-robin balancer sends a session's turns to
  // different replicas): the record another replica left of `session`'s
  // last completed turn, read from the store on the caller's thread (one
  // round trip, bounded by cluster.op_timeout_s; nullopt at once while the
  // store is unreachable, or when none is there); and this replica's record
  // after a turn completes, queued for the next flush.
  std::optional<router::RequestFeatures::PeerSession> ReadSession(const std::string& session);
  void PublishSession(const std::string& session, absl::Time now);

  // Residency admission across replicas: a session turn this replica's
  // residency gate admitted on `backend` reserves its footprint there in
  // the store, within `fill_tokens` of every replica's reservations
  // (cluster::ClusterStore::Reserve; `force`: its wait ran out, others
  // yield). The sessions that left this replica's residents since are
  // given back first. One round trip on the caller's thread; nullopt at
  // once while the store is unreachable or on a store error (the local
  // admission stands: fail open).
  std::optional<cluster::Reservation> Reserve(int backend, const std::string& session,
                                              int64_t footprint_tokens, int64_t fill_tokens,
                                              bool force);
  // How long a refused turn waits before asking again: one sync interval,
  // in which the peers' releases are written.
  double retry_interval_s() const { return interval_s_; }
  // A turn the store refused waits for room on `backend` from Begin to End
  // (AwaitClusterAdmission): published with the load, so every replica's
  // gate frees room there as it does for its own waiters.
  void BeginWaiting(int backend);
  void EndWaiting(int backend);

 private:
  ClusterSync(std::shared_ptr<cluster::ClusterStore> store, double lease_s, double interval_s,
              router::Router& router);
  void Run();
  // Queues the release of the reservations of the sessions that left this
  // replica's residents (Router::TakeResidencyDepartures).
  void ReleaseDepartures();
  // Publishes this replica's shadow pins changed since the last cycle and
  // applies the other replicas' (Router::ApplyPeerShadowPins).
  void SharePins(const std::vector<router::BackendSpec>& specs, absl::Time now);

  // Shared with the metrics collector, which may outlive this object.
  std::shared_ptr<cluster::ClusterStore> store_;
  const double lease_s_;
  const double interval_s_;
  router::Router& router_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mu_
  // This replica's refused turns waiting, by backend slot.
  absl::Mutex waiting_mu_;
  absl::flat_hash_map<int, int64_t> waiting_ ABSL_GUARDED_BY(waiting_mu_);
};

}  // namespace kvroute::proxy
