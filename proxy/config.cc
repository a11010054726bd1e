#include "proxy/config.h"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "classifier/classifier.h"  // and kvsize, whose ModelArch its API takes
#include "profile/profile_keys.h"
#include "proxy/config_reader.h"
#include "proxy/config_router.h"
#include "router/policy_registry.h"
#include "transfer/connector.h"

namespace kvroute::proxy {
namespace {

using config_internal::FillOffloadCost;
using config_internal::KeyError;
using config_internal::MapReader;
using config_internal::OffloadCostKeys;
using config_internal::ParseRouter;
using config_internal::ReadBool;
using config_internal::RequireMap;
using config_internal::Show;

absl::Status ParseLimits(const YAML::Node& n, ServerLimits* l) {
  KV_RETURN_IF_ERROR(RequireMap(n, "limits"));
  MapReader r(n, "limits");
  KV_RETURN_IF_ERROR(r.Integer("max_header_bytes", &l->max_header_bytes, 1024, 1 << 20));
  KV_RETURN_IF_ERROR(r.Integer("max_body_bytes", &l->max_body_bytes, 1024, int64_t{1} << 32));
  KV_RETURN_IF_ERROR(r.Integer("max_connections", &l->max_connections, 1, 1000000));
  KV_RETURN_IF_ERROR(r.Seconds("header_timeout_s", &l->header_timeout));
  KV_RETURN_IF_ERROR(r.Seconds("idle_timeout_s", &l->idle_timeout));
  KV_RETURN_IF_ERROR(r.Seconds("request_timeout_s", &l->request_timeout));
  KV_RETURN_IF_ERROR(r.Seconds("write_timeout_s", &l->write_timeout));
  KV_RETURN_IF_ERROR(r.Seconds("drain_timeout_s", &l->drain_timeout, 0));
  KV_RETURN_IF_ERROR(r.Integer("max_inflight_requests", &l->max_inflight_requests, 1, 10000000));
  KV_RETURN_IF_ERROR(r.Integer("max_queued_requests", &l->max_queued_requests, 0, 10000000));
  KV_RETURN_IF_ERROR(r.Seconds("queue_timeout_s", &l->queue_timeout, 0));
  KV_RETURN_IF_ERROR(r.Seconds("retry_after_s", &l->retry_after, 1));
  KV_RETURN_IF_ERROR(r.Integer("max_response_ids", &l->max_response_ids, 0, 100000000));
  return r.Finish();
}

absl::Status ParseUpstream(const YAML::Node& n, UpstreamOptions* u) {
  KV_RETURN_IF_ERROR(RequireMap(n, "upstream"));
  MapReader r(n, "upstream");
  KV_RETURN_IF_ERROR(r.Seconds("connect_timeout_s", &u->connect_timeout));
  KV_RETURN_IF_ERROR(r.Seconds("first_byte_timeout_s", &u->first_byte_timeout));
  KV_RETURN_IF_ERROR(r.Seconds("idle_timeout_s", &u->idle_timeout));
  KV_RETURN_IF_ERROR(r.Seconds("first_token_timeout_s", &u->first_token_timeout));
  KV_RETURN_IF_ERROR(
      r.Double("first_token_timeout_factor", &u->first_token_timeout_factor, 0, 1000));
  KV_RETURN_IF_ERROR(r.Seconds("first_token_timeout_max_s", &u->first_token_timeout_max));
  if (u->first_token_timeout_max < u->first_token_timeout) {
    return KeyError("upstream.first_token_timeout_max_s",
                    absl::StrCat("must be at least upstream.first_token_timeout_s (",
                                 absl::ToDoubleSeconds(u->first_token_timeout), "), got ",
                                 absl::ToDoubleSeconds(u->first_token_timeout_max)));
  }
  KV_RETURN_IF_ERROR(r.Integer("max_idle_per_backend", &u->max_idle_per_backend, 0, 100000));
  KV_RETURN_IF_ERROR(r.Integer("max_observed_body", &u->max_observed_body, 0, int64_t{1} << 30));
  KV_RETURN_IF_ERROR(r.Integer("max_attempts", &u->max_attempts, 1, 16));
  KV_RETURN_IF_ERROR(r.Seconds("retry_backoff_s", &u->retry_backoff, 0));
  KV_RETURN_IF_ERROR(r.Seconds("retry_backoff_max_s", &u->retry_backoff_max, 0));
  return r.Finish();
}

absl::Status ParseMonitor(const YAML::Node& n, MonitorOptions* m) {
  KV_RETURN_IF_ERROR(RequireMap(n, "health"));
  MapReader r(n, "health");
  if (const YAML::Node* e = r.Find("enabled")) {
    if (!e->IsScalar() || (e->Scalar() != "true" && e->Scalar() != "false")) {
      return KeyError("health.enabled", absl::StrCat("expected true or false, got ", Show(*e)));
    }
    m->enabled = e->Scalar() == "true";
  }
  KV_RETURN_IF_ERROR(r.Seconds("interval_s", &m->health_interval));
  KV_RETURN_IF_ERROR(r.Seconds("timeout_s", &m->health_timeout));
  KV_RETURN_IF_ERROR(r.Integer("unhealthy_after", &m->unhealthy_after, 1, 1000));
  KV_RETURN_IF_ERROR(r.Integer("healthy_after", &m->healthy_after, 1, 1000));
  KV_RETURN_IF_ERROR(r.Seconds("scrape_interval_s", &m->scrape_interval));
  KV_RETURN_IF_ERROR(r.Integer("passive_failures", &m->passive_failures, 1, 100000));
  KV_RETURN_IF_ERROR(r.Seconds("ejection_s", &m->ejection, 0));
  KV_RETURN_IF_ERROR(r.Seconds("max_ejection_s", &m->max_ejection, 0));
  KV_RETURN_IF_ERROR(r.Seconds("hung_after_s", &m->hung_after, 0));
  if (m->max_ejection < m->ejection) {
    return KeyError(
        "health.max_ejection_s",
        absl::StrCat("must be at least health.ejection_s (", absl::ToDoubleSeconds(m->ejection),
                     "), got ", absl::ToDoubleSeconds(m->max_ejection)));
  }
  return r.Finish();
}

absl::Status ParseTransfer(const YAML::Node& n, TransferOptions* t) {
  KV_RETURN_IF_ERROR(RequireMap(n, "transfer"));
  MapReader r(n, "transfer");
  KV_RETURN_IF_ERROR(r.String("connector", &t->connector));
  if (t->connector != "nixl" && t->connector != "mooncake" && t->connector != "sglang") {
    return KeyError("transfer.connector", absl::StrCat("unknown connector '", t->connector,
                                                       "' (expected nixl, mooncake or sglang)"));
  }
  KV_RETURN_IF_ERROR(r.Integer("max_offload_inflight", &t->max_offload_inflight, 0, 1000000));
  KV_RETURN_IF_ERROR(r.Integer("bootstrap_port", &t->bootstrap_port, 1, 65535));
  return r.Finish();
}

absl::Status ParseAdmin(const YAML::Node& n, AdminOptions* a) {
  KV_RETURN_IF_ERROR(RequireMap(n, "admin"));
  MapReader r(n, "admin");
  std::string token, token_file;
  KV_RETURN_IF_ERROR(r.String("token", &token));
  KV_RETURN_IF_ERROR(r.String("token_file", &token_file));
  KV_RETURN_IF_ERROR(ReadBool(r, "allow_loopback", &a->allow_loopback));
  KV_RETURN_IF_ERROR(r.Finish());
  if (!token.empty() && !token_file.empty()) {
    return KeyError("admin.token_file", "set admin.token or admin.token_file, not both");
  }
  std::string key = "admin.token";
  if (!token_file.empty()) {
    key = "admin.token_file";
    std::error_code fec;
    if (!std::filesystem::is_regular_file(token_file, fec)) {
      return KeyError(key, absl::StrCat("cannot read '", token_file, "': not a regular file"));
    }
    std::ifstream in(token_file);
    const std::string content((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    if (!in.is_open() || in.bad()) {
      return KeyError(key, absl::StrCat("cannot read '", token_file, "'"));
    }
    token = std::string(absl::StripAsciiWhitespace(content));
  }
  // The token itself is never quoted in an error.
  if ((!token.empty() || !token_file.empty()) && token.size() < kMinAdminTokenChars) {
    return KeyError(key, absl::StrCat("the token has ", token.size(), " characters; at least ",
                                      kMinAdminTokenChars, " are required"));
  }
  a->token = std::move(token);
  return absl::OkStatus();
}

// A ZeroMQ endpoint kvroute connects to: tcp://host:port.
absl::Status CheckTcpEndpoint(const std::string& key, const std::string& value) {
  const std::string kScheme = "tcp://";
  std::string host;
  uint16_t port = 0;
  if (value.compare(0, kScheme.size(), kScheme) != 0 ||
      !ParseHostPort(key, value.substr(kScheme.size()), &host, &port).ok() || port == 0) {
    return KeyError(key, absl::StrCat("expected tcp://host:port, got '", value, "'"));
  }
  return absl::OkStatus();
}

absl::Status ParseKvEvents(const YAML::Node& n, KvEventsOptions* o) {
  KV_RETURN_IF_ERROR(RequireMap(n, "kv_events"));
  MapReader r(n, "kv_events");
  KV_RETURN_IF_ERROR(r.String("topic", &o->topic));
  KV_RETURN_IF_ERROR(r.Integer("queue_messages", &o->queue_messages, 1, 10000000));
  KV_RETURN_IF_ERROR(r.Integer("block_size", &o->block_size, 1, 65536));
  KV_RETURN_IF_ERROR(r.Seconds("replay_timeout", &o->replay_timeout));
  KV_RETURN_IF_ERROR(r.String("pool", &o->pool));
  KV_RETURN_IF_ERROR(r.String("pool_replay", &o->pool_replay));
  if (!o->pool.empty()) KV_RETURN_IF_ERROR(CheckTcpEndpoint("kv_events.pool", o->pool));
  if (!o->pool_replay.empty()) {
    if (o->pool.empty()) return KeyError("kv_events.pool_replay", "needs kv_events.pool");
    KV_RETURN_IF_ERROR(CheckTcpEndpoint("kv_events.pool_replay", o->pool_replay));
  }
  return r.Finish();
}

// `key: N` with N > 0 (seconds or a count); absent leaves *out alone.
absl::Status PositiveNumber(MapReader& r, const std::string& key, double* out) {
  const YAML::Node* n = r.Find(key);
  if (n == nullptr) return absl::OkStatus();
  double v = 0;
  if (!n->IsScalar() || !absl::SimpleAtod(n->Scalar(), &v) || !(v > 0) || std::isinf(v)) {
    return KeyError(r.Path(key), absl::StrCat("expected a positive number, got ", Show(*n)));
  }
  *out = v;
  return absl::OkStatus();
}

// "<hostname>-<pid>": unique among replicas on distinct hosts or processes.
// "<hostname>-<pid>-<start>": the start time (µs, hex) keeps the id of a
// restarted process apart from its predecessor's when both have the same
// pid (PID 1 in a container), so the store does not take the new process
// for the dead one, whose state must expire with its lease. Fixed for the
// life of the process.
std::string DefaultReplicaId() {
  static const std::string id = [] {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
      std::snprintf(host, sizeof(host), "kvroute");
    }
    return absl::StrCat(host, "-", getpid(), "-",
                        absl::Hex(absl::ToUnixMicros(absl::Now()) & 0xffffffffff));
  }();
  return id;
}

// `cluster:`: sharing state with the other kvroute replicas (cluster/options.h).
absl::Status ParseCluster(const YAML::Node& n, cluster::ClusterOptions* o) {
  KV_RETURN_IF_ERROR(RequireMap(n, "cluster"));
  MapReader r(n, "cluster");
  KV_RETURN_IF_ERROR(r.String("store", &o->store));
  KV_RETURN_IF_ERROR(r.String("replica_id", &o->replica_id));
  KV_RETURN_IF_ERROR(PositiveNumber(r, "lease_s", &o->lease_s));
  KV_RETURN_IF_ERROR(PositiveNumber(r, "sync_interval_s", &o->sync_interval_s));
  KV_RETURN_IF_ERROR(PositiveNumber(r, "op_timeout_s", &o->op_timeout_s));
  KV_RETURN_IF_ERROR(PositiveNumber(r, "session_ttl_s", &o->session_ttl_s));
  KV_RETURN_IF_ERROR(r.Integer("max_pending_writes", &o->max_pending_writes, 1, 100000000));
  KV_RETURN_IF_ERROR(r.String("key_prefix", &o->key_prefix));
  KV_RETURN_IF_ERROR(r.Integer("max_replicas", &o->max_replicas, 1, 100000));
  KV_RETURN_IF_ERROR(
      r.Integer("max_admission_connections", &o->max_admission_connections, 1, 10000));
  KV_RETURN_IF_ERROR(r.Finish());
  if (o->replica_id.empty()) o->replica_id = DefaultReplicaId();
  return cluster::ValidateClusterOptions(*o);
}

absl::Status ParseBackends(const YAML::Node& n, std::vector<BackendConfig>* out) {
  if (!n.IsSequence()) return KeyError("backends", absl::StrCat("expected a list, got ", Show(n)));
  if (n.size() == 0) return KeyError("backends", "the backend list is empty");
  absl::flat_hash_set<std::string> names;
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string path = absl::StrCat("backends[", i, "]");
    KV_RETURN_IF_ERROR(RequireMap(n[i], path));
    MapReader r(n[i], path);
    BackendConfig b;
    KV_RETURN_IF_ERROR(r.String("name", &b.name));
    KV_RETURN_IF_ERROR(r.String("url", &b.url));
    std::string role = "both";
    KV_RETURN_IF_ERROR(r.String("role", &role));
    KV_RETURN_IF_ERROR(r.Integer("capacity_tokens", &b.spec.capacity_tokens, 0, int64_t{1} << 40));
    KV_RETURN_IF_ERROR(r.Integer("bootstrap_port", &b.bootstrap_port, 1, 65535));
    KV_RETURN_IF_ERROR(r.String("kv_events", &b.kv_events));
    KV_RETURN_IF_ERROR(r.String("kv_events_replay", &b.kv_events_replay));
    std::string absent = "auto";
    KV_RETURN_IF_ERROR(r.String("cached_tokens_absent", &absent));
    std::string scheduling = "fcfs";
    KV_RETURN_IF_ERROR(r.String("scheduling_policy", &scheduling));
    KV_RETURN_IF_ERROR(r.Finish());
    if (scheduling == "priority") {
      b.spec.priority_scheduling = true;
    } else if (scheduling != "fcfs") {
      return KeyError(path + ".scheduling_policy",
                      absl::StrCat("unknown value '", scheduling, "' (expected fcfs or priority)"));
    }
    if (!b.kv_events.empty()) {
      KV_RETURN_IF_ERROR(CheckTcpEndpoint(path + ".kv_events", b.kv_events));
    }
    if (!b.kv_events_replay.empty()) {
      if (b.kv_events.empty()) {
        return KeyError(path + ".kv_events_replay", "needs kv_events on the same backend");
      }
      KV_RETURN_IF_ERROR(CheckTcpEndpoint(path + ".kv_events_replay", b.kv_events_replay));
    }
    if (absent == "auto") {
      b.cached_tokens_absent = AbsentCachedTokens::kAuto;
    } else if (absent == "zero") {
      b.cached_tokens_absent = AbsentCachedTokens::kZero;
    } else if (absent == "unknown") {
      b.cached_tokens_absent = AbsentCachedTokens::kUnknown;
    } else {
      return KeyError(
          path + ".cached_tokens_absent",
          absl::StrCat("unknown value '", absent, "' (expected auto, zero or unknown)"));
    }
    if (b.name.empty()) return KeyError(path + ".name", "missing or empty");
    if (!names.insert(b.name).second) {
      return KeyError(path + ".name", absl::StrCat("duplicate backend name '", b.name, "'"));
    }
    if (b.url.empty()) return KeyError(path + ".url", "missing or empty");
    KV_RETURN_IF_ERROR(ParseBackendUrl(path + ".url", b.url, &b.spec.host, &b.spec.port));
    if (role == "both") {
      b.spec.role = router::BackendRole::kBoth;
    } else if (role == "prefill") {
      b.spec.role = router::BackendRole::kPrefill;
    } else if (role == "decode") {
      b.spec.role = router::BackendRole::kDecode;
    } else {
      return KeyError(path + ".role",
                      absl::StrCat("unknown role '", role, "' (expected both, prefill or decode)"));
    }
    b.spec.name = b.name;
    out->push_back(std::move(b));
  }
  return absl::OkStatus();
}

// One figure of a profile (profile/profile_keys.h read it): `key`, absent
// leaves *out alone, present must be positive.
template <typename T>
absl::Status PositiveFigure(const std::string& where, const char* key,
                            const std::optional<T>& value, double* out) {
  if (!value) return absl::OkStatus();
  const double d = static_cast<double>(*value);
  if (!(d > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", key, ": expected a positive number, got '", d, "'"));
  }
  *out = d;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ProfileFigures> LoadProfileFigures(const std::string& key, const std::string& path) {
  const std::string where = absl::StrCat(key, ": profile '", path, "'");
  absl::StatusOr<profile::ProfileKeys> read = profile::LoadProfileKeys(path);
  if (absl::IsNotFound(read.status())) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": cannot read the file"));
  }
  if (!read.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", read.status().message()));
  }
  const profile::ProfileKeys& k = *read;
  ProfileFigures f;
  double layers = -1, kv_heads = -1, head_dim = -1, kv_bytes = 2, prefill_s_per_token = -1;
  KV_RETURN_IF_ERROR(
      PositiveFigure(where, "model.num_attention_layers", k.model.num_attention_layers, &layers));
  KV_RETURN_IF_ERROR(PositiveFigure(where, "model.num_kv_heads", k.model.num_kv_heads, &kv_heads));
  KV_RETURN_IF_ERROR(PositiveFigure(where, "model.head_dim", k.model.head_dim, &head_dim));
  KV_RETURN_IF_ERROR(
      PositiveFigure(where, "model.kv_bytes_per_element", k.model.kv_bytes_per_element, &kv_bytes));
  KV_RETURN_IF_ERROR(PositiveFigure(where, "link.bandwidth_bytes_per_s",
                                    k.link.bandwidth_bytes_per_s, &f.link_bytes_per_second));
  KV_RETURN_IF_ERROR(PositiveFigure(where, "timing.prefill_s_per_token",
                                    k.timing.prefill_s_per_token, &prefill_s_per_token));
  KV_RETURN_IF_ERROR(PositiveFigure(where, "timing.attn_s_per_token_pair",
                                    k.timing.attn_s_per_token_pair, &f.attention_s_per_token_pair));
  // link.overhead_s may be 0.
  if (k.link.overhead_s) {
    if (!(*k.link.overhead_s >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": link.overhead_s: expected a number >= 0, got '", *k.link.overhead_s, "'"));
    }
    f.transfer_overhead_seconds = *k.link.overhead_s;
  }
  if (layers > 0 && kv_heads > 0 && head_dim > 0) {
    kvsize::ModelArch arch;
    arch.num_attention_layers = static_cast<int>(layers);
    arch.num_kv_heads = static_cast<int>(kv_heads);
    arch.head_dim = static_cast<int>(head_dim);
    arch.kv_bytes_per_element = kv_bytes;
    f.kv_bytes_per_token = kvsize::KvBytesPerToken(arch);
  }
  if (prefill_s_per_token > 0) f.prefill_tokens_per_second = 1.0 / prefill_s_per_token;
  return f;
}

