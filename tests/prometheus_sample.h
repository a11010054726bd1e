// One sample's value on a scraped Prometheus page, matched by its exact name
// and labels, for tests that check a metric's value: a substring search for
// `name{labels} 1` also matches a page that reads 12 or 1.5.
//
//   EXPECT_EQ(SampleValue(page, "kvroute_kv_events_gaps_total", {{"backend", "gpu1"}}), 0);
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "wire/prometheus_text.h"

namespace kvroute::testing {

// The value of the first sample of `name` whose labels include every one of
// `labels` (others may be there too); nullopt when none does.
inline std::optional<double> SampleValue(std::string_view page, std::string_view name,
                                         const std::map<std::string, std::string>& labels = {}) {
  for (const wire::PrometheusSample& s : wire::ParsePrometheusText(page)) {
    if (s.name != name) continue;
    bool all = true;
    for (const auto& [key, value] : labels) {
      const auto it = s.labels.find(key);
      if (it == s.labels.end() || it->second != value) {
        all = false;
        break;
      }
    }
    if (all) return s.value;
  }
  return std::nullopt;
}

}  // namespace kvroute::testing
