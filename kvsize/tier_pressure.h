// kvsize::ComputeTierPressure: a fleet's KV tiers against its sessions, and what to add when
// they fall short. The one formula behind `kvroute-size`'s retention clock and disk spill and
// behind the kvroute daemon's live sizing gauges (`kvroute_kv_*`, router/live_sizing.h), so
// the offline and the live figures cannot drift; deploy/prometheus/kvroute-alerts.yml restates
// it in PromQL (kvroute:kv_add_instances, kvroute:kv_add_host_gib), pinned to the same numbers
// by tests/kvsize/tier_pressure_test.cc and the promtool tests.
//
// The model, in tokens and seconds:
//   - The working set W is the KV the sessions kept warm need: their footprints (last prompt
//     plus output). The tiers hold at most HBM + host = G + H between them (vLLM's CPU
//     offloading writes through, so this is the reach when host blocks outlive GPU ones); the
//     rest spills: recomputed, or read from disk where there is one.
//   - A tier keeps a block for its retention clock, capacity / write rate: LRU eviction drops a
//     block once the tier has taken that many newer tokens. A session's KV survives as long as
//     its longest-lived tier keeps it, so the fleet's retention is the tiers' longest. It must
//     reach the reuse gap (think time + TTFT: from a turn's end to the next turn's prefill).
//   - Thrash ahead: W > G + H, or the longest retention < the reuse gap.
//   - Remedies, each alone enough: N more instances like the current ones (each brings its
//     per-instance HBM and host; traffic, so the write rates, stays), or X more host bytes
//     (the fleet's host write rate is what a host tier takes; without one, every computed
//     token, since the tier writes through).
//
//   kvsize::TierLoad load{.instances = 8, .working_set_tokens = 30e6,
//                         .gpu_capacity_tokens = 8 * 3.8e6, .host_capacity_tokens = 0,
//                         .gpu_write_rate_tokens_per_s = 40e3,
//                         .host_write_rate_tokens_per_s = 40e3, .reuse_gap_s = 20,
//                         .kv_bytes_per_token = 98304};
//   kvsize::TierPressure p = kvsize::ComputeTierPressure(load);
//   if (p.thrash_ahead) printf("add %.0f instances or %.0f GiB per instance\n",
//                              p.add_instances, p.add_host_gib_per_instance);
//
// Pure, no state: thread-safe.
#pragma once

namespace kvsize {

// A tier's retention clock: how long it keeps a block before newer writes evict it.
// 0 without capacity (a tier that holds nothing keeps nothing); +inf while nothing is written.
double RetentionSeconds(double capacity_tokens, double write_rate_tokens_per_s);

// The fleet's tiers and its traffic, fleet-wide figures.
struct TierLoad {
  int instances = 1;                        // each contributing capacity
  double working_set_tokens = 0;            // W: sessions' footprints kept warm
  double gpu_capacity_tokens = 0;           // G: HBM KV of the fleet
  double host_capacity_tokens = 0;          // H: host tier of the fleet, 0 without one
  double gpu_write_rate_tokens_per_s = 0;   // new KV written into HBM per second
  double host_write_rate_tokens_per_s = 0;  // into the host tier (without one: what it would take)
  double reuse_gap_s = 0;                   // think time + TTFT
  double kv_bytes_per_token = 0;            // c_KV, to express host memory in bytes
};

struct TierPressure {
  double gpu_retention_s = 0;
  double host_retention_s = 0;
  double retention_s = 0;     // the longest of the two: how long the fleet keeps a block
  bool retention_ok = true;   // retention_s >= reuse_gap_s
  double spill_tokens = 0;    // max(0, W - G - H)
  bool thrash_ahead = false;  // spill_tokens > 0 or !retention_ok
  // Remedies (0 when nothing is short): whole instances, or whole GiB (2^30 bytes) of host
  // tier per instance (vLLM's --kv-offloading-size grows by it); 0 GiB with c_KV unknown.
  double add_instances = 0;
  double add_host_tokens = 0;  // fleet-wide
  double add_host_gib_per_instance = 0;
};

TierPressure ComputeTierPressure(const TierLoad& load);

}  // namespace kvsize
