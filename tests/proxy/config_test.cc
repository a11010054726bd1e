#include "proxy/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "proxy/relay.h"

namespace kvroute::proxy {
namespace {

constexpr char kMinimal[] = R"(
listen: 127.0.0.1:8000
mode: v2
heavy_threshold: 20000
backends:
  - {name: gpu0, url: http://127.0.0.1:8100}
  - {name: gpu1, url: http://127.0.0.1:8101}
)";

TEST(ConfigTest, MinimalConfigFromDesign) {
  absl::StatusOr<Config> c = ParseConfig(kMinimal, "test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen_host, "127.0.0.1");
  EXPECT_EQ(c->listen_port, 8000);
  EXPECT_EQ(c->router.mode, "v2");
  EXPECT_EQ(c->router.mode, "v2");
  EXPECT_EQ(c->router.thresholds.heavy_threshold, 20000);
  ASSERT_EQ(c->backends.size(), 2u);
  EXPECT_EQ(c->backends[1].name, "gpu1");
  EXPECT_EQ(c->backends[1].spec.host, "127.0.0.1");
  EXPECT_EQ(c->backends[1].spec.port, 8101);
  EXPECT_EQ(c->limits.max_body_bytes, 32u * 1024 * 1024);
}

TEST(ConfigTest, AllSections) {
  absl::StatusOr<Config> c = ParseConfig(R"(
listen: 0.0.0.0:9000
mode: pd_sep
threads: 4
request_log: /tmp/x.jsonl
log_level: debug
limits: {max_body_bytes: 2048, header_timeout_s: 1.5, max_connections: 10,
         max_inflight_requests: 7, max_queued_requests: 0, queue_timeout_s: 0.2, retry_after_s: 4}
upstream: {connect_timeout_s: 0.5, first_byte_timeout_s: 100, max_attempts: 2,
           retry_backoff_s: 0.01, retry_backoff_max_s: 0.1}
health: {interval_s: 1, unhealthy_after: 3, enabled: false, passive_failures: 9,
         ejection_s: 2, max_ejection_s: 30}
router: {chunk_bytes: 128, bytes_per_token: 3.5, overload_factor: 3, warm_new_tokens: 4000,
         decode_stall_weight: 0.5, attention_weight: 1}
backends:
  - {name: p0, url: "http://10.0.0.1:8100/", role: prefill, capacity_tokens: 1000}
  - {name: d0, url: "http://node-b:8100", role: decode}
)",
                                         "test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->threads, 4);
  EXPECT_EQ(c->limits.max_body_bytes, 2048u);
  EXPECT_EQ(c->limits.header_timeout, absl::Milliseconds(1500));
  EXPECT_EQ(c->upstream.connect_timeout, absl::Milliseconds(500));
  EXPECT_FALSE(c->monitor.enabled);
  EXPECT_EQ(c->monitor.unhealthy_after, 3);
  EXPECT_EQ(c->limits.max_inflight_requests, 7u);
  EXPECT_EQ(c->limits.max_queued_requests, 0u);
  EXPECT_EQ(c->limits.queue_timeout, absl::Milliseconds(200));
  EXPECT_EQ(c->limits.retry_after, absl::Seconds(4));
  EXPECT_EQ(c->upstream.max_attempts, 2);
  EXPECT_EQ(c->upstream.retry_backoff, absl::Milliseconds(10));
  EXPECT_EQ(c->upstream.retry_backoff_max, absl::Milliseconds(100));
  EXPECT_EQ(c->monitor.passive_failures, 9);
  EXPECT_EQ(c->monitor.ejection, absl::Seconds(2));
  EXPECT_EQ(c->monitor.max_ejection, absl::Seconds(30));
  EXPECT_EQ(c->router.chunk_bytes, 128u);
  EXPECT_DOUBLE_EQ(c->router.default_bytes_per_token, 3.5);
  EXPECT_EQ(c->router.thresholds.warm_new_tokens, 4000);
  EXPECT_DOUBLE_EQ(c->router.baseline.decode_stall_weight, 0.5);
  EXPECT_DOUBLE_EQ(c->router.baseline.attention_weight, 1);
  EXPECT_EQ(c->backends[0].spec.role, router::BackendRole::kPrefill);
  EXPECT_EQ(c->backends[0].spec.capacity_tokens, 1000);
  EXPECT_EQ(c->backends[1].spec.host, "node-b");
}

struct BadCase {
  const char* name;
  const char* yaml;
  const char* expect_in_error;
};

class BadConfigTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadConfigTest, RefusedWithKeyAndValue) {
  absl::StatusOr<Config> c = ParseConfig(GetParam().yaml, "test");
  ASSERT_FALSE(c.ok()) << GetParam().name;
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(c.status().message()).find(GetParam().expect_in_error), std::string::npos)
      << "error was: " << c.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Catalogue, BadConfigTest,
    ::testing::Values(
        BadCase{"unknown_top_key", "modee: v2\nbackends: [{name: a, url: http://h:1}]",
                "modee: unknown key"},
        BadCase{"unknown_nested_key",
                "limits: {max_bodyy: 1}\nbackends: [{name: a, url: http://h:1}]",
                "limits.max_bodyy: unknown key"},
        BadCase{"unknown_backend_key", "backends: [{name: a, url: http://h:1, weight: 2}]",
                "backends[0].weight: unknown key"},
        BadCase{"wrong_type_threshold",
                "heavy_threshold: lots\nbackends: [{name: a, url: http://h:1}]",
                "heavy_threshold: expected 'auto' or a positive token count, got 'lots'"},
        BadCase{"negative_stall_weight",
                "router: {decode_stall_weight: -1}\nbackends: [{name: a, url: http://h:1}]",
                "router.decode_stall_weight"},
        BadCase{"wrong_type_backends", "backends: {name: a}", "backends: expected a list"},
        BadCase{"wrong_type_limits", "limits: 5\nbackends: [{name: a, url: http://h:1}]",
                "limits: expected a map, got '5'"},
        BadCase{"negative_threshold", "heavy_threshold: -3\nbackends: [{name: a, url: http://h:1}]",
                "heavy_threshold: expected 'auto' or a positive token count, got '-3'"},
        BadCase{"bad_url_scheme", "backends: [{name: a, url: 'ftp://h:1'}]",
                "backends[0].url: 'ftp://h:1' is not an http:// URL"},
        BadCase{"https_url", "backends: [{name: a, url: 'https://h:1'}]",
                "backends[0].url: 'https://h:1' is not an http:// URL"},
        BadCase{"url_with_path", "backends: [{name: a, url: 'http://h:1/v1'}]",
                "backends[0].url: 'http://h:1/v1' must be http://HOST:PORT"},
        BadCase{"url_bad_port", "backends: [{name: a, url: 'http://h:99999'}]",
                "backends[0].url: bad host:port in 'http://h:99999'"},
        BadCase{"duplicate_names",
                "backends: [{name: a, url: 'http://h:1'}, {name: a, url: 'http://h:2'}]",
                "backends[1].name: duplicate backend name 'a'"},
        BadCase{"empty_backends", "backends: []", "backends: the backend list is empty"},
        BadCase{"missing_backends", "mode: v1", "backends: missing"},
        BadCase{"missing_name", "backends: [{url: 'http://h:1'}]", "backends[0].name: missing"},
        BadCase{"unknown_mode", "mode: v3\nbackends: [{name: a, url: http://h:1}]",
                "mode: unknown mode 'v3'"},
        BadCase{"bad_role", "backends: [{name: a, url: http://h:1, role: both2}]",
                "backends[0].role: unknown role 'both2'"},
        BadCase{"bad_listen", "listen: nowhere\nbackends: [{name: a, url: http://h:1}]",
                "listen: expected HOST:PORT, got 'nowhere'"},
        BadCase{"bad_log_level", "log_level: loud\nbackends: [{name: a, url: http://h:1}]",
                "log_level: unknown level 'loud'"},
        BadCase{"pd_sep_without_pools", "mode: pd_sep\nbackends: [{name: a, url: http://h:1}]",
                "mode pd_sep needs"},
        BadCase{"zero_attempts",
                "upstream: {max_attempts: 0}\nbackends: [{name: a, url: http://h:1}]",
                "upstream.max_attempts: value 0 is out of range"},
        BadCase{
            "ejection_cap_below_base",
            "health: {ejection_s: 10, max_ejection_s: 5}\nbackends: [{name: a, url: http://h:1}]",
            "health.max_ejection_s: must be at least health.ejection_s"},
        BadCase{"first_token_cap_below_floor",
                "upstream: {first_token_timeout_s: 60, first_token_timeout_max_s: 30}\n"
                "backends: [{name: a, url: http://h:1}]",
                "upstream.first_token_timeout_max_s: must be at least"},
        BadCase{"shed_unknown_key",
                "router: {shed: {factor: 2}}\nbackends: [{name: a, url: http://h:1}]",
                "router.shed.factor: unknown key"},
        BadCase{
            "shed_running_factor_below_one",
            "router: {shed: {running_session_factor: 0.5}}\nbackends: [{name: a, url: http://h:1}]",
            "router.shed.running_session_factor: value 0.5 is out of range"},
        BadCase{"retry_after_zero",
                "limits: {retry_after_s: 0}\nbackends: [{name: a, url: http://h:1}]",
                "limits.retry_after_s: value 0 is out of range"},
        BadCase{"kv_events_not_tcp",
                "backends: [{name: a, url: http://h:1, kv_events: 'ipc:///tmp/kv'}]",
                "backends[0].kv_events: expected tcp://host:port, got 'ipc:///tmp/kv'"},
        BadCase{"kv_events_no_port", "backends: [{name: a, url: http://h:1, kv_events: 'tcp://h'}]",
                "backends[0].kv_events: expected tcp://host:port, got 'tcp://h'"},
        BadCase{"kv_events_replay_alone",
                "backends: [{name: a, url: http://h:1, kv_events_replay: 'tcp://h:5558'}]",
                "backends[0].kv_events_replay: needs kv_events on the same backend"},
        BadCase{"kv_events_queue_zero",
                "kv_events: {queue_messages: 0}\nbackends: [{name: a, url: http://h:1}]",
                "kv_events.queue_messages: value 0 is out of range"},
        BadCase{"kv_events_unknown_key",
                "kv_events: {hwm: 5}\nbackends: [{name: a, url: http://h:1}]",
                "kv_events.hwm: unknown key"},
        BadCase{"bad_cached_tokens_absent",
                "backends: [{name: a, url: http://h:1, cached_tokens_absent: never}]",
                "backends[0].cached_tokens_absent: unknown value 'never' (expected auto, zero "
                "or unknown)"},
        BadCase{"bad_scheduling_policy",
                "backends: [{name: a, url: http://h:1, scheduling_policy: lifo}]",
                "backends[0].scheduling_policy: unknown value 'lifo' (expected fcfs or "
                "priority)"},
        BadCase{"cost_gate_with_nothing",
                "router: {offload_gate: cost}\nbackends: [{name: a, url: http://h:1}]",
                "router.offload_gate: cost needs router.offload_cost.kv_bytes_per_token or a "
                "`profile`"},
        BadCase{"cost_gate_missing_one_figure",
                "router: {offload_gate: cost, offload_cost: {kv_bytes_per_token: 98304, "
                "link_bytes_per_second: 25e9}}\nbackends: [{name: a, url: http://h:1}]",
                "router.offload_gate: cost needs router.offload_cost.prefill_tokens_per_second "
                "or a `profile` with timing.prefill_s_per_token"},
        BadCase{"heavy_threshold_list",
                "heavy_threshold: [1]\nbackends: [{name: a, url: http://h:1}]",
                "heavy_threshold: expected 'auto' or a positive token count, got a list"},
        BadCase{"heavy_threshold_zero",
                "heavy_threshold: 0\nbackends: [{name: a, url: http://h:1}]",
                "heavy_threshold: expected 'auto' or a positive token count, got '0'"},
        BadCase{"unknown_gate",
                "router: {offload_gate: maybe}\nbackends: [{name: a, url: http://h:1}]",
                "router.offload_gate: unknown gate 'maybe' (expected joint, threshold or cost)"},
        BadCase{"slo_unknown_key",
                "router: {slo: {itl_s: 1}}\nbackends: [{name: a, url: http://h:1}]",
                "router.slo.itl_s: unknown key"},
        BadCase{"slo_zero_ttft",
                "router: {slo: {ttft_heavy_s: 0}}\nbackends: [{name: a, url: http://h:1}]",
                "router.slo.ttft_heavy_s: value 0 is out of range"},
        BadCase{"residency_room_unknown",
                "router: {residency: {room: host}}\nbackends: [{name: a, url: http://h:1}]",
                "router.residency.room: unknown value 'host' (expected tier, gpu or auto)"},
        BadCase{"residency_auto_shares_crossed",
                "router: {residency: {room: auto, auto_gpu_below_share: 0.2, "
                "auto_tier_at_share: 0.1}}\nbackends: [{name: a, url: http://h:1}]",
                "router.residency.auto_gpu_below_share: 0.2 is above auto_tier_at_share (0.1)"},
        BadCase{"tier_aware_not_bool",
                "router: {tier_aware: 1}\nbackends: [{name: a, url: http://h:1}]",
                "router.tier_aware: expected true or false, got '1'"},
        BadCase{"host_load_bandwidth_zero",
                "router: {host_load_bytes_per_second: 0}\nbackends: [{name: a, url: http://h:1}]",
                "router.host_load_bytes_per_second: value 0 is out of range"},
        BadCase{"rate_learning_alpha_zero",
                "router: {rate_learning: {alpha: 0}}\nbackends: [{name: a, url: http://h:1}]",
                "router.rate_learning.alpha: value 0 is out of range"},
        BadCase{"rate_learning_not_bool",
                "router: {rate_learning: {enabled: yes}}\nbackends: [{name: a, url: http://h:1}]",
                "router.rate_learning.enabled: expected true or false, got 'yes'"},
        BadCase{"rate_learning_ratio_below_one",
                "router: {rate_learning: {max_sample_ratio: 0.5}}\n"
                "backends: [{name: a, url: http://h:1}]",
                "router.rate_learning.max_sample_ratio: value 0.5 is out of range"},
        BadCase{"rate_learning_unknown_key",
                "router: {rate_learning: {beta: 1}}\nbackends: [{name: a, url: http://h:1}]",
                "router.rate_learning.beta: unknown key"},
        BadCase{"rate_learning_not_a_map",
                "router: {rate_learning: true}\nbackends: [{name: a, url: http://h:1}]",
                "router.rate_learning: expected a map"},
        BadCase{"profile_time_scale_zero",
                "profile_time_scale: 0\nbackends: [{name: a, url: http://h:1}]",
                "profile_time_scale: value 0 is out of range"},
        BadCase{"profile_time_scale_text",
                "profile_time_scale: fast\nbackends: [{name: a, url: http://h:1}]",
                "profile_time_scale: expected a number, got 'fast'"},
        BadCase{"offload_cost_unknown_key",
                "router: {offload_cost: {bandwidth: 1}}\nbackends: [{name: a, url: http://h:1}]",
                "router.offload_cost.bandwidth: unknown key"},
        BadCase{"offload_cost_bad_value",
                "router: {offload_cost: {link_bytes_per_second: fast}}\n"
                "backends: [{name: a, url: http://h:1}]",
                "router.offload_cost.link_bytes_per_second: expected a number, got 'fast'"},
        BadCase{"offload_cost_not_a_map",
                "router: {offload_cost: 5}\nbackends: [{name: a, url: http://h:1}]",
                "router.offload_cost: expected a map"},
        BadCase{"missing_profile",
                "profile: /nonexistent/p.yaml\nbackends: [{name: a, url: http://h:1}]",
                "profile: profile '/nonexistent/p.yaml': cannot read the file"},
        BadCase{"profile_not_a_regular_file",
                "profile: /dev/zero\nbackends: [{name: a, url: http://h:1}]",
                "profile: profile '/dev/zero': cannot read the file"},
        BadCase{"cluster_not_a_map", "cluster: redis\nbackends: [{name: a, url: http://h:1}]",
                "cluster: expected a map"},
        BadCase{"cluster_unknown_key",
                "cluster: {stores: none}\nbackends: [{name: a, url: http://h:1}]",
                "cluster.stores: unknown key"},
        BadCase{"cluster_store_not_redis",
                "cluster: {store: 'nats://h:4222'}\nbackends: [{name: a, url: http://h:1}]",
                "cluster.store: expected \"none\" or redis://HOST[:PORT][/DB], "
                "got 'nats://h:4222'"},
        BadCase{"cluster_store_bad_port",
                "cluster: {store: 'redis://h:99999'}\nbackends: [{name: a, url: http://h:1}]",
                "cluster.store: expected \"none\" or redis://HOST[:PORT][/DB], "
                "got 'redis://h:99999' (bad port)"},
        BadCase{"cluster_lease_zero",
                "cluster: {lease_s: 0}\nbackends: [{name: a, url: http://h:1}]",
                "cluster.lease_s: expected a positive number, got '0'"},
        BadCase{"cluster_lease_text",
                "cluster: {lease_s: long}\nbackends: [{name: a, url: http://h:1}]",
                "cluster.lease_s: expected a positive number, got 'long'"},
        BadCase{"cluster_sync_negative",
                "cluster: {sync_interval_s: -0.1}\nbackends: [{name: a, url: http://h:1}]",
                "cluster.sync_interval_s: expected a positive number, got '-0.1'"},
        BadCase{"cluster_op_timeout_list",
                "cluster: {op_timeout_s: [1]}\nbackends: [{name: a, url: http://h:1}]",
                "cluster.op_timeout_s: expected a positive number, got a list"},
        BadCase{"cluster_session_ttl_zero",
                "cluster: {session_ttl_s: 0}\nbackends: [{name: a, url: http://h:1}]",
                "cluster.session_ttl_s: expected a positive number"},
        BadCase{"cluster_lease_below_three_timeouts",
                "cluster: {lease_s: 0.1, op_timeout_s: 0.05}\n"
                "backends: [{name: a, url: http://h:1}]",
                "cluster.lease_s: must be at least 3 x cluster.op_timeout_s"},
        BadCase{"cluster_pending_writes_zero",
                "cluster: {max_pending_writes: 0}\nbackends: [{name: a, url: http://h:1}]",
                "cluster.max_pending_writes: value 0 is out of range"},
        BadCase{"cluster_replica_id_blank",
                "cluster: {replica_id: 'a b'}\nbackends: [{name: a, url: http://h:1}]",
                "cluster.replica_id: must not contain whitespace"},
        BadCase{"cluster_key_prefix_empty",
                "cluster: {key_prefix: ''}\nbackends: [{name: a, url: http://h:1}]",
                "cluster.key_prefix: must not be empty"},
        BadCase{"yaml_syntax", "backends: [{name: a", "YAML syntax error"},
        BadCase{"not_a_map", "- a\n- b", "expected a YAML map"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.name; });

TEST(ConfigTest, TheHostTierKeys) {
  absl::StatusOr<Config> c = ParseConfig(
      "router: {tier_aware: false, host_load_bytes_per_second: 25e9}\n"
      "backends: [{name: a, url: http://h:1}]",
      "test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->router.host_tier.aware);
  EXPECT_EQ(c->router.host_tier.load_bytes_per_second, 25e9);
  EXPECT_EQ(c->router.host_tier.gate_room.mode, router::GateRoom::Mode::kAuto);
  absl::StatusOr<Config> gpu = ParseConfig(
      "router: {residency: {room: gpu, fill: 0.8, yield_grown: true}}\n"
      "backends: [{name: a, url: http://h:1}]",
      "test");
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(gpu->router.host_tier.gate_room.mode, router::GateRoom::Mode::kGpu);
  EXPECT_EQ(gpu->router.residency.fill, 0.8);
  EXPECT_TRUE(gpu->router.residency.yield_grown);
  absl::StatusOr<Config> tier = ParseConfig(
      "router: {residency: {room: tier}}\nbackends: [{name: a, url: http://h:1}]", "test");
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ(tier->router.host_tier.gate_room.mode, router::GateRoom::Mode::kTier);
  absl::StatusOr<Config> d = ParseConfig(kMinimal, "test");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->router.residency.yield_grown);
  EXPECT_TRUE(d->router.host_tier.aware);
  EXPECT_EQ(d->router.host_tier.gate_room.mode, router::GateRoom::Mode::kAuto);
  EXPECT_EQ(d->router.host_tier.load_bytes_per_second, 50e9);
  EXPECT_EQ(d->router.host_tier.engine_time_scale, 1);
  absl::StatusOr<Config> a = ParseConfig(
      "router: {residency: {room: auto, auto_long_pause_s: 20, auto_gpu_below_share: 0.01,"
      " auto_tier_at_share: 0.1, auto_min_pauses: 5}}\n"
      "backends: [{name: a, url: http://h:1}]",
      "test");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->router.host_tier.gate_room.mode, router::GateRoom::Mode::kAuto);
  EXPECT_EQ(a->router.host_tier.gate_room.long_pause_s, 20);
  EXPECT_EQ(a->router.host_tier.gate_room.gpu_below_share, 0.01);
  EXPECT_EQ(a->router.host_tier.gate_room.tier_at_share, 0.1);
  EXPECT_EQ(a->router.host_tier.gate_room.min_pauses, 5);
}

// A fleet modelled ten times faster than real reloads ten times faster too:
// the tiers' bandwidths scale as the prefill rate does, and the engines'
// load timings (modelled seconds) convert to wall seconds.
TEST(ConfigTest, TheTimeScaleScalesTheTiersReloads) {
  absl::StatusOr<Config> c = ParseConfig(
      "profile_time_scale: 0.1\n"
      "router: {host_load_bytes_per_second: 25e9, pool_load_bytes_per_second: 20e9}\n"
      "backends: [{name: a, url: http://h:1}]",
      "test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->router.host_tier.load_bytes_per_second, 250e9);
  EXPECT_DOUBLE_EQ(c->router.host_tier.pool_load_bytes_per_second, 200e9);
  EXPECT_DOUBLE_EQ(c->router.host_tier.engine_time_scale, 0.1);
}

TEST(ConfigTest, ThePoolKeys) {
  absl::StatusOr<Config> c = ParseConfig(
      "router: {pool_load_bytes_per_second: 44e9}\n"
      "kv_events: {pool: tcp://10.0.0.9:5600, pool_replay: tcp://10.0.0.9:5601}\n"
      "backends: [{name: a, url: http://h:1}]",
      "test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->router.host_tier.pool_load_bytes_per_second, 44e9);
  EXPECT_EQ(c->kv_events.pool, "tcp://10.0.0.9:5600");
  EXPECT_EQ(c->kv_events.pool_replay, "tcp://10.0.0.9:5601");
  absl::StatusOr<Config> d = ParseConfig(kMinimal, "test");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->router.host_tier.pool_load_bytes_per_second, 22e9);
  EXPECT_TRUE(d->kv_events.pool.empty());
  for (const auto& [yaml, error] : std::vector<std::pair<std::string, std::string>>{
           {"kv_events: {pool: ipc:///tmp/pool}", "kv_events.pool: expected tcp://host:port"},
           {"kv_events: {pool_replay: tcp://h:2}", "kv_events.pool_replay: needs kv_events.pool"},
           {"router: {pool_load_bytes_per_second: 0}",
            "router.pool_load_bytes_per_second: value 0 is out of range"}}) {
    absl::StatusOr<Config> bad =
        ParseConfig(yaml + "\nbackends: [{name: a, url: http://h:1}]", "test");
    ASSERT_FALSE(bad.ok()) << yaml;
    EXPECT_NE(bad.status().message().find(error), std::string::npos) << bad.status();
  }
}

TEST(ConfigTest, ClusterKeys) {
  absl::StatusOr<Config> c = ParseConfig(R"(
cluster: {store: 'redis://10.0.0.7:6380/2', replica_id: kvroute-a, lease_s: 3,
          sync_interval_s: 0.05, op_timeout_s: 0.02, session_ttl_s: 120,
          max_pending_writes: 500, key_prefix: fleet1, max_replicas: 8,
          max_admission_connections: 4}
backends: [{name: a, url: http://h:1}]
)",
                                         "test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->cluster.store, "redis://10.0.0.7:6380/2");
  EXPECT_EQ(c->cluster.replica_id, "kvroute-a");
  EXPECT_DOUBLE_EQ(c->cluster.lease_s, 3);
  EXPECT_DOUBLE_EQ(c->cluster.sync_interval_s, 0.05);
  EXPECT_DOUBLE_EQ(c->cluster.op_timeout_s, 0.02);
  EXPECT_DOUBLE_EQ(c->cluster.session_ttl_s, 120);
  EXPECT_EQ(c->cluster.max_pending_writes, 500u);
  EXPECT_EQ(c->cluster.key_prefix, "fleet1");
  EXPECT_EQ(c->cluster.max_replicas, 8u);
  EXPECT_EQ(c->cluster.max_admission_connections, 4u);
  EXPECT_TRUE(c->cluster.periodic);

  // Without the section: no store, and a replica id from the host and pid.
  absl::StatusOr<Config> d = ParseConfig(kMinimal, "test");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->cluster.store, "none");
  EXPECT_DOUBLE_EQ(d->cluster.lease_s, 5);
  EXPECT_DOUBLE_EQ(d->cluster.sync_interval_s, 0.1);
  EXPECT_DOUBLE_EQ(d->cluster.op_timeout_s, 0.05);
  EXPECT_DOUBLE_EQ(d->cluster.session_ttl_s, 600);
  EXPECT_EQ(d->cluster.max_pending_writes, 10000u);
  EXPECT_EQ(d->cluster.key_prefix, "kvroute");
  // "<host>-<pid>-<start>": a restarted process with the same pid is another replica.
  const std::string pid_part = "-" + std::to_string(getpid()) + "-";
  EXPECT_NE(d->cluster.replica_id.find(pid_part), std::string::npos) << d->cluster.replica_id;
  EXPECT_NE(d->cluster.replica_id.back(), '-');
  absl::StatusOr<Config> e = ParseConfig(
      "cluster: {store: 'redis://store'}\nbackends: [{name: a, url: http://h:1}]", "test");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->cluster.replica_id, d->cluster.replica_id);
}

TEST(ConfigTest, KvEventsOffUnlessABackendNamesAnEndpoint) {
  absl::StatusOr<Config> c = ParseConfig(R"(
kv_events: {topic: kv-events, queue_messages: 500, block_size: 32, replay_timeout: 0.25}
backends:
  - {name: a, url: http://10.0.0.1:8000, kv_events: 'tcp://10.0.0.1:5557',
     kv_events_replay: 'tcp://10.0.0.1:5558'}
  - {name: b, url: http://10.0.0.2:8000}
)",
                                         "test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kv_events.topic, "kv-events");
  EXPECT_EQ(c->kv_events.queue_messages, 500);
  EXPECT_EQ(c->kv_events.block_size, 32);
  EXPECT_EQ(c->kv_events.replay_timeout, absl::Milliseconds(250));
  EXPECT_EQ(c->backends[0].kv_events, "tcp://10.0.0.1:5557");
  EXPECT_EQ(c->backends[0].kv_events_replay, "tcp://10.0.0.1:5558");
  EXPECT_EQ(c->backends[1].kv_events, "");
}

TEST(ConfigTest, ValidateRejectsOverriddenMode) {
  absl::StatusOr<Config> c = ParseConfig(kMinimal, "test");
  ASSERT_TRUE(c.ok());
  c->router.mode = "fastest";
  absl::Status st = ValidateConfig(*c);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("mode: unknown mode 'fastest'"), std::string::npos);
}

// The config and the router apply one pd_sep rule (router/policy_registry.h):
// a prefill-capable and a distinct decode-capable backend, `both` counting for
// either pool.
TEST(ConfigTest, PdSepPoolsFollowThePolicyRule) {
  EXPECT_TRUE(ParseConfig("mode: pd_sep\nbackends: [{name: a, url: http://h:1}, "
                          "{name: b, url: http://h:2}]",
                          "test")
                  .ok());
  absl::StatusOr<Config> c = ParseConfig(
      "mode: pd_sep\nbackends: [{name: a, url: http://h:1, role: prefill}, "
      "{name: b, url: http://h:2, role: prefill}]",
      "test");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("backends: mode pd_sep needs"),
            std::string::npos)
      << c.status();
}

TEST(ConfigTest, HostPortForms) {
  std::string host;
  uint16_t port = 0;
  ASSERT_TRUE(ParseHostPort("listen", "[::1]:80", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 80);
  EXPECT_FALSE(ParseHostPort("listen", ":80", &host, &port).ok());
  EXPECT_FALSE(ParseHostPort("listen", "h:-1", &host, &port).ok());
}

TEST(ConfigTest, CachedTokensAbsentPerBackend) {
  absl::StatusOr<Config> c = ParseConfig(R"(
backends:
  - {name: a, url: http://h:1}
  - {name: b, url: http://h:2, cached_tokens_absent: zero}
  - {name: c, url: http://h:3, cached_tokens_absent: unknown}
  - {name: d, url: http://h:4, cached_tokens_absent: auto}
)",
                                         "test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->backends[0].cached_tokens_absent, AbsentCachedTokens::kAuto);
  EXPECT_EQ(c->backends[1].cached_tokens_absent, AbsentCachedTokens::kZero);
  EXPECT_EQ(c->backends[2].cached_tokens_absent, AbsentCachedTokens::kUnknown);
  EXPECT_EQ(c->backends[3].cached_tokens_absent, AbsentCachedTokens::kAuto);
}

TEST(ConfigTest, SchedulingPolicyPerBackend) {
  absl::StatusOr<Config> c = ParseConfig(R"(
backends:
  - {name: a, url: http://h:1}
  - {name: b, url: http://h:2, scheduling_policy: priority}
  - {name: c, url: http://h:3, scheduling_policy: fcfs}
)",
                                         "test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->backends[0].spec.priority_scheduling);
  EXPECT_TRUE(c->backends[1].spec.priority_scheduling);
  EXPECT_FALSE(c->backends[2].spec.priority_scheduling);
}

TEST(ConfigTest, OffloadCostFromKeys) {
  absl::StatusOr<Config> c = ParseConfig(R"(
router:
  offload_gate: cost
  offload_cost:
    kv_bytes_per_token: 98304
    link_bytes_per_second: 22e9
    transfer_overhead_s: 0.15
    prefill_tokens_per_second: 7000
    margin: 1.5
backends: [{name: a, url: http://h:1}]
)",
                                         "test");
  ASSERT_TRUE(c.ok()) << c.status();
  const classifier::OffloadCostParams& p = c->router.offload_cost;
  EXPECT_EQ(p.kv_bytes_per_token, 98304);
  EXPECT_EQ(p.link_bytes_per_second, 22e9);
  EXPECT_EQ(p.transfer_overhead_seconds, 0.15);
  EXPECT_EQ(p.prefill_tokens_per_second, 7000);
  EXPECT_EQ(p.margin, 1.5);
}

TEST(ConfigTest, RateLearning) {
  absl::StatusOr<Config> c = ParseConfig("backends: [{name: a, url: http://h:1}]", "test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->router.rate_learning.enabled);
  EXPECT_EQ(c->router.rate_learning.alpha, 0.2);
  EXPECT_EQ(c->router.rate_learning.max_sample_ratio, 20);
  c = ParseConfig(R"(
router: {rate_learning: {enabled: false, alpha: 0.05, max_sample_ratio: 4}}
backends: [{name: a, url: http://h:1}]
)",
                  "test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->router.rate_learning.enabled);
  EXPECT_EQ(c->router.rate_learning.alpha, 0.05);
  EXPECT_EQ(c->router.rate_learning.max_sample_ratio, 4);
}

TEST(ConfigTest, OverloadKeys) {
  absl::StatusOr<Config> c = ParseConfig("backends: [{name: a, url: http://h:1}]", "test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->router.shed.enabled);
  EXPECT_EQ(c->router.shed.ttft_factor, 4);
  EXPECT_EQ(c->router.shed.running_session_factor, 5);
  EXPECT_EQ(c->upstream.first_token_timeout, absl::Seconds(300));
  EXPECT_EQ(c->upstream.first_token_timeout_factor, 4);
  EXPECT_EQ(c->monitor.hung_after, absl::Seconds(120));
  c = ParseConfig(R"(
upstream: {first_token_timeout_s: 30, first_token_timeout_factor: 3, first_token_timeout_max_s: 90}
health: {hung_after_s: 0}
router:
  shed: {enabled: false, ttft_factor: 2, ttft_deadline_warm_s: 5, ttft_deadline_medium_s: 20,
         ttft_deadline_heavy_s: 60, running_session_factor: 3, min_retry_after_s: 2,
         max_retry_after_s: 30}
backends: [{name: a, url: http://h:1}]
)",
                  "test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->router.shed.enabled);
  EXPECT_EQ(c->router.shed.ttft_factor, 2);
  EXPECT_EQ(c->router.shed.ttft_deadline_warm_s, 5);
  EXPECT_EQ(c->router.shed.ttft_deadline_medium_s, 20);
  EXPECT_EQ(c->router.shed.ttft_deadline_heavy_s, 60);
  EXPECT_EQ(c->router.shed.running_session_factor, 3);
  EXPECT_EQ(c->router.shed.min_retry_after_s, 2);
  EXPECT_EQ(c->router.shed.max_retry_after_s, 30);
  EXPECT_EQ(c->monitor.hung_after, absl::ZeroDuration());
  // The first-token wait: factor x prediction within [floor, cap].
  EXPECT_EQ(FirstTokenTimeout(c->upstream, -1), absl::Seconds(30));
  EXPECT_EQ(FirstTokenTimeout(c->upstream, 5), absl::Seconds(30));
  EXPECT_EQ(FirstTokenTimeout(c->upstream, 20), absl::Seconds(60));
  EXPECT_EQ(FirstTokenTimeout(c->upstream, 1000), absl::Seconds(90));
}

// The cost model is the fleet's once a prefill rate comes from a key or the
// profile; profile_time_scale turns its times into wall seconds of a fleet
// running at that scale (a simulated one at 0.1: ten times the rates, a
// tenth of the times).
TEST(ConfigTest, ProfileTimeScaleScalesTheCostModel) {
  absl::StatusOr<Config> c = ParseConfig("backends: [{name: a, url: http://h:1}]", "test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->router.offload_cost_known);
  EXPECT_EQ(c->profile_time_scale, 1);

  const std::string keys = R"(
router:
  offload_cost:
    kv_bytes_per_token: 98304
    link_bytes_per_second: 22e9
    transfer_overhead_s: 0.15
    prefill_tokens_per_second: 7000
backends: [{name: a, url: http://h:1}]
)";
  c = ParseConfig(keys, "test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->router.offload_cost_known);
  EXPECT_EQ(c->router.offload_cost.prefill_tokens_per_second, 7000);

  c = ParseConfig("profile_time_scale: 0.1\n" + keys, "test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->profile_time_scale, 0.1);
  const classifier::OffloadCostParams& p = c->router.offload_cost;
  EXPECT_NEAR(p.prefill_tokens_per_second, 70000, 1e-6);
  EXPECT_NEAR(p.link_bytes_per_second, 220e9, 1e-3);
  EXPECT_NEAR(p.transfer_overhead_seconds, 0.015, 1e-12);
  EXPECT_EQ(p.kv_bytes_per_token, 98304);  // bytes, not time

  namespace fs = std::filesystem;
  const fs::path dir = fs::path(KVROUTE_SOURCE_DIR) / "configs";
  absl::StatusOr<Config> one = ParseConfig(
      "profile: profiles/h20-qwen3-coder-30b-a3b.yaml\nbackends: [{name: a, url: http://h:1}]\n",
      "test", dir.string());
  absl::StatusOr<Config> tenth = ParseConfig(
      "profile: profiles/h20-qwen3-coder-30b-a3b.yaml\nprofile_time_scale: 0.1\n"
      "backends: [{name: a, url: http://h:1}]\n",
      "test", dir.string());
  ASSERT_TRUE(one.ok() && tenth.ok());
  EXPECT_TRUE(one->router.offload_cost_known);
  EXPECT_NEAR(tenth->router.offload_cost.attention_s_per_token_pair,
              0.1 * one->router.offload_cost.attention_s_per_token_pair, 1e-20);
  EXPECT_NEAR(tenth->router.offload_cost.prefill_tokens_per_second,
              10 * one->router.offload_cost.prefill_tokens_per_second, 1e-6);
}

// The H20 / Qwen3-Coder-30B-A3B profile: c_KV = 2 x 48 x 4 x 128 x 2 B.
TEST(ConfigTest, OffloadCostFromShippedProfile) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(KVROUTE_SOURCE_DIR) / "configs";
  absl::StatusOr<Config> c = ParseConfig(R"(
profile: profiles/h20-qwen3-coder-30b-a3b.yaml
router: {offload_gate: cost}
backends: [{name: a, url: http://h:1}]
)",
                                         "test", dir.string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->profile, (dir / "profiles/h20-qwen3-coder-30b-a3b.yaml").string());
  const classifier::OffloadCostParams& p = c->router.offload_cost;
  EXPECT_EQ(p.kv_bytes_per_token, 98304);
  // The figures below are the profile's own, whatever it says today.
  absl::StatusOr<ProfileFigures> f =
      LoadProfileFigures("profile", (dir / "profiles/h20-qwen3-coder-30b-a3b.yaml").string());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_GT(f->link_bytes_per_second, 0);
  EXPECT_GT(f->prefill_tokens_per_second, 0);
  EXPECT_EQ(p.link_bytes_per_second, f->link_bytes_per_second);
  EXPECT_EQ(p.prefill_tokens_per_second, f->prefill_tokens_per_second);
  EXPECT_EQ(p.transfer_overhead_seconds, f->transfer_overhead_seconds);
  // The context-dependent prefill cost the placement decision uses.
  EXPECT_GT(f->attention_s_per_token_pair, 0);
  EXPECT_EQ(p.attention_s_per_token_pair, f->attention_s_per_token_pair);
}

TEST(ConfigTest, JointDecisionKeys) {
  absl::StatusOr<Config> c = ParseConfig(kMinimal, "test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->router.offload_gate, "joint");
  EXPECT_FALSE(c->router.heavy_threshold_auto);
  EXPECT_TRUE(c->router.decode_leg_after_prefill);  // NIXL: the decode leg follows the prefill
  c = ParseConfig("transfer: {connector: mooncake}\nbackends: [{name: a, url: http://h:1}]",
                  "test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->router.decode_leg_after_prefill);  // both legs at once

  c = ParseConfig(R"(
mode: v1_cost
heavy_threshold: auto
router:
  offload_gate: joint
  slo: {ttft_warm_s: 1, ttft_medium_s: 3, ttft_heavy_s: 12, tpot_s: 0.05, harm_weight: 0.5}
backends: [{name: a, url: http://h:1}]
)",
                  "test");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->router.mode, "v1_cost");
  EXPECT_TRUE(c->router.heavy_threshold_auto);
  EXPECT_EQ(c->router.thresholds.heavy_threshold, 20000);  // still labels the class
  EXPECT_EQ(c->router.slo.ttft_warm_s, 1);
  EXPECT_EQ(c->router.slo.ttft_medium_s, 3);
  EXPECT_EQ(c->router.slo.ttft_heavy_s, 12);
  EXPECT_EQ(c->router.slo.tpot_s, 0.05);
  EXPECT_EQ(c->router.slo.harm_weight, 0.5);

  // --heavy-threshold over the file's value, either way.
  router::Options o;
  ASSERT_TRUE(ParseHeavyThreshold("--heavy-threshold", "auto", &o).ok());
  EXPECT_TRUE(o.heavy_threshold_auto);
  ASSERT_TRUE(ParseHeavyThreshold("--heavy-threshold", "30000", &o).ok());
  EXPECT_FALSE(o.heavy_threshold_auto);
  EXPECT_EQ(o.thresholds.heavy_threshold, 30000);
  const absl::Status st = ParseHeavyThreshold("--heavy-threshold", "big", &o);
  EXPECT_EQ(st.message(),
            "--heavy-threshold: expected 'auto' or a positive token count, got 'big'");
}

TEST(ConfigTest, ProfileFillsBelowExplicitKeysAndToleratesOtherKeys) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "kvroute_config_profile_test";
  fs::create_directories(dir);
  {
    std::ofstream out(dir / "gpu.yaml");
    out << "model: {name: x, num_attention_layers: 32, num_kv_heads: 8, head_dim: 128,\n"
           "        kv_bytes_per_element: 1, new_model_key: [1, 2]}\n"
           "timing: {prefill_s_per_token: 5.0e-5, prefill_attn_s_per_token_ctx: 1e-9}\n"
           "link: {bandwidth_bytes_per_s: 50e9, overhead_s: 0, per_descriptor_s: 1e-6}\n"
           "fabric: {anything: goes}\n";
  }
  absl::StatusOr<Config> c = LoadConfigFile([&] {
    std::ofstream out(dir / "kvroute.yaml");
    out << "profile: gpu.yaml\n"
           "router: {offload_gate: cost, offload_cost: {prefill_tokens_per_second: 12345}}\n"
           "backends: [{name: a, url: http://h:1}]\n";
    return (dir / "kvroute.yaml").string();
  }());
  ASSERT_TRUE(c.ok()) << c.status();
  const classifier::OffloadCostParams& p = c->router.offload_cost;
  EXPECT_EQ(p.kv_bytes_per_token, 2.0 * 32 * 8 * 128 * 1);  // FP8 KV
  EXPECT_EQ(p.link_bytes_per_second, 50e9);
  EXPECT_EQ(p.transfer_overhead_seconds, 0);
  EXPECT_EQ(p.prefill_tokens_per_second, 12345);  // the key wins over 1 / 5e-5

  // A profile key of the wrong type is named.
  {
    std::ofstream out(dir / "bad.yaml");
    out << "model: {num_attention_layers: many, num_kv_heads: 8, head_dim: 128}\n";
  }
  absl::StatusOr<Config> bad = ParseConfig(
      "profile: bad.yaml\nbackends: [{name: a, url: http://h:1}]\n", "test", dir.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message())
                .find("bad.yaml': model.num_attention_layers: expected an integer, got 'many'"),
            std::string::npos)
      << bad.status();
  // A profile without timing cannot feed the cost gate, and the error says which key.
  {
    std::ofstream out(dir / "notiming.yaml");
    out << "model: {num_attention_layers: 32, num_kv_heads: 8, head_dim: 128}\n"
           "link: {bandwidth_bytes_per_s: 50e9}\n";
  }
  absl::StatusOr<Config> no_timing = ParseConfig(
      "profile: notiming.yaml\nrouter: {offload_gate: cost}\n"
      "backends: [{name: a, url: http://h:1}]\n",
      "test", dir.string());
  ASSERT_FALSE(no_timing.ok());
  EXPECT_NE(std::string(no_timing.status().message())
                .find("router.offload_gate: cost needs router.offload_cost.prefill_tokens_per_"
                      "second or a `profile` with timing.prefill_s_per_token (the profile has "
                      "none)"),
            std::string::npos)
      << no_timing.status();
  // The same profile is fine for the threshold gate.
  EXPECT_TRUE(ParseConfig("profile: notiming.yaml\nbackends: [{name: a, url: http://h:1}]\n",
                          "test", dir.string())
                  .ok());
}

// Every example config shipped in configs/ must load.
TEST(ConfigTest, ShippedExampleConfigsLoad) {
  namespace fs = std::filesystem;
  int loaded = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(KVROUTE_SOURCE_DIR) / "configs")) {
    if (entry.path().extension() != ".yaml") continue;
    absl::StatusOr<Config> c = LoadConfigFile(entry.path().string());
    EXPECT_TRUE(c.ok()) << entry.path() << ": " << c.status();
    ++loaded;
  }
  EXPECT_GE(loaded, 1);
}

}  // namespace
}  // namespace kvroute::proxy
