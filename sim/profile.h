// A simulator profile: the model, GPU and engine settings one simulated instance models, and
// the coefficients of its step-time and KV-transfer-time models. Loaded from
// configs/profiles/*.yaml. Plain value type.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kvsize/kvsize.h"

namespace sim {

// The cost of one scheduler step, as vLLM's GPU spends it (sim/README.md gives each
// coefficient's source):
//   step = step_fixed_s                                  launch, sampling, scheduler
//        + weight_read_s x WeightFraction(tokens)        weights read once per step
//        + prefill_s_per_token x prefill tokens          linear layers (FLOP-bound)
//        + attn_s_per_token_pair x sum n x (c + n / 2)   attention of a chunk of n new
//                                                        tokens after c computed ones
//        + decode_s_per_seq x decoding sequences
//        + kv_read_s_per_token x KV tokens the decodes read
// WeightFraction(t) is 1 for a dense model; for a mixture of experts it is the shared part
// plus the routed experts' share times the fraction of experts t tokens touch,
// 1 - (1 - experts_per_token / num_experts)^t.
struct TimingModel {
  double step_fixed_s = 0.02;
  double prefill_s_per_token = 1.0 / 7000;
  double decode_s_per_seq = 5e-4;
  double kv_read_s_per_token = 2.5e-8;
  double attn_s_per_token_pair = 0;
  double weight_read_s = 0;
  // Share of the weight bytes in routed experts (0: dense).
  double expert_weight_fraction = 0;
  int num_experts = 0;
  int experts_per_token = 0;

  // Fraction of weight_read_s a step with `tokens` tokens reads.
  double WeightFraction(int64_t tokens) const;
  // Cost of prefilling `n` tokens after `context` already computed ones (no fixed part).
  double PrefillChunkCost(int64_t context, int64_t n) const;
};

// KV transfer of a P/D handoff:
//   overhead_s                                   handover: the decode's request reaches the
//                                                connector, metadata, notification
//   + per_descriptor_s x blocks x layers x 2     one RDMA descriptor per block, layer, K/V
//   + bytes / the NIC's share                    processor sharing between the pulls that
//                                                run into one instance at once
struct LinkModel {
  double bandwidth_bytes_per_s = 25e9;
  double overhead_s = 0.1;
  double per_descriptor_s = 0;
};

// vLLM's --kv-offloading-backend (vllm/config/vllm.py, _post_init_kv_transfer_config): kNative
// is its OffloadingConnector, whose copies run beside the steps on CUDA streams; kLmcache is
// LMCacheConnectorV1, LMCache's in-process connector, whose stores (wait_for_save) and loads
// (start_load_kv) block the step that makes them, in chunks of lmcache_chunk_size tokens.
enum class KvOffloadingBackend { kNative, kLmcache };

// "native" or "lmcache"; nullopt for any other name.
std::optional<KvOffloadingBackend> KvOffloadingBackendByName(std::string_view name);
const char* KvOffloadingBackendName(KvOffloadingBackend backend);

// vLLM's CPU KV offloading (sim/host_tier.h; sim/README.md, "Host-memory KV tier"): a
// host-memory tier of `size_gib` GiB that every completed GPU block is written through to and
// that prefix hits beyond the GPU are loaded from. Off while size_gib is 0 (kvroute-sim
// --kv-offloading-size sets it, as vLLM's flag of that name does).
struct KvOffloadingModel {
  // vLLM's --kv-offloading-size: GiB of host memory for the whole instance (all its GPUs).
  double size_gib = 0;
  // Tokens per offloaded block, a multiple of engine.block_size (vLLM's
  // kv_connector_extra_config "block_size"); 0: engine.block_size, as --kv-offloading-size has.
  int block_size = 0;
  // Host <-> GPU copy bandwidth of one GPU, each direction (PCIe Gen5 x16 on H100/H200/H20:
  // ~50 GB/s one way, vLLM blog "KV offloading connector", 2026-01-08).
  double bandwidth_bytes_per_s = 50e9;
  // vLLM's --kv-offloading-backend.
  KvOffloadingBackend backend = KvOffloadingBackend::kNative;
  // LMCache's chunk_size (lmcache/v1/config.py, default 256): the unit it stores, looks up and
  // loads; its host tier's block. Read only with the lmcache backend.
  int lmcache_chunk_size = 256;
  // A step's stores (wait_for_save) take lmcache_store_fixed_s plus their bytes at
  // lmcache_store_bandwidth_bytes_per_s per GPU. An nsys breakdown of LMCache 0.3.7's
  // wait_for_save on an H200 (hungchun0201.github.io/agentic-ai-survey, ai-infra-basics/lmcache/
  // lmcache-kv-transfer.html) reads 0.626 ms of D2H copy per 256-token chunk of Llama-3.1-8B
  // (33.5 MB: 53.6 GB/s) and ~4.0 ms of Python bookkeeping (hash, allocation, metadata) per
  // prefill step. Together they give the logged stores: 6.06 ms against 5.99 ms for 0.1102 GB
  // per rank (LMCache PR #1413, TP 8), 13.9 ms against 11.95 ms for 0.53 GB on one GPU (PR
  // #1740). A retrieve of 10,010 tokens (1.3747 GB) took 33.4 ms, 41.1 GB/s, in PR #1740's log.
  double lmcache_store_bandwidth_bytes_per_s = 53.6e9;
  double lmcache_store_fixed_s = 4e-3;
  double lmcache_load_bandwidth_bytes_per_s = 41.1e9;
  // What LMCache's connector adds to the scheduler's part of every step (its lookups in
  // get_num_new_matched_tokens, update_state_after_alloc, build_connector_meta), which vLLM's
  // engine loop runs before each forward pass: the mean scheduling time per step read 2.85 ms
  // with LMCache 0.3.7 against 1.76 ms without, over 28 runs of an 8-turn agent workload on an
  // H200 (hungchun0201.github.io/agentic-ai-survey, ai-infra-basics/lmcache/
  // lmcache-kv-transfer.html, section 3.2 "Scheduler Step Analysis").
  double lmcache_schedule_s = 1.09e-3;

