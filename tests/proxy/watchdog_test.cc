// Watchdog: a wait whose deadline has passed is cut (its socket's pending
// operation completes as cancelled and the wait reads expired); a wait
// unwatched in time is not; a later, earlier deadline re-arms the timer.
// Deadlines are either already past or an hour away, so nothing depends on
// timing; the io_context runs in the test thread.
#include "proxy/watchdog.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>

namespace kvroute::proxy {
namespace {

using Clock = Watchdog::Clock;

// A connected loopback pair on port 0; `a` waits to read, nothing is sent.
struct SocketPair {
  explicit SocketPair(net::io_context& ioc) : a(ioc), b(ioc) {
    tcp::acceptor acc(ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
    a.connect(acc.local_endpoint());
    acc.accept(b);
  }
  tcp::socket a, b;
};

// Starts a read on `s` watched until `deadline`; `result` gets the error,
// `expired` whether the watchdog cut it.
void StartWatchedRead(Watchdog& dog, tcp::socket& s, Clock::time_point deadline,
                      std::optional<beast::error_code>& result, bool& expired) {
  net::co_spawn(
      s.get_executor(),
      [&dog, &s, deadline, &result, &expired]() -> net::awaitable<void> {
        Watchdog::Scoped wait(dog, deadline, &s);
        char byte;
        auto [ec, n] = co_await s.async_read_some(net::buffer(&byte, 1), kUseTuple);
        expired = wait.expired();
        result = ec;
      },
      net::detached);
}

TEST(WatchdogTest, PastDeadlineCutsTheWait) {
  net::io_context ioc;
  SocketPair p(ioc);
  auto dog = std::make_shared<Watchdog>(ioc.get_executor());
  std::optional<beast::error_code> result;
  bool expired = false;
  StartWatchedRead(*dog, p.a, Clock::now() - std::chrono::seconds(1), result, expired);
  ioc.run_for(std::chrono::seconds(10));  // returns once the read is cut
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(*result, net::error::operation_aborted);
  EXPECT_TRUE(expired);
  EXPECT_EQ(dog->watched(), 0u);
  dog->Stop();
}

TEST(WatchdogTest, FarDeadlineLeavesTheWaitAlone) {
  net::io_context ioc;
  SocketPair p(ioc);
  auto dog = std::make_shared<Watchdog>(ioc.get_executor());
  std::optional<beast::error_code> result;
  bool expired = false;
  StartWatchedRead(*dog, p.a, Clock::now() + std::chrono::hours(1), result, expired);
  ioc.poll();
  EXPECT_FALSE(result.has_value());
  EXPECT_EQ(dog->watched(), 1u);
  net::write(p.b, net::buffer("x", 1));
  while (!result) ioc.run_one();
  EXPECT_FALSE(*result);
  EXPECT_FALSE(expired);
  EXPECT_EQ(dog->watched(), 0u);
  dog->Stop();
  ioc.run();  // the timer's handler completes as cancelled: nothing left
}

TEST(WatchdogTest, EarlierDeadlineAfterALaterOneStillFires) {
  net::io_context ioc;
  SocketPair p1(ioc), p2(ioc);
  auto dog = std::make_shared<Watchdog>(ioc.get_executor());
  std::optional<beast::error_code> r1, r2;
  bool e1 = false, e2 = false;
  // The timer is armed for an hour away first; the second wait's deadline
  // has passed, so the timer must be re-armed for it.
  StartWatchedRead(*dog, p1.a, Clock::now() + std::chrono::hours(1), r1, e1);
  ioc.poll();
  StartWatchedRead(*dog, p2.a, Clock::now() - std::chrono::seconds(1), r2, e2);
  while (!r2) ioc.run_one();
  EXPECT_EQ(*r2, net::error::operation_aborted);
  EXPECT_TRUE(e2);
  EXPECT_FALSE(r1.has_value());  // the far wait goes on
  EXPECT_EQ(dog->watched(), 1u);
  dog->Stop();
  p1.a.cancel();
  ioc.run();
  EXPECT_FALSE(e1);
}

}  // namespace
}  // namespace kvroute::proxy
