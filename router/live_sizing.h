// LiveSizing: what the router measures for the live sizing gauges
// (`kvroute_kv_*`, docs/operator-guide.md "Live sizing"): the tokens newly
// written into each KV tier and the sessions' reuse gaps, turned into a
// write rate per tier and a mean gap over a sliding window.
//
// The counts arrive without a clock (an engine's KV events carry none); each
// Read(now) takes a reading of the running totals, and rates are the
// difference between this reading and the newest one at least `window` old
// (the oldest kept, until one is), as Prometheus' rate() does with a
// counter's samples. Readings closer together than window / max_readings
// are not kept, so frequent readers do not shorten the window, and at most
// `max_readings` are kept.
//
//   LiveSizing sizing({.window = absl::Minutes(5)});
//   sizing.AddWritten(LiveSizing::Tier::kGpu, 4096);   // computed or stored tokens
//   sizing.AddReuseGap(12.5);                          // a turn's first token after the last
//   LiveSizing::Reading r = sizing.Read(now);          // r.write_rate_tokens_per_s[kGpu] ...
//
// The tiers' capacities and the working set are not here: they belong to
// their owners (the shadow feedback's learned capacity, the engines' gauges,
// the residency model), and RouterImpl::Sizing combines them with this
// through kvsize::ComputeTierPressure (kvsize/tier_pressure.h).
//
// Pure and deterministic: time is passed in. Not thread-safe: the Router
// owns it under its mutex.
#pragma once

#include <array>
#include <cstdint>
#include <deque>

#include "absl/time/time.h"

namespace kvroute::router {

class LiveSizing {
 public:
  struct Options {
    absl::Duration window = absl::Minutes(5);
    int max_readings = 64;
  };
  enum class Tier { kGpu = 0, kHost = 1 };

  explicit LiveSizing(Options options) : options_(options) {}

  // `tokens` of KV newly written into `tier` (computed, stored or reloaded).
  void AddWritten(Tier tier, int64_t tokens);
  // A session's turn reached its first token `seconds` after its previous
  // turn ended: the time its KV had to survive.
  void AddReuseGap(double seconds);

  struct Reading {
    std::array<double, 2> write_rate_tokens_per_s = {0, 0};  // by Tier
    double reuse_gap_s = 0;  // mean over the window, 0 without turns
    int64_t reuse_gaps = 0;  // turns in the window
    absl::Duration span;     // the interval measured, zero on the first reading
  };
  Reading Read(absl::Time now);

  const Options& options() const { return options_; }

 private:
  // Running totals: written tokens by tier, gap seconds, gaps.
  struct Totals {
    std::array<double, 2> written = {0, 0};
    double gap_seconds = 0;
    int64_t gaps = 0;
  };
  struct Sample {
    absl::Time at;
    Totals totals;
  };

  Options options_;
  Totals totals_;
  std::deque<Sample> readings_;  // oldest first, at most max_readings
};

}  // namespace kvroute::router
