#include "proxy/config_router.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "proxy/config_reader.h"

namespace kvroute::proxy::config_internal {
namespace {

absl::Status ParseOffloadCost(const YAML::Node& n, OffloadCostKeys* k) {
  const std::string path = "router.offload_cost";
  KV_RETURN_IF_ERROR(RequireMap(n, path));
  MapReader r(n, path);
  KV_RETURN_IF_ERROR(r.Double("kv_bytes_per_token", &k->kv_bytes_per_token, 1, 1e9));
  KV_RETURN_IF_ERROR(r.Double("link_bytes_per_second", &k->link_bytes_per_second, 1, 1e13));
  KV_RETURN_IF_ERROR(r.Double("transfer_overhead_s", &k->transfer_overhead_seconds, 0, 3600));
  KV_RETURN_IF_ERROR(r.Double("prefill_tokens_per_second", &k->prefill_tokens_per_second, 1, 1e9));
  KV_RETURN_IF_ERROR(r.Double("margin", &k->margin, 0, 1000));
  return r.Finish();
}

// `router.rate_learning`: the cost model's time factors learned online.
absl::Status ParseRateLearning(const YAML::Node& n, router::Options::RateLearning* l) {
  const std::string path = "router.rate_learning";
  KV_RETURN_IF_ERROR(RequireMap(n, path));
  MapReader r(n, path);
  KV_RETURN_IF_ERROR(ReadBool(r, "enabled", &l->enabled));
  KV_RETURN_IF_ERROR(r.Double("alpha", &l->alpha, 0.001, 1));
  KV_RETURN_IF_ERROR(r.Double("max_sample_ratio", &l->max_sample_ratio, 1, 1e6));
  return r.Finish();
}

// `router.residency`: agent sessions held back until their KV fits.
absl::Status ParseResidency(const YAML::Node& n, router::Options* o) {
  const std::string path = "router.residency";
  KV_RETURN_IF_ERROR(RequireMap(n, path));
  MapReader r(n, path);
  router::ResidencyGate::Options* g = &o->residency;
  KV_RETURN_IF_ERROR(ReadBool(r, "enabled", &g->enabled));
  KV_RETURN_IF_ERROR(r.Double("fill", &g->fill, 0.05, 1));
  KV_RETURN_IF_ERROR(r.Integer("quantum_turns", &g->quantum_turns, 1, 1000000));
  KV_RETURN_IF_ERROR(r.Seconds("grace_s", &g->grace, 0));
  KV_RETURN_IF_ERROR(r.Seconds("max_wait_s", &g->max_wait, 0));
  KV_RETURN_IF_ERROR(ReadBool(r, "yield_grown", &g->yield_grown));
  router::GateRoom::Options* room = &o->host_tier.gate_room;
  using Mode = router::GateRoom::Mode;
  std::string mode = room->mode == Mode::kTier ? "tier" : room->mode == Mode::kGpu ? "gpu" : "auto";
  KV_RETURN_IF_ERROR(r.String("room", &mode));
  KV_RETURN_IF_ERROR(r.Double("auto_long_pause_s", &room->long_pause_s, 0, 1e6));
  KV_RETURN_IF_ERROR(r.Double("auto_gpu_below_share", &room->gpu_below_share, 0, 1));
  KV_RETURN_IF_ERROR(r.Double("auto_tier_at_share", &room->tier_at_share, 0, 1));
  KV_RETURN_IF_ERROR(r.Integer("auto_min_pauses", &room->min_pauses, 1, 1000000));
  KV_RETURN_IF_ERROR(r.Finish());
  if (mode != "tier" && mode != "gpu" && mode != "auto") {
    return KeyError(path + ".room",
                    absl::StrCat("unknown value '", mode, "' (expected tier, gpu or auto)"));
  }
  if (room->gpu_below_share > room->tier_at_share) {
    return KeyError(path + ".auto_gpu_below_share",
                    absl::StrCat(room->gpu_below_share, " is above auto_tier_at_share (",
                                 room->tier_at_share, ")"));
  }
  room->mode = mode == "tier" ? Mode::kTier : mode == "gpu" ? Mode::kGpu : Mode::kAuto;
  return absl::OkStatus();
}

// `router.sizing`: the live sizing gauges' measuring window.
absl::Status ParseSizing(const YAML::Node& n, router::LiveSizing::Options* o) {
  const std::string path = "router.sizing";
  KV_RETURN_IF_ERROR(RequireMap(n, path));
  MapReader r(n, path);
  KV_RETURN_IF_ERROR(r.Seconds("window_s", &o->window, 1));
  return r.Finish();
}

// `router.shed`: requests refused at admission past their deadline.
absl::Status ParseShed(const YAML::Node& n, router::ShedOptions* o) {
  const std::string path = "router.shed";
  KV_RETURN_IF_ERROR(RequireMap(n, path));
  MapReader r(n, path);
  KV_RETURN_IF_ERROR(ReadBool(r, "enabled", &o->enabled));
  KV_RETURN_IF_ERROR(r.Double("ttft_factor", &o->ttft_factor, 0.01, 1e6));
  KV_RETURN_IF_ERROR(r.Double("ttft_deadline_warm_s", &o->ttft_deadline_warm_s, 0, 86400));
  KV_RETURN_IF_ERROR(r.Double("ttft_deadline_medium_s", &o->ttft_deadline_medium_s, 0, 86400));
  KV_RETURN_IF_ERROR(r.Double("ttft_deadline_heavy_s", &o->ttft_deadline_heavy_s, 0, 86400));
  KV_RETURN_IF_ERROR(r.Double("running_session_factor", &o->running_session_factor, 1, 1e6));
  KV_RETURN_IF_ERROR(r.Double("min_retry_after_s", &o->min_retry_after_s, 0, 86400));
  KV_RETURN_IF_ERROR(r.Double("max_retry_after_s", &o->max_retry_after_s, 0, 86400));
  if (o->max_retry_after_s < o->min_retry_after_s) {
    return KeyError("router.shed.max_retry_after_s",
                    absl::StrCat("must be at least router.shed.min_retry_after_s (",
                                 o->min_retry_after_s, "), got ", o->max_retry_after_s));
  }
  return r.Finish();
}

// `router.slo`: the SLOs the placement cost weighs its terms by.
absl::Status ParseSlo(const YAML::Node& n, router::Options::PlacementSlo* slo) {
  const std::string path = "router.slo";
  KV_RETURN_IF_ERROR(RequireMap(n, path));
  MapReader r(n, path);
  KV_RETURN_IF_ERROR(r.Double("ttft_warm_s", &slo->ttft_warm_s, 0.001, 86400));
  KV_RETURN_IF_ERROR(r.Double("ttft_medium_s", &slo->ttft_medium_s, 0.001, 86400));
  KV_RETURN_IF_ERROR(r.Double("ttft_heavy_s", &slo->ttft_heavy_s, 0.001, 86400));
  KV_RETURN_IF_ERROR(r.Double("tpot_s", &slo->tpot_s, 0.0001, 3600));
  KV_RETURN_IF_ERROR(r.Double("harm_weight", &slo->harm_weight, 0, 1000));
  return r.Finish();
}

}  // namespace

absl::Status ParseRouter(const YAML::Node& n, router::Options* o, OffloadCostKeys* cost) {
  KV_RETURN_IF_ERROR(RequireMap(n, "router"));
  MapReader r(n, "router");
  KV_RETURN_IF_ERROR(r.Integer("chunk_bytes", &o->chunk_bytes, 16, 1 << 20));
  KV_RETURN_IF_ERROR(r.Double("bytes_per_token", &o->default_bytes_per_token, 0.5, 64));
  KV_RETURN_IF_ERROR(r.Integer("default_capacity_tokens", &o->default_capacity_tokens, 1,
                               int64_t{1} << 40));
  KV_RETURN_IF_ERROR(r.Double("overload_factor", &o->overload_factor, 1.0, 1000));
  KV_RETURN_IF_ERROR(r.Integer("max_sessions", &o->max_sessions, 1, 100000000));
  KV_RETURN_IF_ERROR(r.Seconds("session_ttl_s", &o->session_ttl));
  KV_RETURN_IF_ERROR(r.Seconds("session_resident_window_s", &o->session_resident_window, 0));
  KV_RETURN_IF_ERROR(r.Integer("warm_new_tokens", &o->thresholds.warm_new_tokens, 0,
                               int64_t{1} << 40));
  KV_RETURN_IF_ERROR(r.Double("warm_cached_fraction", &o->thresholds.warm_cached_fraction, 0, 1));
  KV_RETURN_IF_ERROR(r.Integer("overload_min_tokens", &o->overload_min_tokens, 0, int64_t{1} << 40));
  KV_RETURN_IF_ERROR(r.Integer("max_inflight_requests", &o->max_inflight_requests, 1, 10000000));
  KV_RETURN_IF_ERROR(r.Integer("default_output_tokens", &o->default_output_tokens, 1, 10000000));
  KV_RETURN_IF_ERROR(r.Integer("max_output_tokens_est", &o->max_output_tokens_est, 1, 10000000));
  KV_RETURN_IF_ERROR(r.Integer("eviction_tolerance_chunks", &o->eviction_tolerance_chunks, 0,
                               1000000));
  KV_RETURN_IF_ERROR(r.Double("capacity_learning_rate", &o->capacity_learning_rate, 0, 1));
  KV_RETURN_IF_ERROR(r.Double("min_capacity_fraction", &o->min_capacity_fraction, 0, 1));
  KV_RETURN_IF_ERROR(r.Double("prefill_queue_weight", &o->baseline.prefill_queue_weight, 0, 1e6));
  KV_RETURN_IF_ERROR(r.Double("decode_tokens_weight", &o->baseline.decode_tokens_weight, 0, 1e6));
  KV_RETURN_IF_ERROR(r.Double("waiting_penalty_tokens", &o->baseline.waiting_penalty_tokens, 0,
                              1e9));
  KV_RETURN_IF_ERROR(r.Double("admission_weight", &o->baseline.admission_weight, 0, 1e6));
  KV_RETURN_IF_ERROR(r.Double("eviction_weight", &o->baseline.eviction_weight, 0, 1e6));
  KV_RETURN_IF_ERROR(r.Double("decode_stall_weight", &o->baseline.decode_stall_weight, 0, 1e6));
  KV_RETURN_IF_ERROR(r.Double("attention_weight", &o->baseline.attention_weight, 0, 1e6));
  KV_RETURN_IF_ERROR(ReadBool(r, "tier_aware", &o->host_tier.aware));
  KV_RETURN_IF_ERROR(r.Double("host_load_bytes_per_second", &o->host_tier.load_bytes_per_second,
                              1e6, 1e13));
  KV_RETURN_IF_ERROR(r.Double("pool_load_bytes_per_second",
                              &o->host_tier.pool_load_bytes_per_second, 1e6, 1e13));
  KV_RETURN_IF_ERROR(r.String("offload_gate", &o->offload_gate));
  if (o->offload_gate != "joint" && o->offload_gate != "threshold" &&
      o->offload_gate != "cost") {
    return KeyError("router.offload_gate", absl::StrCat("unknown gate '", o->offload_gate,
                                                        "' (expected joint, threshold or cost)"));
  }
  if (const YAML::Node* c = r.Find("offload_cost")) KV_RETURN_IF_ERROR(ParseOffloadCost(*c, cost));
  if (const YAML::Node* slo = r.Find("slo")) KV_RETURN_IF_ERROR(ParseSlo(*slo, &o->slo));
  if (const YAML::Node* l = r.Find("rate_learning")) {
    KV_RETURN_IF_ERROR(ParseRateLearning(*l, &o->rate_learning));
  }
  if (const YAML::Node* g = r.Find("residency")) KV_RETURN_IF_ERROR(ParseResidency(*g, o));
  if (const YAML::Node* g = r.Find("shed")) KV_RETURN_IF_ERROR(ParseShed(*g, &o->shed));
  if (const YAML::Node* g = r.Find("sizing")) KV_RETURN_IF_ERROR(ParseSizing(*g, &o->sizing));
  return r.Finish();
}

// The offload cost model from its defaults, then the profile, then the
// `router.offload_cost` keys, its times (and the KV tiers' reload
// bandwidths) then scaled to wall seconds by `time_scale`
// (profile_time_scale). With `offload_gate: cost` the figures
// that decide it (KV bytes per token, link bandwidth, prefill rate) must
// come from the profile or the keys: the defaults describe one model on one
// GPU, not this fleet. A prefill rate from either makes the model this
// fleet's (Options::offload_cost_known).
absl::Status FillOffloadCost(const OffloadCostKeys& keys, const ProfileFigures& profile,
                             bool has_profile, double time_scale, router::Options* o) {
  classifier::OffloadCostParams& p = o->offload_cost;
  struct Figure {
    double key;
    double profile;
    double* out;
    const char* key_name;
    const char* profile_key;
  };
  const Figure figures[] = {
      {keys.kv_bytes_per_token, profile.kv_bytes_per_token, &p.kv_bytes_per_token,
       "kv_bytes_per_token", "model.num_attention_layers, model.num_kv_heads and model.head_dim"},
      {keys.link_bytes_per_second, profile.link_bytes_per_second, &p.link_bytes_per_second,
       "link_bytes_per_second", "link.bandwidth_bytes_per_s"},
      {keys.prefill_tokens_per_second, profile.prefill_tokens_per_second,
       &p.prefill_tokens_per_second, "prefill_tokens_per_second", "timing.prefill_s_per_token"},
  };
  for (const Figure& f : figures) {
    if (f.key > 0) {
      *f.out = f.key;
    } else if (f.profile > 0) {
      *f.out = f.profile;
    } else if (o->offload_gate == "cost") {
      return KeyError(
          "router.offload_gate",
          absl::StrCat("cost needs router.offload_cost.", f.key_name, " or a `profile` with ",
                       f.profile_key, has_profile ? " (the profile has none)" : ""));
    }
  }
  if (keys.transfer_overhead_seconds >= 0) {
    p.transfer_overhead_seconds = keys.transfer_overhead_seconds;
  } else if (profile.transfer_overhead_seconds >= 0) {
    p.transfer_overhead_seconds = profile.transfer_overhead_seconds;
  }
  if (keys.margin >= 0) p.margin = keys.margin;
  if (profile.attention_s_per_token_pair >= 0) {
    p.attention_s_per_token_pair = profile.attention_s_per_token_pair;
  }
  o->offload_cost_known =
      keys.prefill_tokens_per_second > 0 || profile.prefill_tokens_per_second > 0;
  // An engine running at time_scale wall seconds per profile second.
  p.prefill_tokens_per_second /= time_scale;
  p.link_bytes_per_second /= time_scale;
  p.transfer_overhead_seconds *= time_scale;
  p.attention_s_per_token_pair *= time_scale;
  // The tiers' reloads likewise: their bandwidths, and the engines' timings
  // of them, which a simulated fleet reports in modelled seconds.
  o->host_tier.load_bytes_per_second /= time_scale;
  o->host_tier.pool_load_bytes_per_second /= time_scale;
  o->host_tier.engine_time_scale = time_scale;
  return absl::OkStatus();
}

}  // namespace kvroute::proxy::config_internal
