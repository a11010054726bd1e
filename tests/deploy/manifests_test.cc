// Every YAML and JSON file under deploy/ and configs/ parses (YAML multi-document aware), and
// every kvroute config among them (configs/*.yaml, the Kubernetes ConfigMap's embedded
// kvroute.yaml) loads with kvroute's own config parser. The Kubernetes kit runs several kvroute
// replicas sharing through a Redis. The Grafana dashboard and the Prometheus rules are checked
// for shape and for referring only to known metric families.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "boost/json.hpp"
#include "gtest/gtest.h"
#include "proxy/config.h"

namespace kvroute {
namespace {

namespace fs = std::filesystem;

const fs::path kRoot = KVROUTE_SOURCE_DIR;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<fs::path> FilesUnder(const fs::path& dir, const std::vector<std::string>& exts) {
  std::vector<fs::path> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string ext = e.path().extension().string();
    if (std::find(exts.begin(), exts.end(), ext) != exts.end()) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<YAML::Node> LoadAllYaml(const fs::path& p) {
  return YAML::LoadAll(ReadFile(p));
}

TEST(DeployManifests, EveryYamlFileParses) {
  std::vector<fs::path> files = FilesUnder(kRoot / "deploy", {".yaml", ".yml"});
  const std::vector<fs::path> configs = FilesUnder(kRoot / "configs", {".yaml", ".yml"});
  files.insert(files.end(), configs.begin(), configs.end());
  ASSERT_GE(files.size(), 10u) << "deploy/ and configs/ should hold the manifests";
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.string());
    std::vector<YAML::Node> docs;
    ASSERT_NO_THROW(docs = LoadAllYaml(f));
    EXPECT_FALSE(docs.empty());
    for (const YAML::Node& d : docs) EXPECT_TRUE(d.IsMap()) << "a document that is not a map";
  }
}

TEST(DeployManifests, EveryJsonFileParses) {
  std::vector<fs::path> files = FilesUnder(kRoot / "deploy", {".json"});
  const std::vector<fs::path> configs = FilesUnder(kRoot / "configs", {".json"});
  files.insert(files.end(), configs.begin(), configs.end());
  ASSERT_FALSE(files.empty());
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.string());
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(ReadFile(f), ec);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_TRUE(v.is_object());
  }
}

// Kubernetes objects: every document has apiVersion, kind and metadata.name.
TEST(DeployManifests, KubernetesObjectsAreWellFormed) {
  std::set<std::string> kinds;
  for (const fs::path& f : FilesUnder(kRoot / "deploy" / "k8s", {".yaml", ".yml"})) {
    SCOPED_TRACE(f.string());
    for (const YAML::Node& d : LoadAllYaml(f)) {
      ASSERT_TRUE(d["apiVersion"] && d["kind"]) << "missing apiVersion/kind";
      const std::string kind = d["kind"].as<std::string>();
      kinds.insert(kind);
      if (kind == "Kustomization") {
        for (const YAML::Node& r : d["resources"]) {
          EXPECT_TRUE(fs::exists(f.parent_path() / r.as<std::string>())) << r.as<std::string>();
        }
        continue;
      }
      ASSERT_TRUE(d["metadata"] && d["metadata"]["name"]) << kind << " without metadata.name";
    }
  }
  for (const char* want : {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget",
                           "ServiceMonitor", "StatefulSet", "NetworkPolicy"}) {
    EXPECT_TRUE(kinds.count(want)) << "deploy/k8s has no " << want;
  }
}

// The kvroute Deployment is ready only while /health says a backend is healthy.
TEST(DeployManifests, KvrouteDeploymentProbesHealth) {
  const auto docs = LoadAllYaml(kRoot / "deploy/k8s/deployment.yaml");
  ASSERT_EQ(docs.size(), 1u);
  const YAML::Node c = docs[0]["spec"]["template"]["spec"]["containers"][0];
  ASSERT_TRUE(c["readinessProbe"]["httpGet"]);
  EXPECT_EQ(c["readinessProbe"]["httpGet"]["path"].as<std::string>(), "/health");
  EXPECT_FALSE(c["securityContext"]["allowPrivilegeEscalation"].as<bool>());
}

// Every object of `kind` in deploy/k8s, by metadata.name.
std::map<std::string, YAML::Node> K8sObjects(const std::string& kind) {
  std::map<std::string, YAML::Node> out;
  for (const fs::path& f : FilesUnder(kRoot / "deploy" / "k8s", {".yaml", ".yml"})) {
    for (const YAML::Node& d : LoadAllYaml(f)) {
      if (d["kind"].as<std::string>() == kind) out[d["metadata"]["name"].as<std::string>()] = d;
    }
  }
  return out;
}

