#include "bench/kvroute_bench/report.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/kvroute_bench/instance_load.h"
#include "bench/kvroute_bench/metrics_sampler.h"
#include "bench/kvroute_bench/prompt_sources.h"
#include "bench/kvroute_bench/report_accuracy.h"
#include "bench/kvroute_bench/svg_chart.h"

namespace kvroute::bench {
namespace json = boost::json;
namespace {

const ClassSummary* FindClass(const RunSummary& s, std::string_view klass) {
  for (const ClassSummary& c : s.classes) {
    if (c.klass == klass) return &c;
  }
  return nullptr;
}

std::string TimeUnitNote(const Report& report) {
  for (const RunResult& r : report.runs) {
    if (r.time_scale != 1.0) {
      return absl::StrFormat(
          "Latencies are in modelled seconds: wall-clock time divided by the simulated fleet's "
          "time scale (%g).",
          r.time_scale);
    }
  }
  return "Latencies are wall-clock seconds measured by the client.";
}

// Rows shared by the markdown and HTML tables.
// Kept in step with SummaryRow; SummaryTable picks its columns from both by these names.
std::vector<std::string> SummaryHeader() {
  return {"config",
          "requests",
          "errors",
          "served",
          "shed",
          "failed",
          "gave up",
          "offloads",
          "prefix hit",
          "hit bound",
          "pooled-LRU yardstick",
          "hit / pooled",
          "TTFT p50",
          "TTFT p90",
          "TTFT p99",
          "TPOT p50",
          "TPOT p99",
          "E2E p50",
          "E2E p99",
          "HEAVY n",
          "HEAVY TTFT p99",
          "job p50",
          "job mean",
          "T8/T1",
          "KV mean",
          "GPU busy",
          "queued (KV full)",
          "goodput",
          "ITL p99",
          "stalled streams"};
}

std::vector<std::string> SummaryRow(const RunResult& r, const RunSummary& s) {
  const ClassSummary& all = s.classes.front();
  const ClassSummary* heavy = FindClass(s, "HEAVY");
  return {r.name,
          absl::StrCat(s.requests),
          absl::StrFormat("%d (%.1f%%)", s.errors + s.dropped, s.error_rate * 100),
          absl::StrCat(s.served),
          absl::StrFormat("%d (%.1f%%)", s.shed, s.shed_share * 100),
          absl::StrCat(s.failed),
          absl::StrCat(s.gave_up),
          absl::StrCat(s.offloads),
          Percent(s.hit_ratio),
          Percent(s.bound_hit_ratio),
          Percent(s.pooled_bound_hit_ratio),
          Percent(s.hit_of_pooled()),
          FormatSeconds(all.ttft.p50),
          FormatSeconds(all.ttft.p90),
          FormatSeconds(all.ttft.p99),
          FormatSeconds(all.tpot.p50),
          FormatSeconds(all.tpot.p99),
          FormatSeconds(all.e2e.p50),
          FormatSeconds(all.e2e.p99),
          absl::StrCat(heavy ? heavy->requests : 0),
          heavy ? FormatSeconds(heavy->ttft.p99) : "-",
          FormatSeconds(s.job_completion.p50),
          FormatSeconds(s.job_completion.mean),
          s.t8_over_t1 >= 0 ? absl::StrFormat("%.2f", s.t8_over_t1) : "-",
          Percent(s.mean_kv_usage),
          Percent(s.mean_gpu_busy),
          s.queued_share >= 0
              ? absl::StrCat(Percent(s.queued_share), " (", Percent(s.queued_kv_full_share), ")")
              : "-",
          Percent(all.goodput),
          FormatSeconds(all.itl_p99),
          Percent(all.stalled_stream_share)};
}

std::vector<std::string> OffloadHeader() {
  return {"config",           "offloads",        "offload rate",        "prefill leg p50",
          "prefill leg p99",  "KV transfer p50", "KV transfer p99",     "offloaded prompt tokens",
          "KV pulled tokens", "KV moved",        "cache estimate error"};
}

std::vector<std::vector<std::string>> OffloadRows(const Report& report,
                                                  const std::vector<RunSummary>& sums) {
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < report.runs.size(); ++i) {
    const RunSummary& s = sums[i];
    rows.push_back(
        {report.runs[i].name, absl::StrCat(s.offloads), Percent(s.offload_rate),
         FormatSeconds(s.offload_prefill.p50), FormatSeconds(s.offload_prefill.p99),
         FormatSeconds(s.offload_transfer.p50), FormatSeconds(s.offload_transfer.p99),
         absl::StrCat(s.offloaded_prompt_tokens), absl::StrCat(s.transferred_tokens),
         s.transferred_bytes >= 0 ? absl::StrFormat("%.2f GB", s.transferred_bytes / 1e9) : "-",
         Percent(s.cache_estimate_error)});
  }
  return rows;
}

std::vector<std::string> ClassHeader() {
  return {"config",
          "class",
          "n",
          "TTFT p50",
          "TTFT p90",
          "TTFT p99",
          "TPOT p50",
          "TPOT p90",
          "TPOT p99",
          "E2E p50",
          "E2E p90",
          "E2E p99",
          "ITL p50",
          "ITL p99",
          "streams",
          "stalled",
          "SLO met / of",
          "goodput",
          "missed: floor / wait / TPOT"};
}

std::vector<std::vector<std::string>> ClassRows(const Report& report,
                                                const std::vector<RunSummary>& sums) {
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < report.runs.size(); ++i) {
    for (const ClassSummary& c : sums[i].classes) {
      rows.push_back(
          {report.runs[i].name, c.klass, absl::StrCat(c.requests), FormatSeconds(c.ttft.p50),
           FormatSeconds(c.ttft.p90), FormatSeconds(c.ttft.p99), FormatSeconds(c.tpot.p50),
           FormatSeconds(c.tpot.p90), FormatSeconds(c.tpot.p99), FormatSeconds(c.e2e.p50),
           FormatSeconds(c.e2e.p90), FormatSeconds(c.e2e.p99), FormatSeconds(c.itl_p50),
           FormatSeconds(c.itl_p99), absl::StrCat(c.streams), Percent(c.stalled_stream_share),
           c.goodput >= 0 ? absl::StrCat(c.slo_met, " / ", c.slo_requests) : "-",
           Percent(c.goodput),
           c.goodput >= 0 ? absl::StrCat(c.missed_floor, " / ", c.missed_wait, " / ", c.missed_tpot)
                          : "-"});
    }
  }
  return rows;
}

