// proxy::HealthTracker: whether each backend may receive traffic, from two
// sources of evidence:
//
//   - active checks (GET /health on an interval): `unhealthy_after`
//     consecutive failures take the backend out, `healthy_after` consecutive
//     successes bring it back;
//   - passive evidence from real requests, through a per-backend circuit
//     breaker: `passive_failures` consecutive failed requests (connect
//     error, timeout, 5xx, broken stream) open the breaker and eject the
//     backend for `ejection` (doubling on each consecutive ejection, capped
//     at `max_ejection`); then it is half-open: traffic flows again, the
//     first success closes the breaker, the first failure re-opens it;
//   - progress, from the engine's own counters (/metrics, scraped by the
//     monitor): an engine that holds requests while its token counters stand
//     still for `hung_after` is hung and ejected like an open breaker. One
//     whose counters move is busy, however long its queue: a request that
//     times out waiting there is the queue's doing, not the instance's, and
//     is not a passive failure (MakingProgress tells the relay which).
//
// A backend is routable when its active checks pass and its breaker is not
// open. Every change of routability is reported, under the tracker's lock so
// reports arrive in order, to the callback given at construction (the
// server tells the router, counts the ejection and logs it).
//
//   HealthTracker health(n, options, [&](const HealthChange& c) {...});
//   health.OnRequest(b, /*ok=*/false, now);   // from any thread
//   health.Tick(now);                         // open -> half-open when due
//
// Thread-safety: all methods may be called from any thread; one absl::Mutex
// guards the state. Time is passed in, never read, so tests are exact.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kvroute::proxy {

struct HealthOptions {
  int unhealthy_after = 2;  // consecutive failed active checks to eject
  int healthy_after = 1;    // consecutive good active checks to re-admit
  int passive_failures = 5;  // consecutive failed requests to open the breaker
  absl::Duration ejection = absl::Seconds(5);       // first open period
  absl::Duration max_ejection = absl::Seconds(60);  // cap of the doubling
  // An engine holding requests whose counters have not moved for this long
  // is hung (longer than one prefill of the longest prompt: vLLM counts a
  // prompt's tokens when its prefill ends). Zero: never judged hung.
  absl::Duration hung_after = absl::Seconds(120);
};

// One scrape of an engine's progress: whether it holds requests (running or
// waiting) and a counter that grows while it works (prompt plus generated
// tokens); a negative counter: the engine does not publish one.
struct EngineProgress {
  bool holds_requests = false;
  double work_counter = -1;
};

enum class BreakerState { kClosed, kOpen, kHalfOpen };
std::string_view ToString(BreakerState s);

struct HealthChange {
  int backend = -1;
  bool routable = true;
  // What caused it: "health_check" | "health_check_recovered" |
  // "passive_failures" | "half_open_failure" | "ejection_expired" | "hung".
  std::string reason;
};

struct BackendHealth {
  bool active_up = true;
  BreakerState breaker = BreakerState::kClosed;
  int consecutive_failures = 0;  // passive
  int ejections_in_a_row = 0;
  absl::Time open_until = absl::InfinitePast();
  // Progress: the last counter value seen and when it last moved (or the
  // engine last held nothing); InfinitePast until the first scrape.
  double work_counter = -1;
  absl::Time progress_at = absl::InfinitePast();
  bool hung = false;  // ejected for standing still; cleared when it moves
  bool routable() const { return active_up && breaker != BreakerState::kOpen; }
};

class HealthTracker {
 public:
  using OnChange = std::function<void(const HealthChange&)>;
  HealthTracker(int backends, HealthOptions options, OnChange on_change);

  // One active check's result.
  void OnProbe(int backend, bool ok, absl::Time now);
  // One real request's result on `backend`: ok when the engine answered
  // with a non-5xx response (a 4xx is the client's fault, not the
  // instance's); failed on connect errors, timeouts, 5xx and broken streams.
  void OnRequest(int backend, bool ok, absl::Time now);
  // Moves breakers whose ejection has run out to half-open.
  void Tick(absl::Time now);
  // One scrape of the engine's progress. Holding requests with the counter
  // unchanged since `hung_after` ago opens the breaker (reason "hung"); a
  // hung engine that stays still is re-ejected at each half-open scrape.
  void OnProgress(int backend, const EngineProgress& p, absl::Time now);
  // Whether the engine was seen working within `hung_after` of `now` (its
  // counter moved, or it held nothing): a timeout there is a busy queue, not
  // a failure. False when its progress is unknown (no counter scraped).
  bool MakingProgress(int backend, absl::Time now) const;

  // Grows to `backends` (new backends start routable); never shrinks.
  void Resize(int backends);

  bool Routable(int backend) const;
  BackendHealth Get(int backend) const;
  const HealthOptions& options() const { return options_; }

 private:
  void Update(int backend, bool was_routable, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Open(BackendHealth& h, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const HealthOptions options_;
  const OnChange on_change_;
  mutable absl::Mutex mu_;
  std::vector<BackendHealth> backends_ ABSL_GUARDED_BY(mu_);
  std::vector<int> probe_failures_ ABSL_GUARDED_BY(mu_);
  std::vector<int> probe_successes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvroute::proxy
