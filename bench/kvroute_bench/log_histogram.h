// A bounded histogram of positive durations with log-spaced buckets, for percentiles over
// more samples than a run should keep (every inter-token gap of every stream).
//
// Buckets split each decade from 1 µs to 10^4 s into kBucketsPerDecade equal steps of
// log10, so a percentile read from the histogram (the bucket's geometric midpoint) is within
// ±1.2 % of the exact one; values outside the range land in the first or last bucket, and
// the exact minimum and maximum are kept beside the buckets. Memory is fixed (kBuckets
// counters) whatever the number of samples; Merge adds two histograms bucket by bucket.
//
// Usage:
//   LogHistogram h;
//   h.Add(0.012);
//   double p99 = h.Percentile(99);  // NaN when empty
//
// Thread-safety: a plain value; not safe for concurrent mutation.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace kvroute::bench {

class LogHistogram {
 public:
  static constexpr int kBucketsPerDecade = 100;
  static constexpr int kMinExponent = -6;  // 1 µs
  static constexpr int kMaxExponent = 4;   // 10^4 s
  static constexpr int kBuckets = (kMaxExponent - kMinExponent) * kBucketsPerDecade;

  // Non-finite and negative values are ignored; 0 counts in the first bucket.
  void Add(double value);
  void Merge(const LogHistogram& other);

  int64_t count() const { return count_; }
  double sum() const { return sum_; }
  double min() const;  // NaN when empty
  double max() const;  // NaN when empty
  // Nearest-rank percentile (p in [0, 100]): the geometric midpoint of the bucket holding the
  // ceil(p / 100 x count)-th smallest value, clamped to [min, max]; the exact maximum when
  // that rank is the last. NaN when empty.
  double Percentile(double p) const;

  // The bucket a value falls in, and a bucket's lower bound (for serialising and tests).
  static int BucketOf(double value);
  static double BucketLowerBound(int bucket);
  int64_t bucket_count(int bucket) const { return counts_[static_cast<size_t>(bucket)]; }

 private:
  std::array<int64_t, kBuckets> counts_{};
  int64_t count_ = 0;
  double sum_ = 0;
  double min_ = 0, max_ = 0;
};

}  // namespace kvroute::bench
