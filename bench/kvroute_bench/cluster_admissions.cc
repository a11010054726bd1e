#include "bench/kvroute_bench/cluster_admissions.h"

#include <algorithm>

namespace kvroute::bench {

ClusterAdmissions CountClusterAdmissions(const RunResult& run) {
  ClusterAdmissions a;
  for (const RequestRecord& q : run.requests) {
    if (q.cluster_admission.empty()) continue;
    ++a.asked;
    ++a.by_outcome[q.cluster_admission];
    if (q.cluster_reserved_tokens < 0 || q.cluster_fill_tokens <= 0) continue;
    a.peak_reserved_of_fill =
        std::max(a.peak_reserved_of_fill, static_cast<double>(q.cluster_reserved_tokens) /
                                              static_cast<double>(q.cluster_fill_tokens));
    // A resident session's next turn is no admission (its footprint grows with its context).
    if (q.cluster_admission != "resident" && q.cluster_reserved_tokens > q.cluster_fill_tokens &&
        q.cluster_reserved_tokens > q.cluster_footprint_tokens) {
      ++a.beyond_fill;
    }
  }
  return a;
}

}  // namespace kvroute::bench
