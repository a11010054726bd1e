// `kvroute-bench calibrate`: fits the timing section of a kvroute-sim profile to one real
// OpenAI-compatible vLLM instance, so the simulator becomes a twin of that GPU and model.
//
//   kvroute-bench calibrate --target http://gpu-host:8000
//       --profile configs/profiles/h20-qwen3-coder-30b-a3b.yaml --out my-fleet.yaml
//
// The probes, one at a time on an otherwise idle instance:
//   - prefill: single requests of 1K..128K random token ids (so prefix caching cannot hit),
//     one output token each; the engine's own prefill time is read from the difference of
//     `vllm:request_prefill_time_seconds` before and after;
//   - decode: batches of 1..256 concurrent requests (and batch 1 at long contexts); once all
//     are decoding, the mean step is the difference of `vllm:inter_token_latency_seconds` over
//     a window of steps, and the mean context comes from `vllm:generation_tokens_total`;
//   - cache: one prompt sent twice, reporting the second request's cached tokens.
// Reading the engine's histograms rather than client clocks keeps network and queueing out of
// the fit; against kvroute-sim the figures are its virtual seconds, whatever its time scale.
//
// The fit is a least-squares solution, relative to each probe's time, of the step-time model
// of sim/profile.h (TimingModel) summed over the steps each probe runs. The base profile
// supplies what is not timing: the chunk budget (engine.max_num_batched_tokens) and, for a
// mixture of experts, the expert counts and the experts' weight share. A dense model's
// weight read cannot be told apart from the fixed step cost, so it is kept from the base.
//
// Thread-safety: Calibrate runs its own io_context on the calling thread.
#pragma once

#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bench/kvroute_bench/http_client.h"
#include "sim/profile.h"

namespace kvroute::bench {

struct CalibrateOptions {
  Endpoint target;
  std::string model;  // empty: the first of GET /v1/models
  sim::Profile base;
  std::vector<int> prompt_lengths = {1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072};
  std::vector<int> decode_batches = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  int decode_context = 512;                  // prompt tokens of each decode-batch request
  std::vector<int> long_contexts = {16384};  // batch-1 decode probes at these contexts
  int decode_tokens = 512;                   // output tokens of each decode request
  int window_steps = 16;                     // decode steps measured per decode probe
  int cache_prompt_tokens = 8192;
  uint64_t seed = 1;
  std::chrono::milliseconds poll_interval{5};
  std::chrono::seconds probe_timeout{900};  // per probe, wall
};

struct PrefillObservation {
  int prompt_tokens = 0;
  double seconds = 0;
};

struct DecodeObservation {
  int batch = 0;
  double mean_context = 0;  // KV tokens each sequence reads per step, averaged
  double seconds = 0;       // mean step
};

struct ProbeResidual {
  std::string probe;
  double measured_s = 0;
  double fitted_s = 0;
};

struct Calibration {
  sim::TimingModel timing;
  bool weight_read_fitted = false;
  std::vector<ProbeResidual> residuals;
  // The repeated prompt: cached tokens of the second request and both prefill times.
  int cache_prompt_tokens = 0;
  int cache_cached_tokens = -1;
  double cache_cold_s = 0;
  double cache_warm_s = 0;
};

// Fits the timing model to the observations (pure). Needs at least two prefill lengths, and
// decode observations at two batch sizes and two contexts.
absl::StatusOr<Calibration> FitTiming(const sim::Profile& base,
                                      std::span<const PrefillObservation> prefills,
                                      std::span<const DecodeObservation> decodes);

// Probes the target and fits.
absl::StatusOr<Calibration> Calibrate(const CalibrateOptions& options);

// The `timing:` section as YAML, preceded by comments with the residuals.
std::string TimingYaml(const Calibration& calibration, absl::string_view target);

// `base_yaml` with its top-level `timing:` section (and the comment block just above it)
// replaced by `timing_yaml`; appended when the base has none.
std::string ReplaceTimingSection(absl::string_view base_yaml, absl::string_view timing_yaml);

}  // namespace kvroute::bench
