// proxy::KvEventFeeds: kvroute's subscriptions to the engines' own KV cache
// events: one kvevents::KvEventSubscriber per configured backend with a
// `kv_events` endpoint, feeding the router's shadow, and their counters on
// /metrics (docs/kv-events.md).
//
//   absl::StatusOr<std::unique_ptr<KvEventFeeds>> feeds =
//       KvEventFeeds::Start(config, server.router(), server.registry());
//   ...
//   (*feeds)->Stop();   // also the destructor
//
// Subscriptions follow the backend list kvroute started with: a backend is
// subscribed under the router slot it had at start (config order), which a
// reload keeps for a backend at the same address. Backends added by a
// reload get no subscription until a restart.
//
// Thread-safety: Start/Stop from the controlling thread; the metrics
// collector runs on any thread. `router` and `registry` must outlive the
// feeds (both belong to the proxy::Server, whose registry also holds the
// collector).
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kvevents/subscriber.h"
#include "proxy/config.h"
#include "proxy/metrics.h"
#include "router/router.h"

namespace kvroute::proxy {

class KvEventFeeds {
 public:
  // Subscribes to every backend with `kv_events` (none: an empty set) and
  // registers the kvroute_kv_events_* families. InvalidArgument naming the
  // backend's key when ZeroMQ rejects an endpoint.
  static absl::StatusOr<std::unique_ptr<KvEventFeeds>> Start(const Config& config,
                                                             router::Router& router,
                                                             metrics::Registry& registry);
  ~KvEventFeeds();
  KvEventFeeds(const KvEventFeeds&) = delete;
  KvEventFeeds& operator=(const KvEventFeeds&) = delete;

  void Stop();
  size_t size() const { return subscribers_->size(); }
  // The i-th subscription, in config order of the backends that have one.
  const kvevents::KvEventSubscriber& subscriber(size_t i) const { return *(*subscribers_)[i]; }

 private:
  using Subscribers = std::vector<std::unique_ptr<kvevents::KvEventSubscriber>>;
  KvEventFeeds() = default;
  // Shared with the metrics collector, which may outlive this object in the
  // registry.
  std::shared_ptr<Subscribers> subscribers_ = std::make_shared<Subscribers>();
};

}  // namespace kvroute::proxy