// True when every label of `selector` (a matchLabels map) is among `labels`.
bool Selects(const YAML::Node& selector, const YAML::Node& labels) {
  if (!selector.IsMap() || selector.size() == 0) return false;
  for (auto it = selector.begin(); it != selector.end(); ++it) {
    const std::string key = it->first.as<std::string>();
    if (!labels[key] || labels[key].as<std::string>() != it->second.as<std::string>()) return false;
  }
  return true;
}

// Several kvroute replicas, active-active: any balancer (no affinity), a PodDisruptionBudget
// over their pods, and the Redis the ConfigMap's cluster.store names, run beside them.
TEST(DeployManifests, KvrouteReplicasShareThroughRedis) {
  std::map<std::string, YAML::Node> deployments = K8sObjects("Deployment");
  std::map<std::string, YAML::Node> services = K8sObjects("Service");
  ASSERT_TRUE(deployments.count("kvroute"));
  const YAML::Node kvroute = deployments["kvroute"];
  EXPECT_GE(kvroute["spec"]["replicas"].as<int>(), 2);
  const YAML::Node pod_labels = kvroute["spec"]["template"]["metadata"]["labels"];

  ASSERT_TRUE(services.count("kvroute"));
  const YAML::Node front = services["kvroute"]["spec"];
  EXPECT_TRUE(!front["sessionAffinity"] || front["sessionAffinity"].as<std::string>() == "None")
      << "the kvroute Service pins clients to a replica";
  EXPECT_TRUE(Selects(front["selector"], pod_labels));

  std::map<std::string, YAML::Node> pdbs = K8sObjects("PodDisruptionBudget");
  ASSERT_TRUE(pdbs.count("kvroute"));
  EXPECT_TRUE(Selects(pdbs["kvroute"]["spec"]["selector"]["matchLabels"], pod_labels));
  if (pdbs["kvroute"]["spec"]["maxUnavailable"]) {
    EXPECT_GE(pdbs["kvroute"]["spec"]["maxUnavailable"].as<int>(), 1) << "blocks every drain";
  }

  // cluster.store, read from the embedded config as YAML: redis://SERVICE.NAMESPACE.svc...:PORT.
  const YAML::Node cm = LoadAllYaml(kRoot / "deploy/k8s/configmap.yaml")[0];
  const YAML::Node cluster = YAML::Load(cm["data"]["kvroute.yaml"].as<std::string>())["cluster"];
  ASSERT_TRUE(cluster && cluster["store"]) << "the ConfigMap's config has no cluster.store";
  const std::string store = cluster["store"].as<std::string>();
  static const std::regex kStore(
      R"(redis://([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local:(\d+)(/\d+)?)");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(store, m, kStore)) << store;
  ASSERT_TRUE(services.count(m[1].str()))
      << "cluster.store names no Service in deploy/k8s: " << store;
  const YAML::Node redis_service = services[m[1].str()];
  EXPECT_EQ(redis_service["metadata"]["namespace"].as<std::string>(), m[2].str());
  bool port_found = false;
  for (const YAML::Node& p : redis_service["spec"]["ports"]) {
    port_found = port_found || p["port"].as<int>() == std::stoi(m[3].str());
  }
  EXPECT_TRUE(port_found) << store;

  // The Redis behind that Service: redis:7, no persistence, bounded.
  const YAML::Node* redis = nullptr;
  for (const auto& [name, d] : deployments) {
    if (Selects(redis_service["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])) {
      redis = &d;
    }
  }
  ASSERT_NE(redis, nullptr) << "no Deployment behind Service " << m[1].str();
  const YAML::Node c = (*redis)["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(c["image"].as<std::string>().rfind("redis:7", 0), 0u) << c["image"].as<std::string>();
  EXPECT_TRUE(c["resources"]["limits"]["memory"]) << "Redis without a memory limit";
  std::vector<std::string> args;
  for (const YAML::Node& a : c["args"]) args.push_back(a.as<std::string>());
  const auto after = [&](const std::string& flag) {
    const auto it = std::find(args.begin(), args.end(), flag);
    return it == args.end() || it + 1 == args.end() ? std::string("<absent>") : *(it + 1);
  };
  EXPECT_EQ(after("--save"), "") << "snapshots on";
  EXPECT_EQ(after("--appendonly"), "no");
}

TEST(DeployManifests, EveryKvrouteConfigLoads) {
  int loaded = 0;
  // configs/*.yaml (not configs/profiles/: those are simulator profiles).
  for (const auto& e : fs::directory_iterator(kRoot / "configs")) {
    if (!e.is_regular_file() || e.path().extension() != ".yaml") continue;
    SCOPED_TRACE(e.path().string());
    absl::StatusOr<proxy::Config> c = proxy::LoadConfigFile(e.path().string());
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_FALSE(c->backends.empty());
    ++loaded;
  }
  // Every ConfigMap under deploy/k8s with a kvroute.yaml key.
  for (const fs::path& f : FilesUnder(kRoot / "deploy" / "k8s", {".yaml", ".yml"})) {
    for (const YAML::Node& d : LoadAllYaml(f)) {
      if (d["kind"].as<std::string>() != "ConfigMap" || !d["data"]["kvroute.yaml"]) continue;
      SCOPED_TRACE(f.string());
      const std::string text = d["data"]["kvroute.yaml"].as<std::string>();
      absl::StatusOr<proxy::Config> c = proxy::ParseConfig(text, f.string() + ":kvroute.yaml");
      ASSERT_TRUE(c.ok()) << c.status().message();
      EXPECT_EQ(c->backends.size(), 8u);
      EXPECT_EQ(c->listen_host, "0.0.0.0") << "a pod must listen beyond loopback";
      ++loaded;
    }
  }
  EXPECT_GE(loaded, 2);
}

// The ConfigMap's backends are exactly the StatefulSet's pods, through its headless Service.
TEST(DeployManifests, ConfigMapBackendsMatchStatefulSet) {
  const auto sts_docs = LoadAllYaml(kRoot / "deploy/k8s/vllm-statefulset.yaml");
  YAML::Node sts;
  for (const auto& d : sts_docs) {
    if (d["kind"].as<std::string>() == "StatefulSet") sts = d;
  }
  ASSERT_TRUE(sts);
  const std::string name = sts["metadata"]["name"].as<std::string>();
  const std::string ns = sts["metadata"]["namespace"].as<std::string>();
  const std::string service = sts["spec"]["serviceName"].as<std::string>();
  const int replicas = sts["spec"]["replicas"].as<int>();
  const YAML::Node cm = LoadAllYaml(kRoot / "deploy/k8s/configmap.yaml")[0];
  absl::StatusOr<proxy::Config> c = proxy::ParseConfig(cm["data"]["kvroute.yaml"].as<std::string>(), "cm");
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(static_cast<int>(c->backends.size()), replicas);
  for (int i = 0; i < replicas; ++i) {
    EXPECT_EQ(c->backends[i].spec.host,
              name + "-" + std::to_string(i) + "." + service + "." + ns + ".svc.cluster.local");
  }
}

// Metric families kvroute exports (proxy/server.cc), plus the engines' vllm:* names.
const std::set<std::string>& KvrouteFamilies() {
  static const std::set<std::string> kFamilies = {
      "kvroute_requests_total", "kvroute_time_to_first_byte_seconds",
      "kvroute_request_duration_seconds", "kvroute_time_per_output_token_seconds",
      "kvroute_upstream_errors_total", "kvroute_client_disconnects_total",
      "kvroute_stream_errors_total", "kvroute_decisions_total", "kvroute_decision_seconds",
      "kvroute_affinity_total", "kvroute_cached_tokens_estimated_total",
      "kvroute_cached_tokens_actual_total", "kvroute_cache_estimate_error_ratio",
      "kvroute_client_connections", "kvroute_requests_inflight",
      "kvroute_backend_health_transitions_total", "kvroute_offloads_total",
      "kvroute_transfer_seconds", "kvroute_prefill_leg_seconds", "kvroute_backend_healthy",
      "kvroute_backend_inflight_requests", "kvroute_backend_inflight_prefill_tokens",
      "kvroute_backend_decoding_requests", "kvroute_backend_shadow_tokens",
      "kvroute_backend_kv_usage", "kvroute_residency_wait_seconds", "kvroute_shed_total",
      "kvroute_shed_averted_total", "kvroute_kept_home_total", "kvroute_busy_timeouts_total",
      // Live sizing (proxy/proxy_metrics.cc RegisterKvSizingGauges).
      "kvroute_kv_working_set_tokens", "kvroute_kv_capacity_tokens",
      "kvroute_kv_instance_capacity_tokens", "kvroute_kv_instances",
      "kvroute_kv_write_rate_tokens_per_second", "kvroute_kv_retention_seconds",
      "kvroute_kv_reuse_gap_seconds", "kvroute_kv_bytes_per_token",
      "kvroute_residency_room_tier", "kvroute_long_pause_ratio",
      // Several replicas (proxy/cluster_sync.cc; only with cluster.store set).
      "kvroute_cluster_store_up", "kvroute_cluster_live_replicas", "kvroute_cluster_syncs_total",
      "kvroute_cluster_sync_failures_total", "kvroute_cluster_writes_dropped_total",
      "kvroute_cluster_peer_inflight_requests", "kvroute_cluster_peer_shadow_pins",
      "kvroute_cluster_reservations_total", "kvroute_cluster_reservations_evicted_total",
      "kvroute_cluster_admitted_over_fill_total"};
  return kFamilies;
}

// kvroute_* names in a PromQL text, with histogram suffixes stripped.
std::set<std::string> KvrouteNamesIn(const std::string& text) {
  static const std::regex kName("kvroute_[a-z_]+");
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kName); it != std::sregex_iterator();
       ++it) {
    std::string n = it->str();
    for (const char* suffix : {"_bucket", "_count", "_sum"}) {
      const std::string s = suffix;
      if (n.size() > s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0 &&
          !KvrouteFamilies().count(n)) {
        n.resize(n.size() - s.size());
      }
    }
    out.insert(n);
  }
  return out;
}

