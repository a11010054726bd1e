#include "profile/profile_keys.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace kvroute::profile {
namespace {

// How a value of each key type is named in errors.
template <typename T>
constexpr const char* kExpected = "a number";
template <>
constexpr const char* kExpected<int64_t> = "an integer";
template <>
constexpr const char* kExpected<std::string> = "a string";
template <>
constexpr const char* kExpected<bool> = "true or false";

std::string Show(const YAML::Node& n) {
  if (n.IsScalar()) return absl::StrCat("'", n.Scalar(), "'");
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a map";
  return "null";
}

// One section of the document: reads its keys, remembers the first error.
class SectionReader {
 public:
  SectionReader(const YAML::Node& root, const char* section, bool* present, std::string* error)
      : section_(section), error_(error) {
    if (!error_->empty()) return;
    const YAML::Node node = root[section];
    if (!node || node.IsNull()) return;
    if (!node.IsMap()) {
      *error_ = absl::StrCat(section, ": expected a map, got ", Show(node));
      return;
    }
    node_ = node;
    *present = true;
  }

  template <typename T>
  void Read(const char* key, std::optional<T>* out) {
    if (!error_->empty() || !node_) return;
    const YAML::Node v = node_[key];
    if (!v || v.IsNull()) return;
    T value{};
    if (v.IsScalar() && YAML::convert<T>::decode(v, value)) {
      *out = value;
      return;
    }
    *error_ = absl::StrCat(section_, ".", key, ": expected ", kExpected<T>, ", got ", Show(v));
  }

 private:
  const char* section_;
  std::string* error_;
  YAML::Node node_{YAML::NodeType::Undefined};
};

}  // namespace

absl::StatusOr<ProfileKeys> ParseProfileKeys(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("YAML syntax error: ", e.what()));
  }
  if (!root.IsMap()) return absl::InvalidArgumentError("expected a YAML map at top level");
  ProfileKeys k;
  std::string err;

  SectionReader model(root, "model", &k.model.present, &err);
  model.Read("name", &k.model.name);
  model.Read("arch_name", &k.model.arch_name);
  model.Read("max_model_len", &k.model.max_model_len);
  model.Read("num_attention_layers", &k.model.num_attention_layers);
  model.Read("num_kv_heads", &k.model.num_kv_heads);
  model.Read("head_dim", &k.model.head_dim);
  model.Read("kv_bytes_per_element", &k.model.kv_bytes_per_element);
  model.Read("params", &k.model.params);
  model.Read("weight_bytes_per_param", &k.model.weight_bytes_per_param);

  SectionReader gpu(root, "gpu", &k.gpu.present, &err);
  gpu.Read("name", &k.gpu.name);
  gpu.Read("memory_bytes", &k.gpu.memory_bytes);

  SectionReader dep(root, "deployment", &k.deployment.present, &err);
  dep.Read("tensor_parallel", &k.deployment.tensor_parallel);
  dep.Read("gpu_memory_utilization", &k.deployment.gpu_memory_utilization);
  dep.Read("overhead_bytes_per_gpu", &k.deployment.overhead_bytes_per_gpu);

  SectionReader eng(root, "engine", &k.engine.present, &err);
  eng.Read("block_size", &k.engine.block_size);
  eng.Read("max_num_batched_tokens", &k.engine.max_num_batched_tokens);
  eng.Read("max_num_seqs", &k.engine.max_num_seqs);
  eng.Read("long_prefill_token_threshold", &k.engine.long_prefill_token_threshold);
  eng.Read("num_gpu_blocks", &k.engine.num_gpu_blocks);
  eng.Read("kv_hold_timeout_s", &k.engine.kv_hold_timeout_s);
  eng.Read("pd_pair_timeout_s", &k.engine.pd_pair_timeout_s);
  eng.Read("mean_output_tokens", &k.engine.mean_output_tokens);
  eng.Read("admission", &k.engine.admission);
  eng.Read("scheduling_policy", &k.engine.scheduling_policy);
  eng.Read("cache_generated_blocks", &k.engine.cache_generated_blocks);
  eng.Read("always_report_cached_tokens", &k.engine.always_report_cached_tokens);

  SectionReader timing(root, "timing", &k.timing.present, &err);
  timing.Read("step_fixed_s", &k.timing.step_fixed_s);
  timing.Read("prefill_s_per_token", &k.timing.prefill_s_per_token);
  timing.Read("decode_s_per_seq", &k.timing.decode_s_per_seq);
  timing.Read("kv_read_s_per_token", &k.timing.kv_read_s_per_token);
  timing.Read("attn_s_per_token_pair", &k.timing.attn_s_per_token_pair);
  timing.Read("weight_read_s", &k.timing.weight_read_s);
  timing.Read("expert_weight_fraction", &k.timing.expert_weight_fraction);
  timing.Read("num_experts", &k.timing.num_experts);
  timing.Read("experts_per_token", &k.timing.experts_per_token);

  SectionReader link(root, "link", &k.link.present, &err);
  link.Read("bandwidth_bytes_per_s", &k.link.bandwidth_bytes_per_s);
  link.Read("overhead_s", &k.link.overhead_s);
  link.Read("per_descriptor_s", &k.link.per_descriptor_s);

  SectionReader offload(root, "kv_offloading", &k.kv_offloading.present, &err);
  offload.Read("bandwidth_bytes_per_s", &k.kv_offloading.bandwidth_bytes_per_s);
  offload.Read("block_size", &k.kv_offloading.block_size);
  offload.Read("lmcache_chunk_size", &k.kv_offloading.lmcache_chunk_size);
  offload.Read("lmcache_store_bandwidth_bytes_per_s",
               &k.kv_offloading.lmcache_store_bandwidth_bytes_per_s);
  offload.Read("lmcache_store_fixed_s", &k.kv_offloading.lmcache_store_fixed_s);
  offload.Read("lmcache_load_bandwidth_bytes_per_s",
               &k.kv_offloading.lmcache_load_bandwidth_bytes_per_s);
  offload.Read("lmcache_schedule_s", &k.kv_offloading.lmcache_schedule_s);

  if (!err.empty()) return absl::InvalidArgumentError(err);
  return k;
}

absl::StatusOr<ProfileKeys> LoadProfileKeys(const std::string& path) {
  std::error_code ec;
  std::ifstream in(path);
  if (!std::filesystem::is_regular_file(path, ec) || !in) {
    return absl::NotFoundError(absl::StrCat("cannot read the file ", path));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseProfileKeys(ss.str());
}

}  // namespace kvroute::profile
