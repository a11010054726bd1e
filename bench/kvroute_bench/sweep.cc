#include "bench/kvroute_bench/sweep.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/kvroute_bench/report.h"
#include "spdlog/spdlog.h"

namespace kvroute::bench {
namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

constexpr char kTieRule[] =
    "win: the configuration's [min, max] over seeds lies wholly below the reference's; lose: "
    "wholly above; tie: the intervals overlap (endpoints included); -: fewer than two seeds";

size_t Index(SweepFigure f) { return static_cast<size_t>(f); }

std::string RateLabel(double jobs_per_second) { return absl::StrFormat("%g", jobs_per_second); }

// The agentic-long preset with the inputs to rebuild it at another seed.
bool IsLongPreset(const AgenticOptions& a) {
  return a.preset == "agentic-long" && a.long_preset.fleet_kv_tokens > 0;
}

json::value Num(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

json::object SpreadJson(const Spread& s) {
  return {{"n", s.n}, {"median", Num(s.median)}, {"min", Num(s.min)}, {"max", Num(s.max)}};
}

// A figure's value in a table cell: seconds as report.md writes them, the prefix hit as a
// percentage, counts as numbers.
std::string FormatFigure(SweepFigure f, double v) {
  if (!std::isfinite(v)) return "-";
  switch (f) {
    case SweepFigure::kPrefixHit:
    case SweepFigure::kHitOfPooled:
    case SweepFigure::kGoodput:
    case SweepFigure::kShedShare:
    case SweepFigure::kJobsDone:
    case SweepFigure::kPlannedGoodput:
    case SweepFigure::kQueued:
    case SweepFigure::kQueuedKvFull:
      return absl::StrFormat("%.1f%%", v * 100);
    case SweepFigure::kRequests:
    case SweepFigure::kOffloads:
    case SweepFigure::kErrors:
    case SweepFigure::kServed:
    case SweepFigure::kShed:
    case SweepFigure::kFailed:
    case SweepFigure::kGaveUp:
    case SweepFigure::kMovedTurns:
      // A mean over a seed's repeats need not be whole.
      return std::abs(v - std::round(v)) < 1e-9 ? absl::StrFormat("%g", v)
                                                : absl::StrFormat("%.1f", v);
    case SweepFigure::kRunningMostOverMean:
      return absl::StrFormat("%.2f", v);
    case SweepFigure::kComputedTokens:
      return v >= 1e6 ? absl::StrFormat("%.2fM", v / 1e6) : absl::StrFormat("%.0f", v);
    default:
      return FormatSeconds(v);
  }
}

// Every configuration's name, the variants' after the modes'.
absl::StatusOr<std::vector<std::string>> ConfigNames(const AblationOptions& a) {
  absl::StatusOr<std::vector<AblationConfig>> configs = AblationConfigsOf(a);
  if (!configs.ok()) return configs.status();
  std::vector<std::string> names;
  for (const AblationConfig& c : *configs) names.push_back(c.name);
  return names;
}

std::string FormatSpread(SweepFigure f, const Spread& s) {
  if (s.n == 0) return "-";
  if (s.n == 1 || s.min == s.max) return FormatFigure(f, s.median);
  return absl::StrCat(FormatFigure(f, s.median), " [", FormatFigure(f, s.min), "–",
                      FormatFigure(f, s.max), "]");
}

// "tie 0.97× (0.81–1.10×)": verdict, ratio of medians, range of the paired ratios.
std::string FormatJudgement(const RegimeJudgement& j) {
  std::string s(VerdictName(j.verdict));
  if (std::isfinite(j.ratio)) absl::StrAppend(&s, absl::StrFormat(" %.2f×", j.ratio));
  if (j.paired_ratio.n >= 2) {
    absl::StrAppend(&s, absl::StrFormat(" (%.2f–%.2f×)", j.paired_ratio.min, j.paired_ratio.max));
  }
  return s;
}

void AppendTable(std::string* md, const std::vector<std::string>& header,
                 const std::vector<bool>& right_aligned,
                 const std::vector<std::vector<std::string>>& rows) {
  absl::StrAppend(md, "| ", absl::StrJoin(header, " | "), " |\n|");
  for (size_t i = 0; i < header.size(); ++i) {
    absl::StrAppend(md, i < right_aligned.size() && right_aligned[i] ? " ---: |" : " --- |");
  }
  absl::StrAppend(md, "\n");
  for (const std::vector<std::string>& r : rows) {
    absl::StrAppend(md, "| ", absl::StrJoin(r, " | "), " |\n");
  }
}

std::string_view FigureLabel(SweepFigure f) { return SweepFigures()[Index(f)].label; }

// The paired comparisons, a table per reference: a row per (rate, seed, configuration), a
// column per figure compare.h reports (the goodput of planned turns "-" where a run does not
// know its sessions' plans).
void AppendComparisons(std::string* md, const Sweep& sweep) {
  for (const std::string& reference : sweep.references) {
    std::vector<const SweepComparison*> rows_of;
    for (const SweepComparison& c : sweep.comparisons) {
      if (c.reference == reference) rows_of.push_back(&c);
    }
    if (rows_of.empty()) continue;
    const CompareOptions& o = rows_of.front()->comparison.options;
    absl::StrAppend(
        md, "## Paired with ", reference, ", by seed\n\nEach configuration minus ", reference,
        " on the same arrivals, with the central ", absl::StrFormat("%.0f %%", 100 * o.confidence),
        " of the difference over ", o.resamples,
        " draws of the point's sessions (the same draw for both runs; `kvroute-bench "
        "compare`): an interval that holds zero is a difference the sessions alone could "
        "reverse. TTFT and mean job time in modelled seconds, TTFT p90 also as a ratio; "
        "goodput in points.");
    if (rows_of.front()->comparison.a_repeats > 1) {
      absl::StrAppend(md, " With the point's ", rows_of.front()->comparison.a_repeats,
                      " runs a side, each side's figure is the mean over its runs and each draw "
                      "also draws the runs.");
    }
    absl::StrAppend(md, "\n\n");
    std::vector<std::string> header = {"jobs/s", "seed", "config"};
    for (std::string_view label : kComparedFigures) {
      header.push_back(std::string(label) + ", B - A");
    }
    header.push_back("TTFT p90, B / A");
    std::vector<std::vector<std::string>> rows;
    bool lagged = false;
    for (const SweepComparison* c : rows_of) {
      lagged = lagged || c->comparison.sim_lag_exceeded;
      std::vector<std::string> row = {
          RateLabel(c->jobs_per_second), absl::StrCat(c->seed),
          absl::StrCat(c->config, c->comparison.sim_lag_exceeded ? " (lagged)" : "")};
      const FigureComparison* p90 = nullptr;
      for (std::string_view label : kComparedFigures) {
        const auto& figures = c->comparison.figures;
        const auto f = std::find_if(figures.begin(), figures.end(),
                                    [&](const FigureComparison& f) { return f.label == label; });
        row.push_back(f == figures.end() ? "-" : DifferenceCell(*f));
        if (f != figures.end() && f->label == kComparedFigures[1]) p90 = &*f;
      }
      row.push_back(p90 == nullptr ? "-" : RatioCell(*p90));
      rows.push_back(std::move(row));
    }
    std::vector<bool> right(header.size(), true);
    right[2] = false;
    AppendTable(md, header, right, rows);
    if (lagged) absl::StrAppend(md, "\n", SimLagFootnote(o), "\n");
    absl::StrAppend(md, "\n");
  }
}

}  // namespace

static_assert(static_cast<size_t>(SweepFigure::kRunningMostOverMean) + 1 == kSweepFigureCount,
              "kSweepFigureCount counts SweepFigure's enumerators");

const std::array<SweepFigureInfo, kSweepFigureCount>& SweepFigures() {
  static const std::array<SweepFigureInfo, kSweepFigureCount> kFigures = {{
      {SweepFigure::kRequests, "requests", "requests"},
      {SweepFigure::kTtftP50, "ttft_p50_s", "TTFT p50"},
      {SweepFigure::kTtftP90, "ttft_p90_s", "TTFT p90"},
      {SweepFigure::kTtftP99, "ttft_p99_s", "TTFT p99"},
      {SweepFigure::kTtftFloorP90, "ttft_floor_p90_s", "TTFT floor p90"},
      {SweepFigure::kTpotP99, "tpot_p99_s", "TPOT p99"},
      {SweepFigure::kHeavyTtftP90, "heavy_ttft_p90_s", "HEAVY TTFT p90"},
      {SweepFigure::kGoodput, "goodput", "goodput"},
      {SweepFigure::kPrefixHit, "prefix_hit_ratio", "prefix hit"},
      {SweepFigure::kHitOfPooled, "hit_of_pooled_lru_bound", "hit / pooled"},
      {SweepFigure::kOffloads, "offloads", "offloads"},
      {SweepFigure::kErrors, "errors", "errors"},
      {SweepFigure::kServed, "served", "served"},
      {SweepFigure::kShed, "shed", "shed"},
      {SweepFigure::kShedShare, "shed_share", "shed share"},
      {SweepFigure::kFailed, "failed", "failed"},
      {SweepFigure::kGaveUp, "gave_up", "gave up"},
      {SweepFigure::kJobMean, "job_mean_s", "job mean"},
      {SweepFigure::kJobsDone, "jobs_done", "jobs done"},
      {SweepFigure::kPlannedGoodput, "planned_goodput", "goodput of planned"},
      {SweepFigure::kQueued, "queued_share", "queued"},
      {SweepFigure::kQueuedKvFull, "queued_kv_full_share", "queued, KV full"},
      {SweepFigure::kComputedTokens, "computed_tokens", "computed"},
      {SweepFigure::kMovedTurns, "moved_turns", "moved turns"},
      {SweepFigure::kSimLagP99, "sim_lag_p99_s", "sim lag p99"},
      {SweepFigure::kRunningMostOverMean, "running_most_over_mean", "running, most / mean"},
  }};
  return kFigures;
}

SweepFigureValues SweepFiguresOf(const RunSummary& summary) {
  SweepFigureValues v;
  v.fill(kNotMeasured);
  // classes[0] is "ALL" (stats.h); its distributions are NaN when nothing succeeded.
  if (!summary.classes.empty() && summary.classes.front().klass == "ALL") {
    const ClassSummary& all = summary.classes.front();
    v[Index(SweepFigure::kTtftP50)] = all.ttft.p50;
    v[Index(SweepFigure::kTtftP90)] = all.ttft.p90;
    v[Index(SweepFigure::kTtftP99)] = all.ttft.p99;
    v[Index(SweepFigure::kTpotP99)] = all.tpot.p99;
    if (all.goodput >= 0) v[Index(SweepFigure::kGoodput)] = all.goodput;
  }
  for (const ClassSummary& c : summary.classes) {
    if (c.klass == "HEAVY" && c.requests > 0) v[Index(SweepFigure::kHeavyTtftP90)] = c.ttft.p90;
  }
  if (summary.floor_split.floor.n > 0) {
    v[Index(SweepFigure::kTtftFloorP90)] = summary.floor_split.floor.p90;
  }
  if (summary.prompt_tokens > 0) {
    v[Index(SweepFigure::kPrefixHit)] = summary.hit_ratio;
    const double of_pooled = summary.hit_of_pooled();
    if (of_pooled >= 0) v[Index(SweepFigure::kHitOfPooled)] = of_pooled;
  }
  v[Index(SweepFigure::kRequests)] = static_cast<double>(summary.requests);
  v[Index(SweepFigure::kOffloads)] = static_cast<double>(summary.offloads);
  v[Index(SweepFigure::kErrors)] = static_cast<double>(summary.errors + summary.dropped);
  v[Index(SweepFigure::kServed)] = static_cast<double>(summary.served);
  v[Index(SweepFigure::kShed)] = static_cast<double>(summary.shed);
  if (summary.requests > 0) v[Index(SweepFigure::kShedShare)] = summary.shed_share;
  v[Index(SweepFigure::kFailed)] = static_cast<double>(summary.failed);
  v[Index(SweepFigure::kGaveUp)] = static_cast<double>(summary.gave_up);
  if (summary.job_completion.n > 0) v[Index(SweepFigure::kJobMean)] = summary.job_completion.mean;
  if (summary.jobs > 0) {
    v[Index(SweepFigure::kJobsDone)] =
        static_cast<double>(summary.jobs_ok) / static_cast<double>(summary.jobs);
  }
  if (summary.planned_goodput >= 0) {
    v[Index(SweepFigure::kPlannedGoodput)] = summary.planned_goodput;
  }
  if (summary.prompt_tokens > 0) {
    v[Index(SweepFigure::kComputedTokens)] =
        static_cast<double>(summary.prompt_tokens - summary.cached_tokens);
  }
  if (summary.session_turns.known()) {
    v[Index(SweepFigure::kMovedTurns)] = static_cast<double>(summary.session_turns.moved.turns);
  }
  if (summary.sim_lag_p99 >= 0) v[Index(SweepFigure::kSimLagP99)] = summary.sim_lag_p99;
  if (const InstanceRange running = LoadSpreadOf(summary.instances).running;
      running.n >= 2 && running.mean > 0) {
    v[Index(SweepFigure::kRunningMostOverMean)] = running.max_over_mean();
  }
  if (summary.queued_share >= 0) {
    v[Index(SweepFigure::kQueued)] = summary.queued_share;
    v[Index(SweepFigure::kQueuedKvFull)] = summary.queued_kv_full_share;
  }
  return v;
}

Spread SpreadOf(const std::vector<double>& values) {
  std::vector<double> finite;
  for (double v : values) {
    if (std::isfinite(v)) finite.push_back(v);
  }
  Spread s;
  s.n = static_cast<int64_t>(finite.size());
  if (finite.empty()) return s;
  std::sort(finite.begin(), finite.end());
  const size_t mid = finite.size() / 2;
  s.median = finite.size() % 2 == 1 ? finite[mid] : (finite[mid - 1] + finite[mid]) / 2;
  s.min = finite.front();
  s.max = finite.back();
  return s;
}

std::string_view VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kWin:
      return "win";
    case Verdict::kTie:
      return "tie";
    case Verdict::kLose:
      return "lose";
    case Verdict::kTooFewSeeds:
      break;
  }
  return "-";
}

