// The placement cost model: what one request costs, in seconds and in
// fractions of the operator's SLOs, when it prefills on instance A and
// decodes on instance B (A == B: co-located). Modes `v1_cost` and `v2`
// (router/policies/joint_placement.h) minimise it. Pure functions over a
// FleetSnapshot; thread-safe. Internal to router/.
//
//   const PlacementParams p = ParamsFromOptions(options);
//   PlanCost colo = Colocated(fleet, i, RequestClass::kHeavy, p);
//   PlanCost off = Offload(fleet, a, b, RequestClass::kHeavy, p);
//   if (off.veto == Veto::kNone && off.cost < colo.cost) ...
//
// Time to first token, wall seconds (r = prefill tokens/s, n_i and c_i =
// the prompt's uncached and cached tokens on i, Q_i = prefill tokens queued
// on i, C_i = i's KV pool, I_i = its in-flight tokens, F = the request's
// footprint, P = its prompt; f_i = i's learned prefill time factor and g_ab
// the pair's learned transfer time factor, router/rate_learner.h, 1 until
// learned):
//
//   S_i = f_i x (n_i / r + attn x n_i x (c_i + n_i / 2))   own prefill; attn
//         is the profile's attention seconds per token pair (0: linear)
//   W_i = f_i x Q_i x S(P, 0) / P                queue wait: the snapshot has
//         the queue's tokens, not its prompts' contexts, so each is priced at
//         this prompt's cold average (Q_i / r when attn is 0)
//   M_i = f_i x max(0, I_i + F - C_i) / r        admission wait: KV that
//         requests in flight must free first, at one prefill token per token
//         (the unit `baseline` uses); 0 when C_i is unknown
//   COLO(i):   TTFT = W_i + M_i + S_i
//   OFF(a, b): ready = W_a + M'_a + S_a  (M'_a: the prompt P must fit, not F:
//              A holds no output)
//              TTFT = ready + g_ab x (X + D_b)
//              X = overhead + (P - c_b) x kv_bytes_per_token / link
//              D_b = W_b + M_b when the decode leg reaches B only after the
//              prefill (a sequential connector, Options::
//              decode_leg_after_prefill): it joins B's queue then, and a home
//              worth sparing keeps receiving work, so the queue is taken as
//              it stands; else max(0, W_b + M_b - ready): B's queue and
//              admission run while A prefills.
//              g_ab scales X + D_b together: the handoff measures the time
//              from A's prefill end to B's first token, which is both.
//
// Every time term on an instance runs at that instance's prefill rate, so
// one factor per instance rescales them all; the profile's rates are in
// wall seconds (the config's profile_time_scale converts a simulated
// fleet's).
//
// Harm done by the prefill on its site s (s = i, or a), and by the KV on the
// decode home h (h = i, or b), with d_s streams on s (those decoding, or
// all in flight there when more: FCFS admission prefills the requests queued
// ahead first, so they decode while this prefill's chunks run), L = the
// expected output tokens a stream still has to produce and tpot the TPOT
// SLO (L x tpot: a stream's decode budget in seconds):
//
//   stall   = d_s x S_s / (L x tpot)    chunked prefill shares every step
//             with the decode batch, so each of the d_s streams runs at the
//             chunk's step time for the whole prefill: S_s stalled seconds
//             per stream, taken as a fraction of that stream's budget.
//   arrivals = min(d_s, d_s x S_s / (L x tpot))   WARM turns expected on s
//             during the prefill: a decoding stream of an agent session ends
//             within its budget and its session's next (cached, WARM) turn
//             follows; the snapshot has no per-instance session count, so
//             the streams stand for the sessions living there.
//   warm    = arrivals x (S_s / 2) / ttft_warm   each waits half the prefill
//             on average, against the WARM TTFT SLO
//   evicted = f_h x EvictedResident(h) / r / ttft_warm   resident session
//             KV the footprint pushes out of h's pool (policies/common.h), as
//             the prefill seconds a session's next WARM turn pays again
//
//   cost = TTFT / ttft_slo(class) + harm_weight x (stall + warm + evicted)
//
// Each term is a fraction of one request's SLO budget (its own TTFT
// budget, a stream's decode budget, a WARM turn's TTFT budget), so they add.
// The TPOT SLO is divided into the stall through the stream's budget L x
// tpot rather than alone: a stall of S seconds spread over L tokens raises
// the stream's TPOT by S / L. Offload moves the stall to A's streams and
// leaves B's decode streams and WARM arrivals alone; the KV lands on B.
//
// Guardrails: Offload() sets `veto` (and the plan is not taken) when
//   - kRecomputesPrefix: n_a > n_b + max(recompute_slack_tokens,
//     recompute_slack_fraction x n_b): A cannot read B's cache, so it would
//     recompute a prefix B already holds;
//   - kDecodeKvFull: B's pool cannot admit the footprint now (M_b > 0);
//   - kPrefillQueued: W_a + M'_a >= S_b: A's queue lasts at least as long as
//     the stall the offload spares B's streams;
//   - kNoStallSaved: B has no streams (so no WARM arrivals either),
//     or the prefill harms A's streams at least as much as B's.
#pragma once

