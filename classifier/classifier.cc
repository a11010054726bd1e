#include "classifier/classifier.h"

#include <algorithm>

namespace kvroute::classifier {

int64_t NewTokens(int64_t prompt_tokens_est, int64_t cached_tokens_est) {
  return std::max<int64_t>(0, prompt_tokens_est - cached_tokens_est);
}

RequestClass Classify(int64_t prompt_tokens_est, int64_t cached_tokens_est,
                              const Thresholds& thresholds) {
  const int64_t cached =
      std::clamp<int64_t>(cached_tokens_est, 0, std::max<int64_t>(0, prompt_tokens_est));
  const int64_t new_tokens = NewTokens(prompt_tokens_est, cached);
  const bool mostly_cached = prompt_tokens_est > 0 &&
                             static_cast<double>(cached) / static_cast<double>(prompt_tokens_est) >
                                 thresholds.warm_cached_fraction;
  if (mostly_cached || new_tokens < thresholds.warm_new_tokens) {
    return RequestClass::kWarm;
  }
  if (new_tokens < thresholds.heavy_threshold) {
    return RequestClass::kMedium;
  }
  return RequestClass::kHeavy;
}

OffloadEstimate EstimateOffload(const OffloadCase& c, const OffloadCostParams& params) {
  OffloadEstimate e;
  const int64_t new_on_decode = NewTokens(c.prompt_tokens, c.decode_cached_tokens);
  const int64_t new_on_prefill = NewTokens(c.prompt_tokens, c.prefill_cached_tokens);
  const double rate = std::max(1.0, params.prefill_tokens_per_second);
  const double bandwidth = std::max(1.0, params.link_bytes_per_second);
  e.tokens_to_move = new_on_decode;
  e.kv_bytes_to_move = static_cast<double>(new_on_decode) * params.kv_bytes_per_token;
  e.transfer_seconds = new_on_decode > 0
                           ? params.transfer_overhead_seconds + e.kv_bytes_to_move / bandwidth
                           : params.transfer_overhead_seconds;
  e.prefill_seconds_saved_on_decode = static_cast<double>(new_on_decode) / rate;
  e.ttft_colocated_seconds =
      static_cast<double>(std::max<int64_t>(0, c.decode_queued_prefill_tokens) + new_on_decode) /
      rate;
  e.ttft_offload_seconds =
      static_cast<double>(std::max<int64_t>(0, c.prefill_queued_prefill_tokens) + new_on_prefill) /
          rate +
      e.transfer_seconds;
  e.worthwhile = e.prefill_seconds_saved_on_decode > params.margin * e.transfer_seconds;
  return e;
}

OffloadCostParams OffloadCostFromProfile(const kvsize::ModelArch& arch,
                                         double link_bytes_per_second,
                                         double prefill_tokens_per_second,
                                         double transfer_overhead_seconds) {
  OffloadCostParams p;
  p.kv_bytes_per_token = kvsize::KvBytesPerToken(arch);
  p.link_bytes_per_second = link_bytes_per_second;
  p.prefill_tokens_per_second = prefill_tokens_per_second;
  p.transfer_overhead_seconds = transfer_overhead_seconds;
  return p;
}

}  // namespace kvroute::classifier
