#include "proxy/proxy_metrics.h"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/time/clock.h"
#include "wire/prometheus_text.h"

namespace kvroute::proxy {

ProxyMetrics::ProxyMetrics(metrics::Registry& reg)
    : requests(reg.AddCounter("kvroute_requests_total",
                              "Completion requests by route, mode, class and HTTP status.",
                              {"route", "mode", "class", "status"})),
      ttfb(reg.AddHistogram("kvroute_time_to_first_byte_seconds",
                            "Time from request arrival to the engine's response header, which "
                            "for a stream is its first token.",
                            {"route", "class"}, metrics::LatencyBuckets())),
      duration(reg.AddHistogram("kvroute_request_duration_seconds",
                                "End-to-end request latency as seen by kvroute.",
                                {"route", "class"}, metrics::LatencyBuckets())),
      tpot(reg.AddHistogram("kvroute_time_per_output_token_seconds",
                            "Mean time per output token after the first, per request.", {"class"},
                            metrics::LatencyBuckets())),
      upstream_errors(reg.AddCounter("kvroute_upstream_errors_total",
                                     "Failed upstream exchanges by backend and kind.",
                                     {"backend", "kind"})),
      client_disconnects(reg.AddCounter("kvroute_client_disconnects_total",
                                        "Requests whose client went away before the end.")),
      stream_errors(reg.AddCounter("kvroute_stream_errors_total",
                                   "Responses that broke after their first byte.", {"backend"})),
      decisions(reg.AddCounter("kvroute_decisions_total", "Routing decisions.",
                               {"mode", "class", "decision"})),
      decision_time(
          reg.AddHistogram("kvroute_decision_seconds", "Time to hash the prompt and decide.", {},
                           {1e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 1e-2})),
      affinity(reg.AddCounter("kvroute_affinity_total", "Session affinity outcomes.", {"outcome"})),
      cached_tokens_est(reg.AddCounter("kvroute_cached_tokens_estimated_total",
                                       "Prompt tokens the router estimated cached, for "
                                       "requests whose engine reported cached_tokens.",
                                       {"backend"})),
      cached_tokens_actual(reg.AddCounter("kvroute_cached_tokens_actual_total",
                                          "Prompt tokens the engine reported cached.",
                                          {"backend"})),
      estimate_error(
          reg.AddHistogram("kvroute_cache_estimate_error_ratio",
                           "(estimated - actual cached tokens) / prompt tokens, per request.", {},
                           {-1, -0.5, -0.25, -0.1, -0.05, -0.01, 0.01, 0.05, 0.1, 0.25, 0.5, 1})),
      connections(reg.AddGauge("kvroute_client_connections", "Open client connections.")),
      inflight(reg.AddGauge("kvroute_requests_inflight", "Completion requests in flight.")),
      health_transitions(reg.AddCounter("kvroute_backend_health_transitions_total",
                                        "Backend health changes.", {"backend", "to"})),
      retries(
          reg.AddCounter("kvroute_retries_total",
                         "Upstream attempts made again before any byte reached the client, "
                         "by the backend retried on and reason (stale_connection: a pooled "
                         "keep-alive connection was dead; prefill_failed / decode_failed: a "
                         "handoff fell back to co-located serving; connect, timeout, 5xx, ejected, "
                         "upstream_error: the previous instance failed the request and it "
                         "was routed again, avoiding it).",
                         {"backend", "reason"})),
      ejections(reg.AddCounter("kvroute_backend_ejections_total",
                               "Times a backend was taken out of rotation, by reason "
                               "(health_check, passive_failures, half_open_failure, hung).",
                               {"backend", "reason"})),
      admission_rejections(reg.AddCounter(
          "kvroute_admission_rejections_total",
          "Completion requests refused with 429 because kvroute was at "
          "limits.max_inflight_requests and the queue was full or its wait ran out.")),
      shed(reg.AddCounter("kvroute_shed_total",
                          "Completion requests answered 429 at admission, before any engine "
                          "work, because their predicted TTFT exceeded their deadline "
                          "(router.shed), by route, class and whether the request continues a "
                          "running session or starts a new one.",
                          {"route", "class", "session"})),
      shed_averted(reg.AddCounter(
          "kvroute_shed_averted_total",
          "Session turns the overload rule placed off their session's instance, predicted past "
          "their deadline there and sent to their own instance instead, in time there, rather "
          "than answered 429 (router.shed), by route and class.",
          {"route", "class"})),
      kept_home(reg.AddCounter(
          "kvroute_kept_home_total",
          "Session turns the overload rule moved off their crowded instance that stayed there "
          "instead, because its host KV tier holds their prefix and the time model put their "
          "first token sooner there than where the rule sent them, by route and class.",
          {"route", "class"})),
      busy_timeouts(reg.AddCounter(
          "kvroute_busy_timeouts_total",
          "Requests that timed out waiting on an engine whose counters were moving (busy, "
          "not broken): they failed, and did not count against the instance's health.",
          {"backend"})),
      offloads(reg.AddCounter("kvroute_offloads_total",
                              "Prefill/decode handoffs by connector and outcome (ok, "
                              "prefill_failed, decode_failed, stream_error, client_gone, "
                              "over_bound, bootstrap_failed, no_kv_params, bad_body, failed).",
                              {"connector", "outcome"})),
      transfer_seconds(reg.AddHistogram("kvroute_transfer_seconds",
                                        "Handoff time: prefill done to the decode leg's first "
                                        "byte.",
                                        {"connector"}, metrics::LatencyBuckets())),
      prefill_seconds(reg.AddHistogram("kvroute_prefill_leg_seconds",
                                       "Duration of the prefill leg of a handoff.", {"connector"},
                                       metrics::LatencyBuckets())),
      offload_min_new_tokens(reg.AddGauge(
          "kvroute_offload_min_new_tokens",
          "Fewest new (uncached) prompt tokens of any request offloaded so far: the heavy "
          "threshold in effect, which the decision sets under heavy_threshold auto; -1 before "
          "the first offload.")),
      residency_wait(
          reg.AddHistogram("kvroute_residency_wait_seconds",
                           "Time an agent session's turn waited for its KV to fit its instance "
                           "(router.residency); 0 for a turn that went at once.",
                           {}, metrics::LatencyBuckets())) {
  offload_min_new_tokens->Set({}, -1);
}

void RegisterBackendGauges(metrics::Registry& reg, const router::Router* router) {
  reg.AddCollector([r = router](std::string* out) {
    const auto report = r->Report();
    struct G {
      const char* name;
      const char* help;
      double (*get)(const router::BackendReport&);
    };
    static const G kGauges[] = {
        {"kvroute_backend_healthy", "1 when the backend is healthy.",
         [](const router::BackendReport& b) { return b.healthy ? 1.0 : 0.0; }},
        {"kvroute_backend_inflight_requests", "Requests in flight per backend.",
         [](const router::BackendReport& b) { return double(b.inflight_requests); }},
        {"kvroute_backend_inflight_prefill_tokens",
         "Estimated new prompt tokens of requests not yet at their first token.",
         [](const router::BackendReport& b) { return double(b.inflight_prefill_tokens); }},
        {"kvroute_backend_decoding_requests", "Requests past their first token.",
         [](const router::BackendReport& b) { return double(b.decoding_requests); }},
        {"kvroute_backend_shadow_tokens", "Tokens the shadow index believes cached.",
         [](const router::BackendReport& b) { return double(b.shadow_tokens); }},
        {"kvroute_backend_kv_usage", "Engine-reported KV cache usage (0..1), -1 unknown.",
         [](const router::BackendReport& b) { return b.kv_usage; }},
    };
    auto render = [&](const G& g) {
      metrics::RenderGaugeHeader(out, g.name, g.help);
      for (const auto& b : report) {
        if (!b.retired) metrics::RenderSample(out, g.name, {{"backend", b.name}}, g.get(b));
      }
    };
    for (const G& g : kGauges) render(g);
    // The cost model's learned time factors (router/rate_learner.h).
    if (!r->options().rate_learning.enabled) return;
    static const G kFactors[] = {
        {"kvroute_prefill_time_factor",
         "Learned realised / predicted prefill time of the backend (1 until learned).",
         [](const router::BackendReport& b) { return b.prefill_time_factor; }},
        {"kvroute_host_reload_time_factor",
         "Learned engine-timed host tier load seconds / the seconds at "
         "router.host_load_bytes_per_second (1 until learned).",
         [](const router::BackendReport& b) { return b.host_reload_time_factor; }},
        {"kvroute_pool_reload_time_factor",
         "Learned engine-timed fleet-shared pool load seconds / the seconds at "
         "router.pool_load_bytes_per_second (1 until learned).",
         [](const router::BackendReport& b) { return b.pool_reload_time_factor; }},
    };
    for (const G& g : kFactors) render(g);
    const router::RouterStats stats = r->Stats();
    metrics::RenderGaugeHeader(out, "kvroute_transfer_time_factor",
                               "Learned realised / predicted time from an offload's prefill end to "
                               "its first token, per pair with samples.");
    for (const router::TransferFactorReport& t : stats.transfer_time_factors) {
      const auto a = static_cast<size_t>(t.prefill_backend);
      const auto d = static_cast<size_t>(t.decode_backend);
      if (a >= report.size() || d >= report.size() || report[a].retired || report[d].retired) {
        continue;
      }
      metrics::RenderSample(out, "kvroute_transfer_time_factor",
                            {{"prefill", report[a].name}, {"decode", report[d].name}}, t.factor);
    }
  });
}

void RegisterKvSizingGauges(metrics::Registry& reg, router::Router* router) {
  reg.AddCollector([r = router](std::string* out) {
    const router::KvSizingReport s = r->Sizing(absl::Now());
    const kvsize::TierLoad& l = s.load;
    const kvsize::TierPressure& p = s.pressure;
    const double n = l.instances > 0 ? l.instances : 1;
    auto scalar = [out](const char* name, const char* help, double v) {
      metrics::RenderGaugeHeader(out, name, help);
      metrics::RenderSample(out, name, {}, v);
    };
    auto tiers = [out](const char* name, const char* help, double gpu, double host) {
      metrics::RenderGaugeHeader(out, name, help);
      metrics::RenderSample(out, name, {{"tier", "gpu"}}, gpu);
      metrics::RenderSample(out, name, {{"tier", "host"}}, host);
    };
    scalar("kvroute_kv_working_set_tokens",
           "KV the live sessions need kept: footprints (last prompt + output) of the sessions "
           "active within session_resident_window, plus in-flight requests without a session.",
           l.working_set_tokens);
    tiers("kvroute_kv_capacity_tokens",
          "KV capacity of the healthy fleet by tier: gpu = the learned HBM KV capacity, host = "
          "the engines' host tier (vllm:cache_config_info kv_offloading_size / c_KV).",
          l.gpu_capacity_tokens, l.host_capacity_tokens);
    tiers("kvroute_kv_instance_capacity_tokens",
          "Mean KV capacity of one healthy instance by tier: what one more instance adds.",
          l.gpu_capacity_tokens / n, l.host_capacity_tokens / n);
    scalar("kvroute_kv_instances", "Healthy instances whose capacities the tiers sum.",
           l.instances);
    tiers("kvroute_kv_write_rate_tokens_per_second",
          "KV tokens newly written per second into each tier over router.sizing window "
          "(engine KV events where published, else prompt - cached + output of completed "
          "requests); host counts what a host tier would take where there is none.",
          l.gpu_write_rate_tokens_per_s, l.host_write_rate_tokens_per_s);
    tiers("kvroute_kv_retention_seconds",
          "How long each tier keeps a block before newer writes evict it: capacity / write "
          "rate (+Inf while nothing is written, 0 for a tier with no capacity).",
          p.gpu_retention_s, p.host_retention_s);
    scalar("kvroute_kv_reuse_gap_seconds",
           "Mean time from a session's turn ending to its next turn's first token (think time "
           "+ TTFT) over the sizing window; 0 without turns.",
           l.reuse_gap_s);
    scalar("kvroute_residency_room_tier",
           "1 while the residency gate's room on instances with a host tier (or behind the "
           "pool) is the tier, 0 while it is the GPU pool (router.residency.room).",
           s.gate_room_tier ? 1 : 0);
    scalar("kvroute_long_pause_ratio",
           "The share of the agents' pauses (a turn's end to the session's next turn) longer "
           "than router.residency.auto_long_pause_s, which room: auto follows; 0 in the other "
           "modes.",
           s.long_pause_share);
    scalar("kvroute_kv_bytes_per_token",
           "KV bytes per token (c_KV) the router prices KV with (router.offload_cost or the "
           "profile).",
           l.kv_bytes_per_token);
  });
}

void RegisterResidencyCounters(metrics::Registry& reg,
                               const residency::ResidencyWait* residency) {
  reg.AddCollector([w = residency](std::string* out) {
    if (!w->enabled()) return;
    const router::ResidencyGate::Counters c = w->counters();
    struct Family {
      const char* name;
      const char* label;
      const char* help;
      std::initializer_list<std::pair<const char*, uint64_t>> samples;
    };
    const Family families[] = {
        {"kvroute_residency_turns_total", "outcome",
         "Agent sessions' turns through the residency gate: at_once (resident, or its KV "
         "fitted), swapped_in (its prefix reloadable from the instance's host tier sooner than "
         "it would wait: idle residents swapped out), after_wait (room was made), "
         "after_max_wait (the longest residents yielded to it).",
         {{"at_once", c.admitted_at_once},
          {"swapped_in", c.swapped_in},
          {"after_wait", c.admitted_after_wait},
          {"after_max_wait", c.admitted_by_timeout}}},
        {"kvroute_residency_releases_total", "cause",
         "Resident sessions that made room: quantum (yielded after quantum_turns while others "
         "waited), max_wait (yielded to a waiter past max_wait_s), grown (its next turn's "
         "context outgrew its room: router.residency.yield_grown), idle (idle for grace_s), "
         "swapped_out (idle, its KV in the host tier, for a swapped-in turn).",
         {{"quantum", c.yielded},
          {"max_wait", c.yielded_forced},
          {"grown", c.yielded_grown},
          {"idle", c.expired},
          {"swapped_out", c.swapped_out}}},
    };
    for (const Family& f : families) {
      wire::AppendHelpAndType(out, f.name, "counter", f.help);
      for (const auto& [value, n] : f.samples) {
        metrics::RenderSample(out, f.name, {{f.label, value}}, static_cast<double>(n));
      }
    }
    metrics::RenderGaugeHeader(out, "kvroute_residency_waiting",
                               "Turns waiting for their KV to fit their instance now.");
    metrics::RenderSample(out, "kvroute_residency_waiting", {}, static_cast<double>(w->waiting()));
  });
}

}  // namespace kvroute::proxy
