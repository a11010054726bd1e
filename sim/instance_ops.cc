// sim::Instance's operational side: fault injection (what each fault does to the
// listener, the connections and the engine) and the endpoints /v1/models,
// /sim/faults and /metrics (vLLM's series, those of its CPU offloading when on, and the
// simulator's own).
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include <boost/json.hpp>

#include "sim/instance.h"
#include "sim/instance_internal.h"
#include "sim/kv_pool_metrics.h"
#include "sim/metrics.h"
#include "wire/prometheus_text.h"

namespace sim {

namespace net = boost::asio;
namespace json = boost::json;
using tcp = net::ip::tcp;
namespace http = boost::beast::http;
using internal::Log;
using internal::UnixSeconds;

Faults Instance::faults() const {
  absl::MutexLock lock(&mu_);
  return faults_;
}

void Instance::SetFaults(const Faults& faults) {
  {
    absl::MutexLock lock(&mu_);
    faults_ = faults;
  }
  net::dispatch(strand_, [this] { ApplyFaultEffects(); });
}

void Instance::ApplyFaultEffects() {
  const Faults f = faults();
  engine_.set_slowdown(f.slowdown);
  if (!f.hang) hang_timer_.cancel();
  if (stopping_) return;
  boost::system::error_code ec;
  const bool refuse = f.refuse_connections || f.killed;
  if (refuse && accepting_) {
    accepting_ = false;
    acceptor_.close(ec);
  }
  if (f.killed && !killed_) ResetConnections();
  killed_ = f.killed;
  if (refuse) return;
  if (!accepting_) {
    const tcp::endpoint ep(net::ip::make_address(options_.host, ec), port_);
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      Log()->error("instance {}: cannot re-open port {}: {}", options_.index, port_, ec.message());
      acceptor_.close(ec);
      return;
    }
    accepting_ = true;
    net::co_spawn(strand_, AcceptLoop(), net::detached);
  }
}

void Instance::ResetConnections() {
  // SO_LINGER 0 makes close() send RST, as the kernel does for a process that dies with
  // connections open: peers see ECONNRESET, not an orderly end of stream.
  boost::system::error_code ec;
  for (Stream* s : streams_) {
    s->socket().set_option(net::socket_base::linger(true, 0), ec);
    s->socket().close(ec);
  }
  AbortWaitingRequests();
  Log()->info("instance {}: killed: {} connections reset, {} requests dropped", options_.index,
              streams_.size(), pendings_.size());
}

std::string Instance::ModelsJson() const {
  json::object model;
  model["id"] = options_.profile.model_name;
  model["object"] = "model";
  model["created"] = UnixSeconds();
  model["owned_by"] = "vllm";
  model["root"] = options_.profile.model_name;
  model["parent"] = nullptr;
  model["max_model_len"] = options_.profile.max_model_len;
  json::object o;
  o["object"] = "list";
  o["data"] = json::array{std::move(model)};
  return json::serialize(o);
}

bool Instance::HandleFaultsRequest(const Request& req, std::string* body, int* status) {
  Instance* target = this;
  if (req.method() == http::verb::post) {
    boost::system::error_code ec;
    json::value v = json::parse(req.body(), ec);
    if (ec || !v.is_object()) {
      *status = 400;
      *body = ErrorJson(MakeApiError(400, "faults: body must be a JSON object"));
      return true;
    }
    const json::object& o = v.as_object();
    if (const json::value* inst = o.if_contains("instance"); inst != nullptr) {
      Instance* peer = nullptr;
      if (inst->is_int64() && peers_) peer = peers_(static_cast<int>(inst->as_int64()));
      if (peer == nullptr) {
        *status = 404;
        *body = ErrorJson(ApiError{.status = 404,
                                   .message = "faults: no such instance",
                                   .type = "NotFoundError",
                                   .param = "instance"});
        return true;
      }
      target = peer;
    }
    absl::StatusOr<Faults> f = ApplyFaultsJson(target->faults(), o);
    if (!f.ok()) {
      *status = 400;
      *body = ErrorJson(MakeApiError(400, std::string(f.status().message())));
      return true;
    }
    target->SetFaults(*f);
    Log()->info("instance {}: faults set to {}", target->index(),
                json::serialize(FaultsToJson(*f)));
    *status = 200;
    *body = json::serialize(FaultsToJson(*f));
    return true;
  }
  *status = 200;
  *body = json::serialize(FaultsToJson(faults()));
  return true;
}

