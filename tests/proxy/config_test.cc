#include "proxy/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

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
router: {chunk_bytes: 128, bytes_per_token: 3.5, overload_factor: 3, warm_new_tokens: 4000}
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
                "heavy_threshold: expected an integer, got 'lots'"},
        BadCase{"wrong_type_backends", "backends: {name: a}", "backends: expected a list"},
        BadCase{"wrong_type_limits", "limits: 5\nbackends: [{name: a, url: http://h:1}]",
                "limits: expected a map, got '5'"},
        BadCase{"negative_threshold",
                "heavy_threshold: -3\nbackends: [{name: a, url: http://h:1}]",
                "heavy_threshold: value -3 is out of range"},
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
        BadCase{"ejection_cap_below_base",
                "health: {ejection_s: 10, max_ejection_s: 5}\nbackends: [{name: a, url: http://h:1}]",
                "health.max_ejection_s: must be at least health.ejection_s"},
        BadCase{"retry_after_zero",
                "limits: {retry_after_s: 0}\nbackends: [{name: a, url: http://h:1}]",
                "limits.retry_after_s: value 0 is out of range"},
        BadCase{"yaml_syntax", "backends: [{name: a", "YAML syntax error"},
        BadCase{"not_a_map", "- a\n- b", "expected a YAML map"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.name; });

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
  absl::StatusOr<Config> c =
      ParseConfig("mode: pd_sep\nbackends: [{name: a, url: http://h:1, role: prefill}, "
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
