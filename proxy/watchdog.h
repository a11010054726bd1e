// Watchdog: deadlines for the waits of one client connection (its idle
// keep-alive wait, the upstream waits of the request it is serving), kept by
// one lazily armed timer instead of a timer armed and cancelled around every
// wait. A wait's deadline passing cancels the operations on its socket and
// marks the wait expired, which its owner reads as a timeout.
//
//   auto dog = std::make_shared<Watchdog>(executor);
//   {
//     Watchdog::Scoped wait(*dog, Clock::now() + timeout, &socket);
//     auto [ec, n] = co_await socket.async_read_some(buf, kUseTuple);
//     if (wait.expired()) ec = beast::error::timeout;
//   }
//   dog->Stop();  // the owner is done: releases the timer's handler
//
// Why: Beast's tcp_stream arms its timer for every operation and cancels it
// when the operation completes, and every cancellation is one more trip
// through the scheduler (an epoll_wait) per operation. Here the timer is armed
// for the earliest deadline and, when it fires early (the wait it was armed
// for is over), re-armed for the earliest one still watched: deadlines of
// minutes cost one timer event per connection per minutes, not per request.
//
// Thread-safety: one executor (the connection's worker thread).
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "proxy/http_common.h"

namespace kvroute::proxy {

class Watchdog : public std::enable_shared_from_this<Watchdog> {
 public:
  using Clock = std::chrono::steady_clock;

  struct Wait {
    Clock::time_point deadline;
    tcp::socket* socket;
    bool expired = false;
  };

  explicit Watchdog(const net::any_io_executor& ex) : timer_(ex) {}

  // Watches `w` (which outlives the watch) until Unwatch.
  void Watch(Wait* w) {
    waits_.push_back(w);
    ArmFor(w->deadline);
  }
  void Unwatch(Wait* w) {
    for (size_t i = 0; i < waits_.size(); ++i) {
      if (waits_[i] == w) {
        waits_[i] = waits_.back();
        waits_.pop_back();
        return;
      }
    }
  }
  // Cancels the timer for good (the connection is closing).
  void Stop() {
    stopped_ = true;
    waits_.clear();
    timer_.cancel();
  }

  size_t watched() const { return waits_.size(); }

  // Watches one wait for the scope's lifetime.
  class Scoped {
   public:
    Scoped(Watchdog& dog, Clock::time_point deadline, tcp::socket* socket)
        : dog_(dog), wait_{deadline, socket} {
      dog_.Watch(&wait_);
    }
    Scoped(const Scoped&) = delete;
    Scoped& operator=(const Scoped&) = delete;
    ~Scoped() { dog_.Unwatch(&wait_); }
    bool expired() const { return wait_.expired; }

   private:
    Watchdog& dog_;
    Wait wait_;
  };

 private:
  // Makes sure the timer fires no later than `t`.
  void ArmFor(Clock::time_point t) {
    if (stopped_ || (armed_ && expiry_ <= t)) return;
    armed_ = true;
    expiry_ = t;
    const uint64_t generation = ++generation_;
    timer_.expires_at(t);  // a pending wait completes as cancelled: ignored
    timer_.async_wait([self = shared_from_this(), generation](beast::error_code ec) {
      self->OnTimer(ec, generation);
    });
  }

  void OnTimer(beast::error_code ec, uint64_t generation) {
    if (generation != generation_) return;  // superseded by an earlier deadline
    armed_ = false;
    if (ec || stopped_) return;
    const Clock::time_point now = Clock::now();
    Clock::time_point next = Clock::time_point::max();
    for (Wait* w : waits_) {
      if (w->expired) continue;
      if (w->deadline <= now) {
        w->expired = true;
        beast::error_code ignored;
        w->socket->cancel(ignored);
      } else {
        next = std::min(next, w->deadline);
      }
    }
    if (next != Clock::time_point::max()) ArmFor(next);
  }

  net::steady_timer timer_;
  std::vector<Wait*> waits_;
  bool armed_ = false;
  bool stopped_ = false;
  Clock::time_point expiry_{};
  uint64_t generation_ = 0;
};

}  // namespace kvroute::proxy