namespace {

// Prompt tokens by source (vllm/v1/metrics/loggers.py over stats.py's PromptTokenStats), shown
// with a connector (the host tier, the fleet-shared pool) so outputs without one stay as they
// were.
void AppendPromptSourceMetrics(const Engine& engine, const std::string& labels,
                               std::string& out) {
  const EngineCounters& c = engine.counters();
  kvroute::wire::AppendHelpAndType(&out, "vllm:prompt_tokens_by_source_total", "counter",
                                   "Number of prompt tokens by source.");
  const std::pair<const char*, uint64_t> sources[] = {
      {"local_compute", c.prompt_tokens_local_compute},
      {"local_cache_hit", c.prompt_tokens_local_cache_hit},
      {"external_kv_transfer", c.prompt_tokens_external_kv_transfer}};
  for (const auto& [source, v] : sources) {
    absl::StrAppend(&out, "vllm:prompt_tokens_by_source_total{", labels, ",source=\"", source,
                    "\"} ", PromValue(static_cast<double>(v)), "\n");
  }
  kvroute::wire::AppendHelpAndType(&out, "vllm:prompt_tokens_cached_total", "counter",
                                   "Number of cached prompt tokens (local + external).");
  absl::StrAppend(&out, "vllm:prompt_tokens_cached_total{", labels, "} ",
                  PromValue(static_cast<double>(c.prompt_tokens_cached)), "\n");
}

// The series vLLM adds with its CPU offloading connector's copies (OffloadPromMetrics), whose
// label values vLLM creates at a direction's first copy. They are the OffloadingConnector's:
// LMCacheConnectorV1 reports its own through LMCache's `lmcache:` metrics, not vLLM's, so the
// lmcache backend has none.
void AppendOffloadMetrics(const Engine& engine, const std::string& labels, std::string& out) {
  if (engine.config().lmcache) return;
  const std::pair<const char*, const HostCopyStats*> directions[] = {
      {"CPU_to_GPU", &engine.host_loads()}, {"GPU_to_CPU", &engine.host_stores()}};
  auto each = [&](const std::string& name, const char* type, const char* help, auto render) {
    kvroute::wire::AppendHelpAndType(&out, name, type, help);
    for (const auto& [transfer_type, stats] : directions) {
      if (stats->copies == 0) continue;
      render(absl::StrCat(labels, ",transfer_type=\"", transfer_type, "\""), *stats);
    }
  };
  each("vllm:kv_offload_total_bytes_total", "counter", "Number of bytes offloaded by KV connector",
       [&](const std::string& l, const HostCopyStats& s) {
         absl::StrAppend(&out, "vllm:kv_offload_total_bytes_total{", l, "} ", PromValue(s.bytes),
                         "\n");
       });
  each("vllm:kv_offload_total_time_total", "counter",
       "Total time measured by all KV offloading operations",
       [&](const std::string& l, const HostCopyStats& s) {
         absl::StrAppend(&out, "vllm:kv_offload_total_time_total{", l, "} ", PromValue(s.seconds),
                         "\n");
       });
  each("vllm:kv_offload_size", "histogram", "Histogram of KV offload transfer size, in bytes.",
       [&](const std::string& l, const HostCopyStats& s) {
         s.size_bytes.Render("vllm:kv_offload_size", l, out);
       });
}

}  // namespace