std::vector<std::string> FloorSplitHeader() {
  return {"config",    "requests",  "n",         "TTFT p50",  "TTFT p90",
          "floor p50", "floor p90", "queue p50", "queue p90", "queue share"};
}

// Per run with compute floors (a known fleet profile), a row for every class and one for the
// HEAVY class when it has co-located requests.
std::vector<std::vector<std::string>> FloorSplitRows(const Report& report,
                                                     const std::vector<RunSummary>& sums) {
  std::vector<std::vector<std::string>> rows;
  auto add = [&rows](const std::string& run, const char* requests, const TtftSplit& split) {
    rows.push_back({run, requests, absl::StrCat(split.floor.n), FormatSeconds(split.ttft.p50),
                    FormatSeconds(split.ttft.p90), FormatSeconds(split.floor.p50),
                    FormatSeconds(split.floor.p90), FormatSeconds(split.queue.p50),
                    FormatSeconds(split.queue.p90), Percent(split.queue_share)});
  };
  for (size_t i = 0; i < report.runs.size(); ++i) {
    const RunSummary& s = sums[i];
    if (s.floor_split.floor.n == 0) continue;
    add(report.runs[i].name, "all", s.floor_split);
    if (s.heavy_split.floor.n > 0) add(report.runs[i].name, "HEAVY", s.heavy_split);
  }
  return rows;
}

constexpr char kOffloadNote[] =
    "Offload rate = offloaded / all requests. Prefill leg (routing to the prefill's end) and KV "
    "transfer of offloaded requests and the cache-estimate error (mean |estimate - engine "
    "cached_tokens| / prompt tokens) are from kvroute's request log. KV pulled tokens = the "
    "engine's cached_tokens on offloaded requests (vLLM counts connector loads as cached); KV "
    "moved = that x the model's KV bytes per token (when the fleet's profile is known); "
    "offloaded prompt tokens = their whole prompts, the most an offload can move.";

constexpr char kFloorSplitNote[] =
    "Successful co-located requests (all, and the HEAVY class): floor = the time one idle "
    "instance of the fleet's profile needs to prefill the request's uncached tokens (prompt - "
    "engine cached), in max_num_batched_tokens chunks; queue = TTFT - floor (waiting, admission "
    "and steps shared with other requests); queue share = sum of queue / sum of TTFT. No "
    "placement or admission removes the floor, given the cache hits the run had.";

// Why no run has a TTFT split: no compute floors (unknown profile) or no successful
// co-located request.
std::string FloorSplitMissing(const Report& report) {
  for (const RunResult& r : report.runs) {
    for (const RequestRecord& q : r.requests) {
      if (q.compute_floor_s >= 0) {
        return "TTFT split: no successful co-located request in these runs.";
      }
    }
  }
  return "TTFT split: not available, the fleet's profile is unknown for these runs (only the "
         "ablation's embedded simulated fleet has one).";
}