absl::Status ParseHostPort(const std::string& key, const std::string& value, std::string* host,
                           uint16_t* port) {
  const size_t colon = value.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return KeyError(key, absl::StrCat("expected HOST:PORT, got '", value, "'"));
  }
  std::string h = value.substr(0, colon);
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  int p = -1;
  if (!absl::SimpleAtoi(value.substr(colon + 1), &p) || p < 0 || p > 65535) {
    return KeyError(key, absl::StrCat("bad port in '", value, "'"));
  }
  *host = h;
  *port = static_cast<uint16_t>(p);
  return absl::OkStatus();
}

absl::Status ParseBackendUrl(const std::string& key, const std::string& url, std::string* host,
                             uint16_t* port) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "http://")) {
    return KeyError(key,
                    absl::StrCat("'", url, "' is not an http:// URL (https is not supported)"));
  }
  absl::ConsumeSuffix(&rest, "/");
  if (rest.empty() || rest.find('/') != absl::string_view::npos ||
      rest.find('@') != absl::string_view::npos || rest.find('?') != absl::string_view::npos) {
    return KeyError(key, absl::StrCat("'", url, "' must be http://HOST:PORT with no path"));
  }
  if (rest.rfind(':') == absl::string_view::npos || rest.back() == ']') {
    *host = std::string(rest);
    *port = 80;
    return absl::OkStatus();
  }
  absl::Status st = ParseHostPort(key, std::string(rest), host, port);
  if (!st.ok()) return KeyError(key, absl::StrCat("bad host:port in '", url, "'"));
  if (*port == 0) return KeyError(key, absl::StrCat("port 0 in '", url, "'"));
  return absl::OkStatus();
}

