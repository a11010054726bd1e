// The router's accuracy in an ablation report: the cache-hit estimate's
// signed error per class (a table and a histogram per configuration) and the
// joint decision's predicted TTFT against the realised one. report.cc places
// these sections in report.md and report.html.
//
//   std::vector<RunSummary> sums = SummarizeAll(report);
//   auto rows = EstimateRows(report, sums);   // empty: no run had estimates
//   MarkdownTable(EstimateHeader(), rows);
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "bench/kvroute_bench/records.h"
#include "bench/kvroute_bench/report.h"
#include "bench/kvroute_bench/stats.h"

namespace kvroute::bench {

extern const char kEstimateNote[];
extern const char kPredictionNote[];
extern const char kEstimateHistogramNote[];

// "+1.2%", "-0.4%"; "-" for NaN.
std::string SignedPercent(double f);

// One row per (configuration, class) with estimates: median, mean and p90 of the error,
// shares beyond +-5 %, and percentiles of the signed error.
std::vector<std::string> EstimateHeader();
std::vector<std::vector<std::string>> EstimateRows(const Report& report,
                                                   const std::vector<RunSummary>& sums);

// One row per (configuration, class) whose router predicted TTFT (v1_cost, v2).
std::vector<std::string> PredictionHeader();
std::vector<std::vector<std::string>> PredictionRows(const Report& report,
                                                     const std::vector<RunSummary>& sums);

// One configuration's signed estimate errors as an SVG histogram, one bar series per class;
// empty when the run has none.
std::string EstimateErrorHistogram(const RunResult& r);

}  // namespace kvroute::bench
