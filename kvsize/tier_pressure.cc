#include "kvsize/tier_pressure.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvsize {

double RetentionSeconds(double capacity_tokens, double write_rate_tokens_per_s) {
  if (capacity_tokens <= 0) return 0;
  if (write_rate_tokens_per_s <= 0) return std::numeric_limits<double>::infinity();
  return capacity_tokens / write_rate_tokens_per_s;
}

TierPressure ComputeTierPressure(const TierLoad& load) {
  TierPressure p;
  const double g = load.gpu_capacity_tokens, h = load.host_capacity_tokens;
  p.gpu_retention_s = RetentionSeconds(g, load.gpu_write_rate_tokens_per_s);
  p.host_retention_s = RetentionSeconds(h, load.host_write_rate_tokens_per_s);
  p.retention_s = std::max(p.gpu_retention_s, p.host_retention_s);
  p.retention_ok = p.retention_s >= load.reuse_gap_s;
  p.spill_tokens = std::max(0.0, load.working_set_tokens - g - h);
  p.thrash_ahead = p.spill_tokens > 0 || !p.retention_ok;
  if (!p.thrash_ahead || load.instances <= 0) return p;

  // More instances: each brings the fleet's mean HBM and host; the write rates stay.
  const double n = load.instances;
  double add = g + h > 0 ? p.spill_tokens / ((g + h) / n) : 0;
  if (!p.retention_ok) {
    // Either tier reaching the gap is enough: the one that needs fewer instances.
    double fewest = std::numeric_limits<double>::infinity();
    const double tiers[][2] = {{g, load.gpu_write_rate_tokens_per_s},
                               {h, load.host_write_rate_tokens_per_s}};
    for (const auto& [capacity, rate] : tiers) {
      if (capacity <= 0) continue;
      fewest = std::min(fewest, (rate * load.reuse_gap_s - capacity) / (capacity / n));
    }
    if (std::isfinite(fewest)) add = std::max(add, fewest);
  }
  p.add_instances = std::ceil(std::max(0.0, add));

  // More host memory: enough for the spill, and for the host tier alone to keep a block for
  // the reuse gap at the rate it is written.
  p.add_host_tokens = p.spill_tokens;
  if (!p.retention_ok) {
    p.add_host_tokens =
        std::max(p.add_host_tokens, load.host_write_rate_tokens_per_s * load.reuse_gap_s - h);
  }
  p.add_host_gib_per_instance =
      load.kv_bytes_per_token > 0
          ? std::ceil(p.add_host_tokens * load.kv_bytes_per_token / std::ldexp(1.0, 30) / n)
          : 0;
  return p;
}

}  // namespace kvsize
