// proxy::Admission: bounded admission of completion requests. At most
// `max_inflight` are served at once; beyond that up to `max_queued` wait, in
// arrival order, for a slot until their deadline; the rest are refused at
// once. The caller answers a refusal with 429 and Retry-After.
//
//   Admission admission(1024, 256);
//   if (!admission.TryAcquire() && !co_await admission.Acquire(absl::Seconds(1))) -> 429
//   ... serve ...
//   admission.Release();
//
// Thread-safety: Acquire and Release may run on any worker thread. A slot
// freed by Release goes straight to the oldest waiter (so a newcomer cannot
// overtake the queue); the waiter is woken on its own executor, since Asio
// timers are not thread-safe.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proxy/http_common.h"

namespace kvroute::proxy {

class Admission {
 public:
  Admission(size_t max_inflight, size_t max_queued);

  // True once the request holds a slot (call Release when it is done);
  // false when the queue is full or `max_wait` passed first.
  net::awaitable<bool> Acquire(absl::Duration max_wait);
  // Acquire's fast path without a coroutine: true when a slot was free and
  // nobody waits (call Release when done); false: call Acquire.
  bool TryAcquire();
  void Release();

  size_t inflight() const;
  size_t queued() const;

 private:
  struct Waiter {
    explicit Waiter(net::any_io_executor ex) : timer(ex) {}
    net::steady_timer timer;
    bool granted = false;  // guarded by Admission::mu_
  };

  // Takes a slot when one is free and nobody waits for one.
  bool TakeFreeSlot() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_inflight_;
  const size_t max_queued_;
  mutable absl::Mutex mu_;
  size_t inflight_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<std::shared_ptr<Waiter>> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvroute::proxy