absl::Status ParseHeavyThreshold(const std::string& key, const std::string& value,
                                 router::Options* o) {
  if (value == "auto") {
    o->heavy_threshold_auto = true;
    return absl::OkStatus();
  }
  int64_t t = 0;
  if (!absl::SimpleAtoi(value, &t) || t < 1 || t > (int64_t{1} << 40)) {
    return KeyError(key,
                    absl::StrCat("expected 'auto' or a positive token count, got '", value, "'"));
  }
  o->thresholds.heavy_threshold = t;
  o->heavy_threshold_auto = false;
  return absl::OkStatus();
}

absl::Status ValidateConfig(const Config& c) {
  KV_RETURN_IF_ERROR(router::CheckPolicyName(c.router.mode));
  static const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  if (std::none_of(std::begin(kLevels), std::end(kLevels),
                   [&](const char* l) { return c.log_level == l; })) {
    return KeyError("log_level", absl::StrCat("unknown level '", c.log_level,
                                              "' (expected trace, debug, info, warn, error, "
                                              "critical or off)"));
  }
  if (c.router.thresholds.heavy_threshold < 1) {
    return KeyError("heavy_threshold",
                    absl::StrCat("must be positive, got ", c.router.thresholds.heavy_threshold));
  }
  if (c.backends.empty()) return KeyError("backends", "the backend list is empty");
  std::vector<router::BackendSpec> specs;
  for (const auto& b : c.backends) specs.push_back(b.spec);
  KV_RETURN_IF_ERROR(router::ValidatePolicy(c.router, specs));
  return absl::OkStatus();
}

