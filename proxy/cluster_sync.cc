#include "proxy/cluster_sync.h"

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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
  absl::StrAppend(out,
                  "# HELP kvroute_cluster_reservations_total Residency admissions asked of the "
                  "cluster store, by what it answered: admitted (forced ones included), refused "
                  "(the instance full across replicas), forced (others yielded to a turn whose "
                  "wait ran out), unavailable (no answer: admitted on local state).\n"
                  "# TYPE kvroute_cluster_reservations_total counter\n");
  for (const auto& [outcome, n] : {std::pair{"admitted", s.reserve_admitted},
                                   {"refused", s.reserve_refused},
                                   {"forced", s.reserve_forced},
                                   {"unavailable", s.reserve_unavailable}}) {
    metrics::RenderSample(out, "kvroute_cluster_reservations_total", {{"outcome", outcome}},
                          static_cast<double>(n));
  }
  RenderCounter(out, "kvroute_cluster_reservations_evicted_total",
                "Reservations that yielded to a forced admission.",
                static_cast<double>(s.reserve_evicted));
  RenderCounter(out, "kvroute_cluster_admitted_over_fill_total",
                "New admissions that left an instance's reservations, every replica's, beyond "
                "its fill beside others' (a session larger than the fill on its own, or a "
                "resident's growing context, is none): 0 unless something is wrong.",
                static_cast<double>(s.reserve_over_fill));
  metrics::RenderGaugeHeader(out, "kvroute_cluster_peer_shadow_pins",
                             "The other replicas' requests in flight held in this replica's "
                             "shadow index, as of the last sync.");
  metrics::RenderSample(out, "kvroute_cluster_peer_shadow_pins", {},
                        static_cast<double>(router.Stats().peer_shadow_pins));
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

// A session record in the store: "<instance>\t<last chunk hash>\t<prompt
// chunks>\t<held tokens>\t<finished, Unix µs>".
std::string FormatSession(const std::string& instance,
                          const router::RequestFeatures::PeerSession& p) {
  return absl::StrCat(instance, "\t", p.last_chunk_hash, "\t", p.prompt_chunks, "\t", p.held_tokens,
                      "\t", absl::ToUnixMicros(p.finished));
}

bool ParseSession(absl::string_view text, std::string* instance,
                  router::RequestFeatures::PeerSession* p) {
  std::vector<absl::string_view> f = absl::StrSplit(text, '\t');
  int64_t finished_us = 0;
  if (f.size() != 5 || !absl::SimpleAtoi(f[1], &p->last_chunk_hash) ||
      !absl::SimpleAtoi(f[2], &p->prompt_chunks) || !absl::SimpleAtoi(f[3], &p->held_tokens) ||
      !absl::SimpleAtoi(f[4], &finished_us)) {
    return false;
  }
  *instance = std::string(f[0]);
  p->finished = absl::FromUnixMicros(finished_us);
  return true;
}

}  // namespace

std::optional<router::RequestFeatures::PeerSession> ClusterSync::ReadSession(
    const std::string& session) {
  if (store_ == nullptr || session.empty() || !store_->connected()) return std::nullopt;
  absl::StatusOr<absl::flat_hash_map<std::string, std::string>> homes =
      store_->ReadHomes({session});
  if (!homes.ok()) return std::nullopt;
  const auto it = homes->find(session);
  if (it == homes->end()) return std::nullopt;
  std::string instance;
  router::RequestFeatures::PeerSession p;
  if (!ParseSession(it->second, &instance, &p)) return std::nullopt;
  const std::shared_ptr<const std::vector<router::BackendSpec>> specs = router_.Backends();
  for (size_t b = 0; b < specs->size(); ++b) {
    if (!(*specs)[b].retired && (*specs)[b].name == instance) {
      p.backend = static_cast<int>(b);
      return p;
    }
  }
  return std::nullopt;  // an instance this replica does not route to
}

void ClusterSync::PublishSession(const std::string& session, absl::Time now) {
  if (store_ == nullptr || session.empty()) return;
  const std::optional<router::RequestFeatures::PeerSession> p = router_.SessionRecord(session, now);
  if (!p) return;
  const std::shared_ptr<const std::vector<router::BackendSpec>> specs = router_.Backends();
  if (p->backend < 0 || p->backend >= static_cast<int>(specs->size())) return;
  store_->PublishHome(session, FormatSession((*specs)[p->backend].name, *p));
}

std::optional<cluster::Reservation> ClusterSync::Reserve(int backend, const std::string& session,
                                                         int64_t footprint_tokens,
                                                         int64_t fill_tokens, bool force) {
  if (store_ == nullptr || session.empty() || !store_->connected()) return std::nullopt;
  const std::shared_ptr<const std::vector<router::BackendSpec>> specs = router_.Backends();
  if (backend < 0 || backend >= static_cast<int>(specs->size())) return std::nullopt;
  ReleaseDepartures();
  absl::StatusOr<cluster::Reservation> r =
      store_->Reserve((*specs)[backend].name, session, footprint_tokens, fill_tokens, force);
  if (!r.ok()) return std::nullopt;
  return *r;
}

void ClusterSync::BeginWaiting(int backend) {
  absl::MutexLock lock(&waiting_mu_);
  ++waiting_[backend];
}

void ClusterSync::EndWaiting(int backend) {
  absl::MutexLock lock(&waiting_mu_);
  if (auto it = waiting_.find(backend); it != waiting_.end() && --it->second <= 0) {
    waiting_.erase(it);
  }
}

