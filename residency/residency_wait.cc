#include "residency/residency_wait.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace kvroute::residency {

namespace net = boost::asio;

ResidencyWait::ResidencyWait(router::Router& router, const WaitClock& clock)
    : router_(router), clock_(clock) {
  router_.SetResidencyListener([this](absl::Span<const uint64_t> ids) { Wake(ids); });
}

ResidencyWait::~ResidencyWait() { router_.SetResidencyListener(nullptr); }

void ResidencyWait::WakeLocked(uint64_t id) {
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return;
  std::shared_ptr<Waiter> w = std::move(it->second);
  waiters_.erase(it);
  w->go = true;
  net::post(w->timer.get_executor(), [w] { w->timer.cancel(); });
}

void ResidencyWait::Wake(absl::Span<const uint64_t> ids) {
  absl::MutexLock lock(&mu_);
  for (uint64_t id : ids) WakeLocked(id);
}

void ResidencyWait::Tick() { router_.TickResidency(clock_.Now()); }

net::awaitable<bool> ResidencyWait::Sleep(Waiter& w) {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (w.go) co_return true;
    }
    // The model's next timed event; its own max_wait bounds it. A wake
    // posted meanwhile runs on this executor only once the wait is armed.
    const std::optional<absl::Time> next = router_.NextResidencyEvent();
    w.timer.expires_at(clock_.TimerDeadline(next ? *next + absl::Milliseconds(1)
                                                 : clock_.Now() + absl::Milliseconds(10)));
    co_await w.timer.async_wait(net::as_tuple(net::use_awaitable));
    {
      absl::MutexLock lock(&mu_);
      if (w.go) co_return true;
    }
    const net::cancellation_state cs = co_await net::this_coro::cancellation_state;
    if (cs.cancelled() != net::cancellation_type::none) co_return false;
    Tick();
  }
}

net::awaitable<ResidencyWait::Admitted> ResidencyWait::Admit(const router::RouteTicket& ticket) {
  const uint64_t id = ticket.residency_wait;
  if (id == 0) co_return Admitted{router_.Dispatch(ticket, clock_.Now())};
  const absl::Time start = clock_.Now();
  auto w = std::make_shared<Waiter>(co_await net::this_coro::executor);
  bool released = false;
  {
    absl::MutexLock lock(&mu_);
    released = released_;
    if (!released) waiters_[id] = w;
  }
  if (released) {
    router_.Unhold(ticket, start);
    co_return Admitted{router_.Dispatch(ticket, start)};
  }
  // Admitted before it was parked here (a wake named no waiter then).
  if (!router_.Held(ticket)) {
    absl::MutexLock lock(&mu_);
    WakeLocked(id);
  }
  if (!co_await Sleep(*w)) {
    {
      absl::MutexLock lock(&mu_);
      waiters_.erase(id);
    }
    // A wake that raced the cancellation left it resident: OnComplete leaves.
    router_.Unhold(ticket, clock_.Now());
    co_return Admitted{{ticket.decision, -1}, absl::ToDoubleSeconds(clock_.Now() - start), true};
  }
  const absl::Time now = clock_.Now();
  co_return Admitted{router_.Dispatch(ticket, now), absl::ToDoubleSeconds(now - start)};
}

void ResidencyWait::ReleaseAll() {
  absl::MutexLock lock(&mu_);
  released_ = true;
  std::vector<uint64_t> ids;
  ids.reserve(waiters_.size());
  for (const auto& [id, w] : waiters_) ids.push_back(id);
  for (uint64_t id : ids) WakeLocked(id);
}

}  // namespace kvroute::residency
