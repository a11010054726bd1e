#include "bench/kvroute_bench/metrics_sampler.h"

#include <algorithm>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/as_tuple.hpp>

#include "absl/strings/str_cat.h"

namespace kvroute::bench {
namespace net = boost::asio;

InstanceSample InstanceSampleFromMetrics(const std::vector<PromSample>& samples) {
  InstanceSample x;
  double kv = 0, busy = 0, running = 0, waiting = 0;
  int kv_n = 0, busy_n = 0, running_n = 0, waiting_n = 0;
  for (const PromSample& s : samples) {
    if (s.name == "vllm:kv_cache_usage_perc" || s.name == "vllm:gpu_cache_usage_perc") {
      kv += s.value;
      ++kv_n;
    } else if (s.name == "vllm:num_requests_running") {
      running += s.value;
      ++running_n;
    } else if (s.name == "vllm:num_requests_waiting") {
      waiting += s.value;
      ++waiting_n;
    } else if (s.name == "kvroute_sim_gpu_busy_fraction") {
      busy += s.value;
      ++busy_n;
    } else if (s.name == "vllm:prompt_tokens_by_source_total") {
      const auto source = s.labels.find("source");
      if (source == s.labels.end()) continue;
      double* slot = source->second == "local_compute"          ? &x.prompt_local_compute
                     : source->second == "local_cache_hit"      ? &x.prompt_local_cache_hit
                     : source->second == "external_kv_transfer" ? &x.prompt_external
                                                                : nullptr;
      if (slot != nullptr) *slot = std::max(*slot, 0.0) + s.value;
    } else if (s.name == "kvroute_sim_scheduler_lag_seconds") {
      x.sim_lag_s = std::max(x.sim_lag_s, s.value);
    } else if (s.name == "kvroute_sim_scheduler_lag_max_seconds") {
      x.sim_lag_max_s = std::max(x.sim_lag_max_s, s.value);
    } else if (s.name == "kvroute_sim_pool_prompt_tokens_loaded_total") {
      x.prompt_pool_loaded = std::max(x.prompt_pool_loaded, 0.0) + s.value;
    }
  }
  if (kv_n > 0) x.kv_usage = kv / kv_n;
  if (busy_n > 0) x.gpu_busy = busy / busy_n;
  if (running_n > 0) x.running = running;
  if (waiting_n > 0) x.waiting = waiting;
  return x;
}

std::map<std::string, std::map<std::string, double>> LearnedFactorsFromMetrics(
    const std::vector<PromSample>& samples) {
  std::map<std::string, std::map<std::string, double>> out;
  for (const PromSample& s : samples) {
    const auto backend = s.labels.find("backend");
    if (backend == s.labels.end()) continue;
    for (const char* name : kLearnedFactorMetrics) {
      if (s.name == name) out[s.name][backend->second] = s.value;
    }
  }
  return out;
}

std::map<std::string, double> GpuUtilFromDcgm(const std::vector<PromSample>& samples) {
  std::map<std::string, double> out;
  for (const PromSample& s : samples) {
    if (s.name != "DCGM_FI_DEV_GPU_UTIL") continue;
    auto it = s.labels.find("gpu");
    out[it == s.labels.end() ? "0" : it->second] = s.value / 100.0;
  }
  return out;
}

net::awaitable<void> SampleFleet(std::vector<NamedEndpoint> instances, Endpoint dcgm,
                                 std::chrono::milliseconds interval,
                                 std::chrono::steady_clock::time_point epoch,
                                 SamplerControl* control, std::vector<InstanceSample>* out) {
  auto executor = co_await net::this_coro::executor;
  net::steady_timer timer(executor);
  control->timer = &timer;
  const auto timeout = std::max(interval, std::chrono::milliseconds(1000));
  while (!control->stop) {
    const auto tick = std::chrono::steady_clock::now();
    const double t = std::chrono::duration<double>(tick - epoch).count();
    for (const NamedEndpoint& inst : instances) {
      HttpResponse r = co_await HttpGet(inst.endpoint, "/metrics", timeout);
      InstanceSample x;
      if (r.status == 200) x = InstanceSampleFromMetrics(ParsePrometheusText(r.body));
      x.t = t;
      x.instance = inst.name;
      out->push_back(std::move(x));
    }
    if (!dcgm.host.empty()) {
      HttpResponse r = co_await HttpGet(dcgm, "/metrics", timeout);
      if (r.status == 200) {
        for (const auto& [gpu, util] : GpuUtilFromDcgm(ParsePrometheusText(r.body))) {
          InstanceSample x;
          x.t = t;
          x.instance = absl::StrCat("dcgm-gpu", gpu);
          x.gpu_busy = util;
          out->push_back(std::move(x));
        }
      }
    }
    if (control->stop) break;
    timer.expires_at(tick + interval);
    co_await timer.async_wait(net::as_tuple(net::use_awaitable));
  }
  control->timer = nullptr;
}

}  // namespace kvroute::bench
