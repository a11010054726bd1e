#include "proxy/backend_monitor.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "proxy/absl_compat.h"
#include "proxy/upstream.h"
#include "proxy/worker.h"

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
        router_.UpdateEngineGauges(static_cast<int>(i), ParseEngineMetrics(m.body));
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

router::EngineGauges ParseEngineMetrics(std::string_view text) {
  router::EngineGauges g;
  int64_t block_size = 0, num_blocks = 0;
  for (absl::string_view line : absl::StrSplit(ToAbsl(text), '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t name_end = line.find_first_of("{ ");
    if (name_end == absl::string_view::npos) continue;
    const absl::string_view name = line.substr(0, name_end);
    const size_t value_pos = line.rfind(' ');
    double v = 0;
    if (value_pos == absl::string_view::npos || !absl::SimpleAtod(line.substr(value_pos + 1), &v)) {
      continue;
    }
    if (name == "vllm:num_requests_running") {
      g.num_requests_running =
          std::max<int64_t>(0, g.num_requests_running) + static_cast<int64_t>(v);
    } else if (name == "vllm:num_requests_waiting") {
      g.num_requests_waiting =
          std::max<int64_t>(0, g.num_requests_waiting) + static_cast<int64_t>(v);
    } else if (name == "vllm:kv_cache_usage_perc" || name == "vllm:gpu_cache_usage_perc") {
      g.kv_cache_usage_perc = std::max(g.kv_cache_usage_perc, v);
    } else if (name == "vllm:cache_config_info") {
      auto label = [&](absl::string_view key) -> int64_t {
        const std::string needle = absl::StrCat(key, "=\"");
        const size_t p = line.find(needle);
        if (p == absl::string_view::npos) return 0;
        const size_t s = p + needle.size();
        const size_t e = line.find('"', s);
        int64_t out = 0;
        if (e == absl::string_view::npos || !absl::SimpleAtoi(line.substr(s, e - s), &out))
          return 0;
        return out;
      };
      block_size = label("block_size");
      num_blocks = label("num_gpu_blocks");
    }
  }
  if (block_size > 0 && num_blocks > 0) g.capacity_tokens = block_size * num_blocks;
  return g;
}

}  // namespace kvroute::proxy