std::string Instance::RenderMetrics() {
  const std::string labels =
      absl::StrCat("engine=\"0\",model_name=\"",
                   kvroute::wire::EscapeLabelValue(options_.profile.model_name), "\"");
  std::string out;
  auto gauge = [&](const std::string& name, const std::string& help, double v) {
    kvroute::wire::AppendHelpAndType(&out, name, "gauge", help);
    absl::StrAppend(&out, name, "{", labels, "} ", PromValue(v), "\n");
  };
  auto counter = [&](const std::string& name, const std::string& help, uint64_t v) {
    kvroute::wire::AppendHelpAndType(&out, name, "counter", help);
    absl::StrAppend(&out, name, "{", labels, "} ", PromValue(static_cast<double>(v)), "\n");
  };
  auto histogram = [&](const std::string& name, const std::string& help, const Histogram& h) {
    kvroute::wire::AppendHelpAndType(&out, name, "histogram", help);
    h.Render(name, labels, out);
  };
  const EngineCounters& c = engine_.counters();
  gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
        engine_.num_running());
  // Decode legs waiting for their KV count as waiting, as in vLLM (WAITING_FOR_REMOTE_KVS).
  gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
        engine_.num_waiting());
  gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
        engine_.KvUsage());
  counter("vllm:prefix_cache_queries_total",
          "Prefix cache queries, in terms of number of queried tokens.", c.prefix_cache_queries);
  counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
          c.prefix_cache_hits);
  counter("vllm:external_prefix_cache_queries_total",
          "External prefix cache queries from KV connector, in terms of number of queried tokens.",
          c.external_prefix_cache_queries);
  counter("vllm:external_prefix_cache_hits_total",
          "External prefix cache hits from KV connector, in terms of number of cached tokens.",
          c.external_prefix_cache_hits);
  counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
          c.preemptions);
  counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", c.prompt_tokens);
  counter("vllm:generation_tokens_total", "Number of generation tokens processed.",
          c.generation_tokens);
  histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            engine_.ttft());
  histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            engine_.itl());
  histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
            engine_.e2e());
  histogram("vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.", engine_.queue_time());
  histogram("vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.", engine_.prefill_time());
  if (engine_.host_tier() != nullptr || engine_.kv_pool() != nullptr) {
    AppendPromptSourceMetrics(engine_, labels, out);
  }
  if (engine_.host_tier() != nullptr) AppendOffloadMetrics(engine_, labels, out);
  AppendKvPoolMetrics(engine_, labels, out);
  kvroute::wire::AppendHelpAndType(&out, "vllm:cache_config_info", "gauge",
                                   "Information of the LLMEngine CacheConfig");
  // CacheConfig's kv_offloading_* fields appear when the flags set them.
  const std::string offloading =
      engine_.host_tier() == nullptr
          ? std::string()
          : absl::StrCat("kv_offloading_backend=\"",
                         KvOffloadingBackendName(options_.profile.kv_offloading.backend),
                         "\",kv_offloading_size=\"", options_.profile.kv_offloading.size_gib,
                         "\",");
  absl::StrAppend(&out, "vllm:cache_config_info{block_size=\"", engine_.config().block_size,
                  "\",cache_dtype=\"auto\",enable_prefix_caching=\"True\",engine=\"0\","
                  "gpu_memory_utilization=\"",
                  options_.profile.deployment.utilisation, "\",", offloading, "num_gpu_blocks=\"",
                  engine_.config().num_gpu_blocks, "\"} 1.0\n");
  const InstanceGauges g = gauges();
  gauge("kvroute_sim_gpu_busy_fraction",
        "Simulator: fraction of modelled GPU time spent in engine steps (10 s EWMA).",
        options_.time_scale > 0 ? engine_.BusyFractionAt(VirtualNow()) : engine_.BusyFraction());
  gauge("kvroute_sim_scheduler_lag_seconds",
        "Simulator: how far the last engine step started behind real time (wall seconds).",
        g.scheduler_lag_s);
  gauge("kvroute_sim_scheduler_lag_max_seconds",
        "Simulator: largest scheduler lag seen since start (wall seconds).", g.max_scheduler_lag_s);
  gauge("kvroute_sim_time_scale", "Simulator: wall seconds per modelled second.",
        options_.time_scale);
  gauge("kvroute_sim_kv_holds", "Simulator: requests whose KV is held for a remote decode.",
        static_cast<double>(engine_.num_holds()));
  return out;
}

}  // namespace sim
