// Several kvroute replicas sharing a cluster store: their residency
// admissions across replicas as the replicas' request logs tell them
// (RequestRecord::cluster_admission and the reserved tokens), and the check
// that no new admission left its instance beyond its fill. ablation.cc logs
// it per configuration; report.cc writes it to report.json.
//
//   ClusterAdmissions a = CountClusterAdmissions(run);
//   if (a.asked > 0) ... a.by_outcome["forced"], a.beyond_fill
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "bench/kvroute_bench/records.h"

namespace kvroute::bench {

struct ClusterAdmissions {
  int64_t asked = 0;
  // "resident", "admitted", "waited", "forced", "unavailable" -> turns.
  std::map<std::string, int64_t> by_outcome;
  // New admissions (not a resident's next turn) after which the instance's
  // reservations, every replica's, exceeded its fill beside others'; a
  // session larger than the fill admitted alone is none, as one replica
  // admits it too.
  int64_t beyond_fill = 0;
  // The largest reserved tokens after an admission, over its fill.
  double peak_reserved_of_fill = 0;

  int64_t count(const std::string& outcome) const {
    const auto it = by_outcome.find(outcome);
    return it == by_outcome.end() ? 0 : it->second;
  }
};

ClusterAdmissions CountClusterAdmissions(const RunResult& run);

}  // namespace kvroute::bench
