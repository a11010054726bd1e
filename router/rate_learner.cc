#include "router/rate_learner.h"

#include <algorithm>
#include <cmath>

namespace kvroute::router {

RateLearner::RateLearner(const Options::RateLearning& params)
    : alpha_(std::clamp(params.alpha, 0.0, 1.0)),
      max_log_ratio_(std::log(std::max(1.0, params.max_sample_ratio))) {}

void RateLearner::Resize(int backends) {
  if (backends <= n_) return;
  const int old_n = n_;
  std::vector<Factor> pairs(static_cast<size_t>(backends) * static_cast<size_t>(backends));
  for (int a = 0; a < old_n; ++a) {
    for (int b = 0; b < old_n; ++b) {
      pairs[static_cast<size_t>(a) * backends + b] = pairs_[static_cast<size_t>(a) * old_n + b];
    }
  }
  pairs_ = std::move(pairs);
  prefill_.resize(static_cast<size_t>(backends));
  reload_.resize(static_cast<size_t>(backends));
  pool_reload_.resize(static_cast<size_t>(backends));
  n_ = backends;
  if (!table_.empty()) RebuildTable();
}

double RateLearner::LogSample(double realised_s, double modelled_s) const {
  // A realised time of 0 (a clock step) is as far below as the clamp allows.
  const double ratio = std::max(realised_s, 0.0) / modelled_s;
  if (!(ratio > 0)) return -max_log_ratio_;
  return std::clamp(std::log(ratio), -max_log_ratio_, max_log_ratio_);
}

void RateLearner::Update(Factor& f, double log_sample) const {
  f.log_factor += alpha_ * (log_sample - f.log_factor);
  f.samples += 1;
}

void RateLearner::ObservePrefill(int backend, double realised_s, double modelled_s) {
  ObservePerBackend(prefill_, backend, realised_s, modelled_s);
}

void RateLearner::ObserveTransfer(int prefill, int decode, double realised_s, double modelled_s) {
  if (prefill < 0 || prefill >= n_ || decode < 0 || decode >= n_ || !(modelled_s > 0) ||
      !(realised_s >= 0)) {
    return;
  }
  const double sample = LogSample(realised_s, modelled_s);
  Factor& pair = pairs_[static_cast<size_t>(prefill) * n_ + decode];
  // A pair's first sample moves it from where the fleet stands, not from 1.
  if (pair.samples == 0) pair.log_factor = fleet_transfer_.log_factor;
  Update(pair, sample);
  Update(fleet_transfer_, sample);
  RebuildTable();
}

void RateLearner::ObserveReload(int backend, double realised_s, double modelled_s) {
  ObservePerBackend(reload_, backend, realised_s, modelled_s);
}

void RateLearner::ObservePoolReload(int backend, double realised_s, double modelled_s) {
  ObservePerBackend(pool_reload_, backend, realised_s, modelled_s);
}

void RateLearner::ObservePerBackend(std::vector<Factor>& factors, int backend, double realised_s,
                                    double modelled_s) {
  if (backend < 0 || backend >= n_ || !(modelled_s > 0) || !(realised_s >= 0)) return;
  Update(factors[backend], LogSample(realised_s, modelled_s));
}

double RateLearner::FactorOf(const std::vector<Factor>& factors, int backend) const {
  if (backend < 0 || backend >= n_) return 1;
  return std::exp(factors[backend].log_factor);
}

int64_t RateLearner::SamplesOf(const std::vector<Factor>& factors, int backend) const {
  if (backend < 0 || backend >= n_) return 0;
  return factors[backend].samples;
}

double RateLearner::prefill_factor(int backend) const { return FactorOf(prefill_, backend); }

int64_t RateLearner::prefill_samples(int backend) const { return SamplesOf(prefill_, backend); }

double RateLearner::transfer_factor(int prefill, int decode) const {
  if (prefill < 0 || prefill >= n_ || decode < 0 || decode >= n_) return fleet_transfer_factor();
  const Factor& pair = pairs_[static_cast<size_t>(prefill) * n_ + decode];
  return pair.samples > 0 ? std::exp(pair.log_factor) : fleet_transfer_factor();
}

int64_t RateLearner::transfer_samples(int prefill, int decode) const {
  if (prefill < 0 || prefill >= n_ || decode < 0 || decode >= n_) return 0;
  return pairs_[static_cast<size_t>(prefill) * n_ + decode].samples;
}

double RateLearner::reload_factor(int backend) const { return FactorOf(reload_, backend); }

int64_t RateLearner::reload_samples(int backend) const { return SamplesOf(reload_, backend); }

double RateLearner::pool_reload_factor(int backend) const {
  return FactorOf(pool_reload_, backend);
}

int64_t RateLearner::pool_reload_samples(int backend) const {
  return SamplesOf(pool_reload_, backend);
}

double RateLearner::fleet_transfer_factor() const { return std::exp(fleet_transfer_.log_factor); }

void RateLearner::RebuildTable() {
  const double fleet = fleet_transfer_factor();
  table_.resize(pairs_.size());
  for (size_t i = 0; i < pairs_.size(); ++i) {
    table_[i] = pairs_[i].samples > 0 ? std::exp(pairs_[i].log_factor) : fleet;
  }
  ++version_;
}

}  // namespace kvroute::router
