// kvroute: the daemon. Loads the config, applies flag overrides, builds the
// router and serves until SIGTERM/SIGINT.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <iostream>

#include "absl/synchronization/mutex.h"
#include "proxy/config.h"
#include "proxy/kv_event_feeds.h"
#include "proxy/server.h"
#include "router/policy_registry.h"
#include "router/router.h"

namespace {
constexpr int kConfigError = 2;
}

int main(int argc, char** argv) {
  using kvroute::proxy::Config;
  // Debian's abseil is built with assertions on, so every absl::Mutex lock
  // also feeds its lock-order graph (deadlock detection): a few percent of
  // a request's CPU in the daemon. The tests keep it on.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{"kvroute: cache-aware routing proxy for a fleet of vLLM instances"};
  std::string config_path, mode, listen, request_log, log_level;
  std::string heavy_threshold;
  int threads = -1;
  app.add_option("--config", config_path, "YAML config file (listen, mode, backends, ...)")
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
  app.add_option("--mode", mode,
                 "Routing mode (overrides `mode`):" + kvroute::router::PolicyHelp());
  app.add_option("--heavy-threshold", heavy_threshold,
                 "New-token count at which a request is HEAVY (overrides `heavy_threshold`, "
                 "default 20000); auto: v1_cost and v2 decide every request that is not WARM");
  app.add_option("--listen", listen, "HOST:PORT to listen on (overrides `listen`; port 0 picks one)");
  app.add_option("--request-log", request_log,
                 "Append one JSON line per request to this file (overrides `request_log`)");
  app.add_option("--log-level", log_level,
                 "trace, debug, info, warn, error, critical or off (overrides `log_level`)");
  app.add_option("--threads", threads, "Worker threads (overrides `threads`, default 2)");
  CLI11_PARSE(app, argc, argv);

  absl::StatusOr<Config> loaded = kvroute::proxy::LoadConfigFile(config_path);
  if (!loaded.ok()) {
    std::cerr << "kvroute: config error: " << loaded.status().message() << "\n";
    return kConfigError;
  }
  Config config = *std::move(loaded);
  if (!mode.empty()) config.router.mode = mode;
  if (!heavy_threshold.empty()) {
    absl::Status st =
        kvroute::proxy::ParseHeavyThreshold("--heavy-threshold", heavy_threshold, &config.router);
    if (!st.ok()) {
      std::cerr << "kvroute: config error: " << st.message() << "\n";
      return kConfigError;
    }
  }
  if (!request_log.empty()) config.request_log = request_log;
  if (!log_level.empty()) config.log_level = log_level;
  if (threads != -1) {
    if (threads < 1 || threads > 256) {
      std::cerr << "kvroute: config error: --threads: value " << threads
                << " is out of range [1, 256]\n";
      return kConfigError;
    }
    config.threads = threads;
  }
  if (!listen.empty()) {
    absl::Status st =
        kvroute::proxy::ParseHostPort("--listen", listen, &config.listen_host, &config.listen_port);
    if (!st.ok()) {
      std::cerr << "kvroute: config error: " << st.message() << "\n";
      return kConfigError;
    }
  }
  if (absl::Status st = kvroute::proxy::ValidateConfig(config); !st.ok()) {
    std::cerr << "kvroute: config error: " << st.message() << "\n";
    return kConfigError;
  }
  spdlog::set_level(spdlog::level::from_str(config.log_level));

  std::vector<kvroute::router::BackendSpec> specs;
  for (const auto& b : config.backends) specs.push_back(b.spec);
  auto router = kvroute::router::Router::Create(config.router, specs);
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

  kvroute::proxy::Server server(config, *std::move(router));
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
  std::cout << "kvroute: listening on " << config.listen_host << ":" << server.port() << std::endl;
  spdlog::info("mode {} heavy_threshold {}{} backends {}", config.router.mode,
               config.router.heavy_threshold_auto ? "auto, classes at " : "",
               config.router.thresholds.heavy_threshold, config.backends.size());

  // SIGHUP re-reads the config file and applies its backend list (the
  // other keys need a restart); an invalid file changes nothing.
  auto reload = [&] {
    absl::StatusOr<Config> next = kvroute::proxy::LoadConfigFile(config_path);
    absl::Status st = next.ok() ? server.ReloadBackends(next->backends,
                                                        next->transfer.bootstrap_port)
                                : next.status();
    if (!st.ok()) {
      spdlog::error("SIGHUP: {} not applied, keeping the running config: {}", config_path,
                    std::string(st.message()));
      std::cout << "kvroute: config reload failed: " << st.message() << std::endl;
      return;
    }
    if (log_level.empty()) spdlog::set_level(spdlog::level::from_str(next->log_level));
    std::cout << "kvroute: config reloaded (" << next->backends.size() << " backends)"
              << std::endl;
  };
  std::thread signal_waiter([&] {
    for (;;) {
      int sig = 0;
      sigwait(&signals, &sig);
      if (sig == SIGHUP) {
        reload();
        continue;
      }
      spdlog::info("signal {}: draining", sig);
      server.Shutdown();
      return;
    }
  });
  server.Wait();
  (*kv_event_feeds)->Stop();
  // Wake the waiter if the server stopped on its own.
  pthread_kill(signal_waiter.native_handle(), SIGTERM);
  signal_waiter.join();
  spdlog::info("stopped");
  return 0;
}
