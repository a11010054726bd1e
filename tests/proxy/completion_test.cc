// The random draws of the completion path come from the worker's injected
// source: seeded, they repeat; their shapes and ranges hold for any seed.
#include "proxy/completion.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>

#include "absl/random/random.h"

namespace kvroute::proxy {
namespace {

TEST(CompletionTest, RequestIdsRepeatForASeedAndHaveTheirShape) {
  std::mt19937_64 a(7), b(7);
  const std::string first = NewRequestId(a);
  EXPECT_EQ(first, NewRequestId(b));
  ASSERT_EQ(first.size(), 4u + 32u);
  EXPECT_EQ(first.substr(0, 4), "kvr-");
  EXPECT_EQ(first.find_first_not_of("0123456789abcdef", 4), std::string::npos);
  std::set<std::string> seen{first};
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(seen.insert(NewRequestId(a)).second);
}

TEST(CompletionTest, RetryBackoffIsFullJitterUnderADoublingCap) {
  UpstreamOptions o;
  o.retry_backoff = absl::Milliseconds(10);
  o.retry_backoff_max = absl::Milliseconds(35);
  std::mt19937_64 gen(1);
  for (int attempt = 1; attempt <= 4; ++attempt) {
    const absl::Duration cap =
        std::min(absl::Milliseconds(10) * (1 << (attempt - 1)), absl::Milliseconds(35));
    absl::Duration most = absl::ZeroDuration();
    for (int i = 0; i < 200; ++i) {
      const absl::Duration d = RetryBackoff(o, attempt, gen);
      EXPECT_GE(d, absl::ZeroDuration());
      EXPECT_LE(d, cap);
      most = std::max(most, d);
    }
    EXPECT_GT(most, cap / 2);  // spread over the range, not pinned at 0
  }
  std::mt19937_64 x(3), y(3);
  EXPECT_EQ(RetryBackoff(o, 2, x), RetryBackoff(o, 2, y));
  o.retry_backoff = absl::ZeroDuration();
  EXPECT_EQ(RetryBackoff(o, 3, gen), absl::ZeroDuration());
}

}  // namespace
}  // namespace kvroute::proxy
