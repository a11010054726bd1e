#include "proxy/admission.h"

#include <algorithm>

namespace kvroute::proxy {

Admission::Admission(size_t max_inflight, size_t max_queued)
    : max_inflight_(std::max<size_t>(1, max_inflight)), max_queued_(max_queued) {}

bool Admission::TakeFreeSlot() {
  if (inflight_ >= max_inflight_ || !waiters_.empty()) return false;
  ++inflight_;
  return true;
}

bool Admission::TryAcquire() {
  absl::MutexLock lock(&mu_);
  return TakeFreeSlot();
}

net::awaitable<bool> Admission::Acquire(absl::Duration max_wait) {
  std::shared_ptr<Waiter> w;
  {
    absl::MutexLock lock(&mu_);
    if (TakeFreeSlot()) co_return true;
    if (waiters_.size() >= max_queued_ || max_wait <= absl::ZeroDuration()) co_return false;
    w = std::make_shared<Waiter>(co_await net::this_coro::executor);
    w->timer.expires_after(ToChrono(max_wait));
    waiters_.push_back(w);
  }
  co_await w->timer.async_wait(kUseTuple);
  absl::MutexLock lock(&mu_);
  if (w->granted) co_return true;  // Release handed us its slot
  // Deadline: leave the queue.
  auto it = std::find(waiters_.begin(), waiters_.end(), w);
  if (it != waiters_.end()) waiters_.erase(it);
  co_return false;
}

void Admission::Release() {
  std::shared_ptr<Waiter> next;
  {
    absl::MutexLock lock(&mu_);
    if (waiters_.empty()) {
      if (inflight_ > 0) --inflight_;
      return;
    }
    next = std::move(waiters_.front());
    waiters_.pop_front();
    next->granted = true;  // the slot passes on; inflight_ is unchanged
  }
  net::post(next->timer.get_executor(), [next] { next->timer.cancel(); });
}

size_t Admission::inflight() const {
  absl::MutexLock lock(&mu_);
  return inflight_;
}

size_t Admission::queued() const {
  absl::MutexLock lock(&mu_);
  return waiters_.size();
}

}  // namespace kvroute::proxy
