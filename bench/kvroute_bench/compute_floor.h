// A request's compute floor on the fleet's profile: how long one idle instance needs to
// prefill the prompt tokens its engine did not have cached, the part of a TTFT no routing
// can remove. Reports split HEAVY TTFT into this floor and the rest (stats.h).
//
// The floor replays the simulator's step-cost model (sim/profile.h, TimingModel) on an empty
// batch: the uncached tokens (at least the prompt's last one, which vLLM always recomputes)
// in chunks of max_num_batched_tokens, each step costing step_fixed_s + weight_read_s x
// WeightFraction(chunk) + PrefillChunkCost(context, chunk); a last chunk of one token costs
// a decode step, as the engine schedules it.
//
// Usage:
//   RunOptions o;
//   absl::Status s = UseFleetProfile("configs/profiles/h20-qwen3-coder-30b-a3b.yaml", o);
//   double floor = PrefillFloorSeconds(profile, 30000, 2000);  // modelled seconds
//
// Thread-safety: pure functions; the floor function UseFleetProfile installs owns a copy of
// the profile's timing.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "bench/kvroute_bench/runner.h"
#include "sim/profile.h"

namespace kvroute::bench {

// Modelled seconds; 0 for a non-positive prompt.
double PrefillFloorSeconds(const sim::Profile& profile, int64_t prompt_tokens,
                           int64_t cached_tokens);

// Loads `profile_path` (empty: the simulator's built-in default, as kvroute-sim without
// --profile) and sets run.prefill_floor and run.kv_bytes_per_token from it.
absl::Status UseFleetProfile(const std::string& profile_path, RunOptions& run);

}  // namespace kvroute::bench
