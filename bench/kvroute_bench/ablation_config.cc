// The ablation's configurations (ablation.h): the modes crossed with the heavy thresholds,
// the variants, and the kvroute config the bench writes for each.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "bench/kvroute_bench/ablation.h"
#include "cluster/options.h"
#include "proxy/config.h"
#include "router/policy_registry.h"
#include "router/router.h"
#include "yaml-cpp/yaml.h"

namespace kvroute::bench {
namespace {

// The policy table says which modes the heavy threshold steers; `oracle` and unknown names
// are not crossed.
bool ThresholdSensitive(const std::string& mode) {
  const router::PolicyEntry* e = router::FindPolicy(mode);
  return e != nullptr && e->threshold_sensitive;
}

std::string ThresholdLabel(int64_t t) {
  if (t % 1000 == 0) return absl::StrCat(t / 1000, "k");
  return absl::StrCat(t);
}

}  // namespace

std::vector<AblationConfig> AblationConfigs(const std::vector<std::string>& modes,
                                            const std::vector<int64_t>& thresholds,
                                            int64_t default_threshold) {
  std::vector<AblationConfig> out;
  for (const std::string& mode : modes) {
    if (ThresholdSensitive(mode) && !thresholds.empty()) {
      for (int64_t t : thresholds) {
        AblationConfig& c = out.emplace_back();
        c.name = absl::StrCat(mode, "-T", ThresholdLabel(t));
        c.mode = mode;
        c.heavy_threshold = t;
      }
    } else {
      AblationConfig& c = out.emplace_back();
      c.name = mode;
      c.mode = mode;
      c.heavy_threshold = default_threshold;
    }
  }
  return out;
}

absl::StatusOr<ConfigVariant> ParseConfigVariant(const std::string& spec) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("--variant '", spec, "': ", why));
  };
  const std::vector<std::string> parts = absl::StrSplit(spec, ';');
  const size_t eq = parts.front().find('=');
  if (eq == std::string::npos) return bad("expected NAME=MODE;SETTING;...");
  ConfigVariant v;
  v.name = std::string(absl::StripAsciiWhitespace(parts.front().substr(0, eq)));
  v.mode = std::string(absl::StripAsciiWhitespace(parts.front().substr(eq + 1)));
  // The name becomes the run's directory and its label in every report.
  const bool plain_name = !v.name.empty() && std::all_of(v.name.begin(), v.name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
  if (!plain_name || v.name == "." || v.name == "..") {
    return bad("the name must be letters, digits, '_', '-' or '.'");
  }
  if (router::FindPolicy(v.mode) == nullptr) {
    return bad(absl::StrCat("no kvroute mode '", v.mode, "' (",
                            absl::StrJoin(router::PolicyNames(), ", "), ")"));
  }
  std::vector<std::string> router_settings;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string setting(absl::StripAsciiWhitespace(parts[i]));
    if (setting.empty()) continue;
    if (!absl::StartsWith(setting, "fleet.")) {
      router_settings.push_back(setting);
      continue;
    }
    const size_t at = setting.find('=');
    double gib = 0;
    if (setting.substr(0, at) != "fleet.kv_offloading_size") {
      return bad(absl::StrCat("'", setting,
                              "': the fleet setting a variant takes is "
                              "fleet.kv_offloading_size=GIB"));
    }
    if (at == std::string::npos || !absl::SimpleAtod(setting.substr(at + 1), &gib) ||
        !std::isfinite(gib) || gib < 0) {
      return bad(absl::StrCat("'", setting, "': expected GiB per instance, a number >= 0"));
    }
    v.kv_offloading_size_gib = gib;
  }
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> keys =
      ParseRouterKeys(router_settings);
  if (!keys.ok()) return bad(keys.status().message());
  v.router_keys = *std::move(keys);
  return v;
}

