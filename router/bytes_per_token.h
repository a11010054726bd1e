// BytesPerTokenModel: prompt bytes per engine token, learned online per
// model from responses' usage.prompt_tokens, plus a fleet-wide ratio over
// all models. Starts at a configured default; each of the first 1/alpha
// observations of a model is averaged in (so one response already gives a
// good ratio), later ones move an EWMA with weight alpha. The per-model
// table is bounded by `max_models`; further models use the fleet-wide ratio.
// Not thread-safe: the Router owns it under its mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"

namespace kvroute::router {

class BytesPerTokenModel {
 public:
  BytesPerTokenModel(double initial, double alpha, size_t max_models);

  double For(std::string_view model) const;
  double FleetWide() const { return fleet_.ratio; }
  void Observe(std::string_view model, int64_t prompt_bytes, int64_t prompt_tokens);

  // Samples outside this range are garbage (empty prompt, token-id prompt
  // rendered oddly) and ignored.
  static constexpr double kMinRatio = 0.25;
  static constexpr double kMaxRatio = 64.0;

 private:
  struct Estimate {
    double ratio;
    int64_t samples = 0;
  };
  void Update(Estimate& e, double sample) const;

  double initial_;
  double alpha_;
  size_t max_models_;
  Estimate fleet_;
  absl::flat_hash_map<std::string, Estimate> models_;
};

}  // namespace kvroute::router
