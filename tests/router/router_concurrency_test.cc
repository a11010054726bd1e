// Router facade under concurrent callers: what the proxy's worker threads and
// its health/scrape loop do at once. Its assertions hold for any interleaving
// (every reservation is released; counters add up); its main job is to give
// ThreadSanitizer (deploy/ci-stages.sh tsan) every Router method racing with
// every other one.
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "router/prefix_hash.h"
#include "router/router.h"

namespace kvroute::router {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);
constexpr int kBackends = 4;
constexpr int kClients = 4;
constexpr int kRequestsPerClient = 200;

std::vector<BackendSpec> Fleet(bool pd) {
  std::vector<BackendSpec> v;
  for (int i = 0; i < kBackends; ++i) {
    BackendSpec b{.name = "gpu" + std::to_string(i),
                  .host = "127.0.0.1",
                  .port = static_cast<uint16_t>(8100 + i)};
    if (pd) b.role = i < kBackends / 2 ? BackendRole::kPrefill : BackendRole::kDecode;
    v.push_back(b);
  }
  return v;
}

// A session's turns: each prompt extends the previous one, so the shadow
// index, session table and affinity paths all run.
RequestFeatures Turn(int client, int turn) {
  RequestFeatures f;
  f.request_id = "c" + std::to_string(client) + "-" + std::to_string(turn);
  f.model = turn % 3 == 0 ? "m-a" : "m-b";
  f.session_id = "session-" + std::to_string(client * 7 + turn % 5);
  f.max_tokens = 64;
  for (int i = 0; i <= turn % 20; ++i) {
    f.prompt_bytes += "client " + std::to_string(client) + " turn part " + std::to_string(i) +
                      std::string(200 + 50 * (turn % 7), 'x');
  }
  f.chunk_hashes = HashPromptChunks(f.prompt_bytes, 256);
  return f;
}

class RouterConcurrencyTest : public testing::TestWithParam<std::string> {};

TEST_P(RouterConcurrencyTest, EveryReservationIsReleased) {
  Options o;
  o.mode = GetParam();
  o.thresholds.heavy_threshold = 2000;  // some requests are HEAVY (v1/v2 offload paths)
  auto created = Router::Create(o, Fleet(GetParam() == "pd_sep"));
  ASSERT_TRUE(created.ok()) << created.status();
  Router& router = **created;

  std::atomic<int64_t> routed{0};
  std::atomic<bool> clients_done{false};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      for (int t = 0; t < kRequestsPerClient; ++t) {
        const absl::Time now = kT0 + absl::Milliseconds(t);
        absl::StatusOr<RouteTicket> ticket = router.Route(Turn(c, t), now);
        if (!ticket.ok()) continue;  // Unavailable while the health thread ejects
        ++routed;
        router.OnFirstToken(*ticket, now);
        Outcome out;
        out.ok = t % 11 != 0;
        out.prompt_tokens = 100 + t;
        out.cached_tokens = t % 4 == 0 ? -1 : 50;
        out.completion_tokens = 64;
        out.served_by = ticket->decision.decode_backend;
        router.OnComplete(*ticket, out, now + absl::Milliseconds(5));
      }
    });
  }
  // The monitor: health flaps, scraped gauges, /metrics and /admin reads.
  threads.emplace_back([&] {
    for (int i = 0; !clients_done.load(); ++i) {
      const int b = i % kBackends;
      router.SetHealthy(b, i % 3 != 0);
      router.UpdateEngineGauges(b, {.num_requests_running = i % 8,
                                    .num_requests_waiting = i % 2,
                                    .kv_cache_usage_perc = 0.5,
                                    .capacity_tokens = 100000});
      (void)router.Report();
      (void)router.Stats();
      (void)router.BytesPerToken("m-a");
      std::this_thread::yield();
    }
    for (int b = 0; b < kBackends; ++b) router.SetHealthy(b, true);
  });
  for (int c = 0; c < kClients; ++c) threads[c].join();
  clients_done = true;
  threads.back().join();

  EXPECT_GT(routed.load(), 0);
  EXPECT_EQ(router.Stats().inflight_requests, 0);
  for (const BackendReport& r : router.Report()) {
    EXPECT_EQ(r.inflight_requests, 0) << r.name;
    EXPECT_EQ(r.inflight_prefill_tokens, 0) << r.name;
    EXPECT_EQ(r.decoding_requests, 0) << r.name;
    EXPECT_EQ(r.inflight_tokens, 0) << r.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, RouterConcurrencyTest,
                         testing::Values("round_robin", "least_loaded", "baseline", "v1", "v1_cost",
                                         "v2", "pd_sep"),
                         [](const testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace kvroute::router
