#include "bench/kvroute_bench/log_histogram.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "bench/kvroute_bench/stats.h"

namespace kvroute::bench {
namespace {

TEST(LogHistogramTest, EmptyAndIgnoredValues) {
  LogHistogram h;
  EXPECT_TRUE(std::isnan(h.Percentile(99)));
  EXPECT_TRUE(std::isnan(h.max()));
  h.Add(-1);
  h.Add(NAN);
  h.Add(INFINITY);
  EXPECT_EQ(h.count(), 0);
  h.Add(0);  // a zero gap (two chunks in one read) counts in the first bucket
  EXPECT_EQ(h.count(), 1);
  EXPECT_EQ(h.bucket_count(0), 1);
  EXPECT_DOUBLE_EQ(h.Percentile(50), 0);  // clamped to [min, max]
}

TEST(LogHistogramTest, BucketsAreLogSpaced) {
  EXPECT_EQ(LogHistogram::BucketOf(1e-6), 0);
  EXPECT_EQ(LogHistogram::BucketOf(1e-7), 0);  // below the range: the first bucket
  EXPECT_EQ(LogHistogram::BucketOf(1.0), 6 * LogHistogram::kBucketsPerDecade);
  EXPECT_EQ(LogHistogram::BucketOf(1e9), LogHistogram::kBuckets - 1);
  EXPECT_NEAR(LogHistogram::BucketLowerBound(600), 1.0, 1e-12);
  EXPECT_NEAR(LogHistogram::BucketLowerBound(601) / LogHistogram::BucketLowerBound(600),
              std::pow(10.0, 0.01), 1e-12);
}

TEST(LogHistogramTest, PercentilesWithinTheBucketResolution) {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> gap(std::log(0.02), 1.0);
  std::vector<double> values;
  LogHistogram h;
  for (int i = 0; i < 20000; ++i) {
    const double v = gap(rng);
    values.push_back(v);
    h.Add(v);
  }
  EXPECT_EQ(h.count(), 20000);
  for (double p : {1.0, 50.0, 90.0, 99.0, 99.9}) {
    const double exact = Percentile(values, p);
    EXPECT_NEAR(h.Percentile(p) / exact, 1.0, 0.013) << "p" << p;
  }
  EXPECT_DOUBLE_EQ(h.Percentile(100), h.max());
  // Merging two halves equals adding everything to one.
  LogHistogram a, b;
  for (size_t i = 0; i < values.size(); ++i) (i % 2 ? a : b).Add(values[i]);
  a.Merge(b);
  EXPECT_EQ(a.count(), h.count());
  EXPECT_DOUBLE_EQ(a.Percentile(99), h.Percentile(99));
  EXPECT_DOUBLE_EQ(a.max(), h.max());
  EXPECT_DOUBLE_EQ(a.min(), h.min());
}

}  // namespace
}  // namespace kvroute::bench
