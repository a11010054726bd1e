// How a run loaded each instance of the fleet. A router that keeps agent sessions where
// their KV is carries each placement for the rest of the session: the instance a session
// starts on serves its turns until it ends or moves. Uneven starts leave some instances
// queueing while others idle, which the fleet's mean busy share hides; this says which
// instances carried the run and how far apart they were.
//
//   std::vector<InstanceLoad> v = InstanceLoads(run.requests, run.samples);
//   LoadSpread s = LoadSpreadOf(v);   // min, mean and max of each figure over the instances
//
// Pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/kvroute_bench/records.h"

namespace kvroute::bench {

struct InstanceLoad {
  std::string instance;
  // From the requests (served ones that name their backend; an offloaded request counts on
  // the decode instance, where its KV stays): the agent sessions whose first served turn
  // ran here, the served requests, and the prompt tokens they computed here (prompt less
  // cached; an offloaded request's whole prompt, computed by its prefill instance, counts
  // there).
  int64_t sessions_started = 0;
  int64_t served = 0;
  int64_t computed_tokens = 0;
  // From the instance's /metrics samples, their means (-1: no sample read the gauge):
  // requests running, requests waiting, and the GPU's busy share.
  double running = -1;
  double waiting = -1;
  double gpu_busy = -1;
};

// One entry per instance that a served request names or a sample reads, by name. Samples of
// a GPU exporter (DCGM, "dcgm-gpu<N>") carry only the busy share and count as their own
// instances.
std::vector<InstanceLoad> InstanceLoads(const std::vector<RequestRecord>& requests,
                                        const std::vector<InstanceSample>& samples);

// One figure over the instances that have it (n == 0: none has it).
struct InstanceRange {
  int n = 0;
  double min = 0, mean = 0, max = 0;
  // The largest over the mean: 1 when even (0 when the mean is 0).
  double max_over_mean() const { return mean > 0 ? max / mean : 0; }
};

struct LoadSpread {
  InstanceRange sessions_started, served, computed_tokens, running, waiting, gpu_busy;
  // The instance with the most requests running on average ("" without samples of it).
  std::string busiest;
};

// Each figure over the instances that have it: the request figures over every instance
// with a request or a running gauge (a sampled instance that served nothing was idle and
// counts as 0; none when no request names its backend), the gauges over those that read them.
LoadSpread LoadSpreadOf(const std::vector<InstanceLoad>& loads);

}  // namespace kvroute::bench
