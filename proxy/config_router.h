// The `router:` section of the config (internal to proxy/config*.cc): its
// keys onto router::Options, and the offload cost model from its defaults,
// a profile and the `router.offload_cost` keys.
#pragma once

#include <yaml-cpp/yaml.h>

#include "absl/status/status.h"
#include "proxy/config.h"
#include "router/router.h"

namespace kvroute::proxy::config_internal {

// `router.offload_cost`: each key given, or -1 (from the profile, else the
// model's default).
struct OffloadCostKeys {
  double kv_bytes_per_token = -1;
  double link_bytes_per_second = -1;
  double transfer_overhead_seconds = -1;
  double prefill_tokens_per_second = -1;
  double margin = -1;
};

// `router:` onto `o`; the offload cost keys into `cost`.
absl::Status ParseRouter(const YAML::Node& n, router::Options* o, OffloadCostKeys* cost);

// The offload cost model from its defaults, then the profile, then the
// `router.offload_cost` keys, its times (and the KV tiers' reload
// bandwidths) then scaled to wall seconds by `time_scale`
// (profile_time_scale). With `offload_gate: cost` the figures
// that decide it (KV bytes per token, link bandwidth, prefill rate) must
// come from the profile or the keys: the defaults describe one model on one
// GPU, not this fleet. A prefill rate from either makes the model this
// fleet's (Options::offload_cost_known).
absl::Status FillOffloadCost(const OffloadCostKeys& keys, const ProfileFigures& profile,
                             bool has_profile, double time_scale, router::Options* o);

}  // namespace kvroute::proxy::config_internal
