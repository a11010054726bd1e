// kvroute-size: KV sizing calculator. Prints c_KV, M_KV, T_GPU, and optionally the utilisation
// window of a workload, the disk spill of a reuse corpus, each tier's retention clock against
// the reuse gap, and what to add when they fall short (kvsize/tier_pressure.h: the formula the
// daemon's live gauges use).
//
//   kvroute-size --profile configs/profiles/h20-qwen3-coder-30b-a3b.yaml
//   kvroute-size --attn-layers 10 --kv-heads 2 --head-dim 256 --params 35e9
//       --gpu-mem 85.9e9 --tp 2 --util 0.9 --overhead 3.22e9
//       --concurrency 32 --isl 32768 --osl 2048 --sessions 200 --session-tokens 34816
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "kvsize/kvsize.h"

namespace {

// Reads the model/gpu/deployment sections of a simulator profile (configs/profiles/*.yaml).
bool LoadProfile(const std::string& path, kvsize::ModelArch& arch, kvsize::Deployment& dep,
                 int& block_size) {
  try {
    YAML::Node root = YAML::LoadFile(path);
    const YAML::Node m = root["model"];
    const YAML::Node g = root["gpu"];
    const YAML::Node d = root["deployment"];
    if (m["name"]) arch.name = m["name"].as<std::string>();
    arch.num_attention_layers = m["num_attention_layers"].as<int>();
    arch.num_kv_heads = m["num_kv_heads"].as<int>();
    arch.head_dim = m["head_dim"].as<int>();
    if (m["kv_bytes_per_element"])
      arch.kv_bytes_per_element = m["kv_bytes_per_element"].as<double>();
    double bytes_per_param =
        m["weight_bytes_per_param"] ? m["weight_bytes_per_param"].as<double>() : 2;
    arch.weight_bytes = m["params"].as<double>() * bytes_per_param;
    if (g["name"]) dep.gpu_name = g["name"].as<std::string>();
    dep.gpu_memory_bytes = g["memory_bytes"].as<double>();
    if (d["tensor_parallel"]) dep.tensor_parallel = d["tensor_parallel"].as<int>();
    if (d["gpu_memory_utilization"]) dep.utilisation = d["gpu_memory_utilization"].as<double>();
    if (d["overhead_bytes_per_gpu"])
      dep.overhead_bytes_per_gpu = d["overhead_bytes_per_gpu"].as<double>();
    if (root["engine"] && root["engine"]["block_size"])
      block_size = root["engine"]["block_size"].as<int>();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvroute-size: cannot read profile %s: %s\n", path.c_str(), e.what());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvroute-size: KV cache sizing calculator"};
  std::string profile;
  kvsize::ModelArch arch;
  kvsize::Deployment dep;
  kvsize::Workload wl;
  kvsize::Tiering tier;
  double params = 0, bytes_per_param = 2;
  int block_size = 16;
  app.add_option("--profile", profile, "simulator profile YAML (model, gpu, deployment)");
  app.add_option("--attn-layers", arch.num_attention_layers, "standard-attention layers L_attn");
  app.add_option("--kv-heads", arch.num_kv_heads, "KV heads H_kv");
  app.add_option("--head-dim", arch.head_dim, "head dimension d_head");
  app.add_option("--kv-bytes", arch.kv_bytes_per_element, "bytes per KV element b_kv (BF16: 2)");
  app.add_option("--params", params, "model parameters (W = params x --bytes-per-param)");
  app.add_option("--bytes-per-param", bytes_per_param, "weight bytes per parameter");
  app.add_option("--gpu-mem", dep.gpu_memory_bytes, "GPU memory M_GPU in bytes");
  app.add_option("--tp", dep.tensor_parallel, "tensor-parallel degree N_TP");
  app.add_option("--util", dep.utilisation, "GPU memory utilisation U");
  app.add_option("--overhead", dep.overhead_bytes_per_gpu, "per-GPU overhead M_ovh in bytes");
  app.add_option("--block-size", block_size, "KV block size in tokens");
  app.add_option("--concurrency", wl.concurrency, "C: concurrent requests (live set)");
  app.add_option("--isl", wl.input_tokens, "input sequence length");
  app.add_option("--osl", wl.output_tokens, "output sequence length");
  app.add_option("--sessions", wl.sessions, "sessions in the reuse corpus");
  app.add_option("--session-tokens", wl.tokens_per_session, "KV tokens per session");
  app.add_option("--cpu-bytes", tier.cpu_buffer_bytes, "CPU KV buffer B_CPU in bytes");
  app.add_option("--write-rate", tier.write_rate_tokens_per_s,
                 "new KV tokens/s the fleet writes (into HBM and, written through, the CPU tier)");
  app.add_option("--instances", tier.instances,
                 "N replicas sharing the reuse corpus and the write rate (default 1)");
  app.add_option("--think-time", tier.think_time_s, "t_think between turns, seconds");
  app.add_option("--ttft", tier.ttft_s, "TTFT of the next turn, seconds");
  CLI11_PARSE(app, argc, argv);

  if (!profile.empty() && !LoadProfile(profile, arch, dep, block_size)) return 1;
  if (params > 0) arch.weight_bytes = params * bytes_per_param;
  if (arch.num_attention_layers <= 0 || arch.num_kv_heads <= 0 || arch.head_dim <= 0 ||
      dep.gpu_memory_bytes <= 0) {
    std::fprintf(stderr,
                 "kvroute-size: need --profile or --attn-layers, --kv-heads, --head-dim, "
                 "--gpu-mem\n");
    return 2;
  }

  const kvsize::Capacity cap = kvsize::ComputeCapacity(arch, dep);
  if (!arch.name.empty()) std::printf("model                  %s\n", arch.name.c_str());
  std::printf("c_KV                   %.0f bytes/token\n", cap.kv_bytes_per_token);
  if (cap.effective_kv_bytes_per_token != cap.kv_bytes_per_token) {
    std::printf("c_KV (replicated)      %.0f bytes/token\n", cap.effective_kv_bytes_per_token);
  }
  std::printf("W                      %.2f GB\n", arch.weight_bytes / 1e9);
  std::printf("M_KV                   %.2f GB\n", cap.kv_memory_bytes / 1e9);
  std::printf("T_GPU                  %.0f tokens (%.2f M)\n", cap.token_capacity,
              cap.token_capacity / 1e6);
  std::printf("num_gpu_blocks         %lld (block_size %d)\n",
              static_cast<long long>(kvsize::NumGpuBlocks(cap, block_size)), block_size);

  kvsize::UtilisationWindow window;
  if (wl.concurrency > 0 || wl.sessions > 0) {
    window = kvsize::ComputeUtilisationWindow(arch, dep, wl);
    std::printf("live set C*(ISL+OSL)   %.0f tokens\n", window.live_set_tokens);
    std::printf("U_min                  %.3f\n", window.u_min);
    if (wl.sessions > 0) {
      std::printf("reuse corpus           %.0f tokens\n", window.corpus_tokens);
      std::printf("U_max                  %.3f\n", window.u_max);
    }
  }
  if (tier.cpu_buffer_bytes > 0 || wl.sessions > 0) {
    const kvsize::TieringResult t = kvsize::ComputeTiering(arch, cap, window, tier);
    const kvsize::TierLoad& load = t.load;
    const kvsize::TierPressure& p = t.pressure;
    std::printf("T_CPU                  %.0f tokens\n", t.cpu_token_capacity);
    std::printf("working set            %.0f tokens (HBM %.0f, HBM + host %.0f, %d instance%s)\n",
                load.working_set_tokens, load.gpu_capacity_tokens,
                load.gpu_capacity_tokens + load.host_capacity_tokens, load.instances,
                load.instances == 1 ? "" : "s");
    std::printf("disk spill             %.0f tokens\n", t.disk_spill_tokens);
    if (tier.write_rate_tokens_per_s > 0) {
      std::printf("retention gpu          %.1f s\n", p.gpu_retention_s);
      std::printf("retention clock        %.1f s (need >= t_think + TTFT = %.1f s): %s\n",
                  t.retention_s, load.reuse_gap_s, t.retention_ok ? "ok" : "TOO SHORT");
    }
    if (p.thrash_ahead) {
      std::printf("thrash ahead           add %.0f instances or %.0f GiB of host tier per instance\n",
                  p.add_instances, p.add_host_gib_per_instance);
    }
  }
  for (const std::string& w : cap.warnings) std::printf("warning: %s\n", w.c_str());
  return 0;
}
