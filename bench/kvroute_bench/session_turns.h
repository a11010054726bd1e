// Where an agent session's turns ran, and what each kind of turn computed. A session's KV
// lives on the instance that served its last turn; a turn served there reuses it (from the
// GPU, or reloaded from a host tier), one served elsewhere finds none of its context there
// and prefills it again unless that instance still holds it. What a router believes about
// the home's cache decides which: a router that takes a prefix its home keeps in host
// memory for lost moves the turn, and the fleet computes its whole context again.
//
//   SessionTurns t = SplitSessionTurns(run.requests);
//   if (t.known()) ... t.moved.turns, t.moved.computed_tokens ...
//
// Pure functions.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "bench/kvroute_bench/records.h"

namespace kvroute::bench {

struct TurnKind {
  int64_t turns = 0;
  // Prompt tokens less the cached tokens the engine reported; an offloaded turn's cached
  // tokens are KV pulled from its prefill instance, which computed them: all of its prompt.
  int64_t computed_tokens = 0;
  // Of its turns with a TTFT SLO: those that met their SLOs (MeetsSlos, stats.h), and
  // those that missed on their compute floor alone (the uncached tokens they found,
  // prefilled on an idle instance, take longer than the SLO): what a move that recomputes
  // a session's context costs, and no placement of that turn could have saved.
  int64_t slo_met = 0;
  int64_t missed_floor = 0;
};

// The served turns of agentic jobs (requests with a job id that succeeded, report their
// prompt tokens and name their backend), each against the job's previous served turn.
struct SessionTurns {
  TurnKind first;  // the job's first served turn
  TurnKind home;   // on the instance that served the job's previous turn
  TurnKind moved;  // on another instance
  bool known() const { return first.turns > 0; }
  int64_t computed_tokens() const {
    return first.computed_tokens + home.computed_tokens + moved.computed_tokens;
  }
};

// `slo` and `time_scale` (RunResult's) judge each turn's SLOs.
SessionTurns SplitSessionTurns(const std::vector<RequestRecord>& requests,
                               const SloTargets& slo = {}, double time_scale = 1.0);

// The instance that keeps a request's KV: the backend, or for an offloaded request
// ("gpu1->gpu3") the decode instance.
std::string_view KvInstance(std::string_view backend);

}  // namespace kvroute::bench
