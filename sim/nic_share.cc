#include "sim/nic_share.h"

#include <algorithm>
#include <vector>

namespace sim {

namespace {
// Bytes below this count as moved (rounding of rate x time).
constexpr double kByteEpsilon = 1e-3;
}  // namespace

void RunSharedLink(std::span<SharedTransfer* const> transfers, double bandwidth_bytes_per_s,
                   double from, double until) {
  double t = from;
  std::vector<SharedTransfer*> active;
  std::vector<double> rates;
  while (t < until) {
    active.clear();
    double next_start = kForever;
    for (SharedTransfer* x : transfers) {
      if (x->finish >= 0) continue;
      if (x->start <= t) {
        active.push_back(x);
      } else {
        next_start = std::min(next_start, x->start);
      }
    }
    if (active.empty()) {
      if (next_start == kForever) return;
      t = std::min(next_start, until);
      continue;
    }
    // Max-min fair shares: the most capped transfers take their cap, the rest split what is
    // left equally.
    std::sort(active.begin(), active.end(), [](const SharedTransfer* a, const SharedTransfer* b) {
      return a->max_rate < b->max_rate;
    });
    rates.assign(active.size(), 0);
    double left = bandwidth_bytes_per_s;
    for (size_t i = 0; i < active.size(); ++i) {
      rates[i] = std::min(active[i]->max_rate, left / static_cast<double>(active.size() - i));
      left -= rates[i];
    }
    double next = std::min(next_start, until);
    for (size_t i = 0; i < active.size(); ++i)
      next = std::min(next, t + active[i]->bytes / rates[i]);
    for (size_t i = 0; i < active.size(); ++i) {
      SharedTransfer* x = active[i];
      // The transfer that sets `next` finishes there, by the same arithmetic: late in a run
      // its remaining time can be below the clock's resolution (t + left == t), and
      // subtracting rate x 0 would leave it unfinished forever.
      if (t + x->bytes / rates[i] <= next) {
        x->bytes = 0;
        x->finish = next;
        continue;
      }
      x->bytes -= rates[i] * (next - t);
      if (x->bytes <= kByteEpsilon) {
        x->bytes = 0;
        x->finish = next;
      }
    }
    t = next;
  }
}

}  // namespace sim
