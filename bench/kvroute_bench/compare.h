// Paired comparison of two runs of one workload: each headline figure's difference, and how
// far the choice of the workload's sessions alone moves it.
//
// Why. Two configurations run on identical arrivals (an ablation's runs, or a sweep's runs at
// the same rate and seed) differ by what they do and by which sessions the workload happened
// to hold. On long-context agent sessions the TTFT p90 sits where the slowest tenth begins
// (the first turns' cold prefills and the longest prefills of the rest), so a few turns
// crossing it move it by seconds: a lead of a second at p90 may be the sessions, not the
// configuration. The comparison says which.
//
// How (a paired cluster bootstrap). The unit is a session: an agentic job, with every turn
// it sent (a trace request without a job is its own unit). The units of both runs are drawn
// with replacement, as many as there are, the same draw for both; each draw's figures are
// computed as the run's summary computes them (stats.h: Percentile, CountsForGoodput,
// MeetsSlos), and the difference B - A and ratio B / A recorded. Reported per figure: A, B,
// B - A and B / A with the central `confidence` interval of each over the draws (percentile
// method), and the share of draws in which B is below A. An interval that holds zero: the
// workload's sessions alone could reverse the sign. Deterministic for a seed.
//
// Repeats. Running one configuration again moves its figures too (the fleet's timing and
// the order of concurrent events decide which turns land where): at 1.5x HBM two runs of the
// same configuration and seed differ by more than the sessions' interval. Given several runs
// of each configuration on one workload, a side's figure is the mean over its runs, and each
// draw also draws each side's runs with replacement (a two-stage bootstrap: runs, then
// sessions), so the interval holds the repeats' noise as far as the repeats show it.
// Left out: arrivals dropped before they were sent (they have no request record;
// Comparison::notes says when a run has any).
//
//   absl::StatusOr<ComparedRun> a = ReadComparedRun("out/tier-blind-s1", "");
//   absl::StatusOr<ComparedRun> b = ReadComparedRun("out/tier-aware-s1", "");
//   absl::StatusOr<Comparison> c = CompareRuns(*a, *b, CompareOptions{});
//   std::cout << ComparisonMarkdown(*c);
//
// Thread-safety: pure functions, except ReadComparedRun, which reads a file.
#pragma once

#include <array>
#include <boost/json/value.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/kvroute_bench/records.h"

namespace kvroute::bench {

// One run of a report, as much of it as the comparison reads.
struct ComparedRun {
  std::string label;  // "<report.json path>: <run name>"
  double time_scale = 1;
  SloTargets slo;
  int64_t dropped = 0;  // arrivals dropped before sending (summary.dropped)
  // How far the simulated fleet's clock ran behind the wall clock at the 99th percentile,
  // modelled seconds (summary.sim_lag_p99_s); negative: unknown (no simulator sampled).
  double sim_lag_p99_s = -1;
  std::vector<RequestRecord> requests;
  std::vector<JobRecord> jobs;  // job and planned_turns are read
};

// A run as the bench holds it (a sweep's point just run); `label` names it.
ComparedRun ComparedRunOf(const RunResult& run, std::string label);

// The run named `run` (empty: the report's only run) of report.json at `path`, or of the one
// report.json under the directory `path` (a sweep's directory with one rate and one seed).
absl::StatusOr<ComparedRun> ReadComparedRun(const std::string& path, const std::string& run);
// The same from a parsed report (report.h ReportJson's shape); `source` names it in labels
// and errors.
absl::StatusOr<ComparedRun> ComparedRunFromJson(const boost::json::value& report,
                                                const std::string& run, const std::string& source);

struct CompareOptions {
  int resamples = 2000;
  uint64_t seed = 1;
  double confidence = 0.95;
  // The classes goodput is measured in for every run (--slo-class); unset: each run's own
  // (its summary.slo.class).
  std::optional<SloClassSource> slo_class = std::nullopt;
  // A run whose simulator lag p99 exceeds this (modelled seconds) is flagged: a lagging
  // simulator stretches every time it models, and more where it is busier, so the pair's
  // difference holds the host's slowness as well as the configurations'. 0: no flag.
  double max_sim_lag_s = 0.25;
};

// The figures compared, in the order Comparison::figures holds them (their labels).
inline constexpr std::array<std::string_view, 7> kComparedFigures = {
    "TTFT p50 (s)",      "TTFT p90 (s)",      "TTFT p99 (s)", "goodput", "goodput of planned turns",
    "mean job time (s)", "sessions completed"};

struct FigureComparison {
  std::string label;  // "TTFT p90 (s)", "goodput", ...
  // The figure over every unit of each run, and B - A; NaN when either run has no value.
  double a = 0, b = 0, difference = 0;
  // The central `confidence` interval of B - A over the draws, and the share of the draws
  // (with both figures defined) in which B is below A. NaN: no such draw.
  double low = 0, high = 0, b_lower_share = 0;
  // B / A, and the same interval of it over the draws whose A is positive (NaN: none).
  double ratio = 0, ratio_low = 0, ratio_high = 0;
};

struct Comparison {
  std::string a_label, b_label;
  int a_repeats = 1, b_repeats = 1;
  CompareOptions options;
  int64_t units = 0;         // sessions (and job-less trace requests) in either run
  int64_t units_only_a = 0;  // of them, in A's requests only
  int64_t units_only_b = 0;
  // TTFT p50, p90 and p99 (modelled seconds, served requests), goodput (stats.h), the
  // goodput of planned turns when both runs know every job's plan, and the mean time of
  // the agentic jobs that completed (arrival to last answer, modelled seconds) when both
  // runs completed some: a job ended by a failed turn has no time, so a side that ends
  // more sessions early averages over fewer of them; and the share of the agentic jobs
  // whose every planned turn was answered (when every unit is a job with a known plan),
  // which counts the sessions a side ended, as a client whose agent stopped sees them.
  std::vector<FigureComparison> figures;
  std::vector<std::string> notes;  // what a reader must know about the figures
  // Some run of either side lagged past CompareOptions::max_sim_lag_s (a note names it).
  bool sim_lag_exceeded = false;
};

// A and B: one run each, or several (repeats of one configuration on one workload).
// Errors: options out of range, runs measured against different SLOs, or runs that share no
// unit (not the same workload).
absl::StatusOr<Comparison> CompareRuns(const std::vector<ComparedRun>& a,
                                       const std::vector<ComparedRun>& b,
                                       const CompareOptions& options);
inline absl::StatusOr<Comparison> CompareRuns(const ComparedRun& a, const ComparedRun& b,
                                              const CompareOptions& options) {
  return CompareRuns(std::vector<ComparedRun>{a}, std::vector<ComparedRun>{b}, options);
}

std::string ComparisonMarkdown(const Comparison& c);
// One figure in a cell: "B - A [low, high]" (goodput in points), and "B / A [low, high]";
// "-" where undefined.
std::string DifferenceCell(const FigureComparison& f);
std::string RatioCell(const FigureComparison& f);
boost::json::value ComparisonJson(const Comparison& c);
// Under a table whose rows read "(lagged)": what the mark means at `options`' bound.
std::string SimLagFootnote(const CompareOptions& options);

}  // namespace kvroute::bench
