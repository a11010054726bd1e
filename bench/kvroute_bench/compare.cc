#include "bench/kvroute_bench/compare.h"

#include <algorithm>
#include <array>
#include <boost/json.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/kvroute_bench/stats.h"

namespace kvroute::bench {
namespace json = boost::json;
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double Number(const json::object& o, std::string_view key, double otherwise) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return otherwise;
  if (v->is_double()) return v->get_double();
  if (v->is_int64()) return static_cast<double>(v->get_int64());
  if (v->is_uint64()) return static_cast<double>(v->get_uint64());
  return otherwise;  // null: unknown
}

int64_t Integer(const json::object& o, std::string_view key, int64_t otherwise) {
  const double d = Number(o, key, static_cast<double>(otherwise));
  return std::isfinite(d) ? static_cast<int64_t>(d) : otherwise;
}

std::string String(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->get_string()) : std::string();
}

bool Boolean(const json::object& o, std::string_view key, bool otherwise) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_bool() ? v->get_bool() : otherwise;
}

RequestOutcome OutcomeFromName(std::string_view name) {
  if (name == "shed") return RequestOutcome::kShed;
  if (name == "gave_up") return RequestOutcome::kGaveUp;
  return RequestOutcome::kFailed;
}

absl::StatusOr<std::string> FindReport(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    if (!fs::exists(path, ec)) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return path;
  }
  std::vector<std::string> found;
  for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec) && it->path().filename() == "report.json") {
      found.push_back(it->path().string());
    }
  }
  std::sort(found.begin(), found.end());
  if (found.size() == 1) return found.front();
  if (found.empty()) return absl::NotFoundError(absl::StrCat(path, ": no report.json under it"));
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", found.size(),
                                                 " report.json files under it (", found.front(),
                                                 ", ...); name one"));
}

// What one draw needs of a unit: its served TTFTs and its goodput counts, per run.
struct UnitSide {
  std::vector<double> ttft;  // modelled seconds
  int64_t slo_requests = 0;
  int64_t slo_met = 0;
  int64_t planned_turns = 0;
  double job_s = -1;  // its job's time, arrival to last answer (modelled seconds); -1: none
  bool present = false;
};

// One unit in every run compared: A's repeats, then B's.
struct Unit {
  std::vector<UnitSide> runs;
  bool job = false;
};

constexpr int kFigures = static_cast<int>(kComparedFigures.size());
// Where the figures that not every pair of runs has sit in kComparedFigures.
constexpr int kPlannedGoodputFigure = 4;
constexpr int kJobTimeFigure = 5;
constexpr int kSessionsCompletedFigure = 6;

// The figures of one set of units (with multiplicity) for one run, in kComparedFigures' order;
// NaN where a run has none.
using Figures = std::array<double, kFigures>;

Figures FiguresOf(const std::vector<Unit>& units, const std::vector<size_t>& draw, size_t run,
                  bool plans_known) {
  std::vector<double> ttft;
  int64_t slo_requests = 0, slo_met = 0, planned = 0, jobs = 0, jobs_done = 0;
  double job_s = 0;
  for (size_t i : draw) {
    const UnitSide& u = units[i].runs[run];
    ttft.insert(ttft.end(), u.ttft.begin(), u.ttft.end());
    slo_requests += u.slo_requests;
    slo_met += u.slo_met;
    planned += u.planned_turns;
    jobs += u.planned_turns > 0 ? 1 : 0;
    if (u.job_s >= 0) {
      job_s += u.job_s;
      ++jobs_done;
    }
  }
  const Distribution d = Describe(ttft);
  Figures f = {d.p50, d.p90, d.p99, kNaN, kNaN, kNaN, kNaN};
  if (slo_requests > 0) f[3] = static_cast<double>(slo_met) / static_cast<double>(slo_requests);
  if (plans_known && planned > 0) {
    f[kPlannedGoodputFigure] = static_cast<double>(slo_met) / static_cast<double>(planned);
    f[kSessionsCompletedFigure] = static_cast<double>(jobs_done) / static_cast<double>(jobs);
  }
  if (jobs_done > 0) f[kJobTimeFigure] = job_s / static_cast<double>(jobs_done);
  return f;
}

