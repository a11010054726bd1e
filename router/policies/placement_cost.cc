#include "router/policies/placement_cost.h"

#include <algorithm>

#include "router/policies/common.h"

namespace kvroute::router::placement {
namespace {

double Rate(const PlacementParams& p) { return std::max(1.0, p.rates.prefill_tokens_per_second); }

int64_t CachedOn(const FleetSnapshot& fleet, int backend) {
  return std::clamp<int64_t>(fleet.backends[backend].cached_tokens_est, 0,
                             std::max<int64_t>(0, fleet.prompt_tokens_est));
}

// KV requests in flight must free before `tokens` more fit the pool.
int64_t Shortfall(const BackendSnapshot& b, int64_t tokens) {
  if (b.kv_capacity_tokens <= 0) return 0;
  return std::max<int64_t>(0, b.inflight_tokens + tokens - b.kv_capacity_tokens);
}

// The snapshot has the queue's tokens, not its prompts' contexts; each queued
// token is priced at this prompt's own cold average (attention grows with the
// context, and the requests queued beside a long prompt are mostly turns of
// long sessions too).
double QueueSeconds(const FleetSnapshot& fleet, int backend, const PlacementParams& p) {
  const int64_t queued = std::max<int64_t>(0, fleet.backends[backend].inflight_prefill_tokens);
  const int64_t prompt = std::max<int64_t>(1, fleet.prompt_tokens_est);
  return PrefillTimeFactor(fleet, backend) * static_cast<double>(queued) *
         PrefillSeconds(prompt, 0, p.rates) / static_cast<double>(prompt);
}

// M: KV that must be freed first, at one prefill token per token.
double AdmissionSeconds(const FleetSnapshot& fleet, int backend, int64_t shortfall,
                        const PlacementParams& p) {
  return PrefillTimeFactor(fleet, backend) * static_cast<double>(shortfall) / Rate(p);
}

double EvictedUnits(const FleetSnapshot& fleet, int home, const PlacementParams& p) {
  const double seconds =
      AdmissionSeconds(fleet, home, policy_internal::EvictedResident(fleet, home), p);
  return seconds / std::max(1e-9, p.slo.ttft_warm_s);
}

double Total(const PlanCost& plan, RequestClass c, const PlacementParams& p) {
  return plan.ttft_s / TtftSlo(c, p.slo) +
         p.slo.harm_weight * (plan.stall + plan.warm + plan.evicted);
}

// The streams a prefill on `b` stalls: those decoding now and those queued
// ahead of it, which decode while its chunks run (FCFS admission).
int64_t StreamsStalled(const BackendSnapshot& b) {
  return std::max<int64_t>(0, std::max(b.decoding_requests, b.inflight_requests));
}

// stall and warm (see the header) into `plan`.
void SetPrefillHarm(const FleetSnapshot& fleet, int site, const PlacementParams& p,
                    PlanCost& plan) {
  const double streams = static_cast<double>(StreamsStalled(fleet.backends[site]));
  const double budget = std::max(1e-9, p.stream_tokens * p.slo.tpot_s);
  plan.stall = streams * plan.prefill_s / budget;
  const double arrivals = std::min(streams, plan.stall);
  plan.warm = arrivals * (plan.prefill_s / 2) / std::max(1e-9, p.slo.ttft_warm_s);
}


}  // namespace

double HostReloadSeconds(const FleetSnapshot& fleet, int backend, const PlacementParams& p) {
  const BackendSnapshot& b = fleet.backends[backend];
  double s = 0;
  if (b.host_reload_tokens_est > 0 && p.host_load_bytes_per_second > 0) {
    s += static_cast<double>(b.host_reload_tokens_est) * p.rates.kv_bytes_per_token /
         p.host_load_bytes_per_second * b.host_reload_time_factor;
  }
  // And what only the fleet-shared pool holds, over the instance's NIC.
  if (b.pool_reload_tokens_est > 0 && p.pool_load_bytes_per_second > 0) {
    s += static_cast<double>(b.pool_reload_tokens_est) * p.rates.kv_bytes_per_token /
         p.pool_load_bytes_per_second * b.pool_reload_time_factor;
  }
  return s;
}

PlacementParams ParamsFromOptions(const Options& options) {
  PlacementParams p;
  p.rates = options.offload_cost;
  p.slo = options.slo;
  p.stream_tokens = static_cast<double>(std::max<int64_t>(1, options.default_output_tokens));
  p.decode_leg_after_prefill = options.decode_leg_after_prefill;
  p.host_load_bytes_per_second = options.host_tier.load_bytes_per_second;
  p.pool_load_bytes_per_second = options.host_tier.pool_load_bytes_per_second;
  return p;
}

std::string_view ToString(Veto v) {
  switch (v) {
    case Veto::kNone:
      return "none";
    case Veto::kRecomputesPrefix:
      return "recomputes_prefix";
    case Veto::kDecodeKvFull:
      return "decode_kv_full";
    case Veto::kPrefillQueued:
      return "prefill_queued";
    case Veto::kNoStallSaved:
      return "no_stall_saved";
  }
  return "none";
}

double PrefillSeconds(int64_t new_tokens, int64_t cached_tokens,
                      const classifier::OffloadCostParams& rates) {
  const double n = static_cast<double>(std::max<int64_t>(0, new_tokens));
  const double c = static_cast<double>(std::max<int64_t>(0, cached_tokens));
  return n / std::max(1.0, rates.prefill_tokens_per_second) +
         std::max(0.0, rates.attention_s_per_token_pair) * n * (c + n / 2);
}

double TransferSeconds(int64_t tokens, const classifier::OffloadCostParams& rates) {
  return std::max(0.0, rates.transfer_overhead_seconds) +
         static_cast<double>(std::max<int64_t>(0, tokens)) * rates.kv_bytes_per_token /
             std::max(1.0, rates.link_bytes_per_second);
}

double PrefillTimeFactor(const FleetSnapshot& fleet, int backend) {
  const double f = fleet.backends[backend].prefill_time_factor;
  return f > 0 ? f : 1.0;
}

double TransferTimeFactor(const FleetSnapshot& fleet, int prefill, int decode) {
  const size_t n = fleet.backends.size();
  const size_t at = static_cast<size_t>(prefill) * n + static_cast<size_t>(decode);
  if (fleet.transfer_time_factors.size() != n * n) return 1.0;
  const double g = fleet.transfer_time_factors[at];
  return g > 0 ? g : 1.0;
}

double TtftSlo(RequestClass c, const Options::PlacementSlo& slo) {
  double s = slo.ttft_medium_s;
  if (c == RequestClass::kWarm) s = slo.ttft_warm_s;
  if (c == RequestClass::kHeavy) s = slo.ttft_heavy_s;
  return std::max(1e-9, s);
}

double PrefillHarm(const FleetSnapshot& fleet, int backend, double prefill_s,
                   const PlacementParams& p) {
  PlanCost plan;
  plan.prefill_s = prefill_s;
  SetPrefillHarm(fleet, backend, p, plan);
  return plan.stall + plan.warm;
}

PlanCost Colocated(const FleetSnapshot& fleet, int backend, RequestClass c,
                   const PlacementParams& p) {
  PlanCost plan;
  plan.prefill_backend = plan.decode_backend = backend;
  const int64_t cached = CachedOn(fleet, backend);
  plan.queue_s = QueueSeconds(fleet, backend, p);
  plan.admission_s =
      AdmissionSeconds(fleet, backend, policy_internal::AdmissionShortfall(fleet, backend), p);
  plan.prefill_s = HostReloadSeconds(fleet, backend, p) +
                   PrefillTimeFactor(fleet, backend) *
                       PrefillSeconds(fleet.prompt_tokens_est - cached, cached, p.rates);
  plan.ttft_s = plan.queue_s + plan.admission_s + plan.prefill_s;
  SetPrefillHarm(fleet, backend, p, plan);
  plan.evicted = EvictedUnits(fleet, backend, p);
  plan.cost = Total(plan, c, p);
  return plan;
}

PlanCost Offload(const FleetSnapshot& fleet, int prefill, int decode, RequestClass c,
                 const PlacementParams& p) {
  PlanCost plan;
  plan.prefill_backend = prefill;
  plan.decode_backend = decode;
  const int64_t prompt = std::max<int64_t>(0, fleet.prompt_tokens_est);
  const int64_t cached_a = CachedOn(fleet, prefill);
  const int64_t cached_b = CachedOn(fleet, decode);
  const BackendSnapshot& a = fleet.backends[prefill];
  const BackendSnapshot& b = fleet.backends[decode];

  const double f_a = PrefillTimeFactor(fleet, prefill);
  const double g = TransferTimeFactor(fleet, prefill, decode);
  plan.queue_s = QueueSeconds(fleet, prefill, p);
  plan.admission_s = AdmissionSeconds(fleet, prefill, Shortfall(a, prompt), p);
  plan.prefill_s = HostReloadSeconds(fleet, prefill, p) +
                   f_a * PrefillSeconds(prompt - cached_a, cached_a, p.rates);
  const double ready = plan.queue_s + plan.admission_s + plan.prefill_s;
  const int64_t decode_shortfall = policy_internal::AdmissionShortfall(fleet, decode);
  const double decode_ready =
      QueueSeconds(fleet, decode, p) + AdmissionSeconds(fleet, decode, decode_shortfall, p);
  plan.transfer_s = g * TransferSeconds(prompt - cached_b, p.rates);
  plan.decode_wait_s =
      g * (p.decode_leg_after_prefill ? decode_ready : std::max(0.0, decode_ready - ready));
  plan.ttft_s = ready + plan.transfer_s + plan.decode_wait_s;
  SetPrefillHarm(fleet, prefill, p, plan);
  plan.evicted = EvictedUnits(fleet, decode, p);
  plan.cost = Total(plan, c, p);

  const int64_t new_a = prompt - cached_a;
  const int64_t new_b = prompt - cached_b;
  const double slack = std::max(static_cast<double>(p.recompute_slack_tokens),
                                p.recompute_slack_fraction * static_cast<double>(new_b));
  const double prefill_on_b =
      PrefillTimeFactor(fleet, decode) * PrefillSeconds(new_b, cached_b, p.rates);
  if (static_cast<double>(new_a) > static_cast<double>(new_b) + slack) {
    plan.veto = Veto::kRecomputesPrefix;
  } else if (decode_shortfall > 0) {
    plan.veto = Veto::kDecodeKvFull;
  } else if (plan.queue_s + plan.admission_s >= prefill_on_b) {
    plan.veto = Veto::kPrefillQueued;
  } else if (StreamsStalled(b) <= 0 ||
             plan.stall + plan.warm >= PrefillHarm(fleet, decode, prefill_on_b, p)) {
    plan.veto = Veto::kNoStallSaved;
  }
  return plan;
}

}  // namespace kvroute::router::placement
