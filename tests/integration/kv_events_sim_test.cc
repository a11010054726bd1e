// End to end: simulated instances publish KV cache events in vLLM's format,
// kvroute's subscriptions (proxy::KvEventFeeds) apply them to the router,
// and the cache estimate kvroute logs for the next request follows what the
// engine really did. Waits are on conditions (the subscriber having applied
// every batch the instance queued), never on sleeps.
#include <gtest/gtest.h>

#include "proxy/kv_event_feeds.h"
#include "tests/integration/harness.h"
#include "tests/prometheus_sample.h"

namespace kvroute::testing {
namespace {

constexpr absl::Duration kWait = absl::Seconds(30);  // a failing test's bound, not a pace

void TinyEngine(sim::Profile& p) {
  p.block_size = 16;
  p.num_gpu_blocks_override = 48;  // 768 tokens of KV
  p.max_model_len = 2048;
}

// Subscribes kvroute to every instance's events, as a config with
// backends[i].kv_events would at start-up.
std::unique_ptr<proxy::KvEventFeeds> Subscribe(FleetHarness& h, bool replay) {
  proxy::Config config = h.server().config();
  for (size_t i = 0; i < config.backends.size(); ++i) {
    config.backends[i].kv_events = h.fleet().kv_events_endpoint(static_cast<int>(i));
    if (replay) {
      config.backends[i].kv_events_replay =
          h.fleet().kv_events_replay_endpoint(static_cast<int>(i));
    }
  }
  auto feeds = proxy::KvEventFeeds::Start(config, h.server().router(), h.server().registry());
  EXPECT_TRUE(feeds.ok()) << feeds.status();
  return *std::move(feeds);
}

uint16_t PortOf(FleetHarness& h, int i) { return h.fleet().ports()[static_cast<size_t>(i)]; }

// POST /reset_prefix_cache until the engine took it: like vLLM, the
// simulator refuses (and still answers 200) while a request holds blocks,
// and its gauges say what it did before it answers (the instance publishes
// its events, and counts its cached blocks, inside the request).
void ResetPrefixCache(FleetHarness& h, int i) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const uint64_t batches = h.fleet().gauges(i).kv_event_batches;
    auto r = RequestOnce(PortOf(h, i), http::verb::post, "/reset_prefix_cache", "");
    ASSERT_EQ(r.result_int(), 200);
    const sim::InstanceGauges g = h.fleet().gauges(i);
    if (g.kv_event_batches > batches && g.num_cached_blocks == 0) return;
  }
  FAIL() << "instance " << i << " never reset its prefix cache";
}

// PUB/SUB loses what is published before the subscription is up: resets
// the (empty) prefix cache until one AllBlocksCleared arrives.
void SyncUp(FleetHarness& h, const proxy::KvEventFeeds& feeds, int i) {
  for (int attempt = 0; attempt < 400; ++attempt) {
    ResetPrefixCache(h, i);
    if (feeds.subscriber(i).WaitFor(
            [](const kvevents::SubscriberStats& s) { return s.cleared_events > 0; },
            absl::Milliseconds(50))) {
      return;
    }
  }
  FAIL() << "instance " << i << ": no event reached kvroute";
}

// Waits until kvroute applied every batch instance i queued so far (an
// instance queues a step's events before it delivers the step's tokens).
void WaitApplied(FleetHarness& h, const proxy::KvEventFeeds& feeds, int i) {
  const auto queued = static_cast<int64_t>(h.fleet().gauges(i).kv_event_batches);
  ASSERT_TRUE(feeds.subscriber(i).WaitFor(
      [&](const kvevents::SubscriberStats& s) { return s.last_seq + 1 >= queued; }, kWait))
      << "instance " << i << " queued " << queued << " batches";
}

void Ask(FleetHarness& h, const std::string& prompt) {
  auto r = h.Chat(json::array{Msg("user", prompt)}, /*stream=*/false);
  ASSERT_EQ(r.result_int(), 200) << r.body();
}

// The cache estimate kvroute logged for the last request, and the engine's
// cached_tokens for it.
std::pair<int64_t, int64_t> LastEstimate(FleetHarness& h) {
  std::vector<json::object> log = h.StopAndReadLog();
  EXPECT_FALSE(log.empty());
  const json::object& last = log.back();
  return {last.at("cached_tokens_est").to_number<int64_t>(),
          last.at("cached_tokens").to_number<int64_t>()};
}

// A prefix-cache reset on the engine: without events the shadow keeps
// promising the prompt; with them the estimate drops to what the engine has.
TEST(KvEventsSim, AResetEngineIsNotPromisedAPrefix) {
  const std::string prompt = Text(1600, 11);
  for (bool events : {false, true}) {
    SCOPED_TRACE(events ? "with KV events" : "without KV events");
    // The instance publishes either way (ResetPrefixCache reads its gauges);
    // only the second kvroute subscribes.
    FleetHarness h(1, "baseline", {}, TinyEngine,
                   [](sim::FleetOptions& fo) { fo.kv_events_port = 0; });
    std::unique_ptr<proxy::KvEventFeeds> feeds;
    uint64_t cleared_before = 0;
    if (events) {
      feeds = Subscribe(h, /*replay=*/false);
      SyncUp(h, *feeds, 0);
      WaitApplied(h, *feeds, 0);
      cleared_before = feeds->subscriber(0).stats().cleared_events;
    }
    Ask(h, prompt);
    Ask(h, prompt);  // a hit: the shadow holds the prompt
    ResetPrefixCache(h, 0);
    if (events) WaitApplied(h, *feeds, 0);
    Ask(h, prompt);
    const auto [est, actual] = LastEstimate(h);
    EXPECT_EQ(actual, 0);
    if (events) {
      EXPECT_EQ(est, 0);
      EXPECT_EQ(feeds->subscriber(0).stats().cleared_events, cleared_before + 1);
    } else {
      EXPECT_GT(est, 200);
    }
  }
}

