// kvroute-bench's command-line options shared by its subcommands: the
// workload and run flags (`run`, `ablation`, `sweep`, `trace-stats`) and the
// configurations and embedded simulated fleet (`ablation`, `sweep`).
//
//   CommonFlags flags;
//   flags.Add(cmd);                       // before app.parse
//   WorkloadSpec spec;
//   if (!flags.Finish(spec)) return 2;    // after: a message on stderr
//   CLI::Option* time_scale = AddFleetOptions(cmd, ablation_options);
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/kvroute_bench/ablation.h"
#include "bench/kvroute_bench/runner.h"
#include "bench/kvroute_bench/workload.h"

namespace kvroute::bench {

// The workload, its agentic-long preset and the run's client, SLOs and scrapes.
struct CommonFlags {
  std::string workload = "agentic";
  std::string api = "chat";
  std::string session_ids = "send";
  AgenticOptions agentic;
  TraceOptions trace;
  std::string window;
  uint64_t seed = 1;
  RunOptions run;
  std::vector<std::string> metrics_urls;
  std::string dcgm_url;
  std::string slo_ttft;
  std::string slo_class = "router";
  std::string out;
  // The fleet's KV for the agentic-long sizing rule and the pooled-LRU yardstick: 8 instances of
  // configs/profiles/h20-qwen3-coder-30b-a3b.yaml (kvroute-size: 225,600 tokens each).
  int64_t fleet_kv_tokens = 1804800;
  double working_set_ratio = 2.0;
  double arrival_window_s = 60;
  std::vector<double> long_tool_time = {2, 6};
  std::vector<double> long_tool_time_log_normal;

  // The agentic-long preset's flags (also trace-stats').
  void AddPreset(CLI::App* app);
  // Every flag: the workload, the preset, the run.
  void Add(CLI::App* app);
  // Validates the parsed flags and fills `spec` and `run`; false after
  // printing what is wrong to stderr.
  bool Finish(WorkloadSpec& spec);
};

// Configurations and the embedded simulated fleet, shared by `ablation` and
// `sweep`, filling `abl`; returns the --time-scale option.
CLI::Option* AddFleetOptions(CLI::App* cmd, AblationOptions& abl);

// kvroute and kvroute-sim built next to kvroute-bench, unless given.
void FindFleetBinaries(AblationOptions& abl);

}  // namespace kvroute::bench