std::string Cell(double v, bool share) {
  if (!std::isfinite(v)) return "-";
  return share ? absl::StrFormat("%.1f %%", 100 * v) : absl::StrFormat("%.3g", v);
}

std::string SignedCell(double v, bool share) {
  if (!std::isfinite(v)) return "-";
  // A share that rounds to zero is +0.0, not -0.0.
  const double points = std::abs(100 * v) < 0.05 ? 0.0 : 100 * v;
  return share ? absl::StrFormat("%+.1f pt", points) : absl::StrFormat("%+.3g", v);
}

json::value Num(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

// Goodputs and the sessions completed are shares, written in percent and points; the rest
// are seconds.
bool IsShare(const FigureComparison& f) {
  return f.label.rfind("goodput", 0) == 0 || f.label == kComparedFigures[kSessionsCompletedFigure];
}

}  // namespace

absl::StatusOr<ComparedRun> ComparedRunFromJson(const json::value& report, const std::string& run,
                                                const std::string& source) {
  const json::object* root = report.if_object();
  const json::value* runs_value = root != nullptr ? root->if_contains("runs") : nullptr;
  if (runs_value == nullptr || !runs_value->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(source,
                                                   ": not a kvroute-bench report.json "
                                                   "(no \"runs\" array)"));
  }
  const json::array& runs = runs_value->get_array();
  std::vector<std::string> names;
  const json::object* chosen = nullptr;
  for (const json::value& r : runs) {
    if (!r.is_object()) continue;
    names.push_back(String(r.get_object(), "name"));
    if (!run.empty() && names.back() == run) chosen = &r.get_object();
  }
  if (run.empty() && names.size() == 1) chosen = &runs[0].get_object();
  if (chosen == nullptr) {
    return absl::InvalidArgumentError(run.empty()
                                          ? absl::StrCat(source, ": ", names.size(),
                                                         " runs; name one with --run-a/--run-b (",
                                                         absl::StrJoin(names, ", "), ")")
                                          : absl::StrCat(source, ": no run named '", run, "' (",
                                                         absl::StrJoin(names, ", "), ")"));
  }
  ComparedRun out;
  out.label = absl::StrCat(source, ": ", String(*chosen, "name"));
  out.time_scale = Number(*chosen, "time_scale", 1.0);
  if (!(out.time_scale > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": time_scale must be positive"));
  }
  if (const json::value* s = chosen->if_contains("summary"); s != nullptr && s->is_object()) {
    out.dropped = Integer(s->get_object(), "dropped", 0);
    out.sim_lag_p99_s = Number(s->get_object(), "sim_lag_p99_s", -1);
    if (const json::value* slo = s->get_object().if_contains("slo");
        slo != nullptr && slo->is_object()) {
      const json::object& o = slo->get_object();
      out.slo.ttft_warm_s = Number(o, "ttft_warm_s", out.slo.ttft_warm_s);
      out.slo.ttft_medium_s = Number(o, "ttft_medium_s", out.slo.ttft_medium_s);
      out.slo.ttft_heavy_s = Number(o, "ttft_heavy_s", out.slo.ttft_heavy_s);
      out.slo.tpot_s = Number(o, "tpot_s", out.slo.tpot_s);
      // Reports written before the workload's classes measured goodput by the router's.
      const std::string class_name = String(o, "class");
      absl::StatusOr<SloClassSource> parsed =
          ParseSloClassSource(class_name.empty() ? "router" : class_name);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            source, ": summary.slo.class must be router or workload, got '", class_name, "'"));
      }
      out.slo.class_source = *parsed;
    }
  }
  if (const json::value* reqs = chosen->if_contains("requests"); reqs != nullptr) {
    if (!reqs->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": \"requests\" is not an array"));
    }
    for (const json::value& v : reqs->get_array()) {
      if (!v.is_object()) continue;
      const json::object& o = v.get_object();
      RequestRecord r;
      r.request_id = String(o, "id");
      r.job = Integer(o, "job", -1);
      r.turn = static_cast<int>(Integer(o, "turn", 0));
      r.trace_index = Integer(o, "trace_index", -1);
      r.klass = String(o, "class");
      r.error = String(o, "error");
      const std::string outcome = String(o, "outcome");
      if (r.error.empty() && !outcome.empty() && outcome != "ok") r.error = outcome;
      r.failure = OutcomeFromName(outcome);
      r.ttft = Number(o, "ttft", -1);
      r.tpot = Number(o, "tpot", -1);
      r.prompt_tokens = Integer(o, "prompt_tokens", -1);
      r.bound_cached_tokens = Integer(o, "bound_cached_tokens", -1);
      out.requests.push_back(std::move(r));
    }
  }
  if (const json::value* jobs = chosen->if_contains("jobs"); jobs != nullptr && jobs->is_array()) {
    for (const json::value& v : jobs->get_array()) {
      if (!v.is_object()) continue;
      JobRecord j;
      j.job = Integer(v.get_object(), "job", -1);
      j.planned_turns = Integer(v.get_object(), "planned_turns", 0);
      j.t_arrival = Number(v.get_object(), "t_arrival", 0);
      j.t_done = Number(v.get_object(), "t_done", -1);
      j.ok = Boolean(v.get_object(), "ok", false);
      out.jobs.push_back(j);
    }
  }
  return out;
}

