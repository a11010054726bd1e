// kvroute-sim-bench: ramps the number of concurrent streaming clients against an in-process
// fleet of simulated instances running at a real-time scale, and reports, per level, the
// token throughput and the scheduler lag (how far engine steps start behind the wall time
// the model gives them). A level is sustained when the lag stays below --lag-threshold over
// the measurement window (95th percentile of 10 Hz samples of the fleet's worst lag); the
// figure is the largest sustained level.
//
//   kvroute-sim-bench --instances 8 --time-scale 1 --streams 64,128,256,512,1024
#include <absl/strings/str_split.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "sim/fleet.h"
#include "sim/profile.h"
#include "wire/sse.h"

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
constexpr auto kNoThrow = net::as_tuple(net::use_awaitable);

struct Counters {
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> events{0};
  std::atomic<uint64_t> errors{0};
};

std::string SharedPrefix(int approx_tokens) {
  std::string s;
  int i = 0;
  while (static_cast<int>(s.size()) < approx_tokens * 4) {
    s += "Rule " + std::to_string(i++) +
         ": keep the answer short, cite the file and line, and never invent an API. ";
  }
  return s;
}

// One client stream: a keep-alive connection issuing streaming completions back to back.
net::awaitable<void> Stream(uint16_t port, int id, const std::string* prefix, int suffix_tokens,
                            int max_tokens, const std::atomic<bool>* stop, Counters* counters) {
  auto ex = co_await net::this_coro::executor;
  beast::tcp_stream stream(ex);
  auto [cec] = co_await stream.async_connect(
      tcp::endpoint(net::ip::make_address("127.0.0.1"), port), kNoThrow);
  if (cec) {
    counters->errors++;
    co_return;
  }
  beast::flat_buffer buffer;
  for (int turn = 0; !stop->load(std::memory_order_relaxed); ++turn) {
    std::string prompt = *prefix;
    while (static_cast<int>(prompt.size()) < static_cast<int>(prefix->size()) + suffix_tokens * 4) {
      prompt += " stream " + std::to_string(id) + " turn " + std::to_string(turn) + " asks more;";
    }
    boost::json::object body;
    body["prompt"] = prompt;
    body["max_tokens"] = max_tokens;
    body["ignore_eos"] = true;
    body["stream"] = true;
    http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::content_type, "application/json");
    req.body() = boost::json::serialize(body);
    req.prepare_payload();
    req.keep_alive(true);
    auto [wec, wn] = co_await http::async_write(stream, req, kNoThrow);
    if (wec) {
      counters->errors++;
      co_return;
    }
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 * 1024 * 1024);
    // Count SSE events as they arrive (a request can outlast the measurement window).
    kvroute::wire::SseDataReader sse;
    size_t fed = 0;
    while (!parser.is_done()) {
      auto [rec, rn] = co_await http::async_read_some(stream, buffer, parser, kNoThrow);
      if (rec) {
        counters->errors++;
        co_return;
      }
      const std::string& text = parser.get().body();
      uint64_t events = 0;
      sse.Feed(std::string_view(text).substr(fed), [&](std::string_view) { ++events; });
      fed = text.size();
      counters->events += events;
    }
    if (parser.get().result_int() != 200) {
      counters->errors++;
      co_return;
    }
    counters->requests++;
  }
}

struct LevelResult {
  int streams = 0;
  double tokens_per_s = 0;
  double max_lag_s = 0;
  double p95_lag_s = 0;
  double busy = 0;
  uint64_t errors = 0;
  bool sustained = false;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvroute-sim-bench: concurrent streams a simulated fleet sustains in real time"};
  int instances = 8;
  double time_scale = 1;
  std::string streams_list = "64,128,256,512,1024";
  double warmup_s = 5, duration_s = 20, lag_threshold_s = 0.1;
  int fleet_threads = 1, client_threads = 1;
  int prefix_tokens = 800, suffix_tokens = 200, max_tokens = 256;
  std::string profile_path;
  app.add_option("--instances", instances);
  app.add_option("--time-scale", time_scale);
  app.add_option("--streams", streams_list, "comma-separated concurrency levels");
  app.add_option("--warmup", warmup_s, "seconds before measuring each level");
  app.add_option("--duration", duration_s, "measured seconds per level");
  app.add_option("--lag-threshold", lag_threshold_s, "max scheduler lag of a sustained level");
  app.add_option("--fleet-threads", fleet_threads, "I/O threads of the simulated fleet");
  app.add_option("--client-threads", client_threads, "I/O threads of the load generator");
  app.add_option("--prefix-tokens", prefix_tokens, "shared prompt prefix (approx. tokens)");
  app.add_option("--suffix-tokens", suffix_tokens, "per-request prompt suffix (approx. tokens)");
  app.add_option("--max-tokens", max_tokens, "output tokens per request (ignore_eos)");
  app.add_option("--profile", profile_path, "profile YAML (default: built-in H20 / Qwen3-Coder)");
  CLI11_PARSE(app, argc, argv);

