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
    const double rate = bandwidth_bytes_per_s / static_cast<double>(active.size());
    double least = kForever;
    for (const SharedTransfer* x : active) least = std::min(least, x->bytes);
    const double next = std::min({t + least / rate, next_start, until});
    const double moved = rate * (next - t);
    for (SharedTransfer* x : active) {
      x->bytes -= moved;
      if (x->bytes <= kByteEpsilon) {
        x->bytes = 0;
        x->finish = next;
      }
    }
    t = next;
  }
}

}  // namespace sim
