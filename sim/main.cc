// kvroute-sim: N simulated vLLM instances on HOST:P ... P+N-1 (see sim/README.md).
#include <absl/status/status.h>
#include <absl/strings/str_cat.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/json.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "sim/fleet.h"
#include "sim/profile.h"

namespace {

// The command line; what FleetOptions takes directly is parsed into `opts`.
struct Flags {
  sim::FleetOptions opts;
  int base_port = 8100;
  std::string profile_path;
  std::string log_level = "info";
  std::vector<std::string> fault_specs;
  int64_t num_gpu_blocks = 0;
  std::string scheduling_policy;
  int long_prefill_token_threshold = -1;
  int kv_events_port = -1;
  int kv_events_replay_port = -1;
  double kv_offloading_size_gib = 0;
  std::string kv_offloading_backend;
  double kv_pool_size_gib = 0;
  int kv_pool_events_port = -1;
  int kv_pool_events_replay_port = -1;
};

void AddOptions(CLI::App& app, Flags& f) {
  sim::FleetOptions& opts = f.opts;
  app.add_option("--instances", opts.instances, "number of instances")->check(CLI::Range(1, 1024));
  app.add_option("--base-port", f.base_port,
                 "instance i listens on base-port + i (0: ephemeral ports, printed)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--host", opts.host, "bind address");
  app.add_option("--profile", f.profile_path, "profile YAML (default: built-in H20 / Qwen3-Coder)");
  app.add_option("--time-scale", opts.time_scale,
                 "wall seconds per modelled second (0.1: 10x faster than real time; 0: no delay)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", opts.seed, "seed for ids, output lengths and injected errors");
  app.add_option("--threads", opts.io_threads, "I/O threads")->check(CLI::Range(1, 64));
  app.add_option("--num-gpu-blocks", f.num_gpu_blocks, "override the profile's KV block count");
  app.add_option("--scheduling-policy", f.scheduling_policy,
                 "vLLM's --scheduling-policy: fcfs, or priority (requests' `priority` orders the "
                 "waiting queue and picks preemption victims; default: the profile's, fcfs)")
      ->check(CLI::IsMember({"fcfs", "priority"}));
  app.add_option("--long-prefill-token-threshold", f.long_prefill_token_threshold,
                 "vLLM's --long-prefill-token-threshold: the most tokens one request prefills "
                 "in a step (0: the whole budget; default: the profile's, 0)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--fault", f.fault_specs,
                 "fault at start, INDEX:JSON or *:JSON, e.g. '1:{\"error_rate\":0.5}' "
                 "(fields as POST /sim/faults)");
  app.add_option("--kv-events-port", f.kv_events_port,
                 "publish vLLM KV cache events (ZeroMQ PUB) on port P+i for instance i "
                 "(0: ephemeral ports, printed; default: off)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--kv-events-replay-port", f.kv_events_replay_port,
                 "answer KV event replay requests (ZeroMQ ROUTER) on port R+i for instance i "
                 "(needs --kv-events-port)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--kv-events-topic", opts.kv_events_topic, "topic of the KV event messages");
  app.add_option("--kv-offloading-size", f.kv_offloading_size_gib,
                 "vLLM's --kv-offloading-size: GiB of host memory per instance for its native CPU "
                 "KV offloading (write-through tier, loads on prefix hits; 0: off)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-offloading-backend", f.kv_offloading_backend,
                 "vLLM's --kv-offloading-backend: native (OffloadingConnector, copies beside the "
                 "steps) or lmcache (LMCacheConnectorV1: stores and loads block the step, in "
                 "256-token chunks); default native")
      ->check(CLI::IsMember({"native", "lmcache"}));
  app.add_option("--kv-pool-size", f.kv_pool_size_gib,
                 "GiB of a fleet-shared KV pool (Mooncake-Store-like) that every instance puts its "
                 "prefills' blocks to and loads stored prefixes from over its NIC (0: off)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-pool-events-port", f.kv_pool_events_port,
                 "publish the pool's KV events (medium STORAGE) on this port (0: ephemeral, "
                 "printed; needs --kv-pool-size; default: off)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--kv-pool-events-replay-port", f.kv_pool_events_replay_port,
                 "answer replays of the pool's KV events on this port (needs "
                 "--kv-pool-events-port)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--responses-store", opts.responses_store_capacity,
                 "responses each instance keeps for GET /v1/responses/{id} and "
                 "previous_response_id, oldest forgotten first (0: none, as vLLM without "
                 "VLLM_ENABLE_RESPONSES_API_STORE=1)");
  app.add_option("--log-level", f.log_level, "trace|debug|info|warn|error");
}

// The profile file, then the flags that override it.
absl::Status ResolveProfile(Flags& f) {
  sim::FleetOptions& opts = f.opts;
  if (!f.profile_path.empty()) {
    absl::StatusOr<sim::Profile> p = sim::LoadProfile(f.profile_path);
    if (!p.ok()) return p.status();
    opts.profile = *p;
  }
  if (f.num_gpu_blocks > 0) opts.profile.num_gpu_blocks_override = f.num_gpu_blocks;
  if (f.kv_offloading_size_gib > 0) opts.profile.kv_offloading.size_gib = f.kv_offloading_size_gib;
  if (!f.kv_offloading_backend.empty()) {
    opts.profile.kv_offloading.backend =
        *sim::KvOffloadingBackendByName(f.kv_offloading_backend);
  }
  if (f.kv_pool_size_gib > 0) opts.profile.kv_pool.size_gib = f.kv_pool_size_gib;
  if (f.long_prefill_token_threshold >= 0) {
    opts.profile.long_prefill_token_threshold = f.long_prefill_token_threshold;
  }
  if (!f.scheduling_policy.empty()) {
    opts.profile.scheduling_policy = f.scheduling_policy == "priority"
                                         ? sim::SchedulingPolicy::kPriority
                                         : sim::SchedulingPolicy::kFcfs;
  }
  return absl::OkStatus();
}

// The HTTP and KV event ports: every instance's port must exist.
absl::Status ResolvePorts(Flags& f) {
  sim::FleetOptions& opts = f.opts;
  if (f.base_port != 0 && f.base_port + opts.instances - 1 > 65535) {
    return absl::InvalidArgumentError("ports beyond 65535");
  }
  opts.base_port = static_cast<uint16_t>(f.base_port);
  if (f.kv_events_replay_port >= 0 && f.kv_events_port < 0) {
    return absl::InvalidArgumentError("--kv-events-replay-port needs --kv-events-port");
  }
  for (int p : {f.kv_events_port, f.kv_events_replay_port}) {
    if (p > 0 && p + opts.instances - 1 > 65535) {
      return absl::InvalidArgumentError("KV event ports beyond 65535");
    }
  }
  if (f.kv_pool_events_port >= 0 && f.kv_pool_size_gib <= 0) {
    return absl::InvalidArgumentError("--kv-pool-events-port needs --kv-pool-size");
  }
  if (f.kv_pool_events_replay_port >= 0 && f.kv_pool_events_port < 0) {
    return absl::InvalidArgumentError("--kv-pool-events-replay-port needs --kv-pool-events-port");
  }
  if (f.kv_pool_events_port >= 0) {
    opts.kv_pool_events_port = static_cast<uint16_t>(f.kv_pool_events_port);
  }
  if (f.kv_pool_events_replay_port >= 0) {
    opts.kv_pool_events_replay_port = static_cast<uint16_t>(f.kv_pool_events_replay_port);
  }
  if (f.kv_events_port >= 0) opts.kv_events_port = static_cast<uint16_t>(f.kv_events_port);
  if (f.kv_events_replay_port >= 0) {
    opts.kv_events_replay_port = static_cast<uint16_t>(f.kv_events_replay_port);
  }
  return absl::OkStatus();
}

// Each --fault INDEX:JSON (or *:JSON) applied, in order, to the instances it names.
absl::Status ResolveFaults(Flags& f) {
  sim::FleetOptions& opts = f.opts;
  opts.faults.assign(opts.instances, sim::Faults{});
  for (const std::string& spec : f.fault_specs) {
    const size_t colon = spec.find(':');
    boost::system::error_code ec;
    boost::json::value v = colon == std::string::npos
                               ? boost::json::value()
                               : boost::json::parse(spec.substr(colon + 1), ec);
    if (colon == std::string::npos || ec || !v.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat("--fault wants INDEX:JSON, got ", spec));
    }
    const std::string who = spec.substr(0, colon);
    for (int i = 0; i < opts.instances; ++i) {
      if (who != "*" && who != std::to_string(i)) continue;
      absl::StatusOr<sim::Faults> faults = sim::ApplyFaultsJson(opts.faults[i], v.as_object());
      if (!faults.ok()) return faults.status();
      opts.faults[i] = *faults;
    }
  }
  return absl::OkStatus();
}

