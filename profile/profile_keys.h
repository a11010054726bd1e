// The keys of a model/GPU profile (configs/profiles/*.yaml) as the file writes them: one
// reader below every program that reads a profile. kvroute-sim builds its engine, timing and
// link models from them (sim/profile.h, which owns the defaults and the ranges); kvroute's
// config loader takes the offload cost model's figures (proxy/config.h, LoadProfileFigures).
//
//   absl::StatusOr<profile::ProfileKeys> keys = profile::LoadProfileKeys(path);
//   if (keys.ok() && keys->timing.prefill_s_per_token) rate = 1 / *keys->timing.prefill_s_per_token;
//
// The reader checks the document's shape and each key's type only: a key that is absent or
// null is std::nullopt, a section that is absent or null is not `present`, keys and sections it
// does not know are ignored (profiles carry notes for other tools). What a value means, its
// default and its range belong to the program that uses it. Errors are InvalidArgument naming
// the key: "timing.num_experts: expected an integer, got 'many'". Plain value types; the
// functions are thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace kvroute::profile {

struct ModelKeys {
  bool present = false;
  std::optional<std::string> name;       // the served model name (requests' "model")
  std::optional<std::string> arch_name;  // the architecture, for reports
  std::optional<int64_t> max_model_len;
  std::optional<int64_t> num_attention_layers;
  std::optional<int64_t> num_kv_heads;
  std::optional<int64_t> head_dim;
  std::optional<double> kv_bytes_per_element;
  std::optional<double> params;
  std::optional<double> weight_bytes_per_param;
};

struct GpuKeys {
  bool present = false;
  std::optional<std::string> name;
  std::optional<double> memory_bytes;
};

struct DeploymentKeys {
  bool present = false;
  std::optional<int64_t> tensor_parallel;
  std::optional<double> gpu_memory_utilization;
  std::optional<double> overhead_bytes_per_gpu;
};

struct EngineKeys {
  bool present = false;
  std::optional<int64_t> block_size;
  std::optional<int64_t> max_num_batched_tokens;
  std::optional<int64_t> max_num_seqs;
  std::optional<int64_t> long_prefill_token_threshold;
  std::optional<int64_t> num_gpu_blocks;
  std::optional<double> kv_hold_timeout_s;
  std::optional<double> pd_pair_timeout_s;
  std::optional<double> mean_output_tokens;
  std::optional<std::string> admission;
  std::optional<std::string> scheduling_policy;
  std::optional<bool> cache_generated_blocks;
  std::optional<bool> always_report_cached_tokens;
};

// The step-time model's coefficients (sim/profile.h, TimingModel, gives each term).
struct TimingKeys {
  bool present = false;
  std::optional<double> step_fixed_s;
  std::optional<double> prefill_s_per_token;
  std::optional<double> decode_s_per_seq;
  std::optional<double> kv_read_s_per_token;
  std::optional<double> attn_s_per_token_pair;
  std::optional<double> weight_read_s;
  std::optional<double> expert_weight_fraction;
  std::optional<int64_t> num_experts;
  std::optional<int64_t> experts_per_token;
};

// The KV transfer model of a P/D handoff (sim/profile.h, LinkModel).
struct LinkKeys {
  bool present = false;
  std::optional<double> bandwidth_bytes_per_s;
  std::optional<double> overhead_s;
  std::optional<double> per_descriptor_s;
};

// The host-memory KV tier of vLLM's native CPU offloading (sim/profile.h,
// KvOffloadingModel); switched on by kvroute-sim --kv-offloading-size, not by the profile.
struct KvOffloadingKeys {
  bool present = false;
  std::optional<double> bandwidth_bytes_per_s;  // host <-> GPU, each direction, per GPU
  std::optional<int64_t> block_size;            // tokens per offloaded block
  // LMCache's in-process connector (--kv-offloading-backend lmcache).
  std::optional<int64_t> lmcache_chunk_size;
  std::optional<double> lmcache_store_bandwidth_bytes_per_s;
  std::optional<double> lmcache_store_fixed_s;
  std::optional<double> lmcache_load_bandwidth_bytes_per_s;
  std::optional<double> lmcache_schedule_s;
};

struct ProfileKeys {
  ModelKeys model;
  GpuKeys gpu;
  DeploymentKeys deployment;
  EngineKeys engine;
  TimingKeys timing;
  LinkKeys link;
  KvOffloadingKeys kv_offloading;
};

// The keys of a profile's YAML text. InvalidArgument: not YAML ("YAML syntax error: ..."), not a
// map at the top level, a section that is not a map, a key of the wrong type.
absl::StatusOr<ProfileKeys> ParseProfileKeys(const std::string& yaml_text);

// ParseProfileKeys of the file at `path`; NotFound when it cannot be read as a file.
absl::StatusOr<ProfileKeys> LoadProfileKeys(const std::string& path);

}  // namespace kvroute::profile
