#include "bench/kvroute_bench/session_turns.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "bench/kvroute_bench/stats.h"

namespace kvroute::bench {

std::string_view KvInstance(std::string_view backend) {
  const size_t arrow = backend.rfind("->");
  return arrow == std::string_view::npos ? backend : backend.substr(arrow + 2);
}

SessionTurns SplitSessionTurns(const std::vector<RequestRecord>& requests, const SloTargets& slo,
                               double time_scale) {
  const double scale = time_scale > 0 ? time_scale : 1.0;
  // Per job, its served turns in turn order (a turn served on a retry once; an open-loop
  // job's turns can overlap, and turn order is the order its context grew in).
  std::map<int64_t, std::vector<const RequestRecord*>> by_job;
  for (const RequestRecord& r : requests) {
    // Without X-Kvroute-Backend (a target other than kvroute) nothing says where it ran.
    if (r.job < 0 || !r.ok() || r.prompt_tokens <= 0 || r.backend.empty()) continue;
    by_job[r.job].push_back(&r);
  }
  SessionTurns out;
  for (auto& [job, turns] : by_job) {
    std::sort(turns.begin(), turns.end(), [](const RequestRecord* a, const RequestRecord* b) {
      return std::tie(a->turn, a->t_start) < std::tie(b->turn, b->t_start);
    });
    std::string_view previous;
    for (const RequestRecord* r : turns) {
      const std::string_view here = KvInstance(r->backend);
      TurnKind& kind = previous.empty() ? out.first : here == previous ? out.home : out.moved;
      ++kind.turns;
      const int64_t cached = r->offloaded() ? 0 : std::max<int64_t>(r->cached_tokens, 0);
      kind.computed_tokens += std::max<int64_t>(r->prompt_tokens - cached, 0);
      if (const double target = TtftSlo(slo, SloClass(*r, slo)); target > 0) {
        if (MeetsSlos(*r, slo, scale)) {
          ++kind.slo_met;
        } else if (MissedOnFloor(*r, target, scale)) {
          ++kind.missed_floor;
        }
      }
      previous = here;
    }
  }
  return out;
}

}  // namespace kvroute::bench
