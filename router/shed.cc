#include "router/shed.h"

#include <algorithm>

namespace kvroute::router {

namespace {

double Deadline(const ShedOptions& o, const TtftSlos& slo, RequestClass c) {
  double set = 0, target = 0;
  switch (c) {
    case RequestClass::kWarm:
      set = o.ttft_deadline_warm_s;
      target = slo.warm_s;
      break;
    case RequestClass::kMedium:
      set = o.ttft_deadline_medium_s;
      target = slo.medium_s;
      break;
    case RequestClass::kHeavy:
      set = o.ttft_deadline_heavy_s;
      target = slo.heavy_s;
      break;
  }
  return set > 0 ? set : o.ttft_factor * target;
}

}  // namespace

ShedVerdict JudgeShed(const ShedOptions& options, const TtftSlos& slo, const Decision& d,
                      bool running_session) {
  ShedVerdict v;
  v.running_session = running_session;
  v.deadline_s = Deadline(options, slo, d.request_class);
  if (running_session) {
    // Never shorter than any new turn's: behind a queue of cold prefills a
    // running agent's cached turn would otherwise be refused where a new
    // session's cold one is admitted.
    const double longest_new =
        std::max({Deadline(options, slo, RequestClass::kWarm),
                  Deadline(options, slo, RequestClass::kMedium),
                  Deadline(options, slo, RequestClass::kHeavy)});
    v.deadline_s = std::max(v.deadline_s * std::max(1.0, options.running_session_factor),
                            longest_new);
  }
  if (!options.enabled || !(d.predicted_ttft_s > 0) || !(v.deadline_s > 0) ||
      d.predicted_ttft_s <= v.deadline_s) {
    return v;
  }
  v.shed = true;
  const double hi = std::max(options.min_retry_after_s, options.max_retry_after_s);
  v.retry_after_s = std::clamp(d.predicted_ttft_s - v.deadline_s, options.min_retry_after_s, hi);
  return v;
}

}  // namespace kvroute::router
