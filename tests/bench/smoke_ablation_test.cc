// End-to-end smoke ablation: kvroute-sim + kvroute started as child processes on loopback
// ephemeral ports, a few agentic jobs at a fast time scale, reports written.
// Skipped (with the reason) only when the kvroute or kvroute-sim binaries are not built.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/kvroute_bench/ablation.h"
#include "tests/bench/smoke_fleet.h"

namespace kvroute::bench {
namespace {

std::string ReadFile(const std::filesystem::path& p);

using testing::BinaryPath;
using testing::Executable;

TEST(SmokeAblationTest, BaselineAndV2OnSimulatedFleet) {
  const std::string kvroute = BinaryPath(KVROUTE_BIN, "KVROUTE_BIN");
  const std::string sim = BinaryPath(KVROUTE_SIM_BIN, "KVROUTE_SIM_BIN");
  if (!Executable(kvroute) || !Executable(sim)) {
    GTEST_SKIP() << "kvroute (" << (kvroute.empty() ? "no target" : kvroute) << ") or kvroute-sim ("
                 << (sim.empty() ? "no target" : sim)
                 << ") is not built; build both to run the smoke ablation";
  }
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("kvb_smoke_" + std::to_string(::getpid()));
  std::filesystem::remove_all(out);

  AblationOptions o;
  o.modes = {"baseline", "v2"};
  o.thresholds = {20000};
  testing::UseSmokeFleet(o, kvroute, sim, out.string());
  WorkloadSpec w;
  w.kind = WorkloadKind::kAgentic;
  w.agentic.jobs_per_second = 1;
  w.agentic.duration_s = 10;  // modelled seconds: 0.2 s of wall time
  w.agentic.max_jobs = 4;
  w.agentic.turns = 3;
  w.agentic.seed = 9;
  const size_t jobs = PlanAgenticJobs(w.agentic).size();
  ASSERT_GT(jobs, 0u);

  absl::StatusOr<Report> report = RunAblation(o, w);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->runs.size(), 2u);
  for (const RunResult& run : report->runs) {
    EXPECT_EQ(run.jobs.size(), jobs) << run.name;
    EXPECT_EQ(run.requests.size(), jobs * 3) << run.name;
    for (const RequestRecord& r : run.requests) {
      EXPECT_TRUE(r.ok()) << run.name << ": " << r.error;
      EXPECT_FALSE(r.klass.empty()) << run.name << " request " << r.request_id;
      EXPECT_FALSE(r.backend.empty());
      EXPECT_GT(r.prompt_tokens, 0);
      EXPECT_GE(r.cached_tokens, 0);
    }
    EXPECT_FALSE(run.samples.empty());
    const RunSummary s = Summarize(run);
    EXPECT_GT(s.hit_ratio, 0) << run.name << ": later turns should hit the prefix cache";
  }
  for (const char* f : {"report.json", "report.md", "report.html"}) {
    EXPECT_TRUE(std::filesystem::exists(out / f)) << f;
  }
  std::filesystem::remove_all(out);
}

// `o` set for baseline alone on the smoke fleet, writing under a fresh temporary
// directory named from `tag`, which it returns; empty when the binaries are not built.
std::filesystem::path BaselineOnTheSmokeFleet(const std::string& tag, AblationOptions& o) {
  const std::string kvroute = BinaryPath(KVROUTE_BIN, "KVROUTE_BIN");
  const std::string sim = BinaryPath(KVROUTE_SIM_BIN, "KVROUTE_SIM_BIN");
  if (!Executable(kvroute) || !Executable(sim)) return {};
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / (tag + std::to_string(::getpid()));
  std::filesystem::remove_all(out);
  o.modes = {"baseline"};
  testing::UseSmokeFleet(o, kvroute, sim, out.string());
  return out;
}

// `jobs` agentic jobs of `turns` turns, arriving at 1 job/s.
WorkloadSpec ShortJobs(int jobs, int turns) {
  WorkloadSpec w;
  w.kind = WorkloadKind::kAgentic;
  w.agentic.jobs_per_second = 1;
  w.agentic.duration_s = 10;
  w.agentic.max_jobs = jobs;
  w.agentic.turns = turns;
  w.agentic.seed = 9;
  return w;
}

// Three kvroute replicas with the same config behind the generator's round robin: every
// replica answers its share, writes its own request log, and the run joins all three.
TEST(SmokeAblationTest, ReplicasShareTheRequestsRoundRobin) {
  AblationOptions o;
  const std::filesystem::path out = BaselineOnTheSmokeFleet("kvb_replicas_", o);
  if (out.empty()) GTEST_SKIP() << "kvroute or kvroute-sim is not built";
  o.kvroute_replicas = 3;
  WorkloadSpec w = ShortJobs(/*jobs=*/3, /*turns=*/3);
  absl::StatusOr<Report> report = RunAblation(o, w);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->runs.size(), 1u);
  std::vector<int> answered(3, 0);
  for (const RequestRecord& r : report->runs[0].requests) {
    EXPECT_TRUE(r.ok()) << r.error;
    ASSERT_GE(r.replica, 0);
    ASSERT_LT(r.replica, 3);
    ++answered[r.replica];
    EXPECT_GE(r.cached_tokens_est, 0) << "joined with its replica's request log";
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_GT(answered[i], 0) << "replica " << i;
    EXPECT_TRUE(
        std::filesystem::exists(out / "baseline" / ("requests-" + std::to_string(i) + ".jsonl")));
  }
  bool described = false;
  for (const auto& [key, value] : report->setup) {
    if (key == "fleet") described = value.find("3 kvroute replicas") != std::string::npos;
  }
  EXPECT_TRUE(described);
  std::filesystem::remove_all(out);
}

