// KV event micro-benchmarks (Google Benchmark): what one engine step's batch
// costs kvroute's subscription thread.
//
// BM_DecodeStepBatch/<blocks stored>/<blocks removed>: DecodeEventBatch of a
// batch as vLLM publishes it for one scheduler step: one BlockStored of the
// blocks a prefill completed (16 tokens each, token ids included) and one
// BlockRemoved per block evicted to make room.
// BM_ApplyRemovals/<blocks removed>: Router::ApplyEngineKvEvents of those
// removals on an 8-instance router whose shadows hold 100K tokens each (the
// time the router's lock is held), refilled outside the timing.
//
//   build/bench/micro/kv_events_bench
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kvevents/wire.h"
#include "router/prefix_hash.h"
#include "router/router.h"
#include "sim/kv_events.h"

namespace kvroute::kvevents {
namespace {

std::string StepBatch(int stored, int removed) {
  std::mt19937_64 rng(1);
  std::vector<sim::KvCacheEvent> events;
  sim::KvCacheEvent s;
  s.kind = sim::KvCacheEvent::Kind::kBlockStored;
  s.block_size = 16;
  for (int i = 0; i < stored; ++i) s.block_hashes.push_back(rng());
  s.parent_block_hash = rng();
  for (int i = 0; i < stored * 16; ++i) s.token_ids.push_back(static_cast<int32_t>(rng() % 151000));
  events.push_back(s);
  for (int i = 0; i < removed; ++i) {
    sim::KvCacheEvent r;
    r.kind = sim::KvCacheEvent::Kind::kBlockRemoved;
    r.block_hashes.push_back(rng());
    events.push_back(r);
  }
  return sim::EncodeKvEventBatch(1.7e9, events, 0);
}

void BM_DecodeStepBatch(benchmark::State& state) {
  const std::string payload =
      StepBatch(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  for (auto _ : state) {
    absl::StatusOr<EventBatch> b = DecodeEventBatch(payload);
    if (!b.ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(b);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(payload.size()));
  state.counters["payload_bytes"] = static_cast<double>(payload.size());
}
BENCHMARK(BM_DecodeStepBatch)->Args({16, 0})->Args({16, 16})->Args({512, 512});

void BM_ApplyRemovals(benchmark::State& state) {
  constexpr int kInstances = 8;
  constexpr size_t kChunk = 256;
  router::Options o;
  o.chunk_bytes = kChunk;
  std::vector<router::BackendSpec> specs;
  for (int i = 0; i < kInstances; ++i) {
    specs.push_back({.name = "gpu" + std::to_string(i), .host = "127.0.0.1",
                     .port = static_cast<uint16_t>(8100 + i), .capacity_tokens = 100000});
  }
  auto r = router::Router::Create(o, specs);
  if (!r.ok()) {
    state.SkipWithError("router");
    return;
  }
  router::Router& router = **r;
  std::mt19937_64 rng(2);
  auto fill = [&](int backend) {
    // Prompts of 100 chunks (6,400 tokens) until the shadow is full.
    while (router.Report()[static_cast<size_t>(backend)].shadow_chunks < 1500) {
      router::RequestFeatures f;
      f.model = "m";
      f.prompt_bytes.resize(100 * kChunk);
      for (char& c : f.prompt_bytes) c = static_cast<char>('a' + rng() % 26);
      f.chunk_hashes = router::HashPromptChunks(f.prompt_bytes, kChunk);
      auto t = router.Route(f, absl::UnixEpoch());
      if (!t.ok()) return;
      router::Outcome out;
      out.ok = true;
      router.OnComplete(*t, out, absl::UnixEpoch());
    }
  };
  for (int b = 0; b < kInstances; ++b) fill(b);
  const int removed = static_cast<int>(state.range(0));
  std::vector<router::EngineKvEvent> events(
      static_cast<size_t>(removed), {router::EngineKvEvent::Kind::kRemoved, 16});
  int backend = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(router.ApplyEngineKvEvents(backend, events));
    state.PauseTiming();
    if (router.Report()[static_cast<size_t>(backend)].shadow_chunks < 1000) fill(backend);
    backend = (backend + 1) % kInstances;
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * removed);
}
BENCHMARK(BM_ApplyRemovals)->Arg(16)->Arg(512);

}  // namespace
}  // namespace kvroute::kvevents

BENCHMARK_MAIN();
