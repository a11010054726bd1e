#include "bench/kvroute_bench/ablation.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "bench/kvroute_bench/child_process.h"
#include "bench/kvroute_bench/cluster_admissions.h"
#include "cluster/options.h"
#include "proxy/config.h"
#include "router/policy_registry.h"
#include "router/router.h"
#include "spdlog/spdlog.h"

namespace kvroute::bench {
namespace fs = std::filesystem;

namespace {

// Runs faults on a schedule, from its own thread, each `after_wall_s` into the run, until
// disarmed: the ones not yet due then never run; then `at_disarm` runs on the same thread.
// The thread lives until disarmed, since a child a fault starts (the store started again) is
// bound to it: ChildProcess's PR_SET_PDEATHSIG signals the child when the thread that forked
// it exits, so `at_disarm` stops such children first.
class FaultTimer {
 public:
  FaultTimer() = default;
  FaultTimer(const FaultTimer&) = delete;
  FaultTimer& operator=(const FaultTimer&) = delete;
  ~FaultTimer() { Disarm(); }

  // Faults in the order they are due.
  void Arm(std::vector<std::pair<double, std::function<void()>>> faults,
           std::function<void()> at_disarm) {
    if (faults.empty()) return;
    thread_ = std::thread([this, faults = std::move(faults), at_disarm = std::move(at_disarm)] {
      const absl::Time start = absl::Now();
      for (const auto& [after_wall_s, fault] : faults) {
        bool disarmed = false;
        {
          absl::MutexLock lock(&mu_);
          const absl::Duration left = start + absl::Seconds(after_wall_s) - absl::Now();
          disarmed = mu_.AwaitWithTimeout(absl::Condition(&disarmed_), left);
        }
        if (disarmed) break;
        fault();
      }
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(&disarmed_));
      }
      at_disarm();
    });
  }
  void Disarm() {
    {
      absl::MutexLock lock(&mu_);
      disarmed_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  absl::Mutex mu_;
  bool disarmed_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// A free TCP port on loopback: bound, read and released (the server started on it next is
// the only taker the bench knows of).
absl::StatusOr<uint16_t> FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return absl::InternalError("binding a loopback port failed");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// Starts redis-server on loopback `port` (0: a free one), without persistence, and waits
// until it accepts connections; `url` receives its redis:// URL.
absl::StatusOr<std::unique_ptr<ChildProcess>> StartRedis(const std::string& bin,
                                                         const std::string& log,
                                                         std::chrono::milliseconds startup,
                                                         uint16_t port, std::string* url) {
  static const std::regex kReady("Ready to accept connections");
  std::string path = bin;
  // A bare name is looked up on PATH, as a shell would.
  if (bin.find('/') == std::string::npos) {
    const char* env = std::getenv("PATH");
    for (absl::string_view dir : absl::StrSplit(env != nullptr ? env : "/usr/bin", ':')) {
      const std::string candidate = absl::StrCat(dir, "/", bin);
      if (access(candidate.c_str(), X_OK) == 0) {
        path = candidate;
        break;
      }
    }
  }
  if (port == 0) {
    absl::StatusOr<uint16_t> free = FreeLoopbackPort();
    if (!free.ok()) return free.status();
    port = *free;
  }
  absl::StatusOr<std::unique_ptr<ChildProcess>> redis =
      ChildProcess::Start({path, "--bind", "127.0.0.1", "--port", absl::StrCat(port), "--save", "",
                           "--appendonly", "no"},
                          log);
  if (!redis.ok()) return redis.status();
  if (auto ready = (*redis)->WaitForLines(kReady, 1, startup); !ready.ok()) {
    return absl::Status(ready.status().code(),
                        absl::StrCat("redis-server (", bin, "): ", ready.status().message(),
                                     "; see ", log, " (deploy/install-deps.sh installs it)"));
  }
  *url = absl::StrCat("redis://127.0.0.1:", port);
  return redis;
}

std::vector<std::pair<std::string, std::string>> Setup(const AblationOptions& o,
                                                       const WorkloadSpec& w) {
  std::vector<std::pair<std::string, std::string>> s;
  if (w.kind == WorkloadKind::kAgentic && !w.agentic.preset.empty()) {
    const AgenticOptions& a = w.agentic;
    s.emplace_back(
        "workload",
        absl::StrFormat("%s: %d jobs arriving within %.0f s at %.3g jobs/s, %d-%d turns "
                        "(prompts capped at %d tokens), system %d + repository %d-%d tokens, "
                        "tool outputs %d-%d tokens, answers %d-%d tokens, tool time %s, seed %d",
                        a.preset, a.max_jobs, a.duration_s, a.jobs_per_second, a.turns, a.turns_max,
                        a.max_context_tokens, a.system_tokens, a.task_tokens, a.task_tokens_max,
                        a.tool_tokens_min, a.tool_tokens_max, a.completion_tokens,
                        a.completion_tokens_max, AgenticToolTimeDescription(a), a.seed));
  } else if (w.kind == WorkloadKind::kAgentic) {
    const AgenticOptions& a = w.agentic;
    std::string tools;
    for (int64_t t : a.tool_tokens) absl::StrAppend(&tools, tools.empty() ? "" : ",", t);
    s.emplace_back("workload",
                   absl::StrFormat("agentic: %.3g jobs/s for %.0f s, %d turns, system %d + task "
                                   "%s tokens, tool outputs [%s] tokens, tool time %.2f s, "
                                   "%d completion tokens per turn, seed %d",
                                   a.jobs_per_second, a.duration_s, a.turns, a.system_tokens,
                                   a.task_tokens_max > a.task_tokens
                                       ? absl::StrCat(a.task_tokens, "-", a.task_tokens_max)
                                       : absl::StrCat(a.task_tokens),
                                   tools, a.tool_time_s, a.completion_tokens, a.seed));
  } else {
    const TraceOptions& t = w.trace;
    s.emplace_back(
        "workload",
        absl::StrFormat("trace %s: %d requests, speed-up %g, block size %d", t.path,
                        w.trace_records ? w.trace_records->size() : 0, t.speedup, t.block_size));
  }
  if (w.kind == WorkloadKind::kAgentic) {
    s.emplace_back("client", RunClientDescription(w.agentic.client, o.run_template));
  }
  if (!o.variants.empty()) {
    std::vector<std::string> variants;
    for (const ConfigVariant& v : o.variants) variants.push_back(ConfigVariantDescription(v));
    s.emplace_back("variants", absl::StrJoin(variants, "; "));
  }
  if (o.targets.empty()) {
    s.emplace_back(
        "fleet",
        absl::StrFormat("kvroute-sim, %d instances, profile %s, time scale "
                        "%g, seed %d, KV events %s",
                        o.instances, o.profile.empty() ? "(default)" : o.profile, o.sim_time_scale,
                        o.sim_seed, o.kv_events ? "published and subscribed" : "off") +
            FleetExtrasDescription(o));
  } else {
    std::string t;
    for (const auto& [name, url] : o.targets)
      absl::StrAppend(&t, t.empty() ? "" : ", ", name, "=", url);
    s.emplace_back("targets", t);
  }
  return s;
}

double JsonNumber(const boost::json::object& o, std::string_view key) {
  const boost::json::value* v = o.if_contains(key);
  if (v == nullptr) return -1;
  if (v->is_double()) return v->as_double();
  if (v->is_int64()) return static_cast<double>(v->as_int64());
  if (v->is_uint64()) return static_cast<double>(v->as_uint64());
  return -1;
}

}  // namespace

int SimThreads(const AblationOptions& options) {
  if (options.sim_threads > 0) return options.sim_threads;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

std::string FleetExtrasDescription(const AblationOptions& options) {
  std::string out;
  if (options.targets.empty()) {
    out = absl::StrFormat(", its instances' steps on %d threads (--sim-threads)",
                          SimThreads(options));
  }
  if (options.long_prefill_token_threshold > 0) {
    absl::StrAppend(
        &out,
        absl::StrFormat(", at most %d tokens of one prompt a step (--long-prefill-token-threshold)",
                        options.long_prefill_token_threshold));
  }
  if (options.kv_offloading_size_gib > 0) {
    const std::string backend = options.kv_offloading_backend == "native"
                                    ? std::string()
                                    : absl::StrCat(", backend ", options.kv_offloading_backend);
    absl::StrAppend(&out,
                    absl::StrFormat(", host KV tier %g GiB per instance (--kv-offloading-size%s)",
                                    options.kv_offloading_size_gib, backend));
  }
  if (options.kv_pool_size_gib > 0) {
    absl::StrAppend(&out, absl::StrFormat(", fleet-shared KV pool %g GiB (--kv-pool-size)",
                                          options.kv_pool_size_gib));
  }
  if (options.kvroute_replicas > 1) {
    absl::StrAppend(&out, absl::StrFormat("; %d kvroute replicas, requests spread round robin, "
                                          "cluster store %s",
                                          options.kvroute_replicas, options.cluster_store));
    if (options.kill_replica_at_s >= 0) {
      absl::StrAppend(&out, absl::StrFormat(", replica 0 killed %g s into each configuration",
                                            options.kill_replica_at_s));
    }
    if (options.kill_store_at_s >= 0) {
      absl::StrAppend(&out, absl::StrFormat(", the store killed %g s into each configuration and "
                                            "started again, empty, %g s later",
                                            options.kill_store_at_s, options.store_down_s));
    }
  }
  return out;
}

int64_t MergeRequestLog(const std::string& path, RunResult& run) {
  std::ifstream in(path);
  if (!in) return 0;
  absl::flat_hash_map<std::string, size_t> by_id;
  for (size_t i = 0; i < run.requests.size(); ++i) by_id[run.requests[i].request_id] = i;
  int64_t matched = 0;
  std::string line;
  while (std::getline(in, line)) {
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(line, ec);
    if (ec || !v.is_object()) continue;
    const boost::json::object& o = v.as_object();
    const boost::json::value* id = o.if_contains("id");
    if (id == nullptr || !id->is_string()) continue;
    auto it = by_id.find(std::string(id->as_string()));
    if (it == by_id.end()) continue;
    RequestRecord& r = run.requests[it->second];
    r.cached_tokens_est = static_cast<int64_t>(JsonNumber(o, "cached_tokens_est"));
    const double routed = JsonNumber(o, "t_routed");
    const double prefill_done = JsonNumber(o, "t_prefill_done");
    if (routed > 0 && prefill_done >= routed) r.prefill_leg_s = prefill_done - routed;
    r.transfer_s = JsonNumber(o, "transfer_s");
    // kvroute predicts in wall seconds (its config's profile_time_scale), as records keep them.
    const double predicted = JsonNumber(o, "predicted_ttft_s");
    r.predicted_ttft_s = predicted >= 0 ? predicted : -1;
    // A shed request's 429 can come without X-Kvroute-Class; its log line has the class,
    // which puts the miss in that class's goodput.
    if (const boost::json::value* c = o.if_contains("class");
        r.klass.empty() && c != nullptr && c->is_string()) {
      r.klass = std::string(c->as_string());
    }
    if (const boost::json::value* c = o.if_contains("cluster_admission");
        c != nullptr && c->is_string()) {
      r.cluster_admission = std::string(c->as_string());
      r.cluster_footprint_tokens = static_cast<int64_t>(JsonNumber(o, "cluster_footprint_tokens"));
      r.cluster_reserved_tokens = static_cast<int64_t>(JsonNumber(o, "cluster_reserved_tokens"));
      r.cluster_fill_tokens = static_cast<int64_t>(JsonNumber(o, "cluster_fill_tokens"));
    }
    ++matched;
  }
  return matched;
}

std::string FindBuiltBinary(const std::string& name, const std::vector<std::string>& subdirs) {
  std::error_code ec;
  fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  if (ec) return {};
  for (int level = 0; level <= 3 && !dir.empty(); ++level) {
    for (const std::string& sub : subdirs) {
      const fs::path p = sub.empty() ? dir / name : dir / sub / name;
      if (access(p.c_str(), X_OK) == 0 && fs::is_regular_file(p, ec)) return p.string();
    }
    if (dir == dir.parent_path()) break;
    dir = dir.parent_path();
  }
  return {};
}

absl::StatusOr<Report> RunAblation(const AblationOptions& options, WorkloadSpec& workload) {
  if (absl::Status s = PrepareWorkload(workload); !s.ok()) return s;
  Report report;
  report.title = "kvroute ablation";
  report.generated_at = options.generated_at;
  report.setup = Setup(options, workload);
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", options.out_dir));

  auto finish_run = [&](absl::StatusOr<RunResult> r) -> absl::Status {
    if (!r.ok()) return r.status();
    report.runs.push_back(*std::move(r));
    return WriteReports(report, options.out_dir);
  };

  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> router_keys =
      ParseRouterKeys(options.router_keys);
  if (!router_keys.ok()) return router_keys.status();
  if (!router_keys->empty() && !options.targets.empty()) {
    return absl::InvalidArgumentError(
        "--router writes the configs of the kvroutes the bench starts; with --targets, set "
        "your kvroute's config instead");
  }
  if (!router_keys->empty() &&
      std::find(options.modes.begin(), options.modes.end(), "oracle") != options.modes.end()) {
    return absl::InvalidArgumentError(
        "--router reaches kvroute's configurations, not the bench's oracle reference, which "
        "routes with the defaults; run the oracle without it");
  }

  const absl::StatusOr<std::vector<AblationConfig>> configs = AblationConfigsOf(options);
  if (!configs.ok()) return configs.status();

  if (options.kvroute_replicas > 1 && !options.targets.empty()) {
    return absl::InvalidArgumentError(
        "--kvroute-replicas starts the bench's own kvroutes; with --targets, list each replica "
        "as a target of your balancer instead");
  }
  if (options.cluster_store != "none" && options.cluster_store != "redis") {
    return absl::InvalidArgumentError(
        absl::StrCat("--cluster-store: expected none or redis, got '", options.cluster_store, "'"));
  }
  if (options.cluster_store == "redis" && options.kvroute_replicas < 2) {
    return absl::InvalidArgumentError(
        "--cluster-store redis shares state between replicas: add --kvroute-replicas 2 or more");
  }
  if (options.kill_store_at_s >= 0 && options.cluster_store != "redis") {
    return absl::InvalidArgumentError("--kill-store-at needs --cluster-store redis");
  }
  if (options.kill_store_at_s >= 0 && !(options.store_down_s >= 0)) {
    return absl::InvalidArgumentError("--store-down-for: expected seconds >= 0");
  }
  if (options.kill_replica_at_s >= 0 && options.kvroute_replicas < 2) {
    return absl::InvalidArgumentError(
        "--kill-replica-at needs --kvroute-replicas 2 or more: the clients fail over to another");
  }

  if (!options.targets.empty()) {
    for (const auto& [name, url] : options.targets) {
      absl::StatusOr<Endpoint> ep = ParseHttpUrl(url);
      if (!ep.ok()) return ep.status();
      RunOptions ro = options.run_template;
      ro.name = name;
      ro.mode = name;
      ro.target = *ep;
      if (absl::Status s = finish_run(RunWorkload(ro, workload)); !s.ok()) return s;
    }
    return report;
  }

  if (options.kvroute_bin.empty() || access(options.kvroute_bin.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("kvroute binary not found (", options.kvroute_bin,
                                            "); build it or pass --kvroute-bin"));
  }
  if (options.sim_bin.empty() || access(options.sim_bin.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("kvroute-sim binary not found (", options.sim_bin,
                                            "); build it or pass --sim-bin"));
  }
  const auto startup =
      std::chrono::milliseconds(static_cast<int64_t>(options.startup_timeout_s * 1000));
  static const std::regex kSimReady(R"(kvroute-sim: instance (\d+) listening on ([0-9.]+):(\d+))");
  static const std::regex kSimEvents(
      R"(kvroute-sim: instance (\d+) kv events on (\S+) replay (\S+))");
  static const std::regex kProxyReady(R"(kvroute: listening on ([0-9.]+):(\d+))");

  for (size_t ci = 0; ci < configs->size(); ++ci) {
    const AblationConfig& config = (*configs)[ci];
    const fs::path dir = fs::path(options.out_dir) / config.name;
    fs::create_directories(dir, ec);
    spdlog::info(
        "[{}] configuration {}/{}: starting {} simulated instances and kvroute "
        "(mode {}, threshold {})",
        config.name, ci + 1, configs->size(), options.instances, config.mode,
        config.heavy_threshold);
    std::vector<std::string> sim_argv = {options.sim_bin,
                                         "--instances",
                                         absl::StrCat(options.instances),
                                         "--base-port",
                                         "0",
                                         "--time-scale",
                                         absl::StrCat(options.sim_time_scale),
                                         "--seed",
                                         absl::StrCat(options.sim_seed),
                                         "--threads",
                                         absl::StrCat(SimThreads(options))};
    if (!options.profile.empty()) {
      sim_argv.push_back("--profile");
      sim_argv.push_back(options.profile);
    }
    if (options.scheduling_policy != "fcfs") {
      sim_argv.push_back("--scheduling-policy");
      sim_argv.push_back(options.scheduling_policy);
    }
    if (options.long_prefill_token_threshold > 0) {
      sim_argv.push_back("--long-prefill-token-threshold");
      sim_argv.push_back(absl::StrCat(options.long_prefill_token_threshold));
    }
    const double host_tier_gib = config.kv_offloading_size_gib >= 0
                                     ? config.kv_offloading_size_gib
                                     : options.kv_offloading_size_gib;
    if (host_tier_gib > 0) {
      sim_argv.push_back("--kv-offloading-size");
      sim_argv.push_back(absl::StrCat(host_tier_gib));
      sim_argv.push_back("--kv-offloading-backend");
      sim_argv.push_back(options.kv_offloading_backend);
    }
    // The oracle reads the truth directly; kvroute learns evictions from the events.
    const bool kv_events = options.kv_events && config.mode != kOracleReferenceMode;
    if (kv_events) {
      for (const char* flag : {"--kv-events-port", "--kv-events-replay-port"}) {
        sim_argv.push_back(flag);
        sim_argv.push_back("0");
      }
    }
    const bool pool_events = kv_events && options.kv_pool_size_gib > 0;
    if (options.kv_pool_size_gib > 0) {
      sim_argv.push_back("--kv-pool-size");
      sim_argv.push_back(absl::StrCat(options.kv_pool_size_gib));
    }
    if (pool_events) {
      for (const char* flag : {"--kv-pool-events-port", "--kv-pool-events-replay-port"}) {
        sim_argv.push_back(flag);
        sim_argv.push_back("0");
      }
    }
    absl::StatusOr<std::unique_ptr<ChildProcess>> sim =
        ChildProcess::Start(sim_argv, (dir / "sim.log").string());
    if (!sim.ok()) return sim.status();
    auto sim_lines =
        (*sim)->WaitForLines(kSimReady, static_cast<size_t>(options.instances), startup);
    if (!sim_lines.ok()) {
      return absl::Status(sim_lines.status().code(),
                          absl::StrCat("kvroute-sim: ", sim_lines.status().message(), "; see ",
                                       (dir / "sim.log").string()));
    }
    std::vector<FleetBackend> backends(static_cast<size_t>(options.instances));
    RunOptions ro = options.run_template;
    ro.instances.clear();
    for (const std::vector<std::string>& m : *sim_lines) {
      size_t i = 0;
      if (!absl::SimpleAtoi(m[1], &i) || i >= backends.size()) {
        return absl::InternalError(absl::StrCat("kvroute-sim printed instance ", m[1]));
      }
      backends[i].name = absl::StrCat("gpu", i);
      backends[i].url = absl::StrCat("http://", m[2], ":", m[3]);
      backends[i].priority_scheduling = options.scheduling_policy == "priority";
    }
    if (kv_events) {
      auto event_lines =
          (*sim)->WaitForLines(kSimEvents, static_cast<size_t>(options.instances), startup);
      if (!event_lines.ok()) {
        return absl::Status(event_lines.status().code(),
                            absl::StrCat("kvroute-sim KV events: ", event_lines.status().message(),
                                         "; see ", (dir / "sim.log").string()));
      }
      for (const std::vector<std::string>& m : *event_lines) {
        size_t i = 0;
        if (!absl::SimpleAtoi(m[1], &i) || i >= backends.size()) {
          return absl::InternalError(absl::StrCat("kvroute-sim printed instance ", m[1]));
        }
        backends[i].kv_events = m[2];
        backends[i].kv_events_replay = m[3];
      }
    }
    std::string pool_endpoint, pool_replay_endpoint;
    if (pool_events) {
      static const std::regex kPoolEvents(R"(kvroute-sim: kv pool events on (\S+) replay (\S+))");
      auto pool_lines = (*sim)->WaitForLines(kPoolEvents, 1, startup);
      if (!pool_lines.ok()) {
        return absl::Status(
            pool_lines.status().code(),
            absl::StrCat("kvroute-sim KV pool events: ", pool_lines.status().message(), "; see ",
                         (dir / "sim.log").string()));
      }
      pool_endpoint = (*pool_lines)[0][1];
      pool_replay_endpoint = (*pool_lines)[0][2];
    }
    for (const FleetBackend& b : backends) ro.instances.push_back({b.name, *ParseHttpUrl(b.url)});

    ro.name = config.name;
    ro.mode = config.mode;
    ro.heavy_threshold = config.heavy_threshold;
    ro.time_scale = options.sim_time_scale > 0 ? options.sim_time_scale : 1.0;
    if (config.mode == kOracleReferenceMode) {
      // No kvroute: the bench routes by baseline's policy from the simulator's true counts.
      absl::StatusOr<std::unique_ptr<OracleReference>> reference =
          OracleReference::Create(ro.instances, ro.time_scale);
      if (!reference.ok()) return reference.status();
      ro.reference = std::shared_ptr<OracleReference>(*std::move(reference));
      ro.target = ro.instances.front().endpoint;
      absl::StatusOr<RunResult> result = RunWorkload(ro, workload);
      (*sim)->Stop();
      if (absl::Status s = finish_run(std::move(result)); !s.ok()) return s;
      continue;
    }

    const fs::path yaml = dir / "kvroute.yaml";
    // kvroute's placement cost reads the fleet's profile too (an absolute path: the config
    // lives in the run's directory).
    AblationConfig with_profile = config;
    if (!options.profile.empty()) with_profile.profile = fs::absolute(options.profile).string();
    with_profile.kv_pool_events = pool_endpoint;
    with_profile.kv_pool_events_replay = pool_replay_endpoint;
    // The replicas' shared store, started afresh per configuration.
    std::unique_ptr<ChildProcess> store;
    if (options.cluster_store == "redis") {
      absl::StatusOr<std::unique_ptr<ChildProcess>> redis =
          StartRedis(options.redis_server_bin, (dir / "redis.log").string(), startup,
                     /*port=*/0, &with_profile.cluster_store);
      if (!redis.ok()) return redis.status();
      store = *std::move(redis);
    }
    std::ofstream(yaml) << KvrouteConfigYaml(with_profile, backends, ro.time_scale, ro.slo,
                                             RouterKeysFor(config, *router_keys));
    const int replicas = std::max(1, options.kvroute_replicas);
    // One replica keeps the single router's file names; several number theirs.
    auto replica_file = [&](const char* stem, const char* ext, int i) {
      return (dir / (replicas == 1 ? absl::StrCat(stem, ext) : absl::StrCat(stem, "-", i, ext)))
          .string();
    };
    std::vector<std::unique_ptr<ChildProcess>> proxies;
    for (int i = 0; i < replicas; ++i) {
      std::vector<std::string> proxy_argv = {options.kvroute_bin,
                                             "--config",
                                             yaml.string(),
                                             "--listen",
                                             "127.0.0.1:0",
                                             "--request-log",
                                             replica_file("requests", ".jsonl", i),
                                             "--log-level",
                                             options.log_level};
      const std::string log = replica_file("kvroute", ".log", i);
      absl::StatusOr<std::unique_ptr<ChildProcess>> proxy = ChildProcess::Start(proxy_argv, log);
      if (!proxy.ok()) return proxy.status();
      auto proxy_lines = (*proxy)->WaitForLines(kProxyReady, 1, startup);
      if (!proxy_lines.ok()) {
        return absl::Status(
            proxy_lines.status().code(),
            absl::StrCat("kvroute: ", proxy_lines.status().message(), "; see ", log));
      }
      const std::vector<std::string>& m = proxy_lines->front();
      ro.replicas.push_back(*ParseHttpUrl(absl::StrCat("http://", m[1], ":", m[2])));
      proxies.push_back(*std::move(proxy));
    }
    ro.target = ro.replicas.front();
    if (replicas == 1) ro.replicas.clear();
    // Faults mid-run: a replica killed, as a crash (the clients fail over to the next
    // one); the store killed and started again, empty, on its port after store_down_s.
    std::vector<std::pair<double, std::function<void()>>> faults;
    if (replicas > 1 && options.kill_replica_at_s >= 0) {
      faults.emplace_back(options.kill_replica_at_s * ro.time_scale, [&] {
        proxies.front()->Kill();
        spdlog::info("[{}] killed kvroute replica 0 (pid {}) {} s into the run", config.name,
                     proxies.front()->pid(), options.kill_replica_at_s * ro.time_scale);
      });
    }
    std::unique_ptr<ChildProcess> store_again;  // written by the fault thread until Disarm
    if (store != nullptr && options.kill_store_at_s >= 0) {
      faults.emplace_back(options.kill_store_at_s * ro.time_scale, [&] {
        store->Kill();
        spdlog::info("[{}] killed the cluster store {} s into the run", config.name,
                     options.kill_store_at_s * ro.time_scale);
      });
      faults.emplace_back((options.kill_store_at_s + options.store_down_s) * ro.time_scale, [&] {
        uint32_t port = 0;
        std::string url;
        const std::string& was = with_profile.cluster_store;
        if (!absl::SimpleAtoi(was.substr(was.rfind(':') + 1), &port) || port == 0 || port > 65535) {
          spdlog::error("[{}] no port in the cluster store's URL {}", config.name, was);
          return;
        }
        absl::StatusOr<std::unique_ptr<ChildProcess>> again =
            StartRedis(options.redis_server_bin, (dir / "redis.log").string(), startup,
                       static_cast<uint16_t>(port), &url);
        if (!again.ok()) {
          spdlog::error("[{}] the cluster store did not start again: {}", config.name,
                        again.status().ToString());
          return;
        }
        store_again = *std::move(again);
        spdlog::info("[{}] the cluster store is back (empty) {} s into the run", config.name,
                     (options.kill_store_at_s + options.store_down_s) * ro.time_scale);
      });
    }
    std::sort(faults.begin(), faults.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    FaultTimer fault_timer;
    fault_timer.Arm(std::move(faults), [&] {
      if (store_again != nullptr) store_again->Stop();
    });
    absl::StatusOr<RunResult> result = RunWorkload(ro, workload);
    fault_timer.Disarm();
    for (auto& proxy : proxies) proxy->Stop();  // flushes and closes the request logs
    if (store != nullptr) store->Stop();
    (*sim)->Stop();
    if (result.ok()) {
      int64_t matched = 0;
      for (int i = 0; i < replicas; ++i) {
        matched += MergeRequestLog(replica_file("requests", ".jsonl", i), *result);
      }
      spdlog::info("[{}] joined {} of {} requests with kvroute's request log", config.name, matched,
                   result->requests.size());
      if (replicas > 1) {
        // What a replica's death cost: requests sent again elsewhere, and those lost after
        // their response had begun (a client cannot resend a stream it has started reading).
        int64_t failed_over = 0, lost_streaming = 0, lost_before = 0;
        for (const RequestRecord& q : result->requests) {
          failed_over += q.failovers > 0 ? 1 : 0;
          if (q.ok() || q.outcome() == RequestOutcome::kShed) continue;
          (q.http_status != 0 ? lost_streaming : lost_before) += q.failovers > 0 || q.replica == 0;
        }
        spdlog::info(
            "[{}] {} replicas: {} requests failed over; failed on replica 0 or after failing "
            "over: {} after the response began, {} before",
            config.name, replicas, failed_over, lost_streaming, lost_before);
        if (store != nullptr) {
          // What the store's outage cost, and the residency admissions across replicas as
          // the replicas' request logs tell them.
          int64_t failed = 0;
          for (const RequestRecord& q : result->requests) {
            failed += !q.ok() && q.outcome() != RequestOutcome::kShed ? 1 : 0;
          }
          const ClusterAdmissions a = CountClusterAdmissions(*result);
          spdlog::info(
              "[{}] cluster store: {} requests failed (shed ones aside); {} residency admissions "
              "across replicas ({} resident sessions' next turns, {} admitted, {} after "
              "waiting, {} forced, {} without the store), {} left an instance beyond its fill",
              config.name, failed, a.asked, a.count("resident"), a.count("admitted"),
              a.count("waited"), a.count("forced"), a.count("unavailable"), a.beyond_fill);
        }
      }
    }
    if (absl::Status s = finish_run(std::move(result)); !s.ok()) return s;
  }
  return report;
}

}  // namespace kvroute::bench