// One line for the fleet, then one per instance (tests read the ports from these lines).
void PrintListening(const sim::FleetOptions& opts, const sim::Fleet& fleet,
                    const std::vector<uint16_t>& ports) {
  std::printf(
      "kvroute-sim: model %s, %lld KV blocks of %d tokens per instance, time scale %g, "
      "%d threads\n",
      opts.profile.model_name.c_str(), static_cast<long long>(opts.profile.NumGpuBlocks()),
      opts.profile.block_size, opts.time_scale, std::max(1, opts.io_threads));
  if (opts.profile.long_prefill_token_threshold > 0) {
    std::printf("kvroute-sim: at most %d tokens of one request a step, of %d a step "
                "(long_prefill_token_threshold)\n",
                opts.profile.long_prefill_token_threshold, opts.profile.max_num_batched_tokens);
  }
  if (opts.profile.kv_offloading.enabled()) {
    std::printf(
        "kvroute-sim: KV offloading to host memory (%s), %g GiB = %lld blocks of %d tokens "
        "per instance\n",
        sim::KvOffloadingBackendName(opts.profile.kv_offloading.backend),
        opts.profile.kv_offloading.size_gib, static_cast<long long>(opts.profile.NumHostBlocks()),
        opts.profile.OffloadedBlockSize());
  }
  if (opts.profile.kv_pool.enabled()) {
    std::printf("kvroute-sim: fleet-shared KV pool, %g GiB = %lld blocks of %d tokens\n",
                opts.profile.kv_pool.size_gib, static_cast<long long>(opts.profile.NumPoolBlocks()),
                opts.profile.block_size);
    if (opts.kv_pool_events_port) {
      std::printf("kvroute-sim: kv pool events on %s%s%s\n", fleet.kv_pool_events_endpoint().c_str(),
                  opts.kv_pool_events_replay_port ? " replay " : "",
                  fleet.kv_pool_events_replay_endpoint().c_str());
    }
  }
  for (int i = 0; i < fleet.size(); ++i) {
    std::printf("kvroute-sim: instance %d listening on %s:%u\n", i, opts.host.c_str(),
                static_cast<unsigned>(ports[i]));
    if (opts.kv_events_port) {
      std::printf("kvroute-sim: instance %d kv events on %s%s%s\n", i,
                  fleet.kv_events_endpoint(i).c_str(), opts.kv_events_replay_port ? " replay " : "",
                  fleet.kv_events_replay_endpoint(i).c_str());
    }
  }
  std::fflush(stdout);
}