// The replicas share their load through a redis-server the bench starts on a free loopback
// port: every replica's config names it, and each publishes its load there.
TEST(SmokeAblationTest, ReplicasShareThroughARedisTheBenchStarts) {
  AblationOptions o;
  const std::filesystem::path out = BaselineOnTheSmokeFleet("kvb_shared_", o);
  if (out.empty()) GTEST_SKIP() << "kvroute or kvroute-sim is not built";
  o.kvroute_replicas = 2;
  o.cluster_store = "redis";
  o.log_level = "info";
  WorkloadSpec w = ShortJobs(/*jobs=*/2, /*turns=*/2);
  absl::StatusOr<Report> report = RunAblation(o, w);
  ASSERT_TRUE(report.ok()) << report.status() << " (deploy/install-deps.sh installs redis-server)";
  int admissions = 0;
  for (const RequestRecord& r : report->runs[0].requests) {
    EXPECT_TRUE(r.ok()) << r.error;
    // Session turns the residency gate admitted reserve their room in the store, within
    // the fill (a session larger than the fill only alone).
    if (r.cluster_admission.empty() || r.cluster_admission == "unavailable") continue;
    ++admissions;
    EXPECT_GT(r.cluster_footprint_tokens, 0);
    EXPECT_GT(r.cluster_fill_tokens, 0);
    EXPECT_TRUE(r.cluster_admission == "resident" ||
                r.cluster_reserved_tokens <= r.cluster_fill_tokens ||
                r.cluster_reserved_tokens == r.cluster_footprint_tokens)
        << r.cluster_reserved_tokens << " reserved, fill " << r.cluster_fill_tokens;
  }
  EXPECT_GT(admissions, 0) << "no session turn reserved its room in the store";
  const std::string yaml = ReadFile(out / "baseline" / "kvroute.yaml");
  EXPECT_NE(yaml.find("cluster: {store: \"redis://127.0.0.1:"), std::string::npos) << yaml;
  for (int i = 0; i < 2; ++i) {
    const std::string log = ReadFile(out / "baseline" / ("kvroute-" + std::to_string(i) + ".log"));
    EXPECT_NE(log.find("cluster: replica"), std::string::npos) << log;
  }
  EXPECT_TRUE(std::filesystem::exists(out / "baseline" / "redis.log"));
  std::filesystem::remove_all(out);
}

TEST(SmokeAblationTest, KillingAReplicaNeedsAnother) {
  AblationOptions o;
  o.modes = {"baseline"};
  o.kill_replica_at_s = 5;
  WorkloadSpec w;
  w.kind = WorkloadKind::kAgentic;
  absl::StatusOr<Report> report = RunAblation(o, w);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("--kvroute-replicas"), std::string::npos)
      << report.status();
  // A store shared by one replica shares nothing.
  o.kill_replica_at_s = -1;
  o.cluster_store = "redis";
  report = RunAblation(o, w);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("--kvroute-replicas"), std::string::npos)
      << report.status();
  // Nor can a store that is not there be killed.
  o.cluster_store = "none";
  o.kill_store_at_s = 3;
  report = RunAblation(o, w);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("--cluster-store redis"), std::string::npos)
      << report.status();
}

