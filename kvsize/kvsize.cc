#include "kvsize/kvsize.h"

#include <algorithm>
#include <cmath>

namespace kvsize {

double KvBytesPerToken(const ModelArch& arch) {
  return 2.0 * arch.num_attention_layers * arch.num_kv_heads * arch.head_dim *
         arch.kv_bytes_per_element;
}

Capacity ComputeCapacity(const ModelArch& arch, const Deployment& dep) {
  Capacity cap;
  cap.kv_bytes_per_token = KvBytesPerToken(arch);
  cap.effective_kv_bytes_per_token = cap.kv_bytes_per_token;
  if (arch.num_kv_heads > 0 && dep.tensor_parallel > arch.num_kv_heads) {
    // Each TP rank holds at least one KV head, so heads are replicated N_TP / H_kv times.
    cap.effective_kv_bytes_per_token *=
        static_cast<double>(dep.tensor_parallel) / arch.num_kv_heads;
    cap.warnings.push_back(
        "tensor_parallel (" + std::to_string(dep.tensor_parallel) +
        ") exceeds the KV head count (" + std::to_string(arch.num_kv_heads) +
        "): KV heads are replicated, effective KV bytes per token x" +
        std::to_string(static_cast<double>(dep.tensor_parallel) / arch.num_kv_heads));
  }
  if (dep.utilisation <= 0 || dep.utilisation > 1) {
    cap.warnings.push_back("utilisation " + std::to_string(dep.utilisation) + " is outside (0, 1]");
  }
  cap.kv_memory_bytes =
      dep.tensor_parallel * (dep.utilisation * dep.gpu_memory_bytes - dep.overhead_bytes_per_gpu) -
      arch.weight_bytes;
  if (cap.kv_memory_bytes <= 0) {
    cap.warnings.push_back("the model does not fit: no memory left for KV");
    cap.token_capacity = 0;
  } else if (cap.effective_kv_bytes_per_token > 0) {
    cap.token_capacity = cap.kv_memory_bytes / cap.effective_kv_bytes_per_token;
  }
  return cap;
}

int64_t NumGpuBlocks(const Capacity& cap, int block_size) {
  if (block_size <= 0 || cap.token_capacity <= 0) return 0;
  return static_cast<int64_t>(std::floor(cap.token_capacity / block_size));
}

double UtilisationForTokens(const ModelArch& arch, const Deployment& dep, double tokens) {
  const double denom = dep.tensor_parallel * dep.gpu_memory_bytes;
  if (denom <= 0) return 0;
  double c_kv = KvBytesPerToken(arch);
  if (arch.num_kv_heads > 0 && dep.tensor_parallel > arch.num_kv_heads) {
    c_kv *= static_cast<double>(dep.tensor_parallel) / arch.num_kv_heads;
  }
  return (arch.weight_bytes + dep.tensor_parallel * dep.overhead_bytes_per_gpu + tokens * c_kv) /
         denom;
}

UtilisationWindow ComputeUtilisationWindow(const ModelArch& arch, const Deployment& dep,
                                           const Workload& workload) {
  UtilisationWindow w;
  w.live_set_tokens = workload.concurrency * (workload.input_tokens + workload.output_tokens);
  w.corpus_tokens = workload.sessions * workload.tokens_per_session;
  w.u_min = UtilisationForTokens(arch, dep, w.live_set_tokens);
  w.u_max = UtilisationForTokens(arch, dep, std::max(w.corpus_tokens, w.live_set_tokens));
  return w;
}

TieringResult ComputeTiering(const ModelArch& /*arch*/, const Capacity& cap,
                             const UtilisationWindow& window, const Tiering& tiering) {
  TieringResult r;
  const double c_kv = cap.effective_kv_bytes_per_token;
  if (c_kv > 0) r.cpu_token_capacity = tiering.cpu_buffer_bytes / c_kv;
  const int n = std::max(1, tiering.instances);
  // Write-through: every new token lands in HBM and in the CPU tier alike.
  r.load = TierLoad{.instances = n,
                    .working_set_tokens = window.corpus_tokens,
                    .gpu_capacity_tokens = n * cap.token_capacity,
                    .host_capacity_tokens = n * r.cpu_token_capacity,
                    .gpu_write_rate_tokens_per_s = tiering.write_rate_tokens_per_s,
                    .host_write_rate_tokens_per_s = tiering.write_rate_tokens_per_s,
                    .reuse_gap_s = tiering.think_time_s + tiering.ttft_s,
                    .kv_bytes_per_token = c_kv};
  r.pressure = ComputeTierPressure(r.load);
  r.disk_spill_tokens = r.pressure.spill_tokens;
  r.retention_s = r.pressure.host_retention_s;
  r.retention_ok = r.pressure.retention_ok;
  return r;
}

}  // namespace kvsize
