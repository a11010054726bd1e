#include "cluster/options.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kvroute::cluster {
namespace {

absl::Status StoreError(absl::string_view url, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "cluster.store: expected \"none\" or redis://HOST[:PORT][/DB], got '", url, "' (", why, ")"));
}

}  // namespace

absl::StatusOr<StoreAddress> ParseStoreUrl(absl::string_view url) {
  StoreAddress a;
  if (url == "none") return a;
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "redis://")) return StoreError(url, "not a redis:// URL");
  a.none = false;
  if (rest.find('@') != absl::string_view::npos || rest.find('?') != absl::string_view::npos) {
    return StoreError(url, "credentials and options are not supported");
  }
  if (const size_t slash = rest.find('/'); slash != absl::string_view::npos) {
    const absl::string_view db = rest.substr(slash + 1);
    if (!db.empty() && (!absl::SimpleAtoi(db, &a.db) || a.db < 0 || a.db > 65535)) {
      return StoreError(url, "bad database number");
    }
    rest = rest.substr(0, slash);
  }
  absl::string_view host = rest;
  if (const size_t colon = rest.rfind(':');
      colon != absl::string_view::npos && rest.back() != ']') {
    host = rest.substr(0, colon);
    int port = 0;
    if (!absl::SimpleAtoi(rest.substr(colon + 1), &port) || port < 1 || port > 65535) {
      return StoreError(url, "bad port");
    }
    a.port = static_cast<uint16_t>(port);
  }
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) return StoreError(url, "no host");
  a.host = std::string(host);
  return a;
}

absl::Status ValidateClusterOptions(const ClusterOptions& o) {
  if (absl::StatusOr<StoreAddress> a = ParseStoreUrl(o.store); !a.ok()) return a.status();
  auto positive = [](const char* key, double v) {
    return v > 0 ? absl::OkStatus()
                 : absl::InvalidArgumentError(
                       absl::StrCat("cluster.", key, ": expected a positive number, got ", v));
  };
  for (const auto& [key, v] : {std::pair{"lease_s", o.lease_s},
                               {"sync_interval_s", o.sync_interval_s},
                               {"op_timeout_s", o.op_timeout_s},
                               {"session_ttl_s", o.session_ttl_s}}) {
    if (absl::Status st = positive(key, v); !st.ok()) return st;
  }
  // A lease renewed every lease/3 must outlast the commands of a renewal.
  if (o.lease_s < 3 * o.op_timeout_s) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster.lease_s: must be at least 3 x cluster.op_timeout_s (",
                     3 * o.op_timeout_s, "), got ", o.lease_s));
  }
  if (o.store != "none" && o.replica_id.empty()) {
    return absl::InvalidArgumentError("cluster.replica_id: must not be empty");
  }
  if (o.replica_id.find_first_of(" \t\r\n") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster.replica_id: must not contain whitespace, got '", o.replica_id, "'"));
  }
  if (o.key_prefix.empty()) {
    return absl::InvalidArgumentError("cluster.key_prefix: must not be empty");
  }
  for (const auto& [key, v] : {std::pair{"max_pending_writes", o.max_pending_writes},
                               {"max_replicas", o.max_replicas},
                               {"max_admission_connections", o.max_admission_connections}}) {
    if (v < 1) {
      return absl::InvalidArgumentError(absl::StrCat("cluster.", key, ": must be at least 1"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvroute::cluster
