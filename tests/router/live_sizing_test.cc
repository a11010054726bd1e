// LiveSizing (router/live_sizing.h) on an injected clock: write rates and the
// mean reuse gap over a sliding window of readings; and Router::Sizing, which
// sets them against the fleet's tiers through kvsize::ComputeTierPressure.
#include "router/live_sizing.h"

#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "kvsize/kvsize.h"
#include "router/prefix_hash.h"
#include "router/router.h"

namespace kvroute::router {
namespace {

using Tier = LiveSizing::Tier;
constexpr int kGpu = static_cast<int>(Tier::kGpu);
constexpr int kHost = static_cast<int>(Tier::kHost);

absl::Time At(double seconds) { return absl::UnixEpoch() + absl::Seconds(seconds); }

TEST(LiveSizingTest, FirstReadingMeasuresNothing) {
  LiveSizing s({.window = absl::Seconds(60)});
  s.AddWritten(Tier::kGpu, 1000);
  const LiveSizing::Reading r = s.Read(At(0));
  EXPECT_EQ(r.write_rate_tokens_per_s[kGpu], 0);
  EXPECT_EQ(r.span, absl::ZeroDuration());
}

TEST(LiveSizingTest, RateIsTheDifferenceOverTheInterval) {
  LiveSizing s({.window = absl::Seconds(60)});
  s.Read(At(0));
  s.AddWritten(Tier::kGpu, 3000);
  s.AddWritten(Tier::kHost, 1500);
  s.AddWritten(Tier::kGpu, -5);  // nothing written
  const LiveSizing::Reading r = s.Read(At(15));
  EXPECT_DOUBLE_EQ(r.write_rate_tokens_per_s[kGpu], 200);
  EXPECT_DOUBLE_EQ(r.write_rate_tokens_per_s[kHost], 100);
  EXPECT_EQ(r.span, absl::Seconds(15));
}

// Readings every 15 s, a 60 s window: the rate always spans the last 60 s
// once there are readings that old, so a burst leaves it after a window.
TEST(LiveSizingTest, WindowSlides) {
  LiveSizing s({.window = absl::Seconds(60)});
  s.Read(At(0));
  s.AddWritten(Tier::kGpu, 6000);  // a burst in the first 15 s
  for (int t = 15; t <= 60; t += 15) {
    const LiveSizing::Reading r = s.Read(At(t));
    EXPECT_DOUBLE_EQ(r.write_rate_tokens_per_s[kGpu], 6000.0 / t) << t;
  }
  // From 75 s on the baseline is the reading 60 s back.
  s.AddWritten(Tier::kGpu, 600);  // between 60 and 75 s
  LiveSizing::Reading r = s.Read(At(75));
  EXPECT_EQ(r.span, absl::Seconds(60));
  EXPECT_DOUBLE_EQ(r.write_rate_tokens_per_s[kGpu], 600.0 / 60);
  r = s.Read(At(120));  // measured from the reading at 60 s
  EXPECT_DOUBLE_EQ(r.write_rate_tokens_per_s[kGpu], 600.0 / 60);
  r = s.Read(At(135));  // from the one at 75 s, which had the 600 tokens: gone
  EXPECT_EQ(r.span, absl::Seconds(60));
  EXPECT_DOUBLE_EQ(r.write_rate_tokens_per_s[kGpu], 0);
}

TEST(LiveSizingTest, ReuseGapIsTheMeanOverTheWindow) {
  LiveSizing s({.window = absl::Seconds(60)});
  s.Read(At(0));
  s.AddReuseGap(10);
  s.AddReuseGap(30);
  s.AddReuseGap(-1);  // no gap
  LiveSizing::Reading r = s.Read(At(30));
  EXPECT_DOUBLE_EQ(r.reuse_gap_s, 20);
  EXPECT_EQ(r.reuse_gaps, 2);
  s.AddReuseGap(50);
  r = s.Read(At(60));
  EXPECT_DOUBLE_EQ(r.reuse_gap_s, 30);
  r = s.Read(At(90));  // from the reading at 30 s: only the 50 s gap
  EXPECT_DOUBLE_EQ(r.reuse_gap_s, 50);
  EXPECT_EQ(r.reuse_gaps, 1);
  r = s.Read(At(120));  // from the one at 60 s: none
  EXPECT_EQ(r.reuse_gaps, 0);
  EXPECT_EQ(r.reuse_gap_s, 0);
}

// A reader far more frequent than the window keeps at most max_readings,
// and the rate still spans about a window.
TEST(LiveSizingTest, FrequentReadingsAreBoundedAndKeepTheWindow) {
  LiveSizing s({.window = absl::Seconds(60), .max_readings = 8});
  for (int t = 0; t <= 600; ++t) {
    s.AddWritten(Tier::kGpu, 100);
    const LiveSizing::Reading r = s.Read(At(t));
    if (t >= 120) {
      EXPECT_GE(r.span, absl::Seconds(60)) << t;
      EXPECT_LE(r.span, absl::Seconds(70)) << t;
      EXPECT_NEAR(r.write_rate_tokens_per_s[kGpu], 100, 1e-9) << t;
    }
  }
}

// ---- Router::Sizing ----

constexpr size_t kChunk = 256;
constexpr double kGiB = 1024.0 * 1024 * 1024;

// A session's turn: a shared prefix of `prefix_tokens` (4 bytes per token)
// plus `new_tokens` unique to turn `turn`.
RequestFeatures Turn(int session, int turn, int64_t prefix_tokens, int64_t new_tokens,
                     int64_t max_tokens) {
  RequestFeatures f;
  f.model = "m";
  f.session_id = "s" + std::to_string(session);
  f.max_tokens = max_tokens;
  const std::string head = "session " + std::to_string(session) + " ";
  f.prompt_bytes = head;
  f.prompt_bytes.resize(static_cast<size_t>(prefix_tokens * 4), 'p');
  std::string tail = " turn " + std::to_string(turn) + " ";
  tail.resize(static_cast<size_t>(new_tokens * 4), 'n');
  f.prompt_bytes += tail;
  f.chunk_hashes = HashPromptChunks(f.prompt_bytes, kChunk);
  return f;
}

// The fixed workload both sides describe: `sessions` agent sessions in
// lockstep on `instances` instances, a turn every `period` s: prompt
// prefix + new tokens, first token after `ttft`, done after `ttft + decode`,
// then `think` s of tool time.
struct Workload {
  int instances = 2;
  int sessions = 80;
  int64_t prefix_tokens = 28000;
  int64_t new_tokens = 2000;
  int64_t output_tokens = 1000;
  double ttft_s = 2;
  double decode_s = 8;
  double think_s = 20;
  double host_gib = 64;  // --kv-offloading-size per instance
  double period_s() const { return ttft_s + decode_s + think_s; }
  int64_t footprint() const { return prefix_tokens + new_tokens + output_tokens; }
  // Written per turn: the new prompt tokens and the output.
  double write_rate() const { return sessions * double(new_tokens + output_tokens) / period_s(); }
};

// Runs `turns` turns of the workload through the router, reading its
// sizing after every turn (as a scrape would); returns the last reading.
KvSizingReport RunWorkload(Router& r, const Workload& w, int turns) {
  KvSizingReport last;
  for (int k = 0; k < turns; ++k) {
    const double t0 = k * w.period_s();
    std::vector<RouteTicket> tickets;
    for (int s = 0; s < w.sessions; ++s) {
      absl::StatusOr<RouteTicket> t =
          r.Route(Turn(s, k, w.prefix_tokens, w.new_tokens, w.output_tokens), At(t0));
      EXPECT_TRUE(t.ok()) << t.status();
      tickets.push_back(*t);
    }
    for (const RouteTicket& t : tickets) r.OnFirstToken(t, At(t0 + w.ttft_s));
    for (const RouteTicket& t : tickets) {
      Outcome o;
      o.ok = true;
      o.prompt_tokens = w.prefix_tokens + w.new_tokens;
      o.cached_tokens = k == 0 ? 0 : w.prefix_tokens;
      o.completion_tokens = w.output_tokens;
      o.kv_transferred = false;
      r.OnComplete(t, o, At(t0 + w.ttft_s + w.decode_s));
    }
    last = r.Sizing(At(t0 + w.ttft_s + w.decode_s));
  }
  return last;
}

// Llama-3.1-8B on one H100 at utilisation 0.85 (tests/kvsize/kvsize_test.cc).
kvsize::ModelArch Llama8B() {
  return {.name = "Llama-3.1-8B",
          .num_attention_layers = 32,
          .num_kv_heads = 8,
          .head_dim = 128,
          .kv_bytes_per_element = 2,
          .weight_bytes = 8.03e9 * 2};
}
kvsize::Deployment H100() {
  return {
      .gpu_name = "H100", .gpu_memory_bytes = 85.9e9, .tensor_parallel = 1, .utilisation = 0.85};
}

std::unique_ptr<Router> MakeFleet(const Workload& w, int64_t capacity_tokens,
                                  double kv_bytes_per_token) {
  Options o;
  o.chunk_bytes = kChunk;
  o.offload_cost.kv_bytes_per_token = kv_bytes_per_token;
  std::vector<BackendSpec> specs;
  for (int i = 0; i < w.instances; ++i) {
    specs.push_back({.name = "gpu" + std::to_string(i),
                     .host = "127.0.0.1",
                     .port = static_cast<uint16_t>(8100 + i),
                     .capacity_tokens = capacity_tokens});
  }
  auto r = Router::Create(o, std::move(specs));
  EXPECT_TRUE(r.ok()) << r.status();
  // What the engines' vllm:cache_config_info says (num_gpu_blocks x
  // block_size, and kv_offloading_size).
  for (int i = 0; i < w.instances; ++i) {
    EngineGauges g;
    g.capacity_tokens = capacity_tokens;
    g.host_capacity_bytes = w.host_gib * kGiB;
    (*r)->UpdateEngineGauges(i, g);
  }
  return *std::move(r);
}

// kvroute-size and the gauges agree on a fixed workload: the same working
// set, retention per tier, reuse gap and remedies, the router measuring what
// kvroute-size is told.
TEST(RouterSizingTest, AgreesWithKvrouteSizeOnAFixedWorkload) {
  const Workload w;
  const kvsize::Capacity cap = kvsize::ComputeCapacity(Llama8B(), H100());
  // vLLM reports whole blocks of 16 tokens.
  const int64_t engine_capacity = kvsize::NumGpuBlocks(cap, 16) * 16;
  auto router = MakeFleet(w, engine_capacity, cap.effective_kv_bytes_per_token);
  const KvSizingReport live = RunWorkload(*router, w, 15);

  // kvroute-size --profile <Llama-3.1-8B on H100> --instances 2 --sessions 80
  //     --session-tokens 31000 --cpu-bytes 64GiB --write-rate 8000 --think-time 20 --ttft 2
  kvsize::Workload wl;
  wl.sessions = w.sessions;
  wl.tokens_per_session = static_cast<double>(w.footprint());
  const kvsize::UtilisationWindow window = kvsize::ComputeUtilisationWindow(Llama8B(), H100(), wl);
  const kvsize::TieringResult offline =
      kvsize::ComputeTiering(Llama8B(), cap, window,
                             {.cpu_buffer_bytes = w.host_gib * kGiB,
                              .write_rate_tokens_per_s = w.write_rate(),
                              .think_time_s = w.think_s,
                              .ttft_s = w.ttft_s,
                              .instances = w.instances});

  // The inputs: measured live, given offline.
  EXPECT_EQ(live.load.instances, offline.load.instances);
  EXPECT_DOUBLE_EQ(live.load.working_set_tokens, offline.load.working_set_tokens);
  EXPECT_NEAR(live.load.gpu_capacity_tokens, offline.load.gpu_capacity_tokens, 2 * 16);
  EXPECT_DOUBLE_EQ(live.load.host_capacity_tokens, offline.load.host_capacity_tokens);
  EXPECT_NEAR(live.load.gpu_write_rate_tokens_per_s, w.write_rate(), 1e-6);
  EXPECT_NEAR(live.load.host_write_rate_tokens_per_s, w.write_rate(), 1e-6);
  EXPECT_NEAR(live.load.reuse_gap_s, offline.load.reuse_gap_s, 1e-9);
  EXPECT_EQ(live.reuse_gaps, 10 * w.sessions);  // a window of turns
  EXPECT_DOUBLE_EQ(live.load.kv_bytes_per_token, offline.load.kv_bytes_per_token);

  // The outputs.
  const kvsize::TierPressure& a = live.pressure;
  const kvsize::TierPressure& b = offline.pressure;
  EXPECT_NEAR(a.gpu_retention_s, b.gpu_retention_s, 1e-4 * b.gpu_retention_s);
  EXPECT_NEAR(a.host_retention_s, b.host_retention_s, 1e-9 * b.host_retention_s);
  EXPECT_DOUBLE_EQ(a.host_retention_s, offline.retention_s);
  EXPECT_EQ(a.retention_ok, b.retention_ok);
  EXPECT_NEAR(a.spill_tokens, b.spill_tokens, 2 * 16);
  EXPECT_EQ(a.thrash_ahead, b.thrash_ahead);
  EXPECT_EQ(a.add_instances, b.add_instances);
  EXPECT_EQ(a.add_host_gib_per_instance, b.add_host_gib_per_instance);
  // And what they say: 2.48M tokens against 0.87M of HBM and 1.05M of host.
  EXPECT_TRUE(a.thrash_ahead);
  EXPECT_TRUE(a.retention_ok);  // host: 1,048,576 / 8,000 = 131 s against 22 s
  EXPECT_EQ(a.add_instances, 1);
  EXPECT_EQ(a.add_host_gib_per_instance, 35);
}

// An engine's KV events count its writes; the working set drops sessions
// idle past the resident window.
TEST(RouterSizingTest, EventsCountWritesAndIdleSessionsLeave) {
  Workload w;
  w.sessions = 4;
  auto router = MakeFleet(w, 1'000'000, 131072);
  RunWorkload(*router, w, 1);  // no gaps yet, every session resident
  KvSizingReport s = router->Sizing(At(20));
  EXPECT_EQ(s.load.working_set_tokens, 4.0 * w.footprint());
  EXPECT_EQ(s.reuse_gaps, 0);

  // From its first event on, instance 0's GPU writes are its stored blocks.
  const EngineKvEvent stored[] = {{EngineKvEvent::Kind::kStored, 40000},
                                  {EngineKvEvent::Kind::kRemoved, 9999},
                                  {EngineKvEvent::Kind::kStored, 20000, /*host=*/true}};
  router->ApplyEngineKvEvents(0, stored);
  // Measured from the first reading, at 10 s (the turn's writes came before it).
  s = router->Sizing(At(30));
  EXPECT_DOUBLE_EQ(s.load.gpu_write_rate_tokens_per_s, 40000.0 / 20);
  EXPECT_DOUBLE_EQ(s.load.host_write_rate_tokens_per_s, 20000.0 / 20);

  // Idle for the 60 s resident window: nothing left to keep warm.
  s = router->Sizing(At(10 + 60 + 1));
  EXPECT_EQ(s.load.working_set_tokens, 0);
}

// No traffic: nothing is written, so every tier keeps its blocks forever and
// nothing thrashes.
TEST(RouterSizingTest, IdleFleetRetainsForever) {
  Workload w;
  auto router = MakeFleet(w, 500000, 131072);
  router->Sizing(At(0));
  const KvSizingReport s = router->Sizing(At(60));
  EXPECT_EQ(s.load.instances, 2);
  EXPECT_DOUBLE_EQ(s.load.gpu_capacity_tokens, 1e6);
  EXPECT_DOUBLE_EQ(s.load.host_capacity_tokens, 2 * 64 * kGiB / 131072);
  EXPECT_TRUE(std::isinf(s.pressure.gpu_retention_s));
  EXPECT_FALSE(s.pressure.thrash_ahead);
  // An ejected instance's capacity is not the fleet's.
  router->SetHealthy(1, false);
  EXPECT_DOUBLE_EQ(router->Sizing(At(61)).load.gpu_capacity_tokens, 5e5);
}

}  // namespace
}  // namespace kvroute::router
