#include "proxy/kv_event_feeds.h"

#include <spdlog/spdlog.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace kvroute::proxy {
namespace {

void RenderCounterHeader(std::string* out, const char* name, const char* help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n");
}

// The kvroute_kv_events_* counter families, one series per subscription
// (`names[i]` is subscription i's backend) and per type or cause.
void RenderEventCounters(const std::vector<kvevents::SubscriberStats>& stats,
                         const std::vector<std::string>& names, std::string* out) {
  using Get = double (*)(const kvevents::SubscriberStats&);
  struct Family {
    const char* name;
    const char* help;
    const char* label;  // second label's name, or nullptr
    std::vector<std::pair<const char*, Get>> series;
  };
  const Family kFamilies[] = {
      {"kvroute_kv_events_batches_total", "KV event batches applied (live and replayed).",
       nullptr, {{"", [](const kvevents::SubscriberStats& s) { return double(s.batches); }}}},
      {"kvroute_kv_events_received_total", "KV cache events received, by type.", "type",
       {{"BlockStored",
         [](const kvevents::SubscriberStats& s) { return double(s.stored_events); }},
        {"BlockRemoved",
         [](const kvevents::SubscriberStats& s) { return double(s.removed_events); }},
        {"AllBlocksCleared",
         [](const kvevents::SubscriberStats& s) { return double(s.cleared_events); }}}},
      {"kvroute_kv_events_blocks_total", "Blocks the engine reported stored or removed.",
       "type",
       {{"stored", [](const kvevents::SubscriberStats& s) { return double(s.stored_blocks); }},
        {"removed",
         [](const kvevents::SubscriberStats& s) { return double(s.removed_blocks); }}}},
      {"kvroute_kv_events_ignored_total",
       "Events of another medium (not GPU or CPU) or KV cache group, not applied.", nullptr,
       {{"", [](const kvevents::SubscriberStats& s) { return double(s.ignored_events); }}}},
      {"kvroute_kv_events_host_tier_total",
       "Events of the engine's host-memory tier (medium CPU), applied to its host shadow.",
       nullptr, {{"", [](const kvevents::SubscriberStats& s) { return double(s.host_events); }}}},
      {"kvroute_kv_events_gaps_total", "Gaps in the engine's event sequence numbers.", nullptr,
       {{"", [](const kvevents::SubscriberStats& s) { return double(s.gaps); }}}},
      {"kvroute_kv_events_missed_batches_total", "Batches inside sequence gaps.", nullptr,
       {{"", [](const kvevents::SubscriberStats& s) { return double(s.missed_batches); }}}},
      {"kvroute_kv_events_replayed_batches_total",
       "Missed batches recovered from the engine's replay socket.", nullptr,
       {{"", [](const kvevents::SubscriberStats& s) { return double(s.replayed_batches); }}}},
      {"kvroute_kv_events_start_replayed_batches_total",
       "Batches the engine still buffered when the subscription started, replayed first.",
       nullptr,
       {{"", [](const kvevents::SubscriberStats& s) {
          return double(s.start_replayed_batches);
        }}}},
      {"kvroute_kv_events_resets_total", "Shadow resets, by cause.", "cause",
       {{"all_blocks_cleared",
         [](const kvevents::SubscriberStats& s) { return double(s.cleared_events); }},
        {"engine_restart",
         [](const kvevents::SubscriberStats& s) { return double(s.publisher_restarts); }}}},
      {"kvroute_kv_events_decode_errors_total", "Event messages that did not decode.",
       nullptr,
       {{"", [](const kvevents::SubscriberStats& s) { return double(s.decode_errors); }}}},
      {"kvroute_kv_events_evicted_chunks_total",
       "Shadow chunks evicted because the engine reported removals.", nullptr,
       {{"", [](const kvevents::SubscriberStats& s) { return double(s.evicted_chunks); }}}},
  };
  for (const Family& f : kFamilies) {
    RenderCounterHeader(out, f.name, f.help);
    for (size_t i = 0; i < stats.size(); ++i) {
      for (const auto& [value, get] : f.series) {
        if (f.label == nullptr) {
          metrics::RenderSample(out, f.name, {{"backend", names[i]}}, get(stats[i]));
        } else {
          metrics::RenderSample(out, f.name, {{"backend", names[i]}, {f.label, value}},
                                get(stats[i]));
        }
      }
    }
  }
}

// What the metrics collector renders on each scrape: the engines' own
// count of what they cache, then the subscriptions' counters.
void RenderKvEventMetrics(const std::vector<std::unique_ptr<kvevents::KvEventSubscriber>>& subs,
                          const std::vector<std::string>& names, router::Router& router,
                          std::string* out) {
  std::vector<kvevents::SubscriberStats> stats;
  stats.reserve(subs.size());
  for (const auto& s : subs) stats.push_back(s->stats());
  // The engines' own count of what they cache, from the same events.
  const std::vector<router::BackendReport> report = router.Report();
  metrics::RenderGaugeHeader(out, "kvroute_backend_engine_cached_tokens",
                             "Tokens in blocks the engine's KV events say it caches, -1 before "
                             "its first event.");
  for (const auto& s : subs) {
    if (s->backend() < 0) continue;  // the pool's feed: no backend of its own
    const auto b = static_cast<size_t>(s->backend());
    if (b < report.size() && !report[b].retired) {
      metrics::RenderSample(out, "kvroute_backend_engine_cached_tokens",
                            {{"backend", report[b].name}},
                            static_cast<double>(report[b].engine_cached_tokens));
    }
  }
  RenderEventCounters(stats, names, out);
}

}  // namespace

