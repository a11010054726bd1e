#include "router/live_sizing.h"

#include <algorithm>

namespace kvroute::router {

void LiveSizing::AddWritten(Tier tier, int64_t tokens) {
  if (tokens > 0) totals_.written[static_cast<int>(tier)] += static_cast<double>(tokens);
}

void LiveSizing::AddReuseGap(double seconds) {
  if (!(seconds >= 0)) return;
  totals_.gap_seconds += seconds;
  totals_.gaps += 1;
}

LiveSizing::Reading LiveSizing::Read(absl::Time now) {
  // The baseline: the newest reading at least a window old, else the oldest;
  // older ones are of no further use.
  const absl::Time horizon = now - options_.window;
  while (readings_.size() > 1 && readings_[1].at <= horizon) readings_.pop_front();
  Reading out;
  if (!readings_.empty() && readings_.front().at < now) {
    const Sample& base = readings_.front();
    out.span = now - base.at;
    const double seconds = absl::ToDoubleSeconds(out.span);
    for (int t = 0; t < 2; ++t) {
      out.write_rate_tokens_per_s[t] = (totals_.written[t] - base.totals.written[t]) / seconds;
    }
    out.reuse_gaps = totals_.gaps - base.totals.gaps;
    if (out.reuse_gaps > 0) {
      out.reuse_gap_s =
          (totals_.gap_seconds - base.totals.gap_seconds) / static_cast<double>(out.reuse_gaps);
    }
  }
  // Spaced so that a window of readings and its baseline fit in max_readings.
  const absl::Duration spacing = options_.window / std::max(1, options_.max_readings - 2);
  if (readings_.empty() || now - readings_.back().at >= spacing) {
    readings_.push_back({now, totals_});
    while (static_cast<int>(readings_.size()) > std::max(2, options_.max_readings)) {
      readings_.pop_front();
    }
  }
  return out;
}

}  // namespace kvroute::router
