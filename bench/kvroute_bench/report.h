// Ablation reports: report.json (everything measured), report.md (tables) and a
// self-contained report.html (tables + inline SVG charts: TTFT CDF per class per
// configuration, per-turn latency per configuration, a KV-usage heat map per configuration
// with one row per instance, the cache-estimate error distribution per class).
//
// Usage:
//   Report r{.title = "...", .runs = {...}};
//   absl::Status s = WriteReports(r, "out/");  // out/report.{json,md,html}
//   std::cout << SummaryTable(r);
//
// Thread-safety: pure functions, except WriteReports which writes files.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <boost/json/value.hpp>

#include "absl/status/status.h"
#include "bench/kvroute_bench/records.h"
#include "bench/kvroute_bench/stats.h"

namespace kvroute::bench {

// The classes in the order reports list them; other labels follow.
inline constexpr const char* kReportClasses[] = {"ALL", "WARM", "MEDIUM", "HEAVY"};

struct Report {
  std::string title = "kvroute ablation";
  std::string generated_at;  // caller-supplied timestamp (keeps rendering deterministic)
  // Free-form (key, value) lines describing the workload and fleet, shown at the top.
  std::vector<std::pair<std::string, std::string>> setup;
  std::vector<RunResult> runs;
};

// Summaries of every run, in order.
std::vector<RunSummary> SummarizeAll(const Report& report);

boost::json::value ReportJson(const Report& report);
std::string ReportMarkdown(const Report& report);
std::string ReportHtml(const Report& report);
// Fixed-width text table for terminals: one row per configuration.
std::string SummaryTable(const Report& report);

// Writes report.json, report.md and report.html into `dir` (created if missing).
absl::Status WriteReports(const Report& report, const std::string& dir);

// "0.123", "1.23", "12.3", "123"; "-" for NaN/negative.
std::string FormatSeconds(double s);
// "12.3%" for 0.123; "-" for NaN/negative.
std::string Percent(double f);

}  // namespace kvroute::bench