Verdict Judge(const Spread& candidate, const Spread& reference) {
  if (candidate.n < 2 || reference.n < 2) return Verdict::kTooFewSeeds;
  if (candidate.max < reference.min) return Verdict::kWin;
  if (candidate.min > reference.max) return Verdict::kLose;
  return Verdict::kTie;
}

const SweepCell* SweepTable::Find(double jobs_per_second, std::string_view config) const {
  for (const SweepCell& c : cells) {
    if (c.jobs_per_second == jobs_per_second && c.config == config) return &c;
  }
  return nullptr;
}

SweepTable AggregateSweep(const std::vector<SweepSample>& samples) {
  SweepTable t;
  for (const SweepSample& s : samples) {
    if (std::find(t.rates.begin(), t.rates.end(), s.jobs_per_second) == t.rates.end()) {
      t.rates.push_back(s.jobs_per_second);
    }
    if (std::find(t.configs.begin(), t.configs.end(), s.config) == t.configs.end()) {
      t.configs.push_back(s.config);
    }
    if (std::find(t.seeds.begin(), t.seeds.end(), s.seed) == t.seeds.end()) {
      t.seeds.push_back(s.seed);
    }
  }
  std::sort(t.rates.begin(), t.rates.end());
  for (double rate : t.rates) {
    for (const std::string& config : t.configs) {
      SweepCell cell{
          .jobs_per_second = rate, .config = config, .figures = {}, .by_seed = {}, .repeats = 0};
      for (uint64_t seed : t.seeds) {
        // The seed's runs, each figure's mean over the runs that measured it.
        SweepFigureValues sum{}, mean{};
        std::array<int, kSweepFigureCount> measured{};
        int runs = 0;
        for (const SweepSample& s : samples) {
          if (s.jobs_per_second != rate || s.config != config || s.seed != seed) continue;
          ++runs;
          for (size_t f = 0; f < kSweepFigureCount; ++f) {
            if (!std::isfinite(s.figures[f])) continue;
            sum[f] += s.figures[f];
            ++measured[f];
          }
        }
        if (runs == 0) continue;
        for (size_t f = 0; f < kSweepFigureCount; ++f) {
          mean[f] = measured[f] > 0 ? sum[f] / measured[f] : kNotMeasured;
        }
        cell.by_seed.emplace_back(seed, mean);
        cell.repeats = std::max(cell.repeats, runs);
      }
      if (cell.by_seed.empty()) continue;
      std::array<std::vector<double>, kSweepFigureCount> values;
      for (const auto& [seed, figures] : cell.by_seed) {
        for (size_t f = 0; f < kSweepFigureCount; ++f) values[f].push_back(figures[f]);
      }
      for (size_t f = 0; f < kSweepFigureCount; ++f) cell.figures[f] = SpreadOf(values[f]);
      t.cells.push_back(std::move(cell));
    }
  }
  return t;
}

