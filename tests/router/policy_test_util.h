// Hand-built fleets, fleet snapshots, prompts and options for the router and policy tests.
#pragma once

#include <string>
#include <vector>

#include "router/policy.h"
#include "router/prefix_hash.h"
#include "router/router.h"

namespace kvroute::router::testing {

// n backends gpu0..gpu{n-1} on 127.0.0.1:8100+i (never dialled by the router).
inline std::vector<BackendSpec> LoopbackBackends(int n) {
  std::vector<BackendSpec> v;
  for (int i = 0; i < n; ++i) {
    v.push_back({.name = "gpu" + std::to_string(i),
                 .host = "127.0.0.1",
                 .port = static_cast<uint16_t>(8100 + i)});
  }
  return v;
}

inline FleetSnapshot Fleet(int n, int64_t prompt_tokens) {
  FleetSnapshot f;
  f.backends.resize(n);
  f.prompt_tokens_est = prompt_tokens;
  return f;
}

inline void SetCached(FleetSnapshot& f, const std::vector<int64_t>& cached) {
  for (size_t i = 0; i < cached.size(); ++i) f.backends[i].cached_tokens_est = cached[i];
}

inline void SetPrefill(FleetSnapshot& f, const std::vector<int64_t>& tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) f.backends[i].inflight_prefill_tokens = tokens[i];
}

inline void SetInflightTokens(FleetSnapshot& f, const std::vector<int64_t>& tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) f.backends[i].inflight_tokens = tokens[i];
}

inline void SetDecoding(FleetSnapshot& f, const std::vector<int64_t>& reqs) {
  for (size_t i = 0; i < reqs.size(); ++i) f.backends[i].decoding_requests = reqs[i];
}

inline void SetInflightRequests(FleetSnapshot& f, const std::vector<int64_t>& reqs) {
  for (size_t i = 0; i < reqs.size(); ++i) f.backends[i].inflight_requests = reqs[i];
}

// Each backend's KV pool (capacity) and the resident session demand on it.
inline void SetMemory(FleetSnapshot& f, const std::vector<int64_t>& capacity,
                      const std::vector<int64_t>& resident) {
  for (size_t i = 0; i < capacity.size(); ++i) {
    f.backends[i].kv_capacity_tokens = capacity[i];
    f.backends[i].resident_tokens = resident[i];
  }
}

inline void SetUnhealthy(FleetSnapshot& f, const std::vector<int>& down) {
  for (int i : down) f.backends[i].healthy = false;
}

// Round figures for the placement cost's tests: 10,000 prefill tokens/s, 10 kB of KV a
// token over a 1 GB/s link with 0.1 s overhead, the default SLOs, 100-token streams.
inline Options PlacementTestOptions() {
  Options o;
  o.offload_cost.prefill_tokens_per_second = 10000;
  o.offload_cost.kv_bytes_per_token = 1e4;
  o.offload_cost.link_bytes_per_second = 1e9;
  o.offload_cost.transfer_overhead_seconds = 0.1;
  o.slo = {
      .ttft_warm_s = 2, .ttft_medium_s = 10, .ttft_heavy_s = 30, .tpot_s = 0.1, .harm_weight = 1};
  o.default_output_tokens = 100;
  return o;
}

// A prompt of `chunks` whole chunks of `chunk_bytes`: every byte `fill` but
// each chunk's first, its letter ('A', 'B', ...), with its chunk hashes.
inline RequestFeatures ChunkedPrompt(char fill, int chunks, size_t chunk_bytes) {
  RequestFeatures f;
  f.model = "m";
  f.prompt_bytes.assign(static_cast<size_t>(chunks) * chunk_bytes, fill);
  for (size_t i = 0; i < f.prompt_bytes.size(); i += chunk_bytes) {
    f.prompt_bytes[i] = static_cast<char>('A' + i / chunk_bytes);
  }
  f.chunk_hashes = HashPromptChunks(f.prompt_bytes, chunk_bytes);
  return f;
}

}  // namespace kvroute::router::testing
