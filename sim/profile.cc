#include "sim/profile.h"

#include <absl/strings/str_cat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <utility>

#include "profile/profile_keys.h"

namespace sim {

double TimingModel::WeightFraction(int64_t tokens) const {
  if (num_experts <= 0 || experts_per_token <= 0 || tokens <= 0) return 1;
  const double untouched =
      std::pow(1 - std::min(1.0, static_cast<double>(experts_per_token) / num_experts),
               static_cast<double>(tokens));
  return (1 - expert_weight_fraction) + expert_weight_fraction * (1 - untouched);
}

double TimingModel::PrefillChunkCost(int64_t context, int64_t n) const {
  const double nd = static_cast<double>(n);
  return prefill_s_per_token * nd +
         attn_s_per_token_pair * nd * (static_cast<double>(context) + nd / 2);
}

int64_t Profile::NumGpuBlocks() const {
  if (num_gpu_blocks_override > 0) return num_gpu_blocks_override;
  return kvsize::NumGpuBlocks(Capacity(), block_size);
}

Profile DefaultProfile() {
  Profile p;
  p.arch = kvsize::ModelArch{.name = "Qwen3-Coder-30B-A3B",
                             .num_attention_layers = 48,
                             .num_kv_heads = 4,
                             .head_dim = 128,
                             .kv_bytes_per_element = 2,
                             .weight_bytes = 30.5e9 * 2};
  p.deployment = kvsize::Deployment{.gpu_name = "H20",
                                    .gpu_memory_bytes = 102.6e9,
                                    .tensor_parallel = 1,
                                    .utilisation = 0.9,
                                    .overhead_bytes_per_gpu = 3.22e9};
  p.max_num_seqs = 1024;
  p.timing = TimingModel{.step_fixed_s = 0.0047,
                         .prefill_s_per_token = 1.1e-4,
                         .decode_s_per_seq = 3e-5,
                         .kv_read_s_per_token = 3.07e-8,
                         .attn_s_per_token_pair = 7.9e-9,
                         .weight_read_s = 0.0191,
                         .expert_weight_fraction = 0.95,
                         .num_experts = 128,
                         .experts_per_token = 8};
  p.link = LinkModel{.bandwidth_bytes_per_s = 22e9, .overhead_s = 0.15, .per_descriptor_s = 2.8e-6};
  return p;
}

namespace {

// `*out = *key` when the profile gives the key; integer keys narrowed to the field's type.
template <typename Field, typename Key>
void Take(const std::optional<Key>& key, Field* out) {
  if (key) *out = static_cast<Field>(*key);
}

}  // namespace

absl::StatusOr<Profile> ParseProfile(const std::string& yaml_text) {
  absl::StatusOr<kvroute::profile::ProfileKeys> read =
      kvroute::profile::ParseProfileKeys(yaml_text);
  if (!read.ok()) {
    return absl::InvalidArgumentError(read.status().message());
  }
  const kvroute::profile::ProfileKeys& k = *read;
  Profile p = DefaultProfile();
  Take(k.model.name, &p.model_name);
  Take(k.model.arch_name, &p.arch.name);
  Take(k.model.max_model_len, &p.max_model_len);
  Take(k.model.num_attention_layers, &p.arch.num_attention_layers);
  Take(k.model.num_kv_heads, &p.arch.num_kv_heads);
  Take(k.model.head_dim, &p.arch.head_dim);
  Take(k.model.kv_bytes_per_element, &p.arch.kv_bytes_per_element);
  if (k.model.params.value_or(0) > 0) {
    p.arch.weight_bytes = *k.model.params * k.model.weight_bytes_per_param.value_or(2);
  }
  Take(k.gpu.name, &p.deployment.gpu_name);
  Take(k.gpu.memory_bytes, &p.deployment.gpu_memory_bytes);
  Take(k.deployment.tensor_parallel, &p.deployment.tensor_parallel);
  Take(k.deployment.gpu_memory_utilization, &p.deployment.utilisation);
  Take(k.deployment.overhead_bytes_per_gpu, &p.deployment.overhead_bytes_per_gpu);
  Take(k.engine.block_size, &p.block_size);
  Take(k.engine.max_num_batched_tokens, &p.max_num_batched_tokens);
  Take(k.engine.max_num_seqs, &p.max_num_seqs);
  Take(k.engine.num_gpu_blocks, &p.num_gpu_blocks_override);
  Take(k.engine.kv_hold_timeout_s, &p.kv_hold_timeout_s);
  Take(k.engine.pd_pair_timeout_s, &p.pd_pair_timeout_s);
  Take(k.engine.mean_output_tokens, &p.mean_output_tokens);
  const std::string admission = k.engine.admission.value_or(
      p.admission == AdmissionRule::kFirstChunk ? "first_chunk" : "full_prompt");
  const std::string policy = k.engine.scheduling_policy.value_or(
      p.scheduling_policy == SchedulingPolicy::kPriority ? "priority" : "fcfs");
  Take(k.engine.cache_generated_blocks, &p.cache_generated_blocks);
  Take(k.engine.always_report_cached_tokens, &p.always_report_cached_tokens);
  // A timing section stands alone: terms it leaves out cost nothing (a dense profile must not
  // inherit the built-in model's experts).
  if (k.timing.present) {
    p.timing = TimingModel{.step_fixed_s = 0,
                           .prefill_s_per_token = 0,
                           .decode_s_per_seq = 0,
                           .kv_read_s_per_token = 0};
  }
  Take(k.timing.step_fixed_s, &p.timing.step_fixed_s);
  Take(k.timing.prefill_s_per_token, &p.timing.prefill_s_per_token);
  Take(k.timing.decode_s_per_seq, &p.timing.decode_s_per_seq);
  Take(k.timing.kv_read_s_per_token, &p.timing.kv_read_s_per_token);
  Take(k.timing.attn_s_per_token_pair, &p.timing.attn_s_per_token_pair);
  Take(k.timing.weight_read_s, &p.timing.weight_read_s);
  Take(k.timing.expert_weight_fraction, &p.timing.expert_weight_fraction);
  Take(k.timing.num_experts, &p.timing.num_experts);
  Take(k.timing.experts_per_token, &p.timing.experts_per_token);
  Take(k.link.bandwidth_bytes_per_s, &p.link.bandwidth_bytes_per_s);
  Take(k.link.overhead_s, &p.link.overhead_s);
  Take(k.link.per_descriptor_s, &p.link.per_descriptor_s);

  if (admission == "full_prompt") {
    p.admission = AdmissionRule::kFullPrompt;
  } else if (admission == "first_chunk") {
    p.admission = AdmissionRule::kFirstChunk;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("engine.admission: bad value '", admission, "' (full_prompt or first_chunk)"));
  }
  if (policy == "fcfs") {
    p.scheduling_policy = SchedulingPolicy::kFcfs;
  } else if (policy == "priority") {
    p.scheduling_policy = SchedulingPolicy::kPriority;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("engine.scheduling_policy: bad value '", policy, "' (fcfs or priority)"));
  }
  const std::pair<const char*, double> non_negative[] = {
      {"timing.step_fixed_s", p.timing.step_fixed_s},
      {"timing.prefill_s_per_token", p.timing.prefill_s_per_token},
      {"timing.decode_s_per_seq", p.timing.decode_s_per_seq},
      {"timing.kv_read_s_per_token", p.timing.kv_read_s_per_token},
      {"timing.attn_s_per_token_pair", p.timing.attn_s_per_token_pair},
      {"timing.weight_read_s", p.timing.weight_read_s},
      {"timing.num_experts", p.timing.num_experts},
      {"timing.experts_per_token", p.timing.experts_per_token},
      {"link.overhead_s", p.link.overhead_s},
      {"link.per_descriptor_s", p.link.per_descriptor_s}};
  for (const auto& [key, value] : non_negative) {
    if (!(value >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat(key, " must be >= 0 (got ", value, ")"));
    }
  }
  if (!(p.timing.expert_weight_fraction >= 0 && p.timing.expert_weight_fraction <= 1)) {
    return absl::InvalidArgumentError("timing.expert_weight_fraction must be in [0, 1]");
  }
  if (p.timing.experts_per_token > p.timing.num_experts) {
    return absl::InvalidArgumentError("timing.experts_per_token must be <= timing.num_experts");
  }

  if (p.block_size <= 0) return absl::InvalidArgumentError("engine.block_size must be > 0");
  if (p.max_num_batched_tokens <= 0) {
    return absl::InvalidArgumentError("engine.max_num_batched_tokens must be > 0");
  }
  if (p.max_num_seqs <= 0) return absl::InvalidArgumentError("engine.max_num_seqs must be > 0");
  if (p.max_model_len <= 0) return absl::InvalidArgumentError("model.max_model_len must be > 0");
  if (p.link.bandwidth_bytes_per_s <= 0) {
    return absl::InvalidArgumentError("link.bandwidth_bytes_per_s must be > 0");
  }
  if (p.NumGpuBlocks() <= 0) {
    return absl::InvalidArgumentError(
        "the profile leaves no KV memory (model.params, gpu.memory_bytes, "
        "deployment.gpu_memory_utilization/overhead_bytes_per_gpu); set engine.num_gpu_blocks "
        "to override");
  }
  return p;
}

absl::StatusOr<Profile> LoadProfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open profile ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<Profile> p = ParseProfile(ss.str());
  if (!p.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", p.status().message()));
  return p;
}

}  // namespace sim
