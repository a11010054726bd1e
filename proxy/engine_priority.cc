#include "proxy/engine_priority.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "classifier/classifier.h"

namespace kvroute::proxy {

int64_t DeadlinePriority(const router::Decision& d, const router::Options& o,
                         double arrival_unix_s) {
  // The class the prefill instance sees: its own uncached tokens, not the
  // best instance's (a cold prefill sent away from the cache is no WARM).
  const classifier::RequestClass c =
      classifier::Classify(d.prompt_tokens_est, d.prefill_cached_tokens_est, o.thresholds);
  double slo_s = o.slo.ttft_medium_s;
  if (c == classifier::RequestClass::kWarm) slo_s = o.slo.ttft_warm_s;
  if (c == classifier::RequestClass::kHeavy) slo_s = o.slo.ttft_heavy_s;
  return std::llround((arrival_unix_s + slo_s) * 1000.0);
}

std::optional<BodyInsert> PlanPriority(std::string_view body, int64_t priority) {
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  size_t i = 0;
  while (i < body.size() && ws(body[i])) ++i;
  if (i >= body.size() || body[i] != '{') return std::nullopt;
  const size_t at = i + 1;
  size_t j = at;
  while (j < body.size() && ws(body[j])) ++j;
  const bool empty = j < body.size() && body[j] == '}';
  return BodyInsert{at, absl::StrCat("\"priority\":", priority, empty ? "" : ",")};
}

}  // namespace kvroute::proxy