std::string SloNote(const Report& report) {
  if (report.runs.empty()) return "";
  const SloTargets& slo = report.runs.front().slo;
  std::string note =
      slo.class_source == SloClassSource::kWorkload
          ? "Classes are the workload's (--slo-class workload): a request's class with every "
            "earlier prompt's prefix cached, whichever router served it; per-class rows group "
            "by it. "
          : "";
  absl::StrAppendFormat(
      &note,
      "Goodput = share of requests that succeeded with TTFT within their class's SLO (WARM "
      "%gs, MEDIUM %gs, HEAVY %gs) and TPOT within %gs, modelled seconds; shed (HTTP 429), "
      "failed and given-up requests, dropped arrivals and unsuccessful requests without a "
      "class count as misses, successful requests without a class are left out. Served = "
      "succeeded; shed = answered 429 before any stream (share of requests sent); failed = "
      "any other error once sent; gave up = abandoned at the client's timeout. ITL = every gap "
      "between consecutive streamed text chunks "
      "(from a bounded log histogram, within 1.2%%); a stream is stalled when a gap exceeds "
      "%gs. Queued = share of the instances' /metrics samples with a request waiting; KV "
      "full = of all samples, those with one waiting while at least %.0f%% of the KV was in "
      "use (a wait for blocks; with room left the wait is for compute, a recompute of an "
      "evicted prefix included).",
      slo.ttft_warm_s, slo.ttft_medium_s, slo.ttft_heavy_s, slo.tpot_s, kStreamStallS,
      kKvFullUsage * 100);
  return note;
}

constexpr char kKvHeatMapNote[] =
    "One row per instance, one column per time bin: colour = mean vllm:kv_cache_usage_perc of "
    "the /metrics samples taken in the bin (grey: no sample). Bins are equal slices of the "
    "run, at most 60 and no narrower than the 90th percentile of the gaps between an "
    "instance's samples.";

// One configuration's KV usage heat map (rows = instances in name order).
std::string KvUsageHeatMap(const RunResult& r) {
  const double scale = r.time_scale > 0 ? r.time_scale : 1.0;
  std::map<std::string, Series> by_instance;
  double t_max = 0;
  for (const InstanceSample& x : r.samples) {
    if (x.kv_usage < 0) continue;
    Series& s = by_instance[x.instance];
    s.name = x.instance;
    s.points.emplace_back(x.t / scale, x.kv_usage);
    t_max = std::max(t_max, x.t / scale);
  }
  // The sampling interval as scraped: a scrape waits for its responses, so gaps run longer
  // than --sample-interval on a busy machine; bins no narrower than the 90th percentile of
  // one instance's gaps nearly always hold a sample.
  std::vector<double> gaps;
  for (const auto& [name, s] : by_instance) {
    for (size_t i = 1; i < s.points.size(); ++i) {
      gaps.push_back(s.points[i].first - s.points[i - 1].first);
    }
  }
  std::vector<Series> rows;
  for (auto& [name, s] : by_instance) rows.push_back(std::move(s));
  HeatMapOptions o;
  o.title = absl::StrCat("KV usage: ", r.name);
  o.x_label = r.time_scale != 1.0 ? "time since start (modelled s)" : "time since start (s)";
  o.value_label = "KV in use";
  o.x_min = 0;
  o.x_max = t_max > 0 ? t_max : 1;
  const double interval = gaps.empty() ? 0 : Percentile(gaps, 90);
  o.min_bin_width = std::isfinite(interval) && interval > 0 ? interval : 0;
  return RenderHeatMap(o, rows);
}

size_t MaxTurns(const std::vector<RunSummary>& sums) {
  size_t n = 0;
  for (const RunSummary& s : sums) n = std::max(n, s.turn_mean_e2e.size());
  return n;
}

std::string MarkdownTable(const std::vector<std::string>& header,
                          const std::vector<std::vector<std::string>>& rows) {
  std::string out = absl::StrCat("| ", absl::StrJoin(header, " | "), " |\n|");
  for (size_t i = 0; i < header.size(); ++i) out += i == 0 ? " --- |" : " ---: |";
  out += "\n";
  for (const auto& row : rows) absl::StrAppend(&out, "| ", absl::StrJoin(row, " | "), " |\n");
  return out;
}

