// Clock readings of the request path: one steady-clock reading per
// timestamp, turned into wall time when a record or the router needs it.
// Header-only; the wall anchor is per thread, so every function is safe from
// any thread.
#pragma once

#include <chrono>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kvroute::proxy {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

inline double Since(Clock::time_point t0) { return Seconds(Clock::now() - t0); }

// The wall-clock time of a steady-clock reading: the reading plus the
// offset between the two clocks, read afresh once a second on each thread.
// A request's timestamps then cost one clock read each, not two, and
// differences of the wall times are differences of the steady readings.
inline absl::Time WallAt(Clock::time_point t) {
  thread_local Clock::time_point anchor_steady{};
  thread_local absl::Time anchor_wall = absl::InfinitePast();
  if (anchor_wall == absl::InfinitePast() || t - anchor_steady > std::chrono::seconds(1)) {
    anchor_wall = absl::Now();
    anchor_steady = Clock::now();
  }
  return anchor_wall + absl::FromChrono(t - anchor_steady);
}

// Seconds since the epoch, to the microsecond, as the request log has them.
inline double WallSecondsAt(Clock::time_point t) {
  return static_cast<double>(absl::ToUnixMicros(WallAt(t))) / 1e6;
}

}  // namespace kvroute::proxy