std::vector<RegimeEntry> RegimeMap(const SweepTable& table,
                                   const std::vector<std::string>& references) {
  std::vector<RegimeEntry> out;
  for (const std::string& reference : references) {
    for (double rate : table.rates) {
      const SweepCell* ref = table.Find(rate, reference);
      if (ref == nullptr) continue;
      for (const std::string& config : table.configs) {
        if (config == reference) continue;
        const SweepCell* cell = table.Find(rate, config);
        if (cell == nullptr) continue;
        RegimeEntry e{
            .jobs_per_second = rate, .config = config, .reference = reference, .judgements = {}};
        for (SweepFigure f : kRegimeFigures) {
          const Spread& c = cell->figures[Index(f)];
          const Spread& r = ref->figures[Index(f)];
          RegimeJudgement j{
              .figure = f, .verdict = Judge(c, r), .ratio = kNotMeasured, .paired_ratio = {}};
          if (c.n > 0 && r.n > 0 && r.median > 0) j.ratio = c.median / r.median;
          std::vector<double> paired;
          for (const auto& [seed, figures] : cell->by_seed) {
            for (const auto& [ref_seed, ref_figures] : ref->by_seed) {
              const double v = figures[Index(f)], rv = ref_figures[Index(f)];
              if (ref_seed == seed && std::isfinite(v) && std::isfinite(rv) && rv > 0) {
                paired.push_back(v / rv);
              }
            }
          }
          j.paired_ratio = SpreadOf(paired);
          e.judgements.push_back(j);
        }
        out.push_back(std::move(e));
      }
    }
  }
  return out;
}

