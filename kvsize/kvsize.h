// kvsize: KV-cache sizing arithmetic for one model replica on one GPU type.
//
// Pure functions over plain structs, no dependencies, no I/O: shared by the router (capacity
// of an instance from its profile), the simulator (num_gpu_blocks) and the `kvroute-size` CLI.
// All quantities are in bytes, tokens and seconds. Thread-safe (no state).
//
//   kvsize::ModelArch arch;            // Qwen3.6-35B-A3B
//   arch.num_attention_layers = 10;    // of 40 layers; the others are linear attention
//   arch.num_kv_heads = 2;
//   arch.head_dim = 256;
//   arch.kv_bytes_per_element = 2;     // BF16
//   arch.weight_bytes = 35e9 * 2;
//   kvsize::Deployment dep;            // 2 x H100
//   dep.gpu_memory_bytes = 85.9e9;
//   dep.tensor_parallel = 2;
//   dep.utilisation = 0.9;
//   dep.overhead_bytes_per_gpu = 3.22e9;
//   kvsize::Capacity cap = kvsize::ComputeCapacity(arch, dep);
//   // cap.kv_bytes_per_token == 20480, cap.kv_memory_bytes ~ 78.2e9, cap.token_capacity ~ 3.8e6
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvsize/tier_pressure.h"

namespace kvsize {

// The parts of a model architecture that decide its KV footprint and weight memory.
struct ModelArch {
  std::string name;
  // Layers with standard (KV-caching) attention. Linear-attention / SSM layers do not count.
  int num_attention_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  // 2 for BF16/FP16 KV, 1 for FP8.
  double kv_bytes_per_element = 2;
  // W: weight bytes of one replica (all TP shards together), e.g. params x 2 for BF16.
  double weight_bytes = 0;
};

// How one replica is deployed.
struct Deployment {
  std::string gpu_name;
  double gpu_memory_bytes = 0;        // M_GPU, per GPU
  int tensor_parallel = 1;            // N_TP, GPUs per replica
  double utilisation = 0.9;           // U, vLLM's --gpu-memory-utilization
  double overhead_bytes_per_gpu = 0;  // M_ovh: activations, CUDA graphs, NCCL buffers
};

struct Capacity {
  // c_KV = 2 * L_attn * H_kv * d_head * b_kv (K and V, every attention layer).
  double kv_bytes_per_token = 0;
  // c_KV once KV heads are replicated because N_TP > H_kv (each GPU holds >= 1 head).
  double effective_kv_bytes_per_token = 0;
  // M_KV = N_TP * (U * M_GPU - M_ovh) - W. Negative means the model does not fit.
  double kv_memory_bytes = 0;
  // T_GPU = M_KV / c_KV (effective), 0 if M_KV <= 0.
  double token_capacity = 0;
  // Human-readable warnings (TP > KV heads, model does not fit, U out of range).
  std::vector<std::string> warnings;
};

// c_KV in bytes per token.
double KvBytesPerToken(const ModelArch& arch);

// Everything of Capacity in one call.
Capacity ComputeCapacity(const ModelArch& arch, const Deployment& dep);

// Number of whole KV blocks of `block_size` tokens that fit in the replica's KV memory.
int64_t NumGpuBlocks(const Capacity& cap, int block_size);

// U(T) = (W + N_TP * M_ovh + T * c_KV) / (N_TP * M_GPU): the utilisation a replica needs to
// keep `tokens` tokens of KV resident.
double UtilisationForTokens(const ModelArch& arch, const Deployment& dep, double tokens);

// The utilisation window of a workload: U_min keeps the live set C * (ISL + OSL) resident,
// U_max also keeps the whole reuse corpus (sessions x tokens per session) resident.
struct Workload {
  int concurrency = 0;       // C
  double input_tokens = 0;   // ISL
  double output_tokens = 0;  // OSL
  int sessions = 0;          // reuse corpus: number of sessions kept warm
  double tokens_per_session = 0;
};

struct UtilisationWindow {
  double live_set_tokens = 0;
  double corpus_tokens = 0;
  double u_min = 0;
  double u_max = 0;
};

UtilisationWindow ComputeUtilisationWindow(const ModelArch& arch, const Deployment& dep,
                                           const Workload& workload);

// Tiering beyond the GPU: CPU (host memory) KV buffer and what spills to disk, for
// `instances` replicas; the workload's corpus and write rate are the fleet's.
struct Tiering {
  double cpu_buffer_bytes = 0;         // B_CPU per replica
  double write_rate_tokens_per_s = 0;  // tokens of new KV written per second (write-through:
                                       // into HBM and the CPU tier alike)
  double think_time_s = 0;             // t_think between a session's turns
  double ttft_s = 0;                   // time to first token of the next turn
  int instances = 1;                   // N replicas
};

struct TieringResult {
  double cpu_token_capacity = 0;  // T_CPU = B_CPU / c_KV, per replica
  double disk_spill_tokens = 0;   // max(0, T_corpus - N (T_GPU + T_CPU))
  double retention_s = 0;         // N B_CPU / (write_rate * c_KV): how long a block survives in CPU
  bool retention_ok = false;      // the longest tier's retention >= t_think + TTFT
  // The whole comparison, as the daemon's live gauges make it (kvsize/tier_pressure.h).
  TierLoad load;
  TierPressure pressure;
};

TieringResult ComputeTiering(const ModelArch& arch, const Capacity& cap,
                             const UtilisationWindow& window, const Tiering& tiering);

}  // namespace kvsize
