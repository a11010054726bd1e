// Shared by the end-to-end smoke tests (ablation and sweep): where the built kvroute and
// kvroute-sim binaries are, and the ablation options for a tiny simulated fleet on loopback
// ephemeral ports at a fast time scale, with bounded waits.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <string_view>

#include "bench/kvroute_bench/ablation.h"

namespace kvroute::bench::testing {

// `env` when set, else the path the build configured.
inline std::string BinaryPath(const char* built, const char* env) {
  if (const char* e = std::getenv(env); e != nullptr && *e != '\0') return e;
  return built;
}

inline bool Executable(const std::string& p) {
  return !p.empty() && access(p.c_str(), X_OK) == 0;
}

// Two simulated instances at time scale 0.02, sampled every 50 ms, every wait bounded.
inline void UseSmokeFleet(AblationOptions& o, const std::string& kvroute, const std::string& sim,
                          const std::string& out_dir) {
  o.kvroute_bin = kvroute;
  o.sim_bin = sim;
  o.instances = 2;
  o.sim_time_scale = 0.02;
  o.sim_seed = 3;
  o.out_dir = out_dir;
  o.startup_timeout_s = 30;
  o.run_template.sample_interval_s = 0.05;
  o.run_template.progress_interval_s = 5;
  o.run_template.request_timeout_s = 20;
  o.run_template.drain_timeout_s = 25;
  o.run_template.progress = [](std::string_view) {};
}

}  // namespace kvroute::bench::testing