void WaitForSigintOrSigterm() {
  boost::asio::io_context signals_io;
  boost::asio::signal_set signals(signals_io, SIGINT, SIGTERM);
  signals.async_wait([](const boost::system::error_code&, int) {});
  signals_io.run();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvroute-sim: a simulated GPU fleet that speaks vLLM's wire protocol"};
  Flags flags;
  AddOptions(app, flags);
  CLI11_PARSE(app, argc, argv);

  spdlog::set_level(spdlog::level::from_str(flags.log_level));
  for (absl::Status (*resolve)(Flags&) : {ResolveProfile, ResolvePorts, ResolveFaults}) {
    if (absl::Status s = resolve(flags); !s.ok()) {
      std::fprintf(stderr, "kvroute-sim: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }

  const sim::FleetOptions& opts = flags.opts;
  sim::Fleet fleet(opts);
  absl::StatusOr<std::vector<uint16_t>> ports = fleet.Start();
  if (!ports.ok()) {
    std::fprintf(stderr, "kvroute-sim: %s\n", std::string(ports.status().message()).c_str());
    return 1;
  }
  PrintListening(opts, fleet, *ports);
  WaitForSigintOrSigterm();
  fleet.Stop();
  std::printf("kvroute-sim: stopped\n");
  return 0;
}