json::value SweepJson(const Sweep& sweep) {
  const SweepTable table = AggregateSweep(sweep.samples);
  const auto& figures = SweepFigures();
  json::object o;
  o["title"] = "kvroute load sweep";
  o["generated_at"] = sweep.generated_at;
  json::object setup;
  for (const auto& [k, v] : sweep.setup) setup[k] = v;
  o["setup"] = std::move(setup);
  o["tie_rule"] = kTieRule;
  o["jobs_per_second"] = json::value_from(table.rates);
  o["seeds"] = json::value_from(table.seeds);
  o["configs"] = json::value_from(table.configs);
  o["references"] = json::value_from(sweep.references);

  json::array samples;
  for (const SweepSample& s : sweep.samples) {
    json::object fig;
    for (const SweepFigureInfo& f : figures) fig[f.key] = Num(s.figures[Index(f.figure)]);
    samples.push_back(json::object{{"jobs_per_second", s.jobs_per_second},
                                   {"seed", s.seed},
                                   {"repeat", s.repeat},
                                   {"config", s.config},
                                   {"figures", std::move(fig)}});
  }
  o["samples"] = std::move(samples);

  json::array cells;
  for (const SweepCell& c : table.cells) {
    json::object fig;
    for (const SweepFigureInfo& f : figures) {
      fig[f.key] = SpreadJson(c.figures[Index(f.figure)]);
    }
    json::array seeds;
    for (const auto& [seed, values] : c.by_seed) seeds.push_back(seed);
    cells.push_back(json::object{{"jobs_per_second", c.jobs_per_second},
                                 {"config", c.config},
                                 {"seeds", std::move(seeds)},
                                 {"repeats", c.repeats},
                                 {"figures", std::move(fig)}});
  }
  o["cells"] = std::move(cells);

  json::array regime;
  for (const RegimeEntry& e : RegimeMap(table, sweep.references)) {
    json::object fig;
    for (const RegimeJudgement& j : e.judgements) {
      fig[figures[Index(j.figure)].key] =
          json::object{{"verdict", VerdictName(j.verdict)},
                       {"median_ratio", Num(j.ratio)},
                       {"paired_ratio", SpreadJson(j.paired_ratio)}};
    }
    regime.push_back(json::object{{"jobs_per_second", e.jobs_per_second},
                                  {"config", e.config},
                                  {"reference", e.reference},
                                  {"figures", std::move(fig)}});
  }
  o["regime_map"] = std::move(regime);

  json::array compared;
  for (const SweepComparison& c : sweep.comparisons) {
    compared.push_back(json::object{{"jobs_per_second", c.jobs_per_second},
                                    {"seed", c.seed},
                                    {"config", c.config},
                                    {"reference", c.reference},
                                    {"comparison", ComparisonJson(c.comparison)}});
  }
  o["comparisons"] = std::move(compared);
  return o;
}

