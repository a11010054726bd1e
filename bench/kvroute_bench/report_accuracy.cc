#include "bench/kvroute_bench/report_accuracy.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/kvroute_bench/svg_chart.h"

namespace kvroute::bench {
const char kEstimateNote[] =
    "Error = (router estimate - engine cached_tokens) / prompt tokens per co-located request "
    "(kvroute's request log): positive promised a hit the engine did not have. p1 ... p99 are "
    "percentiles of the signed error.";

const char kPredictionNote[] =
    "Error = (router's predicted TTFT - realised TTFT) / realised TTFT per successful request "
    "whose decision carried a prediction (predicted_ttft_s in kvroute's request log: every "
    "mode once the profile gives kvroute its rates, scaled by the rates it learns online); "
    "positive predicted too slow. The realised TTFT is the bench's, from sending the request "
    "to its first token.";

const char kEstimateHistogramNote[] =
    "Share of each class's co-located requests per 5-point bin of signed error, bins centred "
    "on 0; the two end bins also hold every error beyond -50 % and +50 %.";

// One configuration's signed estimate errors as a histogram, one bar series per class.
std::string EstimateErrorHistogram(const RunResult& r) {
  const std::map<std::string, std::vector<double>> by_class = EstimateErrorsByClass(r);
  if (by_class.empty()) return "";
  constexpr int kBins = 21;  // 5-point bins from -52.5 % to +52.5 %
  constexpr double kWidth = 0.05;
  std::vector<double> edges;
  for (int i = 0; i <= kBins; ++i) edges.push_back(-0.525 + i * kWidth);
  std::vector<HistogramSeries> series;
  auto add = [&](const std::string& klass, const std::vector<double>& errors) {
    HistogramSeries h;
    h.name = absl::StrFormat("%s (n=%d)", klass, errors.size());
    h.counts.assign(kBins, 0);
    for (double e : errors) {
      // Clamped as a double first: an estimate far beyond the prompt must not overflow.
      const double bin = std::clamp(std::floor((e + 0.525) / kWidth), 0.0, kBins - 1.0);
      ++h.counts[static_cast<size_t>(bin)];
    }
    series.push_back(std::move(h));
  };
  for (const char* klass : kReportClasses) {
    if (auto it = by_class.find(klass); it != by_class.end()) add(klass, it->second);
  }
  for (const auto& [klass, errors] : by_class) {
    if (std::find(std::begin(kReportClasses), std::end(kReportClasses), klass) == std::end(kReportClasses)) {
      add(klass, errors);
    }
  }
  HistogramOptions o;
  o.title = absl::StrCat("Cache estimate error: ", r.name);
  o.x_label = "(estimate - engine cached) / prompt";
  o.width = 760;
  return RenderHistogram(o, edges, series);
}

std::vector<std::string> EstimateHeader() {
  return {"config",      "class",        "n",           "median |error|",
          "mean signed", "mean |error|", "p90 |error|", "over +5%",
          "under -5%",   "p1",           "p10",         "p50",
          "p90",         "p99"};
}

std::string SignedPercent(double f) {
  if (!std::isfinite(f)) return "-";
  return absl::StrFormat("%+.1f%%", f * 100);
}

std::vector<std::vector<std::string>> EstimateRows(const Report& report,
                                                   const std::vector<RunSummary>& sums) {
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < report.runs.size(); ++i) {
    for (const ClassSummary& c : sums[i].classes) {
      const EstimateErrorSummary& e = c.estimate;
      if (e.n == 0) continue;
      rows.push_back({report.runs[i].name, c.klass, absl::StrCat(e.n), Percent(e.median_abs),
                      SignedPercent(e.mean_signed), Percent(e.mean_abs), Percent(e.p90_abs),
                      Percent(e.over_5pct), Percent(e.under_5pct), SignedPercent(e.p1),
                      SignedPercent(e.p10), SignedPercent(e.p50), SignedPercent(e.p90),
                      SignedPercent(e.p99)});
    }
  }
  return rows;
}

std::vector<std::string> PredictionHeader() {
  return {"config",      "class",        "n", "median |error|", "median |error| (s)",
          "p90 |error|", "median signed"};
}

// Rows only for runs whose router predicted TTFT (v1_cost, v2).
std::vector<std::vector<std::string>> PredictionRows(const Report& report,
                                                     const std::vector<RunSummary>& sums) {
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < report.runs.size(); ++i) {
    for (const ClassSummary& c : sums[i].classes) {
      if (c.predicted == 0) continue;
      rows.push_back(
          {report.runs[i].name, c.klass, absl::StrCat(c.predicted),
           Percent(c.prediction_abs_error_p50), FormatSeconds(c.prediction_abs_error_s_p50),
           Percent(c.prediction_abs_error_p90), SignedPercent(c.prediction_signed_error_p50)});
    }
  }
  return rows;
}

}  // namespace kvroute::bench