absl::StatusOr<ComparedRun> ReadComparedRun(const std::string& path, const std::string& run) {
  absl::StatusOr<std::string> file = FindReport(path);
  if (!file.ok()) return file.status();
  std::ifstream in(*file);
  if (!in) return absl::NotFoundError(absl::StrCat(*file, ": cannot read"));
  std::stringstream text;
  text << in.rdbuf();
  json::error_code ec;
  const json::value v = json::parse(text.str(), ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat(*file, ": ", ec.message()));
  return ComparedRunFromJson(v, run, *file);
}

absl::StatusOr<Comparison> CompareRuns(const std::vector<ComparedRun>& a,
                                       const std::vector<ComparedRun>& b,
                                       const CompareOptions& options) {
  if (a.empty() || b.empty()) return absl::InvalidArgumentError("no run to compare");
  if (options.resamples < 1) {
    return absl::InvalidArgumentError("--resamples must be at least 1");
  }
  if (!(options.confidence > 0 && options.confidence < 1)) {
    return absl::InvalidArgumentError("--confidence must be in (0, 1)");
  }
  if (!(options.max_sim_lag_s >= 0)) {
    return absl::InvalidArgumentError("--max-sim-lag must be at least 0");
  }
  std::vector<const ComparedRun*> runs;  // A's repeats, then B's
  for (const ComparedRun& r : a) runs.push_back(&r);
  for (const ComparedRun& r : b) runs.push_back(&r);
  auto slo_of = [&](const ComparedRun& r) {
    SloTargets slo = r.slo;
    if (options.slo_class) slo.class_source = *options.slo_class;
    return slo;
  };
  for (const ComparedRun* r : runs) {
    if (slo_of(*r) != slo_of(*runs.front())) {
      return absl::InvalidArgumentError(
          "the runs measured goodput against different SLOs (summary.slo): not comparable");
    }
  }
  // Units: a session's key is its job (its plan from the run's jobs, sent or not); a request
  // without one is its own unit, paired by its trace index when it has one.
  std::map<std::pair<int64_t, int64_t>, size_t> index;
  std::vector<Unit> units;
  auto unit = [&](std::pair<int64_t, int64_t> key, bool job) -> Unit& {
    auto [it, inserted] = index.try_emplace(key, units.size());
    if (inserted) {
      Unit& u = units.emplace_back();
      u.job = job;
      u.runs.resize(runs.size());
    }
    return units[it->second];
  };
  for (size_t r = 0; r < runs.size(); ++r) {
    const ComparedRun& run = *runs[r];
    const SloTargets slo = slo_of(run);
    for (const JobRecord& j : run.jobs) {
      if (j.job < 0) continue;
      UnitSide& u = unit({0, j.job}, true).runs[r];
      u.planned_turns = j.planned_turns;
      if (const double job_s = j.Seconds(); job_s >= 0) u.job_s = job_s / run.time_scale;
    }
    int64_t loose = 0;
    for (const RequestRecord& q : run.requests) {
      const std::pair<int64_t, int64_t> key =
          q.job >= 0           ? std::make_pair(int64_t{0}, q.job)
          : q.trace_index >= 0 ? std::make_pair(int64_t{1}, q.trace_index)
                               : std::make_pair(static_cast<int64_t>(2 + r), loose++);
      UnitSide& u = unit(key, q.job >= 0).runs[r];
      u.present = true;
      if (q.ok() && q.ttft >= 0) u.ttft.push_back(q.ttft / run.time_scale);
      if (CountsForGoodput(q, slo)) {
        ++u.slo_requests;
        u.slo_met += MeetsSlos(q, slo, run.time_scale) ? 1 : 0;
      }
    }
  }
  const size_t n_a = a.size();
  Comparison c;
  auto label = [](const std::vector<ComparedRun>& side) {
    if (side.size() == 1) return side.front().label;
    std::vector<std::string> labels;
    for (const ComparedRun& r : side) labels.push_back(r.label);
    return absl::StrCat(side.size(), " repeats: ", absl::StrJoin(labels, "; "));
  };
  c.a_label = label(a);
  c.b_label = label(b);
  c.a_repeats = static_cast<int>(a.size());
  c.b_repeats = static_cast<int>(b.size());
  c.options = options;
  if (slo_of(*runs.front()).class_source == SloClassSource::kWorkload) {
    c.notes.push_back(
        "goodput in the workload's classes (--slo-class workload): each request's SLO is its "
        "class when every earlier prompt's prefix is cached, whichever router served it");
  }
  c.units = static_cast<int64_t>(units.size());
  int64_t shared = 0;
  bool plans_known = true;
  for (const Unit& u : units) {
    bool in_a = false, in_b = false;
    for (size_t r = 0; r < runs.size(); ++r) {
      plans_known = plans_known && u.job && u.runs[r].planned_turns > 0;
      (r < n_a ? in_a : in_b) |= u.runs[r].present;
    }
    if (in_a && in_b) {
      ++shared;
    } else if (in_a) {
      ++c.units_only_a;
    } else if (in_b) {
      ++c.units_only_b;
    }
  }
  if (shared == 0) {
    return absl::InvalidArgumentError(
        "the runs share no session or trace request: not runs of one workload");
  }
  for (const ComparedRun* run : runs) {
    if (run->dropped > 0) {
      c.notes.push_back(absl::StrCat(run->label, ": ", run->dropped,
                                     " arrivals dropped before sending are left out of every "
                                     "figure here (the run's own summary counts them as misses)"));
    }
  }
  if (!plans_known) {
    c.notes.push_back(
        "goodput of planned turns: not every unit is an agentic job with a known plan");
  }
  for (const ComparedRun* run : runs) {
    if (options.max_sim_lag_s <= 0 || !(run->sim_lag_p99_s > options.max_sim_lag_s)) continue;
    c.sim_lag_exceeded = true;
    c.notes.push_back(absl::StrFormat(
        "%s: the simulated fleet ran %.2f s behind the wall clock at the 99th percentile "
        "(--max-sim-lag %.2f s): its times include the host's slowness, so the difference "
        "is not the configurations' alone; rerun with a larger --time-scale or on a quieter "
        "host",
        run->label, run->sim_lag_p99_s, options.max_sim_lag_s));
  }

  // A side's figure: the mean over its repeats `picked` of each one's figure on `draw`.
  auto side_figures = [&](const std::vector<size_t>& draw, const std::vector<size_t>& picked) {
    Figures mean{};
    for (size_t r : picked) {
      const Figures f = FiguresOf(units, draw, r, plans_known);
      for (int i = 0; i < kFigures; ++i) mean[i] += f[i] / static_cast<double>(picked.size());
    }
    return mean;
  };
  std::vector<size_t> all(units.size()), a_runs(n_a), b_runs(b.size());
  for (size_t i = 0; i < units.size(); ++i) all[i] = i;
  for (size_t i = 0; i < n_a; ++i) a_runs[i] = i;
  for (size_t i = 0; i < b.size(); ++i) b_runs[i] = n_a + i;
  const Figures point_a = side_figures(all, a_runs);
  const Figures point_b = side_figures(all, b_runs);

  std::vector<std::vector<double>> differences(kFigures), ratios(kFigures);
  std::vector<int64_t> b_lower(kFigures, 0);
  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<size_t> pick(0, units.size() - 1);
  std::uniform_int_distribution<size_t> pick_a(0, n_a - 1), pick_b(0, b.size() - 1);
  std::vector<size_t> draw(units.size()), drawn_a(n_a), drawn_b(b.size());
  for (int k = 0; k < options.resamples; ++k) {
    // The repeats first, then the sessions: with one repeat a side, the same draws as
    // comparing two runs.
    if (n_a > 1 || b.size() > 1) {
      for (size_t& r : drawn_a) r = pick_a(rng);
      for (size_t& r : drawn_b) r = n_a + pick_b(rng);
    } else {
      drawn_a = a_runs;
      drawn_b = b_runs;
    }
    for (size_t& i : draw) i = pick(rng);
    const Figures fa = side_figures(draw, drawn_a);
    const Figures fb = side_figures(draw, drawn_b);
    for (int f = 0; f < kFigures; ++f) {
      const double x = fa[f], y = fb[f];
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      differences[f].push_back(y - x);
      if (x > 0) ratios[f].push_back(y / x);
      b_lower[f] += y < x ? 1 : 0;
    }
  }
  const double tail = 100 * (1 - options.confidence) / 2;
  for (int f = 0; f < kFigures; ++f) {
    if ((f == kPlannedGoodputFigure || f == kSessionsCompletedFigure) && !plans_known) continue;
    if (f == kJobTimeFigure && !(std::isfinite(point_a[f]) && std::isfinite(point_b[f]))) continue;
    FigureComparison fc;
    fc.label = std::string(kComparedFigures[f]);
    fc.a = point_a[f];
    fc.b = point_b[f];
    fc.difference = fc.b - fc.a;
    const std::vector<double>& d = differences[f];
    fc.low = Percentile(d, tail);
    fc.high = Percentile(d, 100 - tail);
    fc.b_lower_share =
        d.empty() ? kNaN : static_cast<double>(b_lower[f]) / static_cast<double>(d.size());
    fc.ratio = fc.a > 0 ? fc.b / fc.a : kNaN;
    fc.ratio_low = Percentile(ratios[f], tail);
    fc.ratio_high = Percentile(ratios[f], 100 - tail);
    c.figures.push_back(std::move(fc));
  }
  return c;
}