absl::StatusOr<std::unique_ptr<KvEventFeeds>> KvEventFeeds::Start(const Config& config,
                                                                  router::Router& router,
                                                                  metrics::Registry& registry) {
  std::unique_ptr<KvEventFeeds> feeds(new KvEventFeeds());
  std::vector<std::string> names;
  for (size_t i = 0; i < config.backends.size(); ++i) {
    const BackendConfig& b = config.backends[i];
    if (b.kv_events.empty()) continue;
    kvevents::SubscriberOptions o;
    o.endpoint = b.kv_events;
    o.replay_endpoint = b.kv_events_replay;
    o.topic = config.kv_events.topic;
    o.queue_messages = config.kv_events.queue_messages;
    o.default_block_size = config.kv_events.block_size;
    o.replay_timeout = config.kv_events.replay_timeout;
    auto sub =
        std::make_unique<kvevents::KvEventSubscriber>(router, static_cast<int>(i), std::move(o));
    if (absl::Status st = sub->Start(); !st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("backends[", i, "].kv_events: ", st.message()));
    }
    spdlog::info("backend {}: following KV cache events at {}{}{}", b.name, b.kv_events,
                 b.kv_events_replay.empty() ? "" : ", replay at ", b.kv_events_replay);
    feeds->subscribers_->push_back(std::move(sub));
    names.push_back(b.name);
  }
  if (!config.kv_events.pool.empty()) {
    kvevents::SubscriberOptions o;
    o.endpoint = config.kv_events.pool;
    o.replay_endpoint = config.kv_events.pool_replay;
    o.topic = config.kv_events.topic;
    o.queue_messages = config.kv_events.queue_messages;
    o.default_block_size = config.kv_events.block_size;
    o.replay_timeout = config.kv_events.replay_timeout;
    auto sub = std::make_unique<kvevents::KvEventSubscriber>(router, router::kPoolBackend,
                                                             std::move(o));
    if (absl::Status st = sub->Start(); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("kv_events.pool: ", st.message()));
    }
    spdlog::info("following the fleet-shared KV pool's events at {}{}{}", config.kv_events.pool,
                 config.kv_events.pool_replay.empty() ? "" : ", replay at ",
                 config.kv_events.pool_replay);
    feeds->subscribers_->push_back(std::move(sub));
    names.push_back("pool");  // the `backend` label of its kvroute_kv_events_* series
  }
  if (feeds->subscribers_->empty()) return feeds;

  registry.AddCollector([subs = feeds->subscribers_, names, &router](std::string* out) {
    RenderKvEventMetrics(*subs, names, router, out);
  });
  return feeds;
}

KvEventFeeds::~KvEventFeeds() { Stop(); }

void KvEventFeeds::Stop() {
  for (const auto& s : *subscribers_) s->Stop();
}

}  // namespace kvroute::proxy
