// WaitClock: the time a residency wait reads, injected so that a test can
// drive it. Now() is the wall time the router's residency model is given;
// TimerDeadline(t) is when a steady timer must fire for wall time `t`.
//
//   const WaitClock& clock = SystemClock();   // the daemon's and the bench's
//   FakeWaitClock fake(start);        // a test's: timers never fire on their
//   fake.Advance(absl::Seconds(5));   // own; the test advances and calls
//   wait.Tick();                      // ResidencyWait::Tick
//
// Thread-safety: Now and TimerDeadline may be called from any thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kvroute::residency {

class WaitClock {
 public:
  virtual ~WaitClock() = default;
  virtual absl::Time Now() const = 0;
  virtual std::chrono::steady_clock::time_point TimerDeadline(absl::Time t) const = 0;
};

class SystemWaitClock final : public WaitClock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  std::chrono::steady_clock::time_point TimerDeadline(absl::Time t) const override {
    const absl::Duration until = std::max(absl::ZeroDuration(), t - absl::Now());
    return std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(until);
  }
};

// The process's one system clock.
inline const WaitClock& SystemClock() {
  static const SystemWaitClock clock;
  return clock;
}

// Time moves only when the test says; a timer on it never fires (the test
// ticks the wait after each Advance).
class FakeWaitClock final : public WaitClock {
 public:
  explicit FakeWaitClock(absl::Time start) : now_ns_(absl::ToUnixNanos(start)) {}
  absl::Time Now() const override { return absl::FromUnixNanos(now_ns_.load()); }
  std::chrono::steady_clock::time_point TimerDeadline(absl::Time) const override {
    return std::chrono::steady_clock::time_point::max();
  }
  void Advance(absl::Duration d) { now_ns_ += absl::ToInt64Nanoseconds(d); }

 private:
  std::atomic<int64_t> now_ns_;
};

}  // namespace kvroute::residency