  sim::Profile profile = sim::DefaultProfile();
  if (!profile_path.empty()) {
    absl::StatusOr<sim::Profile> p = sim::LoadProfile(profile_path);
    if (!p.ok()) {
      std::fprintf(stderr, "%s\n", std::string(p.status().message()).c_str());
      return 2;
    }
    profile = *p;
  }
  std::vector<int> levels;
  for (absl::string_view part : absl::StrSplit(streams_list, ',')) {
    levels.push_back(std::stoi(std::string(part)));
  }
  const std::string prefix = SharedPrefix(prefix_tokens);

  std::printf(
      "kvroute-sim-bench: %d instances, time scale %g, %d fleet thread(s), %d client "
      "thread(s), prompt ~%d tokens, %d output tokens, %u hardware threads\n",
      instances, time_scale, fleet_threads, client_threads, prefix_tokens + suffix_tokens,
      max_tokens, std::thread::hardware_concurrency());
  std::printf("%8s %12s %12s %12s %8s %7s %s\n", "streams", "tokens/s", "p95_lag_s", "max_lag_s",
              "busy", "errors", "verdict");
  int best = 0;
  for (int level : levels) {
    // A fresh fleet per level, so that one level's backlog does not leak into the next.
    sim::FleetOptions opts;
    opts.instances = instances;
    opts.time_scale = time_scale;
    opts.profile = profile;
    opts.io_threads = fleet_threads;
    sim::Fleet fleet(opts);
    absl::StatusOr<std::vector<uint16_t>> ports = fleet.Start();
    if (!ports.ok()) {
      std::fprintf(stderr, "%s\n", std::string(ports.status().message()).c_str());
      return 1;
    }
    net::io_context client_io;
    std::atomic<bool> stop{false};
    Counters counters;
    for (int i = 0; i < level; ++i) {
      net::co_spawn(
          client_io,
          Stream((*ports)[i % instances], i, &prefix, suffix_tokens, max_tokens, &stop, &counters),
          net::detached);
    }
    std::vector<std::thread> clients;
    for (int t = 0; t < client_threads; ++t) clients.emplace_back([&] { client_io.run(); });

    auto max_lag = [&] {
      double lag = 0;
      for (int i = 0; i < instances; ++i) lag = std::max(lag, fleet.gauges(i).scheduler_lag_s);
      return lag;
    };
    std::this_thread::sleep_for(std::chrono::duration<double>(warmup_s));
    const uint64_t events0 = counters.events.load();
    const auto t0 = std::chrono::steady_clock::now();
    LevelResult r;
    r.streams = level;
    // Sample the gauges ten times a second over the window.
    const int samples = std::max(1, static_cast<int>(duration_s * 10));
    std::vector<double> lags;
    for (int s = 0; s < samples; ++s) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      lags.push_back(max_lag());
    }
    std::sort(lags.begin(), lags.end());
    r.max_lag_s = lags.back();
    r.p95_lag_s = lags[std::min(lags.size() - 1, static_cast<size_t>(0.95 * lags.size()))];
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.tokens_per_s = static_cast<double>(counters.events.load() - events0) / elapsed;
    for (int i = 0; i < instances; ++i) r.busy += fleet.gauges(i).gpu_busy_fraction / instances;
    r.errors = counters.errors.load();
    stop = true;
    fleet.Stop();  // closes the client connections' peers, so the client coroutines end
    client_io.stop();
    for (std::thread& t : clients) t.join();
    r.sustained = r.p95_lag_s < lag_threshold_s && r.errors == 0;
    if (r.sustained) best = std::max(best, level);
    std::printf("%8d %12.0f %12.3f %12.3f %8.2f %7llu %s\n", r.streams, r.tokens_per_s, r.p95_lag_s,
                r.max_lag_s, r.busy, static_cast<unsigned long long>(r.errors),
                r.sustained ? "sustained" : "FALLS BEHIND");
    std::fflush(stdout);
  }
  std::printf(
      "kvroute-sim-bench: %d instances sustain %d concurrent streams at time scale %g "
      "(p95 scheduler lag < %g s)\n",
      instances, best, time_scale, lag_threshold_s);
  return 0;
}
