#include "sim/kv_pool_metrics.h"

#include <absl/strings/str_cat.h>

#include <cstdint>
#include <string>
#include <utility>

#include "sim/metrics.h"
#include "wire/prometheus_text.h"

namespace sim {

void AppendKvPoolMetrics(const Engine& engine, const std::string& labels, std::string& out) {
  const KvPool* pool = engine.kv_pool();
  if (pool == nullptr) return;
  auto series = [&](const char* name, const char* type, const char* help, double v) {
    kvroute::wire::AppendHelpAndType(&out, name, type, help);
    absl::StrAppend(&out, name, "{", labels, "} ", PromValue(v), "\n");
  };
  series("kvroute_sim_pool_prompt_tokens_loaded_total", "counter",
         "Simulator: prompt tokens this instance loaded from the fleet-shared KV pool (part of "
         "vllm:prompt_tokens_by_source{source=\"external_kv_transfer\"}).",
         static_cast<double>(engine.counters().prompt_tokens_pool_loaded));
  const PoolTransferStats& loads = engine.pool_loads();
  const PoolTransferStats& stores = engine.pool_stores();
  series("kvroute_sim_pool_loads_total", "counter",
         "Simulator: loads from the fleet-shared KV pool into this instance.",
         static_cast<double>(loads.transfers));
  series("kvroute_sim_pool_load_bytes_total", "counter",
         "Simulator: bytes loaded from the fleet-shared KV pool over this instance's NIC.",
         loads.bytes);
  series("kvroute_sim_pool_load_seconds_total", "counter",
         "Simulator: modelled seconds from admission to the last byte of each pool load.",
         loads.seconds);
  series("kvroute_sim_pool_stores_total", "counter",
         "Simulator: puts of prompt blocks from this instance to the fleet-shared KV pool.",
         static_cast<double>(stores.transfers));
  series("kvroute_sim_pool_store_bytes_total", "counter",
         "Simulator: bytes this instance put to the fleet-shared KV pool over its NIC.",
         stores.bytes);
  series("kvroute_sim_pool_store_seconds_total", "counter",
         "Simulator: modelled seconds from the end of each put's step to its last byte.",
         stores.seconds);
  // vLLM's MooncakeStoreConnector reports the same traffic per Mooncake RPC
  // (MooncakeStorePromMetrics): load_get for the loads, save_put for the puts.
  const std::pair<const char*, const PoolTransferStats*> operations[] = {{"load_get", &loads},
                                                                         {"save_put", &stores}};
  auto each = [&](const char* name, const char* type, const char* help, auto render) {
    kvroute::wire::AppendHelpAndType(&out, name, type, help);
    for (const auto& [operation, stats] : operations) {
      if (stats->transfers == 0) continue;
      render(absl::StrCat(labels, ",operation=\"", operation, "\",status=\"ok\""), *stats);
    }
  };
  each("vllm:mooncake_store_operation_time_seconds", "histogram",
       "Histogram of Mooncake store communication time.",
       [&](const std::string& l, const PoolTransferStats& t) {
         t.duration_seconds.Render("vllm:mooncake_store_operation_time_seconds", l, out);
       });
  each("vllm:mooncake_store_operation_total", "counter",
       "Number of Mooncake store communication operations.",
       [&](const std::string& l, const PoolTransferStats& t) {
         absl::StrAppend(&out, "vllm:mooncake_store_operation_total{", l, "} ",
                         PromValue(static_cast<double>(t.transfers)), "\n");
       });
  each("vllm:mooncake_store_operation_bytes_total", "counter",
       "Number of bytes transferred by Mooncake store operations.",
       [&](const std::string& l, const PoolTransferStats& t) {
         absl::StrAppend(&out, "vllm:mooncake_store_operation_bytes_total{", l, "} ",
                         PromValue(t.bytes), "\n");
       });
  const KvPoolStats s = pool->stats();
  series("kvroute_sim_pool_blocks", "gauge",
         "Simulator: blocks of the fleet-shared KV pool (the same on every instance).",
         static_cast<double>(s.num_blocks));
  series("kvroute_sim_pool_used_blocks", "gauge",
         "Simulator: blocks of the fleet-shared KV pool stored or being stored.",
         static_cast<double>(s.used_blocks));
  series("kvroute_sim_pool_block_size", "gauge",
         "Simulator: tokens per block of the fleet-shared KV pool.",
         static_cast<double>(pool->block_size()));
  series("kvroute_sim_pool_evictions_total", "counter",
         "Simulator: blocks the fleet-shared KV pool evicted, least recently used first.",
         static_cast<double>(s.evictions));
  series("kvroute_sim_pool_stores_skipped_total", "counter",
         "Simulator: puts the fleet-shared KV pool refused for want of idle blocks to evict.",
         static_cast<double>(s.stores_skipped));
}

}  // namespace sim