// The store killed mid-run and started again, empty, on its port: the replicas route on
// their own state meanwhile (no request fails because of it) and rejoin it.
TEST(SmokeAblationTest, AStoreKilledMidRunCostsNoRequest) {
  AblationOptions o;
  const std::filesystem::path out = BaselineOnTheSmokeFleet("kvb_store_kill_", o);
  if (out.empty()) GTEST_SKIP() << "kvroute or kvroute-sim is not built";
  o.kvroute_replicas = 2;
  o.cluster_store = "redis";
  o.kill_store_at_s = 1;
  o.store_down_s = 2;
  o.log_level = "info";
  WorkloadSpec w = ShortJobs(/*jobs=*/3, /*turns=*/3);
  absl::StatusOr<Report> report = RunAblation(o, w);
  ASSERT_TRUE(report.ok()) << report.status() << " (deploy/install-deps.sh installs redis-server)";
  ASSERT_EQ(report->runs[0].requests.size(), 9u);
  for (const RequestRecord& r : report->runs[0].requests) EXPECT_TRUE(r.ok()) << r.error;
  // Two "Ready to accept connections": the store started again on the same port; and one
  // SIGTERM, the bench's stop at the end (the first store died by SIGKILL).
  const std::string log = ReadFile(out / "baseline" / "redis.log");
  auto count = [&log](const std::string& what) {
    size_t n = 0;
    for (size_t at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("Ready to accept"), 2u) << log;
  EXPECT_EQ(count("Received SIGTERM"), 1u) << log;
  std::filesystem::remove_all(out);
}

std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Two agent jobs of two turns, arriving within 10 modelled seconds.
WorkloadSpec TwoJobs() {
  WorkloadSpec w;
  w.kind = WorkloadKind::kAgentic;
  w.agentic.jobs_per_second = 1;
  w.agentic.duration_s = 10;
  w.agentic.max_jobs = 2;
  w.agentic.turns = 2;
  w.agentic.seed = 9;
  return w;
}

// Runs a two-job ablation of `mode` with the fleet's options (KV tiers, engine flags) as
// `fleet` sets them, and checks that they reached the simulated fleet: the report's setup
// says `setup_says` and the simulator's start-up line `sim_says`; returns the run's
// directory (empty when skipped).
std::filesystem::path ExpectOptionsReachTheFleet(const std::string& mode, const std::string& tag,
                                                 void (*fleet)(AblationOptions&),
                                                 const std::string& sim_says,
                                                 const std::string& setup_says) {
  const std::string kvroute = BinaryPath(KVROUTE_BIN, "KVROUTE_BIN");
  const std::string sim = BinaryPath(KVROUTE_SIM_BIN, "KVROUTE_SIM_BIN");
  if (!Executable(kvroute) || !Executable(sim)) return {};
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("kvb_tier_" + tag + std::to_string(::getpid()));
  std::filesystem::remove_all(out);
  AblationOptions o;
  o.modes = {mode};
  testing::UseSmokeFleet(o, kvroute, sim, out.string());
  fleet(o);
  WorkloadSpec w = TwoJobs();

  absl::StatusOr<Report> report = RunAblation(o, w);
  EXPECT_TRUE(report.ok()) << report.status();
  if (!report.ok() || report->runs.size() != 1u) {
    ADD_FAILURE() << "one run expected";
    return out;
  }
  for (const RequestRecord& r : report->runs[0].requests) EXPECT_TRUE(r.ok()) << r.error;
  bool described = false;
  for (const auto& [key, value] : report->setup) {
    if (key == "fleet") described = value.find(setup_says) != std::string::npos;
  }
  EXPECT_TRUE(described) << setup_says;
  const std::string log = ReadFile(out / mode / "sim.log");
  EXPECT_NE(log.find(sim_says), std::string::npos) << log;
  return out;
}

TEST(SmokeAblationTest, KvPoolSizeReachesTheFleetAndKvrouteFollowsItsEvents) {
  const std::filesystem::path out = ExpectOptionsReachTheFleet(
      "round_robin", "pool", [](AblationOptions& o) { o.kv_pool_size_gib = 2; },
      "fleet-shared KV pool, 2 GiB", "fleet-shared KV pool 2 GiB");
  if (out.empty()) GTEST_SKIP() << "kvroute or kvroute-sim is not built";
  EXPECT_NE(ReadFile(out / "round_robin" / "kvroute.yaml").find("kv_events: {pool: \"tcp://"),
            std::string::npos);
  std::filesystem::remove_all(out);
}

TEST(SmokeAblationTest, KvOffloadingSizeReachesTheSimulatedFleet) {
  const std::filesystem::path out = ExpectOptionsReachTheFleet(
      "baseline", "native", [](AblationOptions& o) { o.kv_offloading_size_gib = 2; },
      "KV offloading to host memory (native), 2 GiB",
      "host KV tier 2 GiB per instance (--kv-offloading-size)");
  if (out.empty()) GTEST_SKIP() << "kvroute or kvroute-sim is not built";
  std::filesystem::remove_all(out);
}

TEST(SmokeAblationTest, LongPrefillTokenThresholdReachesTheSimulatedFleet) {
  const std::filesystem::path out = ExpectOptionsReachTheFleet(
      "baseline", "lpt", [](AblationOptions& o) { o.long_prefill_token_threshold = 512; },
      "at most 512 tokens of one request a step",
      "at most 512 tokens of one prompt a step (--long-prefill-token-threshold)");
  if (out.empty()) GTEST_SKIP() << "kvroute or kvroute-sim is not built";
  std::filesystem::remove_all(out);
}

TEST(SmokeAblationTest, SimThreadsReachTheSimulatedFleet) {
  const std::filesystem::path out = ExpectOptionsReachTheFleet(
      "baseline", "threads", [](AblationOptions& o) { o.sim_threads = 2; }, "time scale",
      "its instances' steps on 2 threads (--sim-threads)");
  if (out.empty()) GTEST_SKIP() << "kvroute or kvroute-sim is not built";
  const std::string log = ReadFile(out / "baseline" / "sim.log");
  EXPECT_NE(log.find(", 2 threads"), std::string::npos) << log;
  std::filesystem::remove_all(out);
  AblationOptions host;
  EXPECT_GE(SimThreads(host), 1);  // 0: the host's hardware threads
  host.sim_threads = 3;
  EXPECT_EQ(SimThreads(host), 3);
}

TEST(SmokeAblationTest, KvOffloadingBackendReachesTheSimulatedFleet) {
  const std::filesystem::path out = ExpectOptionsReachTheFleet(
      "baseline", "lmcache",
      [](AblationOptions& o) {
        o.kv_offloading_size_gib = 2;
        o.kv_offloading_backend = "lmcache";
      },
      "KV offloading to host memory (lmcache), 2 GiB",
      "host KV tier 2 GiB per instance (--kv-offloading-size, backend lmcache)");
  if (out.empty()) GTEST_SKIP() << "kvroute or kvroute-sim is not built";
  std::filesystem::remove_all(out);
}

// Variants run after the modes, each with its own kvroute config and fleet: the router key
// reaches its kvroute, the host tier its own simulator only.
TEST(SmokeAblationTest, VariantsGetTheirOwnRouterKeysAndHostTier) {
  const std::string kvroute = BinaryPath(KVROUTE_BIN, "KVROUTE_BIN");
  const std::string sim = BinaryPath(KVROUTE_SIM_BIN, "KVROUTE_SIM_BIN");
  if (!Executable(kvroute) || !Executable(sim)) {
    GTEST_SKIP() << "kvroute or kvroute-sim is not built";
  }
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("kvb_variants_" + std::to_string(::getpid()));
  std::filesystem::remove_all(out);
  AblationOptions o;
  o.modes = {"baseline"};
  testing::UseSmokeFleet(o, kvroute, sim, out.string());
  o.kv_offloading_size_gib = 2;
  o.variants = {*ParseConfigVariant("blind=baseline;tier_aware=false"),
                *ParseConfigVariant("notier=baseline;fleet.kv_offloading_size=0")};
  WorkloadSpec w = TwoJobs();

  absl::StatusOr<Report> report = RunAblation(o, w);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->runs.size(), 3u);
  EXPECT_EQ(report->runs[1].name, "blind");
  EXPECT_EQ(report->runs[2].name, "notier");
  for (const RunResult& run : report->runs) {
    EXPECT_FALSE(run.requests.empty()) << run.name;
    for (const RequestRecord& r : run.requests) EXPECT_TRUE(r.ok()) << run.name << ": " << r.error;
  }
  const std::string tier = "KV offloading to host memory (native), 2 GiB";
  EXPECT_NE(ReadFile(out / "baseline" / "sim.log").find(tier), std::string::npos);
  EXPECT_NE(ReadFile(out / "blind" / "sim.log").find(tier), std::string::npos);
  EXPECT_EQ(ReadFile(out / "notier" / "sim.log").find("KV offloading"), std::string::npos);
  EXPECT_EQ(ReadFile(out / "baseline" / "kvroute.yaml").find("tier_aware"), std::string::npos);
  EXPECT_NE(ReadFile(out / "blind" / "kvroute.yaml").find("\n  tier_aware: false\n"),
            std::string::npos);
  bool described = false;
  for (const auto& [key, value] : report->setup) {
    described =
        described || (key == "variants" && value ==
                                               "blind: baseline, router tier_aware=false; notier: "
                                               "baseline, no host KV tier");
  }
  EXPECT_TRUE(described);
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace kvroute::bench
