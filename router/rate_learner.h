// RateLearner: the placement cost model's time factors, learned online from
// what the fleet really does, so the model tracks the fleet rather than the
// profile it was configured with.
//
//   RateLearner learner(options.rate_learning);
//   learner.Resize(num_backends);
//   learner.ObservePrefill(b, realised_ttft_s, modelled_ttft_s);
//   learner.ObserveTransfer(a, b, realised_transfer_s, modelled_transfer_s);
//   learner.ObserveReload(b, realised_load_s, modelled_load_s);
//   learner.ObservePoolReload(b, realised_load_s, modelled_load_s);
//   snapshot.backends[b].prefill_time_factor = learner.prefill_factor(b);
//   snapshot.transfer_time_factors = learner.transfer_table();
//   snapshot.backends[b].host_reload_time_factor = learner.reload_factor(b);
//   snapshot.backends[b].pool_reload_time_factor = learner.pool_reload_factor(b);
//
// Factors are absolute: realised seconds over the seconds the profile's rates
// predict (a "modelled" figure never includes a learned factor). Each factor
// starts at 1 and moves by an exponentially weighted average in log space
// (weight `alpha` per sample), each sample's ratio clamped to
// [1 / max_sample_ratio, max_sample_ratio] so one outlier cannot wreck it.
//   - prefill factor f_i, per instance: every time term on the instance runs
//     at its prefill rate (queue, admission, its own prefill), so a
//     co-located request's whole TTFT is the sample, against the prediction
//     with its own prefill priced at the cached count the engine reported
//     (the router samples when the response ends), so the factor learns
//     the instance's speed and not the cache estimate's error;
//   - transfer factor g_ab, per (prefill, decode) pair: an offload's time from
//     the prefill's end to the first token on b. A pair without samples takes
//     the fleet-wide transfer factor, learned from every pair's samples;
//   - reload factor h_i, per instance: its host tier's loads (host -> GPU),
//     the seconds the engine measured for the bytes it loaded against those
//     bytes at the configured host link bandwidth. Concurrent loads share
//     the link, so h_i is the per-load slowdown a reload meets there;
//   - pool reload factor p_i, per instance: the same for its loads from the
//     fleet-shared pool over its NIC, against the configured pool bandwidth.
// Memory: n factors and n x n pairs for n backend slots (at most
// kMaxBackends); the slots only grow.
//
// Thread-safety: none; RouterImpl owns one under its mutex.
#pragma once

#include <cstdint>
#include <vector>

#include "router/options.h"

namespace kvroute::router {

class RateLearner {
 public:
  explicit RateLearner(const Options::RateLearning& params);

  // Grows to `backends` slots (new ones start at the fleet's priors).
  void Resize(int backends);
  int size() const { return n_; }

  // Samples with a non-positive modelled time, a negative realised time or
  // a backend out of range are ignored.
  void ObservePrefill(int backend, double realised_s, double modelled_s);
  void ObserveTransfer(int prefill, int decode, double realised_s, double modelled_s);
  void ObserveReload(int backend, double realised_s, double modelled_s);
  void ObservePoolReload(int backend, double realised_s, double modelled_s);

  double prefill_factor(int backend) const;
  int64_t prefill_samples(int backend) const;
  double transfer_factor(int prefill, int decode) const;
  int64_t transfer_samples(int prefill, int decode) const;
  double fleet_transfer_factor() const;
  double reload_factor(int backend) const;
  int64_t reload_samples(int backend) const;
  double pool_reload_factor(int backend) const;
  int64_t pool_reload_samples(int backend) const;
  // Every pair's factor, row-major [prefill x size() + decode]; empty until
  // the first transfer sample (every pair is then 1), as
  // FleetSnapshot::transfer_time_factors takes it.
  const std::vector<double>& transfer_table() const { return table_; }
  // Changes whenever transfer_table() does.
  uint64_t transfer_version() const { return version_; }

 private:
  struct Factor {
    double log_factor = 0;
    int64_t samples = 0;
  };
  // The clamped log of one sample's ratio.
  double LogSample(double realised_s, double modelled_s) const;
  void Update(Factor& f, double log_sample) const;
  // One sample for a per-backend factor, and such a factor and its samples
  // (1 and 0 out of range).
  void ObservePerBackend(std::vector<Factor>& factors, int backend, double realised_s,
                         double modelled_s);
  double FactorOf(const std::vector<Factor>& factors, int backend) const;
  int64_t SamplesOf(const std::vector<Factor>& factors, int backend) const;
  void RebuildTable();

  double alpha_;
  double max_log_ratio_;
  int n_ = 0;
  std::vector<Factor> prefill_;  // per backend
  std::vector<Factor> reload_;   // per backend
  std::vector<Factor> pool_reload_;  // per backend
  std::vector<Factor> pairs_;    // n_ x n_, row-major
  Factor fleet_transfer_;
  std::vector<double> table_;
  uint64_t version_ = 0;
};

}  // namespace kvroute::router
