#include "proxy/backend_monitor.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proxy/absl_compat.h"
#include "proxy/upstream.h"
#include "proxy/worker.h"
#include "wire/prometheus_text.h"

namespace kvroute::proxy {

net::awaitable<void> BackendMonitor::CheckOnce(Worker& w, bool force_scrape) {
  const auto fleet = router_.Backends();
  const auto& backends = *fleet;
  w.Sync(backends);
  if (last_scrape_.size() < backends.size()) {
    last_scrape_.resize(backends.size(), std::chrono::steady_clock::time_point{});
  }
  for (size_t i = 0; i < backends.size(); ++i) {
    if (backends[i].retired) continue;
    http::request<http::string_body> hreq{http::verb::get, "/health", 11};
    BufferedResponse h = co_await FetchBuffered(w.pool, static_cast<int>(i), std::move(hreq),
                                                config_.monitor.health_timeout, 64 * 1024);
    const bool ok = !h.ec && h.status == 200;
    health_.OnProbe(static_cast<int>(i), ok, absl::Now());
    const auto now = std::chrono::steady_clock::now();
    if (ok &&
        (force_scrape || now - last_scrape_[i] >= ToChrono(config_.monitor.scrape_interval))) {
      last_scrape_[i] = now;
      http::request<http::string_body> mreq{http::verb::get, "/metrics", 11};
      BufferedResponse m = co_await FetchBuffered(w.pool, static_cast<int>(i), std::move(mreq),
                                                  config_.monitor.health_timeout, 8 << 20);
      if (!m.ec && m.status == 200) {
        const router::EngineGauges g = ParseEngineMetrics(m.body);
        router_.UpdateEngineGauges(static_cast<int>(i), g);
        health_.OnProgress(static_cast<int>(i),
                           EngineProgress{g.num_requests_running > 0 || g.num_requests_waiting > 0,
                                          g.work_tokens_total},
                           absl::Now());
      }
    }
  }
  // Breakers whose ejection ran out turn half-open only after this round's
  // probes: an instance that also fails its checks stays out instead of
  // flapping in for the moment between the two.
  health_.Tick(absl::Now());
}

net::awaitable<void> BackendMonitor::Run(Worker& w, const std::atomic<bool>& stop) {
  net::steady_timer timer(w.ioc);
  for (;;) {
    if (stop.load()) co_return;
    co_await CheckOnce(w, false);
    timer.expires_after(ToChrono(config_.monitor.health_interval));
    auto [ec] = co_await timer.async_wait(kUseTuple);
    if (ec) co_return;
  }
}

void ApplyHealthChange(const HealthChange& c, router::Router& router, ProxyMetrics& metrics,
                       const std::vector<std::unique_ptr<Worker>>& workers) {
  // Runs under the tracker's lock: changes reach the router in order.
  const std::string name = (*router.Backends())[c.backend].name;
  router.SetHealthy(c.backend, c.routable);
  metrics.health_transitions->Inc({name, c.routable ? "healthy" : "unhealthy"});
  if (c.routable) {
    spdlog::warn("backend {} is back in rotation ({})", name, c.reason);
    return;
  }
  metrics.ejections->Inc({name, c.reason});
  spdlog::warn("backend {} ejected ({})", name, c.reason);
  // Requests waiting on it for a response header go elsewhere now.
  for (const auto& w : workers) {
    net::post(w->ioc, [w = w.get(), b = c.backend] { w->EjectWaiting(b); });
  }
}

namespace {

// A series of vLLM's offloading metrics that counts loads into the GPU
// (OffloadingConnector labels them transfer_type="CPU_to_GPU").
bool IsHostLoad(const wire::PrometheusSample& s) {
  const auto it = s.labels.find("transfer_type");
  return it != s.labels.end() && absl::EqualsIgnoreCase(it->second, "CPU_to_GPU");
}

// A series of vLLM's MooncakeStoreConnector metrics that counts successful
// loads from the store (MooncakeStorePromMetrics labels each Mooncake RPC:
// operation="load_get", status="ok").
bool IsPoolLoad(const wire::PrometheusSample& s) {
  const auto op = s.labels.find("operation");
  const auto status = s.labels.find("status");
  return op != s.labels.end() && op->second == "load_get" && status != s.labels.end() &&
         status->second == "ok";
}

}  // namespace

router::EngineGauges ParseEngineMetrics(std::string_view text) {
  router::EngineGauges g;
  int64_t block_size = 0, num_blocks = 0;
  auto label = [](const wire::PrometheusSample& s, const char* key) -> int64_t {
    const auto it = s.labels.find(key);
    int64_t out = 0;
    if (it == s.labels.end() || !absl::SimpleAtoi(it->second, &out)) return 0;
    return out;
  };
  for (const wire::PrometheusSample& s : wire::ParsePrometheusText(text)) {
    // An engine with several data-parallel ranks reports one series per
    // rank: counts add up, usage takes the fullest rank.
    if (s.name == "vllm:num_requests_running") {
      g.num_requests_running =
          std::max<int64_t>(0, g.num_requests_running) + static_cast<int64_t>(s.value);
    } else if (s.name == "vllm:num_requests_waiting") {
      g.num_requests_waiting =
          std::max<int64_t>(0, g.num_requests_waiting) + static_cast<int64_t>(s.value);
    } else if (s.name == "vllm:kv_cache_usage_perc" || s.name == "vllm:gpu_cache_usage_perc") {
      g.kv_cache_usage_perc = std::max(g.kv_cache_usage_perc, s.value);
    } else if (s.name == "vllm:prompt_tokens_total" || s.name == "vllm:generation_tokens_total") {
      g.work_tokens_total = std::max(0.0, g.work_tokens_total) + s.value;
    } else if ((s.name == "vllm:kv_offload_total_bytes_total" ||
                s.name == "vllm:kv_offload_total_time_total") &&
               IsHostLoad(s)) {
      double& total = s.name == "vllm:kv_offload_total_bytes_total" ? g.host_load_bytes_total
                                                                    : g.host_load_seconds_total;
      total = std::max(0.0, total) + s.value;
    } else if ((s.name == "vllm:mooncake_store_operation_bytes_total" ||
                s.name == "vllm:mooncake_store_operation_time_seconds_sum") &&
               IsPoolLoad(s)) {
      double& total = s.name == "vllm:mooncake_store_operation_bytes_total"
                          ? g.pool_load_bytes_total
                          : g.pool_load_seconds_total;
      total = std::max(0.0, total) + s.value;
    } else if (s.name == "vllm:cache_config_info") {
      block_size = label(s, "block_size");
      num_blocks = label(s, "num_gpu_blocks");
      // --kv-offloading-size, in GiB ("None" without a host tier).
      double offloading_gib = 0;
      if (const auto it = s.labels.find("kv_offloading_size");
          it != s.labels.end() && absl::SimpleAtod(it->second, &offloading_gib) &&
          offloading_gib > 0) {
        g.host_capacity_bytes = offloading_gib * 1024 * 1024 * 1024;
      }
    }
  }
  if (block_size > 0 && num_blocks > 0) g.capacity_tokens = block_size * num_blocks;
  return g;
}

}  // namespace kvroute::proxy
