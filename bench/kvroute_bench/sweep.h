// The load sweep: the ablation repeated at several arrival rates (jobs/s) and workload seeds,
// every figure reported with its spread across seeds, and a regime map of where each
// configuration wins, ties or loses against a reference configuration.
//
// A sweep point is one (rate, seed). RunSweep runs RunAblation once per point, so every
// configuration at that point gets a fresh simulated fleet and the same planned arrivals: the
// point's workload (SweepPointWorkload) depends on the rate and the seed only, never on the
// configuration. Across rates one seed keeps its jobs (same ids, sizes and text); a higher
// rate compresses their arrival times and adds jobs after them (common random numbers).
// The agentic-long preset is rebuilt at each seed (its job count follows the seed's planned
// contexts, AgenticLongPreset) and the rate is the one its sessions arrive at, within the
// preset's arrival window: the working set stays the preset's, how fast it comes varies.
//
// The spread of a figure (TTFT p90 of configuration C at one rate, say) is its median and
// [min, max] over the seeds. Verdict of C against the reference R on a lower-is-better
// figure, from their intervals over the seeds:
//   win   C's max < R's min          (every seed of C beats every seed of R)
//   lose  C's min > R's max
//   tie   the intervals overlap (endpoints included): the difference is within the
//         run-to-run spread
//   -     fewer than two seeds on either side, so there is no spread to compare with.
// The spread over seeds holds both the run-to-run noise and the seeds' different workloads.
// Beside each verdict the regime map gives the paired ratios: C / R at each seed both ran
// (same arrivals), whose [min, max] shows the comparison without the workloads' variation.
//
// Each point's configurations are also paired over the point's sessions (compare.h): every
// configuration against each reference, B - A with the interval that drawing the sessions
// (and, with repeats, the runs) gives it.
//
// Each point's ablation report stays in out_dir/jps-<rate>/seed-<seed>/ (with repeats, one
// per run in run-<k>/); out_dir/sweep.md and sweep.json are rewritten after every run, so an
// interrupted sweep keeps what it ran.
//
// Usage:
//   SweepOptions o{.jobs_per_second = {0.25, 0.5}, .seeds = {1, 2, 3}};
//   o.ablation.modes = {"baseline", "v1"};
//   o.ablation.out_dir = "out/sweep";
//   absl::StatusOr<Sweep> s = RunSweep(o, workload);   // writes out/sweep/sweep.{md,json}
//
// Thread-safety: RunSweep blocks the calling thread and writes files; do not run two with one
// out_dir. Everything else is a pure function.
#pragma once

#include <array>
#include <boost/json/value.hpp>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/kvroute_bench/ablation.h"
#include "bench/kvroute_bench/compare.h"
#include "bench/kvroute_bench/runner.h"
#include "bench/kvroute_bench/stats.h"