TEST(DeployDashboards, GrafanaDashboardUsesRealMetricNames) {
  const boost::json::value dash = boost::json::parse(ReadFile(kRoot / "deploy/grafana/kvroute.json"));
  const boost::json::array& panels = dash.at("panels").as_array();
  ASSERT_GE(panels.size(), 10u);
  std::set<std::string> used;
  int queries = 0;
  for (const auto& p : panels) {
    if (p.at("type").as_string() == "row") continue;
    const auto& targets = p.at("targets").as_array();
    EXPECT_FALSE(targets.empty()) << p.at("title").as_string();
    for (const auto& t : targets) {
      const std::string expr(t.at("expr").as_string());
      ++queries;
      for (const std::string& n : KvrouteNamesIn(expr)) used.insert(n);
    }
  }
  EXPECT_GE(queries, 20);
  for (const std::string& n : used) EXPECT_TRUE(KvrouteFamilies().count(n)) << "unknown metric " << n;
  // What the issue asks the dashboard to show.
  for (const char* want :
       {"kvroute_time_to_first_byte_seconds", "kvroute_time_per_output_token_seconds",
        "kvroute_backend_inflight_prefill_tokens", "kvroute_backend_kv_usage",
        "kvroute_cached_tokens_estimated_total", "kvroute_cached_tokens_actual_total",
        "kvroute_offloads_total", "kvroute_transfer_seconds", "kvroute_kv_working_set_tokens",
        "kvroute_kv_retention_seconds", "kvroute_cluster_store_up", "kvroute_cluster_live_replicas",
        "kvroute_cluster_sync_failures_total", "kvroute_cluster_peer_inflight_requests",
        "kvroute_cluster_reservations_total"}) {
    EXPECT_TRUE(used.count(want)) << "dashboard lacks " << want;
  }
}

TEST(DeployDashboards, AlertRulesUseRealMetricNames) {
  const YAML::Node rules = YAML::LoadFile((kRoot / "deploy/prometheus/kvroute-alerts.yml").string());
  std::set<std::string> alerts;
  for (const YAML::Node& g : rules["groups"]) {
    for (const YAML::Node& r : g["rules"]) {
      const std::string expr = r["expr"].as<std::string>();
      for (const std::string& n : KvrouteNamesIn(expr)) {
        EXPECT_TRUE(KvrouteFamilies().count(n)) << "unknown metric " << n << " in " << expr;
      }
      if (r["alert"]) alerts.insert(r["alert"].as<std::string>());
    }
  }
  for (const char* want : {"KvrouteNoHealthyBackend", "KvrouteCacheEstimateDrift", "KvrouteOffloadFailures",
                           "KvrouteKvThrashAhead", "KvrouteClusterStoreDown"}) {
    EXPECT_TRUE(alerts.count(want)) << want;
  }
}

}  // namespace
}  // namespace kvroute