std::string HtmlTable(const std::vector<std::string>& header,
                      const std::vector<std::vector<std::string>>& rows) {
  std::string out = "<table>\n<thead><tr>";
  for (const std::string& h : header) absl::StrAppend(&out, "<th>", XmlEscape(h), "</th>");
  out += "</tr></thead>\n<tbody>\n";
  for (const auto& row : rows) {
    out += "<tr>";
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&out, i == 0 ? "<td class=\"name\">" : "<td>", XmlEscape(row[i]),
                      "</td>");
    }
    out += "</tr>\n";
  }
  out += "</tbody></table>\n";
  return out;
}

std::vector<std::vector<std::string>> TurnRows(const Report& report,
                                               const std::vector<RunSummary>& sums) {
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < report.runs.size(); ++i) {
    std::vector<std::string> row = {report.runs[i].name};
    for (double v : sums[i].turn_mean_e2e) row.push_back(FormatSeconds(v));
    row.push_back(sums[i].t8_over_t1 >= 0 ? absl::StrFormat("%.2f", sums[i].t8_over_t1) : "-");
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<std::string> TurnHeader(size_t turns) {
  std::vector<std::string> h = {"config"};
  for (size_t t = 1; t <= turns; ++t) h.push_back(absl::StrCat("T", t));
  h.push_back("T_last/T1");
  return h;
}

}  // namespace

std::string Percent(double f) {
  if (!std::isfinite(f) || f < 0) return "-";
  return absl::StrFormat("%.1f%%", f * 100);
}

std::string FormatSeconds(double s) {
  if (!std::isfinite(s) || s < 0) return "-";
  if (s < 1) return absl::StrFormat("%.3f", s);
  if (s < 10) return absl::StrFormat("%.2f", s);
  if (s < 100) return absl::StrFormat("%.1f", s);
  return absl::StrFormat("%.0f", s);
}

std::vector<RunSummary> SummarizeAll(const Report& report) {
  std::vector<RunSummary> out;
  for (const RunResult& r : report.runs) out.push_back(Summarize(r));
  return out;
}

std::string SummaryTable(const Report& report) {
  const std::vector<RunSummary> sums = SummarizeAll(report);
  const std::vector<std::string> header = {
      "config",  "reqs",    "served",  "shed",    "failed",  "gaveup",   "err%",
      "offl",    "hit",     "bound",   "pooled",  "TTFTp50", "TTFTp90",  "TTFTp99",
      "TPOTp50", "E2Ep99",  "HEAVY",   "job p50", "job mean", "T8/T1",  "est med",  "est mean",
      "goodput", "ITLp99"};
  // Columns of SummaryRow by their SummaryHeader name.
  const std::vector<std::string> full_header = SummaryHeader();
  auto column = [&](const std::vector<std::string>& full, std::string_view name) {
    const auto it = std::find(full_header.begin(), full_header.end(), name);
    return full[static_cast<size_t>(it - full_header.begin())];
  };
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < report.runs.size(); ++i) {
    const std::vector<std::string> full = SummaryRow(report.runs[i], sums[i]);
    const RunSummary& s = sums[i];
    const EstimateErrorSummary& e = s.classes.front().estimate;
    rows.push_back({column(full, "config"), column(full, "requests"), column(full, "served"),
                    column(full, "shed"), column(full, "failed"), column(full, "gave up"),
                    absl::StrFormat("%.1f", s.error_rate * 100), column(full, "offloads"),
                    column(full, "prefix hit"), column(full, "hit bound"),
                    column(full, "pooled-LRU yardstick"), column(full, "TTFT p50"),
                    column(full, "TTFT p90"), column(full, "TTFT p99"), column(full, "TPOT p50"),
                    column(full, "E2E p99"), column(full, "HEAVY n"), column(full, "job p50"),
                    column(full, "job mean"), column(full, "T8/T1"), e.n > 0 ? Percent(e.median_abs) : "-",
                    e.n > 0 ? SignedPercent(e.mean_signed) : "-", column(full, "goodput"),
                    column(full, "ITL p99")});
  }
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c == 0) {
        absl::StrAppend(&out, cells[c], std::string(width[c] - cells[c].size(), ' '));
      } else {
        absl::StrAppend(&out, "  ", std::string(width[c] - cells[c].size(), ' '), cells[c]);
      }
    }
    return out + "\n";
  };
  std::string out = line(header);
  for (const auto& row : rows) out += line(row);
  return out;
}

// What the prompt-source table counts, and from where.
constexpr const char* kPromptSourceNote =
    "From the engines' counters at the last /metrics sample of each instance: GPU hit = "
    "vllm:prompt_tokens_by_source{source=\"local_cache_hit\"}, computed = local_compute, pool "
    "reload = kvroute_sim_pool_prompt_tokens_loaded_total, host reload = external_kv_transfer "
    "less the pool's (P/D pulls count there too). Shown when the engines publish them "
    "(kvroute-sim with --kv-offloading-size or --kv-pool-size).";

