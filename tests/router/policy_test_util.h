// Hand-built fleet snapshots for the policy tests.
#pragma once

#include <vector>

#include "router/policy.h"

namespace kvroute::router::testing {

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

}  // namespace kvroute::router::testing
