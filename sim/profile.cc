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

std::optional<KvOffloadingBackend> KvOffloadingBackendByName(std::string_view name) {
  if (name == "native") return KvOffloadingBackend::kNative;
  if (name == "lmcache") return KvOffloadingBackend::kLmcache;
  return std::nullopt;
}

const char* KvOffloadingBackendName(KvOffloadingBackend backend) {
  return backend == KvOffloadingBackend::kLmcache ? "lmcache" : "native";
}

int Profile::OffloadedBlockSize() const {
  if (kv_offloading.lmcache()) return kv_offloading.lmcache_chunk_size;
  return kv_offloading.block_size > 0 ? kv_offloading.block_size : block_size;
}

int64_t Profile::NumHostBlocks() const {
  if (!kv_offloading.enabled()) return 0;
  const double block_bytes = KvBytesPerToken() * OffloadedBlockSize();
  if (!(block_bytes > 0)) return 0;
  return static_cast<int64_t>(std::floor(kv_offloading.size_gib * 1073741824.0 / block_bytes));
}

int64_t Profile::NumPoolBlocks() const {
  if (!kv_pool.enabled()) return 0;
  const double block_bytes = KvBytesPerToken() * block_size;
  if (!(block_bytes > 0)) return 0;
  return static_cast<int64_t>(std::floor(kv_pool.size_gib * 1073741824.0 / block_bytes));
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

// The model, the GPU and the deployment: what the KV arithmetic (kvsize) needs.
void TakeHardwareKeys(const kvroute::profile::ProfileKeys& k, Profile* p) {
  Take(k.model.name, &p->model_name);
  Take(k.model.arch_name, &p->arch.name);
  Take(k.model.max_model_len, &p->max_model_len);
  Take(k.model.num_attention_layers, &p->arch.num_attention_layers);
  Take(k.model.num_kv_heads, &p->arch.num_kv_heads);
  Take(k.model.head_dim, &p->arch.head_dim);
  Take(k.model.kv_bytes_per_element, &p->arch.kv_bytes_per_element);
  if (k.model.params.value_or(0) > 0) {
    p->arch.weight_bytes = *k.model.params * k.model.weight_bytes_per_param.value_or(2);
  }
  Take(k.gpu.name, &p->deployment.gpu_name);
  Take(k.gpu.memory_bytes, &p->deployment.gpu_memory_bytes);
  Take(k.deployment.tensor_parallel, &p->deployment.tensor_parallel);
  Take(k.deployment.gpu_memory_utilization, &p->deployment.utilisation);
  Take(k.deployment.overhead_bytes_per_gpu, &p->deployment.overhead_bytes_per_gpu);
}

// The engine section's numbers and switches (admission and scheduling_policy are names, read
// by SetAdmission and SetSchedulingPolicy).
void TakeEngineKeys(const kvroute::profile::EngineKeys& e, Profile* p) {
  Take(e.block_size, &p->block_size);
  Take(e.max_num_batched_tokens, &p->max_num_batched_tokens);
  Take(e.max_num_seqs, &p->max_num_seqs);
  Take(e.long_prefill_token_threshold, &p->long_prefill_token_threshold);
  Take(e.num_gpu_blocks, &p->num_gpu_blocks_override);
  Take(e.kv_hold_timeout_s, &p->kv_hold_timeout_s);
  Take(e.pd_pair_timeout_s, &p->pd_pair_timeout_s);
  Take(e.mean_output_tokens, &p->mean_output_tokens);
  Take(e.cache_generated_blocks, &p->cache_generated_blocks);
  Take(e.always_report_cached_tokens, &p->always_report_cached_tokens);
}

void TakeTimingKeys(const kvroute::profile::TimingKeys& t, TimingModel* timing) {
  // A timing section stands alone: terms it leaves out cost nothing (a dense profile must not
  // inherit the built-in model's experts).
  if (t.present) {
    *timing = TimingModel{.step_fixed_s = 0,
                          .prefill_s_per_token = 0,
                          .decode_s_per_seq = 0,
                          .kv_read_s_per_token = 0};
  }
  Take(t.step_fixed_s, &timing->step_fixed_s);
  Take(t.prefill_s_per_token, &timing->prefill_s_per_token);
  Take(t.decode_s_per_seq, &timing->decode_s_per_seq);
  Take(t.kv_read_s_per_token, &timing->kv_read_s_per_token);
  Take(t.attn_s_per_token_pair, &timing->attn_s_per_token_pair);
  Take(t.weight_read_s, &timing->weight_read_s);
  Take(t.expert_weight_fraction, &timing->expert_weight_fraction);
  Take(t.num_experts, &timing->num_experts);
  Take(t.experts_per_token, &timing->experts_per_token);
}

void TakeLinkKeys(const kvroute::profile::LinkKeys& l, LinkModel* link) {
  Take(l.bandwidth_bytes_per_s, &link->bandwidth_bytes_per_s);
  Take(l.overhead_s, &link->overhead_s);
  Take(l.per_descriptor_s, &link->per_descriptor_s);
}

void TakeKvOffloadingKeys(const kvroute::profile::KvOffloadingKeys& k, KvOffloadingModel* m) {
  Take(k.bandwidth_bytes_per_s, &m->bandwidth_bytes_per_s);
  Take(k.block_size, &m->block_size);
  Take(k.lmcache_chunk_size, &m->lmcache_chunk_size);
  Take(k.lmcache_store_bandwidth_bytes_per_s, &m->lmcache_store_bandwidth_bytes_per_s);
  Take(k.lmcache_store_fixed_s, &m->lmcache_store_fixed_s);
  Take(k.lmcache_load_bandwidth_bytes_per_s, &m->lmcache_load_bandwidth_bytes_per_s);
  Take(k.lmcache_schedule_s, &m->lmcache_schedule_s);
}

absl::Status SetAdmission(const std::optional<std::string>& name, Profile* p) {
  const std::string admission = name.value_or(
      p->admission == AdmissionRule::kFirstChunk ? "first_chunk" : "full_prompt");
  if (admission == "full_prompt") {
    p->admission = AdmissionRule::kFullPrompt;
  } else if (admission == "first_chunk") {
    p->admission = AdmissionRule::kFirstChunk;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("engine.admission: bad value '", admission, "' (full_prompt or first_chunk)"));
  }
  return absl::OkStatus();
}

