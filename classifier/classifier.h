// classifier: turns token estimates into a WARM/MEDIUM/HEAVY class, and
// models the cost of offloading a prefill. Pure functions over plain values;
// holds no fleet state. Thread-safe: nothing here has state.
//
//   classifier::Thresholds t;            // heavy_threshold = 20000 ...
//   classifier::RequestClass c = classifier::Classify(prompt_est, cached_est, t);
//
//   classifier::OffloadCostParams p;     // KV bytes/token, link, prefill rate
//   classifier::OffloadEstimate e = classifier::EstimateOffload(
//       {.prompt_tokens = 30000, .decode_cached_tokens = 1000, ...}, p);
//   if (e.worthwhile) ...
#pragma once

#include <cstdint>

#include "classifier/request_class.h"
#include "kvsize/kvsize.h"

namespace kvroute::classifier {

// DESIGN.md §3: new = prompt - cached(best); WARM if cached/prompt >
// warm_cached_fraction or new < warm_new_tokens; MEDIUM if new <
// heavy_threshold; else HEAVY.
struct Thresholds {
  int64_t heavy_threshold = 20000;
  int64_t warm_new_tokens = 5000;
  double warm_cached_fraction = 0.5;
};

RequestClass Classify(int64_t prompt_tokens_est, int64_t cached_tokens_est,
                              const Thresholds& thresholds);

// New (uncached) tokens: max(0, prompt - cached).
int64_t NewTokens(int64_t prompt_tokens_est, int64_t cached_tokens_est);

// Parameters of the offload cost model. Defaults describe a Llama-3-8B-class
// model (128 KiB of KV per token in bf16) on one H100-class GPU with a
// 200 Gb/s RDMA link; the proxy fills them from its config's `profile`
// (KV bytes per token through kvsize/, link, prefill rate) and
// `router.offload_cost` keys, and refuses `offload_gate: cost` without them.
struct OffloadCostParams {
  double kv_bytes_per_token = 131072;        // all layers, K and V
  double link_bytes_per_second = 25e9;       // effective RDMA bandwidth
  double transfer_overhead_seconds = 0.002;  // handshake + second HTTP leg
  double prefill_tokens_per_second = 10000;  // prefill throughput per instance
  // Attention's share of a prefill, which grows with the context: n new
  // tokens after c cached ones add n x (c + n/2) x this many seconds
  // (a profile's timing.attn_s_per_token_pair). 0: prefill time is linear
  // in the new tokens.
  double attention_s_per_token_pair = 0;
  // Offload is worthwhile when the prefill time saved on the decode instance
  // exceeds margin x the transfer time.
  double margin = 1.0;
};

// Inputs of one offload decision: decode instance B, prefill instance A.
struct OffloadCase {
  int64_t prompt_tokens = 0;
  int64_t decode_cached_tokens = 0;           // tokens B already holds
  int64_t prefill_cached_tokens = 0;          // tokens A already holds
  int64_t decode_queued_prefill_tokens = 0;   // prefill work queued on B
  int64_t prefill_queued_prefill_tokens = 0;  // prefill work queued on A
};

struct OffloadEstimate {
  int64_t tokens_to_move = 0;   // tokens B lacks (B pulls only those)
  double kv_bytes_to_move = 0;  // tokens_to_move x kv_bytes_per_token
  double transfer_seconds = 0;  // overhead + bytes / bandwidth
  // Prefill B does not do when A does it: B's new tokens / prefill rate.
  double prefill_seconds_saved_on_decode = 0;
  // Time to first token, queue included, if served on B alone vs offloaded.
  double ttft_colocated_seconds = 0;
  double ttft_offload_seconds = 0;
  bool worthwhile = false;  // saved > margin x transfer
};

OffloadEstimate EstimateOffload(const OffloadCase& c, const OffloadCostParams& params);

// Cost parameters from a model profile (kvsize/): KV bytes per
// token are the model's c_KV (K and V of every attention layer, what a
// connector moves), the rest is the deployment's link and prefill rate.
OffloadCostParams OffloadCostFromProfile(const kvsize::ModelArch& arch,
                                         double link_bytes_per_second,
                                         double prefill_tokens_per_second,
                                         double transfer_overhead_seconds = 0.002);

}  // namespace kvroute::classifier
