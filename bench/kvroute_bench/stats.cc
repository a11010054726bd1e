#include "bench/kvroute_bench/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace kvroute::bench {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

int ClassOrder(const std::string& klass) {
  if (klass == "WARM") return 0;
  if (klass == "MEDIUM") return 1;
  if (klass == "HEAVY") return 2;
  return 3;
}

}  // namespace

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return kNaN;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

Distribution Describe(const std::vector<double>& values) {
  Distribution d;
  d.n = static_cast<int64_t>(values.size());
  if (values.empty()) {
    d.mean = d.p50 = d.p90 = d.p99 = d.max = kNaN;
    return d;
  }
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  double sum = 0;
  for (double v : sorted) sum += v;
  d.mean = sum / static_cast<double>(sorted.size());
  d.p50 = Percentile(sorted, 50);
  d.p90 = Percentile(sorted, 90);
  d.p99 = Percentile(sorted, 99);
  d.max = sorted.back();
  return d;
}

EstimateErrorSummary DescribeEstimateErrors(const std::vector<double>& signed_errors) {
  EstimateErrorSummary e;
  e.n = static_cast<int64_t>(signed_errors.size());
  if (e.n == 0) {
    e.p1 = e.p10 = e.p50 = e.p90 = e.p99 = kNaN;
    return e;
  }
  std::vector<double> abs_errors;
  abs_errors.reserve(signed_errors.size());
  double sum = 0, abs_sum = 0;
  int64_t over = 0, under = 0;
  for (double x : signed_errors) {
    sum += x;
    abs_sum += std::abs(x);
    abs_errors.push_back(std::abs(x));
    over += x > 0.05 ? 1 : 0;
    under += x < -0.05 ? 1 : 0;
  }
  const double n = static_cast<double>(e.n);
  e.mean_signed = sum / n;
  e.mean_abs = abs_sum / n;
  e.median_abs = Percentile(abs_errors, 50);
  e.p90_abs = Percentile(std::move(abs_errors), 90);
  e.over_5pct = static_cast<double>(over) / n;
  e.under_5pct = static_cast<double>(under) / n;
  std::vector<double> sorted = signed_errors;
  std::sort(sorted.begin(), sorted.end());
  e.p1 = Percentile(sorted, 1);
  e.p10 = Percentile(sorted, 10);
  e.p50 = Percentile(sorted, 50);
  e.p90 = Percentile(sorted, 90);
  e.p99 = Percentile(std::move(sorted), 99);
  return e;
}

std::optional<double> SignedEstimateError(const RequestRecord& r) {
  if (!r.ok() || r.offloaded() || r.prompt_tokens <= 0 || r.cached_tokens < 0 ||
      r.cached_tokens_est < 0) {
    return std::nullopt;
  }
  return static_cast<double>(r.cached_tokens_est - r.cached_tokens) /
         static_cast<double>(r.prompt_tokens);
}

std::map<std::string, std::vector<double>> EstimateErrorsByClass(const RunResult& run) {
  std::map<std::string, std::vector<double>> out;
  for (const RequestRecord& r : run.requests) {
    if (const std::optional<double> e = SignedEstimateError(r)) {
      out[r.klass.empty() ? "unlabelled" : r.klass].push_back(*e);
    }
  }
  return out;
}