absl::Status SetSchedulingPolicy(const std::optional<std::string>& name, Profile* p) {
  const std::string policy = name.value_or(
      p->scheduling_policy == SchedulingPolicy::kPriority ? "priority" : "fcfs");
  if (policy == "fcfs") {
    p->scheduling_policy = SchedulingPolicy::kFcfs;
  } else if (policy == "priority") {
    p->scheduling_policy = SchedulingPolicy::kPriority;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("engine.scheduling_policy: bad value '", policy, "' (fcfs or priority)"));
  }
  return absl::OkStatus();
}

// Costs are never negative; the expert counts describe a possible mixture.
absl::Status CheckTiming(const Profile& p) {
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
  return absl::OkStatus();
}

// Sizes and rates the engine divides by, and a KV pool that holds something.
absl::Status CheckSizes(const Profile& p) {
  if (p.block_size <= 0) return absl::InvalidArgumentError("engine.block_size must be > 0");
  if (p.max_num_batched_tokens <= 0) {
    return absl::InvalidArgumentError("engine.max_num_batched_tokens must be > 0");
  }
  if (p.max_num_seqs <= 0) return absl::InvalidArgumentError("engine.max_num_seqs must be > 0");
  if (p.long_prefill_token_threshold < 0) {
    return absl::InvalidArgumentError("engine.long_prefill_token_threshold must be >= 0");
  }
  if (p.max_model_len <= 0) return absl::InvalidArgumentError("model.max_model_len must be > 0");
  if (p.link.bandwidth_bytes_per_s <= 0) {
    return absl::InvalidArgumentError("link.bandwidth_bytes_per_s must be > 0");
  }
  if (!(p.kv_offloading.bandwidth_bytes_per_s > 0)) {
    return absl::InvalidArgumentError("kv_offloading.bandwidth_bytes_per_s must be > 0");
  }
  if (p.kv_offloading.block_size < 0 || p.OffloadedBlockSize() % p.block_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_offloading.block_size must be a multiple of engine.block_size (got ",
                     p.kv_offloading.block_size, ")"));
  }
  if (p.kv_offloading.lmcache_chunk_size <= 0 ||
      p.kv_offloading.lmcache_chunk_size % p.block_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_offloading.lmcache_chunk_size must be a multiple of engine.block_size "
                     "(got ",
                     p.kv_offloading.lmcache_chunk_size, ")"));
  }
  if (!(p.kv_offloading.lmcache_store_bandwidth_bytes_per_s > 0) ||
      !(p.kv_offloading.lmcache_load_bandwidth_bytes_per_s > 0)) {
    return absl::InvalidArgumentError(
        "kv_offloading.lmcache_store_bandwidth_bytes_per_s and "
        "lmcache_load_bandwidth_bytes_per_s must be > 0");
  }
  if (!(p.kv_offloading.lmcache_schedule_s >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_offloading.lmcache_schedule_s must be >= 0 (got ",
                     p.kv_offloading.lmcache_schedule_s, ")"));
  }
  if (!(p.kv_offloading.lmcache_store_fixed_s >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_offloading.lmcache_store_fixed_s must be >= 0 (got ",
                     p.kv_offloading.lmcache_store_fixed_s, ")"));
  }
  if (p.NumGpuBlocks() <= 0) {
    return absl::InvalidArgumentError(
        "the profile leaves no KV memory (model.params, gpu.memory_bytes, "
        "deployment.gpu_memory_utilization/overhead_bytes_per_gpu); set engine.num_gpu_blocks "
        "to override");
  }
  return absl::OkStatus();
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
  TakeHardwareKeys(k, &p);
  TakeEngineKeys(k.engine, &p);
  TakeTimingKeys(k.timing, &p.timing);
  TakeLinkKeys(k.link, &p.link);
  TakeKvOffloadingKeys(k.kv_offloading, &p.kv_offloading);
  if (absl::Status s = SetAdmission(k.engine.admission, &p); !s.ok()) return s;
  if (absl::Status s = SetSchedulingPolicy(k.engine.scheduling_policy, &p); !s.ok()) return s;
  if (absl::Status s = CheckTiming(p); !s.ok()) return s;
  if (absl::Status s = CheckSizes(p); !s.ok()) return s;
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
