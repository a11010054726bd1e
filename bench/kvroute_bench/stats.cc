#include "bench/kvroute_bench/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "classifier/classifier.h"

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
      const std::string klass = SloClass(r, run.slo);
      out[klass.empty() ? "unlabelled" : klass].push_back(*e);
    }
  }
  return out;
}

namespace {

// The samples of one TtftSplit, modelled seconds.
struct SplitSamples {
  std::vector<double> ttft, floor, queue;
  double ttft_sum = 0, queue_sum = 0;

  void Add(double ttft_s, double floor_s) {
    ttft.push_back(ttft_s);
    floor.push_back(floor_s);
    queue.push_back(ttft_s - floor_s);
    ttft_sum += ttft_s;
    queue_sum += ttft_s - floor_s;
  }

  TtftSplit Describe() const {
    TtftSplit split;
    split.ttft = bench::Describe(ttft);
    split.floor = bench::Describe(floor);
    split.queue = bench::Describe(queue);
    if (ttft_sum > 0) split.queue_share = queue_sum / ttft_sum;
    return split;
  }
};

}  // namespace

RunSummary Summarize(const RunResult& run) {
  RunSummary s;
  const double scale = run.time_scale > 0 ? run.time_scale : 1.0;
  struct Samples {
    std::vector<double> ttft, tpot, e2e;
    std::vector<double> est_error;  // signed, fraction of the prompt
    std::vector<double> prediction_error;    // signed, fraction of the realised TTFT
    std::vector<double> prediction_error_s;  // |predicted - realised|, modelled seconds
    int64_t n = 0;
    int64_t streams = 0, stalled = 0;
    int64_t slo_requests = 0, slo_met = 0;
    int64_t missed_floor = 0, missed_wait = 0, missed_tpot = 0;
  };
  Samples all;
  std::map<std::pair<int, std::string>, Samples> by_class;
  int64_t completed = 0;
  std::vector<double> offload_prefill, offload_transfer;
  double est_error = 0;
  int64_t est_n = 0;
  double bound_hit = 0, bound_total = 0;
  bool bound_known = true;
  SplitSamples floor_split, heavy_split;
  bool any_slo_class = false;
  for (const RequestRecord& r : run.requests) {
    ++s.requests;
    if (r.offloaded()) ++s.offloads;
    const std::string slo_class = SloClass(r, run.slo);
    const std::string klass = slo_class.empty() ? "unlabelled" : slo_class;
    Samples& c = by_class[{ClassOrder(klass), klass}];
    // Goodput counts every request of a class with an SLO, and every unsuccessful request
    // (shed, failed or given up) as a miss (CountsForGoodput).
    const double ttft_slo = TtftSlo(run.slo, klass);
    if (ttft_slo > 0) any_slo_class = true;
    const bool met = MeetsSlos(r, run.slo, scale);
    if (CountsForGoodput(r, run.slo)) {
      ++all.slo_requests;
      all.slo_met += met ? 1 : 0;
    }
    if (ttft_slo > 0) {
      ++c.slo_requests;
      c.slo_met += met ? 1 : 0;
    }
    // A served miss: its compute alone past the TTFT SLO, its wait, or its TPOT.
    if (ttft_slo > 0 && r.ok() && r.ttft >= 0 && !met) {
      const bool floor_past = MissedOnFloor(r, ttft_slo, scale);
      const bool ttft_past = r.ttft / scale > ttft_slo;
      for (Samples* x : {&all, &c}) {
        if (floor_past) {
          ++x->missed_floor;
        } else if (ttft_past) {
          ++x->missed_wait;
        } else {
          ++x->missed_tpot;
        }
      }
    }
    switch (r.outcome()) {
      case RequestOutcome::kOk:
        ++s.served;
        break;
      case RequestOutcome::kShed:
        ++s.shed;
        break;
      case RequestOutcome::kFailed:
        ++s.failed;
        break;
      case RequestOutcome::kGaveUp:
        ++s.gave_up;
        break;
    }
    if (!r.ok()) {
      ++s.errors;
      continue;
    }
    ++completed;
    if (r.gaps > 0 && r.max_gap >= 0) {
      const bool stalled = r.max_gap / scale > kStreamStallS;
      for (Samples* x : {&all, &c}) {
        ++x->streams;
        x->stalled += stalled ? 1 : 0;
      }
    }
    if (r.offloaded() && r.prompt_tokens > 0) s.offloaded_prompt_tokens += r.prompt_tokens;
    if (!r.offloaded() && r.compute_floor_s >= 0 && r.ttft >= 0) {
      floor_split.Add(r.ttft / scale, r.compute_floor_s / scale);
      if (klass == "HEAVY") heavy_split.Add(r.ttft / scale, r.compute_floor_s / scale);
    }
    if (r.predicted_ttft_s >= 0 && r.ttft > 0) {
      for (Samples* x : {&all, &c}) {
        x->prediction_error.push_back((r.predicted_ttft_s - r.ttft) / r.ttft);
        x->prediction_error_s.push_back(std::abs(r.predicted_ttft_s - r.ttft) / scale);
      }
    }
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
  s.shed_share =
      s.requests > 0 ? static_cast<double>(s.shed) / static_cast<double>(s.requests) : 0;
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
  all.slo_requests += run.dropped;
  LogHistogram all_itl;
  for (const auto& [klass, h] : run.itl_by_class) all_itl.Merge(h);
  auto summarize = [&](const std::string& klass, const Samples& x, const LogHistogram* itl) {
    ClassSummary c;
    c.klass = klass;
    c.requests = x.n;
    c.ttft = Describe(x.ttft);
    c.tpot = Describe(x.tpot);
    c.e2e = Describe(x.e2e);
    c.estimate = DescribeEstimateErrors(x.est_error);
    if (!x.prediction_error.empty()) {
      std::vector<double> abs_error;
      for (double e : x.prediction_error) abs_error.push_back(std::abs(e));
      c.predicted = static_cast<int64_t>(x.prediction_error.size());
      c.prediction_signed_error_p50 = Describe(x.prediction_error).p50;
      const Distribution a = Describe(std::move(abs_error));
      c.prediction_abs_error_p50 = a.p50;
      c.prediction_abs_error_p90 = a.p90;
      c.prediction_abs_error_s_p50 = Describe(x.prediction_error_s).p50;
    }
    if (itl != nullptr && itl->count() > 0) {
      c.itl_gaps = itl->count();
      c.itl_p50 = itl->Percentile(50) / scale;
      c.itl_p99 = itl->Percentile(99) / scale;
      c.itl_max = itl->max() / scale;
    }
    c.streams = x.streams;
    if (x.streams > 0) {
      c.stalled_stream_share = static_cast<double>(x.stalled) / static_cast<double>(x.streams);
    }
    c.slo_requests = x.slo_requests;
    c.slo_met = x.slo_met;
    c.missed_floor = x.missed_floor;
    c.missed_wait = x.missed_wait;
    c.missed_tpot = x.missed_tpot;
    if (any_slo_class && x.slo_requests > 0 && (klass == "ALL" || TtftSlo(run.slo, klass) > 0)) {
      c.goodput = static_cast<double>(x.slo_met) / static_cast<double>(x.slo_requests);
    }
    return c;
  };
  s.classes.push_back(summarize("ALL", all, &all_itl));
  for (const auto& [key, x] : by_class) {
    if (x.n == 0 && x.slo_requests == 0) continue;  // only failures without a class
    // The runner keys its histograms by the router's class.
    auto it = run.itl_by_class.find(key.second);
    const bool itl_known =
        run.slo.class_source == SloClassSource::kRouter && it != run.itl_by_class.end();
    s.classes.push_back(summarize(key.second, x, itl_known ? &it->second : nullptr));
  }
  s.slo = run.slo;
  if (s.classes.front().goodput >= 0 && run.duration_s > 0) {
    s.goodput_rps = static_cast<double>(all.slo_met) / (run.duration_s / scale);
  }
  s.offload_rate =
      s.requests > 0 ? static_cast<double>(s.offloads) / static_cast<double>(s.requests) : 0;
  if (run.kv_bytes_per_token > 0) {
    s.transferred_bytes = static_cast<double>(s.transferred_tokens) * run.kv_bytes_per_token;
  }
  s.floor_split = floor_split.Describe();
  s.heavy_split = heavy_split.Describe();

  // Jobs and turns.
  std::vector<double> completion;
  std::vector<std::vector<double>> per_turn;
  bool plans_known = !run.jobs.empty();
  s.turns_planned = run.dropped_turns;
  s.turns_unsent = run.dropped_turns;
  for (const JobRecord& j : run.jobs) {
    ++s.jobs;
    plans_known = plans_known && j.planned_turns > 0;
    s.turns_planned += j.planned_turns;
    s.turns_unsent +=
        std::max<int64_t>(0, j.planned_turns - static_cast<int64_t>(j.turn_e2e.size()));
    if (const double job_s = j.Seconds(); job_s >= 0) {
      ++s.jobs_ok;
      completion.push_back(job_s / scale);
    }
    for (size_t t = 0; t < j.turn_e2e.size(); ++t) {
      if (per_turn.size() <= t) per_turn.resize(t + 1);
      if (j.turn_e2e[t] >= 0) per_turn[t].push_back(j.turn_e2e[t] / scale);
    }
  }
  s.job_completion = Describe(completion);
  // A turn meets its SLOs at most once (its retries' TTFTs count from its first attempt),
  // so the requests that met them are the turns that did.
  if (plans_known && s.turns_planned > 0 && s.classes.front().goodput >= 0) {
    s.planned_goodput =
        static_cast<double>(s.classes.front().slo_met) / static_cast<double>(s.turns_planned);
  }
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
  int64_t kv_n = 0, busy_n = 0, queue_n = 0, queued = 0, queued_kv_full = 0;
  std::vector<double> lags;
  for (const InstanceSample& x : run.samples) {
    if (x.kv_usage >= 0 && x.waiting >= 0) {
      ++queue_n;
      if (x.waiting > 0) {
        ++queued;
        if (x.kv_usage >= kKvFullUsage) ++queued_kv_full;
      }
    }
    if (x.kv_usage >= 0) {
      kv_sum += x.kv_usage;
      ++kv_n;
      s.max_kv_usage = std::max(s.max_kv_usage, x.kv_usage);
    }
    if (x.gpu_busy >= 0) {
      busy_sum += x.gpu_busy;
      ++busy_n;
    }
    if (x.sim_lag_s >= 0) {
      lags.push_back(x.sim_lag_s / scale);
      s.max_sim_lag = std::max(s.max_sim_lag, lags.back());
    }
    if (x.sim_lag_max_s >= 0) s.max_sim_lag = std::max(s.max_sim_lag, x.sim_lag_max_s / scale);
  }
  if (!lags.empty()) s.sim_lag_p99 = Percentile(std::move(lags), 99);
  if (kv_n > 0) s.mean_kv_usage = kv_sum / static_cast<double>(kv_n);
  if (busy_n > 0) s.mean_gpu_busy = busy_sum / static_cast<double>(busy_n);
  s.session_turns = SplitSessionTurns(run.requests, run.slo, scale);
  s.instances = InstanceLoads(run.requests, run.samples);
  if (queue_n > 0) {
    s.queued_share = static_cast<double>(queued) / static_cast<double>(queue_n);
    s.queued_kv_full_share = static_cast<double>(queued_kv_full) / static_cast<double>(queue_n);
  }
  return s;
}

double TtftSlo(const SloTargets& slo, std::string_view klass) {
  if (klass == "WARM") return slo.ttft_warm_s;
  if (klass == "MEDIUM") return slo.ttft_medium_s;
  if (klass == "HEAVY") return slo.ttft_heavy_s;
  return -1;
}

std::string SloClass(const RequestRecord& r, const SloTargets& slo) {
  if (slo.class_source == SloClassSource::kWorkload && r.prompt_tokens > 0 &&
      r.bound_cached_tokens >= 0) {
    return std::string(classifier::ToString(
        classifier::Classify(r.prompt_tokens, std::min(r.bound_cached_tokens, r.prompt_tokens),
                             classifier::Thresholds{})));
  }
  return r.klass;
}

bool CountsForGoodput(const RequestRecord& r, const SloTargets& slo) {
  return !r.ok() || TtftSlo(slo, SloClass(r, slo)) > 0;
}

bool MeetsSlos(const RequestRecord& r, const SloTargets& slo, double time_scale) {
  const double ttft_slo = TtftSlo(slo, SloClass(r, slo));
  return r.ok() && ttft_slo > 0 && r.ttft >= 0 && r.ttft / time_scale <= ttft_slo &&
         (r.tpot < 0 || r.tpot / time_scale <= slo.tpot_s);
}

bool MissedOnFloor(const RequestRecord& r, double ttft_slo, double time_scale) {
  return r.compute_floor_s >= 0 && r.compute_floor_s / time_scale > ttft_slo;
}

absl::StatusOr<SloTargets> ParseTtftSlos(const std::string& spec, SloTargets base) {
  for (absl::string_view part : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    const size_t eq = part.find('=');
    double seconds = 0;
    if (eq == absl::string_view::npos || !absl::SimpleAtod(part.substr(eq + 1), &seconds) ||
        !(seconds > 0) || !std::isfinite(seconds)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--slo-ttft: expected CLASS=SECONDS with positive seconds, got '", part, "'"));
    }
    const std::string klass = absl::AsciiStrToLower(absl::StripAsciiWhitespace(part.substr(0, eq)));
    if (klass == "warm") {
      base.ttft_warm_s = seconds;
    } else if (klass == "medium") {
      base.ttft_medium_s = seconds;
    } else if (klass == "heavy") {
      base.ttft_heavy_s = seconds;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--slo-ttft: unknown class '", klass, "' (warm, medium or heavy)"));
    }
  }
  return base;
}

std::string_view SloClassSourceName(SloClassSource source) {
  return source == SloClassSource::kWorkload ? "workload" : "router";
}

absl::StatusOr<SloClassSource> ParseSloClassSource(std::string_view name) {
  if (name == "router") return SloClassSource::kRouter;
  if (name == "workload") return SloClassSource::kWorkload;
  return absl::InvalidArgumentError(
      absl::StrCat("--slo-class: expected router or workload, got '", std::string(name), "'"));
}

}  // namespace kvroute::bench
