// Where a run's prompt tokens came from, from the engines' own counters in the fleet samples
// (metrics_sampler.h): the GPU prefix cache, a reload from the host-memory tier, a reload
// from the fleet-shared pool, or computed. vLLM exports three sources
// (vllm:prompt_tokens_by_source{local_compute, local_cache_hit, external_kv_transfer});
// kvroute-sim also says which external tokens came from its pool
// (kvroute_sim_pool_prompt_tokens_loaded_total), the rest being host-tier reloads (and P/D
// pulls, which vLLM counts as external too).
//
//   PromptSources s = SumPromptSources(run.samples);   // each instance's last sample, summed
//   if (s.known) ... s.gpu_hit / s.total() ...
//
// Pure functions.
#pragma once

#include <string>
#include <vector>

#include "bench/kvroute_bench/records.h"
#include "bench/kvroute_bench/report.h"

namespace kvroute::bench {

struct PromptSources {
  bool known = false;  // some instance published vllm:prompt_tokens_by_source
  double gpu_hit = 0;
  double host_reload = 0;  // external less the pool's: host tier and P/D pulls
  double pool_reload = 0;
  double computed = 0;
  double total() const { return gpu_hit + host_reload + pool_reload + computed; }
};

// Sums each instance's latest sample (counters grow for the whole run).
PromptSources SumPromptSources(const std::vector<InstanceSample>& samples);

// The report's table, one row per run that has them; empty when no run does.
std::vector<std::string> PromptSourceHeader();
std::vector<std::vector<std::string>> PromptSourceRows(const Report& report);

}  // namespace kvroute::bench
