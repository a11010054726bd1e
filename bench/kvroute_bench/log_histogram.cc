#include "bench/kvroute_bench/log_histogram.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvroute::bench {

int LogHistogram::BucketOf(double value) {
  if (!(value > 0)) return 0;
  const double position = (std::log10(value) - kMinExponent) * kBucketsPerDecade;
  if (position < 0) return 0;
  if (position >= kBuckets) return kBuckets - 1;
  return static_cast<int>(position);
}

double LogHistogram::BucketLowerBound(int bucket) {
  return std::pow(10.0, kMinExponent + static_cast<double>(bucket) / kBucketsPerDecade);
}

void LogHistogram::Add(double value) {
  if (!std::isfinite(value) || value < 0) return;
  ++counts_[static_cast<size_t>(BucketOf(value))];
  min_ = count_ == 0 ? value : std::min(min_, value);
  max_ = count_ == 0 ? value : std::max(max_, value);
  ++count_;
  sum_ += value;
}

void LogHistogram::Merge(const LogHistogram& other) {
  if (other.count_ == 0) return;
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
  min_ = count_ == 0 ? other.min_ : std::min(min_, other.min_);
  max_ = count_ == 0 ? other.max_ : std::max(max_, other.max_);
  count_ += other.count_;
  sum_ += other.sum_;
}

double LogHistogram::min() const {
  return count_ > 0 ? min_ : std::numeric_limits<double>::quiet_NaN();
}

double LogHistogram::max() const {
  return count_ > 0 ? max_ : std::numeric_limits<double>::quiet_NaN();
}

double LogHistogram::Percentile(double p) const {
  if (count_ == 0) return std::numeric_limits<double>::quiet_NaN();
  const double rank = std::ceil(std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(count_));
  const int64_t target = std::max<int64_t>(1, static_cast<int64_t>(rank));
  if (target >= count_) return max_;
  int64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += counts_[static_cast<size_t>(b)];
    if (seen >= target) {
      const double mid = std::sqrt(BucketLowerBound(b) * BucketLowerBound(b + 1));
      return std::clamp(mid, min_, max_);
    }
  }
  return max_;
}

}  // namespace kvroute::bench
