// classifier: turns token estimates into a WARM/MEDIUM/HEAVY class, and
// models the cost of offloading a prefill. Pure functions over plain values;
// holds no fleet state.
//
//   classifier::Thresholds t;            // heavy_threshold = 20000 ...
//   RequestClass c = classifier::Classify(prompt_est, cached_est, t);
#pragma once

#include <cstdint>

#include "router/types.h"

namespace kvroute::classifier {

// DESIGN.md §3: new = prompt - cached(best); WARM if cached/prompt >
// warm_cached_fraction or new < warm_new_tokens; MEDIUM if new <
// heavy_threshold; else HEAVY.
struct Thresholds {
  int64_t heavy_threshold = 20000;
  int64_t warm_new_tokens = 5000;
  double warm_cached_fraction = 0.5;
};

router::RequestClass Classify(int64_t prompt_tokens_est,
                              int64_t cached_tokens_est,
                              const Thresholds& thresholds);

}  // namespace kvroute::classifier
