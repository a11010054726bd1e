// kvroute: the daemon. Loads the config, applies flag overrides, builds the
// router and serves until SIGTERM/SIGINT.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "proxy/cluster_sync.h"
#include "proxy/config.h"
#include "proxy/kv_event_feeds.h"
#include "proxy/server.h"
#include "router/policy_registry.h"
#include "router/router.h"

namespace {

using kvroute::proxy::Config;

constexpr int kConfigError = 2;

// The command line: the config file and the overrides of its keys (empty,
// or -1: not given).
struct Flags {
  std::string config_path, mode, listen, request_log, log_level;
  std::string heavy_threshold;
  int threads = -1;
};

void DefineFlags(CLI::App& app, Flags& flags) {
  app.add_option("--config", flags.config_path, "YAML config file (listen, mode, backends, ...)")
      ->required();
  // Runs while the command line is parsed, before --config is required.
  app.add_flag_callback(
      "--list-modes",
      [] {
        std::cout << kvroute::router::ModeList();
        throw CLI::Success();
      },
      "Print one line per mode, `NAME threshold_sensitive=yes|no homes_sessions=yes|no "
      "needs_connector=yes|no`, and exit");
  app.add_option("--mode", flags.mode,
                 "Routing mode (overrides `mode`):" + kvroute::router::PolicyHelp());
  app.add_option("--heavy-threshold", flags.heavy_threshold,
                 "New-token count at which a request is HEAVY (overrides `heavy_threshold`, "
                 "default 20000); auto: v1_cost and v2 decide every request that is not WARM");
  app.add_option("--listen", flags.listen,
                 "HOST:PORT to listen on (overrides `listen`; port 0 picks one)");
  app.add_option("--request-log", flags.request_log,
                 "Append one JSON line per request to this file (overrides `request_log`)");
  app.add_option("--log-level", flags.log_level,
                 "trace, debug, info, warn, error, critical or off (overrides `log_level`)");
  app.add_option("--threads", flags.threads, "Worker threads (overrides `threads`, default 2)");
}

// The config file with the flags' overrides applied, validated.
absl::StatusOr<Config> LoadConfig(const Flags& flags) {
  absl::StatusOr<Config> loaded = kvroute::proxy::LoadConfigFile(flags.config_path);
  if (!loaded.ok()) return loaded.status();
  Config config = *std::move(loaded);
  if (!flags.mode.empty()) config.router.mode = flags.mode;
  if (!flags.heavy_threshold.empty()) {
    absl::Status st = kvroute::proxy::ParseHeavyThreshold("--heavy-threshold",
                                                          flags.heavy_threshold, &config.router);
    if (!st.ok()) return st;
  }
  if (!flags.request_log.empty()) config.request_log = flags.request_log;
  if (!flags.log_level.empty()) config.log_level = flags.log_level;
  if (flags.threads != -1) {
    if (flags.threads < 1 || flags.threads > 256) {
      return absl::InvalidArgumentError(
          absl::StrCat("--threads: value ", flags.threads, " is out of range [1, 256]"));
    }
    config.threads = flags.threads;
  }
  if (!flags.listen.empty()) {
    absl::Status st = kvroute::proxy::ParseHostPort("--listen", flags.listen, &config.listen_host,
                                                    &config.listen_port);
    if (!st.ok()) return st;
  }
  if (absl::Status st = kvroute::proxy::ValidateConfig(config); !st.ok()) return st;
  return config;
}

// SIGHUP re-reads the config file and applies its backend list (the
// other keys need a restart); an invalid file changes nothing.
void Reload(kvroute::proxy::Server& server, const Flags& flags) {
  absl::StatusOr<Config> next = kvroute::proxy::LoadConfigFile(flags.config_path);
  absl::Status st = next.ok() ? server.ReloadBackends(next->backends, next->transfer.bootstrap_port)
                              : next.status();
  if (!st.ok()) {
    spdlog::error("SIGHUP: {} not applied, keeping the running config: {}", flags.config_path,
                  std::string(st.message()));
    std::cout << "kvroute: config reload failed: " << st.message() << std::endl;
    return;
  }
  if (flags.log_level.empty()) spdlog::set_level(spdlog::level::from_str(next->log_level));
  std::cout << "kvroute: config reloaded (" << next->backends.size() << " backends)" << std::endl;
}

// Serves until SIGTERM or SIGINT (or until the server stops on its own),
// reloading on SIGHUP; `signals`, blocked in every thread, are waited for
// by one. Returns the exit status.
int Serve(const Config& config, std::unique_ptr<kvroute::router::Router> router, const Flags& flags,
          sigset_t signals) {
  kvroute::proxy::Server server(config, std::move(router));
  if (absl::Status st = server.Start(); !st.ok()) {
    std::cerr << "kvroute: " << st.message() << "\n";
    return 1;
  }
  // The engines' own KV cache events (backends[].kv_events) drive the
  // shadow's evictions and resets; off for backends without an endpoint.
  absl::StatusOr<std::unique_ptr<kvroute::proxy::KvEventFeeds>> kv_event_feeds =
      kvroute::proxy::KvEventFeeds::Start(config, server.router(), server.registry());
  if (!kv_event_feeds.ok()) {
    std::cerr << "kvroute: config error: " << kv_event_feeds.status().message() << "\n";
    server.Shutdown();
    server.Wait();
    return kConfigError;
  }
  // Other kvroute replicas' load, through the cluster store (cluster:).
  absl::StatusOr<std::unique_ptr<kvroute::proxy::ClusterSync>> cluster_sync =
      kvroute::proxy::ClusterSync::Start(config, server.router(), server.registry());
  if (!cluster_sync.ok()) {
    std::cerr << "kvroute: config error: " << cluster_sync.status().message() << "\n";
    (*kv_event_feeds)->Stop();
    server.Shutdown();
    server.Wait();
    return kConfigError;
  }
  if ((*cluster_sync)->enabled()) server.SetClusterSync(cluster_sync->get());
  std::cout << "kvroute: listening on " << config.listen_host << ":" << server.port() << std::endl;
  spdlog::info("mode {} heavy_threshold {}{} backends {}", config.router.mode,
               config.router.heavy_threshold_auto ? "auto, classes at " : "",
               config.router.thresholds.heavy_threshold, config.backends.size());

  std::thread signal_waiter([&] {
    for (;;) {
      int sig = 0;
      sigwait(&signals, &sig);
      if (sig == SIGHUP) {
        Reload(server, flags);
        continue;
      }
      spdlog::info("signal {}: draining", sig);
      server.Shutdown();
      return;
    }
  });
  server.Wait();
  server.SetClusterSync(nullptr);
  (*cluster_sync)->Stop();
  (*kv_event_feeds)->Stop();
  // Wake the waiter if the server stopped on its own.
  pthread_kill(signal_waiter.native_handle(), SIGTERM);
  signal_waiter.join();
  spdlog::info("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Debian's abseil is built with assertions on, so every absl::Mutex lock
  // also feeds its lock-order graph (deadlock detection): a few percent of
  // a request's CPU in the daemon. The tests keep it on.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{"kvroute: cache-aware routing proxy for a fleet of vLLM instances"};
  Flags flags;
  DefineFlags(app, flags);
  CLI11_PARSE(app, argc, argv);

  absl::StatusOr<Config> config = LoadConfig(flags);
  if (!config.ok()) {
    std::cerr << "kvroute: config error: " << config.status().message() << "\n";
    return kConfigError;
  }
  spdlog::set_level(spdlog::level::from_str(config->log_level));

  std::vector<kvroute::router::BackendSpec> specs;
  for (const auto& b : config->backends) specs.push_back(b.spec);
  auto router = kvroute::router::Router::Create(config->router, specs);
  if (!router.ok()) {
    std::cerr << "kvroute: config error: " << router.status().message() << "\n";
    return kConfigError;
  }

  // Block the signals in every thread; one thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return Serve(*config, *std::move(router), flags, signals);
}