  bool enabled() const { return size_gib > 0; }
  bool lmcache() const { return backend == KvOffloadingBackend::kLmcache; }
};

// The fleet-shared KV pool (kvroute-sim --kv-pool-size; sim/kv_pool.h, sim/README.md
// "Fleet-shared KV pool"): one store for every instance of the process, Mooncake-Store-like.
// Its loads and stores move over each instance's NIC, the `link` section's bandwidth and
// per-descriptor cost. Off while size_gib is 0.
struct KvPoolModel {
  // GiB of the whole pool (Mooncake: the sum of the segments its clients mount).
  double size_gib = 0;

  bool enabled() const { return size_gib > 0; }
};

// How a waiting request gets in: kFullPrompt reserves the whole prompt's blocks (vLLM since
// `scheduler_reserve_full_isl`); kFirstChunk reserves only its first chunk and preempts
// later when the pool runs out (the vLLM releases before that change, e.g. v0.12).
enum class AdmissionRule { kFullPrompt, kFirstChunk };

// vLLM's --scheduling-policy (vllm/v1/core/sched/request_queue.py): kFcfs serves the waiting
// queue in arrival order and preempts the most recently admitted running request; kPriority
// keeps the waiting queue ordered by (request priority, arrival time), lower first, and
// preempts the running request that is last in that order. Under kFcfs a request with a
// priority other than 0 is refused (vllm/v1/engine/processor.py).
enum class SchedulingPolicy { kFcfs, kPriority };

struct Profile {
  std::string model_name = "Qwen/Qwen3-Coder-30B-A3B-Instruct";
  int max_model_len = 262144;
  kvsize::ModelArch arch;
  kvsize::Deployment deployment;
  int block_size = 16;
  int max_num_batched_tokens = 8192;
  int max_num_seqs = 1024;
  // vLLM's --long-prefill-token-threshold: > 0 caps the tokens one request prefills in a step
  // (`vllm/v1/core/sched/scheduler.py`, both the running and the waiting loop), so a long
  // prompt leaves the rest of the step's budget to the others; 0 (vLLM's default) lets one
  // prompt take the whole budget.
  int long_prefill_token_threshold = 0;
  AdmissionRule admission = AdmissionRule::kFullPrompt;
  SchedulingPolicy scheduling_policy = SchedulingPolicy::kFcfs;
  // Whether generated tokens' blocks enter the prefix cache. false models a chat template
  // that re-renders the previous answer differently (reasoning stripped, retokenised): the
  // next turn's hit ends where the previous prompt ended.
  bool cache_generated_blocks = true;
  // vLLM omits usage.prompt_tokens_details when nothing was cached; true always sends it.
  bool always_report_cached_tokens = false;
  // > 0 overrides the block count derived from the KV arithmetic (tests use tiny instances).
  int64_t num_gpu_blocks_override = 0;
  // How long a prefill instance holds blocks for a remote decode that has not pulled them.
  double kv_hold_timeout_s = 480;
  // How long (wall seconds) a Mooncake/SGLang decode leg waits for its prefill leg before it
  // prefills locally.
  double pd_pair_timeout_s = 30;
  // Mean of the (geometric) natural output length when ignore_eos is not set.
  double mean_output_tokens = 256;
  TimingModel timing;
  LinkModel link;
  KvOffloadingModel kv_offloading;
  KvPoolModel kv_pool;

  kvsize::Capacity Capacity() const { return kvsize::ComputeCapacity(arch, deployment); }
  double KvBytesPerToken() const { return Capacity().effective_kv_bytes_per_token; }
  int64_t NumGpuBlocks() const;
  // Tokens per offloaded block: LMCache's chunk with the lmcache backend, else
  // kv_offloading.block_size, or the GPU block size.
  int OffloadedBlockSize() const;
  // Blocks of the host tier: the size over the bytes of one offloaded block (vLLM's
  // CPUOffloadingSpec: cpu_bytes_to_use // kv_bytes_per_offloaded_block); 0 when off.
  int64_t NumHostBlocks() const;
  // Blocks of the fleet-shared pool, each a GPU block: the size over c_KV x block_size; 0 when
  // off.
  int64_t NumPoolBlocks() const;
};

// The built-in default: the fleet of the design notes (H20, Qwen3-Coder-30B-A3B BF16), with
// the calibrated timing of configs/profiles/h20-qwen3-coder-30b-a3b.yaml.
Profile DefaultProfile();

absl::StatusOr<Profile> ParseProfile(const std::string& yaml_text);
absl::StatusOr<Profile> LoadProfile(const std::string& path);

}  // namespace sim