ComparedRun ComparedRunOf(const RunResult& run, std::string label) {
  return ComparedRun{.label = std::move(label),
                     .time_scale = run.time_scale > 0 ? run.time_scale : 1.0,
                     .slo = run.slo,
                     .dropped = run.dropped,
                     .sim_lag_p99_s = Summarize(run).sim_lag_p99,
                     .requests = run.requests,
                     .jobs = run.jobs};
}

std::string DifferenceCell(const FigureComparison& f) {
  const bool share = IsShare(f);
  if (!std::isfinite(f.difference)) return "-";
  if (!std::isfinite(f.low) || !std::isfinite(f.high)) return SignedCell(f.difference, share);
  return absl::StrCat(SignedCell(f.difference, share), " [", SignedCell(f.low, share), ", ",
                      SignedCell(f.high, share), "]");
}

std::string RatioCell(const FigureComparison& f) {
  if (!std::isfinite(f.ratio)) return "-";
  if (!std::isfinite(f.ratio_low) || !std::isfinite(f.ratio_high)) return Cell(f.ratio, false);
  return absl::StrFormat("%.3g [%.3g, %.3g]", f.ratio, f.ratio_low, f.ratio_high);
}

std::string SimLagFootnote(const CompareOptions& options) {
  return absl::StrFormat(
      "(lagged): the simulated fleet of one side or both ran more than %.2f modelled s behind "
      "the wall clock at the 99th percentile (the summary's sim lag p99): the difference holds "
      "the host's slowness as well as the configurations'.",
      options.max_sim_lag_s);
}

