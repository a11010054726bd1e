// Per-instance fleet sampling: scrapes each instance's Prometheus /metrics (vLLM gauges, and
// the simulator's busy-fraction and scheduler-lag gauges) and, optionally, a DCGM exporter
// for GPU utilisation.
//
// Usage:
//   std::vector<PromSample> s = ParsePrometheusText(body);
//   InstanceSample x = InstanceSampleFromMetrics(s);
//   co_await SampleFleet(instances, dcgm, interval, epoch, stop, out);
//
// Thread-safety: ParsePrometheusText and InstanceSampleFromMetrics are pure. SampleFleet runs
// on one executor and appends to `out` only from that executor.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include "bench/kvroute_bench/http_client.h"
#include "bench/kvroute_bench/records.h"
#include "wire/prometheus_text.h"

namespace kvroute::bench {

// A scraped sample, and the parser of a scraped page (wire/prometheus_text.h).
using PromSample = wire::PrometheusSample;
using wire::ParsePrometheusText;

// KV usage and busy fraction are averaged over label sets (engines), running/waiting summed.
// Missing metrics stay -1.
InstanceSample InstanceSampleFromMetrics(const std::vector<PromSample>& samples);

// kvroute's learned per-backend time factors (RunResult::learned_factors): the samples of
// kLearnedFactorMetrics, by metric, then `backend` label.
inline constexpr const char* kLearnedFactorMetrics[] = {"kvroute_prefill_time_factor",
                                                        "kvroute_host_reload_time_factor",
                                                        "kvroute_pool_reload_time_factor"};
std::map<std::string, std::map<std::string, double>> LearnedFactorsFromMetrics(
    const std::vector<PromSample>& samples);

// DCGM_FI_DEV_GPU_UTIL (percent) per `gpu` label, as fractions.
std::map<std::string, double> GpuUtilFromDcgm(const std::vector<PromSample>& samples);

struct NamedEndpoint {
  std::string name;
  Endpoint endpoint;
};

// Stops a running sampler; owned by the caller, used only on the sampler's executor.
struct SamplerControl {
  bool stop = false;
  boost::asio::steady_timer* timer = nullptr;  // set by SampleFleet while it runs
  void Stop() {
    stop = true;
    if (timer != nullptr) timer->cancel();
  }
};

// Every `interval`, scrapes every instance (and the DCGM exporter if `dcgm` has a host) and
// appends one InstanceSample per instance (DCGM GPUs as "dcgm-gpu<N>") to `out`, stamped
// with seconds since `epoch`. Returns as soon as control->Stop() is called
// (after an in-flight scrape).
boost::asio::awaitable<void> SampleFleet(std::vector<NamedEndpoint> instances, Endpoint dcgm,
                                         std::chrono::milliseconds interval,
                                         std::chrono::steady_clock::time_point epoch,
                                         SamplerControl* control,
                                         std::vector<InstanceSample>* out);

}  // namespace kvroute::bench
