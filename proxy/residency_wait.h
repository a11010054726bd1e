// ResidencyWait: parks the requests router::ResidencyGate holds back until
// their session's KV fits its instance, and wakes them.
//
//   ResidencyWait wait(options);                     // one per server
//   co_await wait.Enter(backend, session, footprint, capacity);   // before the leg
//   ... serve ...
//   wait.Leave(backend, session, prompt + completion tokens);     // when it ends
//
// A waiter sleeps on a timer of its own executor until the gate's next timed
// event (a resident's grace time, a waiter's max_wait), then ticks the gate;
// a Leave or Enter that makes room wakes the waiters it admits by cancelling
// their timers on their own executors, as Admission does, since Asio timers
// are not thread-safe. Every wait ends within the gate's max_wait.
//
// Thread-safety: Enter and Leave may run on any worker thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "proxy/http_common.h"
#include "router/residency_gate.h"

namespace kvroute::proxy {

class ResidencyWait {
 public:
  explicit ResidencyWait(const router::ResidencyGate::Options& options);

  bool enabled() const { return enabled_; }
  // Where and after how long a held request goes.
  struct Admitted {
    double waited_s = 0;
    // The instance it was admitted on: `backend` as entered, or another whose
    // room a movable turn took (router::ResidencyGate::TakeMove).
    int backend = -1;
  };
  // Returns once the request may go.
  net::awaitable<Admitted> Enter(int backend, std::string_view session,
                                 const router::ResidencyGate::Turn& turn);
  net::awaitable<double> Enter(int backend, std::string_view session, int64_t footprint_tokens,
                               int64_t capacity_tokens) {
    const Admitted a = co_await Enter(backend, session, {footprint_tokens, capacity_tokens});
    co_return a.waited_s;
  }
  void Leave(int backend, std::string_view session, int64_t footprint_tokens);
  // kvroute is draining: every held request goes now, and later ones do
  // not wait (so none outlives the workers' event loops).
  void ReleaseAll();

  router::ResidencyGate::Counters counters() const;
  size_t waiting() const;

 private:
  struct Waiter {
    explicit Waiter(net::any_io_executor ex) : timer(ex) {}
    net::steady_timer timer;
    bool go = false;  // guarded by ResidencyWait::mu_
  };
  void Wake(const std::vector<uint64_t>& ids) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const bool enabled_;
  mutable absl::Mutex mu_;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  router::ResidencyGate gate_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::shared_ptr<Waiter>> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvroute::proxy