RunSummary Summarize(const RunResult& run) {
  RunSummary s;
  const double scale = run.time_scale > 0 ? run.time_scale : 1.0;
  struct Samples {
    std::vector<double> ttft, tpot, e2e;
    std::vector<double> est_error;  // signed, fraction of the prompt
    int64_t n = 0;
  };
  Samples all;
  std::map<std::pair<int, std::string>, Samples> by_class;
  int64_t completed = 0;
  std::vector<double> offload_prefill, offload_transfer;
  double est_error = 0;
  int64_t est_n = 0;
  double bound_hit = 0, bound_total = 0;
  bool bound_known = true;
  for (const RequestRecord& r : run.requests) {
    ++s.requests;
    if (r.offloaded()) ++s.offloads;
    if (!r.ok()) {
      ++s.errors;
      continue;
    }
    ++completed;
    const std::string klass = r.klass.empty() ? "unlabelled" : r.klass;
    Samples& c = by_class[{ClassOrder(klass), klass}];
    for (Samples* x : {&all, &c}) {
      ++x->n;
      if (r.ttft >= 0) x->ttft.push_back(r.ttft / scale);
      if (r.tpot >= 0) x->tpot.push_back(r.tpot / scale);
      if (r.e2e >= 0) x->e2e.push_back(r.e2e / scale);
    }
    if (r.offloaded() && r.prefill_leg_s >= 0) offload_prefill.push_back(r.prefill_leg_s / scale);
    if (r.offloaded() && r.transfer_s >= 0) offload_transfer.push_back(r.transfer_s / scale);
    if (r.prompt_tokens > 0 && r.cached_tokens >= 0 && r.cached_tokens_est >= 0) {
      const double e = static_cast<double>(r.cached_tokens_est - r.cached_tokens) /
                       static_cast<double>(r.prompt_tokens);
      est_error += std::abs(e);
      ++est_n;
    }
    if (const std::optional<double> e = SignedEstimateError(r)) {
      all.est_error.push_back(*e);
      c.est_error.push_back(*e);
    }
    if (r.prompt_tokens > 0) {
      s.prompt_tokens += r.prompt_tokens;
      if (r.offloaded()) {
        s.transferred_tokens += std::max<int64_t>(r.cached_tokens, 0);
      } else {
        s.cached_tokens += std::max<int64_t>(r.cached_tokens, 0);
      }
      if (r.bound_cached_tokens >= 0) {
        bound_hit += static_cast<double>(std::min(r.bound_cached_tokens, r.prompt_tokens));
        bound_total += static_cast<double>(r.prompt_tokens);
      } else {
        bound_known = false;
      }
    }
  }
  s.dropped = run.dropped;
  s.offload_prefill = Describe(offload_prefill);
  s.offload_transfer = Describe(offload_transfer);
  if (est_n > 0) s.cache_estimate_error = est_error / static_cast<double>(est_n);
  const int64_t attempted = s.requests + s.dropped;
  s.error_rate = attempted > 0 ? static_cast<double>(s.errors + s.dropped) /
                                     static_cast<double>(attempted)
                               : 0;
  if (run.duration_s > 0) {
    s.throughput_rps = static_cast<double>(completed) / (run.duration_s / scale);
  }
  s.hit_ratio = s.prompt_tokens > 0
                    ? static_cast<double>(s.cached_tokens) / static_cast<double>(s.prompt_tokens)
                    : 0;
  s.pooled_bound_hit_ratio = run.pooled_bound_hit_ratio;
  s.fleet_kv_tokens = run.fleet_kv_tokens;
  if (run.bound_hit_ratio >= 0) {
    s.bound_hit_ratio = run.bound_hit_ratio;
  } else if (bound_known && bound_total > 0) {
    s.bound_hit_ratio = bound_hit / bound_total;
  }
  auto summarize = [](const std::string& klass, const Samples& x) {
    ClassSummary c;
    c.klass = klass;
    c.requests = x.n;
    c.ttft = Describe(x.ttft);
    c.tpot = Describe(x.tpot);
    c.e2e = Describe(x.e2e);
    c.estimate = DescribeEstimateErrors(x.est_error);
    return c;
  };
  s.classes.push_back(summarize("ALL", all));
  for (const auto& [key, x] : by_class) s.classes.push_back(summarize(key.second, x));

  // Jobs and turns.
  std::vector<double> completion;
  std::vector<std::vector<double>> per_turn;
  for (const JobRecord& j : run.jobs) {
    ++s.jobs;
    if (j.ok && j.t_done >= 0) {
      ++s.jobs_ok;
      completion.push_back((j.t_done - j.t_arrival) / scale);
    }
    for (size_t t = 0; t < j.turn_e2e.size(); ++t) {
      if (per_turn.size() <= t) per_turn.resize(t + 1);
      if (j.turn_e2e[t] >= 0) per_turn[t].push_back(j.turn_e2e[t] / scale);
    }
  }
  s.job_completion = Describe(completion);
  for (const std::vector<double>& t : per_turn) {
    const Distribution d = Describe(t);
    s.turn_mean_e2e.push_back(d.mean);
    s.turn_p50_e2e.push_back(d.p50);
  }
  if (s.turn_mean_e2e.size() >= 2 && s.turn_mean_e2e.front() > 0) {
    s.t8_over_t1 = s.turn_mean_e2e.back() / s.turn_mean_e2e.front();
  }

  // Instances.
  double kv_sum = 0, busy_sum = 0;
  int64_t kv_n = 0, busy_n = 0;
  for (const InstanceSample& x : run.samples) {
    if (x.kv_usage >= 0) {
      kv_sum += x.kv_usage;
      ++kv_n;
      s.max_kv_usage = std::max(s.max_kv_usage, x.kv_usage);
    }
    if (x.gpu_busy >= 0) {
      busy_sum += x.gpu_busy;
      ++busy_n;
    }
  }
  if (kv_n > 0) s.mean_kv_usage = kv_sum / static_cast<double>(kv_n);
  if (busy_n > 0) s.mean_gpu_busy = busy_sum / static_cast<double>(busy_n);
  return s;
}

}  // namespace kvroute::bench