absl::StatusOr<Config> ParseConfig(const std::string& yaml_text, const std::string& source,
                                   const std::string& base_dir) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": YAML syntax error: ", e.what()));
  }
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": expected a YAML map at top level"));
  }
  Config c;
  MapReader r(root, "");
  ProfileFigures profile;
  KV_RETURN_IF_ERROR(r.String("profile", &c.profile));
  if (!c.profile.empty()) {
    std::filesystem::path p(c.profile);
    if (p.is_relative() && !base_dir.empty()) p = std::filesystem::path(base_dir) / p;
    c.profile = p.string();
    absl::StatusOr<ProfileFigures> read = LoadProfileFigures("profile", c.profile);
    if (!read.ok()) return read.status();
    profile = *read;
  }
  OffloadCostKeys offload_cost;
  KV_RETURN_IF_ERROR(r.Double("profile_time_scale", &c.profile_time_scale, 1e-6, 1e6));
  std::string listen;
  KV_RETURN_IF_ERROR(r.String("listen", &listen));
  if (!listen.empty())
    KV_RETURN_IF_ERROR(ParseHostPort("listen", listen, &c.listen_host, &c.listen_port));
  KV_RETURN_IF_ERROR(r.String("mode", &c.router.mode));
  if (const YAML::Node* t = r.Find("heavy_threshold")) {
    if (!t->IsScalar()) {
      return KeyError("heavy_threshold",
                      absl::StrCat("expected 'auto' or a positive token count, got ", Show(*t)));
    }
    KV_RETURN_IF_ERROR(ParseHeavyThreshold("heavy_threshold", t->Scalar(), &c.router));
  }
  KV_RETURN_IF_ERROR(r.String("request_log", &c.request_log));
  KV_RETURN_IF_ERROR(ReadBool(r, "request_log_prompts", &c.request_log_prompts));
  KV_RETURN_IF_ERROR(r.String("log_level", &c.log_level));
  KV_RETURN_IF_ERROR(r.Integer("threads", &c.threads, 1, 256));
  if (const YAML::Node* n = r.Find("limits")) KV_RETURN_IF_ERROR(ParseLimits(*n, &c.limits));
  if (const YAML::Node* n = r.Find("upstream")) KV_RETURN_IF_ERROR(ParseUpstream(*n, &c.upstream));
  if (const YAML::Node* n = r.Find("health")) KV_RETURN_IF_ERROR(ParseMonitor(*n, &c.monitor));
  if (const YAML::Node* n = r.Find("router")) {
    KV_RETURN_IF_ERROR(ParseRouter(*n, &c.router, &offload_cost));
  }
  KV_RETURN_IF_ERROR(
      FillOffloadCost(offload_cost, profile, !c.profile.empty(), c.profile_time_scale, &c.router));
  if (const YAML::Node* n = r.Find("transfer")) KV_RETURN_IF_ERROR(ParseTransfer(*n, &c.transfer));
  if (absl::StatusOr<std::unique_ptr<transfer::Connector>> conn =
          transfer::MakeConnector(c.transfer.connector);
      conn.ok()) {
    c.router.decode_leg_after_prefill = (*conn)->sequential();
  }
  if (const YAML::Node* n = r.Find("admin")) KV_RETURN_IF_ERROR(ParseAdmin(*n, &c.admin));
  if (const YAML::Node* n = r.Find("kv_events"))
    KV_RETURN_IF_ERROR(ParseKvEvents(*n, &c.kv_events));
  if (const YAML::Node* n = r.Find("cluster")) KV_RETURN_IF_ERROR(ParseCluster(*n, &c.cluster));
  if (c.cluster.replica_id.empty()) c.cluster.replica_id = DefaultReplicaId();
  const YAML::Node* backends = r.Find("backends");
  if (backends == nullptr) return KeyError("backends", "missing (at least one backend is needed)");
  KV_RETURN_IF_ERROR(ParseBackends(*backends, &c.backends));
  KV_RETURN_IF_ERROR(r.Finish());
  KV_RETURN_IF_ERROR(ValidateConfig(c));
  return c;
}

absl::StatusOr<Config> LoadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read config file '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseConfig(ss.str(), path, std::filesystem::path(path).parent_path().string());
}

}  // namespace kvroute::proxy