std::string SweepMarkdown(const Sweep& sweep) {
  const SweepTable table = AggregateSweep(sweep.samples);
  std::string md = "# kvroute load sweep\n\n";
  if (!sweep.generated_at.empty()) absl::StrAppend(&md, "Generated ", sweep.generated_at, ".\n\n");
  for (const auto& [k, v] : sweep.setup) absl::StrAppend(&md, "- **", k, "**: ", v, "\n");
  absl::StrAppend(&md, "- **jobs/s**: ",
                  absl::StrJoin(table.rates, ", ",
                                [](std::string* out, double r) { out->append(RateLabel(r)); }),
                  "; **seeds**: ", absl::StrJoin(table.seeds, ", "));
  int repeats = 1;
  for (const SweepCell& c : table.cells) repeats = std::max(repeats, c.repeats);
  if (repeats > 1) {
    absl::StrAppend(&md, "; **runs of each point**: ", repeats,
                    " (a seed's figure is the mean over its runs)");
  }
  absl::StrAppend(&md, "\n\n");

  const std::vector<RegimeEntry> regime = RegimeMap(table, sweep.references);
  for (const std::string& reference : sweep.references) {
    std::vector<std::string> others;
    for (const std::string& c : table.configs) {
      if (c != reference) others.push_back(c);
    }
    absl::StrAppend(&md, "## Regime map against ", reference, "\n\n");
    std::vector<std::string> labels;
    for (SweepFigure f : kRegimeFigures) labels.emplace_back(FigureLabel(f));
    absl::StrAppend(&md, "Each cell: ", absl::StrJoin(labels, " / "),
                    " verdict, the ratio of medians over the seeds (configuration / ", reference,
                    ") and in parentheses the range of the paired ratios (the two "
                    "at the same seed, same arrivals). ",
                    kTieRule, ".\n\n");
    std::vector<std::string> header = {"jobs/s"};
    header.insert(header.end(), others.begin(), others.end());
    std::vector<std::vector<std::string>> rows;
    for (double rate : table.rates) {
      std::vector<std::string> row = {RateLabel(rate)};
      bool any = false;
      for (const std::string& c : others) {
        auto it = std::find_if(regime.begin(), regime.end(), [&](const RegimeEntry& e) {
          return e.reference == reference && e.config == c && e.jobs_per_second == rate;
        });
        if (it == regime.end()) {
          row.emplace_back("-");
          continue;
        }
        any = true;
        std::vector<std::string> parts;
        for (const RegimeJudgement& j : it->judgements) parts.push_back(FormatJudgement(j));
        row.push_back(absl::StrJoin(parts, " / "));
      }
      if (any) rows.push_back(std::move(row));
    }
    if (rows.empty()) {
      absl::StrAppend(&md, "(", reference, " has not run at any measured rate.)\n\n");
    } else {
      AppendTable(&md, header, {true}, rows);
      absl::StrAppend(&md, "\n");
    }
  }

  AppendComparisons(&md, sweep);

  absl::StrAppend(&md,
                  "## Figures over the seeds\n\nMedian [min–max] over the seeds; "
                  "latencies in modelled seconds over all requests (HEAVY TTFT p90: the "
                  "HEAVY class's; TTFT floor p90: the compute floor's, the TTFT p90 with no "
                  "queueing at the run's cache hits, report.md's \"TTFT: queue and compute "
                  "floor\"); goodput: the share of requests meeting their class's TTFT "
                  "SLO and the TPOT SLO (each point's report.md); hit / pooled: each run's "
                  "prefix hit over its own pooled-LRU yardstick; errors count unsuccessful "
                  "requests and dropped arrivals; of the requests sent, served succeeded, shed "
                  "were answered HTTP 429 before any stream (shed share of those sent), failed "
                  "met another error once sent and gave up were abandoned at the client's "
                  "timeout; jobs done: the share of agentic jobs that completed (a job "
                  "whose turn was shed past its client's retries sends no more, which "
                  "goodput does not count); goodput of planned: the turns that met their "
                  "SLOs over the turns the agentic jobs planned, those never sent "
                  "included; sim lag p99: how far the simulated fleet's clock ran behind the "
                  "wall clock (each point's report.md, \"Simulator lag\"), modelled "
                  "seconds; running, most / mean: the requests running on the busiest "
                  "instance over the fleet's mean, 1 when even (report.md, \"Load per "
                  "instance\").\n\n");
  std::vector<std::string> header = {"jobs/s", "config", "seeds"};
  std::vector<bool> right = {true, false, true};
  for (const SweepFigureInfo& f : SweepFigures()) {
    header.emplace_back(f.label);
    right.push_back(true);
  }
  std::vector<std::vector<std::string>> rows;
  for (const SweepCell& c : table.cells) {
    std::vector<std::string> row = {RateLabel(c.jobs_per_second), c.config,
                                    absl::StrCat(c.by_seed.size())};
    for (const SweepFigureInfo& f : SweepFigures()) {
      row.push_back(FormatSpread(f.figure, c.figures[Index(f.figure)]));
    }
    rows.push_back(std::move(row));
  }
  AppendTable(&md, header, right, rows);

  absl::StrAppend(&md, "\nEach point's ablation report: `jps-<rate>/seed-<seed>/",
                  repeats > 1 ? "run-<k>/" : "", "report.md`.\n");
  return md;
}