constexpr const char* kSessionTurnNote =
    "Each agent session's served turns against its previous served turn (X-Kvroute-Backend; "
    "an offloaded turn's decode instance): at home on the same instance, where the session's "
    "KV is (in the GPU or a host tier), or moved to another, which prefills the context again "
    "unless it holds it. Turns / prompt tokens computed (prompt less cached; all of an "
    "offloaded turn's prompt). Of each kind's turns, first / at home / moved: those that met "
    "their SLOs, and those that missed on their compute floor alone (the tokens they computed "
    "take an idle instance longer than their TTFT SLO), as a move that recomputes a context "
    "does.";

std::vector<std::string> SessionTurnHeader() {
  return {"config",
          "first turns",
          "at home",
          "moved",
          "computed by moved turns",
          "met SLOs",
          "missed on floor"};
}

std::vector<std::vector<std::string>> SessionTurnRows(const Report& report,
                                                      const std::vector<RunSummary>& sums) {
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < report.runs.size(); ++i) {
    const SessionTurns& t = sums[i].session_turns;
    if (!t.known()) continue;
    auto cell = [](const TurnKind& k) {
      return absl::StrFormat("%d / %d", k.turns, k.computed_tokens);
    };
    const int64_t computed = t.computed_tokens();
    rows.push_back({report.runs[i].name, cell(t.first), cell(t.home), cell(t.moved),
                    computed > 0 ? Percent(static_cast<double>(t.moved.computed_tokens) /
                                           static_cast<double>(computed))
                                 : "-",
                    absl::StrFormat("%d / %d / %d", t.first.slo_met, t.home.slo_met,
                                    t.moved.slo_met),
                    absl::StrFormat("%d / %d / %d", t.first.missed_floor, t.home.missed_floor,
                                    t.moved.missed_floor)});
  }
  return rows;
}

constexpr const char* kInstanceLoadNote =
    "Over the fleet's instances: agent sessions started on each (the instance of a session's "
    "first served turn, which keeps its KV and serves its next turns unless a turn moves), "
    "requests served on each, prompt tokens computed on the busiest over the mean, and the "
    "means of each instance's /metrics samples: requests running, requests waiting, GPU busy "
    "share; mean (least-most). Most running = the instance with the most requests running on "
    "average. Requests and samples meet by instance name (kvroute's backend names; with "
    "--metrics-urls, name the instances as kvroute's config does).";

std::vector<std::string> InstanceLoadHeader() {
  return {"config",  "instances", "sessions started", "served",      "computed, most / mean",
          "running", "waiting",   "GPU busy",         "most running"};
}

std::vector<std::vector<std::string>> InstanceLoadRows(const Report& report,
                                                       const std::vector<RunSummary>& sums) {
  auto range = [](const InstanceRange& s) {
    return s.n > 0 ? absl::StrFormat("%.0f-%.0f", s.min, s.max) : std::string("-");
  };
  auto gauge = [](const InstanceRange& s) {
    return s.n > 0 ? absl::StrFormat("%.2f (%.2f-%.2f)", s.mean, s.min, s.max) : std::string("-");
  };
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < report.runs.size(); ++i) {
    const LoadSpread s = LoadSpreadOf(sums[i].instances);
    if (s.served.n < 2 && s.running.n < 2) continue;  // one instance: nothing to spread
    const int n = std::max(s.served.n, s.running.n);
    rows.push_back(
        {report.runs[i].name, absl::StrCat(n), range(s.sessions_started), range(s.served),
         s.computed_tokens.mean > 0 ? absl::StrFormat("%.2f", s.computed_tokens.max_over_mean())
                                    : "-",
         gauge(s.running), gauge(s.waiting),
         s.gpu_busy.n > 0 ? absl::StrCat(Percent(s.gpu_busy.mean), " (", Percent(s.gpu_busy.min),
                                         "-", Percent(s.gpu_busy.max), ")")
                          : "-",
         s.busiest.empty() ? "-" : s.busiest});
  }
  return rows;
}

constexpr const char* kSimLagNote =
    "How far each simulated instance's virtual clock ran behind the wall clock, in modelled "
    "seconds: kvroute_sim_scheduler_lag_seconds over the samples, and the largest since the "
    "instance started (kvroute_sim_scheduler_lag_max_seconds). While an instance is busy its "
    "clock is never pulled forward, so a step that takes longer to compute than it models "
    "delays every later step of that busy spell, and the requests there see longer times than "
    "the profile gives. A lag that is a sizeable share of the TTFTs means the host was too "
    "slow for the time scale: rerun with a larger --time-scale or on a quieter host.";

