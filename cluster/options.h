// cluster::ClusterOptions: how one kvroute replica shares the state the
// engines' KV events do not carry with its peers (cluster/store.h), and the
// store URL's parser. A plain struct the config loader fills (`cluster:`,
// docs/configuration.md); this header does no I/O.
//
//   cluster::ClusterOptions o;
//   o.store = "redis://10.0.0.7:6379/0";
//   o.replica_id = "kvroute-a";
//   absl::StatusOr<cluster::StoreAddress> a = cluster::ParseStoreUrl(o.store);
//   if (!a.ok()) ...   // InvalidArgument naming `cluster.store`
//
// Thread-safety: plain values; ParseStoreUrl is a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvroute::cluster {

struct ClusterOptions {
  // "redis://HOST:PORT[/DB]", or "none": the replica shares nothing.
  std::string store = "none";
  // This replica's name in the store; unique among live replicas. The config
  // loader defaults it to "<hostname>-<pid>-<start>".
  std::string replica_id;
  // A replica's keys live this long after its last renewal (every lease/3):
  // a dead replica's load, rates and reservations vanish by themselves.
  double lease_s = 5;
  // Period of the pull that rebuilds the PeerView, and of the write flush.
  double sync_interval_s = 0.1;
  // Bound on each store command (connect, send, reply), Reserve's included.
  double op_timeout_s = 0.05;
  // Lifetime of a session's home in the store after its last write.
  double session_ttl_s = 600;
  // Writes (session homes, releases, load and rate entries) queued while a
  // flush is pending or the store is unreachable; beyond it a new entry is
  // dropped and counted (ClusterStoreStats::writes_dropped).
  size_t max_pending_writes = 10000;
  // Every key starts with "<key_prefix>:" so several fleets can share a store.
  std::string key_prefix = "kvroute";
  // Live replicas a pull reads; more are ignored (and logged once).
  size_t max_replicas = 64;
  // Connections Reserve and ReadHomes run on, each used by one caller at a
  // time; a caller that finds all busy waits for one up to op_timeout_s.
  size_t max_admission_connections = 8;
  // The I/O thread's own timer: tests turn it off and drive each cycle with
  // RedisStore::SyncNow(), so nothing happens between their steps.
  bool periodic = true;
};

// A parsed `cluster.store`.
struct StoreAddress {
  bool none = true;  // "none": no store
  std::string host;
  uint16_t port = 6379;
  int db = 0;
};

// "none" or "redis://HOST[:PORT][/DB]" (PORT 6379 by default, DB 0).
// InvalidArgument "cluster.store: ..." quoting the value otherwise.
absl::StatusOr<StoreAddress> ParseStoreUrl(absl::string_view url);

// Checks the options' ranges and the store URL; InvalidArgument naming the
// offending `cluster.*` key.
absl::Status ValidateClusterOptions(const ClusterOptions& o);

}  // namespace kvroute::cluster