std::string ConfigVariantDescription(const ConfigVariant& v) {
  std::string out = absl::StrCat(v.name, ": ", v.mode);
  for (const auto& [key, value] : v.router_keys)
    absl::StrAppend(&out, ", router ", key, "=", value);
  if (v.kv_offloading_size_gib == 0) absl::StrAppend(&out, ", no host KV tier");
  if (v.kv_offloading_size_gib > 0) {
    absl::StrAppend(
        &out, absl::StrFormat(", host KV tier %g GiB per instance", v.kv_offloading_size_gib));
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> RouterKeysFor(
    const AblationConfig& config,
    const std::vector<std::pair<std::string, std::string>>& ablation_keys) {
  std::vector<std::pair<std::string, std::string>> keys;
  for (const auto& kv : ablation_keys) {
    if (std::none_of(config.router_keys.begin(), config.router_keys.end(),
                     [&](const auto& own) { return own.first == kv.first; })) {
      keys.push_back(kv);
    }
  }
  keys.insert(keys.end(), config.router_keys.begin(), config.router_keys.end());
  return keys;
}

absl::StatusOr<std::vector<AblationConfig>> AblationConfigsOf(const AblationOptions& options) {
  std::vector<AblationConfig> configs =
      AblationConfigs(options.modes, options.thresholds, options.default_threshold);
  if (!options.variants.empty() && !options.targets.empty()) {
    return absl::InvalidArgumentError(
        "--variant writes the configs and fleets the bench starts; with --targets, run each "
        "variant as a target of its own");
  }
  for (const ConfigVariant& v : options.variants) {
    for (const AblationConfig& c : configs) {
      if (c.name == v.name) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--variant ", v.name, ": another configuration has that name; name it apart"));
      }
    }
    AblationConfig c;
    c.name = v.name;
    c.mode = v.mode;
    c.heavy_threshold = options.default_threshold;
    c.router_keys = v.router_keys;
    c.kv_offloading_size_gib = v.kv_offloading_size_gib;
    configs.push_back(std::move(c));
  }
  return configs;
}

std::string KvrouteConfigYaml(const AblationConfig& config,
                              const std::vector<FleetBackend>& backends, double time_scale,
                              const SloTargets& slo,
                              const std::vector<std::pair<std::string, std::string>>& router_keys) {
  // kvroute runs on the wall clock: a window of modelled time is scaled, the
  // profile's costs by profile_time_scale, and the SLOs the placement cost
  // weighs (the ones the report judges by) likewise.
  const router::Options defaults;
  std::string y = absl::StrCat(
      "# written by kvroute-bench for configuration ", config.name,
      "\nlisten: 127.0.0.1:0\nmode: ", config.mode, "\nheavy_threshold: ", config.heavy_threshold,
      "\nprofile_time_scale: ", time_scale, "\nrouter:\n  session_resident_window_s: ",
      absl::ToDoubleSeconds(defaults.session_resident_window) * time_scale,
      "\n  slo: {ttft_warm_s: ", slo.ttft_warm_s * time_scale,
      ", ttft_medium_s: ", slo.ttft_medium_s * time_scale,
      ", ttft_heavy_s: ", slo.ttft_heavy_s * time_scale, ", tpot_s: ", slo.tpot_s * time_scale,
      "}\n");
  // The residency gate's times and the waits a shed request is advised (its Retry-After) are
  // the bench's scaled defaults, under whatever the caller sets of those sections: a client
  // that comes back a whole wall second later would be ten modelled seconds late at a tenth
  // of real time.
  std::vector<std::pair<std::string, YAML::Node>> sections;
  auto section = [&sections](const std::string& name) -> YAML::Node& {
    for (auto& [n, node] : sections) {
      if (n == name) return node;
    }
    return sections.emplace_back(name, YAML::Node(YAML::NodeType::Map)).second;
  };
  YAML::Node& residency = section("residency");
  residency["grace_s"] = absl::StrCat(absl::ToDoubleSeconds(defaults.residency.grace) * time_scale);
  residency["max_wait_s"] =
      absl::StrCat(absl::ToDoubleSeconds(defaults.residency.max_wait) * time_scale);
  residency["auto_long_pause_s"] =
      absl::StrCat(defaults.host_tier.gate_room.long_pause_s * time_scale);
  YAML::Node& shed = section("shed");
  shed["min_retry_after_s"] = absl::StrCat(defaults.shed.min_retry_after_s * time_scale);
  shed["max_retry_after_s"] = absl::StrCat(defaults.shed.max_retry_after_s * time_scale);
  std::string plain_keys;
  for (const auto& [key, value] : router_keys) {
    const size_t dot = key.find('.');
    const std::string name = key.substr(0, dot);
    const YAML::Node given = YAML::Load(value);  // ParseRouterKeys has parsed it once
    if (dot != std::string::npos) {
      YAML::Node& s = section(name);
      if (!s.IsMap()) s = YAML::Node(YAML::NodeType::Map);
      s[key.substr(dot + 1)] = given;
    } else if (name == "residency" || name == "shed" || given.IsMap()) {
      YAML::Node& s = section(name);
      if (!given.IsMap() || !s.IsMap()) {
        s = given;
        continue;
      }
      for (const auto& kv : given) s[kv.first.Scalar()] = kv.second;
    } else {
      absl::StrAppend(&plain_keys, "  ", key, ": ", value, "\n");
    }
  }
  for (const auto& [name, node] : sections) {
    YAML::Emitter out;
    out << YAML::Flow << node;
    absl::StrAppend(&y, "  ", name, ": ", out.c_str(), "\n");
  }
  y += plain_keys;
  // The waits that judge an engine (a first token, a silent stream, a hung
  // engine) are modelled time too: a fleet running ten times faster has a
  // tenth of the real one's queue times.
  const proxy::UpstreamOptions upstream;
  const proxy::MonitorOptions monitor;
  absl::StrAppend(
      &y, "upstream: {idle_timeout_s: ", absl::ToDoubleSeconds(upstream.idle_timeout) * time_scale,
      ", first_token_timeout_s: ", absl::ToDoubleSeconds(upstream.first_token_timeout) * time_scale,
      ", first_token_timeout_max_s: ",
      absl::ToDoubleSeconds(upstream.first_token_timeout_max) * time_scale,
      "}\nhealth: {hung_after_s: ", absl::ToDoubleSeconds(monitor.hung_after) * time_scale, "}\n");
  absl::StrAppend(&y, "backends:\n");
  for (const FleetBackend& b : backends) {
    absl::StrAppend(&y, "  - {name: ", b.name, ", url: ", b.url);
    if (!b.kv_events.empty()) absl::StrAppend(&y, ", kv_events: \"", b.kv_events, "\"");
    if (!b.kv_events_replay.empty()) {
      absl::StrAppend(&y, ", kv_events_replay: \"", b.kv_events_replay, "\"");
    }
    if (b.priority_scheduling) absl::StrAppend(&y, ", scheduling_policy: priority");
    absl::StrAppend(&y, "}\n");
  }
  if (!config.profile.empty()) absl::StrAppend(&y, "profile: ", config.profile, "\n");
  if (!config.kv_pool_events.empty()) {
    absl::StrAppend(&y, "kv_events: {pool: \"", config.kv_pool_events, "\"");
    if (!config.kv_pool_events_replay.empty()) {
      absl::StrAppend(&y, ", pool_replay: \"", config.kv_pool_events_replay, "\"");
    }
    absl::StrAppend(&y, "}\n");
  }
  // Every replica reads this one file: each names itself (hostname, pid, start time). The
  // replicas' view of each other is as old in modelled time as a real fleet's: the sync interval
  // is scaled too, down to 10 ms of wall time.
  if (!config.cluster_store.empty()) {
    const double sync_s = std::max(0.01, cluster::ClusterOptions().sync_interval_s * time_scale);
    absl::StrAppend(&y, "cluster: {store: \"", config.cluster_store,
                    "\", sync_interval_s: ", sync_s, "}\n");
  }
  return y;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseRouterKeys(
    const std::vector<std::string>& settings) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& setting : settings) {
    const size_t eq = setting.find('=');
    const std::string key(absl::StripAsciiWhitespace(setting.substr(0, eq)));
    const std::string value = eq == std::string::npos
                                  ? ""
                                  : std::string(absl::StripAsciiWhitespace(setting.substr(eq + 1)));
    // A router key, or one key of a router section (residency.max_wait_s).
    const std::vector<std::string> parts = absl::StrSplit(key, '.');
    const bool plain_key =
        parts.size() <= 2 && std::all_of(parts.begin(), parts.end(), [](const std::string& p) {
          return !p.empty() && std::all_of(p.begin(), p.end(), [](char c) {
            return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
          });
        });
    if (!plain_key || value.empty() || value.find_first_of("\n\r#") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--router '", setting,
          "': expected KEY=VALUE or SECTION.KEY=VALUE with plain router keys and a one-line "
          "value"));
    }
    if (parts.front() == "session_resident_window_s" || parts.front() == "slo") {
      return absl::InvalidArgumentError(
          absl::StrCat("--router ", key,
                       ": the bench writes this key itself, scaled to the fleet's time scale"));
    }
    try {
      YAML::Load(value);
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("--router '", setting, "': the value is not YAML: ", e.what()));
    }
    out.emplace_back(key, value);
  }
  return out;
}

}  // namespace kvroute::bench