std::vector<std::string> SimLagHeader() { return {"config", "lag p99 (s)", "largest lag (s)"}; }

std::vector<std::vector<std::string>> SimLagRows(const Report& report,
                                                 const std::vector<RunSummary>& sums) {
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < report.runs.size(); ++i) {
    if (sums[i].max_sim_lag < 0) continue;
    rows.push_back({report.runs[i].name, FormatSeconds(sums[i].sim_lag_p99),
                    FormatSeconds(sums[i].max_sim_lag)});
  }
  return rows;
}

constexpr const char* kLearnedFactorNote =
    "What kvroute had learned by the end of the run, from its /metrics: per instance, the "
    "realised prefill time over its cost model's prediction (kvroute_prefill_time_factor), "
    "and the engines' timed loads from the host-memory tier and the fleet-shared pool over "
    "their bytes at router.host_load_bytes_per_second and router.pool_load_bytes_per_second "
    "(kvroute_host_reload_time_factor, kvroute_pool_reload_time_factor); mean over the "
    "instances (least-most). A factor stays 1 on an instance until it has samples.";

std::vector<std::string> LearnedFactorHeader() {
  return {"config", "instances", "prefill time", "host reload time", "pool reload time"};
}

std::vector<std::vector<std::string>> LearnedFactorRows(const Report& report) {
  std::vector<std::vector<std::string>> rows;
  for (const RunResult& r : report.runs) {
    if (r.learned_factors.empty()) continue;
    std::vector<std::string> row = {r.name, ""};
    size_t instances = 0;
    for (const char* metric : kLearnedFactorMetrics) {
      const auto it = r.learned_factors.find(metric);
      if (it == r.learned_factors.end() || it->second.empty()) {
        row.push_back("-");
        continue;
      }
      double sum = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
      for (const auto& [backend, v] : it->second) {
        sum += v;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      instances = std::max(instances, it->second.size());
      const double mean = sum / static_cast<double>(it->second.size());
      row.push_back(absl::StrFormat("%.2f (%.2f-%.2f)", mean, lo, hi));
    }
    row[1] = absl::StrCat(instances);
    rows.push_back(std::move(row));
  }
  return rows;
}

// A table of report.md and report.html alike: its title, columns, rows and note.
struct TableSection {
  std::string title;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  const char* note;
};

// Where the fleet's work went: prompt tokens by source, session turns, load per instance,
// the simulator's lag; a section without rows is left out.
std::vector<TableSection> FleetSections(const Report& report, const std::vector<RunSummary>& sums) {
  std::vector<TableSection> out = {
      {"Prompt tokens by source", PromptSourceHeader(), PromptSourceRows(report),
       kPromptSourceNote},
      {"Session turns: at home or moved", SessionTurnHeader(), SessionTurnRows(report, sums),
       kSessionTurnNote},
      {"Load per instance", InstanceLoadHeader(), InstanceLoadRows(report, sums),
       kInstanceLoadNote},
      {"Simulator lag", SimLagHeader(), SimLagRows(report, sums), kSimLagNote},
      {"Learned time factors", LearnedFactorHeader(), LearnedFactorRows(report),
       kLearnedFactorNote},
  };
  std::erase_if(out, [](const TableSection& t) { return t.rows.empty(); });
  return out;
}

std::string ReportMarkdown(const Report& report) {
  const std::vector<RunSummary> sums = SummarizeAll(report);
  std::string out = absl::StrCat("# ", report.title, "\n\n");
  if (!report.generated_at.empty()) absl::StrAppend(&out, "Generated ", report.generated_at, ".\n\n");
  for (const auto& [k, v] : report.setup) absl::StrAppend(&out, "- **", k, "**: ", v, "\n");
  absl::StrAppend(&out, "\n", TimeUnitNote(report),
                  " Prefix hit = cached prompt tokens (engine usage) / prompt tokens; cached "
                  "tokens of offloaded requests (KV pulled from the prefill instance) are not "
                  "counted as hits. Bound = an infinite prefix cache on the same requests; "
                  "pooled-LRU yardstick = one LRU cache holding the fleet's whole KV, replayed "
                  "in arrival order at block granularity (routing can beat it).\n\n"
                  "## Summary\n\n");
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < report.runs.size(); ++i) rows.push_back(SummaryRow(report.runs[i], sums[i]));
  out += MarkdownTable(SummaryHeader(), rows);
  absl::StrAppend(&out, "\n", SloNote(report), "\n");
  absl::StrAppend(&out, "\n## Latency per class\n\n", MarkdownTable(ClassHeader(), ClassRows(report, sums)));
  absl::StrAppend(&out, "\n## Offloads and cache estimates\n\n",
                  MarkdownTable(OffloadHeader(), OffloadRows(report, sums)), "\n", kOffloadNote,
                  "\n");
  if (const auto split = FloorSplitRows(report, sums); !split.empty()) {
    absl::StrAppend(&out, "\n## TTFT: queue and compute floor\n\n",
                    MarkdownTable(FloorSplitHeader(), split), "\n", kFloorSplitNote, "\n");
  } else {
    absl::StrAppend(&out, "\n", FloorSplitMissing(report), "\n");
  }
  for (const TableSection& t : FleetSections(report, sums)) {
    absl::StrAppend(&out, "\n## ", t.title, "\n\n", MarkdownTable(t.header, t.rows), "\n", t.note,
                    "\n");
  }
  if (const auto est = EstimateRows(report, sums); !est.empty()) {
    absl::StrAppend(&out, "\n## Cache estimate error per class\n\n",
                    MarkdownTable(EstimateHeader(), est), "\n", kEstimateNote, "\n");
  }
  if (const auto pred = PredictionRows(report, sums); !pred.empty()) {
    absl::StrAppend(&out, "\n## Predicted TTFT against realised\n\n",
                    MarkdownTable(PredictionHeader(), pred), "\n", kPredictionNote, "\n");
  }
  if (const size_t turns = MaxTurns(sums); turns > 0) {
    absl::StrAppend(&out, "\n## Mean end-to-end latency per turn\n\n",
                    MarkdownTable(TurnHeader(turns), TurnRows(report, sums)));
  }
  return out;
}