std::string ComparisonMarkdown(const Comparison& c) {
  std::string out = absl::StrCat("# kvroute-bench compare\n\n- **A**: ", c.a_label,
                                 "\n- **B**: ", c.b_label, "\n");
  absl::StrAppendFormat(&out,
                        "- **units**: %d sessions (agentic jobs; a job-less trace request is its "
                        "own), %d in A only, %d in B only\n",
                        c.units, c.units_only_a, c.units_only_b);
  absl::StrAppendFormat(&out,
                        "- **draws**: %d, the units drawn with replacement, the same draw for A "
                        "and B (seed %d); interval: the central %.0f %% of B - A over the draws\n",
                        c.options.resamples, c.options.seed, 100 * c.options.confidence);
  if (c.a_repeats > 1 || c.b_repeats > 1) {
    absl::StrAppendFormat(&out,
                          "- **repeats**: A %d, B %d; a side's figure is the mean over its "
                          "repeats, and each draw also draws each side's repeats with "
                          "replacement\n",
                          c.a_repeats, c.b_repeats);
  }
  for (const std::string& n : c.notes) absl::StrAppend(&out, "- ", n, "\n");
  absl::StrAppendFormat(&out,
                        "\n| figure | A | B | B - A | %.0f %% interval | B / A | interval | "
                        "B below A in |\n| --- | ---: | ---: | ---: | --- | ---: | --- | ---: |\n",
                        100 * c.options.confidence);
  for (const FigureComparison& f : c.figures) {
    const bool share = IsShare(f);
    const std::string interval =
        std::isfinite(f.low) && std::isfinite(f.high)
            ? absl::StrCat("[", SignedCell(f.low, share), ", ", SignedCell(f.high, share), "]")
            : std::string("-");
    const std::string ratio_interval =
        std::isfinite(f.ratio_low) && std::isfinite(f.ratio_high)
            ? absl::StrFormat("[%.3g, %.3g]", f.ratio_low, f.ratio_high)
            : std::string("-");
    absl::StrAppend(&out, "| ", f.label, " | ", Cell(f.a, share), " | ", Cell(f.b, share), " | ",
                    SignedCell(f.difference, share), " | ", interval, " | ", Cell(f.ratio, false),
                    " | ", ratio_interval, " | ", Cell(f.b_lower_share, true), " |\n");
  }
  return out;
}