void ClusterSync::ReleaseDepartures() {
  std::vector<std::pair<int, std::string>> departed = router_.TakeResidencyDepartures();
  if (departed.empty()) return;
  const std::shared_ptr<const std::vector<router::BackendSpec>> specs = router_.Backends();
  for (auto& [backend, session] : departed) {
    if (backend < 0 || backend >= static_cast<int>(specs->size())) continue;
    store_->Release((*specs)[backend].name, std::move(session));
  }
}

ClusterSync::ClusterSync(std::shared_ptr<cluster::ClusterStore> store, double lease_s,
                         double interval_s, router::Router& router)
    : store_(std::move(store)), lease_s_(lease_s), interval_s_(interval_s), router_(router) {
  if (store_ != nullptr) router_.ShareShadowPins();
}

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
                                                   double lease_s, router::Router& router,
                                                   double interval_s) {
  return std::unique_ptr<ClusterSync>(
      new ClusterSync(std::move(store), lease_s, interval_s, router));
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

void ClusterSync::SharePins(const std::vector<router::BackendSpec>& specs, absl::Time now) {
  // This replica's changes are taken before its load (below) is read, so
  // the load it publishes counts every request whose pin it publishes.
  router::ShadowPinChanges mine = router_.TakeShadowPinChanges();
  std::vector<cluster::RequestPin> pinned;
  pinned.reserve(mine.pinned.size());
  for (router::ShadowPin& p : mine.pinned) {
    if (p.backend < 0 || p.backend >= static_cast<int>(specs.size())) continue;
    pinned.push_back({.instance = specs[p.backend].name,
                      .id = p.id,
                      .footprint_chunks = p.footprint_chunks,
                      .chain = std::move(p.chain)});
  }
  store_->PublishPins(std::move(pinned), std::move(mine.unpinned));

  cluster::PeerPinChanges theirs = store_->TakePeerPins();
  router::PeerShadowPins apply;
  const cluster::PeerView& view = *theirs.view;
  // Unreachable for longer than a lease: the peers' requests have ended or
  // been retried since, unseen.
  apply.reset = theirs.reset || (view.stale && now - view.synced_at > absl::Seconds(lease_s_));
  absl::flat_hash_map<std::string, int> slot;
  for (size_t b = 0; b < specs.size(); ++b) {
    if (specs[b].retired) continue;
    slot[specs[b].name] = static_cast<int>(b);
    if (const auto it = view.load.find(specs[b].name);
        view.synced_at != absl::InfinitePast() &&
        (it == view.load.end() || it->second.requests == 0)) {
      apply.idle_backends.push_back(static_cast<int>(b));
    }
  }
  if (view.synced_at != absl::InfinitePast()) apply.live_replicas = view.live_replicas;
  for (auto& [replica, pin] : theirs.pinned) {
    const auto it = slot.find(pin.instance);
    if (it == slot.end()) continue;  // an instance this replica does not route to
    apply.pinned.push_back({std::move(replica),
                            {.id = pin.id,
                             .backend = it->second,
                             .footprint_chunks = pin.footprint_chunks,
                             .chain = std::move(pin.chain)}});
  }
  apply.unpinned = std::move(theirs.unpinned);
  router_.ApplyPeerShadowPins(apply);
}

void ClusterSync::SyncOnce(absl::Time now) {
  if (store_ == nullptr) return;
  ReleaseDepartures();
  const std::shared_ptr<const std::vector<router::BackendSpec>> specs = router_.Backends();
  SharePins(*specs, now);
  const std::vector<router::PeerLoad> own = router_.LocalLoad();
  absl::flat_hash_map<int, int64_t> own_waiting;
  {
    absl::MutexLock lock(&waiting_mu_);
    own_waiting = waiting_;
  }
  auto waiting_on = [&own_waiting](size_t b) {
    const auto it = own_waiting.find(static_cast<int>(b));
    return it == own_waiting.end() ? int64_t{0} : it->second;
  };
  cluster::LoadByInstance publish;
  cluster::RateByInstance rates;
  for (size_t b = 0; b < specs->size() && b < own.size(); ++b) {
    if ((*specs)[b].retired) continue;
    if (own[b].prefill_time_factor > 0) rates[(*specs)[b].name] = own[b].prefill_time_factor;
    publish[(*specs)[b].name] = {.requests = own[b].inflight_requests,
                                 .prefill_tokens = own[b].inflight_prefill_tokens,
                                 .tokens = own[b].inflight_tokens,
                                 .decoding_requests = own[b].decoding_requests,
                                 .waiting = waiting_on(b),
                                 .residents = own[b].resident_sessions};
  }
  store_->PublishLoad(std::move(publish));
  store_->PublishRates(std::move(rates));

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
        p.waiting_turns = it->second.waiting;
      }
      peers[b].waiting_turns += waiting_on(b);
      if (const auto it = view->residents.find((*specs)[b].name); it != view->residents.end()) {
        peers[b].resident_sessions.assign(it->second.begin(), it->second.end());
      }
      if (const auto it = view->rate_factors.find((*specs)[b].name);
          it != view->rate_factors.end()) {
        peers[b].prefill_time_factor = it->second;
      }
    }
  }
  router_.SetPeerLoad(std::move(peers), now);
  // The gate frees room for turns waiting across replicas on this clock,
  // not only when a turn of this replica's enters or ends.
  router_.TickResidency(now);
}

}  // namespace kvroute::proxy
