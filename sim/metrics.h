// Prometheus text-format helpers for the simulator's /metrics endpoint. Not thread-safe:
// each Histogram is owned by one Engine.
#pragma once

#include <string>
#include <vector>

namespace sim {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }
  // Appends `name_bucket{labels,le=...}`, `name_sum`, `name_count` lines.
  void Render(const std::string& name, const std::string& labels, std::string& out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative
  uint64_t count_ = 0;
  double sum_ = 0;
};

// vLLM's bucket sets (seconds).
std::vector<double> TtftBuckets();
std::vector<double> ItlBuckets();
std::vector<double> RequestLatencyBuckets();

// A formatted sample value (integers without exponent, others with 9 significant digits).
std::string PromValue(double v);

}  // namespace sim
