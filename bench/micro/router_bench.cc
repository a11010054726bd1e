// Router micro-benchmarks (Google Benchmark).
//
// BM_RouteDecision/<prompt tokens>/<instances>: the time of one routing
// decision as the proxy pays it: HashPromptChunks over the prompt bytes, then
// Router::Route (shadow-index walk, snapshot, baseline scoring, reservation),
// over a warm index: every instance holds a different-length prefix of the
// prompt plus unrelated chains filling about half its capacity. Manual time
// covers exactly hashing + Route; releasing the reservation is not timed.
// Counters: bytes_per_chunk = index heap bytes / (instance, chunk) entries.
//
//   build-router/bench/micro/router_bench --benchmark_filter=RouteDecision
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "router/policy_registry.h"
#include "router/prefix_hash.h"
#include "router/router.h"

namespace kvroute::router {
namespace {

constexpr size_t kChunkBytes = 256;
const absl::Time kNow = absl::FromUnixSeconds(1700000000);

// Varied English-like text at about 4 bytes per token: words of 1-8
// letters and a space.
std::string VariedText(size_t tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s;
  s.reserve(tokens * 4 + 16);
  while (s.size() < tokens * 4) {
    const int len = 1 + static_cast<int>(rng() % 5);
    for (int i = 0; i < len; ++i) s.push_back(static_cast<char>('a' + rng() % 26));
    s.push_back(rng() % 11 == 0 ? '\n' : ' ');
  }
  s.resize(tokens * 4);
  return s;
}

std::vector<uint64_t> RandomChain(std::mt19937_64& rng, size_t len) {
  std::vector<uint64_t> c(len);
  for (uint64_t& h : c) h = rng();
  return c;
}

// Makes `backend` hold `chain` through the public API.
void Hold(Router& r, int backend, std::vector<uint64_t> chain) {
  RequestFeatures f;
  f.prompt_bytes = "x";
  f.chunk_hashes = std::move(chain);
  absl::StatusOr<RouteTicket> t = r.Route(f, kNow);
  if (!t.ok()) std::abort();
  r.OnComplete(*t, {.ok = true, .served_by = backend}, kNow);
}

void BM_RouteDecision(benchmark::State& state) {
  const size_t tokens = static_cast<size_t>(state.range(0));
  const int instances = static_cast<int>(state.range(1));
  Options o;
  o.mode = "baseline";
  o.chunk_bytes = kChunkBytes;
  std::vector<BackendSpec> specs(instances);
  for (int i = 0; i < instances; ++i) specs[i].name = "gpu" + std::to_string(i);
  auto created = Router::Create(o, specs);
  if (!created.ok()) {
    state.SkipWithError("Router::Create failed");
    return;
  }
  Router& router = **created;

  RequestFeatures req;
  req.model = "m";
  req.prompt_bytes = VariedText(tokens, 1);
  const std::vector<uint64_t> chain = HashPromptChunks(req.prompt_bytes, kChunkBytes);

  // Warm the index: instance i holds a prefix of i*37 mod (n+1) chunks of
  // the prompt (instance 0 all of it) continued by its own chunks, plus
  // unrelated chains up to about half of its capacity (6250 chunks).
  std::mt19937_64 rng(2);
  const int64_t capacity_chunks = o.default_capacity_tokens * 4 / static_cast<int64_t>(kChunkBytes);
  for (int i = 0; i < instances; ++i) {
    int64_t held = 0;
    while (held < capacity_chunks / 2) {
      const size_t len = std::min<size_t>(2048, static_cast<size_t>(capacity_chunks / 2 - held));
      Hold(router, i, RandomChain(rng, len));
      held += static_cast<int64_t>(len);
    }
    const size_t shared =
        i == 0 ? chain.size() : (static_cast<size_t>(i) * 37) % (chain.size() + 1);
    std::vector<uint64_t> mine(chain.begin(), chain.begin() + static_cast<long>(shared));
    const std::vector<uint64_t> tail = RandomChain(rng, chain.size() - shared);
    mine.insert(mine.end(), tail.begin(), tail.end());
    Hold(router, i, std::move(mine));
  }

  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    req.chunk_hashes = HashPromptChunks(req.prompt_bytes, kChunkBytes);
    absl::StatusOr<RouteTicket> t = router.Route(req, kNow);
    const auto end = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(t);
    if (!t.ok()) {
      state.SkipWithError("Route failed");
      break;
    }
    router.OnComplete(*t, {.ok = false}, kNow);
    state.SetIterationTime(std::chrono::duration<double>(end - start).count());
  }
  const RouterStats stats = router.Stats();
  state.counters["chunks"] = static_cast<double>(chain.size());
  state.counters["index_entries"] = static_cast<double>(stats.index_replicas);
  state.counters["index_MiB"] = static_cast<double>(stats.index_memory_bytes) / (1 << 20);
  state.counters["bytes_per_chunk"] =
      static_cast<double>(stats.index_memory_bytes) / static_cast<double>(stats.index_replicas);
}

BENCHMARK(BM_RouteDecision)
    ->ArgNames({"tokens", "instances"})
    ->ArgsProduct({{1024, 32768, 131072}, {8, 64, 256}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// One policy's Decide() alone on a busy fleet's snapshot, for a cold HEAVY request (the
// case v1_cost and v2 spend their candidate search on): mode 0 baseline, 1 v1_cost, 2 v2.
void BM_PolicyDecide(benchmark::State& state) {
  static const char* const kModes[] = {"baseline", "v1_cost", "v2"};
  const int instances = static_cast<int>(state.range(1));
  Options o;
  o.mode = kModes[state.range(0)];
  auto made = MakePolicy(o, std::vector<BackendSpec>(instances));
  if (!made.ok()) {
    state.SkipWithError("MakePolicy failed");
    return;
  }
  std::mt19937_64 rng(3);
  FleetSnapshot f;
  f.prompt_tokens_est = 50000;
  f.footprint_tokens_est = 50256;
  f.backends.resize(instances);
  for (BackendSnapshot& b : f.backends) {
    b.inflight_prefill_tokens = static_cast<int64_t>(rng() % 40000);
    b.decoding_requests = static_cast<int64_t>(rng() % 40);
    b.inflight_tokens = static_cast<int64_t>(rng() % 200000);
    b.kv_capacity_tokens = 286000;
    b.resident_tokens = static_cast<int64_t>(rng() % 300000);
    b.cached_tokens_est = static_cast<int64_t>(rng() % 3000);
  }
  for (auto _ : state) {
    f.sequence++;
    benchmark::DoNotOptimize((*made)->Decide(f));
  }
  state.SetLabel(kModes[state.range(0)]);
}

BENCHMARK(BM_PolicyDecide)
    ->ArgNames({"mode", "instances"})
    ->ArgsProduct({{0, 1, 2}, {8, 64, 256}})
    ->Unit(benchmark::kMicrosecond);

// Hashing alone, for reference.
void BM_HashPromptChunks(benchmark::State& state) {
  const std::string prompt = VariedText(static_cast<size_t>(state.range(0)), 3);
  for (auto _ : state) benchmark::DoNotOptimize(HashPromptChunks(prompt, kChunkBytes));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(prompt.size()));
}
BENCHMARK(BM_HashPromptChunks)->Arg(1024)->Arg(32768)->Arg(131072)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvroute::router

BENCHMARK_MAIN();
