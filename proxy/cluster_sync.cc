#include "proxy/cluster_sync.h"

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cluster/redis_store.h"
#include "spdlog/spdlog.h"

namespace kvroute::proxy {
namespace {

void RenderCounter(std::string* out, const char* name, const char* help, double v) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n", name, " ", v,
                  "\n");
}

// What the metrics collector renders on each scrape.
void RenderClusterMetrics(const cluster::ClusterStore& store, const router::Router& router,
                          std::string* out) {
  const cluster::ClusterStoreStats s = store.stats();
  const std::shared_ptr<const cluster::PeerView> view = store.View();
  metrics::RenderGaugeHeader(out, "kvroute_cluster_store_up",
                             "1 while the cluster store answers; 0: this replica routes on its "
                             "own state (fail open).");
  metrics::RenderSample(out, "kvroute_cluster_store_up", {}, s.connected ? 1 : 0);
  metrics::RenderGaugeHeader(out, "kvroute_cluster_live_replicas",
                             "kvroute replicas with a live lease in the store at the last sync, "
                             "this one included.");
  metrics::RenderSample(out, "kvroute_cluster_live_replicas", {},
                        static_cast<double>(view->live_replicas.size()));
  RenderCounter(out, "kvroute_cluster_syncs_total",
                "Pulls of the other replicas' state from the cluster store.",
                static_cast<double>(s.syncs));
  RenderCounter(out, "kvroute_cluster_sync_failures_total",
                "Sync cycles that failed: the store unreachable or an error reply.",
                static_cast<double>(s.sync_failures));
  RenderCounter(out, "kvroute_cluster_writes_dropped_total",
                "Writes to the cluster store dropped at cluster.max_pending_writes.",
                static_cast<double>(s.writes_dropped));
  metrics::RenderGaugeHeader(out, "kvroute_cluster_peer_inflight_requests",
                             "Requests the other replicas have in flight on the backend, as of "
                             "the last sync.");
  const std::shared_ptr<const std::vector<router::BackendSpec>> specs = router.Backends();
  for (const router::BackendSpec& b : *specs) {
    if (b.retired) continue;
    const auto it = view->load.find(b.name);
    metrics::RenderSample(out, "kvroute_cluster_peer_inflight_requests", {{"backend", b.name}},
                          it == view->load.end() ? 0 : static_cast<double>(it->second.requests));
  }
}

}  // namespace

ClusterSync::ClusterSync(std::shared_ptr<cluster::ClusterStore> store, double lease_s,
                         double interval_s, router::Router& router)
    : store_(std::move(store)), lease_s_(lease_s), interval_s_(interval_s), router_(router) {}

absl::StatusOr<std::unique_ptr<ClusterSync>> ClusterSync::Start(const Config& config,
                                                                router::Router& router,
                                                                metrics::Registry& registry) {
  const cluster::ClusterOptions& o = config.cluster;
  absl::StatusOr<cluster::StoreAddress> address = cluster::ParseStoreUrl(o.store);
  if (!address.ok()) return address.status();
  if (address->none) {
    return std::unique_ptr<ClusterSync>(
        new ClusterSync(nullptr, o.lease_s, o.sync_interval_s, router));
  }
  absl::StatusOr<std::unique_ptr<cluster::RedisStore>> store = cluster::RedisStore::Create(o);
  if (!store.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cluster.store: ", store.status().message()));
  }
  std::shared_ptr<cluster::ClusterStore> shared(*std::move(store));
  std::unique_ptr<ClusterSync> sync(new ClusterSync(shared, o.lease_s, o.sync_interval_s, router));
  registry.AddCollector(
      [shared, &router](std::string* out) { RenderClusterMetrics(*shared, router, out); });
  spdlog::info("cluster: replica {} sharing load through {} every {} s", o.replica_id, o.store,
               o.sync_interval_s);
  sync->thread_ = std::thread([raw = sync.get()] { raw->Run(); });
  return sync;
}

std::unique_ptr<ClusterSync> ClusterSync::ForStore(std::shared_ptr<cluster::ClusterStore> store,
                                                   double lease_s, router::Router& router) {
  return std::unique_ptr<ClusterSync>(new ClusterSync(std::move(store), lease_s, 0, router));
}

ClusterSync::~ClusterSync() { Stop(); }

void ClusterSync::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ClusterSync::Run() {
  const auto period = std::chrono::duration<double>(interval_s_);
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (wake_.wait_for(lock, period, [this] { return stopping_; })) return;
    }
    SyncOnce(absl::Now());
  }
}

void ClusterSync::SyncOnce(absl::Time now) {
  if (store_ == nullptr) return;
  const std::shared_ptr<const std::vector<router::BackendSpec>> specs = router_.Backends();
  const std::vector<router::PeerLoad> own = router_.LocalLoad();
  cluster::LoadByInstance publish;
  for (size_t b = 0; b < specs->size() && b < own.size(); ++b) {
    if ((*specs)[b].retired) continue;
    publish[(*specs)[b].name] = {.requests = own[b].inflight_requests,
                                 .prefill_tokens = own[b].inflight_prefill_tokens,
                                 .tokens = own[b].inflight_tokens,
                                 .decoding_requests = own[b].decoding_requests,
                                 .residents = own[b].resident_sessions};
  }
  store_->PublishLoad(std::move(publish));

  // The peers' load, unless the store has been unreachable for longer than
  // a lease: their requests have ended or been retried since, and this
  // replica routes on its own state.
  const std::shared_ptr<const cluster::PeerView> view = store_->View();
  std::vector<router::PeerLoad> peers;
  if (!view->stale || now - view->synced_at <= absl::Seconds(lease_s_)) {
    peers.resize(specs->size());
    for (size_t b = 0; b < specs->size(); ++b) {
      if ((*specs)[b].retired) continue;
      if (const auto it = view->load.find((*specs)[b].name); it != view->load.end()) {
        router::PeerLoad& p = peers[b];
        p.inflight_requests = it->second.requests;
        p.inflight_prefill_tokens = it->second.prefill_tokens;
        p.decoding_requests = it->second.decoding_requests;
        p.inflight_tokens = it->second.tokens;
      }
      if (const auto it = view->residents.find((*specs)[b].name); it != view->residents.end()) {
        peers[b].resident_sessions.assign(it->second.begin(), it->second.end());
      }
    }
  }
  router_.SetPeerLoad(std::move(peers), now);
}

}  // namespace kvroute::proxy