std::string ReportHtml(const Report& report) {
  const std::vector<RunSummary> sums = SummarizeAll(report);
  std::string out = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>",
      XmlEscape(report.title), "</title>\n<style>\n",
      "body{font-family:Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1400px}\n"
      "h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}\n"
      "table{border-collapse:collapse;font-size:13px;margin:8px 0}\n"
      "th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}td{white-space:nowrap}\n"
      "th{background:#f2f2f2}td.name{text-align:left;font-weight:bold}\n"
      "tbody tr:nth-child(even){background:#fafafa}\n"
      ".charts{display:flex;flex-wrap:wrap;gap:12px}.charts svg{border:1px solid #eee}\n"
      ".note{color:#555;font-size:13px}dl{display:grid;grid-template-columns:max-content auto;"
      "gap:2px 12px;font-size:13px}dt{font-weight:bold}dd{margin:0}\n",
      "</style></head><body>\n<h1>", XmlEscape(report.title), "</h1>\n");
  if (!report.generated_at.empty()) {
    absl::StrAppend(&out, "<p class=\"note\">Generated ", XmlEscape(report.generated_at), "</p>\n");
  }
  out += "<dl>\n";
  for (const auto& [k, v] : report.setup) {
    absl::StrAppend(&out, "<dt>", XmlEscape(k), "</dt><dd>", XmlEscape(v), "</dd>\n");
  }
  absl::StrAppend(&out, "</dl>\n<p class=\"note\">", XmlEscape(TimeUnitNote(report)),
                  " Prefix hit = cached prompt tokens (engine usage) / prompt tokens, where the "
                  "cached tokens of offloaded requests (KV pulled from the prefill instance) are "
                  "not counted as hits; bound = an infinite prefix cache on the same request "
                  "sequence.</p>\n");

  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < report.runs.size(); ++i) rows.push_back(SummaryRow(report.runs[i], sums[i]));
  absl::StrAppend(&out, "<h2>Summary</h2>\n", HtmlTable(SummaryHeader(), rows),
                  "<p class=\"note\">", XmlEscape(SloNote(report)), "</p>\n");

  // TTFT CDFs: one chart per class, one line per configuration.
  out += "<h2>TTFT distribution per class</h2>\n<div class=\"charts\">\n";
  const double scale_note = report.runs.empty() ? 1.0 : report.runs.front().time_scale;
  for (const char* klass : kReportClasses) {
    std::vector<Series> series;
    bool any = false;
    for (size_t i = 0; i < report.runs.size(); ++i) {
      const RunResult& r = report.runs[i];
      const double scale = r.time_scale > 0 ? r.time_scale : 1.0;
      std::vector<double> ttft;
      for (const RequestRecord& q : r.requests) {
        if (!q.ok() || q.ttft < 0) continue;
        if (std::string_view(klass) != "ALL" && SloClass(q, r.slo) != klass) continue;
        ttft.push_back(q.ttft / scale);
      }
      any = any || !ttft.empty();
      series.push_back({absl::StrFormat("%s (n=%d)", r.name, ttft.size()), CdfPoints(ttft), ""});
    }
    if (!any && std::string_view(klass) != "ALL") continue;
    ChartOptions o;
    o.title = absl::StrCat("TTFT CDF: ", klass, std::string_view(klass) == "ALL" ? " requests" : "");
    o.x_label = scale_note != 1.0 ? "time to first token (modelled s, log scale)"
                                  : "time to first token (s, log scale)";
    o.y_label = "fraction of requests";
    o.log_x = true;
    o.y_min = 0;
    o.y_max = 1;
    o.y_percent = true;
    out += RenderLineChart(o, series);
  }
  out += "</div>\n";

  // Per-turn latency.
  if (const size_t turns = MaxTurns(sums); turns > 0) {
    std::vector<Series> series;
    for (size_t i = 0; i < report.runs.size(); ++i) {
      Series s{report.runs[i].name, {}, ""};
      for (size_t t = 0; t < sums[i].turn_mean_e2e.size(); ++t) {
        s.points.emplace_back(static_cast<double>(t + 1), sums[i].turn_mean_e2e[t]);
      }
      series.push_back(std::move(s));
    }
    ChartOptions o;
    o.title = "Mean end-to-end latency per agent turn";
    o.x_label = "turn";
    o.y_label = "mean E2E latency (s)";
    o.markers = true;
    o.y_min = 0;
    o.width = 760;
    absl::StrAppend(&out, "<h2>Per-turn latency</h2>\n<div class=\"charts\">\n",
                    RenderLineChart(o, series), "</div>\n",
                    HtmlTable(TurnHeader(turns), TurnRows(report, sums)));
  }

  // KV usage per instance over time: one heat map per configuration.
  bool any_samples = false;
  for (const RunResult& r : report.runs) any_samples = any_samples || !r.samples.empty();
  if (any_samples) {
    out += "<h2>KV cache usage per instance</h2>\n<div class=\"charts\">\n";
    for (const RunResult& r : report.runs) {
      if (r.samples.empty()) continue;
      out += KvUsageHeatMap(r);
    }
    absl::StrAppend(&out, "</div>\n<p class=\"note\">", XmlEscape(kKvHeatMapNote), "</p>\n");
  }

  absl::StrAppend(&out, "<h2>Latency per class</h2>\n",
                  HtmlTable(ClassHeader(), ClassRows(report, sums)));
  absl::StrAppend(&out, "<h2>Offloads and cache estimates</h2>\n",
                  HtmlTable(OffloadHeader(), OffloadRows(report, sums)), "<p class=\"note\">",
                  XmlEscape(kOffloadNote), "</p>\n");
  if (const auto split = FloorSplitRows(report, sums); !split.empty()) {
    absl::StrAppend(&out, "<h2>TTFT: queue and compute floor</h2>\n",
                    HtmlTable(FloorSplitHeader(), split), "<p class=\"note\">",
                    XmlEscape(kFloorSplitNote), "</p>\n");
  } else {
    absl::StrAppend(&out, "<p class=\"note\">", XmlEscape(FloorSplitMissing(report)), "</p>\n");
  }
  for (const TableSection& t : FleetSections(report, sums)) {
    absl::StrAppend(&out, "<h2>", XmlEscape(t.title), "</h2>\n", HtmlTable(t.header, t.rows),
                    "<p class=\"note\">", XmlEscape(t.note), "</p>\n");
  }
  if (const auto est = EstimateRows(report, sums); !est.empty()) {
    absl::StrAppend(&out, "<h2>Cache estimate error per class</h2>\n",
                    HtmlTable(EstimateHeader(), est), "<p class=\"note\">",
                    XmlEscape(kEstimateNote), "</p>\n<div class=\"charts\">\n");
    for (const RunResult& r : report.runs) out += EstimateErrorHistogram(r);
    absl::StrAppend(&out, "</div>\n<p class=\"note\">", XmlEscape(kEstimateHistogramNote),
                    "</p>\n");
  }
  if (const auto pred = PredictionRows(report, sums); !pred.empty()) {
    absl::StrAppend(&out, "<h2>Predicted TTFT against realised</h2>\n",
                    HtmlTable(PredictionHeader(), pred), "<p class=\"note\">",
                    XmlEscape(kPredictionNote), "</p>\n");
  }
  out += "</body></html>\n";
  return out;
}

absl::Status WriteReports(const Report& report, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  const std::vector<std::pair<std::string, std::string>> files = {
      {"report.json", json::serialize(ReportJson(report)) + "\n"},
      {"report.md", ReportMarkdown(report)},
      {"report.html", ReportHtml(report)}};
  for (const auto& [name, content] : files) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << content;
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace kvroute::bench