// Under KV pressure the engine evicts; the events carry every store and
// eviction, so kvroute's count of the engine's cached tokens is exact and
// the shadow loses what the engine lost.
TEST(KvEventsSim, EvictionsUnderPressureReachTheShadow) {
  FleetHarness h(2, "round_robin", {}, TinyEngine,
                 [](sim::FleetOptions& fo) {
                   fo.kv_events_port = 0;
                   fo.kv_events_replay_port = 0;
                 });
  std::unique_ptr<proxy::KvEventFeeds> feeds = Subscribe(h, /*replay=*/true);
  ASSERT_EQ(feeds->size(), 2u);
  // A subscription that joins after SyncUp's first resets sees a gap there
  // (and replays it): the gaps that count are the later ones.
  uint64_t gaps_before[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    SyncUp(h, *feeds, i);
    WaitApplied(h, *feeds, i);
    gaps_before[i] = feeds->subscriber(i).stats().gaps;
  }
  // Twelve distinct prompts of ~300 tokens against 2 x 768 tokens of KV.
  for (uint64_t seed = 0; seed < 12; ++seed) Ask(h, Text(1200, 100 + seed));
  for (int i = 0; i < 2; ++i) WaitApplied(h, *feeds, i);

  const std::vector<router::BackendReport> report = h.server().router().Report();
  int64_t evicted = 0;
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("instance " + std::to_string(i));
    const kvevents::SubscriberStats st = feeds->subscriber(i).stats();
    EXPECT_EQ(st.gaps, gaps_before[i]);
    EXPECT_EQ(st.decode_errors, 0u);
    EXPECT_EQ(st.block_size, 16);
    EXPECT_EQ(report[static_cast<size_t>(i)].engine_cached_tokens,
              h.fleet().gauges(i).num_cached_blocks * 16);
    EXPECT_EQ(static_cast<int64_t>(st.stored_blocks - st.removed_blocks),
              h.fleet().gauges(i).num_cached_blocks);
    evicted += st.evicted_chunks;
    EXPECT_GT(st.removed_blocks, 0u);
  }
  EXPECT_GT(evicted, 0);

  const auto metrics = RequestOnce(h.server().port(), http::verb::get, "/metrics", "");
  EXPECT_NE(metrics.body().find(
                "kvroute_kv_events_received_total{backend=\"gpu0\",type=\"BlockRemoved\"}"),
            std::string::npos);
  EXPECT_EQ(SampleValue(metrics.body(), "kvroute_kv_events_gaps_total", {{"backend", "gpu1"}}),
            static_cast<double>(gaps_before[1]));
  EXPECT_EQ(
      SampleValue(metrics.body(), "kvroute_backend_engine_cached_tokens", {{"backend", "gpu1"}}),
      static_cast<double>(h.fleet().gauges(1).num_cached_blocks * 16));
}

// A kvroute that subscribes after its engines served traffic (a replica
// started late) replays what they buffered: with no new traffic its count of
// each engine's cached tokens is already exact, its removals included.
TEST(KvEventsSim, ALateSubscriptionReplaysTheEnginesBuffer) {
  FleetHarness h(2, "round_robin", {}, TinyEngine, [](sim::FleetOptions& fo) {
    fo.kv_events_port = 0;
    fo.kv_events_replay_port = 0;
  });
  for (uint64_t seed = 0; seed < 12; ++seed) Ask(h, Text(1200, 200 + seed));
  std::unique_ptr<proxy::KvEventFeeds> feeds = Subscribe(h, /*replay=*/true);
  for (int i = 0; i < 2; ++i) WaitApplied(h, *feeds, i);

  const std::vector<router::BackendReport> report = h.server().router().Report();
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("instance " + std::to_string(i));
    const kvevents::SubscriberStats st = feeds->subscriber(i).stats();
    const sim::InstanceGauges g = h.fleet().gauges(i);
    // Replayed at start, but for batches the instance's publisher thread had
    // not yet sent then (they come live, or as a gap's replay).
    EXPECT_GT(st.start_replayed_batches, 0u);
    EXPECT_EQ(st.batches, g.kv_event_batches);
    EXPECT_EQ(st.gaps, 0u);
    EXPECT_GT(st.removed_blocks, 0u);
    EXPECT_EQ(static_cast<int64_t>(st.stored_blocks - st.removed_blocks), g.num_cached_blocks);
    EXPECT_EQ(report[static_cast<size_t>(i)].engine_cached_tokens, g.num_cached_blocks * 16);
  }
  const auto metrics = RequestOnce(h.server().port(), http::verb::get, "/metrics", "");
  EXPECT_NE(metrics.body().find("kvroute_kv_events_start_replayed_batches_total{backend=\"gpu0\"}"),
            std::string::npos);
}

}  // namespace
}  // namespace kvroute::testing
