// ResidencyWait: parks the requests the router's residency model holds
// (router/residency_gate.h, RouteTicket::residency_wait) until it admits
// them, and dispatches every request it is given. The one life cycle of a
// routed request, for the proxy and for kvroute-bench's oracle reference:
//
//   ResidencyWait wait(router, clock);          // one per router
//   t = router.Route(features, now);
//   Admitted go = co_await wait.Admit(*t);      // held ones wait here
//   ... send to go.dispatched.decision's instance, unless go.gone ...
//   router.OnFirstToken(*t, now); router.OnComplete(*t, outcome, now);
//
// A held request sleeps on a timer of its own executor until the model's
// next timed event (a resident's grace time, a waiter's bound), then ticks
// the model; the router names the waiters it admits (a turn ending, a session
// moving, a tick) to this object's listener, which wakes them by cancelling
// their timers on their own executors, since Asio timers are not
// thread-safe. Every wait ends within the model's max_wait. Admit honours
// per-operation cancellation (e.g. `co_await (wait.Admit(t) || client_left)`):
// cancelled while held, the request gives its place up and comes back gone.
//
// Time is the WaitClock's, so a test drives the timer path with a fake clock
// and Tick().
//
// Thread-safety: every method may run on any thread; a waiter's executor
// must be single-threaded (a worker's io_context).
#pragma once

#include <cstdint>
#include <memory>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "residency/wait_clock.h"
#include "router/router.h"

namespace kvroute::residency {

class ResidencyWait {
 public:
  // Becomes `router`'s residency listener; `router` and `clock` must
  // outlive it.
  ResidencyWait(router::Router& router, const WaitClock& clock);
  ~ResidencyWait();
  ResidencyWait(const ResidencyWait&) = delete;
  ResidencyWait& operator=(const ResidencyWait&) = delete;

  // Whether the router may hold requests (Router::HoldsSessions): then the
  // caller routes session turns with defer_kv_reservation.
  bool enabled() const { return router_.HoldsSessions(); }

  struct Admitted {
    // Router::Dispatch's answer: where it goes now and its estimate there.
    router::Router::Dispatched dispatched;
    double waited_s = 0;
    // Cancelled while held (its client left): not dispatched; the caller
    // still ends it with OnComplete.
    bool gone = false;
  };
  // Returns once `ticket`'s request may go, dispatched.
  boost::asio::awaitable<Admitted> Admit(const router::RouteTicket& ticket);
  // The clock moved: the router's residency model admits whom it now can.
  // The waiters' timers call it; a test with a fake clock calls it itself.
  void Tick();
  // kvroute is draining: every held request goes now, and later ones do not
  // wait (so none outlives the workers' event loops).
  void ReleaseAll();

  const WaitClock& clock() const { return clock_; }
  router::ResidencyGate::Counters counters() const { return router_.ResidencyCounters(); }
  size_t waiting() const { return router_.ResidencyWaiting(); }

 private:
  struct Waiter {
    explicit Waiter(const boost::asio::any_io_executor& ex) : timer(ex) {}
    boost::asio::steady_timer timer;
    bool go = false;  // guarded by ResidencyWait::mu_
  };
  // The router's listener (called under the router's lock).
  void Wake(absl::Span<const uint64_t> ids);
  void WakeLocked(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sleeps until `w` is woken; false when cancelled first.
  boost::asio::awaitable<bool> Sleep(Waiter& w);

  router::Router& router_;
  const WaitClock& clock_;
  mutable absl::Mutex mu_;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Waiter>> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvroute::residency
