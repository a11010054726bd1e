// A simulator profile: the model, GPU and engine settings one simulated instance models, and
// the coefficients of its step-time and KV-transfer-time models. Loaded from
// configs/profiles/*.yaml. Plain value type.
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <string>

#include "kvsize/kvsize.h"

namespace sim {

// step = step_fixed_s + prefill_s_per_token * prefill tokens in the step
//        + decode_s_per_seq * decoding sequences + kv_read_s_per_token * KV tokens they read.
struct TimingModel {
  double step_fixed_s = 0.02;
  double prefill_s_per_token = 1.0 / 7000;
  double decode_s_per_seq = 5e-4;
  double kv_read_s_per_token = 2.5e-8;
};

// transfer = overhead_s + tokens * kv_bytes_per_token / bandwidth_bytes_per_s.
struct LinkModel {
  double bandwidth_bytes_per_s = 25e9;
  double overhead_s = 0.1;
};

struct Profile {
  std::string model_name = "Qwen/Qwen3-Coder-30B-A3B-Instruct";
  int max_model_len = 262144;
  kvsize::ModelArch arch;
  kvsize::Deployment deployment;
  int block_size = 16;
  int max_num_batched_tokens = 8192;
  int max_num_seqs = 256;
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

  kvsize::Capacity Capacity() const { return kvsize::ComputeCapacity(arch, deployment); }
  double KvBytesPerToken() const { return Capacity().effective_kv_bytes_per_token; }
  int64_t NumGpuBlocks() const;
};

// The built-in default: the fleet of the design notes (H20 96 GB, Qwen3-Coder-30B-A3B BF16).
Profile DefaultProfile();

absl::StatusOr<Profile> ParseProfile(const std::string& yaml_text);
absl::StatusOr<Profile> LoadProfile(const std::string& path);

}  // namespace sim
