// The /metrics series of the fleet-shared KV pool (sim/kv_pool.h) as one instance serves
// them: its own traffic with the pool, and the pool's occupancy, which every instance of the
// fleet reports alike (sim/README.md, "Fleet-shared KV pool"). vLLM's connector-agnostic
// series (vllm:external_prefix_cache_*, vllm:prompt_tokens_by_source) count pool loads as
// external; these tell the pool's part apart.
#pragma once

#include <string>

#include "sim/engine.h"

namespace sim {

// Appends the kvroute_sim_pool_* series with the instance's `labels`; nothing without a pool.
void AppendKvPoolMetrics(const Engine& engine, const std::string& labels, std::string& out);

}  // namespace sim
