#include "sim/profile.h"

#include <absl/strings/str_cat.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>

namespace sim {

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
                                    .gpu_memory_bytes = 96e9,
                                    .tensor_parallel = 1,
                                    .utilisation = 0.9,
                                    .overhead_bytes_per_gpu = 3.22e9};
  return p;
}

namespace {

// Reads `node[key]` into `out` if present; records the first bad key in `error`.
template <typename T>
void Read(const YAML::Node& node, const char* section, const char* key, T& out,
          std::string& error) {
  if (!error.empty() || !node || !node[key]) return;
  try {
    out = node[key].as<T>();
  } catch (const YAML::Exception& e) {
    error = absl::StrCat(section, ".", key, ": bad value '", YAML::Dump(node[key]), "'");
  }
}

}  // namespace

absl::StatusOr<Profile> ParseProfile(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("profile is not valid YAML: ", e.what()));
  }
  if (!root.IsMap()) return absl::InvalidArgumentError("profile must be a YAML map");
  Profile p = DefaultProfile();
  std::string err;
  const YAML::Node model = root["model"];
  Read(model, "model", "name", p.model_name, err);
  Read(model, "model", "arch_name", p.arch.name, err);
  Read(model, "model", "max_model_len", p.max_model_len, err);
  Read(model, "model", "num_attention_layers", p.arch.num_attention_layers, err);
  Read(model, "model", "num_kv_heads", p.arch.num_kv_heads, err);
  Read(model, "model", "head_dim", p.arch.head_dim, err);
  Read(model, "model", "kv_bytes_per_element", p.arch.kv_bytes_per_element, err);
  double params = 0, bytes_per_param = 2;
  Read(model, "model", "params", params, err);
  Read(model, "model", "weight_bytes_per_param", bytes_per_param, err);
  if (params > 0) p.arch.weight_bytes = params * bytes_per_param;
  const YAML::Node gpu = root["gpu"];
  Read(gpu, "gpu", "name", p.deployment.gpu_name, err);
  Read(gpu, "gpu", "memory_bytes", p.deployment.gpu_memory_bytes, err);
  const YAML::Node dep = root["deployment"];
  Read(dep, "deployment", "tensor_parallel", p.deployment.tensor_parallel, err);
  Read(dep, "deployment", "gpu_memory_utilization", p.deployment.utilisation, err);
  Read(dep, "deployment", "overhead_bytes_per_gpu", p.deployment.overhead_bytes_per_gpu, err);
  const YAML::Node eng = root["engine"];
  Read(eng, "engine", "block_size", p.block_size, err);
  Read(eng, "engine", "max_num_batched_tokens", p.max_num_batched_tokens, err);
  Read(eng, "engine", "max_num_seqs", p.max_num_seqs, err);
  Read(eng, "engine", "num_gpu_blocks", p.num_gpu_blocks_override, err);
  Read(eng, "engine", "kv_hold_timeout_s", p.kv_hold_timeout_s, err);
  Read(eng, "engine", "pd_pair_timeout_s", p.pd_pair_timeout_s, err);
  Read(eng, "engine", "mean_output_tokens", p.mean_output_tokens, err);
  const YAML::Node timing = root["timing"];
  Read(timing, "timing", "step_fixed_s", p.timing.step_fixed_s, err);
  Read(timing, "timing", "prefill_s_per_token", p.timing.prefill_s_per_token, err);
  Read(timing, "timing", "decode_s_per_seq", p.timing.decode_s_per_seq, err);
  Read(timing, "timing", "kv_read_s_per_token", p.timing.kv_read_s_per_token, err);
  const YAML::Node link = root["link"];
  Read(link, "link", "bandwidth_bytes_per_s", p.link.bandwidth_bytes_per_s, err);
  Read(link, "link", "overhead_s", p.link.overhead_s, err);
  if (!err.empty()) return absl::InvalidArgumentError(err);

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
