// Processor sharing of one network link between the KV pulls that use it at once: every
// transfer that has started gets an equal share of the bandwidth (two pulls into one instance
// each take twice as long as one alone), except that a transfer capped lower (its source NIC
// is shared with pulls to other instances) leaves its unused share to the others (max-min
// fairness).
//
//   std::vector<SharedTransfer> t = {{.start = 0, .bytes = 2e9}, {.start = 0.1, .bytes = 1e9}};
//   std::vector<SharedTransfer*> ptrs = {&t[0], &t[1]};
//   RunSharedLink(ptrs, 1e9, /*from=*/0, /*until=*/kForever);  // t[i].finish set
//
// Pure functions on caller-owned values; no clock, no state.
#pragma once

#include <limits>
#include <span>

namespace sim {

inline constexpr double kForever = std::numeric_limits<double>::infinity();

struct SharedTransfer {
  double start = 0;            // when its bytes start to flow (after the fixed costs)
  double bytes = 0;            // bytes still to move
  double finish = -1;          // set when the last byte has moved; -1 while unfinished
  double max_rate = kForever;  // bytes/s the other end can send at most
};

// Moves the unfinished transfers forward from `from` to `until` with the link's bandwidth
// shared equally among those that have started. Transfers that complete by `until` get
// `finish` and zero bytes; the others keep what is left. `until` may be kForever (every
// transfer completes).
void RunSharedLink(std::span<SharedTransfer* const> transfers, double bandwidth_bytes_per_s,
                   double from, double until);

}  // namespace sim
