// proxy::Config: the daemon's whole configuration, loaded from YAML once and
// validated into plain structs. This is the only place that knows YAML.
//
//   absl::StatusOr<Config> c = LoadConfigFile("kvroute.yaml");
//   if (!c.ok()) { std::cerr << c.status().message(); return 2; }
//
// Every error names the offending key (as a dotted path, e.g.
// `backends[1].url`) and its value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cluster/options.h"
#include "proxy/health.h"
#include "proxy/response_observer.h"
#include "router/router.h"

namespace kvroute::proxy {

// Limits on what a client may send and how long it may take.
struct ServerLimits {
  size_t max_header_bytes = 16 * 1024;
  size_t max_body_bytes = 32 * 1024 * 1024;
  size_t max_connections = 4096;
  absl::Duration header_timeout = absl::Seconds(10);   // reading a request's header
  absl::Duration idle_timeout = absl::Seconds(60);     // keep-alive wait for the next request
  absl::Duration request_timeout = absl::Seconds(30);  // reading a request's body
  absl::Duration write_timeout = absl::Seconds(30);    // one write to a client
  absl::Duration drain_timeout = absl::Seconds(30);    // SIGTERM: in-flight streams' deadline
  // Admission: completion requests served at once; beyond it up to
  // `max_queued_requests` wait up to `queue_timeout` for a slot, then get
  // 429 with Retry-After (as do requests beyond the queue).
  size_t max_inflight_requests = 1024;
  size_t max_queued_requests = 256;
  absl::Duration queue_timeout = absl::Seconds(1);
  absl::Duration retry_after = absl::Seconds(1);  // the wait 429/503 overload answers advise
  // Responses API: stored-response ids whose backend kvroute remembers (for
  // previous_response_id and GET /v1/responses/{id}), the oldest forgotten first.
  size_t max_response_ids = 100000;
};

// How kvroute talks to the instances.
struct UpstreamOptions {
  absl::Duration connect_timeout = absl::Seconds(3);
  // Time from sending a streamed request to the response header, which an
  // engine sends as soon as it accepts the request (a plain body's header
  // comes with the whole answer: first_token_timeout bounds that wait).
  absl::Duration first_byte_timeout = absl::Seconds(600);
  // Longest silence between two pieces of a response body once tokens flow.
  absl::Duration idle_timeout = absl::Seconds(120);
  // The wait for a request's first token: an engine answers a stream's
  // header at once and sends nothing more until the first token, however
  // long its queue. factor x the request's predicted TTFT, at least
  // `first_token_timeout` and at most `first_token_timeout_max`
  // (FirstTokenTimeout, proxy/relay.h).
  absl::Duration first_token_timeout = absl::Seconds(300);
  double first_token_timeout_factor = 4;
  absl::Duration first_token_timeout_max = absl::Seconds(3600);
  size_t max_idle_per_backend = 64;  // per worker thread
  // Non-streaming bodies up to this size are parsed for `usage`.
  size_t max_observed_body = 1024 * 1024;
  // A request that fails before any response byte reached the client
  // (connect error, timeout, 5xx) is retried on another instance, up to
  // `max_attempts` tries in all, after a jittered backoff drawn uniformly
  // from [0, min(retry_backoff_max, retry_backoff x 2^(retry-1))].
  int max_attempts = 3;
  absl::Duration retry_backoff = absl::Milliseconds(25);
  absl::Duration retry_backoff_max = absl::Milliseconds(250);
};

// Active health checks, passive ejection (HealthOptions: the thresholds of
// both) and /metrics scraping of the instances.
struct MonitorOptions : HealthOptions {
  bool enabled = true;  // tests turn the loop off and call Server::CheckBackendsNow()
  absl::Duration health_interval = absl::Seconds(2);
  absl::Duration health_timeout = absl::Seconds(1);
  absl::Duration scrape_interval = absl::Seconds(5);
};

// Prefill/decode handoff (v2 offload and pd_sep).
struct TransferOptions {
  std::string connector = "nixl";  // nixl | mooncake | sglang
  // Offloads in flight at once; above it HEAVY requests are served co-located.
  size_t max_offload_inflight = 64;
  // Default bootstrap server port of prefill instances (Mooncake, SGLang).
  uint16_t bootstrap_port = 8998;
};

// Access to /admin/* (proxy/admin_auth.h).
struct AdminOptions {
  // Bearer token that admits non-loopback clients; empty: none. Set from
  // `admin.token` or read (trimmed) from `admin.token_file`; at least
  // kMinAdminTokenChars long.
  std::string token;
  bool allow_loopback = true;  // tests turn it off to exercise the token
};
inline constexpr size_t kMinAdminTokenChars = 16;

struct BackendConfig {
  std::string name;
  std::string url;  // http://host:port
  uint16_t bootstrap_port = 0;  // 0: transfer.bootstrap_port
  // The engine's KV cache event sockets (vLLM --kv-events-config endpoint
  // and replay_endpoint), tcp://host:port; empty: the engine publishes none.
  std::string kv_events;
  std::string kv_events_replay;
  // How a `usage` without `prompt_tokens_details` is read
  // (`cached_tokens_absent: auto | zero | unknown`, proxy/response_observer.h).
  AbsentCachedTokens cached_tokens_absent = AbsentCachedTokens::kAuto;
  router::BackendSpec spec;
};

// The parts of a model/GPU profile (configs/profiles/*.yaml, the simulator's
// format) that kvroute reads; other keys are the simulator's and ignored.
// -1: the profile does not give it.
struct ProfileFigures {
  double kv_bytes_per_token = -1;     // model.*: 2 x attention layers x KV heads x head_dim x bytes
  double link_bytes_per_second = -1;  // link.bandwidth_bytes_per_s
  double transfer_overhead_seconds = -1;  // link.overhead_s
  double prefill_tokens_per_second = -1;  // 1 / timing.prefill_s_per_token
  double attention_s_per_token_pair = -1;  // timing.attn_s_per_token_pair
};

// `heavy_threshold` (or --heavy-threshold, named by `key`): a positive token
// count, or "auto" (router::Options::heavy_threshold_auto). InvalidArgument
// naming `key` otherwise.
absl::Status ParseHeavyThreshold(const std::string& key, const std::string& value,
                                 router::Options* o);

// Reads a profile file. InvalidArgument naming `key` (the config key that
// named the file), the file and the offending profile key.
absl::StatusOr<ProfileFigures> LoadProfileFigures(const std::string& key, const std::string& path);

// The router options a config starts from: mode `baseline`.
inline router::Options DefaultRouterOptions() {
  router::Options o;
  o.mode = "baseline";
  return o;
}

// Following the engines' KV cache events (docs/kv-events.md); only for
// backends with `kv_events`.
struct KvEventsOptions {
  std::string topic;            // the engines' --kv-events-config topic
  int queue_messages = 10000;   // batches queued per engine before ZeroMQ drops
  int64_t block_size = 16;      // tokens per block until a BlockStored says
  absl::Duration replay_timeout = absl::Milliseconds(500);
  // The fleet-shared KV pool's publisher (kv_events.pool, tcp://host:port)
  // and its replay socket (kv_events.pool_replay); empty: not followed.
  std::string pool;
  std::string pool_replay;
};

struct Config {
  // The fleet's model/GPU profile (`profile`, resolved against the config
  // file's directory); empty: none. It fills router.offload_cost below the
  // `router.offload_cost` keys.
  std::string profile;
  // Wall seconds per profile second (`profile_time_scale`): 1 for real
  // engines, kvroute-sim's --time-scale for a simulated fleet. The cost
  // model's time figures (router.offload_cost, from the profile or its keys)
  // and the KV tiers' reload bandwidths and timings are scaled by it, so the
  // router predicts, learns and weighs its SLOs in wall seconds.
  double profile_time_scale = 1;
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 8000;
  std::string request_log;  // empty: no request log
  // Also write each request's prompt text to the request log. Off by
  // default: prompts and completions reach no log unless this is set.
  bool request_log_prompts = false;
  std::string log_level = "info";
  int threads = 2;
  ServerLimits limits;
  UpstreamOptions upstream;
  MonitorOptions monitor;
  // router.mode is the top-level `mode` key and the --mode flag.
  router::Options router = DefaultRouterOptions();
  TransferOptions transfer;
  AdminOptions admin;
  KvEventsOptions kv_events;
  // Sharing state with the other kvroute replicas (`cluster:`); store "none"
  // by default. replica_id defaults to "<hostname>-<pid>".
  cluster::ClusterOptions cluster;
  std::vector<BackendConfig> backends;
};

// Parses `yaml_text` (named `source` in errors). InvalidArgument on any
// unknown key, wrong type, bad value, bad URL, duplicate backend name or
// empty backend list. A relative `profile` path is read from `base_dir`
// (empty: the working directory); LoadConfigFile passes the file's own.
absl::StatusOr<Config> ParseConfig(const std::string& yaml_text, const std::string& source,
                                   const std::string& base_dir = "");
absl::StatusOr<Config> LoadConfigFile(const std::string& path);

// Validates what flags may override after loading (mode, listen, ...).
absl::Status ValidateConfig(const Config& config);

// "host:port" → host, port. InvalidArgument naming `key` on failure.
absl::Status ParseHostPort(const std::string& key, const std::string& value,
                           std::string* host, uint16_t* port);
// "http://host:port[/]" → host, port. Only plain http is supported.
absl::Status ParseBackendUrl(const std::string& key, const std::string& url,
                             std::string* host, uint16_t* port);

}  // namespace kvroute::proxy