json::value ComparisonJson(const Comparison& c) {
  json::array figures;
  for (const FigureComparison& f : c.figures) {
    figures.push_back(json::object{{"figure", f.label},
                                   {"a", Num(f.a)},
                                   {"b", Num(f.b)},
                                   {"difference", Num(f.difference)},
                                   {"low", Num(f.low)},
                                   {"high", Num(f.high)},
                                   {"ratio", Num(f.ratio)},
                                   {"ratio_low", Num(f.ratio_low)},
                                   {"ratio_high", Num(f.ratio_high)},
                                   {"b_lower_share", Num(f.b_lower_share)}});
  }
  json::array notes;
  for (const std::string& n : c.notes) notes.push_back(json::string(n));
  return json::object{{"a", c.a_label},
                      {"b", c.b_label},
                      {"a_repeats", c.a_repeats},
                      {"b_repeats", c.b_repeats},
                      {"resamples", c.options.resamples},
                      {"seed", c.options.seed},
                      {"confidence", c.options.confidence},
                      {"units", c.units},
                      {"units_only_a", c.units_only_a},
                      {"units_only_b", c.units_only_b},
                      {"figures", std::move(figures)},
                      {"sim_lag_exceeded", c.sim_lag_exceeded},
                      {"notes", std::move(notes)}};
}

}  // namespace kvroute::bench
