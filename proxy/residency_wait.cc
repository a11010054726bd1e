#include "proxy/residency_wait.h"

#include <algorithm>
#include <string>

namespace kvroute::proxy {

ResidencyWait::ResidencyWait(const router::ResidencyGate::Options& options)
    : enabled_(options.enabled), gate_(options) {}

void ResidencyWait::Wake(const std::vector<uint64_t>& ids) {
  for (uint64_t id : ids) {
    auto it = waiters_.find(id);
    if (it == waiters_.end()) continue;
    std::shared_ptr<Waiter> w = std::move(it->second);
    waiters_.erase(it);
    w->go = true;
    net::post(w->timer.get_executor(), [w] { w->timer.cancel(); });
  }
}

net::awaitable<ResidencyWait::Admitted> ResidencyWait::Enter(
    int backend, std::string_view session, const router::ResidencyGate::Turn& turn) {
  const absl::Time start = absl::Now();
  const net::any_io_executor executor = co_await net::this_coro::executor;
  std::shared_ptr<Waiter> w;
  uint64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    std::vector<uint64_t> woken;
    id = gate_.Enter(backend, session, turn, start, &woken);
    // A movable turn may have been taken by another instance's room at once.
    const bool gone_at_once = id != 0 && std::find(woken.begin(), woken.end(), id) != woken.end();
    Wake(woken);
    if (id == 0) co_return Admitted{0.0, backend};
    if (gone_at_once) co_return Admitted{0.0, gate_.TakeMove(id).value_or(backend)};
    if (released_) {
      gate_.Abandon(id, start, &woken);
      Wake(woken);
      co_return Admitted{0.0, backend};
    }
    w = std::make_shared<Waiter>(executor);
    waiters_[id] = w;
  }
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (w->go) break;
      // The gate's next timed event; its own max_wait bounds it.
      const std::optional<absl::Time> next = gate_.NextEvent();
      const absl::Duration until =
          next ? std::max(absl::ZeroDuration(), *next - absl::Now()) : absl::Milliseconds(10);
      w->timer.expires_after(ToChrono(until + absl::Milliseconds(1)));
    }
    co_await w->timer.async_wait(kUseTuple);
    absl::MutexLock lock(&mu_);
    if (w->go) break;
    std::vector<uint64_t> woken;
    gate_.Tick(absl::Now(), &woken);
    Wake(woken);
    if (w->go) break;
  }
  int admitted_on = backend;
  {
    absl::MutexLock lock(&mu_);
    admitted_on = gate_.TakeMove(id).value_or(backend);
  }
  co_return Admitted{absl::ToDoubleSeconds(absl::Now() - start), admitted_on};
}

void ResidencyWait::Leave(int backend, std::string_view session, int64_t footprint_tokens) {
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> woken;
  gate_.Leave(backend, session, footprint_tokens, absl::Now(), &woken);
  Wake(woken);
}

void ResidencyWait::ReleaseAll() {
  absl::MutexLock lock(&mu_);
  released_ = true;
  std::vector<uint64_t> ids;
  ids.reserve(waiters_.size());
  for (const auto& [id, w] : waiters_) ids.push_back(id);
  std::vector<uint64_t> woken;
  for (uint64_t id : ids) gate_.Abandon(id, absl::Now(), &woken);
  Wake(ids);
}

router::ResidencyGate::Counters ResidencyWait::counters() const {
  absl::MutexLock lock(&mu_);
  return gate_.counters();
}

size_t ResidencyWait::waiting() const {
  absl::MutexLock lock(&mu_);
  return gate_.waiting();
}

}  // namespace kvroute::proxy
