// ReportJson (report.h): report.json, every run's configuration, summary (stats.h),
// requests, inter-token gap histograms, jobs and instance samples. The markdown, text and
// HTML writers are in report.cc.
#include <boost/json.hpp>
#include <cmath>

#include "bench/kvroute_bench/cluster_admissions.h"
#include "bench/kvroute_bench/instance_load.h"
#include "bench/kvroute_bench/prompt_sources.h"
#include "bench/kvroute_bench/report.h"

namespace kvroute::bench {
namespace json = boost::json;
namespace {

json::value Num(double v) {
  if (!std::isfinite(v)) return nullptr;
  return v;
}

// -1 (unknown) and NaN become null.
json::value NonNegative(double v) { return std::isfinite(v) && v >= 0 ? json::value(v) : nullptr; }

json::object DistJson(const Distribution& d) {
  return {{"n", d.n},          {"mean", Num(d.mean)}, {"p50", Num(d.p50)},
          {"p90", Num(d.p90)}, {"p99", Num(d.p99)},   {"max", Num(d.max)}};
}

json::object SummaryJson(const RunSummary& s) {
  json::object o;
  o["requests"] = s.requests;
  o["errors"] = s.errors;
  o["served"] = s.served;
  o["shed"] = s.shed;
  o["shed_share"] = s.shed_share;
  o["failed"] = s.failed;
  o["gave_up"] = s.gave_up;
  o["dropped"] = s.dropped;
  o["error_rate"] = s.error_rate;
  o["offloads"] = s.offloads;
  o["throughput_rps"] = s.throughput_rps;
  o["prompt_tokens"] = s.prompt_tokens;
  o["cached_tokens"] = s.cached_tokens;
  o["transferred_tokens"] = s.transferred_tokens;
  o["prefix_hit_ratio"] = s.hit_ratio;
  o["prefix_hit_bound"] = s.bound_hit_ratio >= 0 ? json::value(s.bound_hit_ratio) : nullptr;
  o["prefix_hit_pooled_lru_bound"] =
      s.pooled_bound_hit_ratio >= 0 ? json::value(s.pooled_bound_hit_ratio) : nullptr;
  o["fleet_kv_tokens"] = s.fleet_kv_tokens;
  json::object classes;
  for (const ClassSummary& c : s.classes) {
    const EstimateErrorSummary& e = c.estimate;
    json::object est = {{"n", e.n}};
    if (e.n > 0) {
      est["median_abs"] = e.median_abs;
      est["mean_abs"] = e.mean_abs;
      est["mean_signed"] = e.mean_signed;
      est["p90_abs"] = e.p90_abs;
      est["over_5pct"] = e.over_5pct;
      est["under_5pct"] = e.under_5pct;
      est["signed_percentiles"] = json::object{{"p1", Num(e.p1)},
                                               {"p10", Num(e.p10)},
                                               {"p50", Num(e.p50)},
                                               {"p90", Num(e.p90)},
                                               {"p99", Num(e.p99)}};
    }
    classes[c.klass] = json::object{
        {"requests", c.requests},
        {"ttft_s", DistJson(c.ttft)},
        {"tpot_s", DistJson(c.tpot)},
        {"e2e_s", DistJson(c.e2e)},
        {"cache_estimate_error", std::move(est)},
        {"itl_s", json::object{{"gaps", c.itl_gaps},
                               {"p50", NonNegative(c.itl_p50)},
                               {"p99", NonNegative(c.itl_p99)},
                               {"max", NonNegative(c.itl_max)}}},
        {"streams", c.streams},
        {"stalled_stream_share", NonNegative(c.stalled_stream_share)},
        {"slo_requests", c.slo_requests},
        {"slo_met", c.slo_met},
        {"goodput", NonNegative(c.goodput)},
        {"missed",
         json::object{{"floor", c.missed_floor}, {"wait", c.missed_wait}, {"tpot", c.missed_tpot}}},
        {"ttft_prediction",
         json::object{{"n", c.predicted},
                      {"abs_error_p50", NonNegative(c.prediction_abs_error_p50)},
                      {"abs_error_p90", NonNegative(c.prediction_abs_error_p90)},
                      {"signed_error_p50", c.prediction_signed_error_p50},
                      {"abs_error_s_p50", NonNegative(c.prediction_abs_error_s_p50)}}}};
  }
  o["classes"] = std::move(classes);
  o["offload_prefill_s"] = DistJson(s.offload_prefill);
  o["offload_transfer_s"] = DistJson(s.offload_transfer);
  o["cache_estimate_error"] =
      s.cache_estimate_error >= 0 ? json::value(s.cache_estimate_error) : nullptr;
  o["offload_rate"] = s.offload_rate;
  o["offloaded_prompt_tokens"] = s.offloaded_prompt_tokens;
  o["transferred_bytes"] = NonNegative(s.transferred_bytes);
  o["slo"] = json::object{{"ttft_warm_s", s.slo.ttft_warm_s},
                          {"ttft_medium_s", s.slo.ttft_medium_s},
                          {"ttft_heavy_s", s.slo.ttft_heavy_s},
                          {"tpot_s", s.slo.tpot_s},
                          {"class", SloClassSourceName(s.slo.class_source)},
                          {"stream_stall_s", kStreamStallS}};
  o["goodput_rps"] = NonNegative(s.goodput_rps);
  o["ttft_colocated_s"] = DistJson(s.floor_split.ttft);
  o["ttft_floor_s"] = DistJson(s.floor_split.floor);
  o["ttft_queue_s"] = DistJson(s.floor_split.queue);
  o["queue_share"] = NonNegative(s.floor_split.queue_share);
  o["heavy_ttft_colocated_s"] = DistJson(s.heavy_split.ttft);
  o["heavy_ttft_floor_s"] = DistJson(s.heavy_split.floor);
  o["heavy_ttft_queue_s"] = DistJson(s.heavy_split.queue);
  o["heavy_queue_share"] = NonNegative(s.heavy_split.queue_share);
  o["jobs"] = s.jobs;
  o["jobs_ok"] = s.jobs_ok;
  o["turns_planned"] = s.turns_planned;
  o["turns_unsent"] = s.turns_unsent;
  o["planned_goodput"] = NonNegative(s.planned_goodput);
  o["job_completion_s"] = DistJson(s.job_completion);
  json::array turns_mean, turns_p50;
  for (double v : s.turn_mean_e2e) turns_mean.push_back(Num(v));
  for (double v : s.turn_p50_e2e) turns_p50.push_back(Num(v));
  o["turn_mean_e2e_s"] = std::move(turns_mean);
  o["turn_p50_e2e_s"] = std::move(turns_p50);
  o["t_last_over_t1"] = s.t8_over_t1 >= 0 ? json::value(s.t8_over_t1) : nullptr;
  o["mean_kv_usage"] = s.mean_kv_usage >= 0 ? json::value(s.mean_kv_usage) : nullptr;
  o["max_kv_usage"] = s.max_kv_usage >= 0 ? json::value(s.max_kv_usage) : nullptr;
  o["mean_gpu_busy"] = s.mean_gpu_busy >= 0 ? json::value(s.mean_gpu_busy) : nullptr;
  o["sim_lag_p99_s"] = s.sim_lag_p99 >= 0 ? json::value(s.sim_lag_p99) : nullptr;
  o["max_sim_lag_s"] = s.max_sim_lag >= 0 ? json::value(s.max_sim_lag) : nullptr;
  if (s.session_turns.known()) {
    auto kind = [](const TurnKind& k) {
      return json::object{{"turns", k.turns},
                          {"computed_tokens", k.computed_tokens},
                          {"slo_met", k.slo_met},
                          {"missed_floor", k.missed_floor}};
    };
    o["session_turns"] = json::object{{"first", kind(s.session_turns.first)},
                                      {"home", kind(s.session_turns.home)},
                                      {"moved", kind(s.session_turns.moved)}};
  } else {
    o["session_turns"] = nullptr;
  }
  o["queued_share"] = NonNegative(s.queued_share);
  o["queued_kv_full_share"] = NonNegative(s.queued_kv_full_share);
  json::array instances;
  for (const InstanceLoad& l : s.instances) {
    instances.push_back(json::object{{"instance", l.instance},
                                     {"sessions_started", l.sessions_started},
                                     {"served", l.served},
                                     {"computed_tokens", l.computed_tokens},
                                     {"running", NonNegative(l.running)},
                                     {"waiting", NonNegative(l.waiting)},
                                     {"gpu_busy", NonNegative(l.gpu_busy)}});
  }
  o["instances"] = std::move(instances);
  return o;
}

// Several replicas sharing a store: their residency admissions (cluster_admissions.h).
// Empty without any.
json::object ClusterAdmissionsJson(const RunResult& r) {
  const ClusterAdmissions a = CountClusterAdmissions(r);
  if (a.asked == 0) return {};
  json::object by_outcome;
  for (const auto& [outcome, n] : a.by_outcome) by_outcome[outcome] = n;
  return json::object{{"asked", a.asked},
                      {"by_outcome", std::move(by_outcome)},
                      {"beyond_fill", a.beyond_fill},
                      {"peak_reserved_of_fill", a.peak_reserved_of_fill}};
}

}  // namespace

json::value ReportJson(const Report& report) {
  const std::vector<RunSummary> sums = SummarizeAll(report);
  json::object root;
  root["title"] = report.title;
  root["generated_at"] = report.generated_at;
  json::object setup;
  for (const auto& [k, v] : report.setup) setup[k] = v;
  root["setup"] = std::move(setup);
  json::array runs;
  for (size_t i = 0; i < report.runs.size(); ++i) {
    const RunResult& r = report.runs[i];
    json::object o;
    o["name"] = r.name;
    o["mode"] = r.mode;
    o["heavy_threshold"] = r.heavy_threshold;
    o["target"] = r.target;
    o["workload"] = r.workload;
    o["time_scale"] = r.time_scale;
    o["duration_s"] = r.duration_s;
    o["client"] = json::object{{"session_ids", r.session_ids ? "send" : "none"},
                               {"open_loop_turn_s", r.open_loop_turn_s},
                               {"client_timeout_s", r.client_timeout_s},
                               {"shed_retries", r.shed_retries}};
    o["summary"] = SummaryJson(sums[i]);
    json::array reqs;
    for (const RequestRecord& q : r.requests) {
      reqs.push_back(json::object{{"id", q.request_id},
                                  {"job", q.job},
                                  {"turn", q.turn},
                                  {"trace_index", q.trace_index},
                                  {"class", q.klass},
                                  {"backend", q.backend},
                                  {"status", q.http_status},
                                  {"error", q.error},
                                  {"outcome", OutcomeName(q.outcome())},
                                  {"retry_after_s", q.retry_after_s},
                                  {"t_start", q.t_start},
                                  {"ttft", q.ttft},
                                  {"tpot", q.tpot},
                                  {"e2e", q.e2e},
                                  {"prompt_tokens", q.prompt_tokens},
                                  {"cached_tokens", q.cached_tokens},
                                  {"completion_tokens", q.completion_tokens},
                                  {"bound_cached_tokens", q.bound_cached_tokens},
                                  {"cached_tokens_est", q.cached_tokens_est},
                                  {"prefill_leg_s", q.prefill_leg_s},
                                  {"transfer_s", q.transfer_s},
                                  {"max_gap", q.max_gap},
                                  {"gaps", q.gaps},
                                  {"compute_floor_s", q.compute_floor_s},
                                  {"replica", q.replica},
                                  {"failovers", q.failovers},
                                  {"cluster_admission", q.cluster_admission},
                                  {"cluster_footprint_tokens", q.cluster_footprint_tokens},
                                  {"cluster_reserved_tokens", q.cluster_reserved_tokens},
                                  {"cluster_fill_tokens", q.cluster_fill_tokens}});
    }
    o["requests"] = std::move(reqs);
    if (const json::object cluster = ClusterAdmissionsJson(r); !cluster.empty()) {
      o["cluster_admissions"] = cluster;
    }
    // Inter-token gaps (wall seconds) as sparse [bucket, count] pairs of LogHistogram.
    json::object itl;
    for (const auto& [klass, h] : r.itl_by_class) {
      json::array buckets;
      for (int b = 0; b < LogHistogram::kBuckets; ++b) {
        if (h.bucket_count(b) > 0) buckets.push_back(json::array{b, h.bucket_count(b)});
      }
      itl[klass] = json::object{{"count", h.count()},
                                {"sum", h.sum()},
                                {"min", Num(h.min())},
                                {"max", Num(h.max())},
                                {"buckets", std::move(buckets)}};
    }
    o["itl_histograms"] = json::object{{"buckets_per_decade", LogHistogram::kBucketsPerDecade},
                                       {"min_exponent", LogHistogram::kMinExponent},
                                       {"by_class", std::move(itl)}};
    o["kv_bytes_per_token"] = r.kv_bytes_per_token;
    json::array jobs;
    for (const JobRecord& j : r.jobs) {
      json::array turns;
      for (double t : j.turn_e2e) turns.push_back(t);
      jobs.push_back(json::object{{"job", j.job},
                                  {"t_arrival", j.t_arrival},
                                  {"t_done", j.t_done},
                                  {"ok", j.ok},
                                  {"turn_e2e", std::move(turns)},
                                  {"planned_turns", j.planned_turns}});
    }
    o["jobs"] = std::move(jobs);
    json::array samples;
    for (const InstanceSample& x : r.samples) {
      samples.push_back(json::object{{"t", x.t},
                                     {"instance", x.instance},
                                     {"kv_usage", x.kv_usage},
                                     {"running", x.running},
                                     {"waiting", x.waiting},
                                     {"gpu_busy", x.gpu_busy},
                                     {"sim_lag", x.sim_lag_s}});
    }
    o["samples"] = std::move(samples);
    if (const PromptSources ps = SumPromptSources(r.samples); ps.known) {
      o["prompt_tokens_by_source"] = json::object{{"gpu_hit", ps.gpu_hit},
                                                  {"host_reload", ps.host_reload},
                                                  {"pool_reload", ps.pool_reload},
                                                  {"computed", ps.computed}};
    }
    if (!r.learned_factors.empty()) {
      json::object learned;
      for (const auto& [metric, by_backend] : r.learned_factors) {
        json::object b;
        for (const auto& [backend, v] : by_backend) b[backend] = v;
        learned[metric] = std::move(b);
      }
      o["learned_time_factors"] = std::move(learned);
    }
    runs.push_back(std::move(o));
  }
  root["runs"] = std::move(runs);
  return root;
}

}  // namespace kvroute::bench
