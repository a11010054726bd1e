// Admission by deadline: whether a request the router has placed should be
// answered 429 at once instead of being sent to an engine it would wait on
// past its deadline.
//
// Why. An open-loop client (one that does not wait for its answers) beyond
// the fleet's capacity makes every engine's queue grow without bound; a
// request admitted into such a queue waits minutes for its first token and
// is then useless, and every request behind it waits longer. Shedding at
// admission, from the router's own prediction of the request's TTFT on the
// instance it chose (its queue, KV admission and prefill: placement_cost.h,
// rescaled by the learned prefill time factor), keeps the admitted work
// within its deadlines and tells the client when to come back, which agent
// SDKs honour (they retry 429 with backoff, Retry-After first).
//
// Deadlines: per class, `ttft_factor` x the class's TTFT SLO unless set
// outright; a turn that continues a running session (a known session id,
// or without one a prompt mostly cached on its instance) gets
// `running_session_factor` times more, since breaking a running agent
// wastes everything it has done while a new one loses nothing yet, and
// never less than the longest deadline of a new turn (a running session's
// WARM turn, waiting behind the same queue, is not refused where a new
// session's cold HEAVY turn would be admitted).
//
// The router judges the instance it chose; under a policy that keeps
// sessions on an instance, a session turn placed off its session's
// instance (the overload rule moved it) that would be shed there
// is judged on its own instance too, and goes there when it is in time
// there (Decision::shed_averted_home, RouterStats::shed_averted_home,
// kvroute_shed_averted_total on /metrics): the rule spreads load, and a
// cold prefill elsewhere that misses the deadline is no reason to refuse a
// turn its own instance would serve.
//
//   ShedVerdict v = JudgeShed(options.shed, options.slo, decision, running);
//   if (v.shed) -> 429, Retry-After: ceil(v.retry_after_s),
//                       retry-after-ms: v.retry_after_s x 1000
//
// Retry-After carries whole seconds (RFC 9110); the OpenAI and Anthropic
// SDKs read retry-after-ms first, so a client that honours it comes back
// when the excess has drained rather than at the next whole second.
//
// Pure; thread-safe.
#pragma once

#include "router/types.h"

namespace kvroute::router {

struct ShedOptions {
  bool enabled = true;
  // deadline = factor x the class's TTFT SLO: a bound on a useless wait,
  // not the SLO itself (a turn somewhat past its SLO is still worth serving;
  // a refused one costs the client a retry).
  double ttft_factor = 4;
  // Deadlines by class in wall seconds; <= 0: ttft_factor x the SLO.
  double ttft_deadline_warm_s = 0;
  double ttft_deadline_medium_s = 0;
  double ttft_deadline_heavy_s = 0;
  double running_session_factor = 5;
  // The advised wait is the predicted excess over the deadline, within these
  // (wall seconds; fractions reach clients through retry-after-ms).
  double min_retry_after_s = 1;
  double max_retry_after_s = 60;
};

struct ShedVerdict {
  bool shed = false;
  bool running_session = false;
  double deadline_s = 0;     // the request's deadline, wall seconds
  double retry_after_s = 0;  // when shed: the wait to advise
};

// The class's TTFT SLOs in wall seconds (Options::PlacementSlo's fields).
struct TtftSlos {
  double warm_s = 2;
  double medium_s = 10;
  double heavy_s = 30;
};

// Judges `d` (with its predicted_ttft_s; a decision without one is never
// shed). `running_session`: the request continues a session already served.
ShedVerdict JudgeShed(const ShedOptions& options, const TtftSlos& slo, const Decision& d,
                      bool running_session);

}  // namespace kvroute::router