#include <cstdint>
#include <string_view>

#include "classifier/classifier.h"
#include "router/policy.h"
#include "router/options.h"

namespace kvroute::router::placement {

struct PlacementParams {
  classifier::OffloadCostParams rates;  // prefill rate, attention, KV bytes, link
  Options::PlacementSlo slo;
  double stream_tokens = 256;            // L: a decode stream's remaining output tokens
  bool decode_leg_after_prefill = true;  // Options::decode_leg_after_prefill
  double host_load_bytes_per_second = 50e9;  // Options::host_tier
  double pool_load_bytes_per_second = 22e9;  // Options::host_tier
  int64_t recompute_slack_tokens = 2048;
  double recompute_slack_fraction = 0.1;
};

// rates from options.offload_cost, slo from options.slo, L from
// options.default_output_tokens, the handoff's order from
// options.decode_leg_after_prefill.
PlacementParams ParamsFromOptions(const Options& options);

enum class Veto { kNone, kRecomputesPrefix, kDecodeKvFull, kPrefillQueued, kNoStallSaved };
std::string_view ToString(Veto v);

// One plan's figures. Seconds unless named otherwise.
struct PlanCost {
  int prefill_backend = -1;
  int decode_backend = -1;
  double queue_s = 0;        // W on the prefill site
  double admission_s = 0;    // M (COLO) or M' (OFF) on the prefill site
  double prefill_s = 0;      // S on the prefill site
  double transfer_s = 0;     // g_ab x X, 0 co-located
  double decode_wait_s = 0;  // OFF: g_ab x D_b, B's queue and admission after the prefill
  double ttft_s = 0;
  double stall = 0;  // SLO fractions, as above
  double warm = 0;
  double evicted = 0;
  double cost = 0;
  Veto veto = Veto::kNone;
};

// S: seconds to prefill `new_tokens` after `cached_tokens` already cached.
double PrefillSeconds(int64_t new_tokens, int64_t cached_tokens,
                      const classifier::OffloadCostParams& rates);
// X: seconds to move `tokens` tokens of KV, overhead included.
double TransferSeconds(int64_t tokens, const classifier::OffloadCostParams& rates);
// R: seconds to reload what only `backend`'s host tier holds of the prompt
// (BackendSnapshot::host_reload_tokens_est), at the host link's bandwidth
// and the instance's learned reload factor, and what only the fleet-shared
// pool holds, at the pool's bandwidth and the instance's learned pool
// reload factor; 0 when nothing is reloaded.
double HostReloadSeconds(const FleetSnapshot& fleet, int backend, const PlacementParams& p);
// f_i from the snapshot (1 when unset).
double PrefillTimeFactor(const FleetSnapshot& fleet, int backend);
// g_ab from the snapshot (1 when the snapshot has no pair factors).
double TransferTimeFactor(const FleetSnapshot& fleet, int prefill, int decode);
// The class's TTFT SLO.
double TtftSlo(RequestClass c, const Options::PlacementSlo& slo);

// stall + warm for a prefill of `prefill_s` seconds on `backend`.
double PrefillHarm(const FleetSnapshot& fleet, int backend, double prefill_s,
                   const PlacementParams& p);

// COLO(i). `backend` must index fleet.backends.
PlanCost Colocated(const FleetSnapshot& fleet, int backend, RequestClass c,
                   const PlacementParams& p);
// OFF(prefill, decode), prefill != decode, with its veto.
PlanCost Offload(const FleetSnapshot& fleet, int prefill, int decode, RequestClass c,
                 const PlacementParams& p);

}  // namespace kvroute::router::placement
