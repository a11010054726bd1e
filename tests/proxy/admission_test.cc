// Admission: the in-flight bound, the FIFO queue handing slots over, the
// queue bound and the deadline. Runs on one io_context in the test thread;
// the deadline case uses a zero-length wait, so nothing depends on timing.
#include "proxy/admission.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace kvroute::proxy {
namespace {

// Starts Acquire as a coroutine; `result` is set when it finishes.
void StartAcquire(net::io_context& ioc, Admission& a, absl::Duration wait,
                  std::optional<bool>& result) {
  net::co_spawn(
      ioc, [&a, wait, &result]() -> net::awaitable<void> { result = co_await a.Acquire(wait); },
      net::detached);
}

TEST(AdmissionTest, AdmitsUpToTheBoundThenQueuesInOrder) {
  net::io_context ioc;
  Admission a(2, 2);
  std::optional<bool> r1, r2, r3, r4, r5;
  StartAcquire(ioc, a, absl::Hours(1), r1);
  StartAcquire(ioc, a, absl::Hours(1), r2);
  StartAcquire(ioc, a, absl::Hours(1), r3);
  StartAcquire(ioc, a, absl::Hours(1), r4);
  StartAcquire(ioc, a, absl::Hours(1), r5);
  ioc.poll();
  EXPECT_EQ(r1, true);
  EXPECT_EQ(r2, true);
  EXPECT_FALSE(r3.has_value());  // queued
  EXPECT_FALSE(r4.has_value());
  EXPECT_EQ(r5, false);  // queue full: refused at once
  EXPECT_EQ(a.inflight(), 2u);
  EXPECT_EQ(a.queued(), 2u);

  a.Release();  // the slot goes to the oldest waiter
  ioc.poll();
  EXPECT_EQ(r3, true);
  EXPECT_FALSE(r4.has_value());
  EXPECT_EQ(a.inflight(), 2u);
  a.Release();
  ioc.poll();
  EXPECT_EQ(r4, true);
  a.Release();
  a.Release();
  a.Release();  // one more than held: stays at zero
  EXPECT_EQ(a.inflight(), 0u);
  EXPECT_EQ(a.queued(), 0u);
}

TEST(AdmissionTest, NewcomersDoNotOvertakeTheQueue) {
  net::io_context ioc;
  Admission a(1, 4);
  std::optional<bool> first, queued, late;
  StartAcquire(ioc, a, absl::Hours(1), first);
  StartAcquire(ioc, a, absl::Hours(1), queued);
  ioc.poll();
  a.Release();  // handed to `queued` before it even resumes
  StartAcquire(ioc, a, absl::Hours(1), late);
  ioc.poll();
  EXPECT_EQ(queued, true);
  EXPECT_FALSE(late.has_value());
  a.Release();
  ioc.poll();
  EXPECT_EQ(late, true);
}

TEST(AdmissionTest, ZeroWaitOrZeroQueueRefusesWhenFull) {
  net::io_context ioc;
  Admission a(1, 0);
  std::optional<bool> r1, r2;
  StartAcquire(ioc, a, absl::Hours(1), r1);
  StartAcquire(ioc, a, absl::Hours(1), r2);
  ioc.poll();
  EXPECT_EQ(r1, true);
  EXPECT_EQ(r2, false);

  ioc.restart();  // poll() ran out of work and stopped the context
  Admission b(1, 8);
  std::optional<bool> s1, s2;
  StartAcquire(ioc, b, absl::Hours(1), s1);
  StartAcquire(ioc, b, absl::ZeroDuration(), s2);
  ioc.poll();
  EXPECT_EQ(s2, false);
  EXPECT_EQ(b.queued(), 0u);
}

TEST(AdmissionTest, DeadlineLeavesTheQueue) {
  net::io_context ioc;
  Admission a(1, 8);
  std::optional<bool> r1, r2, r3;
  StartAcquire(ioc, a, absl::Hours(1), r1);
  StartAcquire(ioc, a, absl::Nanoseconds(1), r2);
  StartAcquire(ioc, a, absl::Hours(1), r3);
  while (!r2.has_value()) ioc.run_one();  // until r2's deadline fires
  EXPECT_EQ(r1, true);
  EXPECT_EQ(r2, false);
  EXPECT_EQ(a.queued(), 1u);
  a.Release();  // goes to r3, not to the expired r2
  ioc.poll();
  EXPECT_EQ(r3, true);
  EXPECT_EQ(a.inflight(), 1u);
}

TEST(AdmissionTest, TryAcquireTakesOnlyAFreeSlotNobodyWaitsFor) {
  net::io_context ioc;
  Admission a(2, 4);
  EXPECT_TRUE(a.TryAcquire());
  EXPECT_TRUE(a.TryAcquire());
  EXPECT_FALSE(a.TryAcquire());  // full: the caller goes on to Acquire
  EXPECT_EQ(a.inflight(), 2u);
  EXPECT_EQ(a.queued(), 0u);  // a refused TryAcquire does not queue

  std::optional<bool> waiting;
  StartAcquire(ioc, a, absl::Hours(1), waiting);
  ioc.poll();
  EXPECT_FALSE(waiting.has_value());
  a.Release();  // the slot goes to the waiter ...
  EXPECT_FALSE(a.TryAcquire());  // ... not to a newcomer
  ioc.poll();
  EXPECT_EQ(waiting, true);
  a.Release();
  EXPECT_TRUE(a.TryAcquire());  // free again, nobody waiting
  EXPECT_EQ(a.inflight(), 2u);
}

}  // namespace
}  // namespace kvroute::proxy