namespace kvroute::bench {

// The figures a sweep keeps per (rate, seed, configuration); latencies over all requests in
// modelled seconds.
enum class SweepFigure {
  kRequests,  // sent (successful or failed)
  kTtftP50,
  kTtftP90,
  kTtftP99,
  // The compute floor's p90 over the successful co-located requests (RunSummary::
  // floor_split): the TTFT p90 the run's cache hits would give with no queueing at all, the
  // part of kTtftP90 no placement or admission removes.
  kTtftFloorP90,
  kTpotP99,
  kHeavyTtftP90,  // the HEAVY class's TTFT p90 (offloaded requests included)
  kGoodput,       // share of requests meeting their SLOs, 0..1 (higher is better)
  kPrefixHit,     // cached / prompt tokens, 0..1 (higher is better)
  kHitOfPooled,   // kPrefixHit / the run's pooled-LRU bound (runner.h); NaN when unknown
  kOffloads,
  kErrors,     // unsuccessful requests (shed, failed, given up) plus dropped arrivals
  kServed,     // requests that succeeded
  kShed,       // requests answered HTTP 429 before any stream
  kShedShare,  // kShed / kRequests, 0..1
  kFailed,     // requests that failed after the target accepted them
  kGaveUp,     // requests the client abandoned at its timeout
  kJobMean,    // mean completion time of the agentic jobs that completed
  // Share of the agentic jobs that completed, 0..1: a job whose turn was shed past its
  // client's retries sends no more turns, which goodput (a share of the turns sent) omits.
  kJobsDone,
  // Turns that met their SLOs over the turns the agentic jobs planned, 0..1 (RunSummary::
  // planned_goodput): goodput that charges a configuration for the turns of the sessions
  // it ended.
  kPlannedGoodput,
  // Shares of the instance samples with a request waiting, and with one waiting while the
  // KV was full, 0..1 (RunSummary::queued_share, queued_kv_full_share): waits for compute
  // against waits for memory.
  kQueued,
  kQueuedKvFull,
  // Prompt tokens the fleet computed (prompt less cached, over successful requests; all of
  // an offloaded request's), and the agent sessions' turns served away from the instance of
  // their previous turn (RunSummary::session_turns).
  kComputedTokens,
  kMovedTurns,
  // The simulated fleet's lag behind the wall clock, its 99th percentile over the instances'
  // samples (RunSummary::sim_lag_p99), modelled seconds: how far the host let the run's
  // times stretch.
  kSimLagP99,
  // The instance with the most requests running on average over the fleet's mean (1:
  // even; RunSummary::instances): a router that starts sessions unevenly keeps some
  // instances queueing while others idle, which the fleet's mean busy share hides.
  kRunningMostOverMean,
};
inline constexpr size_t kSweepFigureCount = 26;

struct SweepFigureInfo {
  SweepFigure figure;
  std::string_view key;    // sweep.json
  std::string_view label;  // sweep.md
};
const std::array<SweepFigureInfo, kSweepFigureCount>& SweepFigures();

// The figures the regime map judges.
inline constexpr std::array<SweepFigure, 2> kRegimeFigures = {SweepFigure::kTtftP90,
                                                              SweepFigure::kTtftP99};

inline constexpr double kNotMeasured = std::numeric_limits<double>::quiet_NaN();
using SweepFigureValues = std::array<double, kSweepFigureCount>;  // NaN: not measured

// One configuration's run at one sweep point (one of its repeats, counted from 1).
struct SweepSample {
  double jobs_per_second = 0;
  uint64_t seed = 0;
  std::string config;
  SweepFigureValues figures{};
  int repeat = 1;
};

SweepFigureValues SweepFiguresOf(const RunSummary& summary);

// Median (mean of the middle two for an even count), min and max of the finite values; n
// counts them. All NaN when n == 0.
struct Spread {
  int64_t n = 0;
  double median = kNotMeasured, min = kNotMeasured, max = kNotMeasured;
};
Spread SpreadOf(const std::vector<double>& values);

enum class Verdict { kWin, kTie, kLose, kTooFewSeeds };
std::string_view VerdictName(Verdict v);  // "win", "tie", "lose", "-"
// `candidate` against `reference` on a figure where lower is better (rule above).
Verdict Judge(const Spread& candidate, const Spread& reference);

// Per (rate, configuration): the spread of every figure over the seeds.
struct SweepCell {
  double jobs_per_second = 0;
  std::string config;
  std::array<Spread, kSweepFigureCount> figures;
  // The samples behind the spreads, in the order of SweepTable::seeds: at a seed run more than
  // once, each figure's mean over the repeats that measured it (NaN: none did).
  std::vector<std::pair<uint64_t, SweepFigureValues>> by_seed;
  int repeats = 0;  // the most runs any of its seeds had
};

struct SweepTable {
  std::vector<double> rates;         // ascending
  std::vector<std::string> configs;  // in order of first appearance
  std::vector<uint64_t> seeds;       // in order of first appearance
  std::vector<SweepCell> cells;      // rate-major, then configs' order; only measured pairs
  const SweepCell* Find(double jobs_per_second, std::string_view config) const;
};
SweepTable AggregateSweep(const std::vector<SweepSample>& samples);

struct RegimeJudgement {
  SweepFigure figure;
  Verdict verdict = Verdict::kTooFewSeeds;
  double ratio = kNotMeasured;  // candidate median / reference median (NaN if either is missing)
  // candidate / reference at each seed where both measured the figure (reference > 0).
  Spread paired_ratio;
};
struct RegimeEntry {
  double jobs_per_second = 0;
  std::string config;
  std::string reference;
  std::vector<RegimeJudgement> judgements;  // one per kRegimeFigures
};
// Every configuration other than the reference at every rate where both ran, for each
// reference in turn.
std::vector<RegimeEntry> RegimeMap(const SweepTable& table,
                                   const std::vector<std::string>& references);

// A configuration against a reference at one sweep point, paired over the point's sessions
// (compare.h): B is the configuration, A the reference.
struct SweepComparison {
  double jobs_per_second = 0;
  uint64_t seed = 0;
  std::string config;
  std::string reference;
  Comparison comparison;
};
// Every other configuration of a point against each reference that ran there, over the
// point's repeats (one report each; several: the two-stage bootstrap of compare.h).
absl::StatusOr<std::vector<SweepComparison>> ComparePoint(
    const std::vector<Report>& repeats, double jobs_per_second, uint64_t seed,
    const std::vector<std::string>& references, const CompareOptions& options);

// What a sweep measured, and how it is described in its reports.
struct Sweep {
  std::string generated_at;
  std::vector<std::pair<std::string, std::string>> setup;
  std::vector<std::string> references;
  std::vector<SweepSample> samples;
  std::vector<SweepComparison> comparisons;
};
boost::json::value SweepJson(const Sweep& sweep);
std::string SweepMarkdown(const Sweep& sweep);
// Writes sweep.json and sweep.md into `dir` (created if missing).
absl::Status WriteSweep(const Sweep& sweep, const std::string& dir);

struct SweepOptions {
  std::vector<double> jobs_per_second = {0.25, 0.5, 0.75};
  std::vector<uint64_t> seeds = {1, 2, 3};
  // Configurations (AblationConfig names) the regime map compares the others with, and
  // each point's paired comparisons.
  std::vector<std::string> references = {"baseline"};
  CompareOptions compare;
  // Runs of each point: the ablation again on the same arrivals, with fresh fleets. Two runs
  // of one configuration at one seed differ (the fleet's timing decides which turns land
  // where); repeats put that in the figures (each seed's the mean over its runs) and in the
  // paired comparisons' intervals.
  int repeats = 1;
  // Fleet, configurations and run settings; out_dir is the sweep's directory. The embedded
  // simulated fleet only: given targets would carry warm caches from point to point.
  AblationOptions ablation;
  // Called after each point's ablation with its report (e.g. to print its summary table).
  std::function<void(double jobs_per_second, uint64_t seed, const Report& report)> on_point;
};

// Checks rates (positive, distinct), seeds (distinct, at least one), repeats (1 to 20),
// references (among the configurations) and the workload (agentic jobs, hand-set or the
// agentic-long preset: the rate is what varies).
absl::Status ValidateSweep(const SweepOptions& options, const WorkloadSpec& base);
// `base` with the point's rate and seed (the agentic-long preset rebuilt at that seed).
WorkloadSpec SweepPointWorkload(const WorkloadSpec& base, double jobs_per_second, uint64_t seed);
// out_dir/jps-<rate>/seed-<seed>, and with repeats, each run's out_dir/jps-<rate>/seed-<seed>/
// run-<repeat>.
std::string SweepPointDir(const std::string& out_dir, double jobs_per_second, uint64_t seed);
std::string SweepRunDir(const std::string& out_dir, double jobs_per_second, uint64_t seed,
                        int repeat, int repeats);

absl::StatusOr<Sweep> RunSweep(const SweepOptions& options, const WorkloadSpec& base);

}  // namespace kvroute::bench