absl::Status WriteSweep(const Sweep& sweep, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  const std::pair<std::string, std::string> files[] = {
      {"sweep.json", json::serialize(SweepJson(sweep)) + "\n"}, {"sweep.md", SweepMarkdown(sweep)}};
  for (const auto& [name, text] : files) {
    const fs::path p = fs::path(dir) / name;
    std::ofstream out(p);
    out << text;
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", p.string()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SweepComparison>> ComparePoint(
    const std::vector<Report>& repeats, double jobs_per_second, uint64_t seed,
    const std::vector<std::string>& references, const CompareOptions& options) {
  std::vector<SweepComparison> out;
  if (repeats.empty()) return out;
  // A configuration's runs over the repeats, labelled "<name>" or "<name>, run <k>".
  auto runs_of = [&](const std::string& name) {
    std::vector<ComparedRun> runs;
    for (size_t k = 0; k < repeats.size(); ++k) {
      for (const RunResult& r : repeats[k].runs) {
        if (r.name != name) continue;
        runs.push_back(
            ComparedRunOf(r, repeats.size() == 1 ? name : absl::StrCat(name, ", run ", k + 1)));
      }
    }
    return runs;
  };
  for (const std::string& reference : references) {
    const std::vector<ComparedRun> a = runs_of(reference);
    if (a.empty()) continue;
    for (const RunResult& run : repeats.front().runs) {
      if (run.name == reference) continue;
      absl::StatusOr<Comparison> c = CompareRuns(a, runs_of(run.name), options);
      if (!c.ok()) {
        return absl::Status(c.status().code(),
                            absl::StrCat("comparing ", run.name, " with ", reference, " at ",
                                         RateLabel(jobs_per_second), " jobs/s, seed ", seed, ": ",
                                         c.status().message()));
      }
      out.push_back({.jobs_per_second = jobs_per_second,
                     .seed = seed,
                     .config = run.name,
                     .reference = reference,
                     .comparison = *std::move(c)});
    }
  }
  return out;
}

absl::Status ValidateSweep(const SweepOptions& options, const WorkloadSpec& base) {
  if (base.kind != WorkloadKind::kAgentic ||
      (!base.agentic.preset.empty() && !IsLongPreset(base.agentic))) {
    return absl::InvalidArgumentError(
        "sweep varies --jps: it needs --workload agentic or agentic-long (traces set their "
        "own arrivals)");
  }
  if (!options.ablation.targets.empty()) {
    return absl::InvalidArgumentError(
        "sweep runs on the embedded simulated fleet only (given targets keep warm caches "
        "from point to point)");
  }
  if (options.jobs_per_second.empty()) {
    return absl::InvalidArgumentError("sweep needs at least one rate in --jps");
  }
  absl::flat_hash_set<double> rates;
  for (double r : options.jobs_per_second) {
    if (!std::isfinite(r) || r <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("--jps: rates must be positive, got ", r));
    }
    if (!rates.insert(r).second) {
      return absl::InvalidArgumentError(absl::StrCat("--jps: rate ", r, " given twice"));
    }
  }
  if (options.seeds.empty()) return absl::InvalidArgumentError("sweep needs at least one seed");
  if (options.repeats < 1 || options.repeats > 20) {
    return absl::InvalidArgumentError(
        absl::StrCat("--repeats: expected 1 to 20 runs of each point, got ", options.repeats));
  }
  absl::flat_hash_set<uint64_t> seeds;
  for (uint64_t s : options.seeds) {
    if (!seeds.insert(s).second) {
      return absl::InvalidArgumentError(absl::StrCat("--seeds: seed ", s, " given twice"));
    }
  }
  const absl::StatusOr<std::vector<std::string>> configured = ConfigNames(options.ablation);
  if (!configured.ok()) return configured.status();
  const std::vector<std::string>& names = *configured;
  if (names.empty()) return absl::InvalidArgumentError("sweep needs at least one mode");
  for (const std::string& r : options.references) {
    if (std::find(names.begin(), names.end(), r) == names.end()) {
      return absl::InvalidArgumentError(absl::StrCat("--references: ", r,
                                                     " is not one of the configurations (",
                                                     absl::StrJoin(names, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

WorkloadSpec SweepPointWorkload(const WorkloadSpec& base, double jobs_per_second, uint64_t seed) {
  WorkloadSpec w = base;
  if (IsLongPreset(base.agentic)) {
    const AgenticOptions::LongPresetInputs& in = base.agentic.long_preset;
    w.agentic = AgenticLongPreset(in.fleet_kv_tokens, in.working_set_ratio, in.arrival_window_s,
                                  seed, in.tool_time_s, in.tool_time_max_s, in.tool_time_p99_s);
    w.agentic.client = base.agentic.client;
  }
  w.agentic.jobs_per_second = jobs_per_second;
  w.agentic.seed = seed;
  w.trace.seed = seed;
  return w;
}

std::string SweepPointDir(const std::string& out_dir, double jobs_per_second, uint64_t seed) {
  return (fs::path(out_dir) / absl::StrCat("jps-", RateLabel(jobs_per_second)) /
          absl::StrCat("seed-", seed))
      .string();
}

std::string SweepRunDir(const std::string& out_dir, double jobs_per_second, uint64_t seed,
                        int repeat, int repeats) {
  const std::string point = SweepPointDir(out_dir, jobs_per_second, seed);
  if (repeats <= 1) return point;
  return (fs::path(point) / absl::StrCat("run-", repeat)).string();
}

absl::StatusOr<Sweep> RunSweep(const SweepOptions& options, const WorkloadSpec& base) {
  if (absl::Status s = ValidateSweep(options, base); !s.ok()) return s;
  const AblationOptions& a = options.ablation;
  Sweep sweep;
  sweep.generated_at = a.generated_at;
  sweep.references = options.references;
  const std::vector<std::string> names = *ConfigNames(a);
  const AgenticOptions& w = base.agentic;
  const std::string workload =
      IsLongPreset(w)
          ? absl::StrFormat(
                "agentic-long: sessions' working set %g x %d tokens of fleet KV, the job count "
                "by the preset's sizing rule at each seed, arriving at the point's rate within "
                "%.0f s, tool time %s; the same planned arrivals for every configuration "
                "at a (rate, seed)",
                w.long_preset.working_set_ratio, w.long_preset.fleet_kv_tokens,
                w.long_preset.arrival_window_s, AgenticToolTimeDescription(w))
          : absl::StrFormat(
                "agentic, %.0f s of arrivals, %d turns, system %d + task %s tokens, "
                "%d completion tokens per turn, tool time %.2f s; the same planned "
                "arrivals for every configuration at a (rate, seed)",
                w.duration_s, w.turns, w.system_tokens,
                w.task_tokens_max > w.task_tokens
                    ? absl::StrCat(w.task_tokens, "-", w.task_tokens_max)
                    : absl::StrCat(w.task_tokens),
                w.completion_tokens, w.tool_time_s);
  sweep.setup = {
      {"workload", workload},
      {"client", RunClientDescription(w.client, a.run_template)},
      {"fleet", absl::StrFormat("kvroute-sim, %d instances, profile %s, time scale %g, sim seed "
                                "%d; a fresh fleet per configuration and point",
                                a.instances, a.profile.empty() ? "(default)" : a.profile,
                                a.sim_time_scale, a.sim_seed) +
                    FleetExtrasDescription(a)},
      {"configurations", absl::StrJoin(names, ", ")},
  };
  if (!a.variants.empty()) {
    std::vector<std::string> variants;
    for (const ConfigVariant& v : a.variants) variants.push_back(ConfigVariantDescription(v));
    sweep.setup.emplace_back("variants", absl::StrJoin(variants, "; "));
  }

  if (options.repeats > 1) {
    sweep.setup.emplace_back(
        "repeats", absl::StrCat(options.repeats, " runs of each point, each on fresh fleets"));
  }

  const size_t points = options.jobs_per_second.size() * options.seeds.size();
  size_t done = 0;
  for (double rate : options.jobs_per_second) {
    for (uint64_t seed : options.seeds) {
      ++done;
      std::vector<Report> repeats;
      for (int k = 1; k <= options.repeats; ++k) {
        AblationOptions point = a;
        point.out_dir = SweepRunDir(a.out_dir, rate, seed, k, options.repeats);
        WorkloadSpec workload = SweepPointWorkload(base, rate, seed);
        spdlog::info("sweep point {}/{}: {} jobs/s, seed {}, run {}/{} ({})", done, points,
                     RateLabel(rate), seed, k, options.repeats, point.out_dir);
        absl::StatusOr<Report> report = RunAblation(point, workload);
        if (!report.ok()) {
          return absl::Status(report.status().code(),
                              absl::StrCat("sweep point ", RateLabel(rate), " jobs/s, seed ", seed,
                                           ", run ", k, ": ", report.status().message()));
        }
        if (options.on_point) options.on_point(rate, seed, *report);
        const std::vector<RunSummary> summaries = SummarizeAll(*report);
        for (size_t i = 0; i < summaries.size() && i < report->runs.size(); ++i) {
          sweep.samples.push_back({.jobs_per_second = rate,
                                   .seed = seed,
                                   .config = report->runs[i].name,
                                   .figures = SweepFiguresOf(summaries[i]),
                                   .repeat = k});
        }
        repeats.push_back(*std::move(report));
        if (k < options.repeats) {
          if (absl::Status s = WriteSweep(sweep, a.out_dir); !s.ok()) return s;
        }
      }
      absl::StatusOr<std::vector<SweepComparison>> compared =
          ComparePoint(repeats, rate, seed, options.references, options.compare);
      if (!compared.ok()) return compared.status();
      sweep.comparisons.insert(sweep.comparisons.end(), compared->begin(), compared->end());
      if (absl::Status s = WriteSweep(sweep, a.out_dir); !s.ok()) return s;
    }
  }
  return sweep;
}

}  // namespace kvroute::bench
